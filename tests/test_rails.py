"""Rail-optimized clusters: greedy_plus's list-schedule candidate (solvers/list_schedule.py) and rail
decomposition (solvers/greedy/rails.py), docs/rails.md."""

from __future__ import annotations

import pytest

from solvers import get_solver
from solvers.fabric_routes import build_hops, shared_hops
from solvers.greedy.fabric_solver import ListCandidate
from solvers.list_schedule import RULES, applies, list_copy
from solvers.portfolio import RunContext, validate
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bound_us
from tacos_bench.errors import SolverError
from tacos_bench.topology.fabrics import rail_cluster
from tacos_bench.topology.generators import ring
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import verify


def _rails(nodes=3, gpus=4):
    # 3 nodes: the rails' NICs must send round a 3-cycle (the plain greedy ends 1.37x above the bound here)
    return rail_cluster(nodes, gpus, nvlink_GiBps=400.0, nic_GiBps=50.0)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
def test_greedy_plus_meets_the_bound_on_a_small_rail_cluster(kind):
    p = Problem(_rails(), Collective(kind, 1, 64.0))
    bound = lower_bound_us(p)
    plus = get_solver("greedy_plus")
    r = plus.solve(p, {"rails_candidate": False})
    v = verify(p, r.schedule)
    assert v.valid, v.message
    assert v.collective_time_us <= 1.01 * bound
    assert r.candidate == "list"
    without = plus.solve(p, {"list_candidate": False, "rails_candidate": False})
    assert verify(p, without.schedule).collective_time_us > 1.1 * bound


def test_all_reduce_meets_the_phase_bound_sum():
    t = _rails()
    p = Problem(t, Collective("all_reduce", 2, 64.0))
    phases = sum(lower_bound_us(Problem(t, Collective(k, 2, 64.0))) for k in ("reduce_scatter", "all_gather"))
    r = get_solver("greedy_plus").solve(p)
    v = verify(p, r.schedule)
    assert v.valid, v.message
    assert v.collective_time_us <= 1.01 * phases


@pytest.mark.parametrize("topo,kind", [("rails", "all_gather"), ("rails", "reduce_scatter"), ("rails", "all_reduce"),
                                       ("rails", "broadcast"), ("rails", "reduce"), ("switched8", "all_gather"),
                                       ("dgx_h100x2", "all_reduce")])
def test_the_list_candidate_passes_the_validator(topo, kind):
    t = _rails(2, 4) if topo == "rails" else named_topology(topo)
    p = Problem(t, Collective(kind, 2, 16.0, root=1))
    opts = get_solver("greedy_plus").options({})
    cand = ListCandidate()
    assert cand.switched_on(opts) is None
    with shared_hops():
        assert cand.applies(p, RunContext(opts=opts)) is None
        bound = lower_bound_us(p)
        assert validate(cand, p, opts, bound_us=bound) is not None


def test_every_rule_is_valid_on_point_to_point_links_and_from_a_start_state():
    import numpy as np

    p = Problem(ring(5), Collective("all_gather", 2, 4.0))
    bound = lower_bound_us(p)
    for rule in RULES:
        v = verify(p, list_copy(p, rule=rule))
        assert v.valid, (rule, v.message)
        assert v.collective_time_us >= bound * (1 - 1e-9)
    # a start state: links busy until 100 µs, chunks ready at 50 µs
    late = list_copy(p, link_free=np.full(p.num_links, 100.0), chunk_ready=np.full(p.num_chunks, 50.0))
    assert late.start_us.min() >= 100.0 - 1e-9
    assert late.makespan_us >= 100.0 + bound * (1 - 1e-9)


def test_what_it_refuses():
    g = Problem(_rails(2, 2), Collective("gather", 1, 4.0, root=0))
    assert "copies to every NPU" in applies(g)
    with pytest.raises(SolverError, match="list schedule"):
        list_copy(g)
    ag = Problem(_rails(2, 2), Collective("all_gather", 1, 4.0))
    with pytest.raises(SolverError, match="rule 'nope'"):
        list_copy(ag, rule="nope")
    r = get_solver("greedy_plus").solve(ag, {"list_max_work": 0})
    why = dict((s["name"], s["reason"]) for s in r.candidates_skipped)["list"]
    assert "list_max_work" in why
    r = get_solver("greedy_plus").solve(g)
    assert "copies to every NPU" in dict((s["name"], s["reason"]) for s in r.candidates_skipped)["list"]


def test_the_near_rule_leaves_no_duplicate_imports():
    # +near: a NIC never brings a chunk into a node that a node-mate holds or will hold
    p = Problem(named_topology("dgx_h100x3"), Collective("all_gather", 2, 64.0))
    s = list_copy(p, hops=build_hops(p.topology, p.chunk_bytes), rule="ring+near")
    assert verify(p, s).valid
    cross = (s.src // 8) != (s.dst // 8)
    pairs = list(zip((s.dst[cross] // 8).tolist(), s.chunk[cross].tolist()))
    assert len(pairs) == len(set(pairs)) == 3 * 16 * 2


# ------------------------------------------------------------------------------------------ rail decomposition
@pytest.mark.parametrize("nodes,gpus,cpn", [(3, 4, 1), (5, 4, 4), (6, 4, 1), (5, 8, 2)])
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
def test_the_rail_decomposition_meets_the_bound_and_wins_first(nodes, gpus, cpn, kind):
    """3, 5 and 6 nodes (3-, 5- and 6-cycles on every rail), 1-4 chunks per NPU, 1 GiB: at the bound, run
    first, and nothing after it."""
    p = Problem(rail_cluster(nodes, gpus, nvlink_GiBps=400.0, nic_GiBps=50.0), Collective(kind, cpn, 1024.0))
    r = get_solver("greedy_plus").solve(p)
    v = verify(p, r.schedule)
    assert v.valid, v.message
    assert v.collective_time_us <= lower_bound_us(p) * (1 + 1e-9)
    assert r.candidate == "rails" and [t["name"] for t in r.candidates_tried] == ["rails"]


def test_the_rail_decomposition_of_an_all_reduce_meets_the_phase_bound_sum():
    t = named_topology("dgx_h100x4")
    p = Problem(t, Collective("all_reduce", 2, 256.0))
    phases = sum(lower_bound_us(Problem(t, Collective(k, 2, 256.0))) for k in ("reduce_scatter", "all_gather"))
    from solvers.greedy.fabric_solver import RailsCandidate

    cand = RailsCandidate()
    opts = get_solver("greedy_plus").options({})
    with shared_hops():
        s = validate(cand, p, opts, bound_us=lower_bound_us(p))
    assert s is not None
    assert verify(p, s).collective_time_us <= phases * (1 + 1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_rail_layout_is_read_off_the_hops_whatever_the_labels(seed):
    from tacos_bench.topology.relabel import random_relabelling, relabel_problem

    base = Problem(_rails(3, 4), Collective("all_gather", 2, 64.0))
    perm = random_relabelling(base.topology, seed).meta["permutation"]
    p = relabel_problem(base, perm)
    r = get_solver("greedy_plus").solve(p)
    assert r.candidate == "rails"
    assert verify(p, r.schedule).collective_time_us <= lower_bound_us(p) * (1 + 1e-9)


@pytest.mark.parametrize("name,why", [("leafspine4x8", "do not form rails"), ("switched8", "one group"),
                                      ("dgx_h100x1", "one group")])
def test_the_rail_decomposition_says_why_it_does_not_apply(name, why):
    from solvers.greedy.rails import rail_layout, rails_all_gather

    p = Problem(named_topology(name), Collective("all_gather", 1, 64.0))
    lay = rail_layout(build_hops(p.topology, p.chunk_bytes), p.num_npus, p.topology.num_links)
    assert isinstance(lay, str) and why in lay
    with pytest.raises(SolverError, match=why):
        rails_all_gather(p)
    r = get_solver("greedy_plus").solve(p)
    assert why in dict((s["name"], s["reason"]) for s in r.candidates_skipped)["rails"]
    r = get_solver("greedy_plus").solve(Problem(_rails(), Collective("all_gather", 1, 64.0)),
                                        {"rails_min_pairs": 10**6})
    assert "rails_min_pairs" in dict((s["name"], s["reason"]) for s in r.candidates_skipped)["rails"]


def test_identical_rails_are_solved_once():
    """The 8 rails of dgx_h100x4 share their links' speeds and start state: one rail problem is solved and
    relabelled onto the others (and the groups likewise)."""
    from unittest import mock

    from solvers.greedy import fabric, rails
    from solvers import list_schedule

    p = Problem(named_topology("dgx_h100x4"), Collective("all_gather", 1, 64.0))
    with mock.patch.object(fabric, "fabric_copy", wraps=fabric.fabric_copy) as fc, \
            mock.patch.object(list_schedule, "list_copy", wraps=list_schedule.list_copy) as lc:
        s = rails.rails_all_gather(p)
    assert fc.call_count == 1 and lc.call_count <= 4
    assert verify(p, s).collective_time_us <= lower_bound_us(p) * (1 + 1e-9)
