"""A chunk table on a rail-optimized fabric in NIC slots (``greedy_plus`` candidate ``rail_slots``): MoE dispatch
(combine through its mirror), All-to-Allv, any copy table.

On a rail cluster (:func:`solvers.greedy.rails.rail_layout`: nodes joined by their fastest hops, rail ``h``
joining GPU ``h`` of every node) a chunk for the GPUs of another node crosses between the nodes once, on its
source's rail, to that node's GPU of the rail, which then spreads it over the node's switch to the GPUs that
need it (DeepEP's hierarchical dispatch); chunks for the source's own node go over the switch directly. What
remains is *when* each NIC carries what:

0. **rails**: a crossing goes on its source's rail, unless that rail's port (sending or receiving) would carry more
   than the busier end's node carries per NIC on average; then it moves to the least loaded rail of the node with
   room at both ends, reached first over the source node's switch (a *pre-hop* to that rail's GPU, placed before
   the spreads, its crossing put last among its node pair's slots). On a skewed MoE layer the source rails alone
   leave the busiest port 5 % above the node average at 16 tokens a GPU, 1-2 % at 256 (dgx_h100x4);
1. **slots**: on each rail the crossings form a bipartite multigraph, nodes sending to nodes, whose largest
   degree ``D`` is what the busiest NIC must carry. It is split into ``D`` matchings (a Birkhoff-von Neumann
   decomposition of the node x node count matrix padded to ``D``-regular: König's theorem says ``D`` suffice),
   and matching ``k`` runs as slot ``k``, one NIC transfer per port, back to back: the rails take exactly the
   time their busiest NIC needs (should a moved crossing's slot come before its pre-hop lands, the whole table is
   slotted again on the source rails). Within a node pair the most urgent crossing goes first: the one bound for the
   GPU with the most deliveries to take over its node's switch (that in-link is what the spreads queue on), then
   the one that spreads to the most GPUs;
2. **spreads**: every node's switch forwards each arrival (and its source's chunks for its own GPUs) to each GPU
   that needs it, one delivery at a time, as a non-delay schedule (:func:`_spread_kernel`): a GPU whose in-link
   is free takes the earliest-ready delivery whose holder's out-link is free. One copy per GPU, not one
   multicast to all of them: a multicast waits for every receiver's in-link, and on a skewed layer the busiest
   in-link then idles between copies (dgx_h100x4, Gini 0.3: 1.41x the bound with multicast spreads in arrival
   order, 1.05x this way). Overlapped with the slots: the node's switch links are not the rails'.

The node x node matrix is at most ``nodes`` x ``nodes`` per rail, so the decomposition costs milliseconds
whatever the number of chunks, and the spreads are one pass over the deliveries with a heap of wake-ups.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.bounds import lower_bound_us
>>> from tacos_bench.moe import dispatch_demand, moe_routing
>>> from tacos_bench.topology.named import named_topology
>>> from tacos_bench.verify import verify
>>> t = named_topology("dgx_h100x2")
>>> p = Problem(t, Collective("moe_dispatch", demand=dispatch_demand(moe_routing(16, tokens_per_npu=8, seed=0))))
>>> v = verify(p, rail_slots_table(p))
>>> v.valid, v.collective_time_us / lower_bound_us(p) < 1.15
(True, True)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos_bench.demand import Demand
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..fabric_routes import Hops, build_hops, hop_rows
from .rails import rail_layout

__all__ = ["matchings", "rail_slots_table", "warmup"]


def matchings(counts: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """``counts`` (``K x K``, non-negative integers) as ``(perm, weight)`` pairs: ``perm[i]`` the column row ``i``
    is matched to, for ``weight`` slots; the weights sum to the largest row or column sum, and every entry is
    covered by as many slots (the pairs include padding, which the caller leaves idle).

    >>> m = matchings(np.array([[0, 2, 1], [1, 0, 0], [1, 1, 0]]))
    >>> sum(w for _, w in m)
    3
    """
    from scipy.optimize import linear_sum_assignment

    M = np.asarray(counts, dtype=np.int64).copy()
    K = M.shape[0]
    D = int(max(M.sum(axis=0).max(initial=0), M.sum(axis=1).max(initial=0)))
    # pad to D-regular: each row's deficit into the columns with room (a bipartite multigraph's padding)
    rows, cols = D - M.sum(axis=1), D - M.sum(axis=0)
    for i in range(K):
        for j in range(K):
            x = min(rows[i], cols[j])
            if x:
                M[i, j] += x
                rows[i] -= x
                cols[j] -= x
    out = []
    while D > 0:
        r, c = linear_sum_assignment(-(M > 0).astype(np.int64))
        perm = np.empty(K, np.int64)
        perm[r] = c
        if not np.all(M[np.arange(K), perm] > 0):
            raise SolverError("rail slots: the padded count matrix has no perfect matching (not regular)")
        w = int(M[np.arange(K), perm].min())
        M[np.arange(K), perm] -= w
        out.append((perm, w))
        D -= w
    return out


def rail_slots_table(problem: Problem, *, hops: Hops | None = None, link_free: np.ndarray | None = None,
                     chunk_ready: np.ndarray | None = None, seed: int = 0, chunk_order: str = "rarest",
                     local_first: bool = True) -> Schedule:
    """A copy chunk table on a rail-optimized fabric in NIC slots (module docstring).

    Parameters
    ----------
    problem : Problem
        A copy chunk table (one source per chunk) on a fabric with a rail layout.
    hops : Hops, optional
        The fabric's hops (default :func:`solvers.fabric_routes.build_hops`).
    link_free, chunk_ready : array, optional
        A start state; only the empty one (every link free, every chunk ready at 0) is taken.
    seed, chunk_order, local_first
        The fabric greedy's rules in the nodes' spreads.

    Raises
    ------
    SolverError
        Not a copy table with one source per chunk, no rail layout, or a start state (the message says which).
    """
    from .fabric import fabric_copy

    coll = problem.collective
    if not (coll.general and coll.copies):
        raise SolverError(f"rail slots: a copy chunk table only (this is {problem.kind})")
    if (link_free is not None and np.any(np.asarray(link_free) > 0)) or \
            (chunk_ready is not None and np.any(np.asarray(chunk_ready) > 0)):
        raise SolverError("rail slots: from an empty start only (links busy or chunks late here)")
    demand: Demand = problem.demand
    src = demand.source
    if np.any(src < 0):
        raise SolverError("rail slots: every chunk needs one source")
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    hops = build_hops(topo, problem.chunk_bytes) if hops is None else hops
    lay = rail_layout(hops, n, topo.num_links)
    if isinstance(lay, str):
        raise SolverError(f"rail slots: {lay}")
    G, P = len(lay.groups), len(lay.rails)
    grp = np.empty(n, np.int64)
    rail = np.empty(n, np.int64)
    member = np.empty((G, P), np.int64)
    for r, m in enumerate(lay.rails):
        rail[m] = r
        member[np.arange(G), r] = m
    for g, m in enumerate(lay.groups):
        grp[m] = g

    # every (chunk, node) crossing and every spread inside a node
    dv, dc = demand.required_pairs()
    a, b = grp[src[dc]], grp[dv]
    cross = a != b
    jobs = np.sort(dc[cross] * G + b[cross])                                   # (chunk, node) crossings
    jobs = jobs[np.r_[True, jobs[1:] != jobs[:-1]]] if jobs.size else jobs
    jc, jb = jobs // G, jobs % G
    ja = grp[src[jc]]
    def build(balance: bool) -> list:
        # each crossing's rail: its source's, but where that rail's port carries more than the busier node's NICs do
        # on average, another rail of the node, reached over the node's switch first (a pre-hop)
        jh = _balanced_rails(ja, jb, rail[src[jc]], G, P) if balance else rail[src[jc]]
        relay = member[jb, jh]
        key = jc * G + jb
        # the holder a destination is served from: its node's relay, or the source in the source's node
        holder = src[dc].copy()
        holder[cross] = relay[np.searchsorted(key, dc[cross] * G + b[cross])]
        # a crossing's urgency: the most deliveries any GPU it spreads to must take over its node's switch (that
        # GPU's in-link is then busy from the first of them on), then how many GPUs it spreads to
        spread = holder != dv
        inbound = np.bincount(dv[spread], minlength=n)
        fan = np.zeros(len(jc), np.int64)
        urgent = np.zeros(len(jc), np.int64)
        pos = np.searchsorted(key, dc[spread & cross] * G + b[spread & cross])
        np.add.at(fan, pos, 1)
        np.maximum.at(urgent, pos, inbound[dv[spread & cross]])

        # the hop between two GPUs of a node or of a rail (the least duration)
        hop_at = np.full((n, n), -1, np.int64)
        for h in lay.group_hops + lay.rail_hops:
            best = h[np.argsort(-hops.dur[h], kind="stable")]       # the least duration written last, kept
            hop_at[hops.src[best], hops.dst[best]] = best

        slot_of = np.empty(n, np.int64)          # each GPU's place in its node
        for members in lay.groups:
            slot_of[members] = np.arange(len(members))
        free0 = np.zeros(topo.num_links + 1)
        free0[topo.num_links] = -np.inf
        parts = []

        # 0. pre-hops: a crossing moved to another rail first goes over its node's switch to that rail's GPU
        moved = np.flatnonzero(member[ja, jh] != src[jc])
        ready_at = np.zeros(len(jc))             # when each crossing's chunk is at its rail GPU
        if moved.size:
            m_hold, m_dst = src[jc[moved]], member[ja[moved], jh[moved]]
            m_hop = hop_at[m_hold, m_dst]
            pid = m_dst * P + slot_of[m_hold]
            m_order = _queue_order(pid, np.zeros(pid.size), n * P)
            m_start = _spread_kernel(np.zeros(moved.size), m_dst, m_hop, pid, m_order,
                                     *_narrow(hops, m_hop, topo.num_links), topo.num_links, n, P, free0)
            ready_at[moved] = m_start + hops.dur[m_hop]
            parts.append(hop_rows(hops, jc[moved], m_hop, m_start, sort=False))
            # the switch links stay taken for the spreads
            for x in range(hops.link_pad.shape[1]):
                lk = hops.link_pad[m_hop, x]
                np.maximum.at(free0, lk, m_start + hops.end_pad[m_hop, x])
            free0[topo.num_links] = -np.inf

        # 1. slots: per rail, the node x node crossings as matchings; slot k of rail h starts at k x its slot time
        arrive = np.zeros(len(jc))
        for h in range(P):
            on = np.flatnonzero(jh == h)
            if not on.size:
                continue
            span = max(max(float(e) - float(o) for o, e in zip(hops.off[x], hops.end[x])) for x in lay.rail_hops[h])
            counts = np.zeros((G, G), np.int64)
            np.add.at(counts, (ja[on], jb[on]), 1)
            # the slots of each node pair, in order (real crossings before the padding of the same matching)
            slots: dict = {}
            t = 0
            left = counts.copy()
            for perm, w in matchings(counts):
                for i in range(G):
                    j = int(perm[i])
                    k = min(w, int(left[i, j]))
                    if k:
                        slots.setdefault((i, j), []).extend(range(t, t + k))
                        left[i, j] -= k
                t += w
            # within a node pair: the crossings at their rail GPU from the start first, the most urgent first, then
            # the chunk id (a pre-hop's crossing last: its chunk arrives a switch hop late)
            on = on[np.lexsort((jc[on], -fan[on], -urgent[on], ready_at[on] > 0, jb[on], ja[on]))]
            pair = ja[on] * G + jb[on]
            first = np.r_[0, np.flatnonzero(np.diff(pair)) + 1]
            slot = np.empty(on.size, np.int64)
            for s0, s1 in zip(first.tolist(), np.r_[first[1:], on.size].tolist()):
                slot[s0:s1] = slots[(int(ja[on[s0]]), int(jb[on[s0]]))]
            hop = hop_at[member[ja[on], h], relay[on]]
            if np.any(hop < 0):
                raise SolverError("rail slots: two GPUs of a rail have no hop between them")
            start = slot * span
            if np.any(start < ready_at[on]):
                raise _Late()
            arrive[on] = start + hops.dur[hop]
            parts.append(hop_rows(hops, jc[on], hop, start, sort=False))

        # 2. spreads: each chunk from its holder in a node to the node's GPUs that need it, as it lands there
        sp = np.flatnonzero(spread)
        d_chunk, d_hold, d_dst = dc[sp], holder[sp], dv[sp]
        d_hop = hop_at[d_hold, d_dst]
        if np.any(d_hop < 0):
            raise SolverError("rail slots: a GPU of a node has no hop to another over the node's switch")
        d_ready = np.zeros(sp.size)
        crossed = cross[sp]
        d_ready[crossed] = arrive[np.searchsorted(key, d_chunk[crossed] * G + b[sp][crossed])]
        pid = d_dst * P + slot_of[d_hold]
        start = _spread_kernel(d_ready, d_dst, d_hop, pid, _queue_order(pid, d_ready, n * P),
                               *_narrow(hops, d_hop, topo.num_links), topo.num_links, n, P, free0)
        parts.append(hop_rows(hops, d_chunk, d_hop, start, sort=False))
        return parts

    try:
        parts = build(balance=True)
    except _Late:       # a moved crossing's slot comes before its pre-hop lands: every crossing on its own rail
        parts = build(balance=False)
    # the rows as they were made (schedule.csv writes them in the canonical order)
    return Schedule.concat(parts)


class _Late(Exception):
    """A crossing moved to another rail got a slot before its pre-hop lands."""


def _balanced_rails(ja: np.ndarray, jb: np.ndarray, jh: np.ndarray, G: int, P: int) -> np.ndarray:
    """Each crossing's rail (``jh``: its source's): a crossing whose rail port, sending or receiving, carries more
    than ``target`` (what the busier end's node carries per NIC, rounded up) moves to the least loaded rail whose
    ports at both ends have room, the crossings of the most loaded ports first; the NICs then need fewer slots."""
    out = np.zeros((P, G), np.int64)
    into = np.zeros((P, G), np.int64)
    np.add.at(out, (jh, ja), 1)
    np.add.at(into, (jh, jb), 1)
    target = int(max(np.ceil(out.sum(axis=0) / P).max(initial=0), np.ceil(into.sum(axis=0) / P).max(initial=0)))
    if max(out.max(initial=0), into.max(initial=0)) <= target:
        return jh.copy()
    order = np.argsort(-np.maximum(out[jh, ja], into[jh, jb]), kind="stable")
    return _move_crossings(order, ja, jb, jh.copy(), out, into, target)


@njit(cache=True)
def _move_crossings(order, ja, jb, jh, out, into, target):
    P = out.shape[0]
    for i in order:
        h, a, b = jh[i], ja[i], jb[i]
        if out[h, a] <= target and into[h, b] <= target:
            continue
        k = -1
        best = target
        for r in range(P):
            if r != h and max(out[r, a], into[r, b]) < best:
                best = max(out[r, a], into[r, b])
                k = r
        if k < 0:
            continue
        out[h, a] -= 1
        into[h, b] -= 1
        out[k, a] += 1
        into[k, b] += 1
        jh[i] = k
    return jh


@njit(cache=True, inline="always")
def _earliest(h, t, free, link_pad, off_pad):
    """When hop ``h`` may start, at ``t`` or later, as its links are reserved now."""
    s = t
    for x in range(link_pad.shape[1]):
        s = max(s, free[link_pad[h, x]] - off_pad[h, x])
    return s


def _narrow(hops: Hops, used: np.ndarray, L: int) -> tuple:
    """``hops``' padded link, offset and end columns cut to the most links any hop in ``used`` holds (a node's
    switch hop holds two, a hop over a spine more: the spread kernel reads every column of each hop it looks at)."""
    width = max(1, int((hops.link_pad[np.unique(used)] < L).sum(axis=1).max())) if used.size else 1
    return tuple(np.ascontiguousarray(a[:, :width]) for a in (hops.link_pad, hops.off_pad, hops.end_pad))


@njit(cache=True)
def _queue_order(pid, ready, Q):
    """The deliveries sorted by queue ``pid`` (``0 .. Q-1``), then ready time, ties in index order: a counting sort
    by queue and a stable sort inside each (what ``np.lexsort((index, ready, pid))`` gives, 3.6x sooner on the
    64-GPU MoE layer's 1.8 M deliveries)."""
    D = pid.shape[0]
    ptr = np.zeros(Q + 1, np.int64)
    for k in range(D):
        ptr[pid[k] + 1] += 1
    for i in range(Q):
        ptr[i + 1] += ptr[i]
    pos = ptr[:-1].copy()
    order = np.empty(D, np.int64)
    for k in range(D):
        order[pos[pid[k]]] = k
        pos[pid[k]] += 1
    for q in range(Q):
        a, b = ptr[q], ptr[q + 1]
        if b - a > 1:
            seg = order[a:b].copy()
            order[a:b] = seg[np.argsort(ready[seg], kind="mergesort")]
    return order


@njit(cache=True)
def _spread_kernel(ready, d_dst, d_hop, pid, order, link_pad, off_pad, end_pad, L, n, P, free0):
    """Every delivery (a chunk from its holder to one GPU over the node's switch) as a non-delay schedule: a GPU
    whose in-link is free takes the earliest-ready delivery whose chunk is there and whose hop's links are free
    (GPUs with more deliveries still to take first when several wake at once). Deliveries queue per (receiver,
    holder) (``pid``: receiver x ``P`` + the holder's place in its node; ``order`` sorts them by queue, then ready
    time). A GPU wakes at the soonest time the head of one of its queues could start with the links reserved so
    far; reservations only grow, so that time is never too late, and if nothing can start then it wakes again
    at the next such time (waking the GPUs that wait on a holder whenever its out-link frees found nothing on
    ~1.5 wake-ups a delivery and is not done). ``free0``: when each link is first free. Returns each delivery's
    start."""
    D = d_hop.shape[0]
    free = free0.copy()
    start = np.full(D, -1.0)
    qptr = np.zeros(n * P + 1, np.int64)
    for k in range(D):
        qptr[pid[k] + 1] += 1
    for i in range(n * P):
        qptr[i + 1] += qptr[i]
    head = qptr[:-1].copy()
    todo = np.zeros(n, np.int64)
    for k in range(D):
        todo[d_dst[k]] += 1
    # each GPU's one pending wake-up: (due, -deliveries left then, GPU) in an indexed binary heap of the GPUs
    # (a heap of tuples with stale entries gave the same order but spent most of the kernel on ~3.6 pops a
    # delivery)
    due = np.full(n, np.inf)
    kk = np.zeros(n, np.int64)
    heap = np.empty(n, np.int64)
    hpos = np.full(n, -1, np.int64)
    size = 0
    for v in range(n):
        if todo[v]:
            t0 = np.inf
            for j in range(P):
                q = v * P + j
                if head[q] < qptr[q + 1]:
                    t0 = min(t0, ready[order[head[q]]])
            size = _wake(heap, hpos, due, kk, size, v, t0, todo)
    while size:
        v = heap[0]
        t = due[v]
        size -= 1
        hpos[v] = -1
        if size:
            heap[0] = heap[size]
            hpos[heap[0]] = 0
            _sift_down(heap, hpos, due, kk, size, 0)
        due[v] = np.inf
        if todo[v] == 0:
            continue
        eps = 1e-9 * max(1.0, abs(t))
        best = -1
        nxt = np.inf
        for j in range(P):
            q = v * P + j
            if head[q] == qptr[q + 1]:
                continue
            k = order[head[q]]
            s = _earliest(d_hop[k], ready[k], free, link_pad, off_pad)
            if s <= t + eps:
                if best < 0 or ready[k] < ready[best]:
                    best = k
            elif s < nxt:
                nxt = s
        if best < 0:
            size = _wake(heap, hpos, due, kk, size, v, nxt, todo)
            continue
        h = d_hop[best]
        start[best] = t
        for x in range(link_pad.shape[1]):
            lk = link_pad[h, x]
            if lk < L:
                free[lk] = t + end_pad[h, x]
        head[pid[best]] += 1
        todo[v] -= 1
        # its in-link is taken until then: it looks again (the GPUs that wait on the holder's out-link already
        # wake no sooner than they could start)
        again = _earliest(h, t, free, link_pad, off_pad)
        size = _wake(heap, hpos, due, kk, size, v, again, todo)
    return start


@njit(cache=True, inline="always")
def _before(due, kk, a, b):
    """GPU ``a``'s wake-up comes before ``b``'s: by time, then the more deliveries left, then the id."""
    if due[a] != due[b]:
        return due[a] < due[b]
    if kk[a] != kk[b]:
        return kk[a] < kk[b]
    return a < b


@njit(cache=True, inline="always")
def _sift_down(heap, hpos, due, kk, size, i):
    while True:
        a = 2 * i + 1
        if a >= size:
            return
        c = a + 1 if a + 1 < size and _before(due, kk, heap[a + 1], heap[a]) else a
        if not _before(due, kk, heap[c], heap[i]):
            return
        _swap(heap, hpos, i, c)
        i = c


@njit(cache=True, inline="always")
def _swap(heap, hpos, i, j):
    heap[i], heap[j] = heap[j], heap[i]
    hpos[heap[i]] = i
    hpos[heap[j]] = j


@njit(cache=True, inline="always")
def _wake(heap, hpos, due, kk, size, v, t, todo):
    """Wake ``v`` at ``t`` unless it has nothing left or wakes no later already; returns the heap's size."""
    if todo[v] == 0 or t >= due[v]:
        return size
    due[v] = t
    kk[v] = -todo[v]
    i = hpos[v]
    if i < 0:
        i = size
        heap[i] = v
        hpos[v] = i
        size += 1
    while i > 0:   # an earlier wake-up only moves up
        p = (i - 1) >> 1
        if not _before(due, kk, heap[i], heap[p]):
            break
        _swap(heap, hpos, i, p)
        i = p
    return size


def warmup() -> None:
    """Compile (or load from numba's cache) the spread kernel on a tiny problem."""
    from tacos_bench.collective import Collective
    from tacos_bench.moe import dispatch_demand, moe_routing
    from tacos_bench.topology.fabrics import rail_cluster

    t = rail_cluster(2, 2)
    rail_slots_table(Problem(t, Collective("moe_dispatch", demand=dispatch_demand(
        moe_routing(4, tokens_per_npu=2, hidden=8, experts=4, top_k=2, seed=0)))))
    one = np.zeros(2, np.int64)
    _move_crossings(np.arange(2), one, one + 1, one, np.array([[2, 0], [0, 0]]), np.array([[0, 2], [0, 0]]), 1)
