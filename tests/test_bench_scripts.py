"""The timing and candidate benchmarks of issue 22 at tiny sizes (their full runs: docs/greedy.md)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_broadcast_reserve_bench_rows_and_table():
    b = _load("bench_broadcast_reserve")
    rows = b.measure([("mesh4x4", 2, (0, 5))], seeds=[0])
    assert [r["root"] for r in rows] == [0, 5]
    for r in rows:
        assert r["on_us"] <= r["off_us"] * (1 + 1e-12)      # the candidate is kept only when faster
        assert r["on_us"] >= r["bound_us"] * (1 - 1e-9)
    table = b.table(rows)
    assert table[2].startswith("| `mesh4x4` Broadcast, 2 chunks | 0 | 2 |")


def test_plus_time_bench_times_a_case_and_compares(tmp_path):
    b = _load("bench_plus_time")
    api = b._imports()
    case = ("rooted", "torus4x4", "reduce", 2, 4, 3)
    p = b._problem(case, api)
    assert (p.kind, p.num_chunks, p.collective.root) == ("reduce", 2, 3)
    fields = ["group", "topology", "collective", "chunks", "mib", "root", "time_us", "synthesis_s", "status"]
    for name, (t, s) in {"old.csv": (110.0, 0.010), "new.csv": (100.0, 0.030)}.items():
        with (tmp_path / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerow(dict(zip(fields, ["rooted", "torus4x4", "reduce", 2, 4, 3, t, s, "feasible"])))
    lines = b.compare(tmp_path / "old.csv", tmp_path / "new.csv")
    assert lines[2].split("|")[5].strip() == "3.00"                      # new / old synthesis time
    assert float(lines[2].split("|")[7]) == pytest.approx(100 / 110, abs=1e-4)
