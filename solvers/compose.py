"""Every collective from a copy synthesizer, in one place for every backend.

Copy collectives (all_gather, broadcast, gather, scatter, all_to_all) are the synthesizer's own. A
reducing collective with one destination per chunk is its copy mirror (:meth:`Problem.mirror`) on the
reversed topology with time reversed: Reduce-Scatter from All-Gather, Reduce from Broadcast. A transfer
``v->u`` (on the reversed link) over ``[s, e]`` becomes the reduction ``u->v`` over ``[T-e, T-s]`` on the
real link. Every NPU then sends its partial sum of a chunk exactly once, after all the partial sums it
waits for have arrived, so no contribution is counted twice.

All-Reduce is that Reduce-Scatter followed by an All-Gather on the original
topology, composed in one of two ways (``collective.overlap``):

``overlap=False``
    a barrier: the All-Gather starts when the last reduction lands (the
    All-Gather schedule shifted by the Reduce-Scatter's makespan);
``overlap=True``
    per link and chunk: the All-Gather schedule is replayed as early as its
    own order allows (:func:`retime`): a chunk leaves its owner once its
    reduction is complete there, a link carries All-Gather traffic after its
    last Reduce-Scatter transfer and in the All-Gather's own order, and every
    transfer starts once its sender holds the chunk. Never slower than the
    barrier (the shifted schedule satisfies the same constraints).

Every backend that builds All-Reduce from its two phases goes through
:func:`solve_collective`, so comparisons between backends are on equal terms.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> from tacos_bench.verify import verify
>>> from solvers.baselines.trivial import bfs_all_gather
>>> p = Problem(ring(4), Collective("all_reduce", 1, 64, overlap=False))
>>> barrier = solve_collective(p, bfs_all_gather)
>>> po = Problem(ring(4), Collective("all_reduce", 1, 64, overlap=True))
>>> overlapped = solve_collective(po, bfs_all_gather)
>>> verify(po, overlapped).collective_time_us <= verify(p, barrier).collective_time_us
True
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit, types
from numba.typed import Dict

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from tacos_bench.collective import REDUCE as REDUCE_KIND
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import REDUCE, Schedule

from .fabric_routes import route_links

AllGatherSolve = Callable[[Problem], Schedule]


def first_arrivals(problem: Problem, schedule: Schedule) -> Schedule:
    """Keep one transfer per (receiver, chunk): the earliest arrival.

    Redundant copies (a chunk delivered twice, or back to its source) are harmless
    in a copy collective but would double-count partial sums once time is reversed.
    """
    if not len(schedule):
        return schedule
    C = problem.num_chunks
    keep_owner = schedule.dst != problem.sources[schedule.chunk]
    key = schedule.dst.astype(np.int64) * C + schedule.chunk
    order = np.lexsort((schedule.start_us, schedule.end_us, key))
    k = key[order]
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    # a switch of a fabric may receive a chunk several times (it forwards each copy once): keep them all
    first |= schedule.dst[order] >= problem.num_npus
    idx = order[first]
    idx = idx[keep_owner[idx]]
    kept = schedule.take(np.sort(idx))
    return _without_dead_ends(problem, kept) if problem.collective.general else kept


def _without_dead_ends(problem: Problem, schedule: Schedule) -> Schedule:
    """Drop, until none is left, every transfer into an NPU that does not need its chunk and sends it nowhere
    after (a relay whose onward copy lost to an earlier arrival): time-reversed, such a relay would send a
    reduction of nothing."""
    C = problem.num_chunks
    dv, dc = problem.demand.required_pairs()
    needed = np.unique(dv.astype(np.int64) * C + dc)
    while len(schedule):
        into = schedule.dst.astype(np.int64) * C + schedule.chunk
        out_of = np.unique(schedule.src.astype(np.int64) * C + schedule.chunk)
        dead = ~np.isin(into, needed) & ~np.isin(into, out_of) & (schedule.dst < problem.num_npus)
        if not dead.any():
            break
        schedule = schedule.take(np.flatnonzero(~dead))
    return schedule


def mirrored(problem: Problem, copy_solve: AllGatherSolve) -> Schedule:
    """A one-destination reducing collective (Reduce-Scatter, Reduce) from its copy mirror on the reversed
    topology, time-reversed."""
    rev = problem.mirror() if problem.kind != ALL_REDUCE else problem.reversed_all_gather()
    return first_arrivals(rev, copy_solve(rev)).time_reversed(op=REDUCE)


def reduce_scatter_from_all_gather(problem: Problem, ag_solve: AllGatherSolve) -> Schedule:
    """Reduce-Scatter schedule from an All-Gather on the reversed topology."""
    return mirrored(problem.with_collective(REDUCE_SCATTER), ag_solve)


def per_destination(problem: Problem, copy_solve: AllGatherSolve) -> Schedule:
    """A copy table with subsets of destinations (a chunk table, :mod:`tacos_bench.demand`) solved as one
    unicast chunk per (chunk, destination) pair (:meth:`~tacos_bench.demand.Demand.expanded_unicast`); each row
    then carries its chunk's id again. Valid for copies (a relay may receive a chunk twice), but without
    multicast sharing: a chunk for two destinations behind one link crosses it twice."""
    from tacos_bench.collective import Collective

    demand, parent = problem.demand.expanded_unicast()
    return copy_solve(Problem(problem.topology, Collective(problem.kind, demand=demand))).with_chunks(parent)


def needs_expansion(problem: Problem) -> bool:
    """A copy chunk table that is neither unicast nor every-NPU multicast: :func:`per_destination`."""
    c = problem.collective
    return c.general and c.copies and not (c.unicast or c.multicast)


def solve_collective(problem: Problem, ag_solve: AllGatherSolve, *,
                     rs_solve: AllGatherSolve | None = None) -> Schedule:
    """Schedule any collective given a copy synthesizer.

    Parameters
    ----------
    problem : Problem
        Any collective; All-Reduce follows ``problem.collective.overlap``.
    ag_solve : callable
        Maps a copy-collective :class:`Problem` (All-Gather, Broadcast, Gather, Scatter, All-to-All) to a
        :class:`Schedule`; it is handed only the kinds this composition needs.
    rs_solve : callable, optional
        A different synthesizer for the mirrored copy problems that become reductions (default
        ``ag_solve``); a baseline whose mirrored algorithm must never send an NPU a chunk it holds
        passes its own.
    """
    kind = problem.kind
    coll = problem.collective
    if coll.copies:
        return ag_solve(problem)
    if kind in (REDUCE_SCATTER, REDUCE_KIND) or (coll.demand is not None and coll.reduces
                                                 and coll.demand.one_destination):
        # a reducing chunk table into one destination per chunk mirrors to a copy table (MoE combine: dispatch)
        return mirrored(problem, rs_solve or ag_solve)
    if kind != ALL_REDUCE:
        raise SolverError(f"no composition for collective {kind!r}")
    rs = mirrored(problem, rs_solve or ag_solve)
    ag = ag_solve(problem.with_collective(ALL_GATHER))
    return all_reduce(problem, rs, ag)


def all_reduce(problem: Problem, rs: Schedule, ag: Schedule) -> Schedule:
    """All-Reduce from a Reduce-Scatter and an All-Gather schedule (``problem.collective.overlap``)."""
    if not problem.collective.overlap:
        return Schedule.concat([rs, ag.shifted(rs.makespan_us)])
    return Schedule.concat([rs, retime(problem.with_collective(ALL_GATHER), ag, link_free=link_last_use(problem, rs),
                                       chunk_ready=chunk_done_at_owner(problem, rs))])


def link_last_use(problem: Problem, schedule: Schedule) -> np.ndarray:
    """Per-link end of the last transfer in ``schedule`` (0 where unused; a routed row of a switched fabric
    counts on every link of its route)."""
    free = np.zeros(problem.num_links)
    if len(schedule) and schedule.route is not None:
        for links, end in zip(route_links(problem.topology, schedule), schedule.end_us.tolist()):
            np.maximum.at(free, links, end)
    elif len(schedule):
        lk = problem.topology.link_ids(schedule.src, schedule.dst)
        np.maximum.at(free, lk, schedule.end_us)
    return free


def chunk_done_at_owner(problem: Problem, schedule: Schedule) -> np.ndarray:
    """Per-chunk time of the last arrival at the chunk's owner (0 if none)."""
    done = np.zeros(problem.num_chunks)
    if len(schedule):
        at_owner = schedule.dst == schedule.chunk % problem.num_npus
        np.maximum.at(done, schedule.chunk[at_owner], schedule.end_us[at_owner])
    return done


def retime(problem: Problem, schedule: Schedule, *, link_free: np.ndarray, chunk_ready: np.ndarray) -> Schedule:
    """Replay a copy schedule as early as possible, keeping each link's order of transfers.

    A transfer starts at the latest of: its link's previous transfer ending
    (initially ``link_free[l]``), its sender holding the chunk (an owner from
    ``chunk_ready[c]`` at its source, anyone else from its earliest retimed arrival). It
    lasts its link's chunk time (``problem.link_time_us``). Transfers are
    replayed in the order of their original start, so the sender's arrival is
    always retimed first in a causal schedule.
    """
    if not len(schedule):
        return schedule
    n, C = problem.num_npus, problem.num_chunks
    # the owners' holdings as a start state: the dense placement kernel of retime_from
    start, end = _retime_dense(*_placement_args(problem, schedule, link_free),
                               np.asarray(problem.sources, np.int64) * C + np.arange(C, dtype=np.int64),
                               np.asarray(chunk_ready, dtype=np.float64), C, n * C)
    return Schedule(schedule.chunk, schedule.src, schedule.dst, start, end, schedule.op)


def _placement_args(problem: Problem, schedule: Schedule, link_free: np.ndarray) -> tuple:
    """The arrays both placement kernels start from: transfers in original start order, their links
    (checked to exist), chunks, endpoints, the link times and a copy of ``link_free`` they update."""
    link = problem.topology.link_ids(schedule.src, schedule.dst)
    if np.any(link < 0):
        raise SolverError("retime: the schedule uses a link the topology does not have")
    order = np.lexsort((schedule.end_us, schedule.start_us))
    return (order, link, schedule.chunk.astype(np.int64), schedule.src.astype(np.int64),
            schedule.dst.astype(np.int64), np.asarray(problem.link_time_us, dtype=np.float64),
            np.asarray(link_free, dtype=np.float64).copy())


# the dense (NPU, chunk) table of retime_from stays below this many entries; beyond it a hash map
RETIME_DENSE_MAX = 50_000_000


def retime_from(problem: Problem, schedule: Schedule, *, link_free: np.ndarray, hold_npu: np.ndarray,
                hold_chunk: np.ndarray, hold_time: np.ndarray) -> Schedule:
    """:func:`retime` from an arbitrary state: NPU ``hold_npu[i]`` holds chunk ``hold_chunk[i]`` from
    ``hold_time[i]`` on (the state a fault leaves, :mod:`solvers.repair`). Links with ``link_free = inf``
    must not be used."""
    if not len(schedule):
        return schedule
    n, C = problem.num_npus, problem.num_chunks
    hold_key = np.asarray(hold_npu, np.int64) * C + np.asarray(hold_chunk, np.int64)
    args = (*_placement_args(problem, schedule, link_free), hold_key, np.asarray(hold_time, np.float64), C)
    if n * C <= RETIME_DENSE_MAX:
        start, end = _retime_dense(*args, n * C)
    else:
        start, end = _retime_sparse(*args)
    if not np.all(np.isfinite(end)):
        raise SolverError("retime: a transfer's sender never holds its chunk, or its link has failed")
    return Schedule(schedule.chunk, schedule.src, schedule.dst, start, end, schedule.op)


def warm_retime() -> None:
    """Load (or compile) the placement kernels, so no timed region pays for it."""
    one = np.zeros(1, np.int64)
    for fn, extra in ((_retime_dense, (1,)), (_retime_sparse, ())):
        fn(one, one, one, one, one, np.ones(1), np.zeros(1), one, np.zeros(1), 1, *extra)


@njit(cache=True)
def _retime_dense(order, link, chunk, src, dst, ltime, free, hkey, htime, C, size):
    hold = np.full(size, np.inf)
    for i in range(hkey.shape[0]):
        hold[hkey[i]] = min(hold[hkey[i]], htime[i])
    start = np.empty(order.shape[0])
    end = np.empty(order.shape[0])
    for k in range(order.shape[0]):
        i = order[k]
        s = max(free[link[i]], hold[src[i] * C + chunk[i]])
        e = s + ltime[link[i]]
        free[link[i]] = e
        start[i] = s
        end[i] = e
        key = dst[i] * C + chunk[i]
        if e < hold[key]:
            hold[key] = e
    return start, end


@njit(cache=True)
def _retime_sparse(order, link, chunk, src, dst, ltime, free, hkey, htime, C):
    hold = Dict.empty(key_type=types.int64, value_type=types.float64)
    for i in range(hkey.shape[0]):
        hold[hkey[i]] = min(hold.get(hkey[i], np.inf), htime[i])
    start = np.empty(order.shape[0])
    end = np.empty(order.shape[0])
    for k in range(order.shape[0]):
        i = order[k]
        s = max(free[link[i]], hold.get(src[i] * C + chunk[i], np.inf))
        e = s + ltime[link[i]]
        free[link[i]] = e
        start[i] = s
        end[i] = e
        key = dst[i] * C + chunk[i]
        if e < hold.get(key, np.inf):
            hold[key] = e
    return start, end


def fit_copies(problem: Problem, fixed: Schedule, rows: Schedule, holds: dict, free) -> Schedule:
    """``rows`` (copies of whole chunks) placed in the order of their planned starts, each at the earliest time its
    sender holds the chunk and every link it holds is idle for its whole duration, around the transfers of
    ``fixed`` and the copies placed before it (a link may carry a copy in a gap the other transfers leave).
    ``holds`` maps ``(npu, chunk)`` to when it holds the chunk whole; ``free`` is when each link is free at all."""
    from tacos_bench.faults import row_link_pairs

    if not len(rows):
        return rows
    topo = problem.topology
    busy: dict = {}
    for sched in (fixed,):
        if len(sched):
            r_, l_ = row_link_pairs(topo, sched)
            for i, l in zip(r_.tolist(), l_.tolist()):
                busy.setdefault(l, []).append((float(sched.start_us[i]), float(sched.end_us[i])))
    for l in busy:
        busy[l].sort()
    r_, l_ = row_link_pairs(topo, rows)
    per = [[] for _ in range(len(rows))]
    for i, l in zip(r_.tolist(), l_.tolist()):
        per[i].append(l)
    tol = 1e-9 * max(1.0, float(rows.end_us.max()))
    have = dict(holds)
    start = np.zeros(len(rows))
    # the rows of one multicast group (chunk, sender, planned time) move together
    key = np.stack([rows.chunk, rows.src, np.round(rows.start_us, 9), np.round(rows.end_us, 9)], 1)
    _, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.ravel() if rows.route is not None else np.arange(len(rows))
    groups: dict = {}
    for i in np.argsort(rows.start_us, kind="stable").tolist():
        groups.setdefault(int(inv[i]), []).append(i)
    for mem in sorted(groups.values(), key=lambda m: float(rows.start_us[m[0]])):
        i0 = mem[0]
        c, u = int(rows.chunk[i0]), int(rows.src[i0])
        dur = float(rows.end_us[i0] - rows.start_us[i0])
        links = sorted({l for i in mem for l in per[i]})
        t = max(have.get((u, c), np.inf) if u < problem.num_npus else float(rows.start_us[i0]),
                max((float(free[l]) for l in links), default=0.0))
        if not np.isfinite(t):
            raise SolverError(f"chunk {c}: NPU {u} never holds it whole")
        t = earliest_idle(busy, links, t, dur, tol)
        for i in mem:
            start[i] = t
            v = int(rows.dst[i])
            have[(v, c)] = min(have.get((v, c), np.inf), t + dur)
        for l in links:
            busy.setdefault(l, []).append((t, t + dur))
            busy[l].sort()
    return Schedule(rows.chunk, rows.src, rows.dst, start, start + (rows.end_us - rows.start_us), rows.op,
                    route=rows.route)


def earliest_idle(busy: dict, links, t: float, dur: float, tol: float) -> float:
    """The earliest start from ``t`` at which a transfer of ``dur`` finds every link of ``links`` idle, ``busy``
    mapping a link to its ``(start, end)`` occupancies (a gap between them may do)."""
    moved = True
    while moved:
        moved = False
        for l in links:
            for a, b in busy.get(l, ()):
                if a < t + dur - tol and b > t + tol:
                    t, moved = b, True
    return t
