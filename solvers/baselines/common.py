"""What every baseline backend shares: the wall-clock split, the composition of a collective from an
All-Gather plan, and the deterministic backend class."""

from __future__ import annotations

import time

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule
from tacos_bench.topology.model import FABRIC, POINT_TO_POINT

from ..base import CAP_FABRIC, Solver, SolveResult
from ..compose import solve_collective
from ..plan import Plan
from ..plan import warmup as plan_warmup
from .stats import BASE


class Clock:
    """Splits wall time into building (routing, plans) and engine (list scheduling)."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.engine_s = 0.0

    def run(self, plan: Plan) -> Schedule:
        sched = plan.run()
        self.engine_s += plan.engine_time_s
        return sched

    def result(self, schedule: Schedule, stats: dict) -> SolveResult:
        total = time.perf_counter() - self.t0
        stats = dict(stats)
        stats.setdefault("transfers", len(schedule))
        return SolveResult("feasible", schedule, objective_us=schedule.makespan_us,
                           build_time_s=max(0.0, total - self.engine_s), solve_time_s=self.engine_s, stats=stats)


def compose_plans(problem: Problem, build_ag, clock: Clock) -> Schedule:
    """The collective from an All-Gather builder ``build_ag(problem, mirror)`` (a :class:`Plan`).

    ``mirror=True`` asks for the de-duplicated All-Gather (no NPU is sent a chunk
    it holds) that is time-reversed into the Reduce-Scatter.
    """
    return solve_collective(problem, lambda p: clock.run(build_ag(p, False)),
                            rs_solve=lambda p: clock.run(build_ag(p, True)))


class BaselineSolver(Solver):
    """A deterministic baseline: it ignores ``seed``, ``time_limit_s`` and ``threads`` (no capability flags)."""

    Stats = BASE
    native_fabric = False   # True: _build schedules a switched fabric itself
    # how each network kind is scheduled (a method name): by _build, or a switched fabric through its logical
    # topology (solvers.baselines.fabric); a native_fabric baseline builds both itself
    builds = {POINT_TO_POINT: "_build_result", FABRIC: "_build_on_fabric"}

    def __init_subclass__(cls, **kwargs):
        # every baseline also runs on a switched fabric, through its logical topology (solvers.baselines.fabric)
        super().__init_subclass__(**kwargs)
        from tacos_bench.collective import COPY_KINDS

        if cls.native_fabric or set(COPY_KINDS) & set(cls.capabilities):  # a copy phase to place on the fabric
            cls.capabilities = frozenset(cls.capabilities) | {CAP_FABRIC}
        if cls.native_fabric:
            cls.builds = {**cls.builds, FABRIC: "_build_result"}

    def warmup(self, problem: Problem | None = None, opts=None) -> float:
        """Load the list scheduler's kernel (:func:`solvers.plan.warmup`) before the clock starts."""
        return plan_warmup()

    def _solve(self, problem: Problem, opts) -> SolveResult:
        clock = Clock()
        if problem.num_npus == 1:
            return clock.result(Schedule.empty(), {"note": "single NPU: nothing to send"})
        return getattr(self, self.builds[problem.topology.network_kind])(problem, opts, clock)

    def _build_result(self, problem: Problem, opts, clock: Clock) -> SolveResult:
        schedule, stats = self._build(problem, opts, clock)
        return clock.result(schedule, stats)

    def _build_on_fabric(self, problem: Problem, opts, clock: Clock) -> SolveResult:
        from .fabric import solve_on_fabric

        schedule, stats = solve_on_fabric(problem, lambda p: self._copy_phase(p, opts, clock, problem.kind))
        return clock.result(schedule, stats)

    def _copy_phase(self, p: Problem, opts, clock: Clock, kind: str) -> Schedule:
        """The copy phase ``p`` of a fabric run of ``kind`` (on the logical topology)."""
        from ..base import capability_of

        if not self.supports(capability_of(p)):
            raise SolverError(f"{self.name} runs {kind} on a switched fabric as its copy phase {p.kind}, "
                              f"which {self.name} does not have")
        return self._build(p, opts, clock)[0].to_schedule()

    def _build(self, problem: Problem, opts, clock: Clock):  # pragma: no cover - abstract
        raise NotImplementedError


class PlanBaseline(BaselineSolver):
    """A baseline whose copy algorithm is one plan builder ``build_plan(problem) -> (Plan, stats)``
    (:attr:`plan_builder`); reducing tables and collectives are its time-reversed mirrors
    (:func:`compose_plans`), and the statistics are the last phase's."""

    plan_builder = None   # a staticmethod: Problem -> (Plan, dict)

    def _build(self, problem, opts, clock):
        stats: dict = {}

        def build(p, mirror):
            plan, st = type(self).plan_builder(p)
            stats.update(st)
            return plan

        return compose_plans(problem, build, clock), stats
