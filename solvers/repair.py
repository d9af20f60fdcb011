"""Repair a schedule after a fault: keep what was executed, re-synthesize the rest from the state at the fault.

At ``fault.at_us`` the schedule has reached a state (:func:`tacos_bench.faults.state_at`): transfers that
ended stay, transfers in flight on surviving links complete, transfers in flight on failed links are lost
and transfers not started yet are dropped. A backend that can start from a state (capability
``from_state``: the greedy engines) completes the collective on the surviving links from every copy the
survivors hold or are receiving; its schedule, built as if all of that were available at once, is then
placed after the fault by :func:`solvers.compose.retime_from`: each transfer starts once its link is free
(after any in-flight transfer) and its sender holds the chunk (after an in-flight arrival), in the order
the backend chose. The executed schedule is the kept transfers plus the placed ones; the verifier checks
it with the fault (no transfer on a failed link ends after the fault, failed NPUs need nothing).

With ``replan`` (the default), a rooted collective and link failures only, a second candidate is built: the
same backend's from-scratch schedule on the surviving links, less every transfer whose receiver already
holds its chunk, placed after the fault the same way; the faster of the two is kept (``plan``: ``resume`` or ``replan``).
A resume matches chunks to links as if every held copy were available at once; a rooted collective's own
synthesis may order its sink (a gather's root takes the farthest chunks first, built time-reversed), which a
forward resume cannot, and the replanned schedule keeps that order. On All-Gather and All-to-All the replan
never won (96 runs of ``experiments/probe_repair.py``) and costs a second synthesis (``hetero512`` All-to-All:
10.7 s against 4.5 s fresh), so they resume only.

When no transfer that ends after the fault crosses a failed link, the healthy schedule itself is a third
candidate (``unaffected``).

Links that *slow down* at the fault (``fault.slow``: bandwidth times a factor from then on) are part of the same
state: a transfer in flight on one goes on at the new rate (:func:`tacos_bench.faults.least_end_us`), everything
planned after the fault sees the new link times, and the verifier holds every row to that model. The plans are
then ``resume`` (re-synthesized on the slowed network), ``keep`` (the healthy schedule's remaining transfers in
their order, retimed on the slowed network: what a runtime does that does not re-plan) and ``replan``.

On a switched fabric (a failed switch port is a failed link) the state keeps each row with every link of its
route (a copy buffered in a switch and not sent on by the fault is lost with it), and the fabric greedy
resumes on routes over the surviving links, planning with the state's times itself, so its schedule is only
shifted to the fault (:mod:`solvers.greedy.fabric_resume`); there is no replan candidate.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.faults import Fault
>>> from tacos_bench.topology.generators import torus2d
>>> from tacos_bench.verify import verify
>>> from solvers import get_solver
>>> p = Problem(torus2d(4, 4), Collective("all_gather", 1, 64))
>>> healthy = get_solver("greedy").solve(p, seed=1).schedule
>>> fault = Fault(healthy.makespan_us / 2, links=((0, 1), (1, 0)))
>>> r = repair(p, healthy, fault, "greedy", {"seed": 1})
>>> verify(p, r.schedule, fault).valid, r.schedule.makespan_us >= fault.at_us
(True, True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tacos_bench.errors import TacosError
from tacos_bench.faults import Fault, FaultState, check_repairable, row_link_pairs, rows_crossing, state_at
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from .base import CAP_FROM_STATE, SolveResult, StartState, get_solver
from .compose import retime_from, warm_retime
from .portfolio import Candidate, RunContext, Skip, run_portfolio


@dataclass
class Repair:
    """A repaired schedule and how it came about."""

    schedule: Schedule        # what was executed: kept transfers + the re-synthesized remainder, placed
    state: FaultState
    residual: SolveResult     # the backend's schedule of the remainder, from time 0
    synthesis_time_s: float   # re-synthesis and placement, JIT compilation excluded
    plan: str = "resume"      # which candidate was kept: "resume" (from the state), "replan" (fresh, pruned) or
    #                           "unaffected" (no transfer still to end crosses a failed link: the healthy schedule)
    candidates_us: dict | None = None   # each candidate's executed makespan

    def fields(self) -> dict[str, Any]:
        """Record fields (``repair_*``)."""
        return {"repair_synthesis_time_s": self.synthesis_time_s,
                "repair_kept_transfers": len(self.state.executed),
                "repair_in_flight_transfers": self.state.in_flight,
                "repair_lost_transfers": self.state.lost,
                "repair_dropped_transfers": self.state.dropped,
                "repair_new_transfers": len(self.schedule) - len(self.state.executed),
                "repair_plan": self.plan,
                "repair_resume_us": (self.candidates_us or {}).get("resume"),
                "repair_replan_us": (self.candidates_us or {}).get("replan")}


def repair(problem: Problem, schedule: Schedule, fault: Fault, solver: str = "greedy",
           options: Mapping[str, Any] | None = None, *, replan: bool = True) -> Repair:
    """Executed schedule of ``schedule`` (valid on healthy ``problem``) through ``fault``, repaired by
    backend ``solver`` (see the module docstring; ``replan``: also try the pruned fresh schedule).

    The plans are candidates of one portfolio (:data:`PLANS`, :func:`solvers.portfolio.run_portfolio`), compared
    by the executed schedule's time; on a tie the healthy schedule (``unaffected``), then ``resume``.

    Raises
    ------
    ConfigError
        For a reducing collective (it is synthesized time-reversed: there is no forward state to resume).
    TopologyError
        When the survivors cannot complete the collective (a chunk lost with every copy, survivors cut
        apart).
    SolverError
        When ``solver`` cannot start from a state.
    """
    backend = get_solver(solver)
    opts = backend.options(options)
    _warm(problem, solver, opts)
    t0 = time.perf_counter()
    state = state_at(problem, schedule, fault)
    check_repairable(problem, state, fault)
    ctx = RunContext(opts=opts)
    ctx.start = _Repairing(backend, schedule, fault, state, replan)
    out = run_portfolio(PLANS, problem, ctx, prefer=("unaffected", "keep", "detour", "resume", "replan"))
    residual = ctx.run_stats.get(out.winner, {}).get("residual") or ctx.run_stats.get("resume", {}).get("residual")
    jit_s = sum(float(st["residual"].stats.get("jit_warmup_s", 0.0) or 0.0) for st in ctx.run_stats.values()
                if st.get("residual") is not None)
    dt = time.perf_counter() - t0 - jit_s
    return Repair(out.schedule, state, residual, dt, out.winner, out.makespans)


@dataclass(frozen=True)
class _Repairing:
    """What the repair plans share: the backend, the healthy schedule, the fault and the state it leaves."""

    backend: Any
    schedule: Schedule
    fault: Fault
    state: FaultState
    replan: bool


class Resume(Candidate):
    """The backend completes the collective from the state at the fault, placed after it."""

    name = "resume"

    def run(self, problem, ctx):
        r: _Repairing = ctx.start
        fault, state = r.fault, r.state
        if problem.collective.reduces:
            from .resume_reducing import BALANCED, resume_reducing

            ctx.run_stats[self.name] = {"residual": None}
            # the backend's mirrored trees placed in the plan's order on each link, or into any gap the transfers
            # placed before leave; and trees built on the pieces (list-scheduled already: the gaps never helped)
            return _soonest_verified(problem, fault, state, [
                lambda gaps=gaps: resume_reducing(r.backend, problem, fault, state, ctx.opts, gaps)
                for gaps in (False, True)] + [
                lambda kw=kw: resume_reducing(r.backend, problem, fault, state, ctx.opts, balanced=kw)
                for kw in BALANCED] + ([   # an All-Reduce's copy phase also as the backend's fresh All-Gather
                lambda: resume_reducing(r.backend, problem, fault, state, ctx.opts, fresh=True)]
                if problem.destinations.min() < 0 else []))
        keep = fault.surviving_links(problem.topology)
        start = StartState(keep, state.hold_npu, state.hold_chunk, state.alive,
                           hold_time=np.maximum(state.hold_time - fault.at_us, 0.0),
                           link_free=np.where(keep, np.maximum(state.link_free - fault.at_us, 0.0), np.inf))
        after = fault.slowed(problem)   # the links that slow down at their new bandwidth
        res = r.backend.solve_from(after, start, ctx.opts)
        # on a fabric the backend plans with the state's times itself (routes hold several links; a placement
        # link by link would not know them)
        shifted = res.schedule.shifted(fault.at_us)
        placed = shifted if problem.topology.is_fabric else _place(after, shifted, state)
        ctx.run_stats[self.name] = {"residual": res}
        return Schedule.concat([state.executed, placed])


class Replan(Candidate):
    """The backend's fresh schedule on the surviving links, less every transfer whose receiver already holds
    its chunk, placed after the fault (rooted collectives, link failures, point-to-point)."""

    name = "replan"

    def applies(self, problem, ctx):
        r: _Repairing = ctx.start
        if not r.replan:
            return "replan=false"
        if r.fault.npus:
            return "NPUs failed: the fresh schedule would need them"
        if not problem.collective.rooted or problem.collective.reduces:
            return "rooted copy collectives only (on All-Gather and All-to-All it never won)"
        return _resumes_only(problem)

    def run(self, problem, ctx):
        r: _Repairing = ctx.start
        alt = _replanned(problem, r.fault, r.state, r.backend, ctx.opts)
        if alt is None:
            raise Skip("the surviving links do not make a problem of their own")
        ctx.run_stats[self.name] = {"residual": alt[0]}
        return Schedule.concat([r.state.executed, alt[1]])


class Keep(Candidate):
    """The healthy schedule's transfers still to start, in their order on each link, on the network as it is after
    the fault: what a runtime that does not re-plan does when links slow down (point-to-point)."""

    name = "keep"

    def applies(self, problem, ctx):
        r: _Repairing = ctx.start
        if not r.fault.slow:
            return "no link slows down (with failures only, see unaffected)"
        if r.fault.links or r.fault.npus:
            return "links or NPUs fail too"
        if problem.collective.reduces:
            return "copy collectives only (a reduction's order is not a copy's)"
        return _resumes_only(problem)

    def run(self, problem, ctx):
        r: _Repairing = ctx.start
        fault, state = r.fault, r.state
        # the state kept the rows that started before the fault: the others are replayed, in their order
        rest = r.schedule.take(np.flatnonzero(r.schedule.start_us >= fault.at_us - 1e-9 * max(1.0, fault.at_us)))
        ctx.run_stats[self.name] = {"residual": None}
        try:
            placed = _place(fault.slowed(problem), rest, state)
        except TacosError as e:
            raise Skip(str(e)) from None
        return Schedule.concat([state.executed, placed])


class Detour(Candidate):
    """Reducing collectives: the healthy schedule goes on (on slowed links at their new speed) and what the fault
    cut is sent again on the shortest surviving path (:mod:`solvers.detour_reducing`)."""

    name = "detour"

    def applies(self, problem, ctx):
        if not problem.collective.reduces:
            return "reducing collectives only (copies resume)"
        return None

    def run(self, problem, ctx):
        from .detour_reducing import detour_reducing

        r: _Repairing = ctx.start
        ctx.run_stats[self.name] = {"residual": None}
        # the nearest way around the fault, and ways that spread the detours over the links with the least work left
        return _soonest_verified(problem, r.fault, r.state, [
            lambda spread=spread: detour_reducing(problem, r.schedule, r.fault, r.state, spread=spread)
            for spread in (False, True)])


class Unaffected(Candidate):
    """The healthy schedule itself, when no transfer that ends after the fault crosses a failed link."""

    name = "unaffected"
    stop_at_bound = False

    def applies(self, problem, ctx):
        r: _Repairing = ctx.start
        if r.fault.npus:
            return "NPUs failed"
        if r.fault.slow:
            return "links slow down: the transfers on them take longer (see keep)"
        if _crosses_failed_after(problem, r.schedule, r.fault):
            return "a transfer still to end crosses a failed link"
        return None

    def run(self, problem, ctx):
        return ctx.start.schedule


def _soonest_verified(problem: Problem, fault: Fault, state: FaultState, variants) -> Schedule:
    """The executed transfers plus the soonest of ``variants`` (callables returning the transfers after the
    fault) that the verifier accepts with the fault (a new plan is replayed before it may win); :class:`Skip` with
    the first reason when none is."""
    from tacos_bench.verify import check

    best, why = None, None
    for variant in variants:
        try:
            out = Schedule.concat([state.executed, variant()])
        except TacosError as e:
            why = why or str(e)
            continue
        ver = check(problem, out, fault=fault)
        if not ver.valid:
            why = why or f"its schedule was rejected by the verifier: {ver.message}"
            continue
        if best is None or out.makespan_us < best.makespan_us * (1 - 1e-12):
            best = out
    if best is None:
        raise Skip(why)
    return best


def _resumes_only(problem: Problem) -> str | None:
    """Why a plan other than ``resume`` does not apply on a switched fabric (routes hold several links: only the
    fabric engine, planning with the state's times, places transfers there), or None."""
    return "a fabric resumes only" if problem.topology.is_fabric else None


PLANS: tuple[Candidate, ...] = (Resume(), Replan(), Keep(), Detour(), Unaffected())


def _crosses_failed_after(problem: Problem, schedule: Schedule, fault: Fault) -> bool:
    """True when a transfer that ends after the fault crosses a failed link."""
    late = np.flatnonzero(schedule.end_us > fault.at_us + 1e-9 * max(1.0, fault.at_us))
    failed = ~fault.surviving_links(problem.topology)
    if not late.size or not failed.any():
        return False
    rows = schedule.take(late)
    return bool(rows_crossing(rows, *row_link_pairs(problem.topology, rows), failed).any())


def _place(problem: Problem, schedule: Schedule, state: FaultState) -> Schedule:
    """``schedule`` placed after the fault, in its own order (:func:`solvers.compose.retime_from`)."""
    return retime_from(problem, schedule, link_free=state.link_free, hold_npu=state.hold_npu,
                       hold_chunk=state.hold_chunk, hold_time=state.hold_time)


def _replanned(problem: Problem, fault: Fault, state: FaultState, backend, opts):
    """The backend's fresh schedule on the surviving links without the transfers whose receiver already
    holds the chunk (every other transfer's sender then holds its chunk or receives it from an earlier kept
    one), placed after the fault; ``None`` when the surviving links do not make a problem of their own."""
    try:
        sub = Problem(fault.surviving_topology(fault.slowed(problem).topology), problem.collective)
        res = backend.solve(sub, opts)
    except TacosError:
        return None
    fresh = res.schedule.to_schedule()
    C = problem.num_chunks
    held = np.asarray(state.hold_npu, np.int64) * C + np.asarray(state.hold_chunk, np.int64)
    todo = ~np.isin(fresh.dst.astype(np.int64) * C + fresh.chunk.astype(np.int64), held)
    return res, _place(fault.slowed(problem), fresh.take(np.flatnonzero(todo)).shifted(fault.at_us), state)


_WARM: set = set()


def _warm(problem: Problem, solver: str, opts) -> None:
    """Load every kernel a repair of this kind calls (numba's cache, or a compile) on a tiny instance, once per
    process, so ``synthesis_time_s`` measures the repair and not the loading."""
    key = (solver, problem.kind, type(opts).__name__)
    if key in _WARM or not problem.collective.copies or CAP_FROM_STATE not in get_solver(solver).capabilities:
        return  # already loaded, or the repair itself refuses it with the right message
    _WARM.add(key)
    from tacos_bench.collective import Collective
    from tacos_bench.topology.generators import ring

    warm_retime()
    tiny = Problem(ring(3), Collective(problem.kind, 1, 1))
    backend = get_solver(solver)
    sched = backend.solve(tiny, opts).schedule
    start = StartState(Fault(0.0, links=((0, 1),)).surviving_links(tiny.topology), tiny.sources,
                       np.arange(tiny.num_chunks), np.ones(3, bool))
    backend.solve_from(tiny, start, opts)
    try:
        check_repairable(tiny, state_at(tiny, sched, Fault(0.0, links=((0, 1),))), Fault(0.0, links=((0, 1),)))
    except Exception:  # noqa: BLE001 - only the loading matters here
        pass
