"""Inputs that must not hang a run, nor end it in a traceback (issue 34, Robustness): non-regular files, huge
files, deep or ambiguous JSON, a byte-order mark, link times that overflow, memory a collective cannot have,
and configuration keys that do not exist (the message names the nearest valid one)."""

from __future__ import annotations

import json
import os
import time

import pytest

from tacos_bench import inputs
from tacos_bench.errors import CollectiveError, ConfigError, InputFileError, ScheduleError, TacosError, TopologyFileError
from tacos_bench.schedule import Schedule
from tacos_bench.topology.io import load_topology

PAIR = "2\n0 1 50 0.5\n1 0 50 0.5\n"


def _link(s, d, lat=0.5):
    return {"src": s, "dst": d, "bw_GiBps": 50, "lat_us": lat}


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_device_is_refused_at_once():
    t0 = time.perf_counter()
    with pytest.raises(TopologyFileError, match=r"^/dev/zero: not a regular file \(a character device\)"):
        load_topology("/dev/zero")
    with pytest.raises(ScheduleError, match="not a regular file"):
        Schedule.from_csv("/dev/zero")
    assert time.perf_counter() - t0 < 5.0   # at once, not after reading an endless file (loaded machine: slack)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "topo.txt"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    with pytest.raises(TopologyFileError, match="not a regular file \\(a FIFO\\)"):
        load_topology(fifo)
    assert time.perf_counter() - t0 < 5.0


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(TopologyFileError, match="a directory"):
        load_topology(tmp_path)


def test_the_size_read_is_capped(tmp_path, monkeypatch):
    p = tmp_path / "big.txt"
    p.write_text(PAIR + "# padding\n" * 100)
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 64)
    with pytest.raises(TopologyFileError, match="larger than the 64 bytes a topology file may have"):
        load_topology(p)
    with pytest.raises(InputFileError, match="larger than"):
        inputs.read_input_bytes(p, "file")
    assert inputs.read_input_bytes(p, "file", max_bytes=10_000).startswith(b"2\n")


def test_a_byte_order_mark_is_dropped(tmp_path):
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbf" + PAIR.encode())
    assert load_topology(p).num_npus == 2
    j = tmp_path / "bom.json"
    j.write_bytes(b"\xef\xbb\xbf" + json.dumps({"num_npus": 2, "links": [_link(0, 1), _link(1, 0)]}).encode())
    assert load_topology(j).num_links == 2


def test_a_duplicate_json_key_is_refused_naming_it(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{"num_npus": 2, "num_npus": 3, "links": []}')
    with pytest.raises(TopologyFileError, match=r"dup.json \[num_npus\]: duplicate key 'num_npus'"):
        load_topology(p)
    q = tmp_path / "dup_link.json"
    q.write_text('{"num_npus": 2, "links": [{"src": 0, "dst": 1, "bw_GiBps": 50, "lat_us": 0.5, "lat_us": 9},'
                 ' {"src": 1, "dst": 0, "bw_GiBps": 50, "lat_us": 0.5}]}')
    with pytest.raises(TopologyFileError, match="dup_link.json.*duplicate key 'lat_us'"):
        load_topology(q)


def test_deeply_nested_json_names_the_file(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(TopologyFileError, match=r"deep.json: invalid JSON: brackets nested too deeply"):
        load_topology(p)
    from tacos_bench.export.json_export import load_json

    with pytest.raises(TacosError, match="deep.json: not valid JSON: nested too deeply"):
        load_json(p)


def test_an_unknown_collective_key_names_the_nearest():
    from tacos_bench.runner.stages import build_problem

    with pytest.raises(ConfigError) as e:
        build_problem({"kind": "mesh2d", "dims": [2, 2]}, {"kind": "all_gather", "chunk_per_npu": 2})
    msg = str(e.value)
    assert msg.startswith("unknown setting collective.chunk_per_npu (did you mean collective.chunks_per_npu?); "
                          "valid keys of collective: kind, chunks_per_npu,")
    assert msg.count("chunks_per_npu") == 2  # once suggested, once listed (not twice in the list)


@pytest.mark.parametrize("links,needle", [
    ("0 1 50 1e308\n1 0 50 0.5\n", "would take 1e+308 µs, more than the 1e+12 µs"),
    ("0 1 50 1e308\n1 0 50 1e308\n", "would take 1e+308 µs"),
    ("0 1 1e308 0\n1 0 50 0.5\n", "would take no time at all (the bandwidth overflows a float)"),
    ("0 1 1e-300 0\n1 0 50 0.5\n", "more than the 1e+12 µs"),
    ("0 1 50 9e11\n1 0 1e6 0\n", "link times 1.8e+12x apart: a 536870912-byte chunk crosses 1->0 in 0.5 µs"),
])
def test_link_times_that_overflow_are_refused(tmp_path, links, needle):
    from tacos_bench import Collective, Problem
    from tacos_bench.errors import TopologyError

    p = tmp_path / "t.txt"
    p.write_text("2\n" + links)
    with pytest.raises(TopologyError, match=needle.replace("+", r"\+").replace("(", r"\(").replace(")", r"\)")):
        Problem(load_topology(p), Collective("all_gather"))


def test_a_numpy_warning_goes_to_the_log_not_stderr(tmp_path, monkeypatch, capfd):
    import numpy as np

    from tacos_bench.runner import pipeline

    real = pipeline.problem_fields

    def noisy(problem):
        np.float64(1e308) * np.float64(10)   # RuntimeWarning: overflow
        return real(problem)

    monkeypatch.setattr(pipeline, "problem_fields", noisy)
    rec = pipeline.run_job({"solver": {"name": "ring"}, "topo": {"kind": "ring", "dims": [4]},
                            "collective": {"kind": "all_gather"}}, tmp_path / "run")
    assert rec["valid"] and rec["status"] == "optimal"
    assert "RuntimeWarning" not in capfd.readouterr().err


def test_memory_is_estimated_before_anything_is_allocated(tmp_path):
    from tacos_bench.runner.pipeline import run_job
    from tacos_bench.runner.stages import check_memory, build_problem

    t0 = time.perf_counter()
    cfg = {"solver": {"name": "greedy"}, "topo": {"kind": "ring", "dims": [4]},
           "collective": {"kind": "all_to_all", "chunks_per_npu": 62_500_000, "buffer_mib": 1e8}}
    rec = run_job(cfg, tmp_path / "run")
    assert time.perf_counter() - t0 < 5
    assert rec["status"] == "error" and "internal error" not in rec["error"]
    assert "(1,000,000,000 chunks) on 4 NPUs needs at least" in rec["error"]
    assert "lower collective.chunks_per_npu" in rec["error"]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["error"] == rec["error"]
    # the same estimate against a small machine: a modest problem is refused there, and fits here
    p = build_problem({"kind": "ring", "dims": [4]}, {"kind": "all_to_all", "chunks_per_npu": 1000})
    with pytest.raises(CollectiveError, match="GiB are available"):
        check_memory(p, available=1000)
    check_memory(p, available=1 << 30)


def test_a_problem_too_large_to_run_in_seconds_is_refused_up_front_and_the_limit_can_be_raised(tmp_path):
    from tacos_bench.runner.pipeline import run_job

    # the fuzz's 16 M chunks on 4 NPUs: it fits in memory, and ran 100 s before this refusal
    cfg = {"solver": {"name": "greedy"}, "topo": {"kind": "ring", "dims": [4]},
           "collective": {"kind": "all_to_all", "chunks_per_npu": 1_000_000, "buffer_mib": 1e8}}
    t0 = time.perf_counter()
    rec = run_job(cfg, tmp_path / "big")
    assert time.perf_counter() - t0 < 5
    assert rec["status"] == "error" and "internal error" not in rec["error"]
    assert "asks for 12,000,000 deliveries, above max_deliveries=10,000,000" in rec["error"]
    assert "set max_deliveries=12000000 to run it" in rec["error"]
    small = {**cfg, "collective": {"kind": "all_to_all", "chunks_per_npu": 8}}
    assert "96 deliveries, above max_deliveries=95" in run_job({**small, "max_deliveries": 95}, tmp_path / "low")["error"]
    assert run_job({**small, "max_deliveries": 96}, tmp_path / "raised")["valid"]
    # All-Gather streams (compact schedules), so it is not held to the count
    ag = {**cfg, "collective": {"kind": "all_gather", "chunks_per_npu": 8}, "max_deliveries": 1}
    assert run_job(ag, tmp_path / "ag")["valid"]
    bad = run_job({**small, "max_deliveries": 0}, tmp_path / "bad")
    assert bad["error"] == "max_deliveries must be a positive integer, got 0"


def test_the_memory_estimate_stays_below_what_large_runs_measured():
    from tacos_bench import Collective, Problem
    from tacos_bench.runner.stages import memory_estimate_bytes
    from tacos_bench.topology.generators import mesh2d

    # docs/scale.md: greedy All-Gather on mesh200x200 peaks at 3.27 GiB; all_to_all on uniring4 with 1.2 M
    # deliveries (2.4 M transfers) took 855 MB
    big = Problem(mesh2d(200, 200), Collective("all_gather", 1, 1024.0))
    assert memory_estimate_bytes(big) < 3.27 * 2 ** 30
    from tacos_bench.topology.generators import ring

    a2a = Problem(ring(4, bidirectional=False), Collective("all_to_all", 100_000, 1e5))
    assert memory_estimate_bytes(a2a) < 855e6
