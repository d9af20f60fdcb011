"""Resume a reducing collective (Reduce-Scatter, All-Reduce, Reduce) from the state a fault leaves.

At the fault each chunk not yet whole at its collector (:func:`tacos_bench.faults.collector_of`) is held in
*pieces*: the partial sums of the NPUs that have not sent theirs on, disjoint and together every contribution
(:func:`tacos_bench.faults.reduce_pieces`; what was executed stays, partial sums stay where they are and nothing is
counted twice). The resume reduces each such chunk into its collector afresh, on the links that survive (slowed
ones at their new speed), as the backend's copy mirror time-reversed (:func:`solvers.compose.mirrored`: a tree per
chunk in which every NPU sends once, after all it waits for has arrived), and then prunes that tree to the pieces:

* an NPU that holds a piece sends it (with whatever reached it) as in the tree: a reduce at each receiver;
* an NPU that holds none has already sent its partial sum on before the fault: it sends only what reached it
  after the fault, so its first arrival *replaces* its stale partial sum (a copy) and later ones add to it (a
  reduce); one that receives nothing sends nothing (its row is dropped).

So nothing is counted twice and every piece reaches the collector. The pruned rows are placed after the fault as
one list schedule (each transfer once its links are free and its sender has received every partial sum the tree
sends it first). An All-Reduce then copies each whole chunk from its collector (and any NPU that already holds it
whole) to every NPU that lacks it, from the state the reduction leaves (the verifier replays the result).
"""

from __future__ import annotations

import numpy as np

from tacos_bench.collective import Collective
from tacos_bench.demand import table
from tacos_bench.errors import TacosError
from tacos_bench.faults import Fault, FaultState, collector_of, row_link_pairs
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule

from .compose import earliest_idle, fit_copies, link_last_use, mirrored
from .release import _solve_from


def resume_reducing(backend, problem: Problem, fault: Fault, state: FaultState, opts, gaps: bool = False) -> Schedule:
    """The transfers that complete ``problem`` (a reducing collective) from ``state``, in absolute time
    (``gaps``: a transfer may take a gap that the ones placed before it leave on its links)."""
    after = fault.slowed(problem)
    col = collector_of(problem)
    free = np.where(np.isfinite(state.link_free), np.maximum(state.link_free, fault.at_us), np.inf)
    parts = []
    whole_at = {}
    pieces = state.pieces or {}
    if pieces:
        tree = _trees(backend, after, opts, fault, sorted(pieces), col)
        ready = {(v, c): t for c, own in pieces.items() for v, _, t in own}
        rows, relays = _pruned(problem, tree, pieces)
        red = _place_reduce(problem, rows, free, ready, fault.at_us, relays, gaps)
        parts.append(red)
        into = red.dst == col[red.chunk]
        for c, t in zip(red.chunk[into].tolist(), red.end_us[into].tolist()):
            whole_at[c] = max(whole_at.get(c, 0.0), t)
    if problem.destinations.min() < 0:   # every NPU needs every chunk whole (All-Reduce)
        # planned on the links as the fault leaves them, then fitted around the reduction's transfers: a link
        # carries copies of the chunks already whole while others are still being reduced
        spread = _spread(backend, after, opts, state, whole_at, free, fault)
        holds = {(int(v), int(c)): max(float(t), fault.at_us) for v, c, t in
                 zip(state.hold_npu.tolist(), state.hold_chunk.tolist(), state.hold_time.tolist())}
        for c, t in whole_at.items():
            holds[(int(col[c]), c)] = min(holds.get((int(col[c]), c), np.inf), t)
        parts.append(fit_copies(problem, parts[0] if parts else Schedule.empty(), spread, holds, free))
    return Schedule.concat(parts) if parts else Schedule.empty()


def _trees(backend, problem: Problem, opts, fault: Fault, chunks, col) -> Schedule:
    """A fresh reduction of ``chunks`` into their collectors over the surviving links (times from 0)."""
    n = problem.num_npus
    topo = problem.topology
    failed = {(int(u), int(v)) for u, v in zip(topo.src[~fault.surviving_links(topo)].tolist(),
                                               topo.dst[~fault.surviving_links(topo)].tolist())}
    sub = Problem(topo, Collective("custom", demand=table(
        n, problem.chunk_bytes, [[]] * len(chunks), [[int(col[c])] for c in chunks], ["reduce"] * len(chunks))))

    def copy_solve(mp: Problem) -> Schedule:
        t = mp.topology
        # a reversed link v->u is the real link u->v
        keep = np.array([(int(b), int(a)) not in failed for a, b in zip(t.src.tolist(), t.dst.tolist())], bool)
        return _solve_from(backend, mp, opts, np.asarray(mp.sources, np.int64), np.arange(mp.num_chunks),
                           np.zeros(mp.num_chunks), np.zeros(mp.num_links), links=keep)

    return mirrored(sub, copy_solve).with_chunks(chunks)


def _pruned(problem: Problem, tree: Schedule, pieces: dict) -> tuple[Schedule, set]:
    """The rows of ``tree`` that carry pieces, with their ops (the module docstring), and the (NPU, chunk) pairs
    whose stale partial sum the first arrival replaces (the placement keeps that arrival first)."""
    n = problem.num_npus
    holder = {(v, c) for c, own in pieces.items() for v, _, _ in own}
    got: set = set()          # (npu, chunk) that received something after the fault
    keep, ops = [], []
    relays = set()
    order = np.lexsort((tree.end_us, tree.start_us))
    for i in order.tolist():
        u, v, c = int(tree.src[i]), int(tree.dst[i]), int(tree.chunk[i])
        if u < n and (u, c) not in holder and (u, c) not in got:
            continue   # a stale partial sum only: nothing to send
        keep.append(i)
        if v < n and (v, c) not in holder and (v, c) not in got:
            ops.append(COPY)   # replaces the relay's stale partial sum
            relays.add((v, c))
        else:
            ops.append(REDUCE)
        if v < n:
            got.add((v, c))
    return tree.take(np.asarray(keep, np.int64)).with_op(ops), relays


def _place_reduce(problem: Problem, sched: Schedule, free, ready: dict, at_us: float, relays=frozenset(),
                  gaps: bool = False) -> Schedule:
    """``sched`` placed after the fault in the order of its planned starts: each reduction group (one chunk,
    receiver and planned time) as soon as its links are free and each sender has received every partial sum the
    plan sends it first, lasting as planned."""
    T = len(sched)
    if not T:
        return sched
    row, link = row_link_pairs(problem.topology, sched)
    per = [[] for _ in range(T)]
    for r_, l_ in zip(row.tolist(), link.tolist()):
        per[r_].append(l_)
    if sched.route is None:   # point-to-point: every row lands on its own
        inv = np.arange(T)
    else:   # a fabric: the rows of one reduction group share the links from where they merge
        key = np.stack([sched.chunk, sched.dst, np.round(sched.start_us, 9), np.round(sched.end_us, 9)], 1)
        _, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.ravel()
        # except into a relay: its first arrival replaces its stale sum alone, the others land after it one by one
        into_relay = np.array([(int(v), int(c)) in relays for v, c in zip(sched.dst.tolist(), sched.chunk.tolist())],
                              bool)
        inv = np.where(into_relay, inv.max() + 1 + np.arange(T), inv)
    members_of: dict = {}
    for i in np.argsort(sched.start_us, kind="stable").tolist():
        members_of.setdefault(int(inv[i]), []).append(i)
    members_of = {g: np.asarray(m, np.int64) for g, m in members_of.items()}
    order = sorted(members_of, key=lambda g: float(sched.start_us[members_of[g][0]]))
    free = np.asarray(free, np.float64).copy()
    first_free = free.copy()   # with gaps: a link is taken from here on only where a group holds it
    busy: dict = {}
    got = dict(ready)   # (npu, chunk) -> when it has every partial sum its plan sent it so far
    start = np.zeros(T)
    n = problem.num_npus
    op = sched.op.copy()
    margin = 1e-6 * max(1.0, at_us)
    landed: dict = {}   # (npu, chunk) -> end of its latest arrival, at a relay that replaces its stale sum
    for g in order:
        mem = members_of[g]
        links = sorted({l for i in mem.tolist() for l in per[i]})
        senders = [(int(sched.src[i]), int(sched.chunk[i])) for i in mem.tolist()]
        dur = float(sched.end_us[mem[0]] - sched.start_us[mem[0]])
        link_free = first_free if gaps else free
        t0 = max([at_us] + [link_free[l] for l in links] + [got.get(k, at_us) for k in senders if k[0] < n])
        rk = (int(sched.dst[mem[0]]), int(sched.chunk[mem[0]]))
        if rk in relays and rk in landed:
            # the relay's first arrival replaces its stale partial sum (a copy), the later ones add to it: they
            # must land strictly after it, or the replay could not tell their order
            t0 = max(t0, landed[rk] + margin - dur)
        if gaps:   # any gap the groups placed so far leave on its links
            t0 = earliest_idle(busy, links, t0, dur, 1e-9 * max(1.0, at_us))
            for l in links:
                busy.setdefault(l, []).append((t0, t0 + dur))
        if rk in relays:
            op[mem] = REDUCE if rk in landed else COPY
            landed[rk] = t0 + dur
        start[mem] = t0
        for l in links:
            free[l] = t0 + dur
        v, c = int(sched.dst[mem[0]]), int(sched.chunk[mem[0]])
        got[(v, c)] = max(got.get((v, c), at_us), t0 + dur)
    dur = sched.end_us - sched.start_us
    return Schedule(sched.chunk, sched.src, sched.dst, start, start + dur, op, route=sched.route)


def _spread(backend, problem: Problem, opts, state: FaultState, whole_at: dict, free, fault: Fault) -> Schedule:
    """All-Reduce: each whole chunk copied to every NPU that lacks it, from its collector once reduced and from
    every NPU that already held it whole at the fault."""
    C = problem.num_chunks
    col = collector_of(problem)
    hv = list(np.asarray(state.hold_npu, np.int64).tolist())
    hc = list(np.asarray(state.hold_chunk, np.int64).tolist())
    ht = [max(float(t), fault.at_us) for t in np.asarray(state.hold_time, np.float64).tolist()]
    for c, t in whole_at.items():
        hv.append(int(col[c])), hc.append(int(c)), ht.append(t)
    ag = Problem(problem.topology, Collective("all_gather", problem.collective.chunks_per_npu,
                                              problem.collective.buffer_mib))
    if ag.num_chunks != C:
        raise TacosError("the All-Gather phase has another chunk count")
    keep = fault.surviving_links(problem.topology)
    s = _solve_from(backend, ag, opts, hv, hc, ht, free, links=keep)
    return s

