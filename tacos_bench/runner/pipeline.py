"""One run, end to end, from a configuration mapping (Hydra's or a plain dict) to a record in a run directory.

:func:`run_job` checks the settings, builds the problem and hands it to the stages of
:mod:`tacos_bench.runner.stages` (or, with a fault, :mod:`tacos_bench.runner.faulted`); every failure becomes a
record with ``status="error"`` and the message, so a sweep goes on and nothing already computed is lost.
"""

from __future__ import annotations

import logging
import traceback
import warnings
from pathlib import Path
from typing import Any, Mapping

from .. import rundir
from ..errors import ConfigError, TacosError
from ..faults import fault_from_config, slowed_topology
from ..problem import Problem
from .conf import EXPORT_FORMATS, SCHEDULE_CSV_MODES, RunSettings
from .faulted import run_with_fault
from .records import environment, flatten, new_record
from .stages import ExportStageError, build_problem, check_size, problem_fields, solve_and_verify
from .summary import summary_line

__all__ = ["build_problem", "run_job", "solve_and_verify", "summary_line"]

log = logging.getLogger(__name__)


def run_job(cfg: Mapping[str, Any], out_dir, *, choices: Mapping[str, Any] | None = None,
            extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run one configuration and write its record; never raises for a failing run.

    Parameters
    ----------
    cfg : mapping
        ``{"solver": {"name": ..., <options>}, "topo": {...}, "collective": {...}, "seed": int, ...}``
        as composed by Hydra (``conf/``) or built by hand; missing top-level
        settings take :class:`~tacos_bench.runner.conf.RunSettings`' defaults.
    out_dir : path
        The run directory (:mod:`tacos_bench.rundir`).
    choices : mapping, optional
        Hydra's ``runtime.choices`` (recorded as ``choice_*`` fields).
    extra : mapping, optional
        More fields to record (job number, sweep id, ...).
    """
    out_dir = rundir.prepare(out_dir)
    # A numpy RuntimeWarning (an overflow deep in a bound, say) is no message for a user: the record says what
    # went wrong, and the warning goes to the run's log file, not to stderr.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        rec = _run_job(cfg, out_dir, choices, extra)
    for w in caught:
        to_log_files(log, logging.WARNING, f"{w.category.__name__} at {Path(w.filename).name}:{w.lineno}: {w.message}")
    return rec


def to_log_files(logger: logging.Logger, level: int, msg: str) -> None:
    """``msg`` from ``logger`` to the log files only (Hydra's job log; the console does not get it)."""
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, None, None)
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(record)


def _run_job(cfg: Mapping[str, Any], out_dir, choices, extra) -> dict[str, Any]:
    defaults = RunSettings()
    config_error = None
    try:
        solver_cfg, topo_cfg, coll_cfg = (_section(cfg, k) for k in ("solver", "topo", "collective"))
        seed = _seed(cfg.get("seed", defaults.seed))
    except ConfigError as e:  # recorded below like any other failure
        solver_cfg, topo_cfg, coll_cfg, seed, config_error = {}, {}, {}, None, e
    options, not_applied = _own_options(solver_cfg)
    raw = {k: v for k, v in options.items() if k not in ("time_limit_s", "threads")}
    options["seed"] = seed
    export = str(cfg.get("export", defaults.export))
    rec = new_record(
        experiment=cfg.get("experiment", defaults.experiment),
        solver=solver_cfg.get("name"),
        seed=seed,
        time_limit_s=solver_cfg.get("time_limit_s"),
        threads=solver_cfg.get("threads"),
        export=export,
        **flatten("choice_", {k: v for k, v in (choices or {}).items() if not k.startswith("hydra")}),
        **flatten("p_solver_", raw),  # as given; replaced by the validated values once parsed
        options_not_applied=not_applied,
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
        csv, csv_rows, topo_links = _output_settings(cfg, defaults, export)
        problem = build_problem(topo_cfg, coll_cfg, seed)
        check_size(problem, _max_deliveries(cfg, defaults))
        slowed = slowed_topology(_section(cfg, "fault"), problem.topology)
        if slowed is not problem.topology:
            problem = Problem(slowed, problem.collective)
            rec.update(fault_slow_links=slowed.meta["slow_links"])
        rec.update(problem_fields(problem))
        log.info("problem: %s", problem.describe())
        fault = fault_from_config(_section(cfg, "fault"), problem.topology, seed)
        stage = "solving"
        if fault is None:
            solve_and_verify(problem, str(solver_cfg.get("name")), options, out_dir=out_dir, csv=csv,
                             csv_max_rows=csv_rows, topology_max_links=topo_links, export=export, fields=rec)
        else:
            run_with_fault(problem, fault, str(solver_cfg.get("name")), options, out_dir=out_dir, csv=csv,
                           csv_max_rows=csv_rows, topology_max_links=topo_links, export=export, fields=rec)
    except ExportStageError as e:
        rec["status"] = "error"
        rec["error"] = str(e)
    except TacosError as e:
        rec["status"] = "error"
        rec["error"] = f"{stage}: {e}" if stage != "building the problem" else str(e)
    except MemoryError:
        # not a bug: the input asks for more than the machine has (check_memory refuses what it can foresee)
        rec["status"] = "error"
        rec["error"] = (f"out of memory while {stage}: the problem ({rec.get('num_chunks') or '?'} chunks on "
                        f"{rec.get('num_npus') or '?'} NPUs) does not fit; lower collective.chunks_per_npu or "
                        "use fewer NPUs")
    except Exception as e:  # a bug, not bad input: keep the traceback, the sweep goes on
        rec["status"] = "error"
        rec["error"] = f"internal error while {stage}: {type(e).__name__}: {e}"
        log.debug("traceback:\n%s", traceback.format_exc())
        (out_dir / rundir.TRACEBACK_FILE).write_text(traceback.format_exc())
    rundir.write_record(out_dir, rec)
    return rec


def _own_options(solver_cfg: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The options of the configured backend, and (as ``k=v,...``) those set for other backends only.

    A sweep over several backends gives each option to those that have it (:func:`~tacos_bench.runner.conf.
    foreign_options`); a name no backend has stays in the options, so the backend rejects it by name.
    """
    from .conf import foreign_options

    options = {k: v for k, v in solver_cfg.items() if k != "name"}
    try:
        foreign = set(foreign_options(str(solver_cfg.get("name"))))
    except Exception:  # an unknown backend: solving it reports that, with the names it could have been
        return options, None
    dropped = {k: options.pop(k) for k in sorted(foreign & set(options))}
    given = [f"{k}={v}" for k, v in dropped.items() if v is not None]
    return options, (",".join(given) or None)


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


def _max_deliveries(cfg, defaults: RunSettings) -> int:
    v = cfg.get("max_deliveries", defaults.max_deliveries)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"max_deliveries must be a positive integer, got {v!r}")
    return v


def _output_settings(cfg, defaults: RunSettings, export: str) -> tuple[str, int, int]:
    """Output settings, checked before a possibly long solve, not after it."""
    mode = str(cfg.get("schedule_csv", defaults.schedule_csv))
    if mode not in SCHEDULE_CSV_MODES:
        raise ConfigError(f"schedule_csv must be one of {', '.join(SCHEDULE_CSV_MODES)}, got {mode!r}")
    if export not in EXPORT_FORMATS:
        raise ConfigError(f"export must be one of {', '.join(EXPORT_FORMATS)}, got {export!r}")
    return (mode, int(cfg.get("schedule_csv_max_rows", defaults.schedule_csv_max_rows)),
            int(cfg.get("save_topology_max_links", defaults.save_topology_max_links)))
