"""Exact backends on every collective: broadcast, reduce, gather, scatter and all_to_all on the TEN.

The models are solved cold on a horizon with slack (``warm_start=False``, list schedule + 2 steps), so the
model itself, not the warm start, must find and prove the optimum. Every schedule passes the verifier,
every backend and formulation proves the same TEN optimum, no optimum is below the lower bound or above
the greedy, and a few optima are checked against values worked out by hand.
"""

import numpy as np
import pytest

from solvers import get_solver
from solvers.exact.common import UNICAST_WARM_RULES, WARM_RULES, build_ag_model, warm_rules
from solvers.exact.ten import TimeExpandedNetwork
from tacos_bench import Collective, Problem, Topology
from tacos_bench.bounds import lower_bounds
from tacos_bench.topology.generators import fully_connected, mesh2d, ring, torus2d
from tacos_bench.verify import verify


def relay3() -> Topology:
    """3 NPUs, no latency: 0->2 is 3x slower than 0->1->2, so the fastest way from 0 to 2 is a relay."""
    fast, slow = 48.0, 16.0
    edges = [(0, 1, fast, 0.0), (1, 2, fast, 0.0), (0, 2, slow, 0.0), (1, 0, fast, 0.0), (2, 1, fast, 0.0),
             (2, 0, fast, 0.0)]
    return Topology.from_edges(3, edges, name="relay3")


def tiny_hetero() -> Topology:
    """4 NPUs, asymmetric, three bandwidths: link times are not whole TEN steps."""
    edges = [(0, 1, 50, 0.5), (1, 2, 25, 0.5), (2, 3, 50, 0.5), (3, 0, 100, 0.5),
             (1, 0, 50, 0.5), (2, 0, 50, 2.0), (3, 1, 100, 0.5)]
    return Topology.from_edges(4, edges, name="tiny_hetero")


TOPOS = {
    "ring3": lambda: ring(3),
    "ring4": lambda: ring(4),
    "uniring4": lambda: ring(4, bidirectional=False),
    "mesh2x2": lambda: mesh2d(2, 2),
    "fc3": lambda: fully_connected(3),
}
# 2-3 tiny topologies per collective, the one-way ring for each (every hop forced, relays needed)
KIND_TOPOS = {
    "broadcast": ("uniring4", "ring4", "fc3"),
    "reduce": ("uniring4", "mesh2x2", "fc3"),
    "gather": ("ring3", "uniring4", "mesh2x2"),
    "scatter": ("ring3", "uniring4", "fc3"),
    "all_to_all": ("ring4", "uniring4", "fc3"),
}
CASES = [(topo, kind, k, root) for kind, topos in KIND_TOPOS.items() for topo in topos for k in (1, 2)
         for root in ((0,) if kind == "all_to_all" else (0, 1))]
# Optima in link times, by hand:
HAND = {
    # one-way ring of 4: the farthest NPU is 3 hops from the root
    ("uniring4", "broadcast", 1, 0): 3,
    # the mirror of the above on the reversed ring
    ("uniring4", "reduce", 1, 0): 3,
    # fc3, 2 chunks: each NPU has one in-link from a holder in the first step (the root), so 2 steps
    ("fc3", "broadcast", 2, 0): 2,
    # the root sends each neighbour its chunk on its own link
    ("ring3", "scatter", 1, 0): 1,
    # 4 chunks leave the root on 2 out-links
    ("ring3", "scatter", 2, 1): 2,
    # the corner opposite the root is 2 hops away; the root's 2 in-links carry 3 chunks
    ("mesh2x2", "gather", 1, 0): 2,
    # 6 chunks enter the root on its one in-link
    ("uniring4", "gather", 2, 0): 6,
    # every pair has its own link
    ("fc3", "all_to_all", 1, 0): 1,
    # 4 NPUs x (1 + 2 + 3) hops = 24 link-steps over 4 links
    ("uniring4", "all_to_all", 1, 0): 6,
}
# both CP-SAT formulations on every case: auto picks interval for unicast data, time_indexed otherwise
BACKENDS = (("milp", {"backend": "highs"}), ("cpsat", {"model": "time_indexed"}), ("cpsat", {"model": "interval"}))


def loose_horizon(problem: Problem) -> int:
    copy = problem if problem.collective.copies else problem.mirror()
    return TimeExpandedNetwork.build(copy).horizon + 2


def ten_optimal(result) -> bool:
    return result.status == "optimal" or bool(result.stats.get("ten_optimal"))


def link_time(problem: Problem) -> float:
    return float(np.min(problem.link_time_us))


@pytest.mark.parametrize("topo,kind,k,root", CASES, ids=lambda v: str(v))
def test_backends_prove_the_same_verified_optimum(topo, kind, k, root):
    p = Problem(TOPOS[topo](), Collective(kind, k, 64, root=root))
    lb = lower_bounds(p)["best_us"]
    greedy = verify(p, get_solver("greedy").solve(p, seed=0).schedule).collective_time_us
    H = loose_horizon(p)
    steps = {}
    for name, opts in BACKENDS:
        r = get_solver(name).solve(p, time_limit_s=20, warm_start=False, horizon_steps=H, **opts)
        key = f"{name}/{next(iter(opts.values()))}"
        assert ten_optimal(r), (key, r.status, r.message)
        assert r.stats["source"] == "model" and r.stats["model_vars"] > 0, key
        t = verify(p, r.schedule).collective_time_us
        assert t <= r.objective_us * (1 + 1e-9), key
        assert t >= lb * (1 - 1e-9) and r.objective_us >= lb * (1 - 1e-9), key
        assert t <= greedy * (1 + 1e-9), key  # homogeneous links: the TEN optimum is the continuous one
        steps[key] = round(r.objective_us / r.stats["tau_us"])
    assert len(set(steps.values())) == 1, steps
    if (topo, kind, k, root) in HAND:
        assert next(iter(steps.values())) == HAND[topo, kind, k, root], steps


@pytest.mark.parametrize("kind,root", [("scatter", 0), ("gather", 2)])
def test_unicast_relays_beat_a_slow_direct_link(kind, root):
    """relay3: 0->2 directly takes 3 link times; relayed through 1 (and the other chunk in parallel) 2."""
    p = Problem(relay3(), Collective(kind, 1, 64, root=root))
    for name, opts in BACKENDS + (("milp", {"backend": "cbc"}),):
        r = get_solver(name).solve(p, time_limit_s=20, warm_start=False, horizon_steps=loose_horizon(p), **opts)
        assert r.status == "optimal" and r.stats["ten_exact"], (name, opts, r.status)
        assert verify(p, r.schedule).collective_time_us == pytest.approx(2 * link_time(p))
        s = r.schedule
        assert not np.any((s.src == 0) & (s.dst == 2))  # the slow link is not worth it


@pytest.mark.parametrize("kind", ["broadcast", "reduce", "gather", "scatter", "all_to_all"])
def test_heterogeneous_links_are_ten_optimal(kind):
    """Link times off the step grid: optimal on the TEN only (status feasible, ``ten_optimal``, scope ``ten``),
    no bound claimed for the continuous problem, and the retimed schedule is never slower than the TEN plan.
    (Cold: with the warm start, a greedy schedule at the continuous bound ends the run before the TEN.)"""
    p = Problem(tiny_hetero(), Collective(kind, 1, 64, root=1))
    objectives = set()
    for name, opts in (("milp", {}), ("cpsat", {})):
        r = get_solver(name).solve(p, time_limit_s=20, warm_start=False, **opts)
        assert r.optimality_scope == "ten" and r.time_resolution_us == r.stats["tau_us"]
        assert ten_optimal(r) and r.status == "feasible" and r.best_bound_us is None, (name, r.status)
        t = verify(p, r.schedule).collective_time_us
        assert lower_bounds(p)["best_us"] * (1 - 1e-9) <= t <= r.objective_us * (1 + 1e-9)
        objectives.add(round(r.objective_us / r.stats["tau_us"]))
    assert len(objectives) == 1


def test_reduce_is_the_broadcast_of_the_reversed_topology():
    """An asymmetric topology: Reduce mirrors the Broadcast on the reversed links, status and optimum carry over."""
    topo = tiny_hetero()
    for name in ("milp", "cpsat"):
        red = get_solver(name).solve(Problem(topo, Collective("reduce", 2, 64, root=2)), time_limit_s=20)
        bc = get_solver(name).solve(Problem(topo.reversed(), Collective("broadcast", 2, 64, root=2)),
                                    time_limit_s=20)
        assert red.status == bc.status and red.objective_us == pytest.approx(bc.objective_us)
        assert np.all(red.schedule.op == 1)  # every transfer reduces


def test_all_to_all_torus4x4_reaches_the_load_bound():
    """The 4x4 torus (= 4-cube): 16 x 32 link-hops over 64 links need 8 steps, and 8 steps are enough.

    At the load bound no chunk can leave a shortest path (the load slack is 0), which keeps the model small
    enough for both backends to find the perfect schedule quickly (measured: HiGHS 0.7 s, CP-SAT 0.6-1.4 s).
    """
    p = Problem(torus2d(4, 4), Collective("all_to_all", 1, 1024))
    ten = TimeExpandedNetwork.build(p, horizon_steps=8)
    assert ten.lower_bound_steps() == 8 and ten.load_slack_steps() == 0
    for name in ("milp", "cpsat"):
        r = get_solver(name).solve(p, time_limit_s=20, warm_start=False, horizon_steps=8)
        assert r.status == "optimal" and r.stats["source"] == "model", (name, r.status, r.message)
        assert verify(p, r.schedule).collective_time_us == pytest.approx(8 * link_time(p))


def test_hand_computed_cases_are_run():
    assert set(HAND) <= set(CASES)


@pytest.mark.parametrize("name,opts", BACKENDS + (("milp", {"backend": "cbc"}),), ids=lambda v: str(v))
def test_hinted_unicast_model_starts_from_the_warm_plan(name, opts):
    """horizon_steps = the warm plan's length: the routed warm plan (pruned to one path per chunk) is a
    valid start for the flow model."""
    p = Problem(mesh2d(3, 3), Collective("all_to_all", 1, 64))
    probe = get_solver(name).solve(p, time_limit_s=20, **opts)
    U = probe.stats["warm_steps"]
    r = get_solver(name).solve(p, time_limit_s=20, horizon_steps=U, **opts)
    assert r.stats["hinted"] and r.stats["model_status"] == "optimal", r.message
    assert r.objective_us == pytest.approx(probe.objective_us) and ten_optimal(r)
    verify(p, r.schedule)


def test_time_limit_on_an_all_to_all_model_it_cannot_finish():
    """Cold on the 4x4 mesh (a 19-step horizon): CP-SAT stops at the limit with the lower bound."""
    import time

    p = Problem(mesh2d(4, 4), Collective("all_to_all", 1, 1024))
    t0 = time.perf_counter()
    r = get_solver("cpsat").solve(p, time_limit_s=3, warm_start=False)
    assert time.perf_counter() - t0 <= 1.1 * 3 + 0.3
    assert r.status in ("feasible", "no_solution") and r.stop_reason == "time_limit"
    assert r.best_bound_us == pytest.approx(lower_bounds(p)["best_us"])
    if r.schedule is not None:
        verify(p, r.schedule)


# ---------------------------------------------------------------------------- model pieces
def test_unicast_send_vars_stay_in_the_reachable_window():
    p = Problem(torus2d(4, 4), Collective("all_to_all", 1, 1024))
    ten = TimeExpandedNetwork.build(p, horizon_steps=9)
    sv = ten.send_vars()
    D = ten.dist_steps
    s, t = ten.source[sv.chunk], ten.destination[sv.chunk]
    assert np.all(sv.step >= D[s, sv.src])                     # cannot be there earlier
    assert np.all(sv.arrive + D[sv.dst, t] <= ten.horizon)       # must still reach the destination
    assert not np.any(sv.dst == s) and not np.any(sv.src == t)  # never back to the source, never on from t
    detour = D[s, sv.src] + ten.link_steps[sv.link] + D[sv.dst, t] - D[s, t]
    assert np.all(detour <= ten.load_slack_steps())
    at_bound = TimeExpandedNetwork.build(p, horizon_steps=8).send_vars()
    assert len(at_bound) < len(sv) / 4  # slack 0: shortest paths only


def test_unicast_model_is_a_flow():
    p = Problem(mesh2d(2, 2), Collective("scatter", 2, 64, root=0))
    ten = TimeExpandedNetwork.build(p, horizon_steps=4)
    m = build_ag_model(ten, 1)
    assert m.unicast and m.flow_in and m.link_min == []
    n = ten.num_npus
    c, v = np.divmod(m.receipt_key, n)
    assert np.array_equal(m.receipt_required, v == ten.destination[c])
    for fin, fout, supply in zip(m.flow_in, m.flow_out, m.flow_supply):
        pair = {(int(m.sv.chunk[i]), int(m.sv.src[i])) for i in fout} | {(int(m.sv.chunk[i]), int(m.sv.dst[i]))
                                                                         for i in fin}
        (cc, u), = pair
        assert supply == int(u == ten.source[cc]) and u != ten.destination[cc]
    # chunks c and c + 4 both go from the root to NPU c: ordered at their destination (chunks 0 and 4 stay put)
    assert sorted(m.symmetry_pairs) == [(1, 5, 1), (2, 6, 2), (3, 7, 3)]


def test_warm_starts_use_rules_the_routing_greedy_takes():
    for kind in ("gather", "scatter", "all_to_all"):
        p = Problem(ring(4), Collective(kind, 1, 64, root=1))
        assert warm_rules(p) == UNICAST_WARM_RULES
        r = get_solver("cpsat").solve(p, time_limit_s=20)
        notes = r.stats["warm_greedy_note"].split("; ")
        assert len(notes) == len(UNICAST_WARM_RULES) and all(n.endswith(": ok") for n in notes), notes
        assert r.stats["warm_source"] != "ten_list" or r.stats["warm_list_steps"] <= r.stats["warm_steps_greedy_random"]
    for kind in ("broadcast", "reduce", "all_gather", "all_reduce"):
        assert warm_rules(Problem(ring(4), Collective(kind, 1, 64))) == WARM_RULES


def test_every_collective_is_a_capability():
    for name in ("milp", "cpsat"):
        s = get_solver(name)
        assert all(s.supports(k) for k in ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce",
                                          "gather", "scatter", "all_to_all"))
