"""Stragglers (``collective.release_us``): the verifier's rule, the release bound, the plans of solvers.release on
every collective and both network kinds, and bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import solvers
from solvers.release import solve_released, with_ops
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.bounds import lower_bounds
from tacos_bench.bounds.release import release_bound_us, transfers_time_us
from tacos_bench.collective import KINDS
from tacos_bench.errors import CollectiveError, TacosError
from tacos_bench.topology.fabrics import switched
from tacos_bench.topology.generators import mesh2d, ring
from tacos_bench.verify import check, verify

from cli import run_module_in_process, run_py_in_process


def late(problem: Problem, *pairs) -> Problem:
    return Problem(problem.topology, replace(problem.collective, release=tuple(pairs)))


def healthy_time(problem: Problem, solver: str = "greedy") -> float:
    return check(problem, solvers.get_solver(solver).solve(problem).schedule).collective_time_us


def test_the_verifier_rejects_a_transfer_before_its_npu_joins():
    p = Problem(ring(4), Collective("all_gather", 1, 64))
    s = solvers.get_solver("greedy").solve(p).schedule.to_schedule()
    assert verify(p, s).valid
    msg = check(late(p, (2, 1e6)), s).message
    assert "before NPU 2 joins at 1000000.000000 µs" in msg and "collective.release_us" in msg
    # the same schedule started after the release is valid, and so is a release at 0
    assert check(late(p, (2, 1e6)), s.shifted(1e6)).valid
    assert check(late(p, (2, 0.0)), s).valid


def test_transfers_time_is_the_optimum_of_unit_jobs_on_uniform_links():
    assert transfers_time_us(0, np.array([1.0])) == 0.0
    assert transfers_time_us(5, np.array([1.0, 2.0])) == 4.0     # 3 + 2 x 2 (or 4 + 1 x 2)
    assert transfers_time_us(6, np.array([1.0, 3.0])) == 5.0     # 5 on the fast, 1 on the slow
    assert transfers_time_us(4, np.array([])) == float("inf")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("topo", [ring(4), mesh2d(3, 3), switched(6)], ids=["ring4", "mesh3x3", "switched6"])
def test_every_collective_with_a_straggler_is_valid_and_never_slower_than_waiting(kind, topo):
    base = Problem(topo, Collective(kind, 2, 64, root=1))
    T = healthy_time(base)
    p = late(base, (0, 0.6 * T))
    res = solve_released(solvers.get_solver("greedy"), p, {})
    ver = check(p, res.schedule.to_schedule())
    assert ver.valid, ver.message
    tried = {t["name"]: t["makespan_us"] for t in res.candidates_tried}
    assert ver.collective_time_us <= tried["wait"] * (1 + 1e-9) <= (0.6 * T + T) * (1 + 1e-9)
    lb = lower_bounds(p)
    assert lb["best_us"] <= ver.collective_time_us * (1 + 1e-9)
    assert lb["release_us"] == release_bound_us(p) and lb["best_us"] >= lower_bounds(base)["best_us"]


def test_copy_collectives_use_the_wait_and_meet_the_release_bound_on_a_ring():
    # All-Gather on a ring with NPU 0 late by the healthy time: its three chunks arrive over two links from then
    base = Problem(ring(8), Collective("all_gather", 1, 64))
    T = healthy_time(base)
    p = late(base, (0, T))
    res = solve_released(solvers.get_solver("greedy"), p, {})
    t = check(p, res.schedule.to_schedule()).collective_time_us
    assert t == pytest.approx(lower_bounds(p)["best_us"])


def test_all_reduce_runs_among_the_others_while_the_straggler_is_away():
    # StragglAR's case: 8 GPUs on one switch, one late by the healthy time; the plan that reduces among the
    # others first, then relays the late share among them while it gets their partial sum, finishes at T + 0.61 T
    # (the target: T + 0.65 T; waiting T + 1.0 T; the bound T + 0.57 T: the late NPU sends a whole buffer)
    base = Problem(switched(8), Collective("all_reduce", 4, 1024))
    T = healthy_time(base)
    p = late(base, (3, T))
    for solver, after in (("greedy", 0.8), ("greedy_plus", 0.65)):
        res = solve_released(solvers.get_solver(solver), p, {})
        ver = check(p, res.schedule.to_schedule())
        assert ver.valid and res.candidate == "straggle"
        assert ver.collective_time_us <= T + after * T
        assert ver.collective_time_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)


def test_the_relay_gets_the_late_share_once_into_the_others_and_their_sum_into_the_late_npu():
    base = Problem(switched(8), Collective("all_reduce", 2, 1024))
    T = healthy_time(base)
    p = late(base, (5, T))
    gp = solvers.get_solver("greedy_plus")
    s = solvers.release._straggle(gp, p, gp.options({}), share=True, relay=True)
    assert verify(p, s).valid
    after = s.start_us >= T - 1e-9
    out = after & (s.src == 5)
    # the late NPU's up-link carries its share of each chunk about once (the greedy may send a few twice)
    assert p.num_chunks <= out.sum() <= p.num_chunks + 4
    # and it receives every chunk exactly once
    into = after & (s.dst == 5)
    assert np.array_equal(np.sort(s.chunk[into]), np.arange(p.num_chunks))


def test_reduce_scatter_with_a_straggler_meets_its_bound():
    # the late NPU must still send its contribution of every other NPU's chunks: (N - 1) K chunk times after it
    # joins, what waiting takes too, and what the bound says
    base = Problem(switched(8), Collective("reduce_scatter", 4, 1024))
    T = healthy_time(base)
    p = late(base, (3, T))
    res = solve_released(solvers.get_solver("greedy"), p, {})
    t = check(p, res.schedule.to_schedule()).collective_time_us
    # (the bound counts one port's latency per transfer, a row through the switch pays two: 0.04 % here)
    assert t == pytest.approx(2 * T) and t <= lower_bounds(p)["best_us"] * 1.001
    assert "straggle" in {x["name"] for x in res.candidates_tried}


def test_several_stragglers_on_a_fabric():
    base = Problem(switched(8), Collective("all_reduce", 2, 256))
    T = healthy_time(base)
    p = late(base, (1, 0.5 * T), (6, T))
    res = solve_released(solvers.get_solver("greedy_plus"), p, {})
    ver = check(p, res.schedule.to_schedule())
    assert ver.valid, ver.message
    assert ver.collective_time_us <= 2 * T * (1 + 1e-9)


def test_the_ops_of_a_relay_follow_the_contributions():
    # ring(3) All-Reduce rows 1->0 (1's contribution) then 0->2: 0 holds {0, 1}, 2 holds {2}: disjoint, a reduce;
    # then 2->1 carries {0, 1, 2} onto {1}: a superset, a copy
    p = Problem(ring(3), Collective("all_reduce", 1, 1))
    t = float(p.link_time_us[0])
    s = Schedule.from_rows([(0, 1, 0, 0, t, "copy"), (0, 0, 2, t, 2 * t, "copy"), (0, 2, 1, 2 * t, 3 * t, "copy")])
    assert with_ops(p, s).op.tolist() == [1, 1, 0]
    # a relay that would count a contribution twice is refused
    bad = Schedule.from_rows([(0, 1, 0, 0, t, "copy"), (0, 1, 2, 0, t, "copy"), (0, 0, 2, t, 2 * t, "copy")])
    with pytest.raises(TacosError, match="twice"):
        with_ops(p, bad)


@pytest.mark.parametrize("solver,plan", [("cpsat", "exact"), ("ring", "wait"), ("bfs", "wait")])
def test_backends_without_a_start_state_wait(solver, plan):
    """Baselines have no start state: they wait. An exact backend models the late NPU itself (plan exact, which
    wins the tie with waiting on a ring of 4: the late NPU's chunk still goes round after it joins)."""
    from tacos_bench.runner.stages import solve_and_verify

    base = Problem(ring(4), Collective("all_gather", 1, 16))
    p = late(base, (1, 50.0))
    opts = {"time_limit_s": 10} if solver == "cpsat" else {}
    rec, _ = solve_and_verify(p, solver, opts)
    assert rec["valid"] and rec["release_plan"] == plan, rec.get("error")
    assert rec["lower_bound_source"] in ("release",) or rec["lower_bound_us"] >= release_bound_us(p)


@pytest.mark.parametrize("release,needle", [
    ([[0, -5]], "a release time is a finite, non-negative number"),
    ([[0, float("nan")]], "a release time is a finite, non-negative number"),
    ([[0, 1], [0, 2]], "lists NPU 0 twice"),
    ([[0]], "each entry is [npu, t]"),
    (["x"], "each entry is [npu, t]"),
    ([[1.5, 3]], "NPU id 1.5 is not a non-negative integer"),
])
def test_bad_release_times_are_one_line_errors(release, needle):
    with pytest.raises(CollectiveError, match=None) as e:
        Collective("all_gather", 1, 1, release=release)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_release_on_an_npu_outside_the_topology_is_named():
    with pytest.raises(CollectiveError, match="NPU 9 is not an NPU of 'ring4'"):
        Problem(ring(4), Collective("all_gather", 1, 1, release=((9, 1.0),)))


def test_run_py_takes_release_times_and_records_the_plan(tmp_path):
    out = tmp_path / "run"
    r = run_py_in_process("solver=greedy", "topo=switched8", "collective=all_reduce", "collective.chunks_per_npu=2",
                          "collective.release_us=[[0,20000]]", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "result.json").read_text())
    assert rec["valid"] and rec["release_plan"] in ("wait", "straggle") and rec["release_us"] == "[[0, 20000.0]]"
    assert rec["collective_time_us"] >= rec["lower_bound_us"] > 20000
    # the replay from the run's files holds the late NPU too: a schedule that ignores it is rejected
    v = run_module_in_process("tacos_bench.verify", out)
    assert v.returncode == 0 and "valid" in v.stdout, v.stdout + v.stderr
    healthy = run_py_in_process("solver=greedy", "topo=switched8", "collective=all_reduce",
                                "collective.chunks_per_npu=2", f"hydra.run.dir={tmp_path / 'healthy'}")
    assert healthy.returncode == 0
    v = run_module_in_process("tacos_bench.verify", out, "--schedule", tmp_path / "healthy" / "schedule.csv")
    assert v.returncode == 2 and "before NPU 0 joins" in v.stderr, v.stdout + v.stderr
    bad = run_py_in_process("solver=greedy", "topo=mesh4x4", "collective.release_us=[[3,-1]]",
                            f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    lines = [x for x in bad.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "collective.release_us: NPU 3 joins at -1" in lines[0]
    assert json.loads((tmp_path / "bad" / "result.json").read_text())["status"] == "error"
    outside = run_py_in_process("solver=greedy", "topo=mesh4x4", "topo.failed_npus=[5]",
                                "collective.release_us=[[5,10]]", f"hydra.run.dir={tmp_path / 'outside'}")
    assert outside.returncode == 2 and "collective.release_us: NPU 5 is a failed NPU" in outside.stderr
