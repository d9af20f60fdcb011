"""A sweep that ends early, in any launcher (a killed joblib worker, a cancelled SLURM job), still aggregates
what is on disk, with an error row per job that wrote no record, and exits 2 with one line (issue 34); a run
or sweep directory that cannot be created is named in one line, exit 2."""

from __future__ import annotations

import pandas as pd
from omegaconf import OmegaConf

from cli import run_py
from tacos_bench import rundir
from tacos_bench.runner import callbacks, hydra_app
from tacos_bench.runner.records import new_record


def _sweep_config(sweep_dir):
    return OmegaConf.create({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": {"seed": "0,1"}},
        "overrides": {"task": ["solver=ring,bfs"]},
        "sweep": {"dir": str(sweep_dir), "subdir": "${hydra.job.num}"}}})


def test_the_jobs_of_a_sweep_are_known_when_it_starts(tmp_path):
    cb = callbacks.CollectOnMultirunEnd()
    cb.on_multirun_start(_sweep_config(tmp_path))
    try:
        jobs = callbacks.ACTIVE_SWEEP["jobs"]
        assert len(jobs) == 4 and sorted(map(tuple, jobs)) == sorted(
            (f"seed={s}", f"solver={v}") for s in (0, 1) for v in ("ring", "bfs"))
        assert callbacks.ACTIVE_SWEEP["subdir"] == "${hydra.job.num}"
    finally:
        callbacks.ACTIVE_SWEEP.clear()


def test_a_killed_worker_leaves_error_rows_and_the_table(tmp_path, capsys, monkeypatch):
    cb = callbacks.CollectOnMultirunEnd()
    cb.on_multirun_start(_sweep_config(tmp_path))
    jobs = callbacks.ACTIVE_SWEEP["jobs"]
    for j in (0, 2):   # two jobs finished; job 1 started and died; job 3 never ran
        rundir.write_record(rundir.prepare(tmp_path / str(j)),
                            new_record(job_num=j, status="optimal", valid=True, solver="ring", error=None))
    (tmp_path / "1").mkdir()
    monkeypatch.setattr(hydra_app.sys, "argv", ["run.py", "-m"])
    try:
        code = hydra_app.error_exit(RuntimeError("A worker process managed by the executor was unexpectedly "
                                                 "terminated. This could be caused by a segfault"))
    finally:
        callbacks.ACTIVE_SWEEP.clear()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1
    assert "the sweep stopped: RuntimeError: A worker process managed by the executor was unexpectedly " \
           "terminated; 4 records (2 of them error rows: jobs that wrote none) aggregated" in err[0]
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert list(df["job_num"]) == [0, 1, 2, 3]
    assert list(df["status"]) == ["optimal", "error", "optimal", "error"]
    assert df.loc[1, "error"].startswith("lost: its job started but wrote no record (RuntimeError")
    assert df.loc[3, "error"].startswith("not run (RuntimeError")
    assert df.loc[3, "override_dirname"] == ",".join(jobs[3]) and df.loc[3, "solver"] == jobs[3][1].split("=")[1]


def test_without_the_job_list_the_started_jobs_are_the_lost_ones(tmp_path):
    rundir.write_record(rundir.prepare(tmp_path / "0"), new_record(job_num=0, status="optimal", valid=True))
    (tmp_path / "1").mkdir()
    words = hydra_app.salvage_sweep({"dir": tmp_path, "jobs": None, "subdir": None}, "X")
    assert words.startswith("2 records (1 of them error rows")
    assert list(pd.read_parquet(tmp_path / "results.parquet")["status"]) == ["optimal", "error"]


def test_a_run_directory_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for args, which in ((["solver=bfs", f"hydra.run.dir={blocker / 'run'}"], "hydra.run.dir"),
                        (["-m", "solver=bfs", "seed=0,1", f"hydra.sweep.dir={blocker / 'sweep'}"], "hydra.sweep.dir")):
        r = run_py(*args, timeout=60)
        err = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(err) == 1, r.stderr
        assert err[0] == (f"tacos-bench: error: cannot write {blocker / ('run' if which.endswith('run.dir') else 'sweep')}"
                          f": Not a directory (choose a writable directory with {which}=DIR)")
