"""Every collective from an All-Gather synthesizer, in one place for every backend.

Reduce-Scatter is the All-Gather on the reversed topology with time reversed:
an All-Gather transfer ``v->u`` (on the reversed link) over ``[s, e]`` becomes
the reduction ``u->v`` over ``[T-e, T-s]`` on the real link. Every NPU then
sends its partial sum of a chunk exactly once, after all the partial sums it
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
>>> from tacos_bench.generators import ring
>>> from tacos_bench.verify import verify
>>> from solvers.trivial import bfs_all_gather
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
from numba import njit

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import REDUCE, Schedule

AllGatherSolve = Callable[[Problem], Schedule]


def first_arrivals(problem: Problem, schedule: Schedule) -> Schedule:
    """Keep one transfer per (receiver, chunk): the earliest arrival.

    Redundant copies (a chunk delivered twice, or back to its owner) are harmless
    in an All-Gather but would double-count partial sums once time is reversed.
    """
    if not len(schedule):
        return schedule
    C = problem.num_chunks
    keep_owner = schedule.dst != schedule.chunk % problem.num_npus
    key = schedule.dst.astype(np.int64) * C + schedule.chunk
    order = np.lexsort((schedule.start_us, schedule.end_us, key))
    k = key[order]
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    idx = order[first]
    idx = idx[keep_owner[idx]]
    return schedule.take(np.sort(idx))


def reduce_scatter_from_all_gather(problem: Problem, ag_solve: AllGatherSolve) -> Schedule:
    """Reduce-Scatter schedule from an All-Gather on the reversed topology."""
    rev = problem.reversed_all_gather()
    ag = first_arrivals(rev, ag_solve(rev))
    return ag.time_reversed(op=REDUCE)


def solve_collective(problem: Problem, ag_solve: AllGatherSolve, *,
                     rs_solve: AllGatherSolve | None = None) -> Schedule:
    """Schedule any supported collective given an All-Gather synthesizer.

    Parameters
    ----------
    problem : Problem
        All-Gather, Reduce-Scatter or All-Reduce; All-Reduce follows
        ``problem.collective.overlap``.
    ag_solve : callable
        Maps an All-Gather :class:`Problem` to a :class:`Schedule`.
    rs_solve : callable, optional
        A different synthesizer for the reversed All-Gather that becomes the
        Reduce-Scatter (default ``ag_solve``); a baseline whose mirrored
        algorithm must never send an NPU a chunk it holds passes its own.
    """
    kind = problem.kind
    if kind == ALL_GATHER:
        return ag_solve(problem)
    rs = reduce_scatter_from_all_gather(problem, rs_solve or ag_solve)
    if kind == REDUCE_SCATTER:
        return rs
    if kind != ALL_REDUCE:
        raise SolverError(f"no composition for collective {kind!r}")
    ag = ag_solve(problem.with_collective(ALL_GATHER))
    return all_reduce(problem, rs, ag)


def all_reduce(problem: Problem, rs: Schedule, ag: Schedule) -> Schedule:
    """All-Reduce from a Reduce-Scatter and an All-Gather schedule (``problem.collective.overlap``)."""
    if not problem.collective.overlap:
        return Schedule.concat([rs, ag.shifted(rs.makespan_us)])
    return Schedule.concat([rs, retime(problem, ag, link_free=link_last_use(problem, rs),
                                       chunk_ready=chunk_done_at_owner(problem, rs))])


def link_last_use(problem: Problem, schedule: Schedule) -> np.ndarray:
    """Per-link end of the last transfer in ``schedule`` (0 where unused)."""
    free = np.zeros(problem.num_links)
    if len(schedule):
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
    ``chunk_ready[c]``, anyone else from its earliest retimed arrival). It
    lasts its link's chunk time (``problem.link_time_us``). Transfers are
    replayed in the order of their original start, so the sender's arrival is
    always retimed first in a causal schedule.
    """
    if not len(schedule):
        return schedule
    topo = problem.topology
    link = topo.link_ids(schedule.src, schedule.dst)
    if np.any(link < 0):
        raise SolverError("retime: the schedule uses a link the topology does not have")
    order = np.lexsort((schedule.end_us, schedule.start_us))
    start, end = _retime(order, link, schedule.chunk, schedule.src, schedule.dst,
                         np.asarray(problem.link_time_us, dtype=np.float64),
                         np.asarray(link_free, dtype=np.float64).copy(),
                         np.asarray(chunk_ready, dtype=np.float64), problem.num_npus, problem.num_chunks)
    return Schedule(schedule.chunk, schedule.src, schedule.dst, start, end, schedule.op)


@njit(cache=True)
def _retime(order, link, chunk, src, dst, ltime, free, ready, n, C):
    hold = np.full(n * C, np.inf)
    for c in range(C):
        hold[(c % n) * C + c] = ready[c]
    T = order.shape[0]
    start = np.empty(T)
    end = np.empty(T)
    for k in range(T):
        i = order[k]
        lk = link[i]
        c = chunk[i]
        s = max(free[lk], hold[src[i] * C + c])
        e = s + ltime[lk]
        free[lk] = e
        start[i] = s
        end[i] = e
        key = dst[i] * C + c
        if e < hold[key]:
            hold[key] = e
    return start, end
