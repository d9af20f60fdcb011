"""A run with a fault mid-collective (``fault.at_us``, ``fault.links``, ``fault.npus``, and links that slow down
then: ``fault.slow_links``, ``fault.slow_npus``).

Three schedules, one record:

1. the healthy schedule, solved and verified as usual (``healthy_time_us``, ``healthy_synthesis_time_s``);
2. the executed one: the healthy schedule until the fault, repaired from there by the same backend
   (:mod:`solvers.repair`); it is what ``schedule.csv`` holds and what ``collective_time_us`` measures,
   verified with the fault (no transfer on a failed link ends after it, failed NPUs need nothing);
3. a from-scratch synthesis on the topology without the failed links and NPUs, for comparison
   (``scratch_time_us``, ``scratch_synthesis_time_s``; with failed NPUs it is the collective among the
   survivors, whose data the repaired run still delivers when it was copied out before the fault).

``repair_loss = repaired / scratch - 1``; ``repair_speedup = scratch / repair synthesis time``;
``repair_bound_us`` bounds any repair (:func:`tacos_bench.bounds.repair_bounds`): the bound from the state at
the fault (what was executed may put it above a fresh synthesis) or, with links failing and no NPU, the healthy
problem's ``lower_bound_us`` where that is larger (``repair_bound_source`` says which);
``repaired_over_bound`` the repair against it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Mapping

from ..errors import ConfigError, TacosError
from ..faults import Fault
from ..problem import Problem
from .stages import OPTIMAL_REL_TOL, ExportStageError, bound_fields, gap_fields, save_and_verify, solve_and_verify
from .summary import repair_note

log = logging.getLogger(__name__)


def run_with_fault(problem: Problem, fault: Fault, solver: str, options: Mapping[str, Any], *, out_dir,
                   csv: str, csv_max_rows: int, topology_max_links: int, export: str,
                   fields: dict[str, Any]) -> None:
    """Fill ``fields`` with the healthy, repaired and from-scratch results (see the module docstring)."""
    from solvers.repair import repair

    if problem.collective.reduces and fault.npus:
        raise ConfigError(f"a {problem.kind} is repaired after links fail or slow down, not after NPUs fail (their "
                          "contributions, and the partial sums holding them, are lost with them): give fault.links "
                          "or fault.slow_links")
    import solvers
    from solvers.base import CAP_FROM_STATE, solver_class

    if CAP_FROM_STATE not in solvers.get_solver(solver).capabilities:
        can = [n for n in solvers.available_solvers() if CAP_FROM_STATE in solver_class(n).capabilities]
        raise ConfigError(f"solver {solver!r} cannot start from a state, so it cannot repair after a fault "
                          f"(solvers that can: {', '.join(can)})")
    fields.update(fault_at_us=fault.at_us, fault_at_fraction=fault.at_fraction, fault_links=len(fault.links),
                  fault_failed_links=[[int(u), int(v)] for u, v in fault.links] or None,
                  fault_npus=list(fault.configured.get("npus", [])) or None,
                  fault_random_links=fault.configured.get("random_links") or None)
    if fault.slow:
        fields["fault_slow_links"] = [list(x) for x in fault.slow]
    fields.update(bound_fields(problem))
    # the bounds' own value: a backend's proved bound may replace lower_bound_us in the record below
    healthy_bound = fields.get("lower_bound_us")
    _, healthy = solve_and_verify(problem, solver, options, bounds=False, fields=fields)
    if not fields.get("valid"):
        return
    fields.update(healthy_time_us=fields["collective_time_us"], healthy_synthesis_time_s=fields["synthesis_time_s"],
                  valid=False, collective_time_us=None)
    fault = fault.at(fields["healthy_time_us"])
    fields["fault_at_us"] = fault.at_us
    log.info("healthy schedule: %.3f µs; %s", fields["healthy_time_us"], fault.describe())
    healthy = healthy.to_schedule()  # a compact schedule (very large All-Gathers) as a table
    rep = repair(problem, healthy, fault, solver, options)
    fields.update(rep.fields())
    sched, ver = save_and_verify(problem, rep.schedule, out_dir, fields, csv=csv, csv_max_rows=csv_max_rows,
                                 topology_max_links=topology_max_links, fault=fault)
    if not ver.valid:
        fields.update(status="error", error=f"verification of the repaired schedule failed: {ver.message}")
        log.error("repaired schedule REJECTED by the verifier: %s", ver.message)
        return
    T = ver.collective_time_us
    fields.update(collective_time_us=T, repaired_time_us=T, link_utilization=ver.link_utilization)
    from ..bounds import repair_bounds

    # a repair with links failing is also a schedule of the healthy problem: the healthy bound holds for it too
    fields.update(repair_bounds(fault.slowed(problem), fault, rep.state, healthy_bound))
    bound = fields["repair_bound_us"]
    fields["repaired_over_bound"] = T / bound if bound else None
    _rebound(problem, fault, fields, T)
    _scratch(problem, fault, solver, options, fields)
    fields["repair_note"] = repair_note(fields)
    if export != "none":
        from .. import export as exporters

        try:
            fields["export_file"] = exporters.export_to_file(export, problem, sched, out_dir).name
        except TacosError as e:
            raise ExportStageError(f"exporting ({export}): {e}") from None


def _rebound(problem: Problem, fault: Fault, fields: dict[str, Any], T: float) -> None:
    """Ratios of the repaired time. With link failures only, the executed schedule is also a schedule of the
    healthy problem, so its bounds hold; with failed NPUs the postcondition is weaker and they need not."""
    for k in ("ratio_to_bound", "gap", "gap_to_bound", "optimality_proof"):
        fields[k] = None
    fields["status"] = "feasible"
    lb = fields.get("lower_bound_us")
    if fault.npus:
        fields.update(lower_bound_us=None, lower_bound_source=None)
        return
    if lb:
        fields.update(gap_fields(T, lb))
        if T <= lb * (1 + OPTIMAL_REL_TOL):
            fields.update(status="optimal", optimality_proof="lower_bound")


def _scratch(problem: Problem, fault: Fault, solver: str, options: Mapping[str, Any], fields: dict[str, Any]):
    """The same backend from scratch on the topology after the failure (recorded, never fatal)."""
    try:
        topo = fault.scratch_topology(problem.topology)
        coll = problem.collective
        if coll.rooted and fault.npus:
            if coll.root in fault.npus:
                raise TacosError(f"the root {coll.root} fails")
            coll = replace(coll, root=coll.root - sum(1 for v in fault.npus if v < coll.root))
        sub: dict[str, Any] = {}
        solve_and_verify(Problem(topo, coll), solver, options, bounds=False, fields=sub)
        fields.update(scratch_time_us=sub.get("collective_time_us"),
                      scratch_synthesis_time_s=sub.get("synthesis_time_s"), scratch_valid=sub.get("valid"))
        if sub.get("error"):
            fields["scratch_error"] = sub["error"]
    except TacosError as e:
        fields["scratch_error"] = str(e)
        return
    S, R = fields.get("scratch_time_us"), fields.get("repaired_time_us")
    if S and R:
        fields["repair_loss"] = R / S - 1.0
    ts, tr = fields.get("scratch_synthesis_time_s"), fields.get("repair_synthesis_time_s")
    if ts and tr:
        fields["repair_speedup"] = ts / tr
