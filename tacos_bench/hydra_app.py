"""Glue between Hydra and :func:`tacos_bench.pipeline.run_job`."""

from __future__ import annotations

import logging
import sys

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from .pipeline import run_job, summary_line

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
        log.error(line)
        if not multirun:
            # One line, no traceback: the record in the output dir has the details.
            print(f"tacos-bench: error: {rec.get('error')}", file=sys.stderr)
            sys.exit(2)
    else:
        log.info(line)
    return rec
