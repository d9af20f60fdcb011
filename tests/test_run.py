"""run.py end to end: output files, one-line errors without tracebacks, sweeps with error rows.

A real process runs the default run (its files), one bad input and one bad setting (exit status, the one stderr
line, the record kept), ``HYDRA_FULL_ERROR``'s traceback, HiGHS's banner (C output) and the sweep; the other
cases go through run.py's own entry point in this process (:func:`cli.run_py_in_process`)."""

import json

import pandas as pd
import pytest

from cli import run_module, run_py, run_py_help, run_py_in_process
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.topology.named import build_topology
from tacos_bench.verify import verify


def test_default_run_writes_verified_schedule(tmp_path):
    out = tmp_path / "run"
    r = run_py("solver=bfs", "topo=mesh4x4", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "result.json").read_text())
    for key in ("solver", "topology", "collective", "num_npus", "num_links", "chunks_per_npu", "chunk_bytes",
                "seed", "status", "valid", "collective_time_us", "lower_bound_us", "synthesis_time_s", "error"):
        assert key in rec, key
    assert rec["valid"] is True and rec["error"] is None
    assert rec["num_npus"] == 16 and rec["num_links"] == 48 and rec["chunk_bytes"] == 2**30 // 16
    assert rec["collective_time_us"] >= rec["lower_bound_us"] > 0
    # the CSV on disk replays independently to the recorded time
    df = pd.read_csv(out / "schedule.csv")
    assert list(df.columns) == ["chunk", "src", "dst", "start_us", "end_us", "op"]
    p = Problem(build_topology({"name": "mesh4x4", "kind": "mesh", "dims": [4, 4]}), Collective("all_gather"))
    assert verify(p, Schedule.from_csv(out / "schedule.csv")).collective_time_us == rec["collective_time_us"]


def test_file_topology_and_overrides(tmp_path):
    topo = tmp_path / "tri.txt"
    topo.write_text("# a directed triangle\n3\n0 1 50 0.5\n1 2 50 0.5\n2 0 25 1.0  # slow link\n")
    out = tmp_path / "run"
    r = run_py_in_process("solver=bfs", "topo=file", f"topo.path={topo}", "collective=all_reduce",
                          "collective.chunks_per_npu=2", "collective.buffer_mib=3", "seed=7", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "result.json").read_text())
    assert (rec["collective"], rec["chunks_per_npu"], rec["seed"], rec["num_links"]) == ("all_reduce", 2, 7, 3)
    assert rec["valid"]


@pytest.mark.parametrize("args,needle,run", [
    (["topo=file", "topo.path=MISSING"], "no such file", run_py),   # a real process: exit status, stderr
    (["topo=file", "topo.path=BAD"], ":3 [bw_GiBps]", run_py_in_process),
    (["topo=file", "topo.path=CUT"], "cannot be reached", run_py_in_process),
    (["collective.buffer_mib=-1"], "collective.buffer_mib must be a positive number", run_py_in_process),
    (["collective.chunks_per_npu=0"], "chunks_per_npu must be a positive integer", run_py_in_process),
])
def test_bad_input_one_line_error(tmp_path, args, needle, run):
    (tmp_path / "bad.txt").write_text("3\n0 1 50 0.5\n1 2 0 0.5\n2 0 50 0.5\n")
    (tmp_path / "cut.txt").write_text("3\n0 1 50 0.5\n1 0 50 0.5\n2 0 50 0.5\n")
    args = [a.replace("MISSING", str(tmp_path / "none.txt")).replace("BAD", str(tmp_path / "bad.txt"))
            .replace("CUT", str(tmp_path / "cut.txt")) for a in args]
    r = run("solver=bfs", *args, f"hydra.run.dir={tmp_path / 'out'}")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    err_lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err_lines) == 1 and needle in err_lines[0], r.stderr
    # the failing run still leaves its record behind
    rec = json.loads((tmp_path / "out" / "result.json").read_text())
    assert rec["status"] == "error" and needle in rec["error"]


@pytest.mark.parametrize("args,needle,run", [
    (["topo=nosuch"], "Could not find 'topo/nosuch'", run_py),   # a real process: exit status, stderr
    (["solver=nosuch"], "Could not find 'solver/nosuch'", run_py_in_process),
    (["collective=nosuch"], "Could not find 'collective/nosuch'", run_py_in_process),
    (["solver.nosuchkey=1"], "unknown setting solver.nosuchkey; valid keys of solver: name, time_limit_s",
     run_py_in_process),
    (["solver.time_limit=5"], "solver.time_limit (did you mean solver.time_limit_s?)", run_py_in_process),
    (["collective.sizes=3"], "unknown setting collective.sizes; valid keys of collective: kind,", run_py_in_process),
    (["seed=abc"], "seed", run_py_in_process),
])
def test_bad_config_clear_message(tmp_path, args, needle, run):
    r = run(*args, f"hydra.run.dir={tmp_path / 'out'}")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    err_lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err_lines) == 1 and needle in err_lines[0], r.stderr
    assert "base_" not in r.stderr  # the schemas behind the YAML files are not options to pick


def test_hydra_full_error_keeps_the_trace(tmp_path):
    import os

    env = dict(os.environ, HYDRA_FULL_ERROR="1")
    r = run_py("solver=nosuch", f"hydra.run.dir={tmp_path / 'out'}", env=env)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_config_error_line_doctest():
    import doctest

    import tacos_bench._memory
    import tacos_bench.runner.hydra_app

    assert doctest.testmod(tacos_bench.runner.hydra_app).failed == 0
    assert doctest.testmod(tacos_bench._memory).failed == 0


def test_multirun_error_rows_and_aggregation(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_py("-m", "solver=bfs", "topo=mesh4x4,torus4x4", "collective.buffer_mib=64,-1",
            f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(sweep / "results.parquet")
    assert len(df) == 4
    assert df["job_num"].tolist() == [0, 1, 2, 3]
    assert (df["status"] == "error").sum() == 2
    assert df.loc[df["status"] != "error", "valid"].all()
    # on-demand aggregation gives the same table
    out = tmp_path / "again.parquet"
    c = run_module("tacos_bench.collect", sweep, "-o", out, timeout=120)
    assert c.returncode == 0, c.stderr
    assert len(pd.read_parquet(out)) == 4


def test_help_lists_groups():
    r = run_py_help()
    assert r.returncode == 0
    for group in ("solver:", "topo:", "collective:"):
        assert group in r.stdout


def test_highs_banner_stays_off_stdout_unless_logging(tmp_path):
    # without a warm start HiGHS always runs (a warm start that meets the lower bound needs no model)
    quiet = run_py("solver=milp", "topo=torus4x4", "solver.warm_start=false", f"hydra.run.dir={tmp_path / 'q'}")
    assert quiet.returncode == 0, quiet.stderr
    assert "Running HiGHS" not in quiet.stdout and "milp all_gather on torus4x4" in quiet.stdout
    loud = run_py("solver=milp", "topo=torus4x4", "solver.warm_start=false", "solver.log=true",
               f"hydra.run.dir={tmp_path / 'l'}")
    assert loud.returncode == 0 and "Running HiGHS" in loud.stdout
