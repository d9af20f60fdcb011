"""How the tests run the command line: ``python run.py ...`` and ``python -m MODULE ...`` in a subprocess, as a
user does; the same commands in this process (:func:`run_python_in_process`: the command's own ``__main__``, exit
status and output, without the interpreter start and the imports); and, for a test that needs only a run's record
and files, the run itself in-process (:func:`run_in_process`, without Hydra).

The subprocess runs from the repository root with the test's own interpreter, output captured as text, and a
timeout, so a hung run fails its test instead of the whole suite (the commands run in this process have none).
"""

from __future__ import annotations

import contextlib
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


def run_python_in_process(*argv) -> subprocess.CompletedProcess:
    """``python ARGV...`` (a script, or ``-m MODULE``) executed in this process, as the interpreter would run it
    (``__main__``, ``sys.argv``, the script's directory first on ``sys.path``, the repository root as the working
    directory), without the interpreter start and the imports, the larger part of a small command's second.

    The result is what :func:`run_python` returns: ``returncode`` (the ``sys.exit`` status, 0 without one) and what
    Python code wrote to ``stdout`` and ``stderr`` (Hydra's console log included). What only a process shows stays
    with :func:`run_python`: output of C libraries, a traceback the interpreter prints, a child's environment; the
    tests keep a real process for each public contract (exit status 2 with one stderr line, result.json kept).
    Each call starts from a fresh process's state (no active sweep, no Hydra config) and leaves that state, the
    environment, ``sys.argv``, ``sys.path``, the working directory and the logging configuration as it found them.
    """
    import io
    import os
    import runpy
    import warnings

    from hydra.core.hydra_config import HydraConfig

    from tacos_bench.runner.callbacks import ACTIVE_SWEEP

    argv = [str(a) for a in argv]
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        argv = [module, *args]

        def run():
            with warnings.catch_warnings():  # a module this process imported already runs afresh, as in a new one
                warnings.filterwarnings("ignore", "'.*' found in sys.modules after import of package", RuntimeWarning)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = str(Path(argv[0]) if Path(argv[0]).is_absolute() else ROOT / argv[0])
        argv[0] = script

        def run():
            sys.path.insert(0, str(Path(script).parent))
            runpy.run_path(script, run_name="__main__")

    def fresh():  # what a new process starts without, and what the next test must not inherit
        ACTIVE_SWEEP.clear()
        HydraConfig.instance().cfg = None

    out, err = io.StringIO(), io.StringIO()
    env, cwd, sys_argv, sys_path = dict(os.environ), os.getcwd(), sys.argv, list(sys.path)
    fresh()
    code = 0
    try:
        with _logging_restored(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            os.chdir(ROOT)
            sys.argv = list(argv)
            try:
                run()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
    finally:
        fresh()
        sys.argv, sys.path[:] = sys_argv, sys_path
        os.chdir(cwd)
        for k in set(os.environ) - set(env):
            del os.environ[k]
        os.environ.update(env)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_py_in_process(*args) -> subprocess.CompletedProcess:
    """``python run.py ARGS...`` in this process (:func:`run_python_in_process`)."""
    return run_python_in_process(ROOT / "run.py", *args)


def run_module_in_process(module: str, *args) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS...`` in this process (:func:`run_python_in_process`)."""
    return run_python_in_process("-m", module, *args)


def run_study_in_process(script, *args) -> subprocess.CompletedProcess:
    """``python experiments/SCRIPT ARGS...`` in this process, and the ``python run.py -m ...`` sweeps it launches
    (:func:`experiments._study.run_sweep`) in this process too, each as :func:`run_python_in_process` runs it:
    a quick study is mostly the start of the interpreters of its sweeps."""
    from unittest import mock

    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import _study
    finally:
        sys.path.remove(str(ROOT / "experiments"))

    class InProcess:  # stands in for the subprocess module in _study: ``python ...`` commands run here
        @staticmethod
        def run(cmd, **kw):
            assert cmd[0] == sys.executable, cmd
            return run_python_in_process(*cmd[1:])

    with mock.patch.object(_study, "subprocess", InProcess):
        return run_python_in_process(ROOT / "experiments" / script, *args)


@contextlib.contextmanager
def _logging_restored():
    """Hydra configures logging for each run (its console and job-file handlers on the root logger): put back
    every logger's level, handlers and flags afterwards, closing the handlers the run added (its job log)."""
    import logging

    def loggers():
        return [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                        if isinstance(lg, logging.Logger)]

    kept = {id(lg): (lg.level, list(lg.handlers), lg.disabled, lg.propagate) for lg in loggers()}
    try:
        yield
    finally:
        for lg in loggers():
            level, handlers, disabled, propagate = kept.get(id(lg), (logging.NOTSET, [], False, True))
            for h in lg.handlers:
                if h not in handlers:
                    h.close()
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.disabled, lg.propagate = disabled, propagate


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
