"""run.py with failures: fault.at_us/links (repair mid-collective), topo.failed_links, collective.root through
topo.failed_npus, and one-line errors for every bad fault/collective input. The runs go through run.py's own entry
point in this process (:func:`cli.run_py_in_process`); tests/test_run.py keeps a real process for the exit status
and stderr."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli import run_py_in_process
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.faults import Fault
from tacos_bench.topology.generators import mesh2d
from tacos_bench.topology.io import load_topology
from tacos_bench.topology.transforms import remove_links
from tacos_bench.verify import verify


def record(out) -> dict:
    return json.loads((out / "result.json").read_text())


def mesh4x4():
    topo = mesh2d(4, 4)
    assert topo.num_links == 48
    return topo


def test_fault_run_records_healthy_repaired_and_scratch(tmp_path):
    out = tmp_path / "run"
    at = 3000.0   # healthy time on mesh4x4 is 8 link times of 1250.5 µs (K=2: 16 of 625.5 µs)
    r = run_py_in_process("solver=greedy", "topo=mesh4x4", "collective.chunks_per_npu=2", "seed=1",
                          f"fault.at_us={at}", "fault.links=[[5,6,both]]", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = record(out)
    assert rec["error"] is None and rec["valid"] is True and rec["status"] in ("optimal", "feasible")
    assert rec["fault_at_us"] == at and rec["fault_links"] == 2
    for key in ("healthy_time_us", "healthy_synthesis_time_s", "repaired_time_us", "scratch_time_us",
                "scratch_synthesis_time_s", "repair_loss", "repair_speedup", "repair_synthesis_time_s"):
        assert isinstance(rec[key], (int, float)), key
    assert rec["scratch_valid"] is True
    assert rec["repaired_time_us"] == rec["collective_time_us"]
    assert rec["repair_loss"] == pytest.approx(rec["repaired_time_us"] / rec["scratch_time_us"] - 1)
    assert rec["repaired_time_us"] >= rec["lower_bound_us"] * (1 - 1e-9)
    assert rec["healthy_time_us"] >= rec["lower_bound_us"] * (1 - 1e-9)
    assert rec["healthy_time_us"] > at
    counts = {k: rec[f"repair_{k}_transfers"] for k in ("kept", "in_flight", "lost", "dropped", "new")}
    assert all(isinstance(v, int) and v >= 0 for v in counts.values()), counts
    assert counts["in_flight"] <= counts["kept"] and counts["new"] > 0
    # the CSV is the executed schedule: it replays to the recorded time with the fault
    s = Schedule.from_csv(out / "schedule.csv")
    assert rec["num_transfers"] == len(s) == counts["kept"] + counts["new"]
    p = Problem(mesh4x4(), Collective("all_gather", 2, 1024))
    fault = Fault(at, links=((5, 6), (6, 5)))
    assert verify(p, s, fault).collective_time_us == rec["collective_time_us"]
    on_failed = ((s.src == 5) & (s.dst == 6)) | ((s.src == 6) & (s.dst == 5))
    assert on_failed.any() and np.all(s.end_us[on_failed] <= at)
    assert np.sum(s.start_us < at) == counts["kept"]   # new transfers all start at or after the fault


def test_failed_links_run_on_the_degraded_topology(tmp_path):
    out = tmp_path / "run"
    r = run_py_in_process("solver=greedy", "topo=mesh4x4", "topo.failed_links=[[0,1],[2,3,both]]",
                          f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = record(out)
    assert rec["valid"] is True and rec["error"] is None
    assert rec["failed_links"] == 3 and rec["topology_kind"] == "degraded"
    assert rec["num_links"] == 45 and rec["num_npus"] == 16
    gone = {(0, 1), (2, 3), (3, 2)}
    s = Schedule.from_csv(out / "schedule.csv")
    assert not set(zip(s.src.tolist(), s.dst.tolist())) & gone
    topo = remove_links(mesh4x4(), sorted(gone))
    p = Problem(topo, Collective("all_gather", 1, 1024))
    assert verify(p, s).collective_time_us == rec["collective_time_us"]
    saved = load_topology(out / rec["topology_file"])
    assert saved.num_links == 45 and not any(saved.has_link(u, v) for u, v in gone)


def test_root_is_mapped_through_failed_npus(tmp_path):
    """mesh4x4 without NPU 2: configured NPU 5 becomes id 4. The broadcast starts from it: its out-neighbours
    in the saved topology are the originals 1, 4, 6, 9 (ids 1, 3, 5, 8); id 5 (original 6) has a different
    neighbourhood, so a root left unmapped would show."""
    out = tmp_path / "run"
    r = run_py_in_process("solver=greedy", "topo=mesh4x4", "topo.failed_npus=[2]", "collective=broadcast",
                          "collective.root=5", "collective.chunks_per_npu=2", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = record(out)
    assert rec["valid"] is True and rec["root"] == 5 and rec["num_npus"] == 15
    assert rec["topology_kind"] == "induced"
    saved = load_topology(out / rec["topology_file"])
    assert saved.num_npus == 15
    assert sorted(saved.out_neighbors(4).tolist()) == [1, 3, 5, 8]
    s = Schedule.from_csv(out / "schedule.csv")
    first = np.lexsort((s.end_us, s.start_us))
    assert int(s.src[first[0]]) == 4
    assert set(s.src[s.start_us == 0].tolist()) == {4}
    for c in range(2):   # each chunk's first transfer leaves the root
        mine = np.flatnonzero(s.chunk == c)
        assert int(s.src[mine[np.argmin(s.start_us[mine])]]) == 4
    p = Problem(saved, Collective("broadcast", 2, 1024, root=4))
    assert verify(p, s).collective_time_us == rec["collective_time_us"]


BAD = [
    (["collective=alltoallv"], "Could not find 'collective/alltoallv'"),
    (["collective.kind=allscatter"], "unknown collective 'allscatter'"),
    (["collective=broadcast", "collective.root=16"], "collective.root=16"),
    (["topo.failed_npus=[5]", "collective=scatter", "collective.root=5"], "collective.root=5 is a failed NPU"),
    (["topo.failed_links=[[0,5]]"], "no link 0->5"),
    (["topo.failed_links=[[0,1,both],[0,4,both]]"], "disconnected"),
    (["fault.at_us=-1", "fault.links=[[0,1]]"], "fault.at_us must be a non-negative"),
    (["fault.links=[[0,1]]"], "need fault.at_us"),
    (["collective=reduce_scatter", "fault.at_us=100", "fault.npus=[3]"], "not after NPUs fail"),
    (["solver=milp", "fault.at_us=100", "fault.links=[[0,1]]"], "'milp' cannot start from a state"),
]
IDS = ["collective-group", "collective-kind", "root-out-of-range", "root-failed", "no-such-link", "disconnected",
       "negative-fault-time", "links-without-time", "reducing-fault", "milp-fault"]
# through run.py's entry point (Hydra, the exit code, stderr): a config-group error and one of the run's own
# errors; the rest fail inside the run, which the CLI reports the same way: checked with run_job (test below)
CLI = ("collective-group", "negative-fault-time")


@pytest.mark.parametrize("args,needle", [b for b, i in zip(BAD, IDS) if i in CLI], ids=list(CLI))
def test_bad_input_one_line_error_and_record(tmp_path, args, needle):
    out = tmp_path / "out"
    r = run_py_in_process("solver=greedy", "topo=mesh4x4", *args, f"hydra.run.dir={out}")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "internal error" not in lines[0]
    rec = record(out)
    assert rec["status"] == "error" and rec["valid"] is False and needle in rec["error"]
    assert not (out / "schedule.csv").exists()


def _cfg(args: list[str]) -> dict:
    """The run configuration ``args`` (Hydra overrides of conf/) give, composed by hand for run_job."""
    import yaml

    from cli import conf

    cfg = {"solver": {"name": "greedy"}, "topo": conf("topo", "mesh4x4"), "collective": conf("collective", "all_gather"),
           "seed": 0}
    for a in args:
        key, value = a.split("=", 1)
        value = yaml.safe_load(value)
        if key == "collective":
            cfg["collective"] = conf("collective", value)
        elif key == "solver":
            cfg["solver"] = {"name": value}
        else:
            group, name = key.split(".", 1)
            cfg.setdefault(group, {})[name] = value
    return cfg


@pytest.mark.parametrize("args,needle", [b for b, i in zip(BAD, IDS) if i not in CLI],
                         ids=[i for i in IDS if i not in CLI])
def test_bad_input_recorded_as_one_line_error(tmp_path, args, needle):
    from tacos_bench.runner.pipeline import run_job

    rec = run_job(_cfg(args), tmp_path)
    assert rec["status"] == "error" and rec["valid"] is False and needle in rec["error"]
    assert "\n" not in rec["error"] and "internal error" not in rec["error"]
    assert not (tmp_path / "schedule.csv").exists()
