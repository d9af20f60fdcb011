"""The switched-fabrics study (experiments/study_fabrics.py) at its tiny size: it runs end to end, every reported
figure comes from a verified schedule, and a run that fails is an error row, not a crash."""

import sys

import pandas as pd
from cli import ROOT, run_python

sys.path.insert(0, str(ROOT / "experiments"))


def test_study_fabrics_quick(tmp_path):
    r = run_python(ROOT / "experiments" / "study_fabrics.py", "--quick", "--out", tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("fabrics.md", "fabrics.png", "results.parquet"):
        assert (tmp_path / name).exists(), name
    assert (tmp_path / "fabrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    df = pd.read_parquet(tmp_path / "results.parquet")
    # flat rows: one per (topology, collective, chunks, size, solver, seed), the randomized solvers on 3 seeds
    keys = ["topology", "collective", "chunks_per_npu", "buffer_mib", "solver", "seed"]
    assert not df.duplicated(keys).any()
    gp = df[df["solver"] == "greedy_plus"]
    assert set(gp["seed"]) == {0, 1, 2} and (gp.groupby(keys[:4]).size() == 3).all()
    assert (df.loc[df["solver"] == "direct", "seed"] == 0).all()
    ok = df[df["status"] != "error"]
    assert ok["valid"].all() and ok["collective_time_us"].notna().all()
    assert (df.loc[df["status"] == "error", "error"].astype(str).str.len() > 0).all()
    assert {"switch8", "switched8", "switched8_nvls"} <= set(df["topology"])
    for col in ("lower_bound_us", "ratio_to_bound", "synthesis_time_s", "valid", "git_commit"):
        assert col in df.columns, col
    md = (tmp_path / "fabrics.md").read_text()
    assert "python experiments/study_fabrics.py --quick" in md and "-core machine" in md
    for heading in ("## 1. The unwound switch", "## 2. What multicast", "## 3. Oversubscription",
                    "## 4. greedy_plus against every baseline", "## 5. ASTRA-sim"):
        assert heading in md, heading
    assert "| collective | chunks | size | switch8 µs | switched8 µs | unwound / switched |" in md
    assert "greedy_plus (best of its" in md


def test_a_failing_run_is_an_error_row_not_a_crash():
    from study_fabrics import run_task

    base = {"collective": "all_gather", "chunks_per_npu": 1, "buffer_mib": 1, "seed": 0, "parts": "unwound",
            "astra": False}
    bad_topo = run_task({**base, "topology": "no_such_topology", "solver": "greedy_plus"}, None)
    assert bad_topo["status"] == "error" and not bad_topo["valid"] and "no_such_topology" in bad_topo["error"]
    refused = run_task({**base, "topology": "switched8", "collective": "broadcast", "solver": "ring"}, None)
    assert refused["status"] == "error" and not refused["valid"] and "ring" in refused["error"]
    good = run_task({**base, "topology": "switched8", "solver": "greedy_plus"}, None)
    assert good["valid"] and good["collective_time_us"] >= good["lower_bound_us"] * (1 - 1e-9)
