"""The ``greedy`` and ``greedy_plus`` backends: a portfolio of candidates per network kind.

Both backends are the same portfolio (:mod:`solvers.portfolio`) run on every copy problem a collective is
composed of (:func:`solvers.compose.solve_collective`): on point-to-point topologies
:data:`solvers.greedy.candidates.COPY_CANDIDATES`, on switched fabrics
:func:`solvers.greedy.fabric_solver.fabric_candidates`, resumed from a state (a repair)
:data:`RESUME_CANDIDATES`. Which candidates run is a matter of options only: ``greedy``'s defaults leave the
TACOS rule alone (candidate ``rules``), ``greedy_plus``'s switch every candidate on; ``solver.candidates``
narrows the list by name or adds a plug-in by import path. The record names the winner (``candidate``), every
candidate tried (``candidates_tried``) and every one skipped with its reason (``candidates_skipped``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from tacos_bench.collective import ALL_GATHER, ALL_TO_ALL, GATHER, SCATTER
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..base import (CAP_DEMAND_COPY, CAP_DEMAND_REDUCE, CAP_DEMAND_UNICAST, CAP_FABRIC, CAP_FROM_STATE, CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_ALL_TO_ALL, CAP_BROADCAST, CAP_GATHER,
                    CAP_OVERLAP, CAP_RANDOMIZED, CAP_REDUCE, CAP_REDUCE_SCATTER, CAP_SCATTER, CAP_THREADS,
                    CAP_TIME_LIMIT, Solver, SolveResult, StartState)
from ..compose import needs_expansion, per_destination, solve_collective
from ..portfolio import SKIP_TIME_LIMIT, Candidate, PortfolioResult, RunContext, record_fields, run_portfolio, select
from .candidates import COPY_CANDIDATES, PREFER, Rules, greedy_run, stop_bound, _once
from .options import RESUME_RESERVE_TRIES, RESUME_RESERVE_WORK, GreedyOptions, GreedyPlusOptions
from .stats import GREEDY_STATS
from .relabelling import relabelling  # noqa: F401 - its home before the candidates moved out

# ---------------------------------------------------------------------------- resumed from a state
class ReversedGather(Candidate):
    """A gather's remainder built time-reversed, as a scatter from the root to each chunk's holder nearest it
    (``reversed_gather_resume``; routing=balanced)."""

    name = "reversed_gather"
    switch = "reversed_gather_resume"

    def applies(self, problem, ctx):
        if problem.kind != GATHER:
            return f"Gather only (this is {problem.kind})"
        return None if ctx.opts.routing == "balanced" else "routing=adaptive"

    def run(self, problem, ctx):
        from .engine import gather_resume_reversed

        rst: dict = {}
        sched = gather_resume_reversed(problem, ctx.start, ctx.opts, seed=ctx.opts.seed, stats=rst)
        ctx.run_stats[self.name] = rst
        return sched


class ReserveResume(Candidate):
    """A unicast remainder routed by reservation from the state (each chunk from any holder once its copy is
    there, links busy until their in-flight transfers end; up to ``RESUME_RESERVE_TRIES`` tie orders)."""

    name = "reserve_resume"
    switch = "reserve_resume"

    def applies(self, problem, ctx):
        kinds = (GATHER, SCATTER, ALL_TO_ALL)
        return None if problem.kind in kinds else f"Gather, Scatter, All-to-All only (this is {problem.kind})"

    def run(self, problem, ctx):
        from .reserve import reserve_schedule

        rst: dict = {}
        sched = reserve_schedule(problem, seed=ctx.opts.seed, tries=RESUME_RESERVE_TRIES, start=ctx.start,
                                 stats=rst, work=RESUME_RESERVE_WORK)
        ctx.run_stats[self.name] = rst
        return sched

    def warmup(self, problem, opts):
        from .reserve import warmup

        return _once("reserve", warmup)


class ResumeRules(Rules):
    """The greedy with the options' rules, from the state (every held copy a source)."""

    def warmup(self, problem, opts):
        from .engine import kernel_for, warmup

        return warmup((kernel_for(problem, opts, resume=True),))


RESUME_CANDIDATES: tuple[Candidate, ...] = (ResumeRules(), ReversedGather(), ReserveResume())


def placed_us(problem: Problem, start: StartState, sched: Schedule | None) -> float | None:
    """When ``sched`` would end once placed after the state's in-flight transfers (its own end without the
    state's time hints)."""
    if sched is None:
        return None
    if start.link_free is None or start.hold_time is None or not len(sched):
        return sched.makespan_us
    from ..compose import retime_from

    free = np.where(np.asarray(start.links, bool), np.asarray(start.link_free, np.float64), np.inf)
    return retime_from(problem, sched, link_free=free, hold_npu=start.hold_npu, hold_chunk=start.hold_chunk,
                       hold_time=start.hold_time).makespan_us


# ---------------------------------------------------------------------------- the solver
def _network(problem: Problem) -> str:
    return problem.topology.network_kind


def _reversed_scatter(problem: Problem) -> Problem:
    """A gather is the time-reversed scatter on the reversed links (as a reduce is a broadcast's): its root
    sends the farthest chunks first, which a sink cannot arrange."""
    return Problem(problem.topology.reversed(), replace(problem.collective, kind=SCATTER))


def _by_reversal(problem: Problem, opts: GreedyOptions) -> bool:
    return problem.kind == GATHER and opts.routing == "balanced"


def _copy_problems(problem: Problem, opts: GreedyOptions) -> list[Problem]:
    """The copy problems the point-to-point portfolio sees (solvers.compose; a Gather as its reversed
    Scatter)."""
    if problem.collective.copies:
        phases = [problem]
    elif problem.kind != "all_reduce":
        phases = [problem.mirror()]
    else:
        phases = [problem.reversed_all_gather(), problem.with_collective(ALL_GATHER)]
    return [_reversed_scatter(p) if _by_reversal(p, opts) else p for p in phases]


def _fabric_portfolio(opts) -> tuple[Candidate, ...]:
    from .fabric_solver import fabric_candidates

    return fabric_candidates()


# each network kind's portfolio (the same runner serves both)
PORTFOLIOS = {"point_to_point": lambda opts: COPY_CANDIDATES, "fabric": _fabric_portfolio}


def candidate_names() -> tuple[str, ...]:
    """Every built-in candidate name of the greedy family (any portfolio), in portfolio order."""
    names = [c.name for kind in PORTFOLIOS for c in PORTFOLIOS[kind](None)]
    return tuple(dict.fromkeys(names + [c.name for c in RESUME_CANDIDATES]))


class GreedySolver(Solver):
    """TACOS greedy link-chunk matching; every collective from its copy phases (:mod:`solvers.compose`).

    Options: :class:`GreedyOptions`. ``time_limit_s`` stops starting new restarts and candidates once exceeded
    (the first run always completes); ``threads`` (0 = one per usable core) drives the scale engine's
    partitions and changes the speed, never the schedule.
    """

    name = "greedy"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_BROADCAST, CAP_REDUCE,
                              CAP_GATHER, CAP_SCATTER, CAP_ALL_TO_ALL, CAP_RANDOMIZED, CAP_TIME_LIMIT, CAP_THREADS,
                              CAP_OVERLAP, CAP_FROM_STATE, CAP_FABRIC, CAP_DEMAND_UNICAST, CAP_DEMAND_COPY,
                              CAP_DEMAND_REDUCE})
    Options = GreedyOptions
    STATUS_MAP = {"schedule built": "feasible"}
    Stats = GREEDY_STATS

    @classmethod
    def portfolio(cls, problem: Problem | None = None, opts: GreedyOptions | None = None) -> tuple[Candidate, ...]:
        """The built-in candidates for ``problem``'s network kind (point-to-point without a problem)."""
        kind = "point_to_point" if problem is None else _network(problem)
        return tuple(PORTFOLIOS[kind](opts))

    @classmethod
    def portfolio_markdown(cls) -> str:
        """The portfolios of this backend (each network kind's, and the resume candidates of a repair) as
        markdown tables with their switches and budgets at this backend's defaults."""
        from ..portfolio import describe_candidates

        out = []
        for kind, title in (("point_to_point", "point-to-point"), ("fabric", "switched fabric")):
            out.append(f"Portfolio on a {title} topology, in run (and tie) order:\n\n"
                       + describe_candidates(PORTFOLIOS[kind](None), cls.Options))
        out.append("Resuming from a state (repair after a fault):\n\n"
                   + describe_candidates(RESUME_CANDIDATES, cls.Options))
        out.append("A chunk table (tacos_bench/demand.py) runs the greedy's portfolio (multicast subsets expanded "
                   "per destination) as the candidate `greedy` against `baseline:<name>` for every baseline "
                   "that takes the table (`baseline_candidates`, `table_baseline_max_deliveries`).\n")
        return "\n".join(out)

    def candidates(self, problem: Problem, opts: GreedyOptions) -> list[Candidate]:
        """The candidates of a run: the portfolio narrowed by ``opts.candidates``, plug-ins after."""
        return select(self.portfolio(problem, opts), opts.candidates, known=candidate_names())

    def warmup(self, problem: Problem | None = None, opts: GreedyOptions | None = None) -> float:
        from .engine import warmup

        if problem is None:
            from .decomposition import warmup as decomposition_warmup
            from .fabric import warmup_fabric

            return warmup() + decomposition_warmup() + warmup_fabric()
        opts = opts or self.Options()
        phases = [problem] if _network(problem) == "fabric" else _copy_problems(problem, opts)
        return sum(_warm_candidates(self.candidates(problem, opts), q, opts) for q in phases)

    def _solve(self, problem: Problem, opts: GreedyOptions) -> SolveResult:
        jit_s = self.warmup(problem, opts)
        t0 = time.perf_counter()
        deadline = None if opts.time_limit_s is None else t0 + float(opts.time_limit_s)
        cands = self.candidates(problem, opts)
        if _network(problem) == "fabric":
            from .fabric_solver import solve_fabric

            results = [(None, solve_fabric(problem, cands, RunContext(opts=opts, deadline=deadline)))]
            sched = results[0][1].schedule
        else:
            sched, results = _solve_phases(problem, opts, cands, deadline)
        return _result(sched, results, jit_s, t0, deadline)

    def _solve_from(self, problem: Problem, start: StartState, opts: GreedyOptions) -> SolveResult:
        """The copy collective of ``problem`` completed from ``start`` (times from 0; solvers.repair places them)."""
        if _network(problem) == "fabric":
            from .fabric_resume import resume_fabric

            jit_s = self.warmup(problem, opts)
            t0 = time.perf_counter()
            sched, st = resume_fabric(problem, start, opts)
            return SolveResult("feasible", sched, objective_us=sched.makespan_us,
                               solve_time_s=time.perf_counter() - t0, stats={"jit_warmup_s": jit_s, **st},
                               stop_reason="finished", candidate=st["chosen"])
        cands = select(RESUME_CANDIDATES, _resume_names(opts))
        jit_s = _warm_candidates(cands, problem, opts, start)
        t0 = time.perf_counter()
        deadline = None if opts.time_limit_s is None else t0 + float(opts.time_limit_s)
        ctx = RunContext(opts=opts, deadline=deadline, start=start)
        out = run_portfolio(cands, problem, ctx, measure=lambda s: placed_us(problem, start, s))
        return _result(out.schedule, [(None, out)], jit_s, t0, deadline, trace=False)


def _resume_names(opts: GreedyOptions) -> list[str] | None:
    """The resume candidates ``solver.candidates`` names (those of the other portfolios do not resume; none of
    them named: the rules alone; plug-ins do not resume)."""
    if opts.candidates is None:
        return None
    mine = {c.name for c in RESUME_CANDIDATES}
    return [n for n in opts.candidates if n in mine] or ["rules"]


def _warm_candidates(cands, problem: Problem, opts, start=None) -> float:
    """Load the kernels of every candidate that may run on ``problem``, before the clock starts."""
    ctx = RunContext(opts=opts, start=start)
    return sum(c.warmup(problem, opts) for c in cands
               if c.switched_on(opts) is None and c.applies(problem, ctx) is None)


def _solve_phases(problem: Problem, opts: GreedyOptions, cands, deadline) -> tuple[Schedule, list]:
    """Every copy phase of ``problem`` through the point-to-point portfolio."""
    results: list[PortfolioResult] = []
    # an All-Gather on its own may come back compact (tacos_bench.compact) when it is very large;
    # Reduce-Scatter and All-Reduce are composed from tables
    output = "auto" if problem.kind == ALL_GATHER else "table"
    threads = opts.num_threads

    def portfolio_solve(phase: Problem) -> PortfolioResult:
        if needs_expansion(phase):
            # one portfolio run on the table expanded per destination; its result takes the schedule relabelled
            runs: list[PortfolioResult] = []

            def expanded(q: Problem) -> Schedule:
                runs.append(portfolio_solve(q))
                return runs[-1].schedule

            sched = per_destination(phase, expanded)
            runs[0].schedule = sched
            return runs[0]
        reverse = _by_reversal(phase, opts)
        q = _reversed_scatter(phase) if reverse else phase
        ctx = RunContext(opts=opts, deadline=deadline, threads=threads, output="table" if reverse else output,
                         bound=stop_bound(q))
        out = run_portfolio(cands, q, ctx, prefer=PREFER)
        if reverse:
            out.notes["by_reversal"] = True
            out.schedule = out.schedule.time_reversed()
        return out

    def copy_solve(phase: Problem) -> Schedule:
        if phase.collective.general and (opts.baseline_candidates or opts.subset_tree_candidate):
            # a chunk table: the greedy's portfolio (multicast subsets expanded) against multicast trees over the
            # links that only a chunk's destinations (and relays toward them) receive, and the baselines that
            # take the table as it is (DeepEP-like sends a chunk across a server pair once)
            from .fabric_solver import SubsetTrees, baseline_candidates

            ctx = RunContext(opts=opts, deadline=deadline, threads=threads, output="table",
                             bound=stop_bound(phase))
            cands = (_GreedyTable(portfolio_solve), SubsetTrees())
            if opts.baseline_candidates:
                cands += baseline_candidates()
            out = run_portfolio(cands, phase, ctx, prefer=("greedy",))
        else:
            out = portfolio_solve(phase)
        results.append(out)
        return out.schedule

    sched = solve_collective(problem, copy_solve)
    names = ("rs", "ag") if len(results) == 2 else (None,)
    return sched, list(zip(names, results))


class _GreedyTable(Candidate):
    """The greedy's own portfolio on a chunk table (its multicast subsets expanded per destination), as one
    candidate beside the table's baselines and multicast trees; its winner's statistics are the run's. Past
    ``per_destination_max_deliveries`` copies it leaves the table to candidate ``subset_trees`` when that runs."""

    name = "greedy"
    budget = ("per_destination_max_deliveries",)

    def __init__(self, solve):
        self._solve = solve

    def applies(self, problem, ctx):
        from .fabric_solver import expansion_too_big

        return expansion_too_big(problem, ctx)

    def run(self, problem, ctx):
        out = self._solve(problem)
        ctx.run_stats[self.name] = {**out.winner_stats, "greedy_candidate": out.winner}
        return out.schedule


def _result(sched, results: list[tuple[str | None, PortfolioResult]], jit_s: float, t0: float, deadline,
            trace: bool = True) -> SolveResult:
    """The backend's result from its portfolio runs: the winner's run statistics, the candidates' record fields,
    whether the time limit cut anything, and the anytime trace (a composed collective's phases are not the
    collective: its trace is the end point only)."""
    dt = time.perf_counter() - t0
    stats: dict[str, Any] = {"jit_warmup_s": jit_s}
    cut = []
    for phase, out in results:
        st = {**out.winner_stats, **out.notes}
        if out.stop_bound_us is not None:
            st["stop_bound_us"] = out.stop_bound_us
        stats.update(st if phase is None else {f"{phase}_{k}": v for k, v in st.items()})
        if deadline is not None:
            ws = out.winner_stats
            if ws.get("restarts_run", 0) < ws.get("restarts", 0):
                cut.append("fewer restarts than asked")
            cut += [f"{n} not run" for n, why in out.skipped if why == SKIP_TIME_LIMIT]
            if out.notes.get("relabel_stopped"):
                cut.append("fewer relabelled copies than asked")
    if len(results) > 1:
        stats["transfers"] = len(sched)
    points = []
    if trace and len(results) == 1:
        best = float("inf")
        for t, ms in sorted(results[0][1].points):
            best = min(best, ms)
            points.append((max(0.0, t - t0), best, None))
    points.append((dt, sched.makespan_us, None))
    fields = record_fields(results)
    return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=dt, stats=stats,
                       message=f"time limit reached: {', '.join(dict.fromkeys(cut))}" if cut else "",
                       stop_reason="time_limit" if cut else "finished", trace=tuple(points), **fields)


class GreedyPlusSolver(GreedySolver):
    """The greedy with the best general topology-aware rules (near imports with a gate, local-rarest keys,
    fewest-first links, group matching); ``greedy`` stays the paper's TACOS rule."""

    name = "greedy_plus"
    Options = GreedyPlusOptions
