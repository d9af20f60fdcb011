"""Hydra callback: aggregate a multirun's records when the sweep ends."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class CollectOnMultirunEnd(Callback):
    """Writes ``results.parquet`` (+ ``results.csv``) into the sweep directory."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from .collect import collect

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            df = collect([sweep_dir], sweep_dir / "results.parquet")
        except Exception as e:  # aggregation must never hide the runs themselves
            log.error("could not aggregate %s: %s", sweep_dir, e)
            return
        n_err = int((df["status"] == "error").sum()) if "status" in df else 0
        log.info("aggregated %d runs (%d errors) into %s", len(df), n_err, sweep_dir / "results.parquet")
