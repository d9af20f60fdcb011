"""The hierarchical baseline (``solver=hier``): what practitioners run on multi-tier clusters today.

NCCL-style two levels, detected from the topology alone (:mod:`tacos_bench.topology.tiers`):

* **groups**: the finest partition into strongly connected groups of faster links (servers);
* **rails**: the connected components of the links between groups; the structure is served when every
  group has the same number of NPUs and every rail holds exactly one NPU of each group (NPU ``i`` of every
  server), otherwise the solver stops with a one-line reason.

All-Gather: every rail runs an All-Gather of its members' chunks over the rail's own links (the links of
different rails are disjoint, so the rails run side by side); every NPU then forwards each chunk it holds to
its group peers over the fast links, as the chunk arrives (shortest paths inside the group, each link
first-come first-served). ``rail_algorithm`` picks the rail All-Gather: ``greedy`` (the TACOS matcher with
``chunk_order=rarest matching=maximum``, optimal on tori and meshes) or ``ring`` (the ring baseline).
Reduce-Scatter and All-Reduce come from :mod:`solvers.compose` like every other backend's. An All-Gather of
more than ``COMPACT_MIN_ROWS`` transfers whose groups are complete (every NPU linked to each peer) is built by
:mod:`solvers.greedy.decomposition` instead and streamed to a compact schedule (40,000 NPUs: docs/scale.md).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import hetero_cluster
>>> from tacos_bench.verify import verify
>>> p = Problem(hetero_cluster(2, 2, 4), Collective("all_gather", 1, 64))
>>> r = HierarchicalSolver().solve(p)
>>> r.stats["hier_groups"], r.stats["hier_rails"], verify(p, r.schedule).valid
(4, 4, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.collective import ALL_GATHER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

from ..plan import NO_PRED, Holdings, Plan, Router, send_path
from ..base import CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_OVERLAP, CAP_RANDOMIZED, CAP_REDUCE_SCATTER, Solver, SolveResult
from ..compose import solve_collective
from .hierarchy import detect_hierarchy, rail_problem
from .options import COMPACT_MIN_ROWS
from .decomposition import hier_compact_all_gather, warmup as decomposition_warmup
from .engine import warmup as greedy_warmup
from ..options import SolverOptions, option
from .stats import GREEDY_STATS

RAIL_ALGORITHMS = ("greedy", "ring")


@dataclass(frozen=True)
class HierOptions(SolverOptions):
    rail_algorithm: str = option("greedy", choices=RAIL_ALGORITHMS,
                                 doc="All-Gather on each rail: greedy (TACOS, rarest + maximum) or ring")


def _rail_all_gather(problem: Problem, members: np.ndarray, algorithm: str, seed: int) -> Schedule:
    """The All-Gather of the rail's own chunks over the rail's links, in the problem's chunk ids."""
    from ..base import get_solver

    sub, ids = rail_problem(problem, members)
    N, n = problem.num_npus, len(ids)
    opts = {"chunk_order": "rarest", "matching": "maximum", "seed": seed} if algorithm == "greedy" else {}
    s = get_solver("greedy" if algorithm == "greedy" else "ring").solve(sub, opts).schedule
    chunk = (s.chunk // n) * N + ids[s.chunk % n]
    return Schedule(chunk, ids[s.src], ids[s.dst], s.start_us, s.end_us, s.op)


def hierarchical_all_gather(problem: Problem, algorithm: str = "greedy", seed: int = 0) -> tuple[Schedule, dict]:
    """Rails first, then every NPU forwards what it holds to its group peers as it arrives."""
    h = detect_hierarchy(problem)
    topo = problem.topology
    N, C = problem.num_npus, problem.num_chunks
    rails = Schedule.concat([_rail_all_gather(problem, r, algorithm, seed) for r in h.rails])
    plan = Plan(topo, problem.link_time_us, C)
    have = Holdings(N, C)
    lk = topo.link_ids(rails.src, rails.dst)
    # the rail transfers keep their times (their links carry nothing else); each one a plan node
    order = np.argsort(rails.start_us, kind="stable")
    arrival: dict[tuple[int, int], int] = {}
    prev_on = {}
    for i in order.tolist():
        c, d = int(rails.chunk[i]), int(rails.dst[i])
        pred = prev_on.get(int(lk[i]), NO_PRED)
        tid = plan.transfer(c, int(lk[i]), COPY, (pred,) if pred >= 0 else (), release=float(rails.start_us[i]))
        prev_on[int(lk[i])] = tid
        if (d, c) not in arrival:
            arrival[(d, c)] = tid
            have.set(c, d, tid)
    # intra-group forwarding over the fast links only
    w = np.asarray(problem.link_time_us, dtype=np.float64).copy()
    w[h.group[np.asarray(topo.src)] != h.group[np.asarray(topo.dst)]] = np.inf
    router = Router(topo, w)
    members = [np.flatnonzero(h.group == k).tolist() for k in range(h.num_groups)]
    holders = sorted(((0.0, c % N, c, NO_PRED) for c in range(C)), key=lambda x: x[0])
    holders += sorted(((float(rails.end_us[i]), int(rails.dst[i]), int(rails.chunk[i]), arrival[(int(rails.dst[i]),
                       int(rails.chunk[i]))]) for i in order.tolist()
                       if arrival[(int(rails.dst[i]), int(rails.chunk[i]))] >= 0), key=lambda x: x[0])
    for _, u, c, tid in holders:
        if have.get(c, u) != tid:   # a duplicate rail delivery: forward the first copy only
            continue
        for v in members[h.group[u]]:
            if v != u:
                send_path(plan, c, router.path(u, v), COPY, tid, prio=0, have=have)
    sched = plan.run()
    stats = {"hier_groups": h.num_groups, "hier_rails": len(h.rails), "hier_group_size": len(h.rails),
             "hier_rail_time_us": rails.makespan_us, "hier_rail_algorithm": algorithm}
    return sched, stats


class HierarchicalSolver(Solver):
    """Hierarchical (NCCL-style) All-Gather / Reduce-Scatter / All-Reduce: per-rail phases between groups and
    forwarding inside groups. Options: :class:`HierOptions`."""

    name = "hier"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_OVERLAP, CAP_RANDOMIZED})
    Options = HierOptions
    Stats = GREEDY_STATS

    def warmup(self, problem: Problem | None = None, opts: HierOptions | None = None) -> float:
        return greedy_warmup(("counted", "listed", "scale")) + decomposition_warmup()

    def refusal(self, problem: Problem) -> str | None:
        """Also a topology without groups of faster links of equal size (no hierarchy to run on): said before
        the run, so another backend's refusal never suggests hier for it."""
        why = super().refusal(problem)
        if why is None and problem.num_npus > 1:
            try:
                detect_hierarchy(problem)
            except SolverError as e:
                return str(e)
        return why

    def _solve(self, problem: Problem, opts: HierOptions) -> SolveResult:
        import time

        t0 = time.perf_counter()
        stats: dict = {}
        # the reason, if any, names the user's topology (not a reversed copy)
        h = detect_hierarchy(problem) if problem.num_npus > 1 else None

        def ag(p: Problem) -> Schedule:
            s, st = hierarchical_all_gather(p, opts.rail_algorithm, opts.seed)
            stats.update(st)
            return s

        sched = None
        if problem.kind == ALL_GATHER and (problem.num_npus - 1) * problem.num_chunks > COMPACT_MIN_ROWS:
            # too many transfers for a table: the same construction streamed, where groups are complete
            try:
                sched = hier_compact_all_gather(problem, seed=opts.seed, threads=opts.num_threads, hierarchy=h)
            except SolverError as e:   # an incomplete group; a rail that cannot be served fails the table path too
                stats["compact_skipped"] = str(e)
            else:
                stats.update({"hier_groups": sched.meta["producer"]["groups"],
                              "hier_rails": sched.meta["producer"]["rails"], "output": "compact"})
        if sched is None:
            sched = Schedule.empty() if problem.num_npus == 1 else solve_collective(problem, ag)
        stats["transfers"] = len(sched)
        return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=time.perf_counter() - t0,
                           stats=stats)
