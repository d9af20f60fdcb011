"""``greedy_plus``'s reservation candidates (solvers/greedy/reserve.py): Scatter and Gather (option
``reserve_tries``: chunks farthest first, each on its earliest-arrival path through the links already
reserved) and Broadcast and Reduce (``broadcast_reserve_tries``: (chunk, NPU) requests, reordered by
squeaky-wheel rounds). Issue 22's targets: hetero64 Scatter/Gather within 1.05x the bound for every root,
hetero_mesh4x4 Broadcast/Reduce within 1.01x CP-SAT's optimum for every root."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import get_solver
from solvers.greedy.reserve import reserve_broadcast, reserve_schedule
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bounds
from tacos_bench.topology import named_topology
from tacos_bench.topology.generators import mesh2d
from tacos_bench.verify import verify

REL = 1e-9
# roots where the routed greedy alone once ended 1.104x (2, 28) or 1.156x (26, 53) the bound (now 1.264x,
# 1.104x, 1.052x, 1.052x; every root is at the bound in docs/studies/collectives.md, *Every root*)
HARD_ROOTS = [2, 26, 28, 53]


@pytest.mark.parametrize("kind", ["scatter", "gather"])
def test_hetero64_hard_roots_reach_the_bound(kind):
    t = named_topology("hetero64")
    for root in HARD_ROOTS:
        p = Problem(t, Collective(kind, 1, 64.0, root=root))
        bound = lower_bounds(p)["best_us"]
        on = get_solver("greedy_plus").solve(p)
        off = get_solver("greedy_plus").solve(p, reserve_tries=0, relabel_tries=0)
        assert verify(p, on.schedule).valid
        assert on.schedule.makespan_us <= bound * (1 + REL)
        assert off.schedule.makespan_us > bound * 1.05       # what the routed greedy alone does there
        assert "reserve_runs" not in off.stats


def test_reservations_never_overlap_and_hops_follow_each_other():
    p = Problem(named_topology("random16d3s0"), Collective("scatter", 2, 16.0, root=5))
    s = reserve_schedule(p, seed=3, tries=3)
    assert verify(p, s).valid
    _assert_no_link_overlap(p, s)


def _assert_no_link_overlap(p, s):
    link = p.topology.link_ids(s.src, s.dst)
    for lk in np.unique(link):
        st, en = s.start_us[link == lk], s.end_us[link == lk]
        o = np.argsort(st)
        assert np.all(st[o][1:] >= en[o][:-1] - 1e-9)


def test_reserve_is_seeded_and_skips_what_it_cannot_do():
    p = Problem(mesh2d(4, 4), Collective("scatter", 1, 16.0, root=6))
    a, b = reserve_schedule(p, seed=1, tries=4), reserve_schedule(p, seed=1, tries=4)
    assert np.array_equal(a.start_us, b.start_us) and np.array_equal(a.src, b.src)
    assert reserve_schedule(Problem(mesh2d(4, 4), Collective("broadcast", 2, 16.0)), seed=0, tries=4) is None
    assert reserve_schedule(p, seed=0, tries=0) is None


def test_greedy_keeps_the_tacos_run():
    p = Problem(named_topology("hetero64"), Collective("scatter", 1, 64.0, root=26))
    assert "reserve_runs" not in get_solver("greedy").solve(p).stats


# ---------------------------------------------------------------- Broadcast and Reduce (broadcast_reserve_tries)
@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_hetero_mesh4x4_every_root_reaches_the_pipeline_bound(kind):
    """Issue 22: greedy_plus was 1.077-1.0995x the bound on every root (CP-SAT meets it on most)."""
    t = named_topology("hetero_mesh4x4")
    for root in range(t.num_npus):
        p = Problem(t, Collective(kind, 8, 64.0, root=root))
        bound = lower_bounds(p)["best_us"]
        res = get_solver("greedy_plus").solve(p)
        assert verify(p, res.schedule).valid
        assert res.schedule.makespan_us <= bound * (1 + REL), root


def test_hetero_mesh4x4_every_root_at_the_bound_on_other_seeds():
    """Not a lucky seed: with one kind of starting order (NPU by NPU, a fresh one every 100 runs) seeds 1, 2
    and 3 left roots 4, 9, 11 and 6 at 1.08-1.10x; three kinds in turn (docs/greedy.md) meet the bound on
    every root for seeds 0-8."""
    t = named_topology("hetero_mesh4x4")
    for seed in (1, 2, 3):
        for root in range(t.num_npus):
            p = Problem(t, Collective("broadcast", 8, 64.0, root=root))
            res = get_solver("greedy_plus").solve(p, seed=seed)
            assert res.schedule.makespan_us <= lower_bounds(p)["best_us"] * (1 + REL), (seed, root)


def test_broadcast_reserve_is_what_closes_the_gap():
    p = Problem(named_topology("hetero_mesh4x4"), Collective("broadcast", 8, 64.0, root=5))
    off = get_solver("greedy_plus").solve(p, broadcast_reserve_tries=0)
    assert off.schedule.makespan_us > lower_bounds(p)["best_us"] * 1.05
    assert "broadcast_reserve_runs" not in off.stats
    assert "broadcast_reserve_runs" not in get_solver("greedy").solve(p).stats


@pytest.mark.parametrize("name,chunks,root", [("random16d3s0", 3, 2), ("hetero2x2x4", 2, 7), ("mesh3x4", 5, 0)])
def test_broadcast_requests_each_arrive_once_on_free_links(name, chunks, root):
    """Any request order gives a valid Broadcast: every NPU receives every chunk once, after its sender has
    it, and no two transfers overlap on a link (the schedule of the last run is not the best: a random one)."""
    p = Problem(named_topology(name), Collective("broadcast", chunks, 16.0, root=root))
    s = reserve_broadcast(p, seed=root, tries=3, bound_us=0.0)     # a bound nothing meets: all 3 runs
    assert verify(p, s).valid
    pairs = set(zip(s.chunk.tolist(), s.dst.tolist()))
    assert len(pairs) == len(s) == chunks * (p.num_npus - 1)
    _assert_no_link_overlap(p, s)


def test_broadcast_reserve_is_seeded_and_skips_what_it_cannot_do():
    p = Problem(named_topology("hetero_mesh4x4"), Collective("broadcast", 8, 64.0, root=4))
    sa, sb = {}, {}
    a = reserve_broadcast(p, seed=2, tries=40, stats=sa)
    b = reserve_broadcast(p, seed=2, tries=40, stats=sb)
    assert np.array_equal(a.start_us, b.start_us) and np.array_equal(a.src, b.src) and sa == sb
    assert reserve_broadcast(Problem(mesh2d(3, 3), Collective("scatter", 1, 16.0)), seed=0, tries=4) is None
    assert reserve_broadcast(p, seed=0, tries=0) is None
