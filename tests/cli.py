"""How the tests run the command line: ``python run.py ...`` and ``python -m MODULE ...`` in a subprocess, as a
user does, and, for a test that needs only a run's record and files, the same run in-process.

The subprocess runs from the repository root with the test's own interpreter, output captured as text, and a
timeout, so a hung run fails its test instead of the whole suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 240


def run_python(*argv, timeout: float | None = TIMEOUT_S, env: dict | None = None,
               cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python ARGV...`` from ``cwd`` (default: the repository root)."""
    return subprocess.run([sys.executable, *map(str, argv)], check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def run_py(*args, **kw) -> subprocess.CompletedProcess:
    """``python run.py ARGS...`` (Hydra overrides and flags), keywords as for :func:`run_python`."""
    return run_python(ROOT / "run.py", *args, **kw)


_HELP: dict = {}


def run_py_help() -> subprocess.CompletedProcess:
    """``python run.py --help``, run once per test process (several tests read the same text)."""
    if "help" not in _HELP:
        _HELP["help"] = run_py("--help")
    return _HELP["help"]


def run_module(module: str, *args, **kw) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS...``, keywords as for :func:`run_python`."""
    return run_python("-m", module, *args, **kw)


def run_in_process(out_dir, *, solver: str = "greedy", topo: str = "mesh4x4", collective: str = "all_gather",
                   seed: int = 0, **collective_overrides: Any) -> dict:
    """What ``run.py solver=S topo=T collective=C collective.K=V seed=N hydra.run.dir=OUT`` records, without the
    interpreter start and Hydra: the topology and collective come from their ``conf/`` files, the solver runs
    with its own defaults. Returns the record; ``out_dir`` holds the run's files."""
    from tacos_bench.runner.pipeline import run_job

    cfg = {"solver": {"name": solver}, "topo": conf("topo", topo),
           "collective": {**conf("collective", collective), **collective_overrides}, "seed": seed}
    return run_job(cfg, out_dir)


def conf(group: str, name: str) -> dict:
    """A ``conf/GROUP/NAME.yaml`` file as a dict (what Hydra composes for ``GROUP=NAME``)."""
    import yaml

    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def astra_sim_missing() -> str | None:
    """Why the ASTRA-sim runs cannot happen here, or None; the reason names the binary's resolved path and
    ``ASTRA_SIM``, so a skipped test says in the summary what to point where."""
    import importlib.util

    from tacos_bench.export.astra_sim import ENV_VAR, binary_problem, resolve_binary

    why = binary_problem()
    if why is None and importlib.util.find_spec("chakra") is None:
        why = (f"the Chakra schema is not installed (pip install --no-deps mlc-chakra==1.0.0); the ASTRA-sim binary "
               f"{resolve_binary()} (from {ENV_VAR} or the default location) is fine")
    return why
