"""Build Reduce-Scatter and All-Reduce from an All-Gather synthesizer.

Reduce-Scatter is the All-Gather on the reversed topology with time reversed:
an All-Gather transfer ``v->u`` (on the reversed link) over ``[s, e]`` becomes
the reduction ``u->v`` over ``[T-e, T-s]`` on the real link. Every NPU then
sends its partial sum of a chunk exactly once, after all the partial sums it
waits for have arrived, so no contribution is counted twice.

All-Reduce is that Reduce-Scatter followed, back to back, by an All-Gather on
the original topology (the All-Gather starts when the last reduction lands).
Overlapping the two phases per chunk would be valid but is not done here.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
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


def solve_via_all_gather(problem: Problem, ag_solve: AllGatherSolve) -> Schedule:
    """Schedule any supported collective given an All-Gather synthesizer.

    Parameters
    ----------
    problem : Problem
        All-Gather, Reduce-Scatter or All-Reduce.
    ag_solve : callable
        Maps an All-Gather :class:`Problem` to a :class:`Schedule`.
    """
    kind = problem.kind
    if kind == ALL_GATHER:
        return ag_solve(problem)
    rs = reduce_scatter_from_all_gather(problem, ag_solve)
    if kind == REDUCE_SCATTER:
        return rs
    assert kind == ALL_REDUCE
    ag = ag_solve(problem.with_collective(ALL_GATHER))
    return Schedule.concat([rs, ag.shifted(rs.makespan_us)])
