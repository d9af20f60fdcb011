"""Exports of chunk-table runs (issue 33 item 7): JSON carries the table and reads back into the same problem
(the verifier accepts the schedule against it), Chakra ET files are written with the table's sets, MSCCL and
ASTRA-sim refuse in one line naming why."""

import importlib.util
import json

import pytest

from cli import run_in_process, run_module
from tacos_bench.export import load_json
from tacos_bench.rundir import load_run
from tacos_bench.verify import verify


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe") / "run"
    rec = run_in_process(out, solver="greedy", topo="hetero_mesh4x4", collective="moe_combine", tokens_per_npu=4)
    assert rec["valid"], rec["error"]
    return out


def test_a_table_run_reloads_from_its_chunks_csv(moe_run):
    problem, schedule, rec = load_run(moe_run)
    assert problem.collective.demand is not None and problem.kind == "moe_combine"
    assert verify(problem, schedule).collective_time_us == pytest.approx(rec["collective_time_us"])


def test_json_export_carries_the_table_and_round_trips(moe_run, tmp_path):
    r = run_module("tacos_bench.export", "json", moe_run, "-o", tmp_path / "s.json")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    problem, _, _ = load_run(moe_run)
    rows = doc["collective"]["chunks"]
    assert len(rows) == problem.num_chunks and {row["op"] for row in rows} == {"reduce"}
    assert rows[0]["destinations"] == problem.demand.destinations_of(0).tolist()
    back, sched = load_json(tmp_path / "s.json")
    assert back.num_chunks == problem.num_chunks and verify(back, sched).valid


@pytest.mark.parametrize("fmt", ["msccl", "astra-sim"])
def test_runtimes_without_tables_refuse_in_one_line(moe_run, tmp_path, fmt):
    r = run_module("tacos_bench.export", fmt, moe_run, "-o", tmp_path / "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "chunk table" in r.stderr and "json" in r.stderr


@pytest.mark.skipif(importlib.util.find_spec("chakra") is None, reason="the Chakra schema is not installed")
def test_chakra_export_of_a_table(moe_run, tmp_path):
    from tacos_bench.export.chakra import build_chakra_nodes

    problem, schedule, _ = load_run(moe_run)
    meta, nodes = build_chakra_nodes(problem, schedule)
    names = {a.name for a in meta.attr}
    assert {"chunk_source_ptr", "chunk_destination_ids", "chunk_ops"} <= names
    sends = sum(1 for rank in nodes for n in rank if n.name.startswith("send_"))
    assert sends == len(schedule)
