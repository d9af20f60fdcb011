"""The stages of a run: build the problem, bound it, solve, verify, save (no configuration handling).

The solver only solves. :func:`solve_and_verify` is the one path from a
problem to a verified result that every caller takes (``run.py``, the
benchmarks and the studies): it warms the backend up outside the clock, times
``solve()``, replays the schedule with the independent verifier, folds the
solver's proven bound into the lower bound and sets the status that the
evidence supports. :func:`~tacos_bench.runner.pipeline.run_job` wraps it for a configuration mapping
(Hydra's or a plain dict) and a run directory (:mod:`tacos_bench.rundir`);
every failure becomes a record with ``status="error"`` and the message, so a
sweep goes on and nothing already computed is lost.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import mesh2d
>>> rec, sched = solve_and_verify(Problem(mesh2d(4, 4), Collective("all_gather")), "greedy", {"seed": 1})
>>> rec["valid"], rec["status"], rec["optimality_proof"], rec["gap"]
(True, 'optimal', 'lower_bound', 0.0)
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .. import rundir
from ..anytime import summarize, write_trace
from ..collective import ALL_GATHER, ALL_REDUCE, Collective
from ..errors import CollectiveError, ConfigError, TacosError
from ..problem import Problem
from .records import flatten

log = logging.getLogger(__name__)


class ExportStageError(TacosError):
    """The export of a verified, saved schedule failed (the message names the stage)."""


GB = 1e9  # algorithmic bandwidth is reported in GB/s (10^9 bytes), as nccl-tests does
OPTIMAL_REL_TOL = 1e-9  # a verified time within this of the lower bound meets it


def build_problem(topo_cfg: Mapping[str, Any], coll_cfg: Mapping[str, Any], seed: int = 0) -> Problem:
    """The problem of a ``topo`` and a ``collective`` config mapping (``seed``: a generated demand's draws).

    ``collective.root`` is an NPU id as configured, like ``topo.failed_npus``: it is mapped to the id it has
    after failed NPUs are removed or a subset is kept. A collective given by a chunk table (all_to_allv,
    moe_dispatch, moe_combine, custom) is built by :mod:`tacos_bench.runner.demand_config`.
    """
    from ..collective import DEMAND_KINDS, canonical_kind
    from ..topology.named import build_topology
    from .demand_config import SETTINGS, demand_collective, unused_settings

    valid = ("kind", "chunks_per_npu", "buffer_mib", "overlap", "root", "release_us") + tuple(
        dict.fromkeys(k for keys in SETTINGS.values() for k in keys))
    unknown = sorted(set(coll_cfg) - set(valid))
    if unknown:
        from .conf import unknown_keys_message

        raise ConfigError(unknown_keys_message("collective", unknown, valid))
    kind = canonical_kind(coll_cfg.get("kind", "all_gather"))
    stray = unused_settings(coll_cfg, kind)
    if stray:
        raise ConfigError(f"collective={kind} does not read {', '.join('collective.' + k for k in stray)}")
    if kind in DEMAND_KINDS:
        topo = build_topology(dict(topo_cfg))
        coll = demand_collective(coll_cfg, topo, seed)
        return Problem(topo, replace(coll, release=_configured_release(topo, coll_cfg.get("release_us"), topo_cfg)))
    coll = Collective(kind=coll_cfg.get("kind", "all_gather"), chunks_per_npu=coll_cfg.get("chunks_per_npu", 1),
                      buffer_mib=coll_cfg.get("buffer_mib", 1024.0), overlap=coll_cfg.get("overlap", True),
                      root=coll_cfg.get("root", 0) if coll_cfg.get("root") is not None else 0)
    topo = build_topology(dict(topo_cfg))
    if coll.rooted:
        coll = replace(coll, root=_configured_root(topo, coll.root, topo_cfg))
    coll = replace(coll, release=_configured_release(topo, coll_cfg.get("release_us"), topo_cfg))
    problem = Problem(topo, coll)
    check_memory(problem)
    return problem


# What one transfer of a schedule held as a table costs in memory while a run has it (the backend's arrays, the
# saved copy, the verifier's replay): measured 190-240 B (all_to_all on uniring4, 0.5-2.4 M transfers). The
# estimate takes less, so that it refuses only what cannot fit.
BYTES_PER_TRANSFER = 150
# A very large All-Gather may come back compact (tacos_bench.compact): 3.27 GiB peak for the 1.6 G deliveries of
# mesh200x200, about 2.2 B per delivery in all (docs/scale.md); the estimate takes 1 B.
BYTES_PER_COMPACT_DELIVERY = 1


def deliveries(problem: Problem) -> int:
    """(NPU, chunk) pairs a schedule must deliver, from the collective's kind and sizes alone (no arrays: the
    count is what decides whether they fit). A chunk table's collective counts its table's rows."""
    from ..collective import BROADCAST, GATHER, REDUCE, REDUCE_SCATTER, SCATTER, ALL_TO_ALL

    n, c = problem.num_npus, problem.num_chunks
    if problem.collective.general:
        return c
    kind = problem.kind
    if kind in (ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE):
        return c * (n - 1)
    if kind == ALL_REDUCE:
        return 2 * c * (n - 1)
    if kind in (GATHER, SCATTER, ALL_TO_ALL):   # every chunk to (or from) one NPU; its own stay put
        return c * (n - 1) // n
    return c * n


def memory_estimate_bytes(problem: Problem) -> int:
    """A low estimate of the memory a run of ``problem`` needs: its schedule (one transfer per delivery at
    least; compact for All-Gather) and the holding state of every (node, chunk)."""
    d = deliveries(problem)
    if problem.kind == ALL_GATHER:   # the compact path's state is in its per-delivery figure
        return d * BYTES_PER_COMPACT_DELIVERY
    return d * BYTES_PER_TRANSFER + problem.topology.num_nodes * problem.num_chunks


def available_memory_bytes() -> int | None:
    """Memory the run may still take (``MemAvailable`` plus free swap), or None where the OS does not say."""
    try:
        with open("/proc/meminfo") as fh:
            info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in fh if ln.split()[1:2]}
        return info["MemAvailable"] + info.get("SwapFree", 0)
    except (OSError, KeyError, ValueError, IndexError):
        return None


def check_memory(problem: Problem, available: int | None = None) -> None:
    """Refuse, before any array is allocated, a problem whose schedule cannot fit in memory.

    Raises
    ------
    CollectiveError
        Naming the chunks, the estimate and what is available, and what to lower.
    """
    need = memory_estimate_bytes(problem)
    have = available_memory_bytes() if available is None else available
    if have is None or need <= have:
        return
    gib = 2 ** 30
    what, knob = _sizes(problem)
    raise CollectiveError(
        f"{what} needs at least {need / gib:,.1f} GiB ({deliveries(problem):,} deliveries), and "
        f"{have / gib:,.1f} GiB are available: lower {knob} or use fewer NPUs")


def _sizes(problem: Problem) -> tuple[str, str]:
    """The problem in a refusal's words, and the setting that sizes it."""
    c = problem.collective
    sizes = (f"{problem.num_chunks:,} chunks" if c.general else
             f"collective.chunks_per_npu={c.chunks_per_npu:,} ({problem.num_chunks:,} chunks)")
    return (f"{problem.kind} with {sizes} on {problem.num_npus} NPUs",
            "the chunk count" if c.general else "collective.chunks_per_npu")


def check_size(problem: Problem, max_deliveries: int) -> None:
    """Refuse, before any work, a problem of more than ``max_deliveries`` deliveries (run setting
    ``max_deliveries``): it may fit in memory yet take minutes, and such a count is most often a typo in
    ``collective.chunks_per_npu``. All-Gather is exempt: its compact path streams billions of deliveries.

    Raises
    ------
    CollectiveError
        Naming the count, the limit and both ways out (fewer chunks, a higher limit).
    """
    d = deliveries(problem)
    if problem.kind == ALL_GATHER or d <= max_deliveries:
        return
    what, knob = _sizes(problem)
    raise CollectiveError(
        f"{what} asks for {d:,} deliveries, above max_deliveries={max_deliveries:,} (the guard against runs of "
        f"minutes): lower {knob}, or set max_deliveries={d} to run it")


def _configured_release(topo, release, topo_cfg: Mapping[str, Any]) -> tuple:
    """``collective.release_us`` with each NPU id as configured mapped to its id in ``topo`` (as the root is)."""
    from ..collective import parse_release

    pairs = parse_release(release)
    out = []
    for v, t in pairs:
        try:
            out.append((_configured_root(topo, v, topo_cfg), t))
        except CollectiveError as e:
            raise CollectiveError(str(e).replace(f"collective.root={v}", f"collective.release_us: NPU {v}")) from None
    return tuple(out)


def _configured_root(topo, root: int, topo_cfg: Mapping[str, Any]) -> int:
    """The id NPU ``root`` (as configured) has in ``topo``; an error if it is not one of its NPUs."""
    orig = topo.meta.get("original_ids")
    if orig is None:
        if root >= topo.num_npus:
            raise CollectiveError(f"collective.root={root} is not an NPU of {topo.name} (NPUs 0..{topo.num_npus - 1})")
        return root
    hit = np.flatnonzero(np.asarray(orig) == root)
    if hit.size:
        return int(hit[0])
    if root in set(int(v) for v in (topo_cfg.get("failed_npus") or [])):
        raise CollectiveError(f"collective.root={root} is a failed NPU (topo.failed_npus)")
    # an NPU of the topology as built but not a member (with subset_mode=relay: one of the relays)
    parent_npus = topo.meta.get("parent_num_npus")
    if topo_cfg.get("subset") is not None and (0 <= root < parent_npus if parent_npus is not None
                                               else root <= max(orig)):
        relay = " (with subset_mode=relay it only relays)" if topo_cfg.get("subset_mode") == "relay" else ""
        raise CollectiveError(f"collective.root={root} is not in topo.subset{relay}")
    raise CollectiveError(f"collective.root={root} is not an NPU of {topo.meta.get('parent', topo.name)}")


def problem_fields(problem: Problem) -> dict[str, Any]:
    topo = problem.topology
    return {
        "topology": topo.name,
        "topology_header_name": topo.meta.get("header_name"),
        "topology_kind": topo.meta.get("kind", "custom"),
        "num_npus": problem.num_npus,
        "num_links": problem.num_links,
        "homogeneous": topo.is_homogeneous,
        "symmetric": topo.is_symmetric,
        "collective": problem.kind,
        "chunks_per_npu": problem.collective.chunks_per_npu if not problem.collective.general else None,
        "buffer_mib": problem.collective.buffer_mib if not problem.collective.general else None,
        "overlap": problem.collective.overlap if problem.kind == "all_reduce" else None,
        "root": _root_as_configured(problem),
        "failed_links": len(topo.meta.get("failed_links", [])) or None,
        "num_chunks": problem.num_chunks,
        "chunk_bytes": problem.chunk_bytes,
        "min_link_time_us": float(problem.link_time_us.min()) if problem.num_links else None,
        # stragglers (collective.release_us): [[npu, t_us], ...] as JSON text, null without any
        "release_us": (flatten("", {"r": [list(x) for x in problem.collective.release]})["r"]
                       if problem.collective.release else None),
        **demand_fields(problem),
    }


def demand_fields(problem: Problem) -> dict[str, Any]:
    """A chunk-table collective's record fields: its payload, the bytes its rounding to whole chunks added, and
    what its generator recorded (``demand_gini``); nulls for a named collective."""
    d = problem.collective.demand
    if d is None:
        return {"demand_bytes": None, "padding_bytes": None, "demand_gini": None}
    return {"demand_bytes": float(d.pair_bytes().sum()) if d.num_chunks <= 1 << 21 else None,
            "padding_bytes": d.padding_bytes, "demand_gini": d.meta.get("demand_gini")}


def _root_as_configured(problem: Problem) -> int | None:
    if not problem.collective.rooted:
        return None
    orig = problem.topology.meta.get("original_ids")
    return int(orig[problem.collective.root]) if orig is not None else problem.collective.root


def bound_fields(problem: Problem) -> dict[str, Any]:
    """Lower bounds as record fields; a failure here is recorded but does not fail the run.

    An All-Reduce also gets the bounds of its two phases alone (:func:`phase_bound_fields`), so its
    time can be judged against the Reduce-Scatter then All-Gather it is usually built from.

    Parameters
    ----------
    problem : Problem

    Returns
    -------
    dict
        ``lower_bound_us``, ``lower_bound_source``, ``bounds_time_s`` (all bounds, the phases' included)
        and every ``lb_*`` component; ``bounds_error`` instead when the bounds failed. All-Reduce adds
        ``rs_lower_bound_us``, ``ag_lower_bound_us``, their sources and ``phases_bound_sum_us``.
    """
    try:
        from ..bounds import lower_bounds

        t0 = time.perf_counter()
        lb = lower_bounds(problem)
        dt = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - the schedule is still worth having
        msg = f"{type(e).__name__}: {e}"
        log.warning("lower bounds failed: %s", msg)
        return {"bounds_error": msg, "lower_bound_us": None}
    out = {"lower_bound_us": lb.get("best_us"), "lower_bound_source": lb.get("best_source"), "bounds_time_s": dt}
    out.update({f"lb_{k}": v for k, v in lb.items() if k not in ("best_us", "best_source")})
    if problem.kind == ALL_REDUCE:
        t0 = time.perf_counter()
        out.update(phase_bound_fields(problem))
        out["bounds_time_s"] += time.perf_counter() - t0
    if problem.kind == "concurrent":
        from ..bounds import part_problem

        parts = problem.collective.demand.meta["parts"].parts
        out["part_bounds_us"] = flatten("", {"b": [lower_bounds(part_problem(problem, p))["best_us"]
                                                    for p in parts]})["b"]
    return out


def phase_bound_fields(problem: Problem) -> dict[str, Any]:
    """The bounds of an All-Reduce's two phases alone, and their sum, as record fields.

    The Reduce-Scatter bound is the All-Gather one on the reversed topology
    (:meth:`~tacos_bench.problem.Problem.reversed_all_gather`, as :mod:`tacos_bench.bounds` computes it), the
    All-Gather bound the one on the topology itself. Their sum is *not* a lower bound on the All-Reduce
    (docs/bounds.md: a schedule may overlap or pipeline the phases); it bounds only a Reduce-Scatter followed
    by an All-Gather after a barrier, which is why the summary line shows it as a yardstick, not as a bound.

    Parameters
    ----------
    problem : Problem
        An All-Reduce.

    Returns
    -------
    dict
        ``rs_lower_bound_us``, ``rs_lower_bound_source``, ``ag_lower_bound_us``, ``ag_lower_bound_source``,
        ``phases_bound_sum_us``; ``bounds_error`` (and None values) when they failed: the All-Reduce bound
        and the run do not depend on them.

    Examples
    --------
    >>> from tacos_bench import Collective
    >>> from tacos_bench.topology.generators import ring
    >>> f = phase_bound_fields(Problem(ring(4), Collective("all_reduce", 1, 16)))
    >>> f["rs_lower_bound_us"], f["ag_lower_bound_us"], f["phases_bound_sum_us"]
    (157.25, 157.25, 314.5)
    """
    try:
        from ..bounds import lower_bounds

        rs = lower_bounds(problem.reversed_all_gather())
        ag = lower_bounds(problem.with_collective(ALL_GATHER))
    except Exception as e:  # noqa: BLE001 - the All-Reduce bound already stands on its own
        msg = f"phase bounds: {type(e).__name__}: {e}"
        log.warning("%s", msg)
        return {"bounds_error": msg, "rs_lower_bound_us": None, "ag_lower_bound_us": None,
                "phases_bound_sum_us": None}
    return {"rs_lower_bound_us": rs["best_us"], "rs_lower_bound_source": rs["best_source"],
            "ag_lower_bound_us": ag["best_us"], "ag_lower_bound_source": ag["best_source"],
            "phases_bound_sum_us": rs["best_us"] + ag["best_us"]}


def gap_fields(time_us: float, lower_bound_us: float) -> dict[str, float]:
    """``ratio_to_bound``, ``gap`` and ``gap_to_bound`` of a verified time against a lower bound.

    A gap within :data:`OPTIMAL_REL_TOL` of 0 is recorded as exactly 0 (ratio 1): the bounds reach their
    value by other arithmetic than the verifier (sums in another order; the drain bound's bisection stops a
    few 1e-11 below it), so a schedule at its bound used to show ``gap = -2.22e-16`` or ``5.6e-11``, which
    reads as a wrong bound or a real gap. It is the tolerance
    under which the status is already ``optimal``, so ``gap == 0`` and "meets the bound" agree. A larger
    negative gap is kept: it means a wrong bound and must stay visible.

    Examples
    --------
    >>> gap_fields(1.0 - 2.22e-16, 1.0)["gap"], gap_fields(1335.083333333333, 1335.0833332586335)["gap"]
    (0.0, 0.0)
    >>> gap_fields(1.5, 1.0)
    {'ratio_to_bound': 1.5, 'gap': 0.5, 'gap_to_bound': 0.5}
    """
    ratio = time_us / lower_bound_us
    gap = ratio - 1.0
    if abs(gap) < OPTIMAL_REL_TOL:
        ratio, gap = 1.0, 0.0
    return {"ratio_to_bound": ratio, "gap": gap, "gap_to_bound": gap}


def _scalar_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    keep = (int, float, str, bool, type(None), list, tuple, dict, np.generic)
    return flatten("s_", {k: v for k, v in dict(stats).items() if isinstance(v, keep)})


def _warm_problems(problem: Problem) -> list[Problem]:
    """What a backend compiles its kernels for: the problem, or a concurrent collective's parts."""
    if problem.kind != "concurrent":
        return [problem]
    from ..bounds import part_problem

    return [part_problem(problem, p) for p in problem.collective.demand.meta["parts"].parts]


def candidate_fields(result) -> dict[str, Any]:
    """``candidate``, ``candidates_tried`` and ``candidates_skipped`` of a portfolio backend's result (the lists
    as JSON text, as every list of a flat record); all null for a backend without candidates.

    >>> from solvers.base import SolveResult
    >>> candidate_fields(SolveResult("feasible", None, candidate="rules", candidates_tried=({"name": "rules"},)))
    {'candidate': 'rules', 'candidates_tried': '[{"name": "rules"}]', 'candidates_skipped': '[]'}
    """
    if result.candidate is None:
        return {"candidate": None, "candidates_tried": None, "candidates_skipped": None}
    return {"candidate": result.candidate,
            **flatten("", {"candidates_tried": list(result.candidates_tried),
                           "candidates_skipped": list(result.candidates_skipped)})}


def solve_and_verify(problem: Problem, solver: str, options: Mapping[str, Any] | None = None, *,
                     bounds: bool = True, out_dir=None, csv: str = "auto", csv_max_rows: int = 20_000_000,
                     topology_max_links: int = 2_000_000, export: str = "none",
                     fields: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Solve ``problem`` with backend ``solver`` and verify the schedule; returns ``(fields, schedule)``.

    Parameters
    ----------
    problem : Problem
    solver : str
        A registered backend name.
    options : mapping, optional
        Backend options including ``seed``, ``time_limit_s``, ``threads``.
    bounds : bool
        Compute the lower bounds first (``lower_bound_us`` may already be in ``fields``).
    out_dir : path, optional
        Also save the schedule and topology there (:func:`tacos_bench.rundir.save_schedule`)
        and the export, if any.
    fields : dict, optional
        Filled in place as the run goes, so an exception keeps what was computed before it.

    Raises
    ------
    TacosError
        Bad options, an unsupported collective, a failing export: the caller records it.
        A schedule the verifier rejects is *not* raised: ``valid`` is False and ``error`` says why.
    """
    import solvers

    fields = {} if fields is None else fields
    if bounds:
        fields.update(bound_fields(problem))
    backend = solvers.get_solver(solver)
    opts = backend.options(options)
    caps = backend.capabilities
    fields.update(time_limit_s=opts.time_limit_s, threads=opts.threads, uses_seed="randomized" in caps,
                  honours_time_limit="time_limit" in caps, uses_threads="threads" in caps)
    fields.update(flatten("p_solver_", opts.specific()))
    backend.check_supported(problem)
    if opts.time_limit_s is not None and "time_limit" not in caps:   # said only of a run that goes ahead
        log.warning("solver %s runs to completion: it does not honour time_limit_s", solver)

    fields["jit_warmup_s"] = sum(backend.warmup(q, opts) for q in _warm_problems(problem))
    t0 = time.perf_counter()
    if problem.has_release:
        from solvers.release import solve_released

        result = solve_released(backend, problem, opts)
        fields["release_plan"] = result.candidate
    else:
        result = backend.solve(problem, opts)
    fields["synthesis_time_s"] = time.perf_counter() - t0
    fields.update(status=result.status, objective_us=result.objective_us, best_bound_us=result.best_bound_us,
                  build_time_s=result.build_time_s, solve_time_s=result.solve_time_s,
                  stop_reason=result.stop_reason, solution_source=result.solution_source,
                  optimality_proof=result.proof if result.status == "optimal" else None,
                  optimality_scope=result.optimality_scope, time_resolution_us=result.time_resolution_us,
                  search_time_s=result.search_time_s, search_branches=result.search_branches)
    fields.update(candidate_fields(result))
    if problem.kind == "concurrent" and "part_times_us" in result.stats:
        fields["part_times_us"] = flatten("", {"t": result.stats["part_times_us"]})["t"]
    stats = dict(result.stats)
    fields["jit_warmup_s"] += float(stats.pop("jit_warmup_s", 0.0) or 0.0)
    fields.update(_scalar_stats(stats))
    fields["solver_message"] = result.message or None   # always in the record (null: no note)
    fields["error"] = None if result.status != "error" else (result.message or "solver reported an error")
    lb = fields.get("lower_bound_us")
    if result.best_bound_us is not None and (lb is None or result.best_bound_us > lb):
        fields.update(lower_bound_us=result.best_bound_us, lower_bound_source="solver")

    sched = result.schedule
    fields["valid"] = False
    if sched is None:
        if fields["error"] is None and result.status not in ("infeasible", "no_solution"):
            fields["error"] = f"solver returned no schedule (status {result.status})"
        elif fields["error"] is None:
            note = f" ({result.message})" if result.message and result.message != result.status else ""
            if result.stop_reason in ("time_limit", "gap_limit") and opts.time_limit_s is not None \
                    and result.status == "no_solution":
                cold = getattr(opts, "warm_start", True) is False
                fields["error"] = (f"no schedule: the time limit (solver.time_limit_s={opts.time_limit_s:g}) ended "
                                   f"the search before it found one{note}; raise it"
                                   + (", or set solver.warm_start=true so the search starts from the greedy's "
                                      "schedule" if cold else ""))
            else:
                fields["error"] = f"no schedule: {result.status}{note}"
        return fields, None
    sched, ver = save_and_verify(problem, sched, out_dir, fields, csv=csv, csv_max_rows=csv_max_rows,
                                 topology_max_links=topology_max_links)
    if not ver.valid:
        # a rejected schedule is no solution: never "feasible" (nor "optimal") next to valid=false
        fields.update(status="error", optimality_proof=None, error=f"verification failed: {ver.message}")
        log.error("schedule REJECTED by the verifier: %s", ver.message)
        return fields, sched
    T = ver.collective_time_us
    fields.update(collective_time_us=T, link_utilization=ver.link_utilization)
    if result.trace:
        fields.update(summarize(result.trace, T, fields["synthesis_time_s"]))
        if out_dir is not None:
            fields["anytime_file"] = write_trace(result.trace, out_dir).name
    lb = fields.get("lower_bound_us")
    if lb:
        fields.update(gap_fields(T, lb))
        if fields["status"] in ("feasible", "optimal") and T <= lb * (1 + OPTIMAL_REL_TOL):
            # the verified time meets a valid lower bound: optimal, whoever found it, and for the problem
            # itself (the bound is continuous), even where the backend's own model was a rounded TEN
            if fields["status"] != "optimal" or fields.get("optimality_scope") == "ten" \
                    or not fields.get("optimality_proof"):
                fields["optimality_proof"] = "lower_bound"
            fields["status"] = "optimal"
            if fields.get("optimality_scope") == "ten":
                fields["optimality_scope"] = "continuous"
    fields["algbw_GBps"] = (problem.chunk_bytes * problem.num_chunks) / GB / (T * 1e-6) if T > 0 else None
    if export != "none":
        if out_dir is None:
            raise ConfigError("an export needs a run directory")
        from .. import export as exporters

        sched = sched.to_schedule(max_rows=csv_max_rows)
        try:
            path = exporters.export_to_file(export, problem, sched, out_dir)
        except TacosError as e:  # the schedule is verified and saved; say which stage failed
            raise ExportStageError(f"exporting ({export}): {e}") from None
        fields["export_file"] = Path(path).name
    return fields, sched


CHUNKS_FILE = "chunks.csv"
DEMAND_FILE = "demand.csv"


def save_demand(problem: Problem, out_dir, max_rows: int) -> dict[str, Any]:
    """``chunks.csv`` (the chunk table any schedule is checked against, :mod:`tacos_bench.demand`) and, for a
    generated demand, ``demand.csv`` (its per-pair byte matrix) in the run directory; their names as fields."""
    from ..demand import write_chunks_csv, write_matrix_csv

    out = {"chunks_file": None, "demand_file": None}
    if problem.num_chunks > max_rows:
        return out
    out["chunks_file"] = write_chunks_csv(problem.demand, Path(out_dir) / CHUNKS_FILE).name
    if problem.collective.general and problem.num_npus <= 4096:
        out["demand_file"] = write_matrix_csv(problem.demand.pair_bytes(), Path(out_dir) / DEMAND_FILE).name
    return out


def save_and_verify(problem: Problem, sched, out_dir, fields: dict[str, Any], *, csv: str, csv_max_rows: int,
                    topology_max_links: int, fault=None):
    """Save ``sched`` into the run directory (if any) and replay it with the verifier (``fault``: as executed
    through it); fills ``num_transfers``, the saved-file fields, ``verify_time_s`` and ``valid``. Returns the
    schedule as saved and the :class:`~tacos_bench.verify.Verification`."""
    from ..verify import check

    fields["num_transfers"] = len(sched)
    if out_dir is not None:
        sched, saved = rundir.save_schedule(out_dir, problem, sched, csv=csv, csv_max_rows=csv_max_rows,
                                            topology_max_links=topology_max_links)
        fields.update(saved)
        fields.update(save_demand(problem, out_dir, max_rows=csv_max_rows))
    t0 = time.perf_counter()
    ver = check(problem, sched, fault=fault)
    fields["verify_time_s"] = time.perf_counter() - t0
    fields["valid"] = ver.valid
    return sched, ver
