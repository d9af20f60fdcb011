"""Hydra callback: aggregate a multirun's records when the sweep ends, and remember the sweep while it runs.

A sweep may also end early, in any launcher: a joblib worker killed, a SLURM job cancelled, a run directory
that cannot be written. ``run.py`` then gets the launcher's exception; :data:`ACTIVE_SWEEP` (filled when the
sweep starts) tells :func:`~tacos_bench.runner.hydra_app.error_exit` where the sweep writes and which jobs
it has, so it aggregates what is on disk and adds an error row for every job that left no record.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


# the sweep of this process while it runs: {"dir": Path, "jobs": [[override, ...], ...] or None, "subdir": str}
ACTIVE_SWEEP: dict[str, Any] = {}


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every job of the sweep, in job order, as Hydra's basic sweeper expands them (None for
    another sweeper, or overrides it cannot expand without the config loader, such as ``glob``)."""
    try:
        target = str(config.hydra.sweeper.get("_target_", ""))
        if not target.endswith("BasicSweeper"):
            return None
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = config.hydra.sweeper.get("params") or {}
        args = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
        overrides = OverridesParser.create().parse_overrides(args)
        return [list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    except Exception:  # noqa: BLE001 - without the list, lost jobs are found from their directories
        return None


class CollectOnMultirunEnd(Callback):
    """Writes ``results.parquet`` (+ ``results.csv``) into the sweep directory."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        ACTIVE_SWEEP.clear()
        ACTIVE_SWEEP.update(dir=Path(str(config.hydra.sweep.dir)), jobs=sweep_jobs(config),
                            subdir=str(OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from ..collect import collect, count_failed

        ACTIVE_SWEEP.clear()
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            df = collect([sweep_dir], sweep_dir / "results.parquet")
        except Exception as e:  # aggregation must never hide the runs themselves
            log.error("could not aggregate %s: %s", sweep_dir, e)
            return
        log.info("aggregated %d runs (%d without a verified schedule) into %s", len(df), count_failed(df),
                 sweep_dir / "results.parquet")
