"""The ``detour`` repair of a reducing collective: the healthy schedule goes on, and only what a fault cut is sent
again, around it.

After a link fails (or slows down) mid-reduction, every transfer of the healthy schedule that does not cross a
failed link still does what it did: each NPU still sends its partial sum once, to the same parent, so every
contribution that was not on a lost transfer still reaches its collector. A transfer that is lost (in flight on a
failed link) or still to start on one carried a partial sum (or, in an All-Reduce's copy phase, a whole chunk);
it is sent again on the shortest surviving path, to the first NPU on the way that still has its own send of that
chunk ahead of it (it adds the partial sum to what it sends on) or to the collector; a stale NPU on the way (one
that already sent its partial sum) relays it, its first arrival replacing its stale sum (a copy). A whole chunk is
copied on the shortest path to its receiver. Every transfer then waits for all the arrivals its plan had before it
(and an NPU's send for the detours bound for it), placed in that order as early as its links allow.

This keeps the work already done on the healthy trees, which a fresh reduction from the pieces
(:mod:`solvers.resume_reducing`) throws away; the repair keeps the faster of the two.
"""

from __future__ import annotations

import heapq

import numpy as np

from tacos_bench.errors import TacosError
from tacos_bench.faults import Fault, FaultState, collector_of, row_link_pairs
from tacos_bench.graph import shortest_path_tree
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule

from .compose import earliest_idle


def detour_reducing(problem: Problem, healthy: Schedule, fault: Fault, state: FaultState) -> Schedule:
    """The transfers after the fault (absolute times) that complete ``problem`` from ``state`` by the healthy
    schedule plus detours (see the module docstring). Point-to-point topologies."""
    if healthy.route is not None and np.any(healthy.route.astype(bool)):
        raise TacosError("detours are for point-to-point topologies (routes through switches hold several links)")
    after = fault.slowed(problem)
    topo, n = problem.topology, problem.num_npus
    T = float(fault.at_us)
    tol = 1e-9 * max(1.0, healthy.makespan_us)
    failed = ~fault.surviving_links(topo)
    lid = topo.link_ids(healthy.src, healthy.dst)
    on_failed = failed[lid]
    started = healthy.start_us < T - tol
    ended = healthy.end_us <= T + tol
    lost = (started & ~ended & on_failed) | (~started & on_failed)
    rest = ~started & ~on_failed
    # a sender still to send chunk c (in the rows kept) absorbs a detour bound for it
    pending = {(int(u), int(c)) for u, c in zip(healthy.src[rest].tolist(), healthy.chunk[rest].tolist())}
    col = collector_of(problem)
    lt = np.where(failed, np.inf, np.asarray(after.link_time_us, np.float64))
    out_ptr, dst_arr = np.asarray(topo.out_ptr, np.int64), np.asarray(topo.dst, np.int64)
    trees: dict = {}

    def tree(u: int) -> tuple:
        """``(dist, pred)`` of the shortest surviving paths from ``u`` (one search per sender)."""
        if u not in trees:
            trees[u] = shortest_path_tree(n, out_ptr, dst_arr, lt, u)
        return trees[u]

    # each chunk's tree of the healthy schedule: who each NPU sends its partial sum to
    parent = {}
    for u, v, c, o in zip(healthy.src.tolist(), healthy.dst.tolist(), healthy.chunk.tolist(), healthy.op.tolist()):
        if o == REDUCE:
            parent[(u, c)] = v

    # the rows to place: kept healthy ones and detours; (chunk, src, dst, planned start, duration, op, deps)
    rows = []
    for i in np.flatnonzero(rest).tolist():
        rows.append([int(healthy.chunk[i]), int(healthy.src[i]), int(healthy.dst[i]), float(healthy.start_us[i]),
                     float(after.link_time_us[lid[i]]), int(healthy.op[i]), [], False])
    extra_deps: dict = {}   # (npu, chunk) -> indices of detour rows that must land there before it sends
    for i in np.flatnonzero(lost).tolist():
        c, u, v, op = int(healthy.chunk[i]), int(healthy.src[i]), int(healthy.dst[i]), int(healthy.op[i])
        if op == REDUCE:
            # the partial sum goes to the nearest NPU that still sends c on a way up that avoids NPU u (it adds the
            # sum to its own send), or to the collector, never through an NPU whose way up comes back to u
            # (it leaves once everything u waited for has arrived, as its own send would have: u's subtree has
            # sent by then, so it relays like any NPU that already sent)
            below = _below(parent, c, u)
            hops = _nearest(tree(u), topo, u, {a for a, cc in pending if cc == c} - below | {int(col[c])})
        else:
            hops = _nearest(tree(u), topo, u, {v})
        if hops is None:
            raise TacosError(f"chunk {c}: NPU {u} has no surviving path to an NPU that can take its partial sum")
        prev = None
        for lk in hops:
            a, b = int(topo.src[lk]), int(topo.dst[lk])
            idx = len(rows)
            rows.append([c, a, b, T, float(after.link_time_us[lk]), op, ["first"] if prev is None else [prev], True])
            prev = idx
        if op == REDUCE and prev is not None:
            extra_deps.setdefault((int(topo.dst[hops[-1]]), c), []).append(prev)
    return _place(problem, rows, state, extra_deps, T)


def _below(parent: dict, c: int, u: int) -> set:
    """The NPUs whose way up chunk ``c``'s tree passes through ``u`` (u's subtree, u excluded)."""
    out = set()
    for (a, cc), _ in parent.items():
        if cc != c or a == u:
            continue
        x, seen = a, set()
        while (x, c) in parent and x not in seen:
            seen.add(x)
            x = parent[(x, c)]
            if x == u:
                out.add(a)
                break
    return out


def _nearest(tree: tuple, topo, u: int, targets: set) -> list | None:
    """The links of the shortest path in ``tree`` (``(dist, pred)`` from ``u``) to the nearest of ``targets``."""
    dist, pred = tree
    cand = [t for t in targets if t != u and np.isfinite(dist[t])]
    if not cand:
        return None
    return _hops(pred, topo, u, min(cand, key=lambda t: (dist[t], t)))


def _hops(pred, topo, u: int, v: int) -> list:
    """The links from ``u`` to ``v`` in a shortest-path tree (``pred``: each node's link from its parent)."""
    hops = []
    while v != u:
        lk = int(pred[v])
        hops.append(lk)
        v = int(topo.src[lk])
    return hops[::-1]


def _place(problem: Problem, rows: list, state: FaultState, extra_deps: dict, T: float) -> Schedule:
    """``rows`` in dependency order (ties: planned start), each as early as its links are idle and every arrival it
    waits for has landed; ops set so that a stale relay's first arrival replaces its partial sum."""
    topo, n = problem.topology, problem.num_npus
    R = len(rows)
    if not R:
        return Schedule.empty()
    by_dst: dict = {}
    for k, r in enumerate(rows):
        by_dst.setdefault((r[2], r[0]), []).append(k)
    # a kept row waits for every kept row its plan landed at its sender before it started, and for the detours
    # bound for that sender
    for k, r in enumerate(rows):
        c, u, start = r[0], r[1], r[3]
        if r[7]:
            if r[6] == ["first"]:   # a detour leaves once all its sender's kept arrivals have landed
                r[6] = [j for j in by_dst.get((u, c), ()) if not rows[j][7]]
            continue
        tol = 1e-9 * max(1.0, start)
        r[6] = [j for j in by_dst.get((u, c), ()) if not rows[j][7] and rows[j][3] + rows[j][4] <= start + tol]
        r[6] += extra_deps.get((u, c), [])
    indeg = [len(r[6]) for r in rows]
    succ = [[] for _ in range(R)]
    for k, r in enumerate(rows):
        for j in r[6]:
            succ[j].append(k)
    ready0 = {}
    for v, c, t in zip(state.hold_npu.tolist(), state.hold_chunk.tolist(), state.hold_time.tolist()):
        ready0[(v, c)] = t
    for c, own in (state.pieces or {}).items():
        for v, _, t in own:
            ready0[(v, c)] = t
    busy: dict = {}
    free0 = np.asarray(state.link_free, np.float64)
    heap = [(rows[k][3], k) for k in range(R) if indeg[k] == 0]
    heapq.heapify(heap)
    start = np.zeros(R)
    end = np.zeros(R)
    done = 0
    margin = 1e-6 * max(1.0, T)
    landed: dict = {}
    while heap:
        _, k = heapq.heappop(heap)
        c, u, v, _, dur, op, deps, _ = rows[k]
        lk = int(topo.link_ids([u], [v])[0])
        t = max(T, float(free0[lk]), ready0.get((u, c), T), *(end[j] for j in deps))
        if (v, c) in landed:
            t = max(t, landed[(v, c)] + margin - dur)   # arrivals at one NPU land one after another
        t = earliest_idle(busy, (lk,), t, dur, 1e-12)
        start[k], end[k] = t, t + dur
        busy.setdefault(lk, []).append((t, t + dur))
        landed[(v, c)] = max(landed.get((v, c), 0.0), t + dur)
        done += 1
        for s in succ[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (rows[s][3], s))
    if done != R:
        raise TacosError("the detours wait on each other in a cycle")
    sched = Schedule(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
                     start, end, np.array([r[5] for r in rows], np.int8))
    return _ops(problem, sched, state)


def _ops(problem: Problem, sched: Schedule, state: FaultState) -> Schedule:
    """A reduce row's op by the contributions: into an NPU that has not sent the chunk on yet when it lands (its
    own send comes later, or it is the collector) a reduce; into one that has, its first arrival a copy (it
    replaces the stale partial sum) and the later ones a reduce."""
    col = collector_of(problem)
    sends: dict = {}
    for u, c, t, o in zip(sched.src.tolist(), sched.chunk.tolist(), sched.start_us.tolist(), sched.op.tolist()):
        if o == REDUCE:
            sends[(u, c)] = min(sends.get((u, c), np.inf), t)
    live = {(v, c) for c, own in (state.pieces or {}).items() for v, _, _ in own}
    op = sched.op.copy()
    seen: set = set()
    for i in np.lexsort((sched.start_us, sched.end_us)).tolist():
        if op[i] != REDUCE:
            continue
        v, c = int(sched.dst[i]), int(sched.chunk[i])
        still = (v, c) in live and (v == int(col[c]) or sends.get((v, c), -np.inf) >= float(sched.end_us[i]))
        if not still:
            if (v, c) not in seen:   # the first arrival since it sent its own: it replaces the stale sum
                op[i] = COPY
            seen.add((v, c))
    return sched.with_op(op)
