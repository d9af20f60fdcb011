"""The MoE and concurrent-collectives study at its tiny size: it runs end to end, every row verified, and its
report names the baselines and the modes."""

import pandas as pd

from cli import run_study_in_process


def test_study_moe_quick(tmp_path):
    r = run_study_in_process("study_moe.py", "--quick", "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    df = pd.read_parquet(tmp_path / "moe.parquet")
    assert df["error"].isna().all() and df["valid"].all()
    assert {"greedy_plus", "fast", "deepep", "direct"} <= set(df["solver"])
    md = (tmp_path / "moe.md").read_text()
    assert "greedy_plus behind the best other backend on 0 of" in md
    assert "| hetero2x2x4 | joint |" in md and (tmp_path / "moe.png").exists()
