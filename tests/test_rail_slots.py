"""Chunk tables on rail-optimized fabrics in NIC slots (candidate ``rail_slots`` of greedy_plus,
solvers/greedy/rail_tables.py): the matching decomposition, every schedule verified against its table, the NICs
no busier than the busiest rail port needs, and the candidate ahead of the multicast trees where the skew bites."""

import numpy as np
import pytest

from tacos_bench import Problem
from tacos_bench.bounds import lower_bound_us
from tacos_bench.collective import Collective
from tacos_bench.demand import all_to_allv, table
from tacos_bench.errors import SolverError
from tacos_bench.moe import combine_demand, dispatch_demand, moe_routing
from tacos_bench.runner import synthesize
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import verify

from solvers.greedy.rail_tables import matchings, rail_slots_table


@pytest.mark.parametrize("seed", range(6))
def test_the_matchings_cover_every_count_in_the_largest_degree(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 9))
    M = rng.integers(0, 6, (K, K))
    np.fill_diagonal(M, 0)
    out = matchings(M)
    D = max(M.sum(axis=0).max(), M.sum(axis=1).max())
    assert sum(w for _, w in out) == D
    cover = np.zeros_like(M)
    for perm, w in out:
        assert sorted(perm.tolist()) == list(range(K))     # one partner each: a matching of every port
        cover[np.arange(K), perm] += w
    assert np.all(cover >= M)


@pytest.mark.parametrize("topo", ["dgx_h100x2", "dgx_h100x4", "dgx_a100x4"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_tables_verified_and_each_chunk_crosses_to_a_node_once(topo, seed):
    t = named_topology(topo)
    n = t.num_npus
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, 60)
    dst = [sorted(rng.choice(np.delete(np.arange(n), s), size=int(rng.integers(1, 7)), replace=False).tolist())
           for s in src]
    p = Problem(t, Collective("custom", demand=table(n, 1 << 20, [[int(s)] for s in src], dst, ["copy"] * 60)))
    s = rail_slots_table(p)
    v = verify(p, s)
    assert v.valid, v.message
    # a row entering another node's GPU over its NIC: at most one per (chunk, node)
    node = np.asarray(s.dst) // 8
    cross = node != np.asarray(s.src) // 8
    pairs = list(zip(np.asarray(s.chunk)[cross].tolist(), node[cross].tolist()))
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize("gini", [0.1, 0.3, 0.4])
@pytest.mark.parametrize("kind", ["moe_dispatch", "moe_combine", "all_to_allv"])
def test_greedy_plus_near_the_bound_on_a_skewed_moe_layer(gini, kind):
    """dgx_h100x4, 16 tokens a GPU: 1.000-1.021x the best bound (the multicast trees alone: 1.009-1.329x)."""
    t = named_topology("dgx_h100x4")
    r = moe_routing(t.num_npus, tokens_per_npu=16, gini=gini, seed=0)
    d = {"moe_dispatch": dispatch_demand, "moe_combine": combine_demand}.get(kind)
    demand = d(r) if d else all_to_allv(dispatch_demand(r).pair_bytes(), None, 1)
    out = synthesize(t, Collective(kind, demand=demand), solver="greedy_plus", bounds=True)
    assert out.valid
    assert out.collective_time_us <= 1.03 * out.record["lower_bound_us"]


def test_the_candidate_says_why_it_does_not_apply():
    t = named_topology("leafspine2x4_2to1")
    r = moe_routing(t.num_npus, tokens_per_npu=4, gini=0.1, seed=0)
    p = Problem(t, Collective("moe_dispatch", demand=dispatch_demand(r)))
    with pytest.raises(SolverError, match="rail slots"):
        rail_slots_table(p)
    out = synthesize(t, p.collective, solver="greedy_plus")
    assert out.valid and '"rail_slots", "reason": "rail slots: ' in out.record["candidates_skipped"]
    ag = synthesize(named_topology("dgx_h100x2"), "all_gather", solver="greedy_plus")
    assert '"rail_slots", "reason": "chunk tables only' in ag.record["candidates_skipped"]
    late = Problem(named_topology("dgx_h100x2"), Collective("moe_dispatch", demand=dispatch_demand(
        moe_routing(16, tokens_per_npu=4, seed=0))))
    with pytest.raises(SolverError, match="empty start"):
        rail_slots_table(late, chunk_ready=np.ones(late.num_chunks))
    # the paper's greedy does not run it
    assert synthesize(late.topology, late.collective, solver="greedy").record.get("candidate") in (None, "rules")


def test_the_nics_carry_what_the_busiest_rail_port_needs():
    """The crossings take as many slots as the busiest rail port has crossings (König): the last NIC transfer
    ends by that many transfer times."""
    t = named_topology("dgx_h100x4")
    r = moe_routing(t.num_npus, tokens_per_npu=32, gini=0.3, seed=1)
    p = Problem(t, Collective("moe_dispatch", demand=dispatch_demand(r)))
    s = rail_slots_table(p)
    assert verify(p, s).valid
    leaf0, leaf1 = t.meta["fabric"]["switch_ranges"]["leaf"]
    nic = np.array([bool(r) and any(leaf0 <= int(x) < leaf1 for x in r.split(">")) for r in s.route.tolist()])
    ends = np.asarray(s.end_us)[nic]
    # the busiest NIC port, sending or receiving, in transfers: that many slots, back to back from 0
    deg = max(np.bincount(np.asarray(s.src)[nic]).max(), np.bincount(np.asarray(s.dst)[nic]).max())
    one = float(np.max(np.asarray(s.end_us)[nic] - np.asarray(s.start_us)[nic]))
    assert ends.max() <= deg * one * (1 + 1e-9)


def test_crossings_move_off_a_busy_rail_only_when_it_pays():
    """Half the crossings on rail 0 of 8: they move to rails with room until no port carries more than a node's
    NICs do on average (rounded up; one more where the moves run out of pairs of ports with room)."""
    from solvers.greedy.rail_tables import _balanced_rails

    rng = np.random.default_rng(0)
    ja, jb = rng.integers(0, 4, 400), rng.integers(0, 4, 400)
    keep = ja != jb
    ja, jb = ja[keep], jb[keep]
    jh = np.where(rng.random(ja.size) < 0.5, 0, rng.integers(0, 8, ja.size))     # rail 0 overloaded
    out = _balanced_rails(ja, jb, jh, 4, 8)
    def degree(h):
        return max(max(np.bincount(h * 4 + ja, minlength=32)), max(np.bincount(h * 4 + jb, minlength=32)))
    target = max(np.ceil(np.bincount(ja, minlength=4) / 8).max(), np.ceil(np.bincount(jb, minlength=4) / 8).max())
    assert degree(jh) > target + 1 and degree(out) <= target + 1
    moved = out != jh
    assert moved.any() and np.all(jh[moved] == 0)        # only crossings of the overloaded rail move
