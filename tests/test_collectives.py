"""Every collective: the model (tacos_bench.collective, Problem's root check), the greedy and greedy_plus on every
kind, closed forms, and the lower bounds of the new kinds against every backend's verified schedules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from solvers import available_solvers, get_solver
from tacos_bench import Collective, Problem, Topology
from tacos_bench.bounds import _pipeline_bound, lower_bounds, start_slots
from tacos_bench.collective import (COPY_KINDS, KINDS, MULTICAST_KINDS, REDUCE_KINDS, ROOTED_KINDS, UNICAST_KINDS,
                                    canonical_kind)
from tacos_bench.errors import CollectiveError, SolverError, TacosError
from tacos_bench.topology.generators import fully_connected, hetero_cluster, mesh2d, ring, torus2d
from tacos_bench.verify import verify

MIB = 2**20
NEW_KINDS = ("broadcast", "reduce", "gather", "scatter", "all_to_all")


def random_topology(rng: np.random.Generator, n: int, hetero: bool = True) -> Topology:
    """Strongly connected and (almost always) asymmetric: a random Hamiltonian cycle plus random one-way links."""
    perm = rng.permutation(n)
    pairs = {(int(perm[i]), int(perm[(i + 1) % n])) for i in range(n)}
    for _ in range(int(rng.integers(0, 2 * n))):
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b:
            pairs.add((a, b))
    pairs = sorted(pairs)
    if hetero:
        bw = rng.choice([1.0, 2.0, 4.0, 8.0], len(pairs))
        lat = rng.choice([0.0, 0.5, 30.0], len(pairs))
    else:
        bw, lat = np.full(len(pairs), 4.0), np.full(len(pairs), 0.5)
    return Topology.from_edges(n, [(a, b, float(w), float(x)) for (a, b), w, x in zip(pairs, bw, lat)],
                               name=f"rand{n}")


def star(n: int) -> Topology:
    """NPU 0 linked both ways to each of 1..n-1."""
    return Topology.from_edges(n, [(0, i, 50.0, 0.5) for i in range(1, n)] + [(i, 0, 50.0, 0.5) for i in range(1, n)],
                               name=f"star{n}")


def same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("chunk", "src", "dst", "start_us", "end_us",
                                                                       "op"))


# ---------------------------------------------------------------------------- the collective model
def expected(kind: str, n: int, k: int, root: int):
    """(num_chunks, sources, destinations) from the table in tacos_bench.collective's docstring, written out."""
    if kind in ("broadcast", "reduce"):
        C = k
    elif kind == "all_to_all":
        C = n * n * k
    else:
        C = n * k
    src, dst = [], []
    for c in range(C):
        src.append({"all_gather": c % n, "reduce_scatter": -1, "all_reduce": -1, "broadcast": root, "reduce": -1,
                    "gather": c % n, "scatter": root, "all_to_all": (c // k) // n}[kind])
        dst.append({"all_gather": -1, "reduce_scatter": c % n, "all_reduce": -1, "broadcast": -1, "reduce": root,
                    "gather": root, "scatter": c % n, "all_to_all": (c // k) % n}[kind])
    return C, src, dst


@pytest.mark.parametrize("kind", KINDS)
def test_table_of_sources_destinations_and_sizes(kind):
    n, k, root = 4, 2, 1
    size = 1 + 3 / MIB                          # 1048579 bytes: the floors below are not exact divisions
    c = Collective(kind, k, size, root=root)
    assert c.buffer_bytes == 1048579
    C, src, dst = expected(kind, n, k, root)
    assert c.num_chunks(n) == C
    per = n * k if kind == "all_to_all" else C  # all_to_all: B is one NPU's send buffer, N K chunks of it
    assert c.chunk_bytes(n) == 1048579 // per
    assert c.sources(n).tolist() == src and c.destinations(n).tolist() == dst
    assert [int(c.source_of(x, n)) for x in range(C)] == src
    assert [int(c.destination_of(x, n)) for x in range(C)] == dst
    full = (1 << n) - 1
    for v, x in itertools.product(range(n), range(C)):
        want = (1 << v) if c.reduces else (full if src[x] == v else 0)
        assert c.initial_state(v, x, n) == want
        assert c.required_state(v, x, n) == (None if dst[x] >= 0 and dst[x] != v else full)
    p = Problem(ring(n), c)
    assert p.num_chunks == C and p.sources.tolist() == src and p.destinations.tolist() == dst
    assert p.chunk_bytes == c.chunk_bytes(n)
    with pytest.raises(ValueError):
        p.sources[0] = 3   # read-only


def test_classes_of_collectives():
    for kind in KINDS:
        c = Collective(kind)
        assert c.reduces == (kind in REDUCE_KINDS) and c.copies == (kind in COPY_KINDS)
        assert c.reduces != c.copies
        assert c.multicast == (kind in MULTICAST_KINDS) and c.unicast == (kind in UNICAST_KINDS)
        assert c.rooted == (kind in ROOTED_KINDS)
    assert set(COPY_KINDS) == {"all_gather", "broadcast", "gather", "scatter", "all_to_all"}
    assert set(MULTICAST_KINDS) | set(UNICAST_KINDS) == set(COPY_KINDS)
    assert set(ROOTED_KINDS) == {"broadcast", "reduce", "gather", "scatter"}


def test_mirror():
    assert Collective("reduce_scatter", 3, 8).mirror() == Collective("all_gather", 3, 8)
    m = Collective("reduce", 2, 8, root=3).mirror()
    assert (m.kind, m.root, m.chunks_per_npu, m.buffer_mib) == ("broadcast", 3, 2, 8.0)
    for kind in ("all_gather", "all_reduce", "broadcast", "gather", "scatter", "all_to_all"):
        with pytest.raises(CollectiveError, match="no single-phase mirror"):
            Collective(kind).mirror()
    topo = random_topology(np.random.default_rng(4), 5)
    p = Problem(topo, Collective("reduce", 2, 8, root=3))
    mp = p.mirror()
    assert mp.kind == "broadcast" and mp.collective.root == 3
    assert sorted(zip(mp.topology.src.tolist(), mp.topology.dst.tolist())) == sorted(
        zip(topo.dst.tolist(), topo.src.tolist()))


@pytest.mark.parametrize("alias,kind", [
    ("AllGather", "all_gather"), ("all-gather", "all_gather"), ("ag", "all_gather"),
    ("ReduceScatter", "reduce_scatter"), ("rs", "reduce_scatter"), ("AR", "all_reduce"),
    ("all-reduce", "all_reduce"), ("bcast", "broadcast"), ("Broadcast", "broadcast"), (" reduce ", "reduce"),
    ("GATHER", "gather"), ("scatter", "scatter"), ("alltoall", "all_to_all"), ("all-to-all", "all_to_all"),
    ("a2a", "all_to_all"), ("All_To_All", "all_to_all"),
])
def test_aliases(alias, kind):
    assert canonical_kind(alias) == kind
    assert Collective(alias).kind == kind


@pytest.mark.parametrize("name", ["allgatherv", "", "reduce scatter", "bcast2"])
def test_unknown_collective_is_one_line(name):
    with pytest.raises(CollectiveError) as e:
        Collective(name)
    msg = str(e.value)
    assert "\n" not in msg and f"unknown collective {name!r}" in msg and all(k in msg for k in KINDS)


def test_a_chunk_table_kind_needs_its_table():
    with pytest.raises(CollectiveError, match="needs its chunk table"):
        Collective("alltoallv")


@pytest.mark.parametrize("kwargs,needle", [
    ({"chunks_per_npu": 0}, "chunks_per_npu"), ({"chunks_per_npu": -2}, "chunks_per_npu"),
    ({"chunks_per_npu": True}, "chunks_per_npu"), ({"chunks_per_npu": 1.5}, "chunks_per_npu"),
    ({"buffer_mib": 0}, "buffer_mib"), ({"buffer_mib": -1}, "buffer_mib"), ({"buffer_mib": float("nan")}, "buffer_mib"),
    ({"buffer_mib": float("inf")}, "buffer_mib"), ({"buffer_mib": "lots"}, "buffer_mib"),
    ({"buffer_mib": 2.0**60}, "buffer_mib"),
    ({"root": -1}, "root"), ({"root": True}, "root"), ({"root": 1.5}, "root"), ({"root": "0"}, "root"),
    ({"overlap": "yes"}, "overlap"),
])
def test_collective_errors(kwargs, needle):
    with pytest.raises(CollectiveError, match=needle):
        Collective("broadcast", **kwargs)


def test_numpy_scalars_are_accepted():
    c = Collective("scatter", np.int64(3), np.float32(8), root=np.int32(2))
    assert (c.chunks_per_npu, c.buffer_mib, c.root) == (3, 8.0, 2)
    assert type(c.chunks_per_npu) is int and type(c.root) is int


def test_problem_root_validation():
    topo = ring(4)
    for kind in ROOTED_KINDS:
        with pytest.raises(CollectiveError, match="collective.root=4 is out of range") as e:
            Problem(topo, Collective(kind, root=4))
        assert "0..3" in str(e.value) and "\n" not in str(e.value)
        assert Problem(topo, Collective(kind, root=3)).collective.root == 3
    for kind in set(KINDS) - set(ROOTED_KINDS):   # the root means nothing there
        assert Problem(topo, Collective(kind, root=9)).num_chunks > 0


def test_problem_chunk_too_small_for_all_to_all():
    with pytest.raises(CollectiveError, match="too small"):
        Problem(ring(4), Collective("all_to_all", 1, 3 / MIB))        # 3 bytes over 4 chunks of a send buffer
    assert Problem(ring(4), Collective("all_to_all", 1, 4 / MIB)).chunk_bytes == 1


# ---------------------------------------------------------------------------- the greedy on every collective
TOPOS = {
    "ring5": lambda: ring(5),
    "mesh3x3": lambda: mesh2d(3, 3),
    "torus4x4": lambda: torus2d(4, 4),
    "hetero2x1x4": lambda: hetero_cluster(2, 1, 4),
    "rand6": lambda: random_topology(np.random.default_rng(21), 6),
}
GREEDY_OPTIONS = [{}, {"routing": "adaptive"}, {"chunk_order": "farthest"}, {"route_passes": 0},
                  {"routing": "adaptive", "chunk_order": "farthest"}, {"route_passes": 4}]


@pytest.mark.parametrize("topo_name", list(TOPOS))
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_every_kind_verifies_above_the_bound(kind, topo_name):
    topo = TOPOS[topo_name]()
    roots = (0, topo.num_npus - 2) if kind in ROOTED_KINDS else (0,)
    for k, root in itertools.product((1, 3), roots):
        p = Problem(topo, Collective(kind, k, 16, root=root))
        lb = lower_bounds(p)["best_us"]
        assert lb > 0
        runs = [("greedy", o) for o in GREEDY_OPTIONS] + [("greedy_plus", {})]
        for name, opts in runs:
            res = get_solver(name).solve(p, seed=3, **opts)
            assert res.status in ("feasible", "optimal")
            T = verify(p, res.schedule).collective_time_us
            assert T >= lb * (1 - 1e-9), (name, opts, k, root)
            if opts in ({}, {"routing": "adaptive"}):
                assert same(res.schedule, get_solver(name).solve(p, seed=3, **opts).schedule)


def test_routing_greedy_rejects_multicast_orders():
    p = Problem(ring(4), Collective("gather", 1, 16, root=1))
    for bad in ({"chunk_order": "rarest"}, {"duplicates": True}, {"window": 2}, {"matching": "maximum"}):
        with pytest.raises(SolverError, match="routing greedy"):
            get_solver("greedy").solve(p, **bad)
    with pytest.raises(SolverError, match="routing"):
        get_solver("greedy").solve(p, routing="shortest")
    with pytest.raises(SolverError, match="route_passes"):
        get_solver("greedy").solve(p, route_passes=-1)


def test_balanced_routing_reaches_the_link_load_bound_on_torus4x4():
    p = Problem(torus2d(4, 4), Collective("all_to_all", 1, 16))
    b = lower_bounds(p)
    load = b["linkload_us"]
    assert load == pytest.approx(b["best_us"])
    times = [verify(p, get_solver("greedy").solve(p, seed=s).schedule).collective_time_us for s in range(4)]
    assert min(times) == pytest.approx(load, rel=1e-9)
    assert all(t >= load * (1 - 1e-9) for t in times)


@pytest.mark.parametrize("topo", [mesh2d(4, 4), torus2d(6, 6)], ids=["mesh4x4", "torus6x6"])
def test_balanced_routing_is_near_the_bound(topo):
    p = Problem(topo, Collective("all_to_all", 1, 16))
    lb = lower_bounds(p)["best_us"]
    for seed in range(2):
        T = verify(p, get_solver("greedy").solve(p, seed=seed).schedule).collective_time_us
        assert lb * (1 - 1e-9) <= T <= 1.05 * lb


# ---------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("solver", ["greedy", "greedy_plus"])
@pytest.mark.parametrize("kind", ["gather", "scatter"])
def test_gather_scatter_closed_forms(kind, solver):
    """Fully connected: every chunk goes direct, K per link: K link times. Star, root at the centre: K per spoke;
    root at a leaf: all (N-1) K chunks cross that leaf's one link."""
    n = 5
    for k in (1, 3):
        for topo, root, steps in ((fully_connected(n), 0, k), (fully_connected(n), 3, k), (star(n), 0, k),
                                  (star(n), 2, (n - 1) * k)):
            p = Problem(topo, Collective(kind, k, 16, root=root))
            t = float(p.link_time_us[0])
            T = verify(p, get_solver(solver).solve(p, seed=1).schedule).collective_time_us
            assert T == pytest.approx(steps * t), (topo.name, root, k)
            assert lower_bounds(p)["best_us"] == pytest.approx(steps * t)


@pytest.mark.parametrize("solver", ["greedy", "greedy_plus"])
@pytest.mark.parametrize("n", [3, 5, 8])
def test_broadcast_on_a_unidirectional_ring(n, solver):
    """K=1: N-1 link times; K chunks pipeline: N-1 + K-1."""
    topo = ring(n, bidirectional=False)
    for k, root in ((1, 0), (1, n - 1), (3, 1)):
        p = Problem(topo, Collective("broadcast", k, 16, root=root))
        t = float(p.link_time_us[0])
        T = verify(p, get_solver(solver).solve(p, seed=0).schedule).collective_time_us
        assert T == pytest.approx((n - 1 + k - 1) * t)
        assert lower_bounds(p)["best_us"] == pytest.approx((n - 1 + k - 1) * t)


# ---------------------------------------------------------------------------- bounds of the new kinds
def test_start_slots_doctest_and_enumeration():
    assert start_slots(np.array([1.0, 2.0]), 5).tolist() == [0.0, 0.0, 1.0, 2.0, 2.0]
    assert start_slots(np.array([3.0]), 0).size == 0
    assert np.isinf(start_slots(np.zeros(0), 2)).all()
    rng = np.random.default_rng(8)
    for _ in range(40):
        t = rng.uniform(0.2, 5.0, int(rng.integers(1, 5)))
        m = int(rng.integers(1, 30))
        every = np.sort(np.concatenate([np.arange(m + 1) * x for x in t]))
        assert start_slots(t, m) == pytest.approx(every[:m])


def test_pipeline_bound_hand_values():
    # needs sorted descending [3, 2, 1] + slots [0, 0, 1] -> max(3, 2, 2)
    assert _pipeline_bound(np.array([1.0, 3.0, 2.0]), np.array([0.0, 0.0, 1.0])) == 3.0
    # one link of time 1, three chunks each needing 3 more after leaving: the last leaves at 2
    assert _pipeline_bound(np.full(3, 3.0), start_slots(np.array([1.0]), 3)) == 5.0
    assert _pipeline_bound(np.zeros(0), np.zeros(0)) == 0.0


def test_new_kind_bound_parts_hand_values():
    t_ring = ring(4, bidirectional=False)
    # broadcast of 3 chunks from 0: each leaves on one link (slots 0, t, 2t) and still needs 3 hops: 5t
    p = Problem(t_ring, Collective("broadcast", 3, 16))
    t = float(p.link_time_us[0])
    b = lower_bounds(p)
    assert b["distance_us"] == pytest.approx(3 * t) and b["pipeline_us"] == pytest.approx(5 * t)
    assert b["best_us"] == pytest.approx(5 * t)
    # all_to_all: chunk (s, d) crosses (d - s) mod 4 links, 4 (1 + 2 + 3) link times over 4 links: 6t
    p = Problem(t_ring, Collective("all_to_all", 1, 16))
    t = float(p.link_time_us[0])
    b = lower_bounds(p)
    assert b["linkload_us"] == pytest.approx(6 * t) and b["best_us"] == pytest.approx(6 * t)
    assert b["best_source"] == "linkload"
    # gather to a star's leaf: (N-1) K chunks through its one in-link (ingress)
    p = Problem(star(5), Collective("gather", 2, 16, root=1))
    t = float(p.link_time_us[0])
    b = lower_bounds(p)
    assert b["ingress_us"] == pytest.approx(8 * t) and b["best_us"] == pytest.approx(8 * t)
    # scatter from a star's leaf: the same through its one out-link (egress)
    b = lower_bounds(Problem(star(5), Collective("scatter", 2, 16, root=1)))
    assert b["egress_us"] == pytest.approx(8 * t) and b["best_us"] == pytest.approx(8 * t)


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_bound_is_the_max_of_its_parts(kind):
    p = Problem(random_topology(np.random.default_rng(17), 6), Collective(kind, 2, 4, root=2))
    b = lower_bounds(p)
    parts = [b[k] for k in ("ingress_us", "distance_us", "cut_us", "drain_us", "linkload_us", "pipeline_us")
             if b[k] is not None]
    assert b["best_us"] == max(parts) and b["kind"] == kind
    assert b["best_us"] == lower_bounds(p)["best_us"]   # deterministic
    assert all(not isinstance(v, np.ndarray) for v in b.values())


def backends_for(kind: str) -> list[str]:
    names = ["greedy", "greedy_plus", "direct", "binomial", "chain", "pairwise", "bruck"]
    have = set(available_solvers())
    return [n for n in names if n in have and get_solver(n).supports(kind)]


@pytest.mark.parametrize("seed", range(20))
def test_bound_never_exceeds_any_backends_schedule(seed):
    rng = np.random.default_rng(900 + seed)
    n = int(rng.integers(3, 8))
    topo = random_topology(rng, n)
    assert not topo.is_symmetric and not topo.is_homogeneous
    for kind in NEW_KINDS:
        p = Problem(topo, Collective(kind, int(rng.integers(1, 4)), float(rng.choice([1.0, 64.0])),
                                     root=int(rng.integers(n))))
        lb = lower_bounds(p)["best_us"]
        ran = []
        for name in backends_for(kind):
            for opts in ([{}, {"routing": "adaptive"}] if name == "greedy" else [{}]):
                res = get_solver(name).solve(p, seed=seed, **opts)
                T = verify(p, res.schedule).collective_time_us
                assert lb <= T * (1 + 1e-9), f"{kind} {name} {opts}: schedule {T} < bound {lb}"
                ran.append(name)
        # every backend that supports the kind ran: 4 (gather, scatter) or 5 (the others)
        assert set(ran) == set(backends_for(kind)) and len(set(ran)) >= 4, (kind, ran)


TINY = [
    ("uniring3", lambda: ring(3, bidirectional=False), "broadcast", 2, 1),
    ("ring4", lambda: ring(4), "gather", 1, 1),
    ("uniring4", lambda: ring(4, bidirectional=False), "scatter", 1, 2),
    ("rand3", lambda: random_topology(np.random.default_rng(3), 3, hetero=False), "all_to_all", 1, 0),
    ("rand4", lambda: random_topology(np.random.default_rng(5), 4, hetero=False), "reduce", 2, 3),
]


@pytest.mark.parametrize("name,make,kind,k,root", TINY, ids=[f"{c[0]}-{c[2]}" for c in TINY])
def test_bound_never_exceeds_the_cpsat_optimum(name, make, kind, k, root):
    if "cpsat" not in available_solvers():
        pytest.skip("cpsat is not installed")
    solver = get_solver("cpsat")
    if not solver.supports(kind):
        pytest.skip(f"cpsat does not support {kind} (yet)")
    topo = make()
    assert topo.is_symmetric == (name == "ring4")
    p = Problem(topo, Collective(kind, k, 1, root=root))
    try:
        res = solver.solve(p, time_limit_s=20, seed=0)
    except TacosError as e:
        pytest.skip(f"cpsat: {e}")
    if res.status != "optimal":
        pytest.skip(f"cpsat did not prove optimality ({res.status})")
    opt = verify(p, res.schedule).collective_time_us
    assert lower_bounds(p)["best_us"] <= opt * (1 + 1e-9)
    greedy = verify(p, get_solver("greedy").solve(p, seed=0).schedule).collective_time_us
    assert opt <= greedy * (1 + 1e-9)
