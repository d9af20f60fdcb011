"""One run, end to end: build the problem, solve, verify, bound, record.

The solver only solves; this module times it, replays its schedule with the
independent verifier, computes lower bounds and writes the flat record
(``result.json``) plus ``schedule.csv`` into the run's output directory. Every
failure becomes a record with ``status="error"`` and the message, so a sweep
goes on and nothing already computed is lost.

``run_job`` takes plain mappings, so it serves ``run.py`` (Hydra) and the
studies in ``experiments/`` alike.
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .collective import Collective
from .conf import SOLVER_COMMON_KEYS
from .errors import ConfigError, TacosError
from .problem import Problem
from .records import SCHEDULE_FILE, TOPOLOGY_FILE, environment, flatten, new_record, write_record

log = logging.getLogger(__name__)

GB = 1e9  # algorithmic bandwidth is reported in GB/s (10^9 bytes), as nccl-tests does


def build_problem(topo_cfg: Mapping[str, Any], coll_cfg: Mapping[str, Any]) -> Problem:
    from .topologies import build_topology

    topo = build_topology(dict(topo_cfg))
    coll = Collective(kind=coll_cfg.get("kind", "all_gather"),
                      chunks_per_npu=coll_cfg.get("chunks_per_npu", 1),
                      buffer_mib=coll_cfg.get("buffer_mib", 1024.0))
    return Problem(topo, coll)


def solver_options(solver_cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in solver_cfg.items() if k not in SOLVER_COMMON_KEYS}


def _problem_fields(problem: Problem) -> dict[str, Any]:
    topo = problem.topology
    return {
        "topology": topo.name,
        "topology_kind": topo.meta.get("kind", "custom"),
        "num_npus": problem.num_npus,
        "num_links": problem.num_links,
        "homogeneous": topo.is_homogeneous,
        "symmetric": topo.is_symmetric,
        "collective": problem.kind,
        "chunks_per_npu": problem.collective.chunks_per_npu,
        "buffer_mib": problem.collective.buffer_mib,
        "num_chunks": problem.num_chunks,
        "chunk_bytes": problem.chunk_bytes,
        "min_link_time_us": float(problem.link_time_us.min()) if problem.num_links else None,
    }


def run_job(cfg: Mapping[str, Any], out_dir, *, choices: Mapping[str, Any] | None = None,
            extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run one configuration and write its record; never raises for a failing run.

    Parameters
    ----------
    cfg : mapping
        ``{"solver": {...}, "topo": {...}, "collective": {...}, "seed": int, ...}``
        as composed by Hydra (``conf/``), or built by hand.
    out_dir : path
        Where ``result.json`` (always) and ``schedule.csv`` (when a schedule
        exists) are written.
    choices : mapping, optional
        Hydra's ``runtime.choices`` (recorded as ``choice_*`` fields).
    extra : mapping, optional
        More fields to record (job number, sweep id, ...).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("traceback.txt", SCHEDULE_FILE, TOPOLOGY_FILE):  # from an earlier run in the same dir
        (out_dir / stale).unlink(missing_ok=True)
    from .compact import COMPACT_DIR

    shutil.rmtree(out_dir / COMPACT_DIR, ignore_errors=True)
    config_error = None
    try:
        solver_cfg, topo_cfg, coll_cfg = (_section(cfg, k) for k in ("solver", "topo", "collective"))
        seed = _seed(cfg.get("seed", 0))
    except ConfigError as e:  # recorded below like any other failure
        solver_cfg, topo_cfg, coll_cfg, seed, config_error = {}, {}, {}, None, e
    rec = new_record(
        experiment=cfg.get("experiment", "default"),
        solver=solver_cfg.get("name"),
        seed=seed,
        time_limit_s=solver_cfg.get("time_limit_s"),
        threads=solver_cfg.get("threads", 1),
        **flatten("p_solver_", solver_options(solver_cfg)),
        **flatten("choice_", {k: v for k, v in (choices or {}).items() if not k.startswith("hydra")}),
        topology=topo_cfg.get("name"),
        collective=coll_cfg.get("kind"),
        chunks_per_npu=coll_cfg.get("chunks_per_npu"),
        buffer_mib=coll_cfg.get("buffer_mib"),
        status="error", valid=False, collective_time_us=None, lower_bound_us=None, error=None,
        output_dir=str(out_dir),
    )
    rec.update(extra or {})
    rec.update(environment())
    stage = "building the problem"
    try:
        if config_error is not None:
            raise config_error
        _check_output_options(cfg)
        problem = build_problem(topo_cfg, coll_cfg)
        rec.update(_problem_fields(problem))
        log.info("problem: %s", problem.describe())

        _bound(problem, rec)

        stage = "solving"
        from solvers import get_solver

        solver = get_solver(str(solver_cfg.get("name")))
        t0 = time.perf_counter()
        result = solver.solve(problem, time_limit_s=solver_cfg.get("time_limit_s"), seed=seed,
                              threads=int(solver_cfg.get("threads", 1)), **solver_options(solver_cfg))
        rec["synthesis_time_s"] = time.perf_counter() - t0
        rec.update(status=result.status, objective_us=result.objective_us, best_bound_us=result.best_bound_us,
                   solver_gap=result.gap, build_time_s=result.build_time_s, solve_time_s=result.solve_time_s)
        rec.update(flatten("s_", {k: v for k, v in dict(result.stats).items()
                                  if isinstance(v, (int, float, str, bool, type(None), list, tuple, dict, np.generic))}))
        if result.message:
            rec["solver_message"] = result.message
        rec["error"] = None if result.status != "error" else (result.message or "solver reported an error")

        sched = result.schedule
        if sched is None and rec["error"] is None:
            rec["error"] = f"solver returned no schedule (status {result.status})" + (
                f": {result.message}" if result.message else "")
        if sched is not None:
            stage = "saving the schedule"
            rec["num_transfers"] = len(sched)
            # a very large All-Gather may come back as a CompactSchedule (tacos_bench.compact): saved as
            # schedule_compact/, schedule.csv only up to schedule_csv_max_rows, verified in one pass
            compact = bool(getattr(sched, "is_compact", False))
            sched = _save_schedule(cfg, problem, sched, out_dir, rec)

            stage = "verifying"
            t0 = time.perf_counter()
            if compact:
                from .verify_compact import check_compact

                ver = check_compact(problem, sched)
            else:
                from .verify import check

                ver = check(problem, sched)
            rec["verify_time_s"] = time.perf_counter() - t0
            rec["valid"] = ver.valid
            if ver.valid:
                T = ver.collective_time_us
                rec["collective_time_us"] = T
                rec["link_utilization"] = ver.link_utilization
                lbv = rec.get("lower_bound_us")
                rec["gap_to_bound"] = (T - lbv) / lbv if lbv else None
                rec["ratio_to_bound"] = T / lbv if lbv else None
                rec["algbw_GBps"] = (problem.chunk_bytes * problem.num_chunks) / GB / (T * 1e-6) if T > 0 else None
            else:
                rec["error"] = f"verification failed: {ver.message}"
                log.error("schedule REJECTED by the verifier: %s", ver.message)
            if ver.valid and str(cfg.get("export", "none")) != "none":
                stage = "exporting"
                if compact:
                    sched = sched.to_schedule(max_rows=int(cfg.get("schedule_csv_max_rows", 20_000_000)))
                _export(str(cfg.get("export")), problem, sched, out_dir, rec)
    except TacosError as e:
        rec["status"] = "error"
        rec["error"] = f"{stage}: {e}" if stage not in ("building the problem",) else str(e)
    except Exception as e:  # a bug, not bad input: keep the traceback in the log, the sweep goes on
        rec["status"] = "error"
        rec["error"] = f"internal error while {stage}: {type(e).__name__}: {e}"
        log.debug("traceback:\n%s", traceback.format_exc())
        (out_dir / "traceback.txt").write_text(traceback.format_exc())
    write_record(out_dir, rec)
    return rec


def _section(cfg: Mapping[str, Any], key: str) -> dict:
    v = cfg.get(key) or {}
    if not isinstance(v, Mapping):
        raise ConfigError(f"{key} must be a mapping of settings, got {v!r}")
    return dict(v)


def _seed(v) -> int:
    try:
        if isinstance(v, bool):
            raise ValueError
        return int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"seed must be an integer, got {v!r}") from None


def _bound(problem: Problem, rec: dict) -> None:
    """Lower bounds; a failure here is recorded but does not fail the run."""
    try:
        from .bounds import lower_bounds

        t0 = time.perf_counter()
        lb = lower_bounds(problem)
        rec["bounds_time_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - the schedule is still worth having
        rec["bounds_error"] = f"{type(e).__name__}: {e}"
        log.warning("lower bounds failed: %s", rec["bounds_error"])
        return
    rec["lower_bound_us"] = lb.get("best_us")
    for k, v in lb.items():
        if k != "best_us":
            rec[f"lb_{k}"] = v


EXPORT_FORMATS = ("none", "msccl", "json", "chakra")


def _check_output_options(cfg) -> None:
    """Reject bad output options before a possibly long solve, not after it."""
    mode = str(cfg.get("schedule_csv", "auto"))
    if mode not in ("auto", "always", "never"):
        raise ConfigError(f"schedule_csv must be auto, always or never, got {mode!r}")
    fmt = str(cfg.get("export", "none"))
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"export must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")


def _save_schedule(cfg, problem: Problem, sched, out_dir: Path, rec: dict):
    """Write schedule.csv (up to ``schedule_csv_max_rows``) and the topology; a compact schedule is first
    moved into ``schedule_compact/``. Returns the schedule as it now lives (compact ones are re-homed)."""
    if getattr(sched, "is_compact", False):
        from .compact import COMPACT_DIR

        sched = sched.save(out_dir / COMPACT_DIR)
        rec["schedule_compact_dir"] = COMPACT_DIR
        rec["schedule_compact_bytes"] = sched.nbytes_on_disk
    mode = str(cfg.get("schedule_csv", "auto"))
    limit = int(cfg.get("schedule_csv_max_rows", 20_000_000))
    if mode == "always" or (mode == "auto" and len(sched) <= limit):
        sched.to_csv(out_dir / SCHEDULE_FILE)
        rec["schedule_file"] = SCHEDULE_FILE
    else:
        rec["schedule_file"] = None
    if problem.num_links <= int(cfg.get("save_topology_max_links", 2_000_000)):
        from .io import save_topology

        save_topology(problem.topology, out_dir / TOPOLOGY_FILE)
        rec["topology_file"] = TOPOLOGY_FILE
    return sched


def _export(fmt: str, problem: Problem, sched, out_dir: Path, rec: dict) -> None:
    from . import export as exporters

    path = exporters.export_to_file(fmt, problem, sched, out_dir)
    rec["export_file"] = Path(path).name


def summary_line(rec: Mapping[str, Any]) -> str:
    if rec.get("status") == "error" or not rec.get("valid"):
        return f"{rec.get('solver')} on {rec.get('topology')}: {rec.get('status')}: {rec.get('error')}"
    lb = rec.get("lower_bound_us")
    bound = f"lower bound {lb:.3f} µs (x{rec['collective_time_us'] / lb:.3f})" if lb else "no lower bound"
    jit = rec.get("s_jit_warmup_s") or 0.0
    # a cold numba cache compiles kernels once inside solve(): say so instead of blaming the algorithm
    compile_note = f" (incl. {jit:.1f} s one-off JIT compile)" if jit >= 0.5 else ""
    return (f"{rec['solver']} {rec['collective']} on {rec['topology']} ({rec['num_npus']} NPUs, cpn "
            f"{rec['chunks_per_npu']}): {rec['collective_time_us']:.3f} µs, {bound}, status {rec['status']}, "
            f"verified, synthesis {rec['synthesis_time_s']:.3f} s{compile_note}")
