"""Glue between Hydra and :func:`tacos_bench.runner.run_job`."""

from __future__ import annotations

import logging
import sys

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from .pipeline import run_job, summary_line, to_log_files

log = logging.getLogger("tacos_bench")


def run_from_hydra(cfg: DictConfig) -> dict:
    hc = HydraConfig.get()
    plain = OmegaConf.to_container(cfg, resolve=True)
    multirun = hc.mode == RunMode.MULTIRUN
    extra = {"job_num": hc.job.num if multirun else None, "job_name": hc.job.name,
             "override_dirname": hc.job.override_dirname}
    choices = dict(hc.runtime.choices)
    rec = run_job(plain, hc.runtime.output_dir, choices=choices, extra=extra)
    line = summary_line(rec)
    if rec["status"] == "error" or not rec.get("valid"):
        if multirun:
            log.error(line)  # the sweep goes on; its log and the error row keep the message
        else:
            # one line on stderr, no traceback; the run's log file and result.json keep it too
            to_log_files(log, logging.ERROR, line)
            print(f"tacos-bench: error: {rec.get('error')}", file=sys.stderr)
            sys.exit(2)
    else:
        log.info(line)
    return rec


def config_error_line(exc: BaseException) -> str:
    r"""One line for a Hydra/OmegaConf configuration error: its first line, the first line of its cause, and
    for an unknown group option the options a user can pick (not the ``base_*`` schemas).

    Examples
    --------
    >>> from hydra.errors import MissingConfigException
    >>> e = MissingConfigException("In 'config': Could not find 'solver/nope'\n\nAvailable options in "
    ...                            "'solver':\n\tbase_greedy\n\tgreedy\n\tmilp", "solver/nope")
    >>> config_error_line(e)
    "Could not find 'solver/nope' (options: greedy, milp)"
    """
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    if first.startswith("In '") and "': " in first:
        first = first.split("': ", 1)[1]
    options = [ln for ln in lines[1:] if not ln.startswith(("Available options", "base_")) and " " not in ln]
    if "Available options" in text and options:
        first += f" (options: {', '.join(options)})"
    cause = exc.__cause__
    unknown = _unknown_key_line(first, cause)
    if unknown is not None:
        return unknown
    if cause is not None and str(cause).strip():
        first = first.rstrip(".") + f": {str(cause).strip().splitlines()[0]}"
    return first


def _unknown_key_line(first: str, cause: BaseException | None) -> str | None:
    """``Could not override 'solver.time_limit'`` caused by a key the schema does not have: the line of
    :func:`~tacos_bench.runner.conf.unknown_keys_message` (nearest valid key, every valid key); else None."""
    import dataclasses
    import re

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    m = re.match(r"Could not override '([^']+)'", first)
    schema = getattr(cause, "object_type", None)
    if m is None or not isinstance(cause, (ConfigAttributeError, ConfigKeyError)) or \
            not dataclasses.is_dataclass(schema) or not str(cause).startswith("Key '"):
        return None
    from .conf import unknown_keys_message

    section, _, key = m.group(1).lstrip("+~").rpartition(".")
    return unknown_keys_message(section, [key], [f.name for f in dataclasses.fields(schema)])


def is_config_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Hydra/OmegaConf rejecting the configuration (not a job or launcher failure)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(exc, (HydraException, OmegaConfBaseException))


def error_exit(exc: BaseException) -> int:
    """Print the one line for an exception that ended ``run.py`` and return the exit status (2).

    A configuration error is named as such; so is a run or sweep directory that cannot be written. Anything
    else ended a sweep early, in any launcher (a joblib worker killed, a job the cluster killed): the records
    already written are aggregated into the sweep's ``results.parquet`` with an error row for every job that
    left none (:func:`salvage_sweep`), so nothing computed is lost and nothing lost is silent.
    """
    if is_config_error(exc):
        line = config_error_line(exc)
        print(f"tacos-bench: config error: {line}", file=sys.stderr)
        _record_config_error(line, sys.argv[1:])
        return 2
    sweep = _active_sweep()
    if isinstance(exc, OSError) and exc.filename is not None and (sweep is None or not sweep["dir"].is_dir()):
        which = "hydra.sweep.dir" if sweep is not None or _is_multirun(sys.argv[1:]) else "hydra.run.dir"
        print(f"tacos-bench: error: cannot write {exc.filename}: {exc.strerror or type(exc).__name__} "
              f"(choose a writable directory with {which}=DIR)", file=sys.stderr)
        return 2
    text = str(exc).strip().splitlines()[0].split(". ")[0].rstrip(".") if str(exc).strip() else ""
    line = f"{type(exc).__name__}" + (f": {text}" if text else "")
    where = ""
    if sweep is not None:
        try:
            where = "; " + salvage_sweep(sweep, line)
        except Exception as e:  # noqa: BLE001 - the original error is what the user must see
            where = f"; the records could not be aggregated ({type(e).__name__}: {e})"
    what = "sweep" if sweep is not None or _is_multirun(sys.argv[1:]) else "run"
    print(f"tacos-bench: error: the {what} stopped: {line}{where}", file=sys.stderr)
    return 2


def _is_multirun(argv) -> bool:
    return any(a in ("-m", "--multirun") for a in argv)


def _active_sweep() -> dict | None:
    """The sweep this process was running (:data:`~tacos_bench.runner.callbacks.ACTIVE_SWEEP`), else None."""
    from .callbacks import ACTIVE_SWEEP

    if ACTIVE_SWEEP.get("dir") is not None:
        return dict(ACTIVE_SWEEP)
    try:
        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            from pathlib import Path

            return {"dir": Path(HydraConfig.get().sweep.dir), "jobs": None, "subdir": None}
    except Exception:  # noqa: BLE001
        pass
    return None


def salvage_sweep(sweep: dict, why: str) -> str:
    """Aggregate a sweep that ended early: an error record for every job that wrote none, then every record
    into ``results.parquet``. Returns the words for the one-line message.

    Parameters
    ----------
    sweep : dict
        ``{"dir": Path, "jobs": [[override, ...], ...] or None, "subdir": str or None}``
        (:data:`~tacos_bench.runner.callbacks.ACTIVE_SWEEP`). Without the job list, the jobs lost are the
        numbered job directories without a record.
    why : str
        What ended the sweep (the error rows say it).
    """
    import json
    from pathlib import Path

    from .. import rundir
    from ..collect import collect
    from .records import environment, new_record

    root = Path(sweep["dir"])
    done = set()
    for p in root.rglob(rundir.RESULT_FILE):
        try:
            num = json.loads(p.read_text()).get("job_num")
        except (OSError, ValueError):
            continue
        if num is not None:
            done.add(int(num))
    jobs = sweep.get("jobs")
    if jobs is not None:
        todo = {j: list(o) for j, o in enumerate(jobs) if j not in done}
    else:
        todo = {int(d.name): None for d in root.iterdir() if d.is_dir() and d.name.isdigit()
                and int(d.name) not in done}
    default_subdir = sweep.get("subdir") in (None, "${hydra.job.num}")
    for j, overrides in sorted(todo.items()):
        job_dir = root / str(j)
        started = job_dir.is_dir()
        if not default_subdir or (job_dir / rundir.RESULT_FILE).exists():
            job_dir = root / f"lost_{j}"
        given = dict(o.split("=", 1) for o in (overrides or []) if "=" in o)
        what = ("lost: its job started but wrote no record" if started else "not run") + f" ({why})"
        rec = new_record(status="error", valid=False, error=what, job_num=j, collective_time_us=None,
                         lower_bound_us=None, override_dirname=",".join(overrides) if overrides else None,
                         solver=given.get("solver"), topology=given.get("topo"), collective=given.get("collective"),
                         output_dir=str(job_dir))
        rec.update(environment())
        rundir.write_record(rundir.prepare(job_dir), rec)
    df = collect([root], root / "results.parquet")
    lost = f" ({len(todo)} of them error rows: jobs that wrote none)" if todo else ""
    return f"{len(df)} records{lost} aggregated into {root / 'results.parquet'}"


def _record_config_error(line: str, argv: list[str]) -> None:
    """A single run Hydra rejected before it started still leaves a ``result.json`` (status ``error``) in the
    run directory it would have used (``hydra.run.dir=`` or the default ``outputs/<date>/<time>``), so
    scripts find every run's outcome in the same place. Sweeps are rejected before any job: no record."""
    if _is_multirun(argv):
        return
    try:
        import datetime as dt
        from pathlib import Path

        from .. import rundir
        from .records import environment, new_record

        given = [a.split("=", 1)[1] for a in argv if a.startswith(("hydra.run.dir=", "++hydra.run.dir="))]
        now = dt.datetime.now()
        out = Path(given[-1]) if given else Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")
        rec = new_record(status="error", valid=False, error=f"config error: {line}", collective_time_us=None,
                         lower_bound_us=None, override_dirname=" ".join(argv), output_dir=str(out))
        rec.update(environment())
        rundir.write_record(rundir.prepare(out), rec)
    except Exception:  # noqa: BLE001 - the one-line message already went out; a record is a courtesy
        pass
