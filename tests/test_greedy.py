"""Tests of the greedy TACOS matcher (solvers/greedy/ and its kernels solvers/_kernel_*.py).

Every schedule produced here is replayed by the independent verifier.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers.base import CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_RANDOMIZED, CAP_REDUCE_SCATTER, CAP_TIME_LIMIT, get_solver
from solvers.greedy import (CHUNK_ORDERS, LINK_TIEBREAKS, MATCHINGS, GreedySolver, greedy_all_gather,
                            restart_seeds)
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.bounds import lower_bounds
from tacos_bench.errors import SolverError
from tacos_bench.topology.generators import (fully_connected, grid, hetero_cluster, hypercube, mesh2d, mesh3d, ring, torus2d,
                                    torus3d)
from tacos_bench.topology import Topology
from tacos_bench.topology.transforms import remove_npus
from tacos_bench.verify import verify

SOLVER = GreedySolver()
# the settings that reach the per-NPU ingress bound on every homogeneous family tried (docs/greedy.md)
TIGHT = dict(chunk_order="rarest", matching="maximum")


def ag(topo, cpn=1, mib=1024.0, kind="all_gather"):
    return Problem(topo, Collective(kind, cpn, mib))


def solve_verified(problem, **kw):
    res = SOLVER.solve(problem, **kw)
    assert res.status == "feasible"
    v = verify(problem, res.schedule)
    assert res.objective_us == pytest.approx(v.collective_time_us, rel=1e-12)
    return res


def steps(problem, res):
    t = problem.link_time_us
    assert np.ptp(t) == 0
    return res.objective_us / t[0]


# ---------------------------------------------------------------------------- interface
def test_registry_and_capabilities():
    s = get_solver("greedy")
    assert isinstance(s, GreedySolver)
    assert {CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_RANDOMIZED, CAP_TIME_LIMIT} <= s.capabilities


@pytest.mark.parametrize("bad, match", [
    (dict(chunk_ordr="random"), "no option"),
    (dict(chunk_order="smallest"), "chunk_order"),
    (dict(link_tiebreak="fastest"), "link_tiebreak"),
    (dict(matching="perfect"), "matching"),
    (dict(restarts=0), "restarts"),
    (dict(restarts=2.5), "restarts"),
    (dict(duplicates="maybe"), "duplicates"),
    (dict(preempt=True), "preempt"),
    (dict(window=-1), "window"),
    (dict(window="4"), "window"),
])
def test_bad_options_raise_one_line_solver_error(bad, match):
    with pytest.raises(SolverError, match=match) as e:
        SOLVER.solve(ag(ring(4)), **bad)
    assert "\n" not in str(e.value)


def test_bad_seed_and_time_limit():
    with pytest.raises(SolverError, match="seed"):
        SOLVER.solve(ag(ring(4)), seed=-1)
    with pytest.raises(SolverError, match="time_limit_s"):
        SOLVER.solve(ag(ring(4)), time_limit_s=0)


def test_options_accept_hydra_spellings():
    opts = SOLVER.options(chunk_order="RAREST", duplicates="true", preempt="false", restarts=2)
    assert opts.chunk_order == "rarest" and opts.duplicates is True and opts.preempt is False
    assert SOLVER.solve(ag(mesh2d(3, 3)), opts).stats["restarts_run"] == 2


def test_stats_and_transfer_count():
    p = ag(mesh2d(4, 4), cpn=2)
    res = solve_verified(p, seed=3, restarts=3)
    st_ = res.stats
    assert st_["restarts_run"] == 3 and len(st_["makespans_us"]) == 3
    assert st_["best_seed"] == int(restart_seeds(3, 3)[st_["best_restart"]])
    assert min(st_["makespans_us"]) == res.objective_us
    # an All-Gather needs exactly one delivery per (NPU, chunk) the NPU does not own
    s = res.schedule
    assert len(s) == (p.num_npus - 1) * p.num_chunks == st_["transfers"]
    key = s.dst.astype(np.int64) * p.num_chunks + s.chunk
    assert len(np.unique(key)) == len(s)
    assert np.all(s.dst != s.chunk % p.num_npus)
    assert st_["events"] > 0 and st_["wasted_transfers"] == 0


# ---------------------------------------------------------------------------- the reference's own expectations
@pytest.mark.parametrize("topo, cpn, gib, expected_us", [
    (mesh2d(5, 5), 1, 1, 9606.0),
    (torus3d(3, 3, 3), 1, 1, 3706.20),
    (mesh3d(3, 4, 5), 2, 2, 13353.33),
])
def test_cpp_regression_expectations(topo, cpn, gib, expected_us):
    # default (TACOS) options, one run: at most the C++ reference's best of 20 random runs (given to 0.01 µs)
    res = solve_verified(ag(topo, cpn, 1024.0 * gib), seed=0)
    assert res.objective_us <= expected_us + 0.01


# ---------------------------------------------------------------------------- the ingress step bound
@pytest.mark.parametrize("topo, opts", [
    (mesh2d(8, 8), {}),
    (torus3d(4, 4, 4), {}),
    (mesh3d(4, 4, 4), {}),
    (hypercube(64), {}),
    (hypercube(16), TIGHT),
    (hypercube(64), TIGHT),
    (torus3d(4, 4, 4), TIGHT),
    (mesh2d(8, 8), TIGHT),
    (torus2d(4, 4), TIGHT),
    (torus2d(8, 8), TIGHT),
    (torus2d(5, 7), TIGHT),
])
def test_reaches_ingress_step_bound(topo, opts):
    p = ag(topo)
    bound = lower_bounds(p)["ingress_steps"]
    res = solve_verified(p, seed=0, restarts=3, **opts)
    assert steps(p, res) == bound


def test_ingress_bound_by_hand():
    # independent of tacos_bench.bounds: corner of an 8x8 mesh gets 63 chunks over 2 links -> 32 steps;
    # a 4x4 torus node gets 15 chunks over 4 links -> 4 steps
    assert steps(ag(mesh2d(8, 8)), solve_verified(ag(mesh2d(8, 8)))) == 32
    assert steps(ag(torus2d(4, 4)), solve_verified(ag(torus2d(4, 4)), **TIGHT, restarts=3)) == 4


def test_default_random_order_loses_a_step_on_2d_torus_like_the_reference():
    # documents why TIGHT exists: the TACOS rule (random, maximal matching) misses the bound on 2-D tori
    p = ag(torus2d(8, 8))
    assert min(steps(p, solve_verified(p, seed=s)) for s in range(3)) == 17


# ---------------------------------------------------------------------------- determinism and restarts
def test_same_seed_gives_byte_identical_csv(tmp_path):
    p = ag(grid([4, 4], wrap=False, bw=[50.0, 100.0]))
    for opts in ({}, dict(chunk_order="rarest", link_tiebreak="random", matching="maximum", duplicates=True,
                          preempt=True, restarts=3)):
        a = solve_verified(p, seed=11, **opts).schedule.to_csv(tmp_path / "a.csv").read_bytes()
        b = solve_verified(p, seed=11, **opts).schedule.to_csv(tmp_path / "b.csv").read_bytes()
        assert a == b


def test_different_seeds_explore_different_schedules(tmp_path):
    p = ag(torus2d(4, 4))
    csvs = {solve_verified(p, seed=s).schedule.to_csv(tmp_path / f"{s}.csv").read_bytes() for s in range(4)}
    assert len(csvs) > 1


def test_restarts_never_worse_and_prefix_stable():
    p = ag(torus2d(6, 6))
    one = solve_verified(p, seed=5)
    many = solve_verified(p, seed=5, restarts=6)
    assert many.objective_us <= one.objective_us
    assert many.stats["makespans_us"][0] == one.objective_us
    assert restart_seeds(5, 6)[:1].tolist() == restart_seeds(5, 1).tolist()


def test_time_limit_stops_restarts():
    p = ag(mesh2d(6, 6))
    res = solve_verified(p, seed=0, restarts=100000, time_limit_s=0.2)
    assert 1 <= res.stats["restarts_run"] < 100000
    assert "time limit" in res.message


# ---------------------------------------------------------------------------- heterogeneous links and duplicates
HETERO_MESH = grid([8, 8], wrap=False, bw=[50.0, 100.0])


def test_hetero_mesh_is_causal_and_matches_reference_time():
    # the C++ reference reports 6583.5 µs here from a non-causal schedule; ours verifies at the same time
    res = solve_verified(ag(HETERO_MESH), seed=0)
    assert res.objective_us == pytest.approx(6583.5)


def test_duplicates_waste_slow_copies_and_preempt_withdraws_them():
    p = ag(HETERO_MESH)
    dup = solve_verified(p, seed=0, duplicates=True)
    assert dup.stats["wasted_transfers"] > 0 and dup.stats["wasted_link_time_us"] > 0
    pre = solve_verified(p, seed=0, duplicates=True, preempt=True)
    assert pre.stats["cancelled_transfers"] > 0 and pre.stats["wasted_transfers"] == 0
    for res in (dup, pre):  # only first arrivals are reported
        assert len(res.schedule) == (p.num_npus - 1) * p.num_chunks
    assert pre.objective_us <= dup.objective_us


CLASSIC_ORDERS = [o for o in CHUNK_ORDERS if o != "local_rarest"]


@pytest.mark.parametrize("order", CLASSIC_ORDERS)
@pytest.mark.parametrize("tie", LINK_TIEBREAKS)
@pytest.mark.parametrize("matching", MATCHINGS)
@pytest.mark.parametrize("dup", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("window", [0, 2])
def test_every_option_combination_verifies(order, tie, matching, dup, window):
    topo = hetero_cluster(2, 2, 4)
    p = ag(topo, cpn=2, mib=64)
    solve_verified(p, seed=1, chunk_order=order, link_tiebreak=tie, matching=matching,
                   duplicates=dup[0], preempt=dup[1], window=window)


@pytest.mark.parametrize("topo, opts", [(mesh2d(16, 16), {}), (torus3d(4, 4, 4), TIGHT), (torus3d(8, 8, 4), TIGHT)],
                         ids=lambda x: getattr(x, "name", ""))
def test_window_keeps_the_ingress_bound(topo, opts):
    # the scalable mode: each link offers only its 4 earliest-arrived candidates
    p = ag(topo)
    full = solve_verified(p, seed=0, **opts)
    win = solve_verified(p, seed=0, window=4, **opts)
    assert steps(p, win) == steps(p, full) == lower_bounds(p)["ingress_steps"]
    assert win.stats["candidates"] < full.stats["candidates"]


def test_window_one_is_fifo_and_worse_on_meshes():
    # one candidate per link: two in-links offering the same chunk leave one idle
    p = ag(mesh2d(8, 8))
    assert steps(p, solve_verified(p, seed=0, window=1)) > 32


# ---------------------------------------------------------------------------- all collectives, odd topologies
ASYM = Topology.from_edges(5, [(0, 1, 50, 0.5), (1, 2, 25, 1.0), (2, 3, 100, 0.2), (3, 4, 50, 0.5), (4, 0, 12.5, 2.0),
                               (2, 0, 50, 0.5), (4, 2, 200, 0.1), (1, 3, 10, 5.0)], name="asym5")


@pytest.mark.parametrize("topo", [mesh2d(3, 4), ASYM, ring(6, bidirectional=False),
                                  remove_npus(mesh2d(8, 8), [9, 27]), HETERO_MESH],
                         ids=lambda t: t.name)
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
def test_collectives_verify(topo, kind):
    p = ag(topo, cpn=2, mib=16, kind=kind)
    res = solve_verified(p, seed=2, restarts=2, duplicates=True)
    assert res.objective_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)
    if kind == "all_reduce":
        assert "rs_best_seed" in res.stats and "ag_best_seed" in res.stats


def test_single_npu_needs_nothing():
    p = ag(Topology(1, [], [], [], []), cpn=3)
    res = solve_verified(p)
    assert len(res.schedule) == 0 and res.objective_us == 0.0


def test_greedy_all_gather_rejects_other_collectives():
    with pytest.raises(SolverError, match="all_gather"):
        greedy_all_gather(ag(ring(3), kind="all_reduce"))


@st.composite
def random_problems(draw):
    n = draw(st.integers(2, 8))
    perm = draw(st.permutations(range(n)))
    pairs = {(perm[i], perm[(i + 1) % n]) for i in range(n)}  # a Hamiltonian cycle: strongly connected
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    pairs |= {(a, b) for a, b in extra if a != b}
    pairs = sorted(pairs)
    bws = draw(st.lists(st.sampled_from([12.5, 25.0, 50.0, 100.0, 150.0]), min_size=len(pairs), max_size=len(pairs)))
    lats = draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 2.0]), min_size=len(pairs), max_size=len(pairs)))
    topo = Topology.from_edges(n, [(a, b, w, l) for (a, b), w, l in zip(pairs, bws, lats)], name="random")
    kind = draw(st.sampled_from(["all_gather", "all_gather", "reduce_scatter", "all_reduce"]))
    cpn = draw(st.integers(1, 3))
    mib = draw(st.sampled_from([0.001, 1.0, 1024.0]))
    dup = draw(st.sampled_from([(False, False), (True, False), (True, True)]))
    if draw(st.booleans()):  # the classic kernel's options
        opts = dict(chunk_order=draw(st.sampled_from(CLASSIC_ORDERS)),
                    link_tiebreak=draw(st.sampled_from(LINK_TIEBREAKS)), matching=draw(st.sampled_from(MATCHINGS)),
                    duplicates=dup[0], preempt=dup[1], restarts=draw(st.integers(1, 2)),
                    window=draw(st.sampled_from([0, 0, 1, 3])))
    else:  # the topology-aware rules (solvers/greedy/_kernel_tiered.py)
        imports = draw(st.sampled_from(["all", "near", "group"]))
        opts = dict(chunk_order=draw(st.sampled_from(["random", "rarest", "local_rarest"])),
                    link_tiebreak=draw(st.sampled_from(LINK_TIEBREAKS)), imports=imports,
                    import_gate=draw(st.sampled_from([0.0, 0.5])) if imports == "near" else 0.0,
                    link_order=draw(st.sampled_from(["chunk_first", "fewest_first"])),
                    group_matching=draw(st.booleans()), restarts=draw(st.integers(1, 2)))
    return Problem(topo, Collective(kind, cpn, mib)), opts, draw(st.integers(0, 2**32))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_problems())
def test_random_strongly_connected_graphs_verify(case):
    p, opts, seed = case
    res = solve_verified(p, seed=seed, **opts)
    assert res.objective_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)
    if p.kind == "all_gather":
        assert len(res.schedule) == (p.num_npus - 1) * p.num_chunks


def test_schedule_roundtrips_through_csv(tmp_path):
    p = ag(torus2d(3, 3), cpn=2)
    s = solve_verified(p, seed=4).schedule
    back = Schedule.from_csv(s.to_csv(tmp_path / "s.csv"))
    assert verify(p, back).collective_time_us == s.makespan_us


@pytest.mark.parametrize("topo, cpn, expected_steps", [
    (mesh2d(8, 8), 2, 63), (mesh2d(8, 8), 8, 252), (mesh2d(4, 3), 3, 17),  # the C++ reference's rows = bounds
    (mesh2d(6, 6), 64, 1120),  # 2304 chunks: the candidate counts span two blocks of bitset words
])
def test_several_chunks_per_npu_reach_the_bound(topo, cpn, expected_steps):
    p = ag(topo, cpn=cpn)
    res = solve_verified(p, seed=0)
    assert steps(p, res) == expected_steps == lower_bounds(p)["ingress_steps"]


def test_docstring_examples():
    import doctest

    import solvers.greedy

    assert doctest.testmod(solvers.greedy).failed == 0


@pytest.mark.parametrize("opts", [{}, TIGHT, dict(duplicates=True, preempt=True), dict(window=3)])
def test_more_than_64_in_links(opts):
    # link masks span two words; a fully connected All-Gather needs exactly one step
    p = ag(fully_connected(70), mib=64)
    res = solve_verified(p, seed=0, **opts)
    assert steps(p, res) == 1
