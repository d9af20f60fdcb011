"""The naive reference backend: store-and-forward along BFS trees.

Each chunk travels down the breadth-first (fewest hops) tree rooted at its
owner; transfers are list-scheduled chunk by chunk, each starting when its
parent has the chunk and the link is free. It is deliberately simple: a
correctness baseline and an upper bound, not a competitor.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

from ..base import CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_OVERLAP, CAP_REDUCE_SCATTER, Solver, SolveResult
from ..compose import solve_collective
from .stats import BFS_STATS


def _bfs_tree(problem: Problem, root: int) -> list[tuple[int, int, int]]:
    """(parent, child, link id) edges in BFS order."""
    topo = problem.topology
    ptr, nbr = topo.out_ptr.tolist(), topo.dst.tolist()
    seen = [False] * topo.num_npus
    seen[root] = True
    q, edges = deque([root]), []
    while q:
        u = q.popleft()
        for lid in range(ptr[u], ptr[u + 1]):
            w = nbr[lid]
            if not seen[w]:
                seen[w] = True
                edges.append((u, w, lid))
                q.append(w)
    return edges


def bfs_all_gather(problem: Problem) -> Schedule:
    n, C = problem.num_npus, problem.num_chunks
    lt = problem.link_time_us.tolist()
    trees = [_bfs_tree(problem, r) for r in range(n)]
    free = [0.0] * problem.num_links
    rows_c, rows_s, rows_d, rows_t0, rows_t1 = [], [], [], [], []
    for c in range(C):
        owner = c % n
        arrival = {owner: 0.0}
        for u, w, lid in trees[owner]:
            t0 = max(arrival[u], free[lid])
            t1 = t0 + lt[lid]
            free[lid] = t1
            arrival[w] = t1
            rows_c.append(c); rows_s.append(u); rows_d.append(w); rows_t0.append(t0); rows_t1.append(t1)
    return Schedule(rows_c, rows_s, rows_d, rows_t0, rows_t1, np.full(len(rows_c), COPY))


class BfsTreeSolver(Solver):
    """Naive store-and-forward along per-owner BFS trees (all collectives)."""

    name = "bfs"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_OVERLAP})
    Stats = BFS_STATS

    def _solve(self, problem, opts) -> SolveResult:
        t0 = time.perf_counter()
        sched = solve_collective(problem, bfs_all_gather)
        dt = time.perf_counter() - t0
        return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=dt,
                           stats={"transfers": len(sched)})
