"""Studies and launchers at tiny sizes: each study command runs end to end and writes its outputs.

The study scripts and the ``run.py -m`` sweeps they launch run in this process (:func:`cli.run_study_in_process`:
their own ``__main__``, arguments and exit status, without an interpreter start each); the parallel launchers run
``run.py`` in a process of its own."""

import pandas as pd
import pytest

from cli import run_in_process, run_module, run_module_in_process, run_py, run_study_in_process


@pytest.mark.parametrize("study,outputs", [
    ("study_allreduce", ["allreduce_vs_baselines.md", "allreduce_vs_baselines.png", "results.parquet"]),
    ("study_ablation", ["ablation.md", "ablation_torus4x4.png", "ablation_rules.png", "results.parquet"]),
    ("study_collectives", ["collectives.md", "collectives.png", "collectives_failures.png", "results.parquet"]),
    ("study_message_size", ["message_size.md", "message_size_torus4x4_time.png", "results.parquet"]),
])
def test_study_quick(tmp_path, study, outputs):
    r = run_study_in_process(f"{study}.py", "--quick", "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in outputs:
        assert (tmp_path / name).exists(), name
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert len(df) > 0 and df["valid"].all()
    md = (tmp_path / outputs[0]).read_text()
    assert "| topology" in md and "python experiments/" in md
    if study == "study_collectives":   # the rooted collectives over every root, and the repair bound
        assert "## Every root" in md and "repair bound" in md


def test_study_exact_vs_greedy_quick(tmp_path):
    """Every backend of the heuristic-vs-exact study (greedy, greedy_plus, milp and cpsat on the TEN cold, cpsat
    continuous cold and warm) on the tiny grid; the report names the largest N proven and the anytime figure."""
    r = run_study_in_process("study_exact_vs_greedy.py", "--quick", "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("exact_vs_greedy.md", "exact_vs_greedy.png", "exact_vs_greedy_anytime.png", "results.parquet"):
        assert (tmp_path / name).exists(), name
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert len(df) == 6 and df["valid"].all()
    cont = df[df["p_solver_model"] == "continuous"]
    assert set(cont["p_solver_warm_start"].astype(bool)) == {False, True}
    assert (df.loc[df["solver"].isin(["milp", "cpsat"]), "optimality_scope"].notna()).all()
    md = (tmp_path / "exact_vs_greedy.md").read_text()
    assert "python experiments/study_exact_vs_greedy.py --quick" in md
    assert "| family | greedy | greedy_plus | milp TEN cold | cpsat TEN cold | cpsat cont. cold |" in md
    assert "two_server2x2 all_gather 1 MiB cpn1" in md


@pytest.mark.parametrize("launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                                      ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]])
def test_sweep_with_parallel_launchers(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    r = run_py("-m", "solver=greedy,bfs", "topo=mesh4x4", *launcher, f"hydra.sweep.dir={sweep}", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    df = pd.read_parquet(sweep / "results.parquet")
    assert len(df) == 2 and df["valid"].all()
    assert sorted(df["job_num"].tolist()) == list(range(2))
    for col in ("run_id", "timestamp_utc", "git_commit", "experiment", "choice_solver", "choice_topo", "status",
                "valid", "collective_time_us", "lower_bound_us", "gap_to_bound", "algbw_GBps", "link_utilization",
                "synthesis_time_s", "build_time_s", "solve_time_s", "error", "v_numpy", "host"):
        assert col in df.columns, col
    greedy = df[df["solver"] == "greedy"]
    assert "p_solver_chunk_order" in greedy.columns and greedy["p_solver_chunk_order"].notna().all()


def test_slurm_preset_composes():
    r = run_py("hydra/launcher=slurm", "--cfg", "hydra", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "SlurmLauncher" in r.stdout and "mem_gb: 24" in r.stdout


def test_gantt_chart_of_a_run(tmp_path):
    run_dir = tmp_path / "run"
    # the plot CLI is what is checked here; the run only provides its input, so it runs in-process
    rec = run_in_process(run_dir, solver="greedy", topo="ring8", collective="all_reduce")
    assert rec["error"] is None and rec["valid"], rec["error"]
    png = tmp_path / "g.png"
    r = run_module_in_process("tacos_bench.plots", run_dir, "-o", png)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run_module("tacos_bench.plots", tmp_path / "nope", timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
