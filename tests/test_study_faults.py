"""The faults study at its tiny size: every part runs end to end through run.py's pipeline, every row verified, and
the report holds each framing (OptCC's fault-free ratio, the repair bound, StragglAR's wait-then-run)."""

import pandas as pd

from cli import run_study_in_process


def test_study_faults_quick(tmp_path):
    r = run_study_in_process("study_faults.py", "--quick", "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    df = pd.read_parquet(tmp_path / "faults.parquet")
    assert df["error"].isna().all() and df["valid"].all()
    assert set(df["part"]) == {"degraded", "slow", "repair", "straggler"}
    md = (tmp_path / "faults.md").read_text()
    for needle in ("/ fault-free", "/ repair bound", "waiting then running", "| switched8 | all_reduce |"):
        assert needle in md
    straggler = df[(df["part"] == "straggler") & (df["case"] != "healthy")]
    assert (straggler["release_plan"] == "straggle").all()
    assert (tmp_path / "faults.png").exists()
