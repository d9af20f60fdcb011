"""Lower bounds on a repair (:mod:`solvers.repair`): the collective time of any schedule that keeps what a
schedule executed until a fault (:func:`tacos_bench.faults.state_at`) and completes the collective from there
on the links that survive.

* **from the state**: what was executed stays (its last end counts); every (NPU, chunk) pair a survivor still
  needs is served by some surviving copy, which cannot leave its holder before the fault (or before an
  in-flight copy arrives) and then takes at least the shortest path time over the surviving links
  (:func:`point_to_point_repair_us`; not on a switched fabric, where a cut-through path is faster than its
  links one by one: :func:`fabric_repair_us`); and each survivor's missing chunks arrive one per transfer over
  its surviving in-links, each free from the fault on.
* **crossings** (reducing collectives): around each group (a switch with its NPUs on a fabric, a group of faster
  links on point-to-point links), every chunk that a side still needs and whose contributions are not all held on
  that side crosses the cut once at least, one per transfer over the cut's links free from the fault on
  (:func:`_crossings_after`; the proof is in docs/faults.md, *Slow links*).
* **the healthy problem's** bound (:func:`with_healthy_bound`): with links failing and no NPU, the executed
  schedule (the kept transfers and the new ones) is also a valid schedule of the healthy problem, on a subset
  of its links, so its lower bound holds too. With a failed NPU it need not: the survivors need less.

A repair is judged against the larger, which the executed prefix may push well above a fresh synthesis on the
degraded topology (a gather whose root had received little by the fault). ``fault`` and ``state`` are a
:class:`~tacos_bench.faults.Fault` and its :class:`~tacos_bench.faults.FaultState`.

Examples
--------
>>> from tacos_bench import Collective, Problem, Schedule
>>> from tacos_bench.faults import Fault, state_at
>>> from tacos_bench.topology.generators import ring
>>> p = Problem(ring(4), Collective("broadcast", 1, 1))
>>> t = float(p.link_time_us[0])   # every link of this ring takes t
>>> s = Schedule.from_rows([(0, 0, 1, 0, t, "copy"), (0, 0, 3, 0, t, "copy"), (0, 1, 2, t, 2 * t, "copy")])
>>> f = Fault(1.5 * t, links=((1, 2), (2, 1)))   # 1->2 fails in flight: NPU 2 needs the chunk from 3
>>> point_to_point_repair_us(p, f, state_at(p, s, f)) == 2.5 * t
True
>>> with_healthy_bound(2.5 * t, 2 * t, f)["repair_bound_source"]        # the healthy bound: the distance, 2 t
'state'
"""

from __future__ import annotations

import numpy as np

from ..cost import link_time_us
from ..graph import shortest_path_tree
from ..problem import Problem

# the repair bound runs one shortest-path search per surviving NPU up to this many NPUs, and looks at (holder,
# NPU) pairs in blocks up to this many in all
REPAIR_BOUND_MAX_NPUS = 2048
REPAIR_BOUND_MAX_PAIRS = 1 << 29
# the crossings of a reduction's groups look at every (node, chunk) holding once per group, up to this many in all
REPAIR_CROSSINGS_MAX_WORK = 1 << 24


def _executed_end_us(state) -> float:
    """When the executed prefix ends (0 when nothing was executed)."""
    return float(state.executed.end_us.max()) if len(state.executed) else 0.0


def point_to_point_repair_us(problem: Problem, fault, state) -> float | None:
    """The bound from the state on a point-to-point network (µs; ``None`` beyond ``REPAIR_BOUND_MAX_NPUS`` NPUs
    or ``REPAIR_BOUND_MAX_PAIRS`` holder-NPU pairs): the executed prefix, the shortest paths from the surviving
    holders and the survivors' in-links (the module docstring)."""
    topo = problem.topology
    N, C = problem.num_npus, problem.num_chunks
    if N > REPAIR_BOUND_MAX_NPUS:
        return None
    done = _executed_end_us(state)
    if problem.collective.reduces:
        # a chunk still in pieces has no whole copy to measure paths from: the in- and out-link counts, and the
        # crossings of the groups of faster links
        from .drain import _drain_groups

        t = np.asarray(problem.link_time_us, np.float64)
        return max(done, _ingress_after(problem, fault, state), _egress_after(problem, fault, state),
                   _crossings_after(problem, fault, state, _drain_groups(topo, t), t))
    sub = fault.surviving_topology(topo)
    w = np.asarray(link_time_us(sub.bw_GiBps, sub.lat_us, problem.chunk_bytes), np.float64)
    out_ptr, dst_l = np.asarray(sub.out_ptr, np.int64), np.asarray(sub.dst, np.int64)
    alive = np.asarray(state.alive, bool)
    hv = np.asarray(state.hold_npu, np.int64)
    hc = np.asarray(state.hold_chunk, np.int64)
    start = np.maximum(np.asarray(state.hold_time, np.float64), fault.at_us)
    D = np.full((N, N), np.inf)
    for u in np.unique(hv):
        D[u] = shortest_path_tree(N, out_ptr, dst_l, w, int(u))[0]
    dest = np.asarray(problem.destinations, np.int64)
    # a held pair counts from its own arrival; its shortest path from itself is 0 at its start time
    own = np.asarray(state.hold_time, np.float64)
    uni = dest[hc] >= 0
    best = 0.0
    if uni.any():
        d = dest[hc[uni]]
        arr = np.where(hv[uni] == d, own[uni], start[uni] + D[hv[uni], d])
        first = np.full(C, np.inf)
        np.minimum.at(first, hc[uni], arr)
        need = (dest >= 0) & alive[np.maximum(dest, 0)]
        best = max(best, float(first[need].max()) if need.any() else 0.0)
    multi = np.flatnonzero(~uni)
    if multi.size:
        if multi.size * N > REPAIR_BOUND_MAX_PAIRS:
            return None
        order = multi[np.argsort(hc[multi], kind="stable")]
        chunks, cut = np.unique(hc[order], return_index=True)
        block = max(1, (1 << 22) // N)
        first = np.full((chunks.size, N), np.inf)
        for b0 in range(0, chunks.size, block):
            b1 = min(chunks.size, b0 + block)
            lo, hi = cut[b0], cut[b1] if b1 < chunks.size else order.size
            rows = order[lo:hi]
            arr = start[rows, None] + D[hv[rows]]
            arr[np.arange(rows.size), hv[rows]] = own[rows]
            first[b0:b1] = np.minimum.reduceat(arr, cut[b0:b1] - lo, axis=0)
        best = max(best, float(first[:, alive].max()) if alive.any() else 0.0)
    return max(best, done, _ingress_after(problem, fault, state), _egress_after(problem, fault, state))


def fabric_repair_us(problem: Problem, fault, state) -> float | None:
    """The bound from the state on a switched fabric (µs; ``None`` beyond ``REPAIR_BOUND_MAX_NPUS`` NPUs): the
    executed prefix and the survivors' in-links. A path through cut-through switches is faster than the sum of
    its links' times, so the shortest-path argument is left out."""
    if problem.num_npus > REPAIR_BOUND_MAX_NPUS:
        return None
    best = max(_executed_end_us(state), _ingress_after(problem, fault, state), _egress_after(problem, fault, state))
    if problem.collective.reduces:
        from ._graph import switch_groups

        best = max(best, _crossings_after(problem, fault, state, switch_groups(problem.topology),
                                          np.asarray(problem.link_time_us, np.float64)))
    return best


def with_healthy_bound(state_us: float | None, healthy_us: float | None, fault) -> dict:
    """``repair_bound_us``: the larger of the bound from the state and the healthy problem's lower bound
    ``healthy_us`` (used only when no NPU fails; None: not known), and ``repair_bound_source``, the one that
    gave it (``"state"``; ``"healthy"`` only when strictly larger; None when neither is known).

    >>> from tacos_bench.faults import Fault
    >>> with_healthy_bound(1319.06, 1321.81, Fault(100.0, links=((0, 1),)))
    {'repair_bound_us': 1321.81, 'repair_bound_source': 'healthy'}
    >>> with_healthy_bound(1319.06, 1321.81, Fault(100.0, npus=(3,)))      # the survivors need less
    {'repair_bound_us': 1319.06, 'repair_bound_source': 'state'}
    """
    if fault.npus:
        healthy_us = None
    if healthy_us is not None and (state_us is None or healthy_us > state_us):
        return {"repair_bound_us": healthy_us, "repair_bound_source": "healthy"}
    return {"repair_bound_us": state_us, "repair_bound_source": None if state_us is None else "state"}


def _ingress_after(problem: Problem, fault, state) -> float:
    """Each survivor's missing chunks arrive one per transfer over its surviving in-links, each free from the
    fault (or its in-flight transfer's end) on: the m-th earliest end among those links' back-to-back slots."""
    N = problem.num_npus
    alive = np.asarray(state.alive, bool)
    dest = np.asarray(problem.destinations, np.int64)
    hv, hc = np.asarray(state.hold_npu, np.int64), np.asarray(state.hold_chunk, np.int64)
    multi = dest < 0
    held_multi = np.bincount(hv[multi[hc]], minlength=N)
    own = (dest[hc] == hv) & ~multi[hc]
    missing = np.where(alive, int(multi.sum()) - held_multi, 0)
    uni_need = np.bincount(dest[~multi], minlength=N) - np.bincount(hv[own], minlength=N)
    missing = missing + np.where(alive, uni_need, 0)
    topo = problem.topology
    t = np.asarray(problem.link_time_us, np.float64)
    free = np.maximum(np.asarray(state.link_free, np.float64), fault.at_us)
    best = 0.0
    in_ptr, in_order = np.asarray(topo.in_ptr), np.asarray(topo.in_order)
    for v in np.flatnonzero(missing > 0):
        best = max(best, _mth_slot_end(in_order[in_ptr[v]:in_ptr[v + 1]], free, t, int(missing[v])))
    return best


def _mth_slot_end(links: np.ndarray, free: np.ndarray, t: np.ndarray, m: int) -> float:
    """The ``m``-th earliest end among back-to-back transfers of times ``t`` on ``links``, each free from ``free``
    (``inf``: failed); ``inf`` when none of them survives."""
    links = links[np.isfinite(free[links])]
    if not links.size:
        return np.inf
    ends = (free[links, None] + t[links, None] * np.arange(1, m + 1)[None, :]).ravel()
    return float(np.partition(ends, m - 1)[m - 1])


def _egress_after(problem: Problem, fault, state) -> float:
    """Each chunk that a single survivor holds (or is receiving) and another survivor still needs leaves that
    holder once at least, one per transfer over its surviving out-links, each free from the fault (or its
    in-flight transfer's end) on: the m-th earliest end among those links' back-to-back slots, plus nothing for
    the way on (a valid, simple bound: a link that slows down at the fault counts at its new speed)."""
    N, C = problem.num_npus, problem.num_chunks
    alive = np.asarray(state.alive, bool)
    dest = np.asarray(problem.destinations, np.int64)
    hv, hc = np.asarray(state.hold_npu, np.int64), np.asarray(state.hold_chunk, np.int64)
    holders = np.bincount(hc, minlength=C)
    sole = holders[hc] == 1
    d = dest[hc]
    needed = np.where(d < 0, int(alive.sum()) > 1, (d != hv) & alive[np.maximum(d, 0)])
    count = np.bincount(hv[sole & needed], minlength=N)
    topo = problem.topology
    t = np.asarray(problem.link_time_us, np.float64)
    free = np.maximum(np.asarray(state.link_free, np.float64), fault.at_us)
    best = 0.0
    out_ptr = np.asarray(topo.out_ptr)
    for v in np.flatnonzero(count > 0):
        best = max(best, _mth_slot_end(np.arange(out_ptr[v], out_ptr[v + 1]), free, t, int(count[v])))
    return best


def _crossings_after(problem: Problem, fault, state, groups, occ: np.ndarray) -> float:
    """Reducing collectives: for each group ``S`` (node ids; a switch with its NPUs on a fabric, a group of faster
    links on point-to-point links), every chunk that an NPU on one side still needs and whose contributions are
    not all held on that side (some contribution is held, as a partial sum or a stale copy, only on the other)
    crosses the cut that way at least once after the fault; one chunk per transfer, each holding a link of the cut
    for at least ``occ`` from the link's free time on: the m-th earliest end among those links' back-to-back slots
    (the count bound of :func:`_ingress_after` on the cut). 0 (no bound) beyond ``REPAIR_CROSSINGS_MAX_WORK``."""
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    if not len(groups) or topo.num_nodes * C * len(groups) > REPAIR_CROSSINGS_MAX_WORK:
        return 0.0
    if (np.asarray(problem.sources) != -1).any():
        return 0.0   # whole = every NPU's contribution: only where every NPU contributes to every chunk
    mask = _held_after(problem, state)          # (node, chunk) -> the contributions it may hold, over-approximated
    full = (1 << n) - 1
    dest = np.asarray(problem.destinations, np.int64)
    alive = np.asarray(state.alive, bool)
    need = np.zeros((topo.num_nodes, C), bool)   # needs[v, c]: v must still end with chunk c whole
    for c in range(C):
        for v in (range(n) if dest[c] < 0 else (int(dest[c]),)):
            need[v, c] = alive[v] and mask.get((v, c), 0) != full
    free = np.maximum(np.asarray(state.link_free, np.float64), fault.at_us)
    src, dst = np.asarray(topo.src, np.int64), np.asarray(topo.dst, np.int64)
    best = 0.0
    for S in groups:
        inside = np.zeros(topo.num_nodes, bool)
        inside[np.asarray(S, np.int64)] = True
        held_in, held_out = [0] * C, [0] * C
        for (v, c), m in mask.items():
            if inside[v]:
                held_in[c] |= m
            else:
                held_out[c] |= m
        need_in, need_out = need[inside].any(axis=0), need[~inside].any(axis=0)
        k_in = sum(1 for c in range(C) if need_in[c] and held_in[c] != full)
        k_out = sum(1 for c in range(C) if need_out[c] and held_out[c] != full)
        for k, links in ((k_in, np.flatnonzero(~inside[src] & inside[dst])),
                         (k_out, np.flatnonzero(inside[src] & ~inside[dst]))):
            if k:
                best = max(best, _mth_slot_end(links, free, occ, k))
    return best


def _held_after(problem: Problem, state) -> dict:
    """``(node, chunk) -> bitmask`` of the contributions each node may hold once the executed prefix has run (its
    own at the start; every arrival adds what its sender held when it started, whatever its op: a superset of
    what it holds, so the crossings counted from it are never too many)."""
    n = problem.num_npus
    mask = {(v, c): 1 << v for v in range(n) for c in range(problem.num_chunks)}
    ex = state.executed
    T = len(ex)
    if not T:
        return mask
    payload = [0] * T
    chunk, src, dst = ex.chunk.tolist(), ex.src.tolist(), ex.dst.tolist()
    for e in ex.event_order(1e-9 * max(1.0, ex.makespan_us)).tolist():
        if e >= T:
            i = e - T
            payload[i] = mask.get((src[i], chunk[i]), 0)
        else:
            k = (dst[e], chunk[e])
            mask[k] = mask.get(k, 0) | payload[e]
    return mask
