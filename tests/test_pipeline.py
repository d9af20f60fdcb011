"""The run pipeline (tacos_bench/runner: run_job, solve_and_verify, the record) and run.py on bad input:
every failure is a record with the stage and the message, nothing computed is lost, the CLI prints one line."""


from __future__ import annotations


import hashlib

from cli import run_py_in_process


import json


import os


import subprocess


import sys


import textwrap


import numpy as np


import pytest


import solvers


from solvers.base import CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_REDUCE_SCATTER, Solver, SolveResult


from tacos_bench import Collective, Problem, Schedule, TacosError




from tacos_bench.topology.generators import ring


from tacos_bench.topology.io import load_topology


from tacos_bench.runner.pipeline import run_job, summary_line


from tacos_bench.topology import Topology


from tacos_bench.verify import verify


HEADER = "chunk,src,dst,start_us,end_us,op\n"


REQUIRED = ("run_id", "solver", "seed", "topology", "collective", "chunks_per_npu", "buffer_mib", "status",
            "valid", "collective_time_us", "lower_bound_us", "error", "output_dir", "git_commit", "host")


def small_cfg(**over):
    cfg = {"solver": {"name": "bfs"}, "topo": {"name": "m", "kind": "mesh", "dims": [2, 2]},
           "collective": {"kind": "all_reduce", "chunks_per_npu": 1, "buffer_mib": 1.0}, "seed": 0}
    cfg.update(over)
    return cfg


def read_rec(d):
    return json.loads((d / "result.json").read_text())


class _FakeSolver(Solver):
    """Returns whatever ``make(problem)`` gives: lets a test drive the pipeline through any outcome."""

    name = "fake"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE})

    def __init__(self, make):
        self.make = make

    def _solve(self, problem, opts):
        return self.make(problem)


@pytest.fixture
def fake_solver(monkeypatch):
    """Install a fake backend under the name ``fake`` (run_job looks solvers.get_solver up at call time)."""
    real = solvers.get_solver

    def install(make):
        monkeypatch.setattr(solvers, "get_solver", lambda name: _FakeSolver(make) if name == "fake" else real(name))

    return install


# ============================================================================================= malformed files
GRAPHML_HEAD = ('<?xml version="1.0"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">'
                '<key id="b" for="edge" attr.name="bw" attr.type="{bwtype}"/>'
                '<key id="l" for="edge" attr.name="lat" attr.type="double"/><graph edgedefault="directed">')


def _graphml(edges, bwtype="double", nodes=("0", "1")):
    body = "".join(f'<node id="{v}"/>' for v in nodes)
    body += "".join(f'<edge source="{u}" target="{v}"><data key="b">{b}</data><data key="l">{l}</data></edge>'
                    for u, v, b, l in edges)
    return GRAPHML_HEAD.format(bwtype=bwtype) + body + "</graph></graphml>"


def _link(s, d, b=50, l=0.5):
    return {"src": s, "dst": d, "bw_GiBps": b, "lat_us": l}


MALFORMED = {
    # edge lists
    "empty.txt": ("", "no NPU count"),
    "binary.txt": (b"\xff\xfe\x00", "not a UTF-8 text file"),
    "float_n.txt": ("3.0\n0 1 50 0.5\n", "must be an integer"),
    "extra_field.txt": ("2\n0 1 50 0.5\n1 0 50 0.5 9\n", ":3: expected 4 fields"),
    "nan_lat.txt": ("2\n0 1 50 0.5\n1 0 50 nan\n", ":3 [lat_us]"),
    "dup.txt": ("2\n0 1 50 0.5\n1 0 50 0.5\n1 0 50 0.5\n", ":4: duplicate link 1->0"),
    "oneway.txt": ("2\n0 1 50 0.5\n", "cannot reach NPU 0"),
    # JSON
    "truncated.json": ('{"num_npus": 3, "links": [', "invalid JSON"),
    "list.json": ("[1, 2]", "top level must be an object"),
    "str_bw.json": (json.dumps({"num_npus": 2, "links": [_link(0, 1), _link(1, 0, "fast")]}),
                    "[links[1].bw_GiBps]"),
    "nan_bw.json": ('{"num_npus": 2, "links": [{"src": 0, "dst": 1, "bw_GiBps": NaN, "lat_us": 0.5},'
                    '{"src": 1, "dst": 0, "bw_GiBps": 50, "lat_us": 0.5}]}', "[links[0].bw_GiBps]"),
    "bad_id.json": (json.dumps({"num_npus": 2, "links": [_link(0, 1), _link(1, 2)]}), "[links[1].dst]"),
    "float_n.json": (json.dumps({"num_npus": 2.0, "links": [_link(0, 1), _link(1, 0)]}), "[num_npus]"),
    # GraphML
    "truncated.graphml": ('<?xml version="1.0"?><graphml><graph>', "invalid GraphML"),
    "str_bw.graphml": (_graphml([(0, 1, "fast", 0.5), (1, 0, 50, 0.5)], bwtype="string"), "bw must be a number"),
    "multi.graphml": (_graphml([(0, 1, 50, 0.5), (0, 1, 50, 0.5), (1, 0, 50, 0.5)]), "duplicate link 0->1"),
    "self_loop.graphml": (_graphml([(0, 0, 50, 0.5), (0, 1, 50, 0.5), (1, 0, 50, 0.5)]), "self-loop"),
    "nan_bw.graphml": (_graphml([(0, 1, "NaN", 0.5), (1, 0, 50, 0.5)]), "bandwidth must be > 0"),
    "no_lat.graphml": (_graphml([(0, 1, 50, 0.5)]).replace('<data key="l">0.5</data>', ""), "no 'lat' attribute"),
}


@pytest.mark.parametrize("fname", sorted(MALFORMED))
def test_malformed_topology_file_is_a_recorded_one_line_error(tmp_path, fname):
    content, needle = MALFORMED[fname]
    path = tmp_path / fname
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    out = tmp_path / "out"
    rec = run_job(small_cfg(topo={"name": "file", "kind": "file", "path": str(path)}), out)
    assert rec["status"] == "error" and rec["valid"] is False
    err = rec["error"]
    assert fname in err and needle in err, err
    assert "internal error" not in err and "\n" not in err
    assert not (out / "traceback.txt").exists()
    on_disk = read_rec(out)
    for key in REQUIRED:
        assert key in on_disk, key
    assert on_disk["error"] == err


@pytest.mark.parametrize("topo,needle", [
    ({"failed_npus": [99]}, "failed_npus: unknown NPU id 99"),
    ({"failed_npus": [-1]}, "failed_npus: unknown NPU id -1"),
    ({"subset": [0, 7]}, "subset: unknown NPU id 7"),
    ({"failed_npus": [1, 2]}, "is disconnected"),
    ({"failed_npus": [0, 1, 2, 3]}, "no NPU"),
])
def test_bad_npu_lists_are_recorded_errors(tmp_path, topo, needle):
    cfg = small_cfg()
    cfg["topo"] = {**cfg["topo"], **topo}
    rec = run_job(cfg, tmp_path)
    assert rec["status"] == "error" and needle in rec["error"] and "internal error" not in rec["error"]


# ============================================================================================= stages
def test_record_after_a_rejected_schedule(tmp_path, fake_solver):
    def bad(problem):  # one transfer: far from an All-Reduce
        t = float(problem.link_time_us[0])
        s = Schedule.from_rows([(0, int(problem.topology.src[0]), int(problem.topology.dst[0]), 0, t, "copy")])
        return SolveResult("optimal", s, objective_us=t)

    fake_solver(bad)
    rec = run_job(small_cfg(solver={"name": "fake"}), tmp_path)
    # the verifier's verdict decides: a rejected schedule is no solution, whatever the solver said (issue 34)
    assert rec["status"] == "error" and rec["valid"] is False and rec["optimality_proof"] is None
    assert rec["error"].startswith("verification failed: postcondition unmet")
    assert rec["collective_time_us"] is None and rec["num_transfers"] == 1
    assert (tmp_path / "schedule.csv").exists()                      # kept for debugging
    assert "verified" not in summary_line(rec)


def test_record_after_a_crashing_solver(tmp_path, fake_solver):
    def boom(problem):
        raise RuntimeError("kaboom")

    fake_solver(boom)
    rec = run_job(small_cfg(solver={"name": "fake"}), tmp_path)
    assert rec["status"] == "error" and rec["error"] == "internal error while solving: RuntimeError: kaboom"
    assert rec["num_npus"] == 4 and rec["lower_bound_us"] > 0         # what was computed before is kept
    assert "RuntimeError: kaboom" in (tmp_path / "traceback.txt").read_text()


def test_record_after_a_solver_option_error(tmp_path):
    rec = run_job(small_cfg(solver={"name": "bfs", "nosuch": 1}), tmp_path)
    assert rec["status"] == "error" and rec["error"].startswith("solving: solver 'bfs' has no option(s) nosuch")
    assert rec["p_solver_nosuch"] == 1 and rec["num_links"] == 8


def test_numpy_solver_stats_are_recorded(tmp_path, fake_solver):
    from solvers.baselines.trivial import bfs_all_gather
    from solvers.compose import solve_collective

    def with_numpy_stats(problem):
        s = solve_collective(problem, bfs_all_gather)
        return SolveResult("feasible", s, objective_us=s.makespan_us,
                           stats={"nodes": np.int64(5), "sizes": [np.int64(1), np.int64(2)], "ok": np.bool_(True)})

    fake_solver(with_numpy_stats)
    rec = run_job(small_cfg(solver={"name": "fake"}), tmp_path)
    assert rec["valid"] and rec["error"] is None
    assert (rec["s_nodes"], json.loads(rec["s_sizes"]), rec["s_ok"]) == (5, [1, 2], True)
    assert read_rec(tmp_path)["s_nodes"] == 5


def test_no_schedule_is_explained(tmp_path, fake_solver):
    fake_solver(lambda p: SolveResult("no_solution", None, message="time limit hit before a first solution"))
    rec = run_job(small_cfg(solver={"name": "fake"}), tmp_path)
    assert rec["valid"] is False
    assert rec["error"] and "time limit hit" in rec["error"]
    assert "None" not in summary_line(rec)


def test_failing_rerun_leaves_no_stale_schedule(tmp_path):
    assert run_job(small_cfg(), tmp_path)["valid"]
    assert (tmp_path / "schedule.csv").exists()
    rec = run_job(small_cfg(solver={"name": "nosuch"}), tmp_path)
    assert rec["status"] == "error"
    assert not (tmp_path / "schedule.csv").exists()
    assert not (tmp_path / "topology.txt").exists()


@pytest.mark.parametrize("over", [{"seed": "abc"}, {"solver": "bfs"}])
def test_run_job_never_raises_on_bad_config(tmp_path, over):
    rec = run_job(small_cfg(**over), tmp_path)
    assert rec["status"] == "error" and rec["error"]
    assert read_rec(tmp_path)["status"] == "error"


@pytest.mark.parametrize("over,needle", [({"export": "bogus"}, "export must be one of none, msccl, json, chakra, astra-sim, got 'bogus'"),
                                          ({"schedule_csv": "bogus"}, "schedule_csv must be one of auto, always, never")])
def test_bad_output_settings_are_recorded_errors(tmp_path, over, needle):
    rec = run_job(small_cfg(**over), tmp_path)
    assert rec["status"] == "error" and needle in rec["error"] and "internal error" not in rec["error"]
    assert not (tmp_path / "traceback.txt").exists()


def test_saved_artifacts_replay_to_the_recorded_time(tmp_path):
    topo_file = tmp_path / "het.txt"
    topo_file.write_text("# name: het\n3\n0 1 16.666666666666668 0.1\n1 2 23.333333333333332 0.3\n"
                         "2 0 1.4285714285714286 0.7\n1 0 3.141592653589793 0.3333333333333333\n")
    cfg = small_cfg(topo={"name": "file", "kind": "file", "path": str(topo_file)})
    cfg["collective"] = {"kind": "all_reduce", "chunks_per_npu": 2, "buffer_mib": 1 / 3}
    rec = run_job(cfg, tmp_path / "out")
    assert rec["valid"] and rec["topology"] == "het"
    topo = load_topology(tmp_path / "out" / rec["topology_file"])
    p = Problem(topo, Collective("all_reduce", 2, 1 / 3))
    s = Schedule.from_csv(tmp_path / "out" / rec["schedule_file"])
    assert verify(p, s).collective_time_us == rec["collective_time_us"]
    assert len(s) == rec["num_transfers"]


# ============================================================================================= bad sizes
def test_link_time_overflow_is_rejected_up_front():
    topo = Topology.from_edges(2, [(0, 1, 1e-320, 0.5), (1, 0, 50.0, 0.5)])
    with pytest.raises(TacosError, match="0->1"):
        Problem(topo, Collective("all_gather", 1, 1024))


def test_huge_buffer_is_a_collective_error():
    with pytest.raises(TacosError, match="buffer_mib"):
        Problem(ring(2), Collective("all_gather", 1, 1e308))


# ============================================================================================= CLI
@pytest.mark.parametrize("kind", ["graphml", "failed_npus"])
def test_cli_one_line_error(root, tmp_path, kind):
    if kind == "graphml":
        bad = tmp_path / "t.graphml"
        bad.write_text(MALFORMED["multi.graphml"][0])
        args, needle = ["topo=file", f"topo.path={bad}"], "duplicate link 0->1"
    else:
        args, needle = ["topo=mesh4x4", "topo.failed_npus=[3,99]"], "failed_npus: unknown NPU id 99"
    r = run_py_in_process("solver=bfs", *args, f"hydra.run.dir={tmp_path / 'out'}")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tacos-bench: error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert read_rec(tmp_path / "out")["status"] == "error"


# ============================================================================================= schedule CSV
def _write(tmp_path, text, name="s.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_schedule_csv_is_byte_identical_for_the_same_seed(tmp_path):
    p = Problem(ring(6), Collective("all_reduce", 2, 7))
    for name in ("bfs", "greedy"):
        a = solvers.get_solver(name).solve(p, seed=5).schedule
        b = solvers.get_solver(name).solve(p, seed=5).schedule
        a.take(np.arange(len(a))[::-1]).to_csv(tmp_path / "a.csv")  # row order of the object must not matter
        b.to_csv(tmp_path / "b.csv")
        assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes(), name
        back = Schedule.from_csv(tmp_path / "a.csv")
        for col in ("chunk", "src", "dst", "start_us", "end_us", "op"):
            assert np.array_equal(getattr(back, col), getattr(a.sorted(), col)), col


def test_greedy_csv_identical_across_processes(root, tmp_path):
    # hash randomization differs between the two processes: set/dict order must not leak into schedules
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(root)!r})
        from tacos_bench import Collective, Problem
        from tacos_bench.topology.named import named_topology
        from solvers import get_solver
        p = Problem(named_topology("hetero_mesh4x4"), Collective("all_reduce", 2, 64))
        get_solver("greedy").solve(p, seed=3).schedule.to_csv(sys.argv[1])
    """)
    digests = []
    for h in ("1", "2"):
        out = tmp_path / f"g{h}.csv"
        env = {**os.environ, "PYTHONHASHSEED": h}
        r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=root, env=env, capture_output=True,
                           text=True, timeout=240)
        assert r.returncode == 0, r.stderr
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
