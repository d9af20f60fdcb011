"""One composition of Reduce-Scatter and All-Reduce for every backend (solvers/compose.py)."""

from __future__ import annotations

import numpy as np
import pytest

from replay_cases import adversarial_all_gather, rand_topology
from solvers import get_solver
from solvers.compose import first_arrivals, retime, solve_collective
from solvers.baselines.trivial import bfs_all_gather
from tacos_bench import Collective, Problem
from tacos_bench.topology.generators import hetero_cluster, ring, torus2d
from tacos_bench.verify import verify


def test_first_arrivals_keeps_one_earliest_delivery_per_non_owner():
    rng = np.random.default_rng(3)
    p = Problem(rand_topology(rng, 5), Collective("all_gather", 2, 8))
    s = adversarial_all_gather(p, rng)
    f = first_arrivals(p, s)
    n, C = p.num_npus, p.num_chunks
    assert len(f) == n * C - C  # exactly one delivery per (non-owner NPU, chunk)
    assert not np.any(f.dst == f.chunk % n)
    key = f.dst * C + f.chunk
    assert len(np.unique(key)) == len(f)
    earliest = np.full(n * C, np.inf)
    np.minimum.at(earliest, s.dst * C + s.chunk, s.end_us)
    assert np.array_equal(f.end_us, earliest[key])
    assert verify(p, f).valid


def test_all_reduce_barrier_puts_every_reduction_before_every_copy():
    p = Problem(ring(5), Collective("all_reduce", 2, 3, overlap=False))
    s = solve_collective(p, bfs_all_gather)
    red = s.op == 1
    assert red.any() and (~red).any()
    # every reduction ends no later than the first copy starts
    assert s.end_us[red].max() <= s.start_us[~red].min()
    assert verify(p, s).valid


COMPOSING = ["greedy", "bfs", "ring", "direct", "rhd"]


@pytest.mark.parametrize("solver", COMPOSING)
@pytest.mark.parametrize("topo", [ring(6), torus2d(3, 3), hetero_cluster(2, 1, 3)], ids=lambda t: t.name)
def test_overlap_is_valid_and_never_slower_than_the_barrier(solver, topo):
    times = {}
    for overlap in (False, True):
        p = Problem(topo, Collective("all_reduce", 2, 8, overlap=overlap))
        s = get_solver(solver).solve(p, seed=1).schedule
        times[overlap] = verify(p, s).collective_time_us
        red = s.op == 1
        rs, ag = s.take(np.flatnonzero(red)), s.take(np.flatnonzero(~red))
        n, lk = p.num_npus, p.topology.link_ids(s.src, s.dst)
        # a chunk leaves its owner only once its reduction is complete there
        done = np.zeros(p.num_chunks)
        at_owner = rs.dst == rs.chunk % n
        np.maximum.at(done, rs.chunk[at_owner], rs.end_us[at_owner])
        assert np.all(ag.start_us >= done[ag.chunk] - 1e-9)
        # a link carries All-Gather traffic only after its Reduce-Scatter traffic (barrier: after all of it)
        last = np.zeros(p.num_links)
        np.maximum.at(last, lk[red], s.end_us[red])
        limit = last[lk[~red]] if overlap else np.full(len(ag), rs.makespan_us)
        assert np.all(ag.start_us >= limit - 1e-9)
    assert times[True] <= times[False] + 1e-9


def test_retime_keeps_link_order_and_never_delays():
    rng = np.random.default_rng(5)
    p = Problem(rand_topology(rng, 6), Collective("all_gather", 2, 8))
    s = adversarial_all_gather(p, rng).sorted()
    r = retime(p, s, link_free=np.zeros(p.num_links), chunk_ready=np.zeros(p.num_chunks))
    assert verify(p, r).valid
    assert np.all(r.start_us <= s.start_us + 1e-9)
    lk = p.topology.link_ids(s.src, s.dst)
    for link in np.unique(lk):
        on = np.flatnonzero(lk == link)
        assert np.array_equal(np.argsort(s.start_us[on], kind="stable"), np.argsort(r.start_us[on], kind="stable"))
