"""Baselines (ring, direct, rhd, dbt): every schedule verified, closed forms checked by hand."""

import numpy as np
import pytest

from solvers.plan import Plan, Router, send_path
from solvers.baselines._hamilton import find_hamiltonian_cycle, grid_cycle, is_cycle
from solvers.base import get_solver
from solvers.baselines.classic import (DoubleBinaryTreeSolver, RecursiveHalvingDoublingSolver, RingSolver,
                               double_binary_tree, nccl_btree_parents, rhd_groups, ring_layout)
from tacos_bench import Collective, Problem, Topology
from tacos_bench.errors import SolverError
from tacos_bench.topology.generators import (fully_connected, grid, hetero_cluster, hypercube, mesh2d, ring, torus2d)
from tacos_bench.schedule import COPY, REDUCE
from tacos_bench.verify import verify

KINDS = ("all_gather", "reduce_scatter", "all_reduce")
SOLVERS = ("ring", "direct", "rhd", "dbt")


def asym16() -> Topology:
    """Directed ring with a slower, higher-latency reverse direction plus one-way chords."""
    e = []
    for i in range(16):
        e.append((i, (i + 1) % 16, 50.0, 0.5))
        e.append(((i + 1) % 16, i, 10.0, 1.0))
    for i in range(0, 16, 4):
        e.append((i, (i + 8) % 16, 25.0, 0.7))
    return Topology.from_edges(16, e, name="asym16")


def star7() -> Topology:
    """Asymmetric star with two one-way side links: no Hamiltonian cycle, 7 NPUs (not a power of two)."""
    e = []
    for i in range(1, 7):
        e.append((0, i, 50.0, 0.5))
        e.append((i, 0, 20.0, 1.0))
    e += [(1, 2, 30.0, 0.5), (3, 4, 30.0, 0.5)]
    return Topology.from_edges(7, e, name="star7")


TOPOLOGIES = {
    "ring8": lambda: ring(8),
    "mesh4x4": lambda: mesh2d(4, 4),
    "torus4x4": lambda: torus2d(4, 4),
    "hypercube16": lambda: hypercube(16),
    "hetero16": lambda: hetero_cluster(2, 2, 4),   # 4 servers of 4 NPUs: 150 GiB/s inside, 25 GiB/s across
    "asym16": asym16,
    "mesh3x3": lambda: mesh2d(3, 3),               # no Hamiltonian cycle, N not a power of two
    "star7": star7,
}


def t_of(p: Problem) -> float:
    lt = p.link_time_us
    assert np.ptp(lt) == 0
    return float(lt[0])


def solve(name, topo, kind, cpn=1, buffer_mib=16, overlap=True, **opts):
    p = Problem(topo, Collective(kind, cpn, buffer_mib, overlap=overlap))
    res = get_solver(name).solve(p, **opts)
    return p, res


# --------------------------------------------------------------------------------------------- validity
SUPPORTED = [(name, kind) for name in SOLVERS for kind in KINDS if get_solver(name).supports(kind)]


def test_capabilities():
    assert len(SUPPORTED) == 10
    assert not get_solver("dbt").supports("all_gather") and get_solver("dbt").supports("all_reduce")


@pytest.mark.parametrize("topo_name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("name,kind", SUPPORTED)
def test_every_baseline_verifies(name, kind, topo_name):
    for cpn in (1, 2):
        p, res = solve(name, TOPOLOGIES[topo_name](), kind, cpn)
        assert res.status == "feasible"
        v = verify(p, res.schedule)
        assert v.collective_time_us == pytest.approx(res.objective_us)
        assert res.objective_us == res.schedule.makespan_us > 0
        if kind != "all_gather":
            assert np.any(res.schedule.op == REDUCE)


@pytest.mark.parametrize("name", ("ring", "direct", "rhd"))
def test_reduce_scatter_sends_each_partial_sum_once(name):
    # the mirrored All-Gather never re-sends a chunk to an NPU, so no NPU sends a chunk twice
    for topo in (mesh2d(3, 3), asym16(), star7()):
        p, res = solve(name, topo, "reduce_scatter", 2)
        s = res.schedule
        key = s.src.astype(np.int64) * p.num_chunks + s.chunk
        assert len(np.unique(key)) == len(s)
        assert not np.any(s.src == s.chunk % p.num_npus)  # the owner only receives


@pytest.mark.parametrize("name", SOLVERS)
def test_deterministic(name):
    p, a = solve(name, hetero_cluster(2, 2, 4), "all_reduce", 2)
    _, b = solve(name, hetero_cluster(2, 2, 4), "all_reduce", 2, seed=123)
    for col in ("chunk", "src", "dst", "start_us", "end_us", "op"):
        assert np.array_equal(getattr(a.schedule, col), getattr(b.schedule, col))


@pytest.mark.parametrize("name", SOLVERS)
def test_single_npu_is_empty(name):
    p = Problem(Topology.from_edges(1, []), Collective("all_reduce", 1, 1))
    res = get_solver(name).solve(p)
    assert len(res.schedule) == 0 and res.objective_us == 0.0
    verify(p, res.schedule)


# --------------------------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("n", (4, 8))
def test_ring_all_gather_unidirectional_is_n_minus_1_link_times(n):
    p, res = solve("ring", ring(n, bidirectional=False), "all_gather")
    assert res.objective_us == pytest.approx((n - 1) * t_of(p), rel=1e-12)
    assert len(res.schedule) == n * (n - 1)
    # pipelined chunks: cpn chunks of 1/cpn the size, link never idle -> cpn*(N-1) smaller link times
    p3, res3 = solve("ring", ring(n, bidirectional=False), "all_gather", cpn=3, buffer_mib=12)
    assert res3.objective_us == pytest.approx(3 * (n - 1) * t_of(p3), rel=1e-12)


def test_ring_reduce_scatter_and_all_reduce_on_unidirectional_ring():
    p, rs = solve("ring", ring(8, bidirectional=False), "reduce_scatter")
    assert rs.objective_us == pytest.approx(7 * t_of(p))
    assert np.all(rs.schedule.op == REDUCE)
    p, ar = solve("ring", ring(8, bidirectional=False), "all_reduce")
    assert ar.objective_us == pytest.approx(14 * t_of(p))


@pytest.mark.parametrize("n,steps", [(8, 8), (7, 6), (9, 8)])
def test_ring_all_reduce_on_bidirectional_ring(n, steps):
    # each chunk travels ceil((N-1)/2) hops one way and floor((N-1)/2) the other: RS and AG take ceil((N-1)/2) each
    p, res = solve("ring", ring(n), "all_reduce")
    assert res.stats["ring_directions"] == 2 and res.stats["ring_embedding"] == "hamiltonian"
    assert res.objective_us == pytest.approx(steps * t_of(p))
    _, one_way = solve("ring", ring(n), "all_reduce", bidirectional=False)
    assert one_way.stats["ring_directions"] == 1
    assert one_way.objective_us == pytest.approx(2 * (n - 1) * t_of(p))


def test_rhd_all_gather_on_hypercube16_by_hand():
    # phase j: each NPU sends the 2**j chunks it holds to NPU xor 2**j over one link, back to back,
    # and the next phase waits for the exchange: 1 + 2 + 4 + 8 = 15 link times
    p, res = solve("rhd", hypercube(16), "all_gather")
    t = t_of(p)
    assert res.objective_us == pytest.approx(15 * t)
    assert res.stats["rhd_phases"] == 4 and res.stats["rhd_multi_hop_exchanges"] == 0
    s = res.schedule
    for j in range(4):
        d = 1 << j
        on_dim = (s.src ^ s.dst) == d
        assert on_dim.sum() == 16 * d                              # message sizes double
        lo, hi = (d - 1) * t, (2 * d - 1) * t                      # phase j's time window
        assert s.start_us[on_dim].min() == pytest.approx(lo)
        assert s.end_us[on_dim].max() == pytest.approx(hi)
        for u in range(16):
            assert np.sum(on_dim & (s.src == u)) == d


def test_rhd_reduce_scatter_all_reduce_and_dataflow_on_hypercube16():
    p, rs = solve("rhd", hypercube(16), "reduce_scatter")
    t = t_of(p)
    assert rs.objective_us == pytest.approx(15 * t)
    # recursive halving: the first phase sends half the data (8 chunks) across dimension 8
    first = rs.schedule.start_us < t * 0.5
    assert set(((rs.schedule.src ^ rs.schedule.dst)[first]).tolist()) == {8}
    # Rabenseifner with a barrier between the phases: 15 + 15 link times
    _, ar = solve("rhd", hypercube(16), "all_reduce", overlap=False)
    assert ar.objective_us == pytest.approx(30 * t)
    # overlapped, the All-Gather runs as dataflow (no phase barriers inside it): strictly faster, still valid
    po, aro = solve("rhd", hypercube(16), "all_reduce", overlap=True)
    assert 15 * t < aro.objective_us < 30 * t
    assert verify(po, aro.schedule).collective_time_us == pytest.approx(aro.objective_us)
    # without phase barriers a chunk moves on when it arrives: the dimension-8 link is busy 8 t from time 0
    _, flow = solve("rhd", hypercube(16), "all_gather", phase_sync=False)
    assert flow.objective_us == pytest.approx(8 * t)


def test_rhd_fold_in_layout_for_non_power_of_two():
    p2, core, extras, vowner = rhd_groups(12)
    assert p2 == 8 and extras == [0, 2, 4, 6] and len(core) == 8
    assert sorted(core + extras) == list(range(12))
    assert all(vowner[e] == vowner[e + 1] for e in extras)
    p, res = solve("rhd", fully_connected(6), "all_reduce")
    verify(p, res.schedule)
    assert res.stats["rhd_folded_npus"] == 2


def test_direct_closed_forms():
    # fully connected: every chunk goes straight to every NPU in parallel
    p, ag = solve("direct", fully_connected(5), "all_gather")
    assert ag.objective_us == pytest.approx(t_of(p))
    _, ar = solve("direct", fully_connected(5), "all_reduce")
    assert ar.objective_us == pytest.approx(2 * t_of(p))
    # unidirectional ring: each link carries 1 + 2 + ... + (N-1) chunk crossings and is never idle
    p, ag = solve("direct", ring(8, bidirectional=False), "all_gather")
    assert ag.objective_us == pytest.approx(28 * t_of(p))
    assert len(ag.schedule) == 8 * 28
    # its Reduce-Scatter combines partial sums along the in-tree (a path here): N-1 link times
    _, rs = solve("direct", ring(8, bidirectional=False), "reduce_scatter")
    assert rs.objective_us == pytest.approx(7 * t_of(p))


def test_dbt_on_fully_connected_4_by_hand():
    # trees 0<-2<-{1,3} and 3<-1<-{0,2}; chunks 0,2 on tree 0, 1,3 on tree 1. One chunk: reduce 2 hops +
    # broadcast 2 hops = 4 t; the second chunk of each tree follows one link time behind: 5 t.
    p, res = solve("dbt", fully_connected(4), "all_reduce")
    assert res.objective_us == pytest.approx(5 * t_of(p))
    assert len(res.schedule) == 4 * 2 * 3
    assert res.stats["dbt_tree0_multi_hop_edges"] == 0


def test_dbt_only_all_reduce():
    solver = DoubleBinaryTreeSolver()
    for kind in ("all_gather", "reduce_scatter"):
        with pytest.raises(SolverError, match="does not support"):
            solver.solve(Problem(ring(4), Collective(kind, 1, 4)))


# --------------------------------------------------------------------------------------------- ring layout
def test_ring_embedding_stats():
    p = Problem(mesh2d(4, 4), Collective("all_gather", 1, 16))
    lay = ring_layout(p)
    assert lay.hamiltonian and lay.method == "grid-snake" and is_cycle(p.topology, lay.order)
    _, res = solve("ring", mesh2d(3, 3), "all_gather")
    assert res.stats["ring_embedding"] == "multi-hop" and res.stats["ring_search"] == "none"
    assert res.stats["ring_max_hops"] >= 2
    # a capped search gives up and embeds multi-hop, still valid
    p, res = solve("ring", torus2d(3, 3), "all_reduce", max_expansions=0)
    assert res.stats["ring_search"] == "search-capped" and res.stats["ring_embedding"] == "multi-hop"
    verify(p, res.schedule)
    _, res = solve("ring", torus2d(3, 3), "all_reduce")
    assert res.stats["ring_search"] == "dfs" and res.stats["ring_embedding"] == "hamiltonian"


def test_ring_on_asymmetric_topology_uses_one_direction():
    _, res = solve("ring", star7(), "all_gather")
    assert res.stats["ring_embedding"] == "multi-hop" and res.stats["ring_directions"] == 1


@pytest.mark.parametrize("dims", [[4, 4], [3, 4], [5, 2], [3, 3, 2], [2, 2, 2], [4, 3, 3], [2, 2]])
def test_grid_cycle(dims):
    order = grid_cycle(dims)
    assert order is not None and is_cycle(grid(dims, wrap=False), order)


def test_no_cycle_in_odd_mesh_and_heterogeneous_preference():
    assert grid_cycle([3, 3]) is None
    assert find_hamiltonian_cycle(mesh2d(3, 5))[1] == "none"
    # a fast ring 0..5 plus slow chords: the cycle found must use only the fast links
    e = [(i, (i + 1) % 6, 100.0, 0.1) for i in range(6)]
    e += [(i, (i + 2) % 6, 1.0, 5.0) for i in range(6)] + [(i, (i + 3) % 6, 1.0, 5.0) for i in range(6)]
    t = Topology.from_edges(6, e)
    p = Problem(t, Collective("all_gather", 1, 1))
    order, how, _ = find_hamiltonian_cycle(t, p.link_time_us)
    lk = t.link_ids(order, np.roll(order, -1))
    assert np.all(t.bw_GiBps[lk] == 100.0)


# --------------------------------------------------------------------------------------------- trees
def test_nccl_double_binary_tree():
    assert nccl_btree_parents(8) == [-1, 2, 4, 2, 0, 6, 4, 6]
    for n in range(1, 70):
        trees = double_binary_tree(n)
        kids = []
        for parent in trees:
            assert sum(p < 0 for p in parent) == 1
            count = [0] * n
            for v, p in enumerate(parent):
                if p >= 0:
                    count[p] += 1
                x, hops = v, 0
                while parent[x] >= 0:
                    x, hops = parent[x], hops + 1
                    assert hops <= n
            assert max(count) <= 2
            kids.append(count)
        if n % 2 == 0:  # complementary: nobody is an inner node in both trees
            assert not any(a and b for a, b in zip(*kids))


# --------------------------------------------------------------------------------------------- engine
def test_engine_links_carry_one_chunk_at_a_time_fifo():
    p = Problem(ring(4, bidirectional=False), Collective("all_gather", 1, 4))
    t = t_of(p)
    plan = Plan(p.topology, p.link_time_us, p.num_chunks)
    lk = p.topology.link_id(0, 1)
    a = plan.transfer(0, lk, COPY)
    b = plan.transfer(0, lk, COPY)
    bar = plan.barrier([a, b])
    c = plan.transfer(0, p.topology.link_id(1, 2), COPY, [bar])
    s = plan.run()
    assert len(s) == 3
    assert plan.start[b] == pytest.approx(t) and plan.end[bar] == pytest.approx(2 * t)
    assert plan.start[c] == pytest.approx(2 * t)


def test_router_multi_hop_and_release():
    p = Problem(ring(6, bidirectional=False), Collective("all_gather", 1, 6))
    t = t_of(p)
    router = Router(p.topology, p.link_time_us)
    assert len(router.path(0, 3)) == 3 and router.path(2, 2) == []
    plan = Plan(p.topology, p.link_time_us, p.num_chunks)
    first = plan.transfer(0, router.path(0, 3)[0], COPY, release=2 * t)
    send_path(plan, 0, router.path(0, 3)[1:], COPY, first)
    s = plan.run()
    assert s.start_us.tolist() == pytest.approx([2 * t, 3 * t, 4 * t])


# --------------------------------------------------------------------------------------------- options
def test_options_are_checked():
    p = Problem(ring(4), Collective("all_gather", 1, 4))
    with pytest.raises(SolverError, match="no option"):
        RingSolver().solve(p, bogus=1)
    with pytest.raises(SolverError, match="bidirectional"):
        RingSolver().solve(p, bidirectional="maybe")
    with pytest.raises(SolverError, match="max_expansions"):
        RingSolver().solve(p, max_expansions=-1)
    with pytest.raises(SolverError, match="phase_sync"):
        RecursiveHalvingDoublingSolver().solve(p, phase_sync=2)
    with pytest.raises(SolverError, match="no option"):
        get_solver("direct").solve(p, bidirectional=True)
