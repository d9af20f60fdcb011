"""Direct Broadcast, Gather, Scatter and All-to-All: each chunk along its own shortest path, all at once
(the plan :class:`~solvers.baselines.classic.DirectSolver` uses for these collectives)."""

from __future__ import annotations

import numpy as np

from tacos_bench.collective import ALL_TO_ALL, BROADCAST, GATHER, SCATTER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY

from ..plan import NO_PRED, Holdings, Plan, Router, send_path


def source_holdings(problem: Problem) -> Holdings:
    # Holdings(owners_hold=True) assumes the All-Gather owner c mod N, wrong for every other copy collective
    have = Holdings(problem.num_npus, problem.num_chunks, owners_hold=False)
    n, a = have.n, have.a
    for c, s in enumerate(problem.sources.tolist()):
        a[c * n + s] = NO_PRED
    return have


def plan_start(problem: Problem) -> tuple[Plan, Router, Holdings]:
    return (Plan(problem.topology, problem.link_time_us, problem.num_chunks),
            Router(problem.topology, problem.link_time_us), source_holdings(problem))


def direct_plan(problem: Problem, mirror: bool = False) -> Plan:
    """Direct Broadcast, Gather, Scatter or All-to-All: each chunk along its own shortest path, all at once.

    Broadcast: the root sends every chunk to every other NPU separately (destinations in rotated order
    ``root+1, root+2, ...``); relays store and forward and, without ``mirror``, may receive a chunk once per
    message crossing them (Direct's cost off a switch). ``mirror=True`` never re-sends an NPU a chunk it
    holds, so the paths form the root's shortest-path tree (the Broadcast whose time reversal is Reduce).
    Gather, Scatter, All-to-All: each chunk from its source to its destination, pairs in rotated order
    (destination offset ``1, 2, ...`` first), so the first hops of short messages are queued first.

    Parameters
    ----------
    problem : Problem
        A Broadcast, Gather, Scatter or All-to-All.
    mirror : bool
        De-duplicate (see above); only Broadcast has duplicates.

    Returns
    -------
    Plan
        Untimed; :meth:`~solvers.plan.Plan.run` gives the schedule.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(4, bidirectional=False), Collective("gather", 1, 4, root=0))
    >>> s = direct_plan(p).run()
    >>> len(s), round(s.makespan_us / float(p.link_time_us[0]), 9)  # 3 + 2 + 1 hops; link 3->0 carries 3
    (6, 3.0)
    """
    kind = problem.kind
    if kind == BROADCAST:
        return _direct_broadcast(problem, mirror)
    if kind not in (GATHER, SCATTER, ALL_TO_ALL) and not problem.collective.unicast:   # a unicast chunk table too
        raise SolverError(f"direct_plan builds broadcast, gather, scatter and all_to_all, not {kind}")
    n, C = problem.num_npus, problem.num_chunks
    plan, router, _ = plan_start(problem)
    src, dst = problem.sources, problem.destinations
    order = np.lexsort((np.arange(C), src, (dst - src) % n))
    for c in order[src[order] != dst[order]].tolist():
        send_path(plan, c, router.path(int(src[c]), int(dst[c])), COPY, NO_PRED)
    return plan


def _direct_broadcast(problem: Problem, mirror: bool) -> Plan:
    n, K, root = problem.num_npus, problem.num_chunks, problem.collective.root
    plan, router, have = plan_start(problem)
    for j in range(1, n):
        path = router.path(root, (root + j) % n)
        for k in range(K):
            send_path(plan, k, path, COPY, NO_PRED, have=have if mirror else None)
    return plan
