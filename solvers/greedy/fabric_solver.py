"""``greedy`` and ``greedy_plus`` on a switched fabric (docs/fabrics.md): every collective from
:func:`solvers.greedy.fabric.fabric_copy`.

``greedy`` keeps TACOS's rule (a random chunk the receiver needs); ``greedy_plus`` takes the rarest chunk and
the best of several seeds, and for an All-Reduce on a switch that multicasts and reduces it also tries the
in-network pipeline (:func:`solvers.in_switch.sharp_all_reduce`: one switch or a tree of switches that
multicast and reduce), and (``baseline_candidates``) every registered baseline that takes the collective on the
fabric, reached through the registry (the solver families stay independent), up to
``BASELINE_CANDIDATE_MAX_DELIVERIES``; on ties the greedy's own schedule is kept.

Reduce-Scatter and Reduce are the copy mirrors on the reversed fabric (multicast becomes in-network reduction);
All-Reduce is that Reduce-Scatter, then the All-Gather synthesized forward from its end state (each link free
after its last Reduce-Scatter transfer, each chunk at its owner once reduced), or after a barrier with
``collective.overlap=false``.
"""

from __future__ import annotations

import time

import numpy as np

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..compose import chunk_done_at_owner, link_last_use, mirrored
from .fabric import fabric_copy
from ..fabric_routes import build_hops, shared_hops
from .options import GreedyOptions, restart_count, restart_seeds

# greedy_plus runs the TACOS rule as a candidate up to this many NPUs x chunks
TACOS_CANDIDATE_MAX_PAIRS = 1 << 18

# greedy_plus runs the baselines as candidates (baseline_candidates) while the collective delivers at most this
# many (NPU, chunk) pairs (NPUs x chunks; chunks alone for the unicast collectives, one destination each). Each
# baseline's transfers are placed on the hops by a Python loop (solvers/baselines/fabric.py), 20-90 µs a delivery:
# next to the greedy's Python loop of the unicast collectives that is 4-12 % (dgx_h100x4 ... dgx_h100x8 and
# leafspine4x8 / leafspine8x8 All-to-All), next to its compiled kernel of the others 0.2-7x at every size
# (leafspine4x8 All-Gather 0.15 s on 0.41 s, dgx_h100x4 0.30 s on 0.04 s; dgx_h100x16 1.1 s on 0.27 s, dgx_h100x32
# 4.3 s on 1.6 s). At this cap the baselines add at most about 1 s (leafspine4x8 All-Reduce, 4 chunks per NPU) and
# cover every 32-NPU case of the fabric study (docs/studies/fabrics.md)
BASELINE_CANDIDATE_MAX_DELIVERIES = 1 << 12
# their names in the statistics (``chosen``, ``candidates_us``): this prefix and the registered name
BASELINE_PREFIX = "baseline:"

# options of the point-to-point rules that a fabric run does not read (named in the run's statistics)
_POINT_TO_POINT = ("imports", "import_gate", "link_order", "group_matching", "matching", "engine", "routing",
                   "decompose", "tacos_candidate", "rarest_candidate", "relabel_tries")


def _chunk_order(opts: GreedyOptions) -> str:
    return "random" if opts.chunk_order == "random" else "rarest"


def solve_fabric(problem: Problem, opts: GreedyOptions, plus: bool, deadline: float | None) -> tuple[Schedule, dict]:
    """The best schedule of ``problem`` over the seeds ``opts`` asks for, and its statistics."""
    with shared_hops():   # every run, mirrored phase and baseline candidate builds the fabric's hops once
        return _solve_fabric(problem, opts, plus, deadline)


def _baselines(problem: Problem) -> tuple[list, dict[str, str]]:
    """``(name, backend)`` of every registered backend of the baselines family (the registry's metadata) that
    declares the fabric capability and ``problem``'s collective, and why others could not be loaded."""
    from ..base import CAP_FABRIC, available_solvers, get_solver, solver_family

    out, refusals = [], {}
    for name in available_solvers():
        if solver_family(name) != "baselines":
            continue
        try:
            baseline = get_solver(name)
        except SolverError as e:   # its optional dependency is missing
            refusals[name] = f"unavailable ({e})"
            continue
        if CAP_FABRIC in baseline.capabilities and baseline.supports(problem.kind):
            out.append((name, baseline))
    return out, refusals


def deliveries(problem: Problem) -> int:
    """The (NPU, chunk) pairs ``problem`` delivers per phase: NPUs x chunks, or chunks for a unicast collective."""
    return problem.num_chunks * (1 if problem.collective.unicast else problem.num_npus)


def _baselines_wanted(problem: Problem, opts: GreedyOptions) -> bool:
    return opts.baseline_candidates and deliveries(problem) <= BASELINE_CANDIDATE_MAX_DELIVERIES


def warmup_baselines(problem: Problem, opts: GreedyOptions) -> float:
    """Load the kernels of the baseline candidates of ``problem`` (their ``warmup``), so that no JIT falls inside
    the greedy's clock; the seconds spent."""
    if not _baselines_wanted(problem, opts):
        return 0.0
    return sum(baseline.warmup(problem, None) for _, baseline in _baselines(problem)[0])


def baseline_candidates(problem: Problem, opts: GreedyOptions, deadline: float | None, found: dict, ends: list,
                        notes: dict) -> None:
    """Add to ``found`` (as ``baseline:<name>``) the schedule of every backend of :func:`_baselines`; one that
    refuses, fails or returns no schedule is named in ``notes["baseline_refusals"]`` (why), and none starts
    after ``deadline``."""
    t0 = time.perf_counter()
    baselines, refusals = _baselines(problem)
    for i, (name, baseline) in enumerate(baselines):
        if deadline is not None and time.perf_counter() > deadline:
            notes["baselines_skipped"] = f"time limit reached: {', '.join(n for n, _ in baselines[i:])} not run"
            break
        try:
            res = baseline.solve(problem, {"seed": opts.seed})
        except SolverError as e:   # e.g. nvls on a switch that does not reduce
            refusals[name] = str(e)
            continue
        except Exception as e:  # noqa: BLE001 - a candidate is optional: the greedy's own schedule remains
            refusals[name] = f"failed ({type(e).__name__}: {e})"
            continue
        if res.schedule is None or res.status not in ("optimal", "feasible"):
            refusals[name] = f"returned {res.status} without a schedule"
            continue
        found[BASELINE_PREFIX + name] = res.schedule.to_schedule()
        ends.append((time.perf_counter(), min(x.makespan_us for x in found.values())))
    notes["baseline_time_s"] = time.perf_counter() - t0
    if refusals:
        notes["baseline_refusals"] = refusals


def _solve_fabric(problem: Problem, opts: GreedyOptions, plus: bool, deadline: float | None) -> tuple[Schedule, dict]:
    order = _chunk_order(opts)
    runs = restart_count(problem, opts)
    # the first run uses the seed itself (so greedy_plus's TACOS candidate is greedy's own run)
    seeds = [opts.seed] + [int(s % (2**63)) for s in restart_seeds(opts.seed, runs)[1:]]

    def copy_solve(p: Problem, seed: int, rules: bool, **start) -> Schedule:
        # built once per fabric and chunk size inside solve_fabric's shared_hops block (also the reversed copy
        # that each mirrored phase builds anew)
        return fabric_copy(p, seed=seed, chunk_order=order if rules else "random",
                           hops=build_hops(p.topology, p.chunk_bytes), local_first=rules, **start)

    def one(seed: int, rules: bool) -> Schedule:
        def copy(p, **start):
            return copy_solve(p, seed, rules, **start)

        if problem.collective.copies:
            return copy(problem)
        if problem.kind != ALL_REDUCE:
            return mirrored(problem, copy)
        rs = mirrored(problem, copy)
        ag_problem = problem.with_collective(ALL_GATHER)
        if not problem.collective.overlap:
            return Schedule.concat([rs, copy(ag_problem).shifted(rs.makespan_us)])
        free = link_last_use(problem, rs)
        ready = chunk_done_at_owner(problem, rs)
        return Schedule.concat([rs, copy(ag_problem, link_free=free, chunk_ready=ready)])

    found: dict[str, Schedule] = {}
    ends = []
    spans = []
    t0 = time.perf_counter()
    # greedy: the TACOS rule; greedy_plus: its rules (rarest chunk, local-first imports, balanced unicast routes)
    # and, as a candidate, the TACOS rule too (it is never behind it)
    variants = [("rules", True), ("tacos", False)] if plus else [("greedy", opts.chunk_order != "random")]
    notes = {}
    if plus and problem.num_npus * problem.num_chunks > TACOS_CANDIDATE_MAX_PAIRS:
        # measured on dgx_h100x128: the TACOS rule takes 247 s and ends 7.4x later than the rules (8.7 s)
        variants = variants[:1]
        notes["tacos_skipped"] = (f"{problem.num_npus} NPUs x {problem.num_chunks} chunks > "
                                  f"{TACOS_CANDIDATE_MAX_PAIRS}: the TACOS rule is not a candidate at this size")
    for i, seed in enumerate(seeds):
        if i and deadline is not None and time.perf_counter() > deadline:
            break
        for name, rules in variants:
            s = one(seed, rules)
            spans.append(s.makespan_us)
            if name not in found or s.makespan_us < found[name].makespan_us * (1 - 1e-12):
                found[name] = s
            ends.append((time.perf_counter(), min(x.makespan_us for x in found.values())))
    if plus and problem.kind == ALL_REDUCE:
        from ..in_switch import interleaved_all_reduce, nvls_switch, reduction_tree, sharp_all_reduce

        if nvls_switch(problem.topology) is not None:
            # one switch: owner changes interleaved (N K + 3 slots; the owner-by-owner pipeline takes N K + N)
            found["in_switch_interleaved"] = interleaved_all_reduce(problem)
            ends.append((time.perf_counter(), min(s.makespan_us for s in found.values())))
        elif reduction_tree(problem.topology) is not None:   # a tree of such switches (SHARP-like)
            found["in_switch_pipeline"] = sharp_all_reduce(problem)
            ends.append((time.perf_counter(), min(s.makespan_us for s in found.values())))
    if _baselines_wanted(problem, opts):
        baseline_candidates(problem, opts, deadline, found, ends, notes)
    elif opts.baseline_candidates:
        notes["baselines_skipped"] = (f"{deliveries(problem)} (NPU, chunk) deliveries > "
                                      f"{BASELINE_CANDIDATE_MAX_DELIVERIES}: no baseline is a candidate at this size")
    # ties: the greedy's own schedules first, then the baselines in registry order
    pref = {"rules": 0, "greedy": 0, "in_switch_interleaved": 1, "in_switch_pipeline": 1, "tacos": 2}
    pref.update({k: 3 + i for i, k in enumerate(k for k in found if k not in pref)})
    chosen = min(found, key=lambda k: (found[k].makespan_us, pref[k]))
    stats = {"engine": "fabric", "chunk_order_used": order, "restarts": len(seeds),
             "restarts_run": len(spans) // len(variants), "makespans_us": spans,
             "best_seed": seeds[int(np.argmin(spans)) // len(variants)], "chosen": chosen,
             "candidates_us": {k: s.makespan_us for k, s in found.items()}, "candidate_ends": ends,
             "transfers": len(found[chosen]), "fabric_ignores": ",".join(_POINT_TO_POINT),
             "fabric_time_s": time.perf_counter() - t0, **notes}
    return found[chosen], stats
