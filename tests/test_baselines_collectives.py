"""Baselines of Broadcast, Reduce, Gather, Scatter and All-to-All (direct, pairwise, bruck, binomial, chain):
every schedule verified and at or above the lower bound, closed forms checked by hand, run_job smoke runs."""

import math

import numpy as np
import pytest

from solvers.plan import Router
from solvers.base import get_solver
from solvers.baselines.collectives import binomial_parents, binomial_tree, chain_order, direct_plan
from tacos_bench import Collective, Problem, Topology
from tacos_bench.bounds import lower_bounds
from tacos_bench.errors import SolverError
from tacos_bench.topology.generators import fully_connected, hetero_cluster, mesh2d, ring, torus2d
from tacos_bench.runner.pipeline import run_job
from tacos_bench.schedule import COPY, REDUCE
from tacos_bench.verify import verify

SUPPORT = {
    "direct": ("broadcast", "reduce", "gather", "scatter", "all_to_all"),
    "pairwise": ("all_to_all",),
    "bruck": ("all_to_all",),
    "binomial": ("broadcast", "reduce", "gather", "scatter"),
    "chain": ("broadcast", "reduce"),
}
# every option value of each baseline is exercised
VARIANTS = {
    "pairwise": ({"sync": True}, {"sync": False}),
    "bruck": ({"sync": True}, {"sync": False}),
    "binomial": ({"order": "distance"}, {"order": "rank"}),
}
NEW_KINDS = ("broadcast", "reduce", "gather", "scatter", "all_to_all")


def asym6() -> Topology:
    """Directed ring with a slower, higher-latency reverse direction and two one-way chords."""
    e = []
    for i in range(6):
        e.append((i, (i + 1) % 6, 50.0, 0.5))
        e.append(((i + 1) % 6, i, 10.0, 1.0))
    e += [(0, 3, 25.0, 0.7), (4, 1, 25.0, 0.7)]
    return Topology.from_edges(6, e, name="asym6")


TOPOLOGIES = {
    "ring5": lambda: ring(5),
    "mesh3x3": lambda: mesh2d(3, 3),
    "torus4x4": lambda: torus2d(4, 4),
    "hetero2x1x4": lambda: hetero_cluster(2, 1, 4),
    "asym6": asym6,
}
CASES = [(name, kind) for name, kinds in SUPPORT.items() for kind in kinds]


def t_of(p: Problem) -> float:
    lt = p.link_time_us
    assert np.ptp(lt) == 0
    return float(lt[0])


def steps(name, topo, kind, cpn=1, root=0, **opts) -> float:
    """Verified time of a baseline in link times (homogeneous topologies)."""
    p = Problem(topo, Collective(kind, cpn, 16, root=root))
    res = get_solver(name).solve(p, **opts)
    return verify(p, res.schedule).collective_time_us / t_of(p)


# --------------------------------------------------------------------------------------------- validity
def test_capabilities():
    for name, kinds in SUPPORT.items():
        s = get_solver(name)
        assert [k for k in NEW_KINDS if s.supports(k)] == list(kinds), name
    assert all(get_solver("direct").supports(k) for k in ("all_gather", "reduce_scatter", "all_reduce"))
    for name in ("pairwise", "bruck", "binomial", "chain"):
        assert not get_solver(name).supports("all_gather")


@pytest.mark.parametrize("topo_name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("name,kind", CASES)
def test_every_schedule_verifies_and_respects_the_bound(name, kind, topo_name):
    topo = TOPOLOGIES[topo_name]()
    roots = (0,) if kind == "all_to_all" else (0, topo.num_npus - 2)
    for root in roots:
        for cpn in (1, 3):
            p = Problem(topo, Collective(kind, cpn, 16, root=root))
            bound = lower_bounds(p)["best_us"]
            for opts in VARIANTS.get(name, ({},)):
                res = get_solver(name).solve(p, **opts)
                assert res.status == "feasible"
                v = verify(p, res.schedule)
                assert v.collective_time_us == pytest.approx(res.objective_us)
                assert res.objective_us >= bound * (1 - 1e-9), (opts, root, cpn)
                ops = res.schedule.op
                assert np.all(ops == (REDUCE if kind == "reduce" else COPY))


@pytest.mark.parametrize("name", ("direct", "binomial", "chain"))
def test_reduce_sends_each_partial_sum_once(name):
    # the mirrored Broadcast never re-sends a chunk to an NPU: every non-root NPU sends each chunk once
    for topo in (mesh2d(3, 3), asym6(), hetero_cluster(2, 1, 4)):
        p = Problem(topo, Collective("reduce", 2, 16, root=4))
        s = get_solver(name).solve(p).schedule
        key = s.src.astype(np.int64) * p.num_chunks + s.chunk
        assert len(np.unique(key)) == len(s) == (p.num_npus - 1) * p.num_chunks
        assert not np.any(s.src == 4)


@pytest.mark.parametrize("name,kind", CASES)
def test_deterministic_and_single_npu(name, kind):
    p = Problem(hetero_cluster(2, 1, 4), Collective(kind, 2, 16, root=5))
    a, b = get_solver(name).solve(p).schedule, get_solver(name).solve(p, seed=99).schedule
    for col in ("chunk", "src", "dst", "start_us", "end_us", "op"):
        assert np.array_equal(getattr(a, col), getattr(b, col))
    one = Problem(Topology.from_edges(1, []), Collective(kind, 2, 1))
    res = get_solver(name).solve(one)
    assert len(res.schedule) == 0 and res.objective_us == 0.0
    verify(one, res.schedule)


def test_unsupported_collective_and_bad_option():
    p = Problem(ring(4), Collective("all_gather", 1, 4))
    with pytest.raises(SolverError, match="'chain' does not support all_gather"):
        get_solver("chain").solve(p)
    with pytest.raises(SolverError, match="order"):
        get_solver("binomial").solve(p.with_collective("broadcast"), order="random")
    with pytest.raises(SolverError, match="direct_plan builds"):
        direct_plan(p)


# --------------------------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("n", (4, 7))
@pytest.mark.parametrize("cpn", (1, 3, 5))
@pytest.mark.parametrize("kind", ("broadcast", "reduce"))
def test_chain_on_a_unidirectional_ring_is_n_minus_1_plus_k_minus_1_link_times(n, cpn, kind):
    for root in (0, n - 2):
        assert steps("chain", ring(n, bidirectional=False), kind, cpn, root) == pytest.approx(n - 1 + cpn - 1)


@pytest.mark.parametrize("n", (2, 4, 5, 6, 7, 8, 16))
def test_binomial_broadcast_on_fully_connected_is_the_tree_depth(n):
    # links out of one NPU are independent, so each level costs one link time: the depth, max popcount(j < n),
    # which is ceil(log2 n) for a power of two
    depth = max(bin(j).count("1") for j in range(n))
    if n & (n - 1) == 0:
        assert depth == math.ceil(math.log2(n))
    for kind in ("broadcast", "reduce"):
        for root in (0, n - 1):
            assert steps("binomial", fully_connected(n), kind, 1, root) == pytest.approx(depth)
    # K chunks pipeline one link time apart down the deepest branch
    assert steps("binomial", fully_connected(n), "broadcast", 3) == pytest.approx(depth + 2)


@pytest.mark.parametrize("cpn", (1, 3))
def test_all_to_all_on_fully_connected_4(cpn):
    fc = fully_connected(4)
    # direct: every pair has its own link, K chunks each
    assert steps("direct", fc, "all_to_all", cpn) == pytest.approx(cpn)
    # pairwise: 3 rounds of K chunks; unsynchronised the rounds use disjoint links at once
    assert steps("pairwise", fc, "all_to_all", cpn, sync=True) == pytest.approx(3 * cpn)
    assert steps("pairwise", fc, "all_to_all", cpn, sync=False) == pytest.approx(cpn)
    # Bruck: 2 rounds of 2K chunks per link (offsets {1, 3} then {2, 3}); unsynchronised the offset-3 chunks
    # cross link i->i+1 first and follow the own offset-2 chunks on i->i+2 without a gap: 2K
    assert steps("bruck", fc, "all_to_all", cpn, sync=True) == pytest.approx(4 * cpn)
    assert steps("bruck", fc, "all_to_all", cpn, sync=False) == pytest.approx(2 * cpn)


@pytest.mark.parametrize("kind", ("gather", "scatter", "broadcast"))
def test_direct_rooted_on_fully_connected_is_k_link_times(kind):
    for root in (0, 3):
        assert steps("direct", fully_connected(5), kind, 3, root) == pytest.approx(3)


def test_binomial_gather_on_fully_connected_8():
    # the root's largest child forwards its whole subtree (4 chunks) over one link
    assert steps("binomial", fully_connected(8), "gather", 1, 2) == pytest.approx(4)
    assert steps("binomial", fully_connected(8), "scatter", 1, 2) == pytest.approx(4)


def test_direct_gather_on_a_unidirectional_ring():
    # every chunk rides the link into the root: N-1 chunks, the farthest starting N-2 hops away
    assert steps("direct", ring(6, bidirectional=False), "gather", 1, 0) == pytest.approx(5)


# --------------------------------------------------------------------------------------------- structures
@pytest.mark.parametrize("n", (1, 2, 5, 8, 13))
@pytest.mark.parametrize("order", ("distance", "rank"))
def test_binomial_tree_spans_from_the_root(n, order):
    topo = mesh2d(n, 1) if n > 1 else Topology.from_edges(1, [])
    root = n // 2
    edges = binomial_tree(Problem(topo, Collective("broadcast", 1, 4, root=root)), order)
    assert len(edges) == n - 1
    seen = {root}
    for p, ch in edges:  # parents before children, each NPU entered once
        assert p in seen and ch not in seen
        seen.add(ch)
    assert seen == set(range(n))
    par = binomial_parents(n)
    assert all(par[j] < j and bin(par[j]).count("1") == bin(j).count("1") - 1 for j in range(1, n))


def test_chain_order_visits_every_npu_nearest_first():
    p = Problem(ring(6), Collective("broadcast", 1, 4))
    router = Router(p.topology, p.link_time_us)
    assert chain_order(router, 2) == [2, 3, 4, 5, 0, 1]      # ties go forward round the ring
    p = Problem(mesh2d(3, 3), Collective("broadcast", 1, 4))
    order = chain_order(Router(p.topology, p.link_time_us), 4)
    assert order[0] == 4 and sorted(order) == list(range(9))


def test_bruck_relays_and_rounds():
    p = Problem(ring(8), Collective("all_to_all", 1, 16))
    res = get_solver("bruck").solve(p)
    assert res.stats["bruck_rounds"] == 3
    s = res.schedule
    # chunk 0 -> 7 (offset 7 = 1 + 2 + 4) goes 0 -> 1 -> 3 -> 7: relayed by the NPUs of the rounds
    mine = s.chunk == 7
    assert {1, 3, 7} <= set(s.dst[mine].tolist()) and {0, 1, 3} <= set(s.src[mine].tolist())
    # chunk 0 -> 1 (offset 1) moves in round 0 only, over its one link
    assert s.src[s.chunk == 1].tolist() == [0] and s.dst[s.chunk == 1].tolist() == [1]


# --------------------------------------------------------------------------------------------- run.py
@pytest.mark.parametrize("solver,kind", [("chain", "broadcast"), ("binomial", "reduce"), ("direct", "gather"),
                                         ("binomial", "scatter"), ("bruck", "all_to_all"),
                                         ("pairwise", "all_to_all")])
def test_run_job_smoke(tmp_path, solver, kind):
    cfg = {"solver": {"name": solver}, "topo": {"name": "m", "kind": "mesh", "dims": [2, 3]},
           "collective": {"kind": kind, "chunks_per_npu": 2, "buffer_mib": 1.0, "root": 1}, "seed": 0}
    rec = run_job(cfg, tmp_path)
    assert rec["error"] is None, rec["error"]
    assert rec["valid"] is True and rec["status"] in ("optimal", "feasible")
    assert rec["collective"] == kind and rec["solver"] == solver
    assert rec["collective_time_us"] >= rec["lower_bound_us"] * (1 - 1e-9)
    assert (tmp_path / "schedule.csv").exists()
