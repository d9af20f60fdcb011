"""run.py on switched fabrics: the run's files (schedule.csv's seventh column ``route`` only when the topology
has switches), fabric edge-list files, and one-line errors (exit code 2, no traceback) for bad fabric files and
for backends that refuse a fabric or need one; a run that fails after its problem was built keeps what it
computed in result.json. The runs go through run.py's own entry point in this process
(:func:`cli.run_py_in_process`); tests/test_run.py keeps a real process for the exit status and stderr."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from cli import run_in_process, run_py_in_process

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.topology.io import load_topology
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import check

PUBLIC = ["chunk", "src", "dst", "start_us", "end_us", "op"]


def record(out) -> dict:
    return json.loads((out / "result.json").read_text())


def header(out) -> list[str]:
    return list(pd.read_csv(out / "schedule.csv", nrows=0).columns)


def one_line_error(r, needle: str) -> str:
    """The run ended with exit code 2 and a single stderr line naming the problem, without a traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------------ good runs
def test_switched_run_writes_a_route_column_and_replays(tmp_path):
    out = tmp_path / "run"
    r = run_py_in_process("topo=switched8", "collective=broadcast", "collective.chunks_per_npu=8",
                          "solver=greedy_plus", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = record(out)
    assert rec["error"] is None and rec["valid"] is True and rec["status"] == "optimal"
    assert (rec["topology"], rec["num_npus"], rec["num_links"]) == ("switched8", 8, 16)
    # 10 port times of 1.0 µs + 128 MiB at 50 GiB/s, and the pipeline bound proves it (README's example)
    assert rec["collective_time_us"] == pytest.approx(25_010.0) and rec["lower_bound_us"] == pytest.approx(25_010.0)
    assert header(out) == PUBLIC + ["route"]
    df = pd.read_csv(out / "schedule.csv", keep_default_na=False)
    assert len(df) == rec["num_transfers"] and df["route"].str.fullmatch(r"\d+>8>\d+").all()
    assert set(df["op"]) == {"copy"}
    # the CSV replays on the fabric to the recorded time; the saved topology is the same fabric
    s = Schedule.from_csv(out / "schedule.csv")
    assert s.has_routes
    p = Problem(named_topology("switched8"), Collective("broadcast", 8, 1024))
    assert check(p, s).collective_time_us == rec["collective_time_us"]
    saved = load_topology(out / rec["topology_file"])
    assert (saved.num_npus, saved.num_switches, saved.num_links) == (8, 1, 16)


def test_point_to_point_run_keeps_six_columns(tmp_path):
    out = tmp_path / "run"
    assert run_in_process(out, solver="greedy_plus", topo="ring8")["valid"] is True
    assert header(out) == PUBLIC
    assert not Schedule.from_csv(out / "schedule.csv").has_routes


def test_fabric_edge_list_file_runs(tmp_path):
    """The edge-list format with switches: first line ``N S``, link lines that name switch ids, a ``switch``
    line per switch that is not a plain cut-through one."""
    path = tmp_path / "star4.txt"
    path.write_text("# name: star4\n# 4 NPUs on one multicast switch (node 4)\n4 1\nswitch 4 cut_through multicast\n"
                    + "".join(f"{u} 4 50 0.5\n4 {u} 50 0.5\n" for u in range(4)))
    out = tmp_path / "run"
    r = run_py_in_process("topo=file", f"topo.path={path}", "collective=broadcast", "collective.chunks_per_npu=4",
                          "collective.buffer_mib=16", "solver=greedy_plus", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = record(out)
    assert rec["valid"] is True and rec["topology"] == "star4" and rec["num_npus"] == 4 and rec["num_links"] == 8
    assert header(out) == PUBLIC + ["route"]
    topo = load_topology(path)
    assert topo.num_switches == 1 and topo.switches[0].multicast
    p = Problem(topo, Collective("broadcast", 4, 16))
    assert check(p, Schedule.from_csv(out / "schedule.csv")).collective_time_us == rec["collective_time_us"]
    assert rec["collective_time_us"] >= rec["lower_bound_us"] * (1 - 1e-9)


# ------------------------------------------------------------------------------------------------ bad fabric files
LINKS_2_1 = "0 2 50 0.5\n2 0 50 0.5\n1 2 50 0.5\n2 1 50 0.5\n"   # NPUs 0, 1 on switch 2


@pytest.mark.parametrize("text,needle", [
    ("2 1\n" + LINKS_2_1 + "switch 5 cut_through\n", ":6 [switch]: switch id 5 out of range 2..2"),
    ("2 1\n" + LINKS_2_1.replace("1 2 50", "1 3 50"), ":4 [dst]: node id 3 out of range 0..2"),
    ("2 2\n" + LINKS_2_1, "switch 3 has no links"),
    ("2 1\n" + LINKS_2_1 + "switch 1 store_forward\n", ":6 [switch]: switch line for NPU id 1"),
], ids=["switch-line-id-out-of-range", "link-to-switch-id-out-of-range", "switch-without-links",
        "switch-line-for-an-npu"])
def test_bad_fabric_file_one_line_error(tmp_path, text, needle):
    path = tmp_path / "fabric.txt"
    path.write_text(text)
    out = tmp_path / "out"
    r = run_py_in_process("topo=file", f"topo.path={path}", "solver=greedy", f"hydra.run.dir={out}")
    line = one_line_error(r, needle)
    assert str(path) in line
    rec = record(out)   # the failing run still leaves its record behind
    assert rec["status"] == "error" and needle in rec["error"]


# ------------------------------------------------------------------------------------------------ refusals
def test_milp_refuses_a_fabric_and_keeps_the_bounds(tmp_path):
    out = tmp_path / "out"
    r = run_py_in_process("solver=milp", "topo=switched8", f"hydra.run.dir={out}")
    line = one_line_error(r, "solver 'milp' does not model switches, and 'switched8' is a switched fabric")
    assert "greedy_plus" in line   # names the backends that do
    rec = record(out)
    assert rec["status"] == "error" and rec["valid"] is False and "does not model switches" in rec["error"]
    # nothing computed before the refusal is lost: the problem's fields and its lower bound are recorded
    assert (rec["topology"], rec["num_npus"], rec["num_links"], rec["chunk_bytes"]) == ("switched8", 8, 16, 2**27)
    assert rec["lower_bound_us"] == pytest.approx(17_507.0) and rec["lower_bound_source"] == "ingress"
    assert rec["collective_time_us"] is None


def test_nvls_refuses_a_point_to_point_topology(tmp_path):
    out = tmp_path / "out"
    r = run_py_in_process("solver=nvls", "topo=ring8", "collective=all_reduce", f"hydra.run.dir={out}")
    line = one_line_error(r, "solver 'nvls' runs inside switches, and 'ring8' has none")
    assert "switched8_nvls" in line
    rec = record(out)
    assert rec["status"] == "error" and "runs inside switches" in rec["error"]
    assert rec["num_npus"] == 8 and rec["lower_bound_us"] > 0
