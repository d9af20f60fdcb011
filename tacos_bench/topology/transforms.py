"""Topology transforms: failed NPUs and links, multi-tenant sub-topologies, reversal.

Transforms that drop NPUs renumber the survivors densely in increasing order
of their old id and record, in ``meta["original_ids"]``, the id each new NPU had
in the topology *before any transform*: when the input already carries
``original_ids`` (say, a tenant carved out of a topology with failures) the
mappings are composed, so ``original_ids[new_id]`` always names an NPU of the
originally built topology.

Structural metadata of the parent (``kind``, ``dims``, ...) is not copied,
because a mesh minus two NPUs is no longer a mesh and code keyed on
``meta["dims"]`` must not be misled; the parent's name and kind are kept as
``meta["parent"]`` and ``meta["parent_kind"]``.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..errors import TopologyError
from .model import FABRIC, POINT_TO_POINT, Topology, fmt_ids

__all__ = ["SUBSET_MODES", "induced_subtopology", "LINK_BOTH", "parse_links", "link_ids_of", "remove_links",
           "remove_npus", "subset", "reverse"]

SUBSET_MODES = ("induced",)


def _as_ids(topo: Topology, ids: Iterable[int], what: str) -> np.ndarray:
    """Validate a list of NPU ids against ``topo`` (integers, in range) and return them as int64."""
    if isinstance(ids, (str, bytes)):
        raise TopologyError(f"{what} must be a list of NPU ids, got {ids!r}")
    try:
        items = list(ids)
    except TypeError:
        raise TopologyError(f"{what} must be a list of NPU ids, got {ids!r}") from None
    for v in items:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TopologyError(f"{what}: NPU id {v!r} is not an integer")
    arr = np.asarray(items, dtype=np.int64)
    bad = np.flatnonzero((arr < 0) | (arr >= topo.num_npus))
    if bad.size:
        raise TopologyError(
            f"{what}: unknown NPU id {int(arr[bad[0]])} (topology {topo.name!r} has NPUs 0..{topo.num_npus - 1})"
        )
    return arr


def induced_subtopology(topo: Topology, keep: np.ndarray, name: str, **extra_meta) -> Topology:
    """Sub-topology on the NPUs where ``keep`` (bool mask) is set, renumbered densely."""
    kept = np.flatnonzero(keep)
    if kept.size == 0:
        raise TopologyError(f"no NPU of topology {topo.name!r} would remain")
    new_id = np.full(topo.num_npus, -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    src = topo.src.astype(np.int64)
    dst = topo.dst.astype(np.int64)
    lk = keep[src] & keep[dst]
    parent_orig = topo.meta.get("original_ids")
    if parent_orig is not None and len(parent_orig) == topo.num_npus:
        original = np.asarray(parent_orig, dtype=np.int64)[kept]
    else:
        original = kept
    meta = {"kind": "induced", "parent": topo.name, "parent_kind": topo.meta.get("kind"),
            "original_ids": original.tolist(), **extra_meta}
    if "failed_links" in topo.meta:
        meta["failed_links"] = topo.meta["failed_links"]   # in the ids of the topology as built
    if "node_labels" in topo.meta and len(topo.meta["node_labels"]) == topo.num_npus:
        meta["node_labels"] = [topo.meta["node_labels"][i] for i in kept.tolist()]
    return Topology(int(kept.size), new_id[src[lk]], new_id[dst[lk]], topo.bw_GiBps[lk], topo.lat_us[lk],
                    name=name, meta=meta)


LINK_BOTH = "both"


def parse_links(items, what: str) -> np.ndarray:
    """Directed links ``[[u, v], ...]`` as an ``(n, 2)`` int64 array; ``[u, v, "both"]`` stands for ``u->v``
    and ``v->u``.

    Examples
    --------
    >>> parse_links([[0, 1], [2, 3, "both"]], "failed_links").tolist()
    [[0, 1], [2, 3], [3, 2]]
    """
    if items is None:
        return np.zeros((0, 2), np.int64)
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise TopologyError(f"{what} must be a list of links [u, v] or [u, v, \"both\"], got {items!r}")
    out = []
    for item in items:
        vals = list(item) if hasattr(item, "__iter__") and not isinstance(item, (str, bytes)) else None
        ok = vals is not None and len(vals) in (2, 3) and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in vals[:2])
        if ok and len(vals) == 3 and str(vals[2]).lower() != LINK_BOTH:
            ok = False
        if not ok:
            raise TopologyError(f"{what}: {item!r} is not a link; write [u, v] (directed) or [u, v, \"both\"]")
        u, v = int(vals[0]), int(vals[1])
        out.append((u, v))
        if len(vals) == 3:
            out.append((v, u))
    return np.asarray(out, np.int64).reshape(-1, 2)


def link_ids_of(topo: Topology, links: np.ndarray, what: str) -> np.ndarray:
    """Ids of the directed links ``links`` (from :func:`parse_links`; on a switched fabric an end may be a
    switch, a switch port); an unknown NPU (node) or a missing link is an error naming it."""
    links = np.asarray(links, np.int64).reshape(-1, 2)
    _LINK_ENDS[topo.network_kind](topo, links, what)
    ids = topo.link_ids(links[:, 0], links[:, 1])
    missing = np.flatnonzero(ids < 0)
    if missing.size:
        u, v = links[missing[0]]
        raise TopologyError(f"{what}: topology {topo.name!r} has no link {u}->{v}")
    return ids


def _node_ends(topo: Topology, links: np.ndarray, what: str) -> None:
    """On a switched fabric a link ends at an NPU or at a switch (a switch port)."""
    bad = np.flatnonzero((links < 0) | (links >= topo.num_nodes))
    if bad.size:
        raise TopologyError(f"{what}: unknown node id {int(links.ravel()[bad[0]])} (topology {topo.name!r} has "
                            f"NPUs 0..{topo.num_npus - 1} and switches {topo.num_npus}..{topo.num_nodes - 1})")


# what the ends of a listed link may be, per network kind
_LINK_ENDS = {POINT_TO_POINT: lambda topo, links, what: _as_ids(topo, links.ravel().tolist(), what),
              FABRIC: _node_ends}


def remove_links(topo: Topology, links, what: str = "failed_links") -> Topology:
    """Drop the directed links ``links`` (pairs ``(u, v)``, see :func:`parse_links`); NPU ids are unchanged.

    The result may be disconnected; :class:`~tacos_bench.problem.Problem` (or
    :meth:`Topology.check_strongly_connected`) reports which NPUs are cut off.

    Raises
    ------
    TopologyError
        If a pair names an unknown NPU (on a switched fabric: node) or a link the topology does not have.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> t = remove_links(ring(4), parse_links([[0, 1, "both"]], "failed_links"))
    >>> t.num_links, t.has_link(0, 1), t.has_link(1, 0), t.meta["failed_links"]
    (6, False, False, [[0, 1], [1, 0]])
    """
    pairs = np.asarray(links, np.int64).reshape(-1, 2)
    ids = link_ids_of(topo, pairs, what)
    keep = np.ones(topo.num_links, dtype=bool)
    keep[ids] = False
    # like remove_npus, structural metadata (dims, groups) is not kept: a mesh minus a link is no mesh
    meta = {"kind": "degraded", "parent": topo.name, "parent_kind": topo.meta.get("kind"),
            "failed_links": [list(p) for p in sorted(set(map(tuple, pairs.tolist())))]}
    meta.update({k: topo.meta[k] for k in ("original_ids", "node_labels", "header_name") if k in topo.meta})
    return Topology(topo.num_npus, topo.src[keep], topo.dst[keep], topo.bw_GiBps[keep], topo.lat_us[keep],
                    name=topo.name, meta=meta, switches=topo.switches)


def slow_links(topo: Topology, slow, what: str = "fault.slow_links", npus=(), npus_what: str = "fault.slow_npus"
               ) -> Topology:
    """Links that run slower (bandwidth times ``factor``, ``0 < factor <= 1``; the latency is unchanged).

    ``slow`` lists ``[u, v, factor]`` (directed) or ``[u, v, factor, "both"]``; on a switched fabric an end may be a
    switch (a port). ``npus`` lists ``[npu, factor]``: every link into and out of that NPU (its ports or NICs) at
    ``factor``; ``[npu, factor, "nics"]``: only its scale-out links, those slower than its fastest (on a DGX-like
    node the NICs to the leaves, not the NVSwitch ports; OptCC's lost NIC). Factors on one link multiply. A missing link, an unknown NPU or a factor outside ``(0, 1]`` is
    an error naming it.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> t = slow_links(ring(4, bw=50.0), [[0, 1, 0.5, "both"]])
    >>> float(t.bw_GiBps[t.link_ids([0], [1])[0]]), float(t.bw_GiBps[t.link_ids([1], [0])[0]]), t.meta["slow_links"]
    (25.0, 25.0, [[0, 1, 0.5], [1, 0, 0.5]])
    """
    factor = np.ones(topo.num_links)
    listed = []

    def check(f, where):
        if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)) or not (0 < float(f) <= 1):
            raise TopologyError(f"{where}: factor {f!r} must be a number in (0, 1] (the share of the bandwidth left)")
        return float(f)

    for item in slow or []:
        vals = list(item) if isinstance(item, (list, tuple)) else [item]
        if len(vals) not in (3, 4):
            raise TopologyError(f"{what}: {item!r} is not a slow link; write [u, v, factor] or [u, v, factor, \"both\"]")
        f = check(vals[2], f"{what}: {item!r}")
        pairs = parse_links([vals[:2] + vals[3:]], f"{what}: {item!r}")   # the link (its reverse too with "both")
        ids = link_ids_of(topo, pairs, what)
        np.multiply.at(factor, ids, f)
        listed += [[int(u), int(v), f] for u, v in pairs.tolist()]
    for item in npus or []:
        vals = list(item) if isinstance(item, (list, tuple)) else [item]
        if len(vals) not in (2, 3) or (len(vals) == 3 and vals[2] != "nics"):
            raise TopologyError(f"{npus_what}: {item!r} is not a slow NPU; write [npu, factor] or [npu, factor, nics]")
        v = int(_as_ids(topo, [vals[0]], npus_what)[0])
        f = check(vals[1], f"{npus_what}: {item!r}")
        mine = (topo.src == v) | (topo.dst == v)
        if len(vals) == 3:
            mine &= topo.bw_GiBps < topo.bw_GiBps[mine].max() * (1 - 1e-12)
            if not mine.any():
                raise TopologyError(f"{npus_what}: {item!r}: NPU {v}'s links are all of one speed, so it has no "
                                    "scale-out links (nics) slower than the others; give [npu, factor] for all of them")
        factor[mine] *= f
        listed += [[int(a), int(b), f] for a, b in zip(topo.src[mine].tolist(), topo.dst[mine].tolist())]
    if not listed:
        return topo
    meta = dict(topo.meta)
    meta["slow_links"] = listed
    return Topology(topo.num_npus, topo.src, topo.dst, topo.bw_GiBps * factor, topo.lat_us, name=topo.name,
                    meta=meta, switches=topo.switches)


def remove_npus(topo: Topology, failed: Iterable[int]) -> Topology:
    """Drop failed NPUs and every link touching them; renumber the survivors densely.

    Survivors keep their relative order; ``meta["original_ids"][new]`` is the
    id the NPU had before (see the module docstring for composition). The
    result may be disconnected; :class:`~tacos_bench.problem.Problem` (or
    :meth:`Topology.check_strongly_connected`) reports which NPUs are cut off.

    Parameters
    ----------
    topo : Topology
    failed : iterable of int
        Ids of the failed NPUs (repeats are harmless).

    Raises
    ------
    TopologyError
        If an id is not an NPU of ``topo`` or no NPU would remain.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> t = remove_npus(ring(5), [1])
    >>> t.num_npus, t.meta["original_ids"]
    (4, [0, 2, 3, 4])
    >>> t.has_link(0, 1), t.has_link(1, 2)   # old 0->2 never existed; old 2->3 did
    (False, True)
    """
    ids = _as_ids(topo, failed, "failed_npus")
    keep = np.ones(topo.num_npus, dtype=bool)
    keep[ids] = False
    removed = np.unique(ids)
    return induced_subtopology(topo, keep, f"{topo.name}-minus{removed.size}", removed_npus=removed.tolist())


def subset(topo: Topology, members: Iterable[int], mode: str = "induced") -> Topology:
    """Sub-topology of a tenant: the listed NPUs and the links among them only.

    Members are renumbered densely in increasing order of their id (not in the
    order listed); ``meta["original_ids"]`` gives the mapping back.

    Only ``mode="induced"`` exists. A "relay" mode, in which the tenant's
    traffic may also cross non-member NPUs, is deliberately not supported: the
    relays would have to be NPUs of the topology handed to the solver, so the
    collective's participants (the members) would differ from the topology's
    NPUs, which the problem model (every NPU contributes and receives) cannot
    express. If members are disconnected without relays, the induced
    sub-topology is disconnected and :class:`~tacos_bench.problem.Problem`
    says which NPUs are cut off.

    Raises
    ------
    TopologyError
        On unknown ids, repeated members, an empty member list or an
        unsupported mode.

    Examples
    --------
    >>> from tacos_bench.topology.generators import mesh2d
    >>> t = subset(mesh2d(4, 2), [0, 1, 4, 5])   # the left 2x2 block
    >>> t.num_npus, t.num_links, t.meta["original_ids"]
    (4, 8, [0, 1, 4, 5])
    """
    if mode == "relay":
        raise TopologyError(
            "subset_mode='relay' is not supported: relaying through non-member NPUs would make the collective's "
            "participants differ from the topology's NPUs; use subset_mode='induced'"
        )
    if mode not in SUBSET_MODES:
        raise TopologyError(f"unknown subset_mode {mode!r}; valid: {', '.join(SUBSET_MODES)}")
    ids = _as_ids(topo, members, "subset")
    if ids.size == 0:
        raise TopologyError("subset: the member list is empty")
    uniq, counts = np.unique(ids, return_counts=True)
    if np.any(counts > 1):
        raise TopologyError(f"subset: NPU(s) {fmt_ids(uniq[counts > 1])} listed more than once")
    keep = np.zeros(topo.num_npus, dtype=bool)
    keep[ids] = True
    return induced_subtopology(topo, keep, f"{topo.name}-subset{ids.size}")


def reverse(topo: Topology) -> Topology:
    """Every link ``u->v`` becomes ``v->u`` (same as :meth:`Topology.reversed`).

    Reduce-Scatter on a topology is the time-reversed All-Gather on its reverse.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> reverse(ring(3, bidirectional=False)).has_link(1, 0)
    True
    """
    return topo.reversed()
