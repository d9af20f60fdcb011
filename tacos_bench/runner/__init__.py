"""The runner layer: the only place that knows both the core (:mod:`tacos_bench`) and the backends (:mod:`solvers`).

* :mod:`~tacos_bench.runner.api` -- :func:`synthesize`: a topology and a demand to a verified schedule, in process;
* :mod:`~tacos_bench.runner.pipeline` -- :func:`solve_and_verify` (every caller's path from a problem to a
  verified result) and :func:`run_job` (a configuration mapping and a run directory, no Hydra needed);
* :mod:`~tacos_bench.runner.records` -- the record schema (``result.json``);
* :mod:`~tacos_bench.runner.conf` -- run settings and the Hydra schemas derived from the backends' options;
* :mod:`~tacos_bench.runner.hydra_app`, :mod:`~tacos_bench.runner.callbacks` -- ``run.py`` and sweep aggregation.
"""

from .api import Synthesis, synthesize
from .pipeline import build_problem, run_job, solve_and_verify, summary_line

__all__ = ["Synthesis", "build_problem", "run_job", "solve_and_verify", "summary_line", "synthesize"]
