"""Bounds of a chunk table that is not a named collective and not unicast (copies to subsets, a mix of copies and
reductions, several collectives at once; :mod:`tacos_bench.demand`), on either network kind.

* ingress: every NPU receives at least once each chunk it must end with (a copy it does not source; a
  reduction it does not fully source), one chunk per in-link at a time (:func:`~tacos_bench.bounds.load.count_time_us`);
* egress: every NPU sends at least once each chunk only it can start (a copy it sources that someone else needs;
  its contribution to a reduction it is not the only destination of);
* distance (point-to-point): a copy cannot reach a destination sooner than the shortest link-time path from its
  source, a contribution not sooner than from its contributor.

A switched fabric's in-links of an NPU are its ports: a chunk occupies a port at least its link time, so the counts
hold there too (the distance does not: a cut-through route takes less than its links' sum).
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from ._graph import _Graph, _distance_row
from .load import count_time_us


def table_bounds(problem: Problem) -> dict:
    """``ingress_us``, ``egress_us``, ``distance_us`` and ``best_us``/``best_source`` of a chunk table."""
    d = problem.demand
    n, topo = problem.num_npus, problem.topology
    t = np.asarray(problem.link_time_us, np.float64)
    dv, dc = d.required_pairs()
    src = d.source
    copy = d.op == 0
    # a reduce chunk's destination that is one of its sources still needs the others' parts, unless it is the only
    own = np.zeros(dv.size, bool)
    for i in np.flatnonzero(~copy[dc]).tolist():
        s = d.sources_of(int(dc[i]))
        own[i] = s.size == 1 and s[0] == dv[i]
    need_in = np.bincount(dv[~own], minlength=topo.num_nodes)[:n]
    # who must send: a copy's source (once), a reduction's every contributor but a sole destination
    senders = []
    for c in range(d.num_chunks):
        if copy[c]:
            if np.any(dc == c):
                senders.append(int(src[c]))
        else:
            dests = set(d.destinations_of(c).tolist())
            senders += [int(v) for v in d.sources_of(c).tolist() if dests != {int(v)}]
    need_out = np.bincount(np.asarray(senders, np.int64), minlength=n)[:n]
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
    parts = {"ingress": ingress, "egress": egress, "distance": distance}
    best = max(parts.values())
    return {"ingress_us": ingress, "egress_us": egress, "distance_us": distance, "best_us": best,
            "best_source": next(k for k, v in parts.items() if v >= best * (1 - 1e-12))}


def _count(topo, t: np.ndarray, need: np.ndarray, incoming: bool) -> float:
    n = topo.num_npus
    ptr, order = (topo.in_ptr, topo.in_order) if incoming else (topo.out_ptr, np.arange(topo.num_links))
    ptr = np.asarray(ptr, np.int64)[:n + 1]
    lt = t[np.asarray(order, np.int64)[:int(ptr[-1])]]
    return float(count_time_us(lt, ptr, need[:n]).max()) if n else 0.0
