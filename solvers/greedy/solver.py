"""The ``greedy`` and ``greedy_plus`` backends: the run of a collective, and ``greedy_plus``'s candidates."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from tacos_bench.collective import ALL_GATHER, GATHER, SCATTER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..base import (CAP_FROM_STATE, CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_ALL_TO_ALL, CAP_BROADCAST, CAP_GATHER,
                    CAP_OVERLAP, CAP_RANDOMIZED, CAP_REDUCE, CAP_REDUCE_SCATTER, CAP_SCATTER, CAP_THREADS,
                    CAP_TIME_LIMIT, Solver, SolveResult, StartState)
from ..compose import solve_collective

from .options import COMPACT_MIN_ROWS, TIERED_MAX_PAIRS, GreedyOptions, GreedyPlusOptions
from .decomposition import hier_compact_all_gather, warmup as decomposition_warmup
from .engine import greedy_all_gather, kernel_for, warmup


# ---------------------------------------------------------------------------- the solver
class GreedySolver(Solver):
    """TACOS greedy link-chunk matching (All-Gather; RS/AR by composition, :mod:`solvers.compose`).

    Options: :class:`GreedyOptions`. ``time_limit_s`` stops starting new restarts once exceeded (the
    first always completes); ``threads`` (0 = one per usable core) drives the scale engine's partitions
    and changes the speed, never the schedule.
    """

    name = "greedy"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_BROADCAST, CAP_REDUCE,
                              CAP_GATHER, CAP_SCATTER, CAP_ALL_TO_ALL, CAP_RANDOMIZED, CAP_TIME_LIMIT, CAP_THREADS,
                              CAP_OVERLAP, CAP_FROM_STATE})
    Options = GreedyOptions
    STATUS_MAP = {"schedule built": "feasible"}

    def warmup(self, problem: Problem | None = None, opts: GreedyOptions | None = None) -> float:
        opts = opts or self.Options()
        if problem is None:
            return warmup() + decomposition_warmup()
        jit = warmup(tuple(sorted({kernel_for(p, opts) for p in _phases(problem)})))
        return jit + (decomposition_warmup() if opts.decompose else 0.0)

    def _solve(self, problem: Problem, opts: GreedyOptions) -> SolveResult:
        jit_s = self.warmup(problem, opts)
        threads = opts.num_threads
        t0 = time.perf_counter()
        deadline = None if opts.time_limit_s is None else t0 + float(opts.time_limit_s)
        phases: list[dict] = []

        # an All-Gather on its own may come back compact (tacos_bench.compact) when it is very large;
        # Reduce-Scatter and All-Reduce are composed from tables
        output = "auto" if problem.kind == ALL_GATHER else "table"

        def ag_solve(ag_problem: Problem) -> Schedule:
            st: dict = {}
            if ag_problem.kind == GATHER and opts.routing == "balanced":
                # a gather is the time-reversed scatter on the reversed links (as a reduce is a broadcast's):
                # its root sends the farthest chunks first, which a sink cannot arrange
                rev = Problem(ag_problem.topology.reversed(), replace(ag_problem.collective, kind=SCATTER))
                sched = greedy_all_gather(rev, seed=opts.seed, deadline=deadline, opts=opts, stats=st,
                                          output="table", threads=threads).time_reversed()
                st["by_reversal"] = True
            else:
                sched = _all_gather_candidates(ag_problem, opts, deadline, st, output, threads)
            st["anytime_points"] = st.pop("candidate_ends", None) or list(zip(st.get("restart_ends", []),
                                                                               st.get("makespans_us", [])))
            phases.append(st)
            return sched

        sched = solve_collective(problem, ag_solve)
        dt = time.perf_counter() - t0
        stats: dict[str, Any] = {"jit_warmup_s": jit_s}
        points = [st.pop("anytime_points", None) or [] for st in phases]
        for st in phases:
            st.pop("restart_ends", None)
        if len(phases) == 1:
            stats.update(phases[0])
        else:
            for name, st in zip(("rs", "ag"), phases):
                stats.update({f"{name}_{k}": v for k, v in st.items()})
            stats["transfers"] = len(sched)
        timed_out = deadline is not None and any(st["restarts_run"] < st["restarts"] for st in phases)
        msg = "time limit reached: fewer restarts than asked" if timed_out else ""
        # anytime: the best schedule so far after each restart or candidate (a composed collective's phases
        # are not the collective: its trace is the end point only)
        trace = _anytime(points[0], t0) if len(phases) == 1 else []
        trace.append((dt, sched.makespan_us, None))
        return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=dt, stats=stats,
                           message=msg, stop_reason="time_limit" if timed_out else "finished", trace=tuple(trace))

    def _solve_from(self, problem: Problem, start: StartState, opts: GreedyOptions) -> SolveResult:
        """The copy collective of ``problem`` completed from ``start`` (times from 0; solvers.repair places them)."""
        jit_s = warmup((kernel_for(problem, opts, resume=True),))
        t0 = time.perf_counter()
        deadline = None if opts.time_limit_s is None else t0 + float(opts.time_limit_s)
        st: dict = {}
        sched = greedy_all_gather(problem, seed=opts.seed, deadline=deadline, opts=opts, stats=st, start=start)
        return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=time.perf_counter() - t0,
                           stats={"jit_warmup_s": jit_s, **st}, stop_reason="finished")


# the options that select the topology-aware rules, at their TACOS values (GreedyOptions' defaults)
_TACOS_RULES = {k: getattr(GreedyOptions(), k) for k in ("imports", "import_gate", "chunk_order", "link_order",
                                                         "group_matching")}


def _all_gather_candidates(problem: Problem, opts: GreedyOptions, deadline, stats: dict, output: str,
                           threads: int):
    """The greedy's schedule of a copy collective; on an All-Gather with ``decompose`` or ``tacos_candidate``,
    the fastest of several candidates (the rules' on a tie), cheapest first, stopping at the first that meets
    :func:`tacos_bench.bounds.cheap_bound_us` (ingress and group drain bounds: it is then optimal):

    1. the tier decomposition (``decompose``, :mod:`solvers.greedy.decomposition`), where the topology has one;
    2. the TACOS rule, one run (``tacos_candidate``, with topology-aware rules): at the bound on meshes in a
       fraction of the rules' time;
    3. the run of ``opts`` itself (the topology-aware rules on the tiered kernel, or the TACOS rule).

    Beyond ``TIERED_MAX_PAIRS`` the tiered kernel does not run: the decomposition is the only candidate, or,
    where the topology has none, the TACOS rule on the scale engine. ``stats`` gets the chosen candidate's
    run statistics, every candidate's time (``candidates_us``) and the reasons a candidate did not run."""
    N, C = problem.num_npus, problem.num_chunks
    big = opts.tiered and N * C >= TIERED_MAX_PAIRS
    try_tacos = opts.tiered and opts.tacos_candidate
    if problem.kind != ALL_GATHER or N < 2 or not (opts.decompose or try_tacos or big):
        return greedy_all_gather(problem, seed=opts.seed, deadline=deadline, opts=opts, stats=stats,
                                 output=output, threads=threads)
    from tacos_bench.bounds import cheap_bound_us

    compact = output != "table" and (N - 1) * C > COMPACT_MIN_ROWS
    found: dict[str, tuple] = {}      # name -> (schedule, its run statistics)
    ends: list[tuple[float, float]] = []   # (perf_counter, makespan) as each candidate finished
    notes: dict[str, str] = {}
    floor: list[float] = []           # the cheap bound, computed when first needed

    def at_bound() -> bool:
        if not found:
            return False
        if not floor:
            floor.append(cheap_bound_us(problem))
        return any(sc.makespan_us <= floor[0] * (1 + 1e-9) for sc, _ in found.values())

    if opts.decompose and np.ptp(np.asarray(problem.link_time_us)) == 0:
        notes["decomposition_skipped"] = "one link speed tier: no groups of faster links"
    elif opts.decompose:
        t0 = time.perf_counter()
        try:
            dec = hier_compact_all_gather(problem, seed=opts.seed, threads=threads, in_memory=not compact)
            ends.append((time.perf_counter(), dec.makespan_us))
            found["decomposition"] = (dec, {
                "engine": "tiers", "output": "compact" if dec.path is not None else "table", "restarts": 1,
                "restarts_run": 1, "best_restart": 0, "best_seed": opts.seed, "makespans_us": [dec.makespan_us],
                "transfers": len(dec)})
        except SolverError as e:
            notes["decomposition_skipped"] = str(e)
        stats["decomposition_s"] = time.perf_counter() - t0
    runs = []
    if (try_tacos or big) and not (big and found):
        runs.append(("tacos", replace(opts, **_TACOS_RULES, restarts=1, restart_work=0)))
    if not big:
        runs.append(("rules" if opts.tiered else "tacos", opts))
    elif not found:
        notes["rules_off"] = (f"{N} NPUs x {C} chunks >= TIERED_MAX_PAIRS ({TIERED_MAX_PAIRS}) and no tier "
                              f"decomposition ({notes.get('decomposition_skipped', 'decompose=false')}): the "
                              "TACOS rule")
    for name, run_opts in runs:
        if at_bound():
            notes[f"{name}_skipped"] = "an earlier candidate meets the lower bound (optimal)"
            continue
        st: dict = {}
        found[name] = (greedy_all_gather(problem, seed=opts.seed, deadline=deadline, opts=run_opts, stats=st,
                                         output=output, threads=threads), st)
        ends.append((time.perf_counter(), found[name][0].makespan_us))
    # the fastest; on a tie the rules', then the TACOS rule's (the greedy's own schedules first)
    pref = {"rules": 0, "tacos": 1, "decomposition": 2}
    chosen = min(found, key=lambda k: (found[k][0].makespan_us, pref[k]))
    for name, (sc, _) in found.items():
        if name != chosen:
            sc.delete()
    sched, st = found[chosen]
    stats.update(st)
    stats.update(notes)
    stats["candidate_ends"] = ends
    stats.update({"chosen": chosen, "stop_bound_us": floor[0] if floor else None,
                  "candidates_us": {k: sc.makespan_us for k, (sc, _) in found.items()}})
    if chosen == "decomposition" and sched.path is None:
        return sched.to_schedule()
    return sched


def _anytime(points, t0: float) -> list[tuple[float, float, None]]:
    """``(seconds since t0, best makespan so far, no bound)`` after each restart or candidate."""
    out, best = [], float("inf")
    for t, ms in sorted(points):
        best = min(best, ms)
        out.append((max(0.0, t - t0), best, None))
    return out


def _phases(problem: Problem) -> list[Problem]:
    """The copy problems a collective is composed of (solvers.compose)."""
    if problem.collective.copies:
        return [problem]
    if problem.kind != "all_reduce":
        return [problem.mirror()]
    return [problem.reversed_all_gather(), problem.with_collective(ALL_GATHER)]


class GreedyPlusSolver(GreedySolver):
    """The greedy with the best general topology-aware rules (near imports with a gate, local-rarest keys,
    fewest-first links, group matching); ``greedy`` stays the paper's TACOS rule."""

    name = "greedy_plus"
    Options = GreedyPlusOptions
