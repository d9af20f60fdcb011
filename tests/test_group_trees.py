"""greedy_plus's group-tree All-Reduce on fabrics of switch groups (solvers/greedy/group_trees.py, docs/faults.md)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import get_solver
from solvers.greedy.fabric_solver import GroupTreesCandidate
from solvers.greedy.group_trees import group_layout, group_trees_all_reduce, search_roots, variants_for
from solvers.portfolio import RunContext, validate
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bound_us
from tacos_bench.errors import SolverError
from tacos_bench.faults import slowed_topology
from tacos_bench.topology.fabrics import rail_cluster
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import verify


def _nodes(nodes=3, gpus=4, slow=None):
    t = rail_cluster(nodes, gpus, nvlink_GiBps=400.0, nic_GiBps=50.0, nvswitch_multicast=True,
                     nvswitch_reduce=True)
    return slowed_topology({"slow_npus": slow}, t) if slow else t


def _node_at_half(nodes, gpus, node=0):
    return [[node * gpus + g, 0.5, "nics"] for g in range(gpus)]


@pytest.mark.parametrize("case", ["healthy two nodes", "slow node", "slow rails", "two nodes"])
@pytest.mark.parametrize("cpn", [1, 3])
def test_the_candidate_passes_the_validator(case, cpn):
    topo = {"healthy two nodes": lambda: _nodes(2, 4),
            "slow node": lambda: _nodes(4, 4, _node_at_half(4, 4, 1)),
            "slow rails": lambda: _nodes(3, 4, [[v, 0.5, "nics"] for v in (0, 4, 8)]),
            "two nodes": lambda: _nodes(2, 4, [[0, 0.25, "nics"]])}[case]()
    p = Problem(topo, Collective("all_reduce", cpn, 64.0))
    opts = get_solver("greedy_plus").options({"group_tree_search_work": 2048})   # a short search: ~10 schedules
    cand = GroupTreesCandidate()
    assert cand.switched_on(opts) is None
    assert cand.applies(p, RunContext(opts=opts)) is None
    assert validate(cand, p, opts, bound_us=lower_bound_us(p)) is not None
    variants = variants_for(p)
    assert len(variants) == (6 if case == "slow node" else 1)
    for variant in variants:
        assert verify(p, group_trees_all_reduce(p, **variant)).valid, variant


def test_a_slow_node_sends_and_receives_each_chunk_once():
    # the slow group's NICs carry every chunk once out and once in, where Reduce-Scatter then All-Gather
    # puts the owners' chunks through them in both phases
    p = Problem(_nodes(4, 4, _node_at_half(4, 4, 2)), Collective("all_reduce", 2, 64.0))
    s = group_trees_all_reduce(p)
    assert verify(p, s).valid
    src, dst = np.asarray(s.src) // 4, np.asarray(s.dst) // 4
    out, into = (src == 2) & (dst != 2), (dst == 2) & (src != 2)
    assert np.bincount(np.asarray(s.chunk)[out], minlength=p.num_chunks).tolist() == [1] * p.num_chunks
    assert np.bincount(np.asarray(s.chunk)[into], minlength=p.num_chunks).tolist() == [1] * p.num_chunks


@pytest.mark.parametrize("topo,kind,why", [
    (lambda: _nodes(), "all_gather", "All-Reduce only"),
    (lambda: named_topology("mesh4x4"), "all_reduce", "point-to-point"),
    (lambda: rail_cluster(2, 4), "all_reduce", "reduce and multicast"),
    (lambda: named_topology("switched8"), "all_reduce", "reduce and multicast"),
    (lambda: _nodes(3, 4), "all_reduce", "3 groups whose links out all run at one speed")])
def test_where_it_does_not_apply_it_says_why(topo, kind, why):
    p = Problem(topo(), Collective(kind, 1, 16.0))
    opts = get_solver("greedy_plus").options({})
    assert why in GroupTreesCandidate().applies(p, RunContext(opts=opts))
    if kind == "all_reduce" and "one speed" not in why:
        with pytest.raises(SolverError, match=why):
            group_trees_all_reduce(p)
    if "one speed" in why:   # the trees still run when asked: they are only not worth it there
        assert verify(p, group_trees_all_reduce(p)).valid


def test_budget_and_bad_priority():
    p = Problem(_nodes(2, 4), Collective("all_reduce", 4, 16.0))
    opts = get_solver("greedy_plus").options({"group_tree_max_pairs": 7})
    assert "group_tree_max_pairs" in GroupTreesCandidate().applies(p, RunContext(opts=opts))
    with pytest.raises(SolverError, match="priority"):
        group_trees_all_reduce(p, "fastest")
    with pytest.raises(SolverError, match="roots"):
        group_trees_all_reduce(p, roots="random")
    assert GroupTreesCandidate().switched_on(get_solver("greedy").options({})) is not None


def _slow_rails_16():
    # the 16-GPU two-tier cluster, four of eight rails at half speed from the start (docs/faults.md)
    t = named_topology("dgx_h100x2")
    assert group_layout(t)[1] == [list(range(8)), list(range(8, 16))]
    return slowed_topology({"slow_npus": [[v, 0.5, "nics"] for v in (0, 1, 2, 3, 8, 9, 10, 11)]}, t)


def test_slow_rails_from_the_start_all_reduce_within_ten_percent_of_the_bound():
    p = Problem(_slow_rails_16(), Collective("all_reduce", 2, 1024.0))
    r = get_solver("greedy_plus").solve(p)
    v = verify(p, r.schedule)
    assert v.valid, v.message
    assert r.candidate == "group_trees"
    assert v.collective_time_us <= 1.10 * lower_bound_us(p)
    # Reduce-Scatter then All-Gather (the candidate off) was 1.151x
    off = get_solver("greedy_plus").solve(p, {"group_tree_candidate": False})
    assert verify(p, off.schedule).collective_time_us > 1.04 * v.collective_time_us


def test_one_node_at_half_speed_within_ten_percent_of_the_bound():
    # the issue's case: dgx_h100x4, node 0's eight NICs at 50 %, All-Reduce 1 GiB. Reduce-Scatter then All-Gather
    # ends at the phase bounds' sum (9,121.6 µs, 1.386x the bound); the trees through the slow node with their
    # roots searched 7,105.6 µs (1.080x; 7,261.3 before the search), docs/faults.md
    t = slowed_topology({"slow_npus": [[g, 0.5, "nics"] for g in range(8)]}, named_topology("dgx_h100x4"))
    p = Problem(t, Collective("all_reduce", 1, 1024.0))
    r = get_solver("greedy_plus").solve(p)
    v = verify(p, r.schedule)
    assert v.valid, v.message
    assert r.candidate == "group_trees" and r.stats["group_trees_variant"].endswith("roots searched")
    phases = sum(lower_bound_us(Problem(t, Collective(k, 1, 1024.0))) for k in ("reduce_scatter", "all_gather"))
    assert v.collective_time_us <= 0.80 * phases
    assert v.collective_time_us <= 1.10 * lower_bound_us(p)


def test_the_root_search_only_keeps_what_is_faster():
    p = Problem(_nodes(4, 4, _node_at_half(4, 4, 0)), Collective("all_reduce", 1, 64.0))
    variant = {"priority": "blended", "roots": "chunk", "exports_first": True}
    start = group_trees_all_reduce(p, **variant)
    found, roots = search_roots(p, variant, 64)
    assert verify(p, found).valid
    assert verify(p, group_trees_all_reduce(p, priority="blended", roots=roots)).collective_time_us == \
        pytest.approx(found.makespan_us)
    assert found.makespan_us <= 0.95 * start.makespan_us      # 1.210x -> 1.126x the bound
    assert search_roots(p, variant, 1)[0].makespan_us == start.makespan_us
    with pytest.raises(SolverError, match="roots for"):
        group_trees_all_reduce(p, roots=[0, 1])


def test_two_healthy_nodes_beat_the_phase_bound_sum():
    # dgx_h100x2 All-Reduce: Reduce-Scatter then All-Gather is at its phase bounds' sum; the trees cross each
    # node's NICs once each way per chunk, 0.90-0.91x of it (docs/rails.md)
    t = named_topology("dgx_h100x2")
    p = Problem(t, Collective("all_reduce", 2, 1024.0))
    phases = sum(lower_bound_us(Problem(t, Collective(k, 2, 1024.0))) for k in ("reduce_scatter", "all_gather"))
    r = get_solver("greedy_plus").solve(p)
    v = verify(p, r.schedule)
    assert v.valid, v.message
    assert r.candidate == "group_trees"
    assert lower_bound_us(p) <= v.collective_time_us <= 0.92 * phases


@pytest.mark.parametrize("seed", [1, 2])
def test_relabelled_npus_get_the_same_schedule_up_to_labels(seed):
    # the positions are lined up by the rails, not by NPU ids: a relabelled cluster keeps the candidate
    from tacos_bench.topology.relabel import relabel_problem

    p = Problem(_nodes(4, 4, _node_at_half(4, 4, 2)), Collective("all_reduce", 2, 64.0))
    q = relabel_problem(p, np.random.default_rng(seed).permutation(16))
    opts = get_solver("greedy_plus").options({"group_tree_search_work": 2048})
    assert GroupTreesCandidate().applies(q, RunContext(opts=opts)) is None
    for variant in variants_for(p):
        a, b = group_trees_all_reduce(p, **variant), group_trees_all_reduce(q, **variant)
        assert verify(q, b).valid
        assert b.makespan_us == pytest.approx(a.makespan_us, rel=1e-12)
