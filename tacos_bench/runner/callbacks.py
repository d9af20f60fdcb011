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
        from ..collect import collect, count_failed

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            df = collect([sweep_dir], sweep_dir / "results.parquet")
        except Exception as e:  # aggregation must never hide the runs themselves
            log.error("could not aggregate %s: %s", sweep_dir, e)
            return
        log.info("aggregated %d runs (%d without a verified schedule) into %s", len(df), count_failed(df),
                 sweep_dir / "results.parquet")
