"""Late NPUs (``collective.release_us``) in the exact backends' own models: the TEN of ``milp`` and ``cpsat``,
``cpsat``'s continuous-time and fabric models, the plan ``exact`` of solvers.release, and what they refuse.

Every case is small (4-8 NPUs, 1-2 chunks) and its release a whole number of link times, so the TEN is exact and
an optimum proved on it is the problem's."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import solvers
from solvers.exact.ten import TimeExpandedNetwork
from solvers.release import solve_released
from tacos_bench import Collective, Problem, Topology
from tacos_bench.bounds import lower_bounds
from tacos_bench.errors import SolverError
from tacos_bench.topology.fabrics import switched
from tacos_bench.topology.generators import mesh2d, ring
from tacos_bench.verify import check

FAST = {"time_limit_s": 10, "num_workers": 8}


def late(problem: Problem, *pairs) -> Problem:
    return Problem(problem.topology, replace(problem.collective, release=tuple(pairs)))


def wheel(n: int) -> Topology:
    """A ring of ``n`` NPUs and a hub (NPU ``n``) joined to each: the hub is needed by nobody to reach anyone."""
    edges = []
    for i in range(n):
        j = (i + 1) % n
        edges += [(i, j, 50.0, 0.5), (j, i, 50.0, 0.5), (i, n, 50.0, 0.5), (n, i, 50.0, 0.5)]
    return Topology.from_edges(n + 1, edges, name=f"wheel{n + 1}")


def opts(solver: str, **more) -> dict:
    return {**({"time_limit_s": 10} if solver == "milp" else FAST), **more}


def waited(solver: str, problem: Problem) -> float:
    """The plan ``wait``: the backend's schedule of the problem without late NPUs, started when the last joins."""
    res = solvers.get_solver(solver).solve(problem.without_release(), opts(solver))
    return res.schedule.makespan_us + float(problem.release_us.max())


# (topology, collective, chunks per NPU, late NPU, release in link times): the optimum with the release is
# strictly below waiting; hand-checked ones noted
CASES = [
    # the hub joins 3 link times late: the rim's All-Gather (a ring of 6, 3 steps) runs meanwhile, then the hub
    # takes every rim chunk at once over its 6 in-links and hands its own to all: 3 + 1 (waiting: 3 + 2)
    pytest.param(wheel(6), "all_gather", 2, 6, 3, id="wheel7-all_gather-hub"),
    pytest.param(ring(8), "gather", 1, 1, 2, id="ring8-gather"),
    pytest.param(mesh2d(2, 4), "broadcast", 2, 4, 2, id="mesh2x4-broadcast"),
    pytest.param(ring(6), "all_to_all", 1, 1, 2, id="ring6-all_to_all"),
]


@pytest.mark.parametrize("topo,kind,k,v,m", CASES)
def test_both_backends_prove_the_same_optimum_below_waiting_and_above_the_release_bound(topo, kind, k, v, m):
    base = Problem(topo, Collective(kind, k, 64, root=0))
    t = float(base.link_time_us[0])
    p = late(base, (v, m * t))
    assert TimeExpandedNetwork.build(p).exact        # the release is whole steps: the TEN optimum is the problem's
    lb = lower_bounds(p)["best_us"]
    found = {}
    for solver in ("cpsat", "milp"):
        # cold: the model itself, from the TEN's list schedule, not the greedy's plans for late NPUs
        res = solvers.get_solver(solver).solve(p, opts(solver, warm_start=False))
        ver = check(p, res.schedule)
        assert ver.valid, ver.message
        assert res.status == "optimal" and res.best_bound_us == pytest.approx(ver.collective_time_us)
        assert ver.collective_time_us >= lb * (1 - 1e-9)
        assert ver.collective_time_us < waited(solver, p) * (1 - 1e-9)
        found[solver] = ver.collective_time_us
    assert found["cpsat"] == pytest.approx(found["milp"])


def hub_late(steps: int) -> tuple[Problem, float]:
    """All-Gather on the 7-NPU wheel, its hub late by ``steps`` link times; and the link time."""
    base = Problem(wheel(6), Collective("all_gather", 1, 64))
    t = float(base.link_time_us[0])
    return late(base, (6, steps * t)), t


def test_the_wheel_hub_case_is_the_hand_computed_optimum():
    p, t = hub_late(3)
    res = solvers.get_solver("milp").solve(p, time_limit_s=10, warm_start=False)
    assert res.status == "optimal" and check(p, res.schedule).collective_time_us == pytest.approx(4 * t)
    assert waited("milp", p) == pytest.approx(5 * t)


def test_no_send_on_a_late_link_before_the_release_and_the_others_move_meanwhile():
    p, t = hub_late(3)
    ten = TimeExpandedNetwork.build(p)
    hub = (p.topology.src == 6) | (p.topology.dst == 6)
    assert (ten.release_steps[hub] == 3).all() and (ten.release_steps[~hub] == 0).all()
    sv = ten.send_vars()
    assert (sv.step[hub[sv.link]] >= 3).all()
    s = solvers.get_solver("cpsat").solve(p, FAST).schedule
    touches = (s.src == 6) | (s.dst == 6)
    assert s.start_us[touches].min() >= 3 * t * (1 - 1e-12)
    assert (s.start_us[~touches] < 3 * t).sum() >= 6 * 2      # the rim's All-Gather ran while the hub was away


def test_the_continuous_model_agrees_and_takes_any_decimal_release_exactly():
    base = Problem(ring(8), Collective("gather", 1, 64, root=0))
    t = float(base.link_time_us[0])
    p = late(base, (1, 2 * t))
    cont = solvers.get_solver("cpsat").solve(p, FAST, model="continuous", warm_start=False)
    ten = solvers.get_solver("cpsat").solve(p, FAST, warm_start=False)
    assert cont.status == ten.status == "optimal" and cont.optimality_scope == "continuous"
    assert check(p, cont.schedule).collective_time_us == pytest.approx(check(p, ten.schedule).collective_time_us)
    # a release that is no whole number of steps: the TEN rounds it up (scope ten), continuous time does not
    q = late(base, (1, 1.5 * t))
    assert not TimeExpandedNetwork.build(q).exact
    c = solvers.get_solver("cpsat").solve(q, FAST, model="continuous", warm_start=False)
    ver = check(q, c.schedule)
    assert ver.valid and c.status == "optimal" and c.stats["exact_time"]
    assert ver.collective_time_us == pytest.approx(4.5 * t)    # the late NPU's chunk: 3 hops after 1.5 t
    assert ver.collective_time_us >= lower_bounds(q)["best_us"] * (1 - 1e-9)


@pytest.mark.parametrize("kind,v", [("gather", 1), ("broadcast", 1), ("all_gather", 0)])
def test_the_fabric_model_keeps_a_late_port_idle(kind, v):
    # 1 MiB chunks: a hop through the switch takes 20.53125 µs, a decimal, so the unit stays exact
    base = Problem(switched(4), Collective(kind, 1, 4 if kind != "broadcast" else 1, root=0))
    hop = 1.0 + base.chunk_bytes / (50 * 2**30) * 1e6
    p = late(base, (v, 2 * hop))
    res = solvers.get_solver("cpsat").solve(p, FAST)
    ver = check(p, res.schedule)
    assert ver.valid, ver.message
    assert res.status == "optimal" and res.optimality_scope == "continuous"
    assert lower_bounds(p)["best_us"] * (1 - 1e-9) <= ver.collective_time_us <= waited("cpsat", p) * (1 + 1e-9)
    if kind != "all_gather":   # a late non-root NPU: the others need not wait for it
        assert ver.collective_time_us < waited("cpsat", p) * (1 - 1e-9)
    if kind == "broadcast":    # NPUs that join at different times are no twins for the symmetry cut
        from solvers.exact.fabric import _twin_npus, fabric_instance

        assert _twin_npus(fabric_instance(base)) == [[1, 2, 3]] and _twin_npus(fabric_instance(p)) == [[2, 3]]


def test_the_plan_exact_is_kept_and_recorded_with_an_honest_status():
    from tacos_bench.runner.stages import solve_and_verify

    base = Problem(ring(8), Collective("gather", 1, 64, root=0))
    t = float(base.link_time_us[0])
    p = late(base, (1, 2 * t))
    rec, _ = solve_and_verify(p, "milp", {"time_limit_s": 10})
    assert rec["valid"] and rec["release_plan"] == "exact"
    assert rec["status"] == "optimal" and rec["optimality_proof"] == "solver"
    assert rec["collective_time_us"] == pytest.approx(5 * t) and rec["lower_bound_us"] >= lower_bounds(p)["best_us"]
    tried = {c["name"] for c in json.loads(rec["candidates_tried"])}
    assert tried == {"exact", "wait"}
    # a release of no whole number of steps: the TEN's optimum is not the problem's, and is not claimed
    q = late(base, (1, 1.5 * t))
    res = solve_released(solvers.get_solver("cpsat"), q, {**FAST, "warm_start": False})
    assert res.candidate == "exact" and check(q, res.schedule).valid
    assert res.status == "feasible" and res.best_bound_us is None and res.stats["ten_exact"] is False


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_reduce", "reduce"])
def test_reducing_collectives_are_refused_in_one_line_and_wait(kind):
    p = late(Problem(ring(4), Collective(kind, 1, 64, root=0)), (1, 500.0))
    with pytest.raises(SolverError) as e:
        solvers.get_solver("milp").solve(p, time_limit_s=10)
    assert "copy collectives only" in str(e.value) and "\n" not in str(e.value)
    res = solve_released(solvers.get_solver("cpsat"), p, FAST)
    assert res.candidate == "wait" and check(p, res.schedule).valid
    skipped = {s["name"]: s["reason"] for s in res.candidates_skipped}
    assert "copy collectives only" in skipped["exact"]


def test_backends_without_the_model_never_try_it():
    p = late(Problem(ring(4), Collective("all_gather", 1, 64)), (1, 500.0))
    res = solve_released(solvers.get_solver("greedy"), p, {})
    names = {c["name"] for c in res.candidates_tried} | {c["name"] for c in res.candidates_skipped}
    assert "exact" not in names
