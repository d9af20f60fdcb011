"""The continuous-time CP-SAT model (solvers/exact/continuous.py).

Every schedule passes the independent verifier; proven optima are hand-checked where the exact time unit
matters, never below the project's lower bounds, never worse than a hint; too-large models are refused in
one line; a model whose durations had to be rounded never claims optimality for the problem.
"""

from fractions import Fraction

import pytest

from solvers import get_solver
from solvers.exact.continuous import (
    _instance,
    drain_bound_units,
    predict_size,
    solve_continuous,
    time_base,
)
from tacos_bench import Collective, Problem, Topology
from tacos_bench.bounds import lower_bound_us
from tacos_bench.errors import SolverError
from tacos_bench.generators import hetero_cluster, ring
from tacos_bench.schedule import Schedule
from tacos_bench.topologies import named_topology
from tacos_bench.verify import check

COPY_KINDS = ("all_gather", "broadcast", "gather", "scatter", "all_to_all")
TL = 20.0


def _valid(p, o):
    assert o.schedule is not None
    v = check(p, o.schedule)
    assert v.valid, v.message
    assert v.collective_time_us == pytest.approx(o.objective_us, rel=1e-12)
    return v


def two_servers(per_server=2):
    """Servers of ``per_server`` GPUs at 150 GiB/s 1 µs, one 25 GiB/s 5 µs rail per GPU to the other server."""
    return hetero_cluster(2, 1, per_server, intra_bw=150.0, intra_lat=1.0, inter_bw=25.0, inter_lat=5.0)


@pytest.mark.parametrize("topo", ["ring4", "hetero2x1x2"])
@pytest.mark.parametrize("kind", COPY_KINDS)
def test_every_copy_collective_is_solved_verified_and_proved(topo, kind):
    p = Problem(named_topology(topo), Collective(kind, 1, 1, root=1))
    o = solve_continuous(p, time_limit_s=TL, skip_search_at_bound=False)
    _valid(p, o)
    assert o.native_status == "OPTIMAL" and o.exact_time and o.proved_optimal
    assert o.best_bound_us == pytest.approx(o.objective_us, rel=1e-12)
    assert o.objective_us >= lower_bound_us(p) * (1 - 1e-9)
    assert o.stats["intervals"] <= predict_size(p)


def test_ring4_all_gather_takes_two_link_times():
    p = Problem(ring(4), Collective("all_gather", 1, 1024))
    o = solve_continuous(p, time_limit_s=TL, skip_search_at_bound=False)
    _valid(p, o)
    assert o.proved_optimal
    assert o.objective_us == pytest.approx(2 * float(p.link_time_us[0]), rel=1e-12)


def test_two_link_speeds_use_an_exact_unit():
    # 2 x 2 GPUs, 1 GiB: inside 1 + 2^28 / (150 * 2^30 / 1e6) = 5003/3 µs, rails 10005 µs. NPU 0 gets
    # NPU 3's chunk no sooner than over a rail then inside (the rail into 0 is busy with NPU 2's chunk):
    # 10005 + 5003/3 = 35018/3 µs, the optimum. A TEN step of 5003/3 µs would round the rail up to 6 steps.
    p = Problem(two_servers(2), Collective("all_gather", 1, 1024))
    tb = time_base(p)
    assert tb.exact and tb.unit_us == Fraction(1, 3) and sorted(set(tb.durations)) == [5003, 30015]
    o = solve_continuous(p, time_limit_s=TL, skip_search_at_bound=False)
    _valid(p, o)
    assert o.proved_optimal and o.time_unit == Fraction(1, 3)
    assert o.objective_us == pytest.approx(35018 / 3, rel=1e-12)


def test_two_server_cluster_four_chunks_meets_the_drain_bound_cold():
    # the cluster: greedy_plus 5229.333 µs = the drain bound
    p = Problem(two_servers(4), Collective("all_gather", 4, 1024))
    o = solve_continuous(p, time_limit_s=TL)
    _valid(p, o)
    assert o.proved_optimal and o.solution_source != "hint"
    assert o.objective_us == pytest.approx(5229.0 + 1 / 3, rel=1e-9)


def test_drain_cut_proves_what_the_float_bounds_miss():
    # hetero2x2x4, 1 MiB, 2 chunks: the cut bound is 9.662 µs (3 rail transfers); the drain argument at
    # a = T rules out everything below 3 rail + 2 inside transfers (tacos_bench.bounds and the model agree)
    p = Problem(named_topology("hetero2x2x4"), Collective("all_gather", 2, 1))
    o = solve_continuous(p, time_limit_s=TL)
    _valid(p, o)
    rail, inside = sorted({float(t) for t in p.link_time_us})[::-1]
    assert o.best_bound_us == pytest.approx(3 * rail + 2 * inside, rel=1e-9)
    assert o.best_bound_us == pytest.approx(lower_bound_us(p), rel=1e-9)
    assert o.proved_optimal and o.objective_us == pytest.approx(o.best_bound_us, rel=1e-12)


@pytest.mark.parametrize("name,kind,k", [("unequal2-3", "all_gather", 3), ("hetero2x1x3", "all_gather", 2),
                                         ("hetero2x1x2", "broadcast", 3)])
def test_drain_bound_never_exceeds_an_optimum_proved_without_it(name, kind, k):
    p = Problem(named_topology(name), Collective(kind, k, 1))
    o = solve_continuous(p, time_limit_s=TL, cuts=["bound", "linkload", "symmetry"], skip_search_at_bound=False)
    _valid(p, o)
    assert o.native_status == "OPTIMAL" and o.proved_optimal
    tb = time_base(p, 0.0)
    opt_units = round(o.objective_us / float(tb.unit_us))
    assert drain_bound_units(_instance(p, tb.durations), 0, 2 * opt_units, max_checks=10**6) <= opt_units


def test_proved_optima_never_below_the_project_bound():
    for name, kind, k in (("hetero2x1x2", "all_gather", 2), ("random8d2s5", "broadcast", 4),
                          ("random8d2s2", "gather", 1), ("torus3x3", "all_gather", 1)):
        p = Problem(named_topology(name), Collective(kind, k, 1))
        o = solve_continuous(p, time_limit_s=TL, skip_search_at_bound=False)
        _valid(p, o)
        assert o.proved_optimal, (name, kind, o.native_status)
        assert o.objective_us >= lower_bound_us(p) * (1 - 1e-9)
        assert o.best_bound_us >= lower_bound_us(p) * (1 - 1e-9)


@pytest.mark.parametrize("limit", [0.0, 2.0])
def test_a_hint_never_gives_a_worse_result(limit):
    p = Problem(named_topology("hetero2x2x4"), Collective("all_gather", 1, 1))
    hint = get_solver("bfs").solve(p).schedule      # naive store-and-forward: far from optimal
    o = solve_continuous(p, time_limit_s=limit, hint=hint, skip_search_at_bound=False)
    _valid(p, o)
    assert o.objective_us <= hint.makespan_us * (1 + 1e-12)
    assert o.stats["hint_us"] == pytest.approx(hint.makespan_us)


def test_a_good_hint_is_kept_and_an_invalid_one_refused():
    p = Problem(named_topology("random8d2s2"), Collective("all_to_all", 1, 1))
    hint = get_solver("greedy_plus").solve(p).schedule
    o = solve_continuous(p, time_limit_s=0.0, hint=hint, skip_search_at_bound=False)
    _valid(p, o)
    assert o.objective_us <= hint.makespan_us * (1 + 1e-12)
    bad = Schedule(hint.chunk[1:], hint.src[1:], hint.dst[1:], hint.start_us[1:], hint.end_us[1:], hint.op[1:])
    with pytest.raises(SolverError, match="hint is not a valid schedule"):
        solve_continuous(p, time_limit_s=1.0, hint=bad)


def test_a_too_large_model_is_refused_in_one_line_with_the_estimate():
    p = Problem(named_topology("mesh4x4"), Collective("all_to_all", 1, 1))
    n = predict_size(p)
    assert n > 1000
    with pytest.raises(SolverError) as e:
        solve_continuous(p, max_intervals=1000)
    msg = str(e.value)
    assert "\n" not in msg and f"{n:,}" in msg and "1,000" in msg


def test_reducing_collectives_are_refused():
    with pytest.raises(SolverError, match="copy collectives"):
        solve_continuous(Problem(ring(4), Collective("reduce_scatter", 1, 1)))


def test_rounded_durations_are_never_called_optimal_for_the_problem():
    # bandwidths like 33.333333 and 47.123457 GiB/s need a unit of ~1e-17 µs: over 2^40 units, so 1 ns
    e = [(0, 1, 33.333333, 0.5), (1, 2, 47.123457, 0.5), (2, 3, 50, 0.5), (3, 0, 50, 0.5),
         (1, 0, 50, 0.5), (2, 1, 50, 0.5), (3, 2, 33.333333, 0.5), (0, 3, 50, 0.5)]
    p = Problem(Topology.from_edges(4, e), Collective("all_gather", 2, 1))
    for skip in (True, False):
        o = solve_continuous(p, time_limit_s=TL, skip_search_at_bound=skip)
        _valid(p, o)
        assert not o.exact_time and o.time_unit_us == pytest.approx(1e-3 * o.time_unit / Fraction(1, 1000))
        assert o.time_unit % Fraction(1, 1000) == 0
        assert o.native_status in ("OPTIMAL", "BOUND_MET", "FEASIBLE")
        assert not o.proved_optimal
        # the real schedule is re-timed with the real, shorter durations: never later than the rounded model
        assert o.objective_us <= o.stats["model_objective_units"] * o.time_unit_us * (1 + 1e-12)


def test_trace_and_progress_callback():
    p = Problem(named_topology("random8d2s2"), Collective("all_to_all", 1, 1))
    seen = []
    o = solve_continuous(p, time_limit_s=TL, skip_search_at_bound=False, on_progress=lambda *r: seen.append(r))
    _valid(p, o)
    assert o.trace and seen == o.trace
    times = [t for t, _, _ in o.trace]
    assert times == sorted(times)
    _, inc, bound = o.trace[-1]
    assert inc == pytest.approx(o.objective_us) and bound == pytest.approx(o.best_bound_us)
    assert {"intervals", "variables", "branches", "conflicts", "workers"} <= set(o.stats)
    assert o.stats["workers"] == 8 and o.search_time_s > 0 and o.build_time_s > 0


def test_bound_met_skips_the_search():
    p = Problem(ring(4), Collective("all_gather", 1, 1))
    o = solve_continuous(p, time_limit_s=TL)
    _valid(p, o)
    assert o.native_status == "BOUND_MET" and o.proved_optimal and o.search_time_s == 0.0
    assert o.solution_source == "list_schedule" and o.stats["intervals"] == 0


def test_single_npu_and_nothing_to_move():
    p = Problem(Topology.from_edges(1, []), Collective("all_gather", 1, 1))
    o = solve_continuous(p)
    assert o.native_status == "TRIVIAL" and len(o.schedule) == 0 and o.objective_us == 0.0
