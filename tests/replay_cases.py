"""Schedules and topologies the replay tests share: tiny, adversarial and random cases."""

from __future__ import annotations

import numpy as np

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.topology.generators import ring
from tacos_bench.topology import Topology


# --------------------------------------------------------------------------------------------- helpers
def tiny_problem(n: int, kind: str) -> Problem:
    """Fully connected, zero latency, 1-byte chunks: every link time is ~1.9e-5 µs."""
    topo = Topology.from_edges(n, [(u, v, 50.0, 0.0) for u in range(n) for v in range(n) if u != v])
    p = Problem(topo, Collective(kind, 1, n / 2**20))
    assert p.chunk_bytes == 1
    return p


def uniring3(kind: str = "all_gather") -> Problem:
    return Problem(ring(3, bidirectional=False), Collective(kind, 1, 3))


def ag_ring_rows(t: float):
    return [(0, 0, 1, 0, t, "copy"), (1, 1, 2, 0, t, "copy"), (2, 2, 0, 0, t, "copy"),
            (2, 0, 1, t, 2 * t, "copy"), (0, 1, 2, t, 2 * t, "copy"), (1, 2, 0, t, 2 * t, "copy")]


def fc3_all_reduce_rows(t: float):
    """A valid All-Reduce on fc3: everyone reduces into the owner, then the owner copies back."""
    rows = [(c, u, c, 0.0, t, "reduce") for c in range(3) for u in range(3) if u != c]
    rows += [(1, 1, 0, t, 2 * t, "copy"), (1, 1, 2, t, 2 * t, "copy"), (2, 2, 0, t, 2 * t, "copy"),
             (2, 2, 1, t, 2 * t, "copy"), (0, 0, 1, 2 * t, 3 * t, "copy"), (0, 0, 2, 2 * t, 3 * t, "copy")]
    return rows


def rand_topology(rng, n: int) -> Topology:
    """Strongly connected, asymmetric, heterogeneous digraph with irrational-looking link times."""
    perm = rng.permutation(n)
    edges = {(int(perm[i]), int(perm[(i + 1) % n])) for i in range(n)}
    for _ in range(int(rng.integers(0, 2 * n))):
        u, v = (int(x) for x in rng.integers(0, n, 2))
        if u != v:
            edges.add((u, v))
    edges = sorted(edges)
    bw = rng.uniform(1, 200, len(edges)) * np.pi
    lat = rng.uniform(0, 3, len(edges)) / 7
    return Topology.from_edges(n, [(u, v, float(b), float(l)) for (u, v), b, l in zip(edges, bw, lat)])


def adversarial_all_gather(problem: Problem, rng) -> Schedule:
    """A valid All-Gather full of what solvers may emit: duplicate deliveries, deliveries back to the owner,
    forwarding at the exact arrival instant, transfers in random order."""
    n, C = problem.num_npus, problem.num_chunks
    topo, lt = problem.topology, problem.link_time_us
    free = np.zeros(topo.num_links)
    hold = np.full((n, C), np.inf)
    hold[np.arange(C) % n, np.arange(C)] = 0.0
    rows = []
    while np.isinf(hold).any():
        c = int(rng.integers(C))
        u = int(rng.choice(np.flatnonzero(np.isfinite(hold[:, c]))))
        lid = int(rng.integers(topo.out_ptr[u], topo.out_ptr[u + 1]))
        v = int(topo.dst[lid])
        if np.isfinite(hold[v, c]) and rng.random() < 0.7:
            continue  # 30% of the time deliver anyway: a duplicate or a delivery to the owner
        t0 = max(hold[u, c], free[lid])
        t1 = t0 + lt[lid]
        free[lid] = t1
        hold[v, c] = min(hold[v, c], t1)
        rows.append((c, u, v, t0, t1, "copy"))
    s = Schedule.from_rows(rows)
    return s.take(rng.permutation(len(s)))


def reference_all_gather_valid(problem: Problem, s: Schedule, tol: float) -> bool:
    """Independent causality + postcondition check for copy-only All-Gather (links assumed checked).

    Transfers are taken in start order; a sender holds a chunk once an already *accepted* transfer
    delivered it. Every transfer here lasts much longer than ``tol``, so a supporter always starts
    strictly earlier than the transfer it supports.
    """
    n, C = problem.num_npus, problem.num_chunks
    hold = np.full((n, C), np.inf)
    hold[np.arange(C) % n, np.arange(C)] = 0.0
    for i in np.argsort(s.start_us, kind="stable"):
        c, u, v = int(s.chunk[i]), int(s.src[i]), int(s.dst[i])
        if hold[u, c] > s.start_us[i] + tol:
            return False
        hold[v, c] = min(hold[v, c], s.end_us[i])
    return bool(np.isfinite(hold).all())
