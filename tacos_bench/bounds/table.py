"""Bounds of a chunk table that is not a named collective and not unicast (copies to subsets, a mix of copies and
reductions, several collectives at once; :mod:`tacos_bench.demand`), on either network kind.

* ingress: every NPU receives at least once each chunk it must end with (a copy it does not source; a
  reduction it does not fully source), one chunk per in-link at a time (:func:`~tacos_bench.bounds.load.count_time_us`);
* egress: every NPU sends at least once each chunk only it can start (a copy it sources that someone else needs;
  its contribution to a reduction it is not the only destination of);
* distance (point-to-point): a copy cannot reach a destination sooner than the shortest link-time path from its
  source, a contribution not sooner than from its contributor;
* server cut: a chunk needed inside a group of nodes that no NPU of the group sources (or a reduction with a
  contributor outside) crosses the links into the group at least once, and one needed outside leaves it at
  least once; the groups are a fabric's switches with their NPUs, or a point-to-point topology's components
  over its fastest links (the servers of a cluster), so the NICs of a node bound a mixture-of-experts layer.

A switched fabric's in-links of an NPU are its ports: a chunk occupies a port at least its least occupancy (its
link time plus, through a cut-through switch, the latency of the route's other links:
:func:`~tacos_bench.bounds.fabric.occupancy_us`), so the counts hold there with that time (the distance does
not: a cut-through route takes less than its links' sum).
"""

from __future__ import annotations

import numpy as np

from ..graph import fastest_link_groups
from ..problem import Problem
from ._graph import _Graph, _distance_row
from .fabric import occupancy_us
from .load import count_time_us


def table_bounds(problem: Problem) -> dict:
    """``ingress_us``, ``egress_us``, ``distance_us`` and ``best_us``/``best_source`` of a chunk table."""
    d = problem.demand
    n, topo = problem.num_npus, problem.topology
    # a cut-through transfer holds every link of its route for the route's whole duration: on a fabric each link
    # carries one chunk per its least occupancy (bounds.fabric.occupancy_us), not per its own link time
    t = (occupancy_us(topo, problem.chunk_bytes) if topo.is_fabric
         else np.asarray(problem.link_time_us, np.float64))
    dv, dc = d.required_pairs()
    src = d.source
    copy = d.op == 0
    need_in, need_out = _port_needs(d, dv, dc, topo.num_nodes)
    ingress = _count(topo, t, need_in, incoming=True)
    egress = _count(topo, t, need_out, incoming=False)
    distance = 0.0
    if not topo.is_fabric:
        g = _Graph(topo, t)
        origins = np.unique(src[copy][src[copy] >= 0])
        for o in origins.tolist():
            row = _distance_row(g.out_ptr, g.dst, g.w, int(o), g.uniform)
            mine = copy[dc] & (src[dc] == o)
            if mine.any():
                distance = max(distance, float(row[dv[mine]].max()))
    cut = _server_cut(problem, t, dv, dc)
    parts = {"ingress": ingress, "egress": egress, "distance": distance, "server_cut": cut}
    best = max(parts.values())
    return {"ingress_us": ingress, "egress_us": egress, "distance_us": distance, "server_cut_us": cut,
            "best_us": best,
            "best_source": next(k for k, v in parts.items() if v >= best * (1 - 1e-12))}


def _port_needs(d, dv: np.ndarray, dc: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per NPU, the chunks it must receive and the chunks it must send at least once (module docstring)."""
    n, C = d.num_npus, d.num_chunks
    copy = d.op == 0
    src_count, dst_count = np.diff(d.src_ptr), np.diff(d.dst_ptr)

    def sole(count, ptr, ids):
        # a chunk's one member (an empty set is every NPU: one member only on one NPU), else -1
        out = np.full(C, -1, np.int64)
        one = count == 1
        out[one] = ids[ptr[:-1][one]]
        if n == 1:
            out[count == 0] = 0
        return out

    sole_src, sole_dst = sole(src_count, d.src_ptr, d.src_ids), sole(dst_count, d.dst_ptr, d.dst_ids)
    # a reduce chunk's destination that is one of its sources still needs the others' parts, unless it is the only
    own = ~copy[dc] & (sole_src[dc] == dv)
    need_in = np.bincount(dv[~own], minlength=num_nodes)[:n]
    # who must send: a copy's source (once, if anyone needs it), a reduction's every contributor but a sole
    # destination
    needed = np.zeros(C, bool)
    needed[dc] = True
    need_out = np.bincount(d.source[copy & needed], minlength=n)[:n]
    owner = np.repeat(np.arange(C), src_count)
    listed = ~copy[owner] & (d.src_ids != sole_dst[owner])
    need_out += np.bincount(d.src_ids[listed], minlength=n)[:n]
    everyone = ~copy & (src_count == 0)        # every NPU contributes
    need_out += int(everyone.sum())
    need_out -= np.bincount(sole_dst[everyone & (sole_dst >= 0)], minlength=n)[:n]
    return need_in, need_out


def _count(topo, t: np.ndarray, need: np.ndarray, incoming: bool) -> float:
    n = topo.num_npus
    ptr, order = (topo.in_ptr, topo.in_order) if incoming else (topo.out_ptr, np.arange(topo.num_links))
    ptr = np.asarray(ptr, np.int64)[:n + 1]
    lt = t[np.asarray(order, np.int64)[:int(ptr[-1])]]
    return float(count_time_us(lt, ptr, need[:n]).max()) if n else 0.0


def cut_sets(topo) -> list[np.ndarray]:
    """Node sets whose in- and out-links bound a table (module docstring): a fabric's switch groups, or the
    components of a point-to-point topology over its fastest links (both directions), each a proper subset."""
    n = topo.num_npus
    if topo.is_fabric:
        from .fabric import _groups

        return _groups(topo)
    bw = np.asarray(topo.bw_GiBps, np.float64)
    if not bw.size or bw.min() >= bw.max() * (1 - 1e-9):
        return []
    roots = fastest_link_groups(topo)
    return [np.flatnonzero(roots == r) for r in np.unique(roots) if 1 < np.count_nonzero(roots == r) < n]


def _server_cut(problem: Problem, t: np.ndarray, dv: np.ndarray, dc: np.ndarray) -> float:
    d, topo = problem.demand, problem.topology
    C = d.num_chunks
    copy = d.op == 0
    src = d.source
    owner = np.repeat(np.arange(C), np.diff(d.src_ptr))
    every_src = np.diff(d.src_ptr) == 0
    lsrc, ldst = np.asarray(topo.src), np.asarray(topo.dst)
    best = 0.0
    for X in cut_sets(topo):
        inside = np.zeros(topo.num_nodes, bool)
        inside[X] = True
        dest_in = np.zeros(C, bool)
        dest_in[dc[inside[dv]]] = True
        dest_out = np.zeros(C, bool)
        dest_out[dc[~inside[dv]]] = True
        contrib_out = every_src.copy()      # every NPU contributes: some are outside a proper subset
        contrib_out[owner[~inside[d.src_ids]]] = True
        contrib_in = every_src.copy()
        contrib_in[owner[inside[d.src_ids]]] = True
        src_in = np.zeros(C, bool)
        one = src >= 0
        src_in[one] = inside[src[one]]
        enter = np.where(copy, dest_in & ~src_in & one, dest_in & contrib_out)
        leave = np.where(copy, dest_out & src_in, dest_out & contrib_in)
        for need, mask in ((int(enter.sum()), ~inside[lsrc] & inside[ldst]),
                           (int(leave.sum()), inside[lsrc] & ~inside[ldst])):
            if need and mask.any():
                lt = t[mask]
                best = max(best, float(count_time_us(lt, np.array([0, lt.size], np.int64),
                                                     np.array([need], np.int64))[0]))
    return best
