"""Synthesize one collective algorithm (or a sweep of them) from the command line.

    python run.py solver=greedy topo=mesh4x4 collective=all_gather collective.chunks_per_npu=2 seed=0
    python run.py topo=file topo.path=my_cluster.txt solver=cpsat solver.time_limit_s=60
    python run.py -m solver=greedy,milp,cpsat topo=mesh4x4,torus4x4 seed=0,1,2

Each run writes ``result.json`` and ``schedule.csv`` into its Hydra output
directory (``hydra.run.dir=DIR`` to choose it). ``python run.py --help`` lists
the config groups and their options.
"""

import os
import sys

import hydra
from omegaconf import DictConfig

from tacos_bench.runner.conf import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig):
    from tacos_bench.runner.hydra_app import run_from_hydra

    return run_from_hydra(cfg)


if __name__ == "__main__":
    # Hydra's own errors (unknown config option or key, a value of the wrong type) come back to us as
    # exceptions, printed as one line with exit 2 like every other bad input; HYDRA_FULL_ERROR=1 set by the
    # user keeps Hydra's full report and traceback.
    user_wants_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except Exception as e:
        if user_wants_trace:
            raise
        from tacos_bench.runner.hydra_app import error_exit

        sys.exit(error_exit(e))
