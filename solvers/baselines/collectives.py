"""Baselines for the rooted and personalised collectives: Broadcast, Reduce, Gather, Scatter, All-to-All.

Built like the classic baselines (:mod:`solvers.baselines`): an algorithm describes its logical
messages, messages between NPUs that are not neighbours are routed over shortest paths (by link time) as
store-and-forward hops, and the first-come first-served list scheduler of
:mod:`solvers.plan` times them, one chunk per link at a time.

=============  ==========================================  =====================================================
solver         collectives                                 algorithm
=============  ==========================================  =====================================================
``direct``     broadcast, reduce, gather, scatter,         every chunk along its own shortest path, all at once
               all_to_all (and AG/RS/AR, baselines.py)     (:func:`direct_plan`)
``pairwise``   all_to_all                                  N-1 rounds, NPU i sends to i+r in round r
``bruck``      all_to_all                                  ceil(log2 N) rounds, NPU i forwards to i+2^k
``binomial``   broadcast, reduce, gather, scatter          binomial tree rooted at the root (:func:`binomial_tree`)
``chain``      broadcast, reduce                           pipelined chain from the root (:func:`chain_order`)
=============  ==========================================  =====================================================

Reduce is the time-reversed Broadcast on the reversed links (:func:`solvers.compose.solve_collective`), as
Reduce-Scatter is for the classic baselines: the Broadcast plans never send an NPU a chunk it holds, so
the mirrored Reduce sends each partial sum once.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import fully_connected
>>> from tacos_bench.verify import verify
>>> p = Problem(fully_connected(4), Collective("all_to_all", 1, 64))
>>> t = float(p.link_time_us[0])
>>> [round(get(p).objective_us / t, 9) for get in (DirectSolver().solve, PairwiseSolver().solve)]
[1.0, 3.0]
>>> verify(p, BruckSolver().solve(p).schedule).collective_time_us / t
4.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.collective import ALL_TO_ALL, BROADCAST, GATHER, SCATTER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY

from ..plan import NO_PRED, Plan, Router, send_path
from ..base import CAP_ALL_TO_ALL, CAP_BROADCAST, CAP_DEMAND_UNICAST, CAP_GATHER, CAP_REDUCE, CAP_SCATTER
from ..options import SolverOptions, option
from .classic import DirectSolver
from .common import BaselineSolver, compose_plans
from .direct import direct_plan, plan_start
from .stats import BINOMIAL_STATS, BRUCK_STATS, CHAIN_STATS, PAIRWISE_STATS

__all__ = ["DirectSolver", "PairwiseSolver", "BruckSolver", "BinomialSolver", "ChainSolver",
           "PairwiseOptions", "BruckOptions", "BinomialOptions", "direct_plan", "pairwise_plan", "bruck_plan",
           "binomial_parents", "binomial_tree", "binomial_plan", "chain_order", "chain_plan"]


# ============================================================================================ helpers
def _multi_hop(problem: Problem, pairs) -> int:
    """Logical messages ``(u, v)`` that are not one link."""
    if not pairs:
        return 0
    u, v = np.asarray(pairs, dtype=np.int64).T
    return int(np.sum(problem.topology.link_ids(u, v) < 0))


def _round_barriers(plan: Plan, out: list[list[int]], inn: list[list[int]], prio: int) -> list[int]:
    """Per-NPU end of a round (MPI send-receive): its own messages and those sent to it have arrived."""
    return [plan.barrier(o + i, prio=prio) for o, i in zip(out, inn)]


# ============================================================================================ pairwise
def pairwise_plan(problem: Problem, sync: bool = True) -> Plan:
    """Pairwise (ring) exchange All-to-All: in round ``r = 1..N-1`` NPU ``i`` sends its chunks for ``i+r``.

    Each round's message is routed over a shortest path. With ``sync`` an NPU starts round ``r+1`` once
    its round-``r`` message has arrived and the one sent to it has arrived (MPI send-receive per round);
    without it every message is issued at once and a link serves earlier rounds first among chunks ready
    at the same time.

    Parameters
    ----------
    problem : Problem
        An All-to-All.
    sync : bool
        Round-by-round send-receive (see above).

    Returns
    -------
    Plan

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import fully_connected
    >>> p = Problem(fully_connected(4), Collective("all_to_all", 2, 8))
    >>> t = float(p.link_time_us[0])
    >>> [round(pairwise_plan(p, s).run().makespan_us / t, 9) for s in (True, False)]  # 3 rounds of 2 chunks
    [6.0, 2.0]
    """
    if not problem.collective.unicast or (problem.kind != ALL_TO_ALL and not problem.collective.general):
        _need(problem, ALL_TO_ALL, "pairwise_plan")
    n = problem.num_npus
    # each pair's chunks (an All-to-Allv's differ per pair; none for an empty pair)
    src, dst = np.asarray(problem.sources), np.asarray(problem.destinations)
    order = np.lexsort((np.arange(src.size), dst, src))
    pair_key = src[order] * n + dst[order]
    starts = np.searchsorted(pair_key, np.arange(n * n + 1))
    plan, router, _ = plan_start(problem)
    bar = [NO_PRED] * n
    for r in range(1, n):
        out: list[list[int]] = [[] for _ in range(n)]
        inn: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            d = (i + r) % n
            mine = order[starts[i * n + d]:starts[i * n + d + 1]]
            if not mine.size:
                continue
            path = router.path(i, d)
            for c in mine.tolist():
                tid = send_path(plan, c, path, COPY, bar[i], prio=r)
                out[i].append(tid)
                inn[d].append(tid)
        if sync:
            bar = _round_barriers(plan, out, inn, r)
    return plan


# ============================================================================================ Bruck
def bruck_plan(problem: Problem, sync: bool = True) -> tuple[Plan, int]:
    """Bruck All-to-All: ``ceil(log2 N)`` rounds; in round ``k`` NPU ``i`` forwards to ``i + 2^k`` every chunk it
    holds whose remaining offset ``(d - i) mod N`` has bit ``k`` set.

    Each round clears one bit of every chunk's offset, so a chunk reaches its destination after the rounds
    of its offset's set bits, relayed by the NPUs in between (the copy model lets an intermediate holder
    re-send it). Messages to ``i + 2^k`` are routed over shortest paths. Within a round a sender queues
    the chunks with the larger remaining offset (the longer way still to go) first. ``sync`` as in
    :func:`pairwise_plan`; without it a chunk moves on as soon as it has arrived.

    Parameters
    ----------
    problem : Problem
        An All-to-All.
    sync : bool
        Round-by-round send-receive.

    Returns
    -------
    (Plan, int)
        The plan and the number of logical messages ``i -> i + 2^k`` that are not one link.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import fully_connected
    >>> p = Problem(fully_connected(4), Collective("all_to_all", 1, 8))
    >>> t = float(p.link_time_us[0])
    >>> plan, multi_hop = bruck_plan(p)
    >>> round(plan.run().makespan_us / t, 9), multi_hop  # 2 rounds of 2 chunks per link
    (4.0, 0)
    """
    _need(problem, ALL_TO_ALL, "bruck_plan")
    n, C = problem.num_npus, problem.num_chunks
    plan, router, _ = plan_start(problem)
    at = problem.sources.tolist()
    # Not Holdings: skipping a hop into an NPU that held the chunk earlier would also skip the round's
    # barrier, so every message follows its own path (a relay may see a chunk twice; copies allow it).
    got = [NO_PRED] * C
    dest = problem.destinations.tolist()
    bar = [NO_PRED] * n
    pairs = []
    for k in range((n - 1).bit_length()):
        step = 1 << k
        pairs += [(i, (i + step) % n) for i in range(n)]
        moving = [c for c in range(C) if ((dest[c] - at[c]) % n) >> k & 1]
        moving.sort(key=lambda c: (at[c], -((dest[c] - at[c]) % n), c))
        out: list[list[int]] = [[] for _ in range(n)]
        inn: list[list[int]] = [[] for _ in range(n)]
        paths: dict[int, list[int]] = {}
        for c in moving:
            i = at[c]
            j = (i + step) % n
            if i not in paths:
                paths[i] = router.path(i, j)
            tid = got[c] = send_path(plan, c, paths[i], COPY, (got[c], bar[i]), prio=k)
            out[i].append(tid)
            inn[j].append(tid)
            at[c] = j
        if sync:
            bar = _round_barriers(plan, out, inn, k)
    return plan, _multi_hop(problem, pairs)


# ============================================================================================ binomial
def binomial_parents(n: int) -> list[int]:
    """Parent of each virtual rank in the binomial tree rooted at rank 0 (MPICH's): ``j`` with its lowest set
    bit cleared.

    Rank ``j`` is at depth ``popcount(j)``; its children are ``j + 2^i`` for every ``2^i`` below its lowest
    set bit (every ``2^i < n`` for the root), the largest subtree first.

    Examples
    --------
    >>> binomial_parents(8)
    [-1, 0, 0, 2, 0, 4, 4, 6]
    """
    return [-1] + [j & (j - 1) for j in range(1, int(n))]


def binomial_tree(problem: Problem, order: str = "distance", router: Router | None = None) -> list[tuple[int, int]]:
    """The binomial tree rooted at ``problem.collective.root``, as NPU edges ``(parent, child)``.

    Virtual rank 0 is the root; the other NPUs get ranks ``1..N-1`` in relative order ``(v - root) mod N``
    (``order="rank"``, textbook MPI) or by shortest-path time from the root (``order="distance"``, ties by
    relative order), which puts the many deep leaves of the tree near the root. Edges come breadth-first,
    each parent's children largest subtree first, so a parent always precedes its children.

    Parameters
    ----------
    problem : Problem
        A rooted collective.
    order : {"distance", "rank"}
    router : Router, optional
        Reused for the distances (default: a new one on ``problem``'s topology).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> binomial_tree(Problem(ring(4, bidirectional=False), Collective("broadcast", 1, 4, root=1)), "rank")
    [(1, 3), (1, 2), (3, 0)]
    """
    n, root = problem.num_npus, problem.collective.root
    rel = [(v - root) % n for v in range(n)]
    if order == "rank":
        perm = [(root + j) % n for j in range(n)]
    elif order == "distance":
        dist = (router or Router(problem.topology, problem.link_time_us)).distances(root).tolist()
        perm = sorted(range(n), key=lambda v: (v != root, dist[v], rel[v]))
    else:
        raise SolverError(f"binomial order must be 'distance' or 'rank', got {order!r}")
    edges = []
    queue = [0]
    for j in queue:
        # the root's "lowest set bit" is a power of two >= n, so every 2^i < n is one of its children
        low = j & -j if j else 1 << max(n - 1, 1).bit_length()
        mask = low >> 1
        while mask:
            if j + mask < n:
                edges.append((perm[j], perm[j + mask]))
                queue.append(j + mask)
            mask >>= 1
    return edges


def binomial_plan(problem: Problem, order: str = "distance") -> tuple[Plan, dict]:
    """Binomial-tree Broadcast, Gather or Scatter (see :func:`binomial_tree`); tree edges over shortest paths.

    * Broadcast: each chunk goes down the tree, pipelined per chunk (a child forwards a chunk as soon as it
      has it; a link takes lower chunk ids first). No NPU is sent a chunk it holds (a relay of a multi-hop
      edge forwards its own copy), so the time reversal is the binomial Reduce.
    * Gather: each chunk climbs from its source to the root along the tree edges, forwarded as soon as it
      arrives.
    * Scatter: each chunk descends from the root to its destination; a link takes the chunks bound deepest
      first.

    Parameters
    ----------
    problem : Problem
        A Broadcast, Gather or Scatter.
    order : {"distance", "rank"}
        Rank order of :func:`binomial_tree`.

    Returns
    -------
    (Plan, dict)
        The plan and its stats (tree depth in edges, multi-hop tree edges).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import fully_connected
    >>> p = Problem(fully_connected(8), Collective("broadcast", 1, 8))
    >>> plan, stats = binomial_plan(p)
    >>> round(plan.run().makespan_us / float(p.link_time_us[0]), 9), stats["binomial_depth"]
    (3.0, 3)
    """
    kind = problem.kind
    if kind not in (BROADCAST, GATHER, SCATTER):
        raise SolverError(f"binomial_plan builds broadcast, gather and scatter, not {kind}")
    n, C, root = problem.num_npus, problem.num_chunks, problem.collective.root
    plan, router, have = plan_start(problem)
    edges = binomial_tree(problem, order, router)
    parent = [-1] * n
    depth = [0] * n
    for p, ch in edges:  # parents come first
        parent[ch] = p
        depth[ch] = depth[p] + 1
    path = {(p, ch): router.path(p, ch) for p, ch in edges}
    if kind == BROADCAST:
        for c in range(C):
            for p, ch in edges:
                send_path(plan, c, path[p, ch], COPY, have.get(c, p), prio=c, have=have)
    elif kind == GATHER:
        up = {(ch, p): router.path(ch, p) for p, ch in edges}
        for c in range(C):
            v = c % n
            cur = NO_PRED
            while v != root:
                cur = send_path(plan, c, up[v, parent[v]], COPY, cur, have=have)
                v = parent[v]
    else:  # scatter
        for c in sorted(range(C), key=lambda c: (-depth[c % n], c)):
            hops = []
            v = c % n
            while v != root:
                hops.append((parent[v], v))
                v = parent[v]
            cur = NO_PRED
            for e in reversed(hops):
                cur = send_path(plan, c, path[e], COPY, cur, prio=-depth[c % n], have=have)
    return plan, {"binomial_depth": max(depth), "binomial_multi_hop_edges": _multi_hop(problem, edges),
                  "binomial_order": order}


# ============================================================================================ chain
def chain_order(router: Router, root: int) -> list[int]:
    """A path through every NPU from ``root``: nearest unvisited NPU next (shortest-path time).

    Ties go to the lowest relative rank ``(v - root) mod N``, so on a ring the chain runs forward.

    Examples
    --------
    >>> from tacos_bench.topology.generators import mesh2d
    >>> from tacos_bench import Collective, Problem
    >>> p = Problem(mesh2d(2, 2), Collective("broadcast", 1, 4))
    >>> chain_order(Router(p.topology, p.link_time_us), 2)
    [2, 3, 1, 0]
    """
    n = router.topology.num_npus
    rel = (np.arange(n) - root) % n
    order = [int(root)]
    left = np.ones(n, dtype=bool)
    left[root] = False
    for _ in range(n - 1):
        d = np.where(left, router.distances(order[-1]), np.inf)
        near = np.flatnonzero(d <= d.min() * (1 + 1e-12))
        v = int(near[np.argmin(rel[near])])
        order.append(v)
        left[v] = False
    return order


def chain_plan(problem: Problem) -> tuple[Plan, dict]:
    """Pipelined chain Broadcast: the chunks go down :func:`chain_order` one after another.

    A chain step between NPUs that are not neighbours is routed over a shortest path; NPUs already holding
    the chunk on it forward their own copy, so nobody is sent a chunk twice and the time reversal is the
    chain Reduce. On a chain of single links with equal link time ``t``: ``(N - 1 + K - 1) t``.

    Parameters
    ----------
    problem : Problem
        A Broadcast.

    Returns
    -------
    (Plan, dict)
        The plan and its stats (multi-hop steps, links on the chain).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(6, bidirectional=False), Collective("broadcast", 4, 8, root=3))
    >>> plan, stats = chain_plan(p)
    >>> round(plan.run().makespan_us / float(p.link_time_us[0]), 9), stats["chain_hops"]
    (8.0, 5)
    """
    _need(problem, BROADCAST, "chain_plan")
    plan, router, have = plan_start(problem)
    order = chain_order(router, problem.collective.root)
    steps = list(zip(order[:-1], order[1:]))
    paths = [router.path(u, v) for u, v in steps]
    for c in range(problem.num_chunks):
        for (u, _), path in zip(steps, paths):
            send_path(plan, c, path, COPY, have.get(c, u), prio=c, have=have)
    return plan, {"chain_multi_hop_steps": _multi_hop(problem, steps), "chain_hops": sum(map(len, paths))}


def _need(problem: Problem, kind: str, who: str) -> None:
    if problem.kind != kind:
        raise SolverError(f"{who} builds {kind}, not {problem.kind}")


# ============================================================================================ solvers
@dataclass(frozen=True)
class PairwiseOptions(SolverOptions):
    """Options of :class:`PairwiseSolver`.

    >>> PairwiseOptions.parse({"sync": "false"}).sync
    False
    """

    sync: bool = option(True, doc="an NPU starts a round once its previous send and receive have arrived "
                                  "(false: every round issued at once)")


class PairwiseSolver(BaselineSolver):
    """Pairwise-exchange All-to-All (:func:`pairwise_plan`). Options: :class:`PairwiseOptions`.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> PairwiseSolver().solve(Problem(ring(4), Collective("all_to_all", 1, 4))).stats["pairwise_rounds"]
    3
    """

    name = "pairwise"
    capabilities = frozenset({CAP_ALL_TO_ALL, CAP_DEMAND_UNICAST})
    Options = PairwiseOptions
    Stats = PAIRWISE_STATS

    def _build(self, problem, opts, clock):
        n = problem.num_npus
        pairs = [(i, (i + r) % n) for r in range(1, n) for i in range(n)]
        return clock.run(pairwise_plan(problem, opts.sync)), {
            "pairwise_rounds": n - 1, "pairwise_sync": opts.sync,
            "pairwise_multi_hop_messages": _multi_hop(problem, pairs)}


@dataclass(frozen=True)
class BruckOptions(SolverOptions):
    """Options of :class:`BruckSolver`.

    >>> BruckOptions.parse({}).sync
    True
    """

    sync: bool = option(True, doc="an NPU starts a round once its previous send and receive have arrived "
                                  "(false: a chunk moves on as soon as it has arrived)")


class BruckSolver(BaselineSolver):
    """Bruck All-to-All (:func:`bruck_plan`). Options: :class:`BruckOptions`.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> BruckSolver().solve(Problem(ring(5), Collective("all_to_all", 1, 4))).stats["bruck_rounds"]
    3
    """

    name = "bruck"
    capabilities = frozenset({CAP_ALL_TO_ALL})
    Options = BruckOptions
    Stats = BRUCK_STATS

    def _build(self, problem, opts, clock):
        plan, multi_hop = bruck_plan(problem, opts.sync)
        return clock.run(plan), {"bruck_rounds": (problem.num_npus - 1).bit_length(), "bruck_sync": opts.sync,
                                 "bruck_multi_hop_messages": multi_hop}


@dataclass(frozen=True)
class BinomialOptions(SolverOptions):
    """Options of :class:`BinomialSolver`.

    >>> BinomialOptions.parse({"order": "rank"}).order
    'rank'
    """

    order: str = option("distance", choices=("distance", "rank"),
                        doc="virtual ranks by shortest-path time from the root (distance) or (v - root) mod N (rank)")


def _composed(problem: Problem, build, clock):
    """Copy kinds from ``build(p) -> (Plan, stats)``; Reduce from the Broadcast on the reversed links."""
    stats: dict = {}

    def plan(p, mirror):
        pl, st = build(p)
        stats.update(st)
        return pl

    return compose_plans(problem, plan, clock), stats


class BinomialSolver(BaselineSolver):
    """Binomial-tree Broadcast, Reduce, Gather and Scatter (:func:`binomial_plan`; Reduce is the mirrored
    Broadcast). Options: :class:`BinomialOptions`.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import fully_connected
    >>> p = Problem(fully_connected(8), Collective("reduce", 1, 8, root=5))
    >>> res = BinomialSolver().solve(p)
    >>> round(res.objective_us / float(p.link_time_us[0]), 9), res.stats["binomial_depth"]
    (3.0, 3)
    """

    name = "binomial"
    capabilities = frozenset({CAP_BROADCAST, CAP_REDUCE, CAP_GATHER, CAP_SCATTER})
    Options = BinomialOptions
    Stats = BINOMIAL_STATS

    def _build(self, problem, opts, clock):
        return _composed(problem, lambda p: binomial_plan(p, opts.order), clock)


class ChainSolver(BaselineSolver):
    """Pipelined chain Broadcast and Reduce (:func:`chain_plan`; Reduce is the mirrored Broadcast).

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(5, bidirectional=False), Collective("reduce", 3, 8, root=2))
    >>> round(ChainSolver().solve(p).objective_us / float(p.link_time_us[0]), 9)
    6.0
    """

    name = "chain"
    capabilities = frozenset({CAP_BROADCAST, CAP_REDUCE})
    Stats = CHAIN_STATS

    def _build(self, problem, opts, clock):
        return _composed(problem, chain_plan, clock)
