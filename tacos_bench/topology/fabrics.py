"""Switched fabrics and real-cluster-like topologies: switches as nodes (docs/fabrics.md).

Generators:

- :func:`switched`: ``n`` NPUs on one switch (one port per NPU);
- :func:`rail_cluster`: nodes of GPUs on an NVSwitch, GPU ``i`` of every node on rail leaf ``i`` through its own
  NIC, leaves on spines (one spine level), any oversubscription;
- :func:`dgx_a100`, :func:`dgx_h100`: :func:`rail_cluster` with DGX-A100-like / DGX-H100-like figures;
- :func:`ndv2`: Azure NDv2-like nodes (8 V100 on the DGX-1 hybrid cube-mesh) with one InfiniBand NIC per node;
- :func:`mi250x`: Frontier-like nodes (4 MI250X = 8 GCDs on Infinity Fabric), one NIC per MI250X;
- :func:`tpuv4`: a TPU-v4-like 3-D torus of ICI links (no switches);
- :func:`leaf_spine`: a two-level leaf-spine, optionally oversubscribed.

NPUs are ``0 .. N-1`` and switches ``N .. N+S-1`` (:class:`~tacos_bench.topology.model.Switch`); every link is
given in both directions with the same bandwidth (GiB/s, 2^30 bytes/s) and latency (µs). Published figures are
in GB/s (10^9 bytes/s) or Gb/s and are converted with :data:`GB_TO_GIB` (docs/fabric_clusters.md lists every
figure, its source and which latencies are assumptions). Each topology keeps its parameters in
``meta["fabric"]`` and the half-open id range of each switch tier in ``meta["fabric"]["switch_ranges"]``.

Examples
--------
>>> t = dgx_h100(4)
>>> t.num_npus, t.num_switches, t.num_links
(32, 16, 192)
>>> t.switch(t.num_npus).multicast       # the NVSwitch of node 0 (third generation: NVLS)
True
"""

from __future__ import annotations

import math

from typing import Sequence

import numpy as np

from ..errors import TopologyError
from .generators import _check_bw_lat, _check_positive_int, _check_size, grid
from .model import CUT_THROUGH, STORE_FORWARD, SWITCH_MODES, Switch, Topology

__all__ = ["GB_TO_GIB", "gbyte_to_gib", "gbit_to_gib", "switched", "rail_cluster", "default_spines", "dgx_a100",
           "dgx_h100", "ndv2", "mi250x", "tpuv4", "leaf_spine",
           "A100_NVLINK_GBPS", "H100_NVLINK_GBPS", "HDR_GBIT", "NDR_GBIT", "EDR_GBIT", "V100_NVLINK_GBPS",
           "PCIE3_X16_GBPS", "INFINITY_FABRIC_GBPS", "SLINGSHOT_GBIT", "TPUV4_ICI_GBPS",
           "NVSWITCH_HOP_US", "DIRECT_NVLINK_US", "NIC_HOP_US", "SPINE_HOP_US", "PCIE_HOP_US", "ICI_HOP_US",
           "DGX1_NVLINKS", "MI250X_GCD_LINKS", "MI250X_NIC_GCDS"]

GB_TO_GIB = 10**9 / 2**30      # GB/s -> GiB/s (exact in binary)


def gbyte_to_gib(gb_per_s: float) -> float:
    """GB/s (10^9 bytes/s) to GiB/s.

    >>> round(gbyte_to_gib(300.0), 3)
    279.397
    """
    return float(gb_per_s) * GB_TO_GIB


def gbit_to_gib(gbit_per_s: float) -> float:
    """Gb/s (10^9 bits/s) to GiB/s.

    >>> round(gbit_to_gib(400.0), 3)      # NDR InfiniBand: 50 GB/s
    46.566
    """
    return float(gbit_per_s) / 8.0 * GB_TO_GIB


# ---------------------------------------------------------------------------------------------- published figures
# Bandwidths are per direction (docs/fabric_clusters.md has the sources).
A100_NVLINK_GBPS = 300.0       # NVLink 3: 12 links x 25 GB/s per GPU per direction (600 GB/s both directions)
H100_NVLINK_GBPS = 450.0       # NVLink 4: 18 links x 25 GB/s per GPU per direction (900 GB/s both directions)
HDR_GBIT = 200.0               # HDR InfiniBand, ConnectX-6, per NIC (DGX A100: one per GPU)
NDR_GBIT = 400.0               # NDR InfiniBand, ConnectX-7, per NIC (DGX H100: one per GPU)
EDR_GBIT = 100.0               # EDR InfiniBand (Azure NDv2: one per node)
V100_NVLINK_GBPS = 25.0        # NVLink 2, per link per direction (DGX-1 / NDv2 hybrid cube-mesh)
PCIE3_X16_GBPS = 8.0 * 16 * 128 / 130 / 8   # PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b = 15.75 GB/s
INFINITY_FABRIC_GBPS = 50.0    # MI250X Infinity Fabric link, per direction (ROCm MI250 microarchitecture page)
SLINGSHOT_GBIT = 200.0         # HPE Slingshot-11 NIC (Frontier, LUMI: one per MI250X)
TPUV4_ICI_GBPS = 45.0          # TPU v4 ICI link, one direction (jax-ml scaling book; Google's 24 TB/s bisection)

# Latencies: NCCL's own per-hop figures (src/graph/tuning.cc, hwLat, LL protocol) where they exist, split evenly
# over the links of a path; the rest are assumptions (docs/fabric_clusters.md says which).
NVSWITCH_HOP_US = 0.3          # GPU <-> NVSwitch: NCCL's NVLink hop 0.6 µs = two links of 0.3
DIRECT_NVLINK_US = 0.6         # GPU <-> GPU direct NVLink / Infinity Fabric: NCCL's NVLink hop
NIC_HOP_US = 1.35              # GPU (NIC) <-> leaf switch: NCCL's network hop (ring LL) 2.7 µs = two links
SPINE_HOP_US = 0.5             # leaf <-> spine: assumption (one switch traversal plus cable)
PCIE_HOP_US = 0.5              # GPU <-> PCIe switch: NCCL's PCI hop 1.0 µs = two links
ICI_HOP_US = 1.0               # TPU ICI link: assumption

# DGX-1 / NDv2 hybrid cube-mesh: NVLink multiplicity of each GPU pair (symmetric), transcribed from
# microsoft/msccl-tools msccl/topologies/nvidia.py dgx1() (as experiments/convert_peer_topologies.py).
DGX1_NVLINKS = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)

# Frontier / LUMI-G node: (GCD a, GCD b, Infinity Fabric links). The two GCDs of an MI250X (2k, 2k+1) share 4
# in-package links (200 GB/s per direction); each GCD has two more neighbours on other MI250X, one over 2 links
# and one over 1 (50-100 GB/s). Which pairs are linked follows the Frontier node diagram; which of a GCD's two
# cross-package links is the double one is an assumption (docs/fabric_clusters.md).
MI250X_GCD_LINKS = (
    (0, 1, 4), (2, 3, 4), (4, 5, 4), (6, 7, 4),
    (0, 6, 2), (2, 4, 2), (1, 3, 2), (5, 7, 2),
    (0, 2, 1), (4, 6, 1), (3, 7, 1), (1, 5, 1),
)
MI250X_NIC_GCDS = (0, 2, 4, 6)   # the GCD of each MI250X its Slingshot NIC hangs off (assumption: the first)


# ---------------------------------------------------------------------------------------------- helpers
class _Fabric:
    """Accumulates switches and bidirectional links, then builds the :class:`Topology`."""

    def __init__(self, num_npus: int):
        self.n = num_npus
        self.switches: list[Switch] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self.bw: list[float] = []
        self.lat: list[float] = []

    def add_switches(self, count: int, sw: Switch) -> list[int]:
        first = self.n + len(self.switches)
        self.switches.extend([sw] * count)
        return list(range(first, first + count))

    def link(self, u: int, v: int, bw: float, lat: float) -> None:
        self.src += [u, v]
        self.dst += [v, u]
        self.bw += [float(bw)] * 2
        self.lat += [float(lat)] * 2

    def build(self, name: str, **meta) -> Topology:
        return Topology(self.n, np.asarray(self.src, np.int64), np.asarray(self.dst, np.int64),
                        np.asarray(self.bw, np.float64), np.asarray(self.lat, np.float64), name=name, meta=meta,
                        switches=tuple(self.switches))


def _mode(mode: str) -> str:
    if mode not in SWITCH_MODES:
        raise TopologyError(f"unknown switch mode {mode!r}; valid: {', '.join(SWITCH_MODES)}")
    return mode


def _ratio(what: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not np.isfinite(value) or value <= 0:
        raise TopologyError(f"{what} must be a finite number > 0 (2 means 2:1), got {value!r}")
    return float(value)


def _suffix(mode: str, multicast: bool, reduce: bool) -> str:
    s = "_sf" if mode == STORE_FORWARD else ""
    if multicast and reduce:
        return s + "_nvls"
    return s + ("_mc" if multicast else "") + ("_red" if reduce else "")


# ---------------------------------------------------------------------------------------------- one switch
def switched(n: int, bw_GiBps: float = 50.0, lat_us: float = 0.5, mode: str = CUT_THROUGH,
             multicast: bool = False, reduce: bool = False, name: str | None = None) -> Topology:
    """``n`` NPUs on one switch, the switch as a node (unlike the unwound
    :func:`~tacos_bench.topology.generators.switch`).

    Parameters
    ----------
    n : int
        Number of NPUs (>= 2); the switch is node ``n``.
    bw_GiBps, lat_us : float
        Every port: link NPU -> switch and switch -> NPU, each this bandwidth (GiB/s) and latency (µs).
    mode : {"cut_through", "store_forward"}
    multicast, reduce : bool
        The switch's flags (docs/fabrics.md).
    name : str, optional
        Default ``switched<n>`` with ``_sf`` for store-and-forward and ``_nvls`` for multicast + reduce
        (``_mc`` / ``_red`` for one of them).

    Returns
    -------
    Topology
        ``n`` NPUs, 1 switch, ``2n`` links.

    Examples
    --------
    >>> t = switched(8)
    >>> t.num_npus, t.num_switches, t.num_links, t.name
    (8, 1, 16, 'switched8')
    >>> switched(4, mode="store_forward", multicast=True, reduce=True).name
    'switched4_sf_nvls'
    """
    n = _check_positive_int("switched size", n, 2)
    _check_size(f"switched{n}", n, 2 * n)
    _check_bw_lat("switch port", bw_GiBps, lat_us)
    sw = Switch(_mode(mode), multicast=multicast, reduce=reduce)
    f = _Fabric(n)
    (s,) = f.add_switches(1, sw)
    for u in range(n):
        f.link(u, s, bw_GiBps, lat_us)
    fabric = {"npus": n, "switches": 1, "port_GiBps": float(bw_GiBps), "hop_lat_us": float(lat_us), "mode": sw.mode,
              "multicast": sw.multicast, "reduce": sw.reduce, "switch_ranges": {"switch": [n, n + 1]}}
    return f.build(name or f"switched{n}{_suffix(sw.mode, sw.multicast, sw.reduce)}", kind="switched",
                   fabric=fabric)


# ---------------------------------------------------------------------------------------------- rail clusters
def default_spines(down_ports: int, oversubscription: float = 1.0) -> int:
    """Spines at the port rate: ``ceil(down_ports / oversubscription)``, so each leaf <-> spine link carries one
    port's bandwidth.

    A link carries one transfer at a time (a cut-through transfer holds every link of its route at the route's
    slowest rate), so a bundle of cables between a leaf and a spine is modelled as more spines, never as one
    fatter link: a 4-port-wide link would carry one port's worth and hide the oversubscription.

    >>> [default_spines(k) for k in (2, 4, 16, 128)], default_spines(8, 2.0)
    ([2, 4, 16, 128], 4)
    """
    return max(1, int(math.ceil(int(down_ports) / float(oversubscription) - 1e-9)))


def rail_cluster(nodes: int, gpus_per_node: int = 8, nvlink_GiBps: float = gbyte_to_gib(H100_NVLINK_GBPS),
                 nvlink_lat_us: float = NVSWITCH_HOP_US, nic_GiBps: float = gbit_to_gib(NDR_GBIT),
                 nic_lat_us: float = NIC_HOP_US, spines: int | None = None, oversubscription: float = 1.0,
                 spine_lat_us: float = SPINE_HOP_US, nvswitch_multicast: bool = False, nvswitch_reduce: bool = False,
                 leaf_multicast: bool = False, leaf_reduce: bool = False, spine_multicast: bool = False,
                 spine_reduce: bool = False, name: str | None = None) -> Topology:
    """A rail-optimized GPU cluster: NVSwitch nodes, one rail leaf per GPU index, one spine level.

    GPU ``g`` of node ``k`` is NPU ``k * gpus_per_node + g``. Switch ids after the NPUs, in this order:

    * one NVSwitch per node (``cut_through``; the node's GPUs each on one port, link GPU <-> NVSwitch of
      ``nvlink_GiBps`` and ``nvlink_lat_us``), when ``gpus_per_node > 1``;
    * one leaf per rail ``g`` (``cut_through``), joining GPU ``g`` of every node through its own NIC (link
      GPU <-> leaf of ``nic_GiBps``, ``nic_lat_us``), when ``nodes > 1``;
    * ``spines`` spine switches (``cut_through``), every leaf linked to every spine with per-link bandwidth
      ``nodes * nic_GiBps / (oversubscription * spines)`` (the leaf's downlinks over the ratio, spread over the
      spines) and ``spine_lat_us``, when ``nodes > 1`` and ``spines > 0`` (``spines=0``: rail-only, rails meet
      only in the NVSwitches).

    Parameters
    ----------
    nodes : int
        Number of nodes (>= 1); ``nodes=1`` has no leaves and no spines.
    gpus_per_node : int
        GPUs (and rails) per node.
    nvlink_GiBps, nvlink_lat_us : float
        One GPU's NVLink port to its NVSwitch, per direction (default: DGX H100, 450 GB/s).
    nic_GiBps, nic_lat_us : float
        One GPU's NIC to its rail leaf, per direction (default: NDR, 400 Gb/s).
    spines : int, optional
        Spine switches (default :func:`default_spines`).
    oversubscription : float
        Leaf downlink over uplink bandwidth (1 = non-blocking, 2 = 2:1).
    spine_lat_us : float
        Latency of a leaf <-> spine link.
    nvswitch_multicast, nvswitch_reduce, leaf_multicast, leaf_reduce, spine_multicast, spine_reduce : bool
        The flags of each tier's switches.
    name : str, optional
        Default ``rail<nodes>x<gpus_per_node>``.

    Returns
    -------
    Topology
        ``meta["fabric"]`` has every parameter, ``spine_link_GiBps`` and the id range of each tier
        (``switch_ranges``: ``nvswitch``, ``leaf``, ``spine``, half-open).

    Examples
    --------
    >>> t = rail_cluster(4, 8, nvlink_GiBps=400.0, nic_GiBps=50.0, spines=2, oversubscription=2.0)
    >>> t.num_npus, t.num_switches, t.num_links
    (32, 14, 160)
    >>> leaf, spine = t.meta["fabric"]["switch_ranges"]["leaf"][0], t.meta["fabric"]["switch_ranges"]["spine"][0]
    >>> float(t.bw_GiBps[t.link_id(leaf, spine)])     # 4 NICs x 50 / (2:1 x 2 spines)
    50.0
    >>> rail_cluster(1, 8).num_switches                # one node: its NVSwitch only
    1
    """
    k = _check_positive_int("rail cluster nodes", nodes, 1)
    g = _check_positive_int("GPUs per node", gpus_per_node, 1)
    if k * g < 2:
        raise TopologyError("a rail cluster needs at least 2 GPUs (nodes x gpus_per_node)")
    ratio = _ratio("oversubscription", oversubscription)
    nsp = default_spines(k, ratio) if spines is None else _check_positive_int("spines", spines, 0)
    _check_bw_lat("NVLink", nvlink_GiBps, nvlink_lat_us)
    _check_bw_lat("NIC", nic_GiBps, nic_lat_us)
    _check_bw_lat("spine", 1.0, spine_lat_us)
    n = k * g
    multi = k > 1
    n_nvs = k if g > 1 else 0
    n_leaf = g if multi else 0
    n_spine = nsp if multi else 0
    _check_size(f"rail cluster {k}x{g}", n, 2 * (n * (int(g > 1) + int(multi)) + n_leaf * n_spine))
    f = _Fabric(n)
    nvs = f.add_switches(n_nvs, Switch(CUT_THROUGH, nvswitch_multicast, nvswitch_reduce))
    leaves = f.add_switches(n_leaf, Switch(CUT_THROUGH, leaf_multicast, leaf_reduce))
    spine_ids = f.add_switches(n_spine, Switch(CUT_THROUGH, spine_multicast, spine_reduce))
    for node in range(k):
        for gpu in range(g):
            u = node * g + gpu
            if nvs:
                f.link(u, nvs[node], nvlink_GiBps, nvlink_lat_us)
            if leaves:
                f.link(u, leaves[gpu], nic_GiBps, nic_lat_us)
    spine_bw = k * float(nic_GiBps) / (ratio * n_spine) if n_spine else None
    for leaf in leaves:
        for s in spine_ids:
            f.link(leaf, s, spine_bw, spine_lat_us)

    def rng(ids):
        return [ids[0], ids[-1] + 1] if ids else None

    fabric = {"nodes": k, "gpus_per_node": g, "nvlink_GiBps": float(nvlink_GiBps),
              "nvlink_lat_us": float(nvlink_lat_us), "nic_GiBps": float(nic_GiBps), "nic_lat_us": float(nic_lat_us),
              "spines": n_spine, "oversubscription": ratio, "spine_link_GiBps": spine_bw,
              "spine_lat_us": float(spine_lat_us),
              "flags": {"nvswitch": [bool(nvswitch_multicast), bool(nvswitch_reduce)],
                        "leaf": [bool(leaf_multicast), bool(leaf_reduce)],
                        "spine": [bool(spine_multicast), bool(spine_reduce)]},
              "switch_ranges": {"nvswitch": rng(nvs), "leaf": rng(leaves), "spine": rng(spine_ids)}}
    return f.build(name or f"rail{k}x{g}", kind="rail", fabric=fabric)


def dgx_a100(nodes: int = 1, spines: int | None = None, oversubscription: float = 1.0,
             name: str | None = None) -> Topology:
    """DGX-A100-like nodes on a rail-optimized HDR InfiniBand fabric (:func:`rail_cluster`).

    8 A100 per node on NVSwitch (second generation: no multicast or reduction in the switch), 300 GB/s NVLink 3
    per GPU per direction; one 200 Gb/s HDR NIC per GPU on its rail leaf.

    Examples
    --------
    >>> t = dgx_a100(4)
    >>> round(float(t.bw_GiBps[t.link_id(0, 32)]), 3), t.switch(32).multicast    # GPU 0 -> NVSwitch of node 0
    (279.397, False)
    """
    k = _check_positive_int("DGX A100 nodes", nodes, 1)
    t = rail_cluster(k, 8, nvlink_GiBps=gbyte_to_gib(A100_NVLINK_GBPS), nvlink_lat_us=NVSWITCH_HOP_US,
                     nic_GiBps=gbit_to_gib(HDR_GBIT), nic_lat_us=NIC_HOP_US, spines=spines,
                     oversubscription=oversubscription, name=name or f"dgx_a100x{k}")
    t.meta["fabric"]["preset"] = "dgx_a100"
    return t


def dgx_h100(nodes: int = 1, spines: int | None = None, oversubscription: float = 1.0, nvls: bool = True,
             name: str | None = None) -> Topology:
    """DGX-H100-like nodes on a rail-optimized NDR InfiniBand fabric (:func:`rail_cluster`).

    8 H100 per node on NVSwitch (third generation: NVLink SHARP, so ``multicast`` and ``reduce`` when ``nvls``),
    450 GB/s NVLink 4 per GPU per direction; one 400 Gb/s NDR NIC per GPU on its rail leaf.

    Examples
    --------
    >>> t = dgx_h100(128)
    >>> t.num_npus, t.num_switches, t.num_links
    (1024, 264, 6144)
    >>> sw = t.switch(1024)
    >>> sw.multicast, sw.reduce
    (True, True)
    """
    k = _check_positive_int("DGX H100 nodes", nodes, 1)
    ratio = _ratio("oversubscription", oversubscription)
    suffix = "" if ratio == 1 else f"_{ratio:g}to1"
    t = rail_cluster(k, 8, nvlink_GiBps=gbyte_to_gib(H100_NVLINK_GBPS), nvlink_lat_us=NVSWITCH_HOP_US,
                     nic_GiBps=gbit_to_gib(NDR_GBIT), nic_lat_us=NIC_HOP_US, spines=spines,
                     oversubscription=ratio, nvswitch_multicast=nvls, nvswitch_reduce=nvls,
                     name=name or f"dgx_h100x{k}{suffix}")
    t.meta["fabric"]["preset"] = "dgx_h100"
    return t


# ---------------------------------------------------------------------------------------------- point-to-point nodes
def ndv2(nodes: int = 2, name: str | None = None) -> Topology:
    """Azure-NDv2-like nodes: 8 V100 on the DGX-1 hybrid cube-mesh, one 100 Gb/s InfiniBand NIC per node.

    Inside a node, GPU pairs are linked directly by 1 or 2 NVLink 2 links (:data:`DGX1_NVLINKS`, 25 GB/s per
    link per direction, latency :data:`DIRECT_NVLINK_US`). With ``nodes > 1`` each node also has a host PCIe
    switch (``cut_through``; every GPU on it over PCIe 3.0 x16, 15.75 GB/s, :data:`PCIE_HOP_US`) that holds the
    node's NIC, linked to one InfiniBand switch (``cut_through``) at 100 Gb/s (:data:`NIC_HOP_US`). GPU ``g`` of
    node ``k`` is NPU ``8k + g``; switches: the hosts ``8K .. 9K-1``, then the InfiniBand switch.

    Examples
    --------
    >>> t = ndv2(2)
    >>> t.num_npus, t.num_switches, t.num_links
    (16, 3, 100)
    >>> round(float(t.bw_GiBps[t.link_id(0, 1)]), 3)       # 2 NVLinks: 50 GB/s
    46.566
    >>> ndv2(1).num_switches
    0
    """
    k = _check_positive_int("NDv2 nodes", nodes, 1)
    n = 8 * k
    f = _Fabric(n)
    hosts = f.add_switches(k if k > 1 else 0, Switch(CUT_THROUGH))
    ib = f.add_switches(1 if k > 1 else 0, Switch(CUT_THROUGH))
    for node in range(k):
        base = 8 * node
        for a in range(8):
            for b in range(a + 1, 8):
                if DGX1_NVLINKS[a][b]:
                    f.link(base + a, base + b, gbyte_to_gib(DGX1_NVLINKS[a][b] * V100_NVLINK_GBPS), DIRECT_NVLINK_US)
        if hosts:
            for a in range(8):
                f.link(base + a, hosts[node], gbyte_to_gib(PCIE3_X16_GBPS), PCIE_HOP_US)
            f.link(hosts[node], ib[0], gbit_to_gib(EDR_GBIT), NIC_HOP_US)
    fabric = {"nodes": k, "gpus_per_node": 8, "nvlink_GiBps_per_link": gbyte_to_gib(V100_NVLINK_GBPS),
              "pcie_GiBps": gbyte_to_gib(PCIE3_X16_GBPS), "nic_GiBps": gbit_to_gib(EDR_GBIT),
              "switch_ranges": {"host": [hosts[0], hosts[-1] + 1] if hosts else None,
                                "infiniband": [ib[0], ib[0] + 1] if ib else None}}
    return f.build(name or f"ndv2x{k}", kind="ndv2", fabric=fabric)


def mi250x(nodes: int = 1, name: str | None = None) -> Topology:
    """Frontier-like nodes: 4 MI250X = 8 GCDs on Infinity Fabric, one 200 Gb/s Slingshot NIC per MI250X.

    GCD ``g`` of node ``k`` is NPU ``8k + g``; GCD pairs are linked directly by 4 (same MI250X), 2 or 1 Infinity
    Fabric links (:data:`MI250X_GCD_LINKS`, 50 GB/s per link per direction, latency :data:`DIRECT_NVLINK_US`).
    With ``nodes > 1`` the NICs (on GCDs :data:`MI250X_NIC_GCDS`) join one network switch (``cut_through``, 25 GB/s,
    :data:`NIC_HOP_US`); one node has no switch.

    Examples
    --------
    >>> t = mi250x()
    >>> t.num_npus, t.num_switches, t.num_links, t.name
    (8, 0, 24, 'mi250x_node')
    >>> round(float(t.bw_GiBps[t.link_id(0, 1)]), 3)       # in-package: 4 links, 200 GB/s
    186.265
    >>> mi250x(2).num_switches
    1
    """
    k = _check_positive_int("MI250X nodes", nodes, 1)
    n = 8 * k
    f = _Fabric(n)
    net = f.add_switches(1 if k > 1 else 0, Switch(CUT_THROUGH))
    for node in range(k):
        base = 8 * node
        for a, b, links in MI250X_GCD_LINKS:
            f.link(base + a, base + b, gbyte_to_gib(links * INFINITY_FABRIC_GBPS), DIRECT_NVLINK_US)
        if net:
            for gcd in MI250X_NIC_GCDS:
                f.link(base + gcd, net[0], gbit_to_gib(SLINGSHOT_GBIT), NIC_HOP_US)
    fabric = {"nodes": k, "gcds_per_node": 8, "if_link_GiBps": gbyte_to_gib(INFINITY_FABRIC_GBPS),
              "nic_GiBps": gbit_to_gib(SLINGSHOT_GBIT), "nic_gcds": list(MI250X_NIC_GCDS),
              "switch_ranges": {"network": [net[0], net[0] + 1] if net else None}}
    return f.build(name or ("mi250x_node" if k == 1 else f"mi250x_x{k}"), kind="mi250x", fabric=fabric)


def tpuv4(dims: Sequence[int] = (4, 4, 4), name: str | None = None) -> Topology:
    """A TPU-v4-like slice: a 3-D torus of chips on ICI links (45 GB/s per link per direction), no switches.

    Examples
    --------
    >>> t = tpuv4()
    >>> t.num_npus, t.num_switches, t.num_links, t.name
    (64, 0, 384, 'tpuv4_4x4x4')
    """
    dims = [_check_positive_int("TPU v4 torus dimension", d) for d in dims]
    label = "x".join(map(str, dims))
    t = grid(dims, True, gbyte_to_gib(TPUV4_ICI_GBPS), ICI_HOP_US, name=name or f"tpuv4_{label}")
    t.meta["fabric"] = {"dims": dims, "ici_GiBps": gbyte_to_gib(TPUV4_ICI_GBPS), "ici_lat_us": ICI_HOP_US,
                        "switch_ranges": {}}
    return t


# ---------------------------------------------------------------------------------------------- leaf-spine
def leaf_spine(leaves: int = 4, npus_per_leaf: int = 8, spines: int | None = None, oversubscription: float = 2.0,
               bw_GiBps: float = 50.0, lat_us: float = 0.5, spine_lat_us: float | None = None,
               mode: str = CUT_THROUGH, leaf_multicast: bool = False, leaf_reduce: bool = False,
               spine_multicast: bool = False, spine_reduce: bool = False, name: str | None = None) -> Topology:
    """A two-level leaf-spine: ``npus_per_leaf`` NPUs on each leaf, every leaf on every spine.

    NPU ``i`` is on leaf ``i // npus_per_leaf``; switches: the leaves, then the spines. An NPU's link to its
    leaf has ``bw_GiBps``/``lat_us``; each leaf <-> spine link ``npus_per_leaf * bw_GiBps / (oversubscription *
    spines)`` and ``spine_lat_us`` (default ``lat_us``): a leaf's uplinks together carry its downlinks over the
    ratio.

    Examples
    --------
    >>> t = leaf_spine(4, 8, oversubscription=2.0)          # 8 ports over 2:1: 4 spines at the port rate
    >>> t.num_npus, t.num_switches, t.num_links, t.name
    (32, 8, 96, 'leafspine4x8_2to1')
    >>> float(t.bw_GiBps[t.link_id(32, 36)])                # 8 x 50 / (2 x 4)
    50.0
    """
    nl = _check_positive_int("leaves", leaves, 1)
    p = _check_positive_int("NPUs per leaf", npus_per_leaf, 1)
    ratio = _ratio("oversubscription", oversubscription)
    if spines is None:
        spines = default_spines(p, ratio) if nl > 1 else 0
    ns = _check_positive_int("spines", spines, 1 if nl > 1 else 0)
    slat = lat_us if spine_lat_us is None else spine_lat_us
    _check_bw_lat("leaf port", bw_GiBps, lat_us)
    _check_bw_lat("spine", 1.0, slat)
    n = nl * p
    if n < 2:
        raise TopologyError("a leaf-spine needs at least 2 NPUs")
    _check_size(f"leafspine{nl}x{p}", n, 2 * (n + nl * ns))
    f = _Fabric(n)
    leaf_ids = f.add_switches(nl, Switch(_mode(mode), leaf_multicast, leaf_reduce))
    spine_ids = f.add_switches(ns, Switch(mode, spine_multicast, spine_reduce))
    for u in range(n):
        f.link(u, leaf_ids[u // p], bw_GiBps, lat_us)
    up = p * float(bw_GiBps) / (ratio * ns) if ns else None
    for leaf in leaf_ids:
        for s in spine_ids:
            f.link(leaf, s, up, slat)
    suffix = "" if ratio == 1 else f"_{ratio:g}to1"
    fabric = {"leaves": nl, "npus_per_leaf": p, "spines": ns, "oversubscription": ratio,
              "port_GiBps": float(bw_GiBps), "lat_us": float(lat_us), "spine_link_GiBps": up,
              "spine_lat_us": float(slat), "mode": mode,
              "switch_ranges": {"leaf": [leaf_ids[0], leaf_ids[-1] + 1],
                                "spine": [spine_ids[0], spine_ids[-1] + 1] if spine_ids else None}}
    return f.build(name or f"leafspine{nl}x{p}{suffix}", kind="leafspine", fabric=fabric)
