"""The compiled unicast kernel of the fabric greedy is the Python loop, row for row (the loop stays the reference:
``engine="python"``), from the sources and from a fault's start state, under every rule the solvers use."""

import numpy as np
import pytest

from solvers.fabric_routes import build_hops
from solvers.greedy.fabric import fabric_copy
from tacos_bench import Collective, Problem
from tacos_bench.demand import all_to_allv
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import verify

RULES = [("rarest", False), ("random", False), ("rarest", True)]


def _same(a, b) -> bool:
    cols = ("chunk", "src", "dst", "start_us", "end_us", "op")
    if len(a) != len(b) or any(not np.array_equal(getattr(a, k), getattr(b, k)) for k in cols):
        return False
    return (a.route is None and b.route is None) or list(a.route) == list(b.route)


def _skewed(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = (rng.pareto(1.5, (n, n)) * 1e6).astype(np.int64)
    m[rng.random((n, n)) < 0.2] = 0
    return m


def _problems():
    for name in ("switched8", "dgx_h100x2", "leafspine2x4"):
        topo = named_topology(name)
        yield Problem(topo, Collective("all_to_all", 2, 64))
        yield Problem(topo, Collective("gather", 2, 64, root=1))
        yield Problem(topo, Collective("scatter", 2, 64))
        yield Problem(topo, Collective("all_to_allv", demand=all_to_allv(_skewed(topo.num_npus, 1), None, 2)))


@pytest.mark.parametrize("problem", list(_problems()), ids=lambda p: f"{p.topology.name}-{p.kind}")
def test_kernel_is_the_python_loop(problem):
    hops = build_hops(problem.topology, problem.chunk_bytes)
    for order, local_first in RULES:
        for seed in (0, 5):
            kw = dict(seed=seed, chunk_order=order, local_first=local_first, hops=hops)
            ref = fabric_copy(problem, engine="python", **kw)
            stats: dict = {}
            got = fabric_copy(problem, stats=stats, **kw)
            assert stats["engine"] == "fabric_unicast_kernel"
            assert _same(ref, got), (order, local_first, seed)
            assert verify(problem, got).valid


def test_kernel_from_a_start_state():
    """Busy links, extra copies held by relays, a dead NPU: the start state of a repair."""
    topo = named_topology("dgx_h100x2")
    p = Problem(topo, Collective("all_to_all", 1, 64))
    rng = np.random.default_rng(3)
    C, n = p.num_chunks, p.num_npus
    extra = rng.choice(C, C // 3, replace=False)
    hv = np.concatenate([np.asarray(p.sources), rng.integers(0, n, extra.size)])
    hc = np.concatenate([np.arange(C), extra])
    ht = np.concatenate([np.zeros(C), rng.random(extra.size) * 50])
    link_free = rng.random(topo.num_links) * 30
    alive = np.ones(n, bool)
    alive[5] = False
    hops = build_hops(topo, p.chunk_bytes)
    for order, local_first in RULES:
        kw = dict(seed=2, chunk_order=order, local_first=local_first, hops=hops, holds=(hv, hc, ht),
                  alive=alive, link_free=link_free)
        assert _same(fabric_copy(p, engine="python", **kw), fabric_copy(p, **kw)), (order, local_first)


def test_more_events_than_the_first_draws():
    """A long schedule runs past the draws the kernel is first handed: the stream goes on, still the loop's."""
    topo = named_topology("switched8")
    p = Problem(topo, Collective("gather", 96, 64))
    hops = build_hops(topo, p.chunk_bytes)
    stats: dict = {}
    got = fabric_copy(p, seed=1, hops=hops, stats=stats)
    assert stats["events"] > 256 + 4 * (p.num_chunks // p.num_npus)
    assert _same(fabric_copy(p, seed=1, hops=hops, engine="python"), got)
