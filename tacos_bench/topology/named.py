"""Topologies by name (``mesh4x4``, ``hetero512``, ...) and from a config mapping (``conf/topo/*.yaml``).

Names understood by :func:`named_topology` (homogeneous ones use ``bw`` GiB/s
and ``lat`` µs, default 50 and 0.5):

- ``ring<N>``: bidirectional ring; ``uniring<N>``: unidirectional ring ``i -> i+1``
- ``fc<N>``: fully connected
- ``switch<N>``: one switch, unwound (:func:`~tacos_bench.topology.generators.switch`)
- ``mesh<X>x<Y>[x<Z>...]`` / ``torus<X>x<Y>[x<Z>...]``: mesh / torus of any dimension (``mesh3x4x5``)
- ``bhypercube<N>`` (alias ``hypercube<N>``): binary hypercube, ``N`` a power of two
- ``dragonfly<G>x<R>``: ``G`` groups of ``R`` routers; local 50 GiB/s 0.5 µs, global 25 GiB/s 1 µs
- ``hetero<N>``: servers of 8 NPUs on a near-square 2-D torus of ``N/8`` servers
  (``hetero512`` = 8x8 servers x 8 NPUs); intra-server 150 GiB/s 0.25 µs, inter-server
  25 GiB/s 2 µs (:func:`~tacos_bench.topology.generators.hetero_cluster`)
- ``hetero<SX>x<SY>x<P>``: the same with an explicit ``SX x SY`` server torus of ``P`` NPUs each
- ``hetero_mesh<X>x<Y>``: 2-D mesh, X links 50 GiB/s, Y links 100 GiB/s, 0.5 µs
- ``three_tier<P>x<S>x<N>`` / ``three_tier_ring<P>x<S>x<N>``: ``P`` pods of ``S`` servers of ``N`` NPUs, rails
  inside pods (50 GiB/s 1 µs) and across pods, fully or on a ring (12.5 GiB/s 3 µs), servers 150 GiB/s 0.25 µs
  (:func:`~tacos_bench.topology.generators.three_tier`)
- ``unequal<A>-<B>-...``: servers of A, B, ... NPUs on a ring of servers, rails where they exist
  (:func:`~tacos_bench.topology.generators.unequal_servers`)
- ``random<N>d<D>s<SEED>``: a random asymmetric heterogeneous strongly connected graph of ``N`` NPUs with
  out-degree ``D``, links of 25/50/100 GiB/s and 0.5/1/2 µs drawn from ``SEED``
  (:func:`~tacos_bench.topology.generators.random_directed`)

Switched fabrics (switches as nodes, docs/fabrics.md; the real-cluster figures and their sources are in
docs/fabric_clusters.md; :mod:`~tacos_bench.topology.fabrics`):

- ``switched<N>`` / ``switched<N>_sf`` / ``switched<N>_nvls``: ``N`` NPUs on one switch node, one port of
  ``bw`` GiB/s and ``lat`` µs per NPU, the switch ``cut_through`` / ``store_forward`` / ``cut_through`` with
  multicast and reduce (:func:`~tacos_bench.topology.fabrics.switched`)
- ``dgx_a100x<K>``, ``dgx_h100x<K>`` (``_<R>to1``: leaf uplinks oversubscribed R:1): ``K`` DGX-like nodes of 8
  GPUs on an NVSwitch, rail-optimized InfiniBand leaves, spines at the port rate (``K / R``); the H100 NVSwitch multicasts
  and reduces (:func:`~tacos_bench.topology.fabrics.dgx_a100`, :func:`~tacos_bench.topology.fabrics.dgx_h100`)
- ``ndv2x<K>``: ``K`` Azure-NDv2-like nodes (8 V100, hybrid cube-mesh), one 100 Gb/s NIC per node on one switch
- ``mi250x_node`` / ``mi250x_x<K>``: Frontier-like nodes of 4 MI250X (8 GCDs, Infinity Fabric), one NIC per MI250X
- ``tpuv4_<X>x<Y>x<Z>``: a TPU-v4-like 3-D torus of ICI links (no switches)
- ``leafspine<L>x<P>[_<R>to1][_sharp]``: ``L`` leaves of ``P`` NPUs (``bw``, ``lat`` per port), ``P / R`` spines
  at the port rate (uplinks oversubscribed R:1); ``_sharp``: every switch multicasts and reduces (InfiniBand
  SHARP-like) (:func:`~tacos_bench.topology.fabrics.leaf_spine`)

``switch<N>`` keeps its meaning: one switch unwound into point-to-point links.

:func:`build_topology` takes the mapping of a ``conf/topo`` YAML file (keys
``name, kind, dims, bw_GiBps, lat_us, path, params, failed_npus, failed_links, subset,
subset_mode``), the Hydra ``topo`` group of ``run.py``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping

import numpy as np

from . import fabrics as fab
from . import generators as gen
from ..errors import ConfigError, TopologyError
from .io import load_topology
from .model import CUT_THROUGH, FABRIC, POINT_TO_POINT, STORE_FORWARD, SWITCH_MODES, Switch, Topology, fmt_ids
from .transforms import SUBSET_MODES, _as_ids, induced_subtopology, parse_links

__all__ = ["NAME_FORMS", "KINDS", "CONFIG_KEYS", "HETERO_NPUS_PER_SERVER", "RELAY", "TOPO_SUBSET_MODES",
           "RELAY_SWITCH", "named_topology", "build_topology", "regroup_npus"]

NAME_FORMS = ("ring<N>", "uniring<N>", "fc<N>", "switch<N>", "mesh<X>x<Y>[x<Z>...]", "torus<X>x<Y>[x<Z>...]",
              "bhypercube<N>", "hypercube<N>", "dragonfly<G>x<R>", "hetero<N>", "hetero<SX>x<SY>x<P>",
              "hetero_mesh<X>x<Y>", "three_tier<P>x<S>x<N>", "three_tier_ring<P>x<S>x<N>", "unequal<A>-<B>-...",
              "random<N>d<D>s<SEED>", "switched<N>", "switched<N>_sf", "switched<N>_nvls", "dgx_a100x<K>[_<R>to1]",
              "dgx_h100x<K>[_<R>to1]", "ndv2x<K>", "mi250x_node", "mi250x_x<K>", "tpuv4_<X>x<Y>x<Z>",
              "leafspine<L>x<P>[_<R>to1][_sharp]")

KINDS = ("ring", "uniring", "fc", "switch", "mesh", "torus", "hypercube", "dragonfly", "hetero", "switched", "rail",
         "named", "file")

# subset_mode: "induced" (the members and the links among them) or "relay" (every node kept; non-members relay)
RELAY = "relay"
TOPO_SUBSET_MODES = tuple(SUBSET_MODES) + (RELAY,)
# what a non-member NPU becomes under subset_mode=relay: it may hold and forward anything, and needs nothing
RELAY_SWITCH = Switch(STORE_FORWARD, multicast=True, reduce=True)

CONFIG_KEYS = ("name", "kind", "dims", "bw_GiBps", "lat_us", "path", "params", "failed_npus", "failed_links", "subset",
               "subset_mode")

HETERO_NPUS_PER_SERVER = 8

_DIMS = r"(\d+(?:x\d+)*)"


def _dims(s: str) -> list[int]:
    return [int(t) for t in s.split("x")]


def _near_square(servers: int) -> tuple[int, int]:
    """``(sx, sy)`` with ``sx * sy == servers``, ``sy <= sx`` and ``sy`` as large as possible."""
    sy = max(d for d in range(1, math.isqrt(servers) + 1) if servers % d == 0)
    return servers // sy, sy


_RATIO = r"(?:_(\d+(?:\.\d+)?)to1)?"


def _ratio(text: str | None) -> float:
    """The ``R`` of a name's ``_<R>to1`` suffix (1 when absent)."""
    return float(text) if text else 1.0


def _hetero_by_count(n: int) -> Topology:
    p = HETERO_NPUS_PER_SERVER
    if n % p or n < p:
        raise TopologyError(f"hetero<N> needs N to be a positive multiple of {p} NPUs per server, got {n}; "
                            "use hetero<SX>x<SY>x<P> for other shapes")
    sx, sy = _near_square(n // p)
    return gen.hetero_cluster(sx, sy, p)


# (regex, builder(match, bw, lat)); bw/lat apply to the homogeneous families only.
_NAMED: list[tuple[re.Pattern, Callable[..., Topology]]] = [
    (re.compile(r"ring(\d+)"), lambda m, bw, lat: gen.ring(int(m[1]), True, bw, lat)),
    (re.compile(r"uniring(\d+)"), lambda m, bw, lat: gen.ring(int(m[1]), False, bw, lat)),
    (re.compile(r"fc(\d+)"), lambda m, bw, lat: gen.fully_connected(int(m[1]), bw, lat)),
    (re.compile(r"switch(\d+)"), lambda m, bw, lat: gen.switch(int(m[1]), bw, lat)),
    (re.compile(r"mesh" + _DIMS), lambda m, bw, lat: gen.grid(_dims(m[1]), False, bw, lat)),
    (re.compile(r"torus" + _DIMS), lambda m, bw, lat: gen.grid(_dims(m[1]), True, bw, lat)),
    (re.compile(r"b?hypercube(\d+)"), lambda m, bw, lat: gen.hypercube(int(m[1]), bw, lat)),
    (re.compile(r"dragonfly(\d+)x(\d+)"), lambda m, bw, lat: gen.dragonfly(int(m[1]), int(m[2]))),
    (re.compile(r"hetero(\d+)x(\d+)x(\d+)"),
     lambda m, bw, lat: gen.hetero_cluster(int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(r"hetero(\d+)"), lambda m, bw, lat: _hetero_by_count(int(m[1]))),
    (re.compile(r"hetero_mesh(\d+)x(\d+)"), lambda m, bw, lat: gen.hetero_mesh2d(int(m[1]), int(m[2]))),
    (re.compile(r"three_tier(\d+)x(\d+)x(\d+)"),
     lambda m, bw, lat: gen.three_tier(int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(r"three_tier_ring(\d+)x(\d+)x(\d+)"),
     lambda m, bw, lat: gen.three_tier(int(m[1]), int(m[2]), int(m[3]), spine_links="ring")),
    (re.compile(r"random(\d+)d(\d+)s(\d+)"),
     lambda m, bw, lat: gen.random_directed(int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(r"unequal(\d+(?:-\d+)+)"), lambda m, bw, lat: gen.unequal_servers([int(x) for x in m[1].split("-")])),
    # switched fabrics (docs/fabric_clusters.md)
    (re.compile(r"switched(\d+)"), lambda m, bw, lat: fab.switched(int(m[1]), bw, lat)),
    (re.compile(r"switched(\d+)_sf"), lambda m, bw, lat: fab.switched(int(m[1]), bw, lat, STORE_FORWARD)),
    (re.compile(r"switched(\d+)_nvls"),
     lambda m, bw, lat: fab.switched(int(m[1]), bw, lat, CUT_THROUGH, multicast=True, reduce=True)),
    (re.compile(r"dgx_a100x(\d+)" + _RATIO),
     lambda m, bw, lat: fab.dgx_a100(int(m[1]), oversubscription=_ratio(m[2]))),
    (re.compile(r"dgx_h100x(\d+)" + _RATIO),
     lambda m, bw, lat: fab.dgx_h100(int(m[1]), oversubscription=_ratio(m[2]))),
    (re.compile(r"ndv2x(\d+)"), lambda m, bw, lat: fab.ndv2(int(m[1]))),
    (re.compile(r"mi250x_node"), lambda m, bw, lat: fab.mi250x(1)),
    (re.compile(r"mi250x_x(\d+)"), lambda m, bw, lat: fab.mi250x(int(m[1]))),
    (re.compile(r"tpuv4_" + _DIMS), lambda m, bw, lat: fab.tpuv4(_dims(m[1]))),
    (re.compile(r"leafspine(\d+)x(\d+)" + _RATIO + r"(_sharp)?"),
     lambda m, bw, lat: fab.leaf_spine(int(m[1]), int(m[2]), oversubscription=_ratio(m[3]), bw_GiBps=bw, lat_us=lat,
                                       **({k: True for k in ("leaf_multicast", "leaf_reduce", "spine_multicast",
                                                             "spine_reduce")} if m[4] else {}))),
]


def named_topology(name: str, *, bw: float = gen.DEFAULT_BW, lat: float = gen.DEFAULT_LAT) -> Topology:
    """Build a topology from its name (see the module docstring for the forms).

    The returned topology is named ``name`` (lower-cased), except that the
    alias ``hypercube<N>`` gives ``bhypercube<N>``.

    Raises
    ------
    TopologyError
        On an unknown name (the message lists the valid forms) or impossible
        sizes.

    Examples
    --------
    >>> named_topology("torus4x4").num_links
    64
    >>> named_topology("hetero512").num_links
    5632
    >>> named_topology("hypercube16").name
    'bhypercube16'
    """
    if not isinstance(name, str):
        raise TopologyError(f"topology name must be a string, got {name!r}")
    key = name.strip().lower()
    for pattern, build in _NAMED:
        m = pattern.fullmatch(key)
        if m:
            topo = build(m, bw, lat)
            return topo.with_name("b" + key if key.startswith("hypercube") else key)
    raise TopologyError(f"unknown topology name {name!r}; valid forms: {', '.join(NAME_FORMS)}")


# ---------------------------------------------------------------------------------------------- config
def _plain(cfg: Any) -> Any:
    """OmegaConf containers to plain Python; a missing mandatory value (``???``) becomes ConfigError."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        from omegaconf.errors import MissingMandatoryValue
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        return cfg
    if isinstance(cfg, (DictConfig, ListConfig)):
        if isinstance(cfg, DictConfig):
            hints = {"path": "FILE", "name": "torus4x4"}
            for key in cfg:
                if OmegaConf.is_missing(cfg, key):
                    raise ConfigError(f"topo.{key} is mandatory for this topology config: pass "
                                      f"topo.{key}={hints.get(str(key), '...')}")
        try:
            return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as e:
            raise ConfigError(f"missing mandatory topology setting: {e.full_key or e}") from None
    return cfg


def _num(cfg_key: str, v, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
            (v <= 0 if positive else v < 0):
        need = "> 0" if positive else ">= 0"
        raise ConfigError(f"topo.{cfg_key} must be a finite number {need}, got {v!r}")
    return float(v)


def _int_list(cfg_key: str, v) -> list[int]:
    if not isinstance(v, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise ConfigError(f"topo.{cfg_key} must be a list of integers, got {v!r}")
    return list(v)


def _take_params(kind: str, params: Mapping, allowed: Mapping[str, Any]) -> dict:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        valid = ", ".join(allowed) if allowed else "none"
        raise ConfigError(f"topo.params: unknown key(s) {', '.join(unknown)} for kind={kind}; valid: {valid}")
    return {k: params.get(k, default) for k, default in allowed.items()}


def _need_dims(kind: str, dims: list[int], count: int | None, shape: str) -> None:
    if (count is None and not dims) or (count is not None and len(dims) != count):
        raise ConfigError(f"topo.dims for kind={kind} must be {shape}, got {dims}")


def _flag(cfg_key: str, v) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"topo.params.{cfg_key} must be true or false, got {v!r}")
    return v


_RAIL_NUMBERS = {"nvlink_GiBps": (fab.gbyte_to_gib(fab.H100_NVLINK_GBPS), True),
                 "nvlink_lat_us": (fab.NVSWITCH_HOP_US, False), "nic_GiBps": (fab.gbit_to_gib(fab.NDR_GBIT), True),
                 "nic_lat_us": (fab.NIC_HOP_US, False), "oversubscription": (1.0, True),
                 "spine_lat_us": (fab.SPINE_HOP_US, False)}
_RAIL_FLAGS = tuple(f"{tier}_{f}" for tier in ("nvswitch", "leaf", "spine") for f in ("multicast", "reduce"))


def _rail_from_config(dims: list[int], params: Mapping) -> Topology:
    """``kind: rail``: dims ``[nodes]`` or ``[nodes, gpus_per_node]``, params as :func:`fabrics.rail_cluster`."""
    allowed = {k: v for k, (v, _) in _RAIL_NUMBERS.items()}
    allowed["spines"] = None
    allowed.update({f: False for f in _RAIL_FLAGS})
    p = _take_params("rail", params, allowed)
    if len(dims) not in (1, 2):
        raise ConfigError(f"topo.dims for kind=rail must be [nodes] or [nodes, gpus_per_node], got {dims}")
    nodes, gpus = dims[0], (dims[1] if len(dims) == 2 else 8)
    kw = {k: _num(f"params.{k}", p[k], positive) for k, (_, positive) in _RAIL_NUMBERS.items()}
    kw.update({f: _flag(f, p[f]) for f in _RAIL_FLAGS})
    spines = p["spines"]
    if spines is not None and (isinstance(spines, bool) or not isinstance(spines, int) or spines < 0):
        raise ConfigError(f"topo.params.spines must be an integer >= 0 (or null: spines at the port rate), got {spines!r}")
    return fab.rail_cluster(nodes, gpus, spines=spines, **kw)


_DROP, _MEMBER, _RELAY = 0, 1, 2


def regroup_npus(topo: Topology, roles, name: str, relay_switch: Switch = RELAY_SWITCH, **extra_meta) -> Topology:
    """Keep every node but give each NPU a role: a member NPU, a relay (a switch node) or dropped.

    ``roles[i]`` for NPU ``i``: 1 member, 2 relay, 0 dropped (a failed NPU; its links go). The result's NPUs
    are the members in id order (``0 .. M-1``), then come the relays in id order (switches ``relay_switch``),
    then ``topo``'s own switches in id order; a switch or relay left without links is dropped.
    ``meta["original_ids"]`` maps each new NPU to its id as built (composed with ``topo``'s), and
    ``meta["node_labels"]`` each new node to its label as built (``topo``'s labels where it has them for every
    node, else the id as built).

    Examples
    --------
    >>> r = regroup_npus(gen.ring(6), [1, 2, 0, 1, 2, 2], "r")   # NPU 2 failed, 1, 4, 5 relay
    >>> r.num_npus, r.num_switches, r.meta["original_ids"], r.meta["node_labels"]
    (2, 3, [0, 3], [0, 3, 1, 4, 5])
    >>> r.has_link(0, 4), r.has_link(2, 3)      # old 0 - 5 is a link, old 1 - 4 is not
    (True, False)
    """
    roles = np.asarray(roles, dtype=np.int64).ravel()
    n, nn = topo.num_npus, topo.num_nodes
    if roles.shape != (n,) or np.any((roles < _DROP) | (roles > _RELAY)):
        raise TopologyError(f"regroup_npus: need one role 0/1/2 per NPU ({n}), got {roles.tolist()}")
    members = np.flatnonzero(roles == _MEMBER)
    if members.size == 0:
        raise TopologyError(f"no NPU of topology {topo.name!r} would remain")
    src = topo.src.astype(np.int64)
    dst = topo.dst.astype(np.int64)
    alive = np.ones(nn, dtype=bool)
    alive[:n] = roles != _DROP
    lk = alive[src] & alive[dst]
    linked = np.zeros(nn, dtype=bool)
    linked[src[lk]] = True
    linked[dst[lk]] = True
    relays = np.flatnonzero((roles == _RELAY) & linked[:n])
    switches = n + np.flatnonzero(linked[n:])
    order = np.concatenate([members, relays, switches])
    new_id = np.full(nn, -1, dtype=np.int64)
    new_id[order] = np.arange(order.size)
    lk &= (new_id[src] >= 0) & (new_id[dst] >= 0)
    parent_orig = topo.meta.get("original_ids")
    as_built = np.arange(nn, dtype=np.int64)
    if parent_orig is not None and len(parent_orig) == n:
        as_built[:n] = np.asarray(parent_orig, dtype=np.int64)
    labels = topo.meta.get("node_labels")
    if labels is not None and len(labels) == nn:
        node_labels = [labels[i] for i in order.tolist()]
    else:
        node_labels = as_built[order].tolist()
    meta = {"kind": RELAY if relays.size or np.any(roles == _RELAY) else "induced", "parent": topo.name,
            "parent_kind": topo.meta.get("kind"), "original_ids": as_built[members].tolist(),
            "node_labels": node_labels, "relay_npus": as_built[relays].tolist(), **extra_meta}
    if "failed_links" in topo.meta:
        meta["failed_links"] = topo.meta["failed_links"]
    new_switches = [relay_switch] * relays.size + [topo.switches[i - n] for i in switches.tolist()]
    return Topology(int(members.size), new_id[src[lk]], new_id[dst[lk]], topo.bw_GiBps[lk], topo.lat_us[lk],
                    name=name, meta=meta, switches=tuple(new_switches))


def build_topology(cfg: Mapping) -> Topology:
    """Build the topology described by a ``conf/topo`` mapping.

    Keys (all but ``kind`` optional): ``name``, ``kind``, ``dims``,
    ``bw_GiBps``, ``lat_us``, ``path``, ``params``, ``failed_npus``,
    ``failed_links``, ``subset``, ``subset_mode``. By kind:

    ================  ====================================  ==============================================
    kind              dims                                  params (defaults)
    ================  ====================================  ==============================================
    ring, uniring,    ``[N]``                               none
    fc, switch,
    hypercube
    mesh, torus       ``[X, Y, ...]``                       ``bw_per_dim``, ``lat_per_dim`` (lists, one
                                                            value per dimension; default bw_GiBps/lat_us)
    dragonfly         ``[groups, routers_per_group]``       ``intra_bw``, ``intra_lat``, ``inter_bw``,
                                                            ``inter_lat`` (default bw_GiBps/lat_us)
    hetero            ``[servers_x, servers_y, npus]``      ``intra_bw``, ``intra_lat``, ``inter_bw``,
                                                            ``inter_lat`` (default bw_GiBps/lat_us)
    switched          ``[N]``                               ``mode`` (``cut_through``), ``multicast``,
                                                            ``reduce`` (false); one switch node, ports of
                                                            bw_GiBps/lat_us
    rail              ``[nodes]`` or                        ``nvlink_GiBps``, ``nvlink_lat_us``,
                      ``[nodes, gpus_per_node]`` (8)        ``nic_GiBps``, ``nic_lat_us``, ``spines``,
                                                            ``oversubscription`` (1), ``spine_lat_us``,
                                                            ``{nvswitch,leaf,spine}_{multicast,reduce}``
                                                            (defaults: DGX H100 figures, no flags; see
                                                            :func:`~tacos_bench.topology.fabrics.rail_cluster`;
                                                            bw_GiBps/lat_us are not used)
    named             ``[]`` (``name`` is parsed)           none; bw_GiBps/lat_us apply to homogeneous
                                                            names
    file              ``[]`` (``path`` is read)             none; bw/lat come from the file
    ================  ====================================  ==============================================

    Then the directed links in ``failed_links`` (``[[u, v], ...]``; ``[u, v, "both"]`` for both
    directions; in a switched fabric ``u``, ``v`` may be switches) are removed, the NPUs in ``failed_npus`` are
    removed and, if ``subset`` is given, only those NPUs are the collective's: with ``subset_mode="induced"``
    only they and the links among them are kept (a fabric keeps its switches that still have links); with
    ``subset_mode="relay"`` every node is kept, the members are the NPUs ``0 .. M-1`` (in id order), every
    other surviving NPU becomes a relay switch (``store_forward``, multicast, reduce) numbered after them and
    the existing switches come last (``meta["node_labels"][new_id]`` is the id each node had as built). All
    three lists use the ids of the topology as built, the NPUs are renumbered densely
    (``meta["original_ids"]`` maps back); the result must still be strongly connected over its NPUs. The topology is named
    ``name`` (for ``kind=named``: the canonical form of the name); with ``kind=file`` and the placeholder
    name ``file`` (or no name) it is named after the file's stem, and a name the file declares (JSON/GraphML
    name, edge-list ``# name:`` comment) is kept as ``meta["header_name"]``.

    Raises
    ------
    ConfigError
        On unknown keys/kinds/params or badly typed values.
    TopologyError
        On impossible shapes, unknown NPU ids, unknown names, or a
        disconnected result (TopologyFileError for bad files).

    Examples
    --------
    >>> t = build_topology({"name": "m", "kind": "mesh", "dims": [4, 4], "failed_npus": [5]})
    >>> t.num_npus, t.meta["original_ids"][5]
    (15, 6)
    >>> r = build_topology({"kind": "ring", "dims": [8], "subset": [0, 2, 4, 6], "subset_mode": "relay"})
    >>> r.num_npus, r.num_switches, r.meta["node_labels"]
    (4, 4, [0, 2, 4, 6, 1, 3, 5, 7])
    """
    cfg = _plain(cfg)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"topology config must be a mapping, got {type(cfg).__name__}")
    unknown = sorted(set(cfg) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"unknown topology config key(s) {', '.join(unknown)}; valid: {', '.join(CONFIG_KEYS)}")
    kind = cfg.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"unknown topology kind {kind!r}; valid: {', '.join(KINDS)}")
    name = cfg.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"topo.name must be a string, got {name!r}")
    dims = _int_list("dims", cfg.get("dims") or [])
    if any(d < 1 for d in dims):
        raise ConfigError(f"topo.dims must be positive, got {dims}")
    bw = _num("bw_GiBps", cfg.get("bw_GiBps", gen.DEFAULT_BW), positive=True)
    lat = _num("lat_us", cfg.get("lat_us", gen.DEFAULT_LAT), positive=False)
    params = cfg.get("params") or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"topo.params must be a mapping, got {params!r}")
    path = cfg.get("path")
    for key, hint in (("path", "FILE"), ("name", "torus4x4")):
        if cfg.get(key) == "???":  # a plain-dict copy of a YAML with a mandatory value
            raise ConfigError(f"topo.{key} is mandatory for this topology config: pass topo.{key}={hint}")
    if path is not None and kind != "file":
        raise ConfigError(f"topo.path is only used with kind=file, but kind={kind}")

    if kind in ("ring", "uniring", "fc", "switch", "hypercube"):
        _take_params(kind, params, {})
        _need_dims(kind, dims, 1, "[N]")
        n = dims[0]
        topo = {"ring": lambda: gen.ring(n, True, bw, lat), "uniring": lambda: gen.ring(n, False, bw, lat),
                "fc": lambda: gen.fully_connected(n, bw, lat), "switch": lambda: gen.switch(n, bw, lat),
                "hypercube": lambda: gen.hypercube(n, bw, lat)}[kind]()
    elif kind in ("mesh", "torus"):
        p = _take_params(kind, params, {"bw_per_dim": None, "lat_per_dim": None})
        _need_dims(kind, dims, None, "a non-empty list [X, Y, ...]")
        per = {}
        for key, scalar, positive in (("bw_per_dim", bw, True), ("lat_per_dim", lat, False)):
            v = p[key]
            if v is None:
                per[key] = scalar
                continue
            if not isinstance(v, (list, tuple)) or len(v) != len(dims):
                raise ConfigError(f"topo.params.{key} must be a list of {len(dims)} numbers (one per "
                                  f"dimension), got {v!r}")
            per[key] = [_num(f"params.{key}", x, positive) for x in v]
        topo = gen.grid(dims, kind == "torus", per["bw_per_dim"], per["lat_per_dim"])
    elif kind in ("dragonfly", "hetero"):
        p = _take_params(kind, params, {"intra_bw": bw, "intra_lat": lat, "inter_bw": bw, "inter_lat": lat})
        vals = {k: _num(f"params.{k}", v, k.endswith("bw")) for k, v in p.items()}
        if kind == "dragonfly":
            _need_dims(kind, dims, 2, "[groups, routers_per_group]")
            topo = gen.dragonfly(dims[0], dims[1], **vals)
        else:
            _need_dims(kind, dims, 3, "[servers_x, servers_y, npus_per_server]")
            topo = gen.hetero_cluster(dims[0], dims[1], dims[2], **vals)
    elif kind == "switched":
        p = _take_params(kind, params, {"mode": CUT_THROUGH, "multicast": False, "reduce": False})
        _need_dims(kind, dims, 1, "[N]")
        if p["mode"] not in SWITCH_MODES:
            raise ConfigError(f"topo.params.mode must be one of {', '.join(SWITCH_MODES)}, got {p['mode']!r}")
        topo = fab.switched(dims[0], bw, lat, p["mode"], multicast=_flag("multicast", p["multicast"]),
                            reduce=_flag("reduce", p["reduce"]))
    elif kind == "rail":
        topo = _rail_from_config(dims, params)
    elif kind == "named":
        _take_params(kind, params, {})
        if dims:
            raise ConfigError(f"topo.dims must be empty for kind=named (the shape comes from the name), got {dims}")
        if not name:
            raise ConfigError("kind=named needs topo.name, e.g. topo.name=torus4x4")
        topo = named_topology(name, bw=bw, lat=lat)
    else:  # file
        _take_params(kind, params, {})
        if dims:
            raise ConfigError(f"topo.dims must be empty for kind=file (the shape comes from the file), got {dims}")
        if not path:
            raise ConfigError("kind=file needs topo.path=FILE")
        topo = load_topology(path)
        # named after the file: an edited copy of a file whose header says "torus4x4" is not a torus4x4
        from pathlib import Path

        stem = Path(str(path)).stem
        if topo.name != stem:
            topo = Topology(topo.num_npus, topo.src, topo.dst, topo.bw_GiBps, topo.lat_us, name=stem,
                            meta={**topo.meta, "header_name": topo.name}, switches=topo.switches)

    failed_links = cfg.get("failed_links") or []
    if failed_links:
        from .transforms import remove_links

        base = topo
        pairs = parse_links(failed_links, "topo.failed_links")
        topo = remove_links(base, pairs, "topo.failed_links")
        if not (cfg.get("failed_npus") or cfg.get("subset") is not None):
            _check_connected_configured_ids(topo, f"{name or base.name} after removing failed_links")
    failed = cfg.get("failed_npus") or []
    members = cfg.get("subset")
    mode = cfg.get("subset_mode") or "induced"
    if mode not in TOPO_SUBSET_MODES:
        raise ConfigError(f"unknown topo.subset_mode {mode!r}; valid: {', '.join(TOPO_SUBSET_MODES)}")
    if failed or members is not None:
        failed_ids = _as_ids(topo, _int_list("failed_npus", failed), "failed_npus")
        keep = np.zeros(topo.num_npus, dtype=bool)
        if members is None:
            keep[:] = True
        else:
            member_ids = _as_ids(topo, _int_list("subset", members), "subset")
            if member_ids.size == 0:
                raise ConfigError("topo.subset is empty; use null for all NPUs")
            uniq, counts = np.unique(member_ids, return_counts=True)
            if np.any(counts > 1):
                raise ConfigError(f"topo.subset lists NPU(s) {uniq[counts > 1].tolist()} more than once")
            keep[member_ids] = True
        alive = np.ones(topo.num_npus, dtype=bool)
        alive[failed_ids] = False
        keep &= alive
        base = topo
        extra = {"removed_npus": np.unique(failed_ids).tolist()} if failed else {}
        if members is not None:
            extra["parent_num_npus"] = base.num_npus   # a configured root outside the subset is told apart
        relay = mode == RELAY and members is not None
        cut_out = _regrouped if relay else _CUT_OUT[base.network_kind]
        topo = cut_out(base, keep, alive & relay, **extra)
        what = " and ".join(x for x, on in (("removing failed_links", bool(failed_links)),
                                            ("removing failed_npus", bool(failed)),
                                            ("keeping only the subset" if not relay else
                                             "relaying the subset through the other NPUs", members is not None))
                            if on)
        _check_connected_configured_ids(topo, f"{name or base.name} after {what}")
    # conf/topo/file.yaml is named "file", which says nothing: a loaded topology keeps its file's name then;
    # with kind=named the name is the spec and the generator's canonical form (hypercube16 -> bhypercube16) wins.
    if name and kind != "named" and not (kind == "file" and name == "file"):
        topo = topo.with_name(name)
    return topo


def _regrouped(base: Topology, keep: np.ndarray, relays: np.ndarray, **extra) -> Topology:
    """The NPUs ``keep`` of ``base``, the NPUs ``relays`` as relays and a fabric's switches kept
    (:func:`regroup_npus`)."""
    roles = np.where(keep, _MEMBER, np.where(relays, _RELAY, _DROP)).astype(np.int8)
    return regroup_npus(base, roles, base.name, **extra)


def _induced(base: Topology, keep: np.ndarray, relays: np.ndarray, **extra) -> Topology:
    """The NPUs ``keep`` of a point-to-point ``base`` and the links among them (no relays asked for)."""
    return induced_subtopology(base, keep, base.name, **extra)


# how a subset or failed NPUs are cut out of each network kind: a fabric keeps its switches
_CUT_OUT = {POINT_TO_POINT: _induced, FABRIC: _regrouped}


def _check_connected_configured_ids(topo: Topology, what: str) -> None:
    """Raise TopologyError if ``topo`` is not strongly connected, naming the cut-off NPUs by configured id.

    The NPUs reported are those outside the largest strongly connected part,
    which after a few failures is the handful of isolated NPUs, not the bulk.
    """
    try:
        topo.check_strongly_connected()
    except TopologyError:
        import networkx as nx

        orig = np.asarray(topo.meta.get("original_ids", np.arange(topo.num_npus)))
        g = nx.DiGraph()
        g.add_nodes_from(range(topo.num_npus))
        g.add_edges_from(zip(topo.src.tolist(), topo.dst.tolist()))
        main = max(nx.strongly_connected_components(g), key=lambda c: (len(c), -min(c)))
        cut = np.array(sorted(set(range(topo.num_npus)) - main))
        raise TopologyError(f"{what} is disconnected: NPU(s) {fmt_ids(orig[cut])} are cut off from the "
                            f"other {len(main)} NPUs (ids as configured)") from None
