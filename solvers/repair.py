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

from tacos_bench.errors import SolverError
from tacos_bench.faults import Fault, FaultState, check_repairable, state_at
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from .base import CAP_FROM_STATE, SolveResult, StartState, get_solver
from .compose import retime_from, warm_retime


@dataclass
class Repair:
    """A repaired schedule and how it came about."""

    schedule: Schedule        # what was executed: kept transfers + the re-synthesized remainder, placed
    state: FaultState
    residual: SolveResult     # the backend's schedule of the remainder, from time 0
    synthesis_time_s: float   # re-synthesis and placement, JIT compilation excluded

    def fields(self) -> dict[str, Any]:
        """Record fields (``repair_*``)."""
        return {"repair_synthesis_time_s": self.synthesis_time_s,
                "repair_kept_transfers": len(self.state.executed),
                "repair_in_flight_transfers": self.state.in_flight,
                "repair_lost_transfers": self.state.lost,
                "repair_dropped_transfers": self.state.dropped,
                "repair_new_transfers": len(self.schedule) - len(self.state.executed)}


def repair(problem: Problem, schedule: Schedule, fault: Fault, solver: str = "greedy",
           options: Mapping[str, Any] | None = None) -> Repair:
    """Executed schedule of ``schedule`` (valid on healthy ``problem``) through ``fault``, repaired by
    backend ``solver`` (see the module docstring).

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
    if problem.topology.is_fabric:
        raise SolverError(f"repair after a fault is not available on switched fabrics yet ({problem.topology.name!r}: "
                          "the replay of a fault and the resume are link-by-link); run the fault as failed_links "
                          "of the topology instead")
    backend = get_solver(solver)
    opts = backend.options(options)
    _warm(problem, solver, opts)
    t0 = time.perf_counter()
    state = state_at(problem, schedule, fault)
    check_repairable(problem, state, fault)
    start = StartState(fault.surviving_links(problem.topology), state.hold_npu, state.hold_chunk, state.alive)
    res = backend.solve_from(problem, start, opts)
    placed = retime_from(problem, res.schedule.shifted(fault.at_us), link_free=state.link_free,
                         hold_npu=state.hold_npu, hold_chunk=state.hold_chunk, hold_time=state.hold_time)
    executed = Schedule.concat([state.executed, placed])
    dt = time.perf_counter() - t0 - float(res.stats.get("jit_warmup_s", 0.0) or 0.0)
    return Repair(executed, state, res, dt)


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
