"""Baseline collective algorithms as real schedules on the given topology.

Ring, Direct, Recursive Halving-Doubling and Double Binary Tree are built as
link-level schedules on the problem's own topology, so the same verifier and
cost model time them as every synthesizer. What each does on a topology that
does not match its assumptions is documented in ``docs/baselines.md``.

Common machinery (:mod:`solvers.plan`): an algorithm describes its
logical messages; messages between NPUs that are not neighbours are routed over
shortest paths (by link time) as store-and-forward hops; a first-come
first-served list scheduler (one chunk per link at a time) times them.

Collectives:

* **All-Gather** is each algorithm's own data movement.
* **Reduce-Scatter** is the mirror image: the algorithm's All-Gather on the
  reversed topology, time-reversed, copies turned into reductions. For a
  Hamiltonian ring, recursive doubling or a shortest-path tree this is exactly
  the textbook reduction (ring reduce, recursive halving, reduction in-tree).
  The mirrored All-Gather never sends an NPU a chunk it already holds, so every
  NPU sends each partial sum once and nothing is counted twice.
* **All-Reduce** is Reduce-Scatter then All-Gather, composed like every
  other backend's (:mod:`solvers.compose`, ``collective.overlap``). Double
  Binary Tree has its own All-Reduce (reduce up, broadcast down, pipelined per
  chunk) and no other collective.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> from tacos_bench.verify import verify
>>> p = Problem(ring(8, bidirectional=False), Collective("all_gather", 1, 64))
>>> res = RingSolver().solve(p)
>>> t = float(p.link_time_us[0])
>>> round(res.objective_us / t, 9), res.stats["ring_embedding"]
(7.0, 'hamiltonian')
>>> verify(p, res.schedule).collective_time_us == res.objective_us
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE

from ..plan import NO_PRED, UNREACHED, Holdings, Plan, Router, send_path
from ._hamilton import DEFAULT_MAX_EXPANSIONS, find_hamiltonian_cycle
from ..base import (CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_ALL_TO_ALL, CAP_BROADCAST, CAP_GATHER, CAP_OVERLAP,
                   CAP_DEMAND_UNICAST, CAP_REDUCE, CAP_REDUCE_SCATTER, CAP_SCATTER)
from ..options import SolverOptions, option
from .common import BaselineSolver, compose_plans
from .direct import direct_plan
from .stats import DBT_STATS, DIRECT_STATS, RHD_STATS, RING_STATS

__all__ = ["RingSolver", "DirectSolver", "RecursiveHalvingDoublingSolver", "DoubleBinaryTreeSolver",
           "ring_layout", "RingLayout", "nccl_btree_parents", "double_binary_tree"]


# ============================================================================================ ring
@dataclass(frozen=True)
class RingLayout:
    """The logical ring: NPU order, how it maps onto links, and its directions.

    ``hamiltonian`` is True when every step ``order[i] -> order[i+1]`` is a link
    (a directed Hamiltonian cycle); otherwise steps are routed over shortest
    paths (``multi-hop``). ``directions`` is 2 when the ring is also used in
    reverse (each chunk then travels half-way each way round).
    """

    order: tuple[int, ...]
    hamiltonian: bool
    method: str
    expansions: int
    directions: int

    def reversed(self) -> "RingLayout":
        """The same ring on the reversed topology (where it runs backwards)."""
        return RingLayout(tuple(reversed(self.order)), self.hamiltonian, self.method, self.expansions,
                          self.directions)

    @property
    def embedding(self) -> str:
        return "hamiltonian" if self.hamiltonian else "multi-hop"


def _nearest_neighbour_order(router: Router, n: int) -> list[int]:
    """Logical ring order for a topology without a Hamiltonian cycle: nearest unvisited NPU next."""
    order = [0]
    left = np.ones(n, dtype=bool)
    left[0] = False
    for _ in range(n - 1):
        d = np.where(left, router.distances(order[-1]), np.inf)
        v = int(np.argmin(d))  # ties: lowest id
        order.append(v)
        left[v] = False
    return order


def ring_layout(problem: Problem, bidirectional: bool = True,
                max_expansions: int = DEFAULT_MAX_EXPANSIONS) -> RingLayout:
    """Choose the logical ring for ``problem``'s topology.

    A directed Hamiltonian cycle when one is found (see
    :func:`solvers.baselines._hamilton.find_hamiltonian_cycle`), else the
    nearest-neighbour tour over shortest-path times, embedded multi-hop. Both
    directions are used when ``bidirectional`` and the reverse ring exists on
    links too (Hamiltonian case) or every link has a reverse link (multi-hop).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import mesh2d
    >>> lay = ring_layout(Problem(mesh2d(3, 3), Collective("all_gather")))
    >>> lay.embedding, lay.directions
    ('multi-hop', 2)
    """
    topo = problem.topology
    n = topo.num_npus
    order, method, used = find_hamiltonian_cycle(topo, problem.link_time_us, max_expansions)
    if order is not None:
        back = np.asarray(order[::-1])
        both = bool(np.all(topo.link_ids(back, np.roll(back, -1)) >= 0)) if n > 2 else False
        return RingLayout(tuple(order), True, method, used, 2 if (bidirectional and both and n > 2) else 1)
    order = _nearest_neighbour_order(Router(topo, problem.link_time_us), n)
    both = bool(np.all(topo.link_ids(topo.dst, topo.src) >= 0))
    return RingLayout(tuple(order), False, method, used, 2 if (bidirectional and both) else 1)


def _ring_all_gather(problem: Problem, layout: RingLayout) -> Plan:
    """Ring All-Gather: at step ``s`` NPU ``order[i]`` passes on the chunks of ``order[i-s]``.

    With two directions a chunk goes ``ceil((N-1)/2)`` steps forward and
    ``floor((N-1)/2)`` backward. Pipelined per chunk: a step starts as soon as its
    chunk has arrived and the link is free.
    """
    topo = problem.topology
    n, C, cpn = problem.num_npus, problem.num_chunks, problem.collective.chunks_per_npu
    plan = Plan(topo, problem.link_time_us, C)
    have = Holdings(n, C)
    router = None if layout.hamiltonian else Router(topo, problem.link_time_us)
    seqs = [list(layout.order)]
    reach = [n - 1]
    if layout.directions == 2:
        seqs.append(seqs[0][::-1])
        reach = [n // 2, (n - 1) // 2]
    segs = []
    for seq in seqs:
        nxt = seq[1:] + seq[:1]
        if router is None:
            segs.append([[int(lk)] for lk in topo.link_ids(seq, nxt)])
        else:
            segs.append([router.path(u, v) for u, v in zip(seq, nxt)])
    for s in range(max(reach)):
        for k in range(cpn):
            for d, seq in enumerate(seqs):
                if s >= reach[d]:
                    continue
                seg = segs[d]
                for i in range(n):
                    c = k * n + seq[(i - s) % n]
                    send_path(plan, c, seg[i], COPY, have.get(c, seq[i]), prio=s, have=have)
    return plan


@dataclass(frozen=True)
class RingOptions(SolverOptions):
    bidirectional: bool = option(True, doc="split each chunk's destinations over both ring directions "
                                           "when the topology allows")
    max_expansions: int = option(DEFAULT_MAX_EXPANSIONS, minimum=0,
                                 doc="step cap of the deterministic Hamiltonian-cycle search")


class RingSolver(BaselineSolver):
    """Ring All-Gather / Reduce-Scatter / All-Reduce (bandwidth-optimal on a ring). Options: :class:`RingOptions`."""

    name = "ring"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_OVERLAP})
    Options = RingOptions
    Stats = RING_STATS

    def _build(self, problem, opts, clock):
        layout = ring_layout(problem, opts.bidirectional, opts.max_expansions)

        def build(p, mirror):
            # the mirrored All-Gather runs on the reversed topology, where the ring runs backwards
            return _ring_all_gather(p, layout.reversed() if mirror else layout)

        sched = compose_plans(problem, build, clock)
        hops = _ring_hops(problem, layout)
        return sched, {"ring_embedding": layout.embedding, "ring_search": layout.method,
                       "ring_search_expansions": layout.expansions, "ring_directions": layout.directions,
                       "ring_max_hops": hops[0], "ring_total_hops": hops[1]}


def _ring_hops(problem: Problem, layout: RingLayout) -> tuple[int, int]:
    if layout.hamiltonian:
        return 1, problem.num_npus
    router = Router(problem.topology, problem.link_time_us)
    seq = list(layout.order)
    lens = [len(router.path(u, v)) for u, v in zip(seq, seq[1:] + seq[:1])]
    return max(lens), sum(lens)


# ============================================================================================ direct
def _direct_all_gather(problem: Problem, mirror: bool) -> Plan:
    """Every owner sends each chunk to every other NPU along its own shortest path.

    Destinations are taken in rotated order (``owner+1, owner+2, ...``). Relays
    store and forward; without ``mirror`` a relay may receive the same chunk
    once per message crossing it (that traffic is what Direct costs on a
    non-switched topology). With ``mirror`` a chunk is never re-sent to an NPU
    that holds it: the union of the paths is then the shortest-path tree.
    """
    topo = problem.topology
    n, C, cpn = problem.num_npus, problem.num_chunks, problem.collective.chunks_per_npu
    plan = Plan(topo, problem.link_time_us, C)
    have = Holdings(n, C) if mirror else None
    router = Router(topo, problem.link_time_us)
    for j in range(1, n):
        for o in range(n):
            path = router.path(o, (o + j) % n)
            for k in range(cpn):
                send_path(plan, k * n + o, path, COPY, NO_PRED, prio=0, have=have)
    return plan


def _direct_plan(problem: Problem, mirror: bool) -> Plan:
    if problem.kind == "all_gather":
        return _direct_all_gather(problem, mirror)
    return direct_plan(problem, mirror)


class DirectSolver(BaselineSolver):
    """Direct (all-to-all) over shortest paths with link contention.

    All-Gather: each chunk is sent separately to each NPU over its shortest
    path. Reduce-Scatter: each NPU's contribution goes to the owner over the
    shortest-path in-tree, relays combining partial sums (one buffer per chunk
    leaves no other choice). All-Reduce: the two back to back. Broadcast,
    Gather, Scatter, All-to-All: each chunk along its own shortest path
    (:func:`solvers.baselines.collectives.direct_plan`); Reduce: the
    contributions over the root's shortest-path in-tree.
    """

    name = "direct"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_OVERLAP, CAP_BROADCAST,
                              CAP_REDUCE, CAP_GATHER, CAP_SCATTER, CAP_ALL_TO_ALL, CAP_DEMAND_UNICAST})
    Stats = DIRECT_STATS

    def _build(self, problem, opts, clock):
        sched = compose_plans(problem, _direct_plan, clock)
        topo = problem.topology
        return sched, {"direct_fully_connected": bool(topo.num_links == topo.num_npus * (topo.num_npus - 1))}


# ============================================================================================ RHD
def rhd_groups(n: int) -> tuple[int, list[int], list[int], list[int]]:
    """Fold-in layout of recursive halving-doubling for any ``n``.

    Returns ``(p2, core, extras, vowner)``: ``p2`` the largest power of two
    ``<= n``; the first ``r = n - p2`` even NPUs ``0, 2, ..., 2r-2`` are *extras*
    that fold into their odd neighbour ``e+1``; ``core`` lists the ``p2`` NPUs
    that run the algorithm (core index = position); ``vowner[o]`` is the core
    index responsible for NPU ``o``'s chunks.

    Examples
    --------
    >>> rhd_groups(6)
    (4, [1, 3, 4, 5], [0, 2], [0, 0, 1, 1, 2, 3])
    """
    p2 = 1 << (n.bit_length() - 1)
    r = n - p2
    extras = [2 * i for i in range(r)]
    core = [2 * i + 1 for i in range(r)] + list(range(2 * r, n))
    cidx = {v: i for i, v in enumerate(core)}
    vowner = [cidx[o] if o in cidx else cidx[o + 1] for o in range(n)]
    return p2, core, extras, vowner


def _rhd_all_gather(problem: Problem, phase_sync: bool) -> Plan:
    """Recursive doubling: in phase ``j`` core ``q`` swaps everything it holds with core ``q xor 2**j``.

    Message sizes double every phase. With ``phase_sync`` a pair starts phase
    ``j+1`` only when both directions of phase ``j`` have arrived (MPI
    send-receive semantics); without it each chunk moves on as soon as it has
    arrived. Extras first hand their chunks to their core partner and get
    everything back at the end.
    """
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    plan = Plan(topo, problem.link_time_us, C)
    have = Holdings(n, C)
    router = Router(topo, problem.link_time_us)
    p2, core, extras, vowner = rhd_groups(n)
    held: list[list[int]] = [[] for _ in range(p2)]
    for c in range(C):
        held[vowner[c % n]].append(c)
    bar = [NO_PRED] * p2
    for e in extras:
        q = vowner[e]
        path = router.path(e, core[q])
        own = [c for c in range(e, C, n)]
        for c in own:
            send_path(plan, c, path, COPY, NO_PRED, prio=-1, have=have)
        if phase_sync:
            bar[q] = plan.barrier([have.get(c, core[q]) for c in own], prio=-1)
    phases = p2.bit_length() - 1
    for j in range(phases):
        d = 1 << j
        for q in range(p2):
            u, v = core[q], core[q ^ d]
            path = router.path(u, v)
            for c in held[q]:
                send_path(plan, c, path, COPY, (have.get(c, u), bar[q]), prio=j, have=have)
        if phase_sync:
            new = [NO_PRED] * p2
            for q in range(p2):
                b = q ^ d
                if q < b:
                    preds = [have.get(c, core[b]) for c in held[q]] + [have.get(c, core[q]) for c in held[b]]
                    new[q] = new[b] = plan.barrier(preds, prio=j)
            bar = new
        held = [held[q] + held[q ^ d] for q in range(p2)]
    for e in extras:
        q = vowner[e]
        path = router.path(core[q], e)
        for c in held[q]:
            if have.get(c, e) == UNREACHED:
                send_path(plan, c, path, COPY, (have.get(c, core[q]), bar[q]), prio=phases, have=have)
    return plan


@dataclass(frozen=True)
class RhdOptions(SolverOptions):
    phase_sync: bool = option(True, doc="pairs wait for each phase to finish (textbook); false lets phases overlap")


class RecursiveHalvingDoublingSolver(BaselineSolver):
    """Recursive halving (Reduce-Scatter) and doubling (All-Gather), Rabenseifner's All-Reduce.

    Any NPU count: for ``N`` not a power of two the first ``N - 2**floor(log2 N)``
    even NPUs fold into their odd neighbour (see :func:`rhd_groups`). Partner
    exchanges between non-neighbours are routed over shortest paths.
    Options: :class:`RhdOptions`.
    """

    name = "rhd"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_OVERLAP})
    Options = RhdOptions
    Stats = RHD_STATS

    def _build(self, problem, opts, clock):
        sync = opts.phase_sync
        sched = compose_plans(problem, lambda p, mirror: _rhd_all_gather(p, sync), clock)
        n = problem.num_npus
        p2, core, extras, _ = rhd_groups(n)
        topo = problem.topology
        pairs = [(core[q], core[q ^ (1 << j)]) for j in range(p2.bit_length() - 1) for q in range(p2)]
        pairs += [(e, e + 1) for e in extras]
        if pairs:
            u, v = np.array(pairs).T
            remote = int(np.sum(topo.link_ids(u, v) < 0))
        else:
            remote = 0
        return sched, {"rhd_phases": p2.bit_length() - 1, "rhd_core_npus": p2, "rhd_folded_npus": len(extras),
                       "rhd_multi_hop_exchanges": remote, "rhd_phase_sync": sync}


# ============================================================================================ DBT
def nccl_btree_parents(n: int) -> list[int]:
    """Parent of each rank in NCCL's binary tree (root 0, which has a single child).

    A rank's parent clears its lowest set bit and sets the next one
    (``(r ^ b) | 2b``), falling back to ``r ^ b`` past the end; this numbers
    the tree in order, so odd ranks are leaves.

    Examples
    --------
    >>> nccl_btree_parents(8)
    [-1, 2, 4, 2, 0, 6, 4, 6]
    """
    parent = [-1] * n
    for r in range(1, n):
        bit = 1
        while not (bit & r):
            bit <<= 1
        up = (r ^ bit) | (bit << 1)
        parent[r] = up if up < n else r ^ bit
    return parent


def double_binary_tree(n: int) -> tuple[list[int], list[int]]:
    """NCCL's two complementary trees: the binary tree and its mirror (even ``n``) or shift (odd ``n``).

    Each rank is a leaf in at least one of the two trees.

    Examples
    --------
    >>> double_binary_tree(4)
    ([-1, 2, 0, 2], [1, 3, 1, -1])
    """
    t0 = nccl_btree_parents(n)
    if n % 2 == 0:
        t1 = [-1 if t0[n - 1 - r] < 0 else n - 1 - t0[n - 1 - r] for r in range(n)]
    else:
        t1 = [-1 if t0[(r - 1) % n] < 0 else (t0[(r - 1) % n] + 1) % n for r in range(n)]
    return t0, t1


def _embed_tree(router: Router, parent: list[int]) -> tuple[list[int], list[int]]:
    """Map a logical out-tree onto links: (link into each NPU or -1, NPUs in tree order).

    Logical edges are taken parent-first (breadth-first) and routed over
    shortest paths; an NPU already reached is not entered again, so the links
    used form a tree (relays hang under the first path that reaches them).
    """
    n = len(parent)
    children: list[list[int]] = [[] for _ in range(n)]
    root = -1
    for v, p in enumerate(parent):
        if p < 0:
            root = v
        else:
            children[p].append(v)
    dst = router.topology.dst.tolist()
    plink = [-1] * n
    reached = [False] * n
    reached[root] = True
    order = [root]
    queue = [root]
    for p in queue:
        for ch in children[p]:
            queue.append(ch)
            for lk in router.path(p, ch):
                v = dst[lk]
                if not reached[v]:
                    reached[v] = True
                    plink[v] = lk
                    order.append(v)
    return plink, order


def _dbt_all_reduce(problem: Problem) -> tuple[Plan, dict]:
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    lt = problem.link_time_us
    rtopo = topo.reversed()
    router, rrouter = Router(topo, lt), Router(rtopo, lt)
    plan = Plan(topo, lt, C)
    trees = double_binary_tree(n)
    src_l, rsrc_l = topo.src.tolist(), rtopo.src.tolist()
    layouts = []
    stats = {}
    for t, parent in enumerate(trees):
        down, down_order = _embed_tree(router, parent)
        rdown, up_order = _embed_tree(rrouter, parent)
        # a reversed-topology link u->v is the real link v->u
        up_link = [-1 if lk < 0 else topo.link_id(v, rsrc_l[lk]) for v, lk in enumerate(rdown)]
        up_parent = [-1 if lk < 0 else rsrc_l[lk] for lk in rdown]
        layouts.append((down, down_order, up_link, up_parent, up_order))
        logical = [(p, v) for v, p in enumerate(parent) if p >= 0]
        stats[f"dbt_tree{t}_root"] = parent.index(-1)
        stats[f"dbt_tree{t}_multi_hop_edges"] = sum(not topo.has_link(p, v) or not topo.has_link(v, p)
                                                    for p, v in logical)
    for c in range(C):
        down, down_order, up_link, up_parent, up_order = layouts[c % 2]
        inbox: list[list[int]] = [[] for _ in range(n)]
        for v in reversed(up_order):  # children before parents
            if up_link[v] >= 0:
                tid = plan.transfer(c, up_link[v], REDUCE, inbox[v], prio=c)
                inbox[up_parent[v]].append(tid)
        root = up_order[0]
        got = [NO_PRED] * n
        for v in down_order[1:]:
            u = src_l[down[v]]
            preds = inbox[root] if u == root else (got[u],)
            got[v] = plan.transfer(c, down[v], COPY, preds, prio=c)
    stats["dbt_tree0_chunks"], stats["dbt_tree1_chunks"] = len(range(0, C, 2)), len(range(1, C, 2))
    return plan, stats


class DoubleBinaryTreeSolver(BaselineSolver):
    """NCCL-style Double Binary Tree All-Reduce (All-Reduce only).

    Chunks alternate between two complementary binary trees; each chunk is
    reduced up its tree and broadcast back down, pipelined chunk by chunk.
    Tree edges that are not links are routed over shortest paths.
    """

    name = "dbt"
    capabilities = frozenset({CAP_ALL_REDUCE})
    Stats = DBT_STATS

    def _build(self, problem, opts, clock):
        plan, stats = _dbt_all_reduce(problem)
        return clock.run(plan), stats
