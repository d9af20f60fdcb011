"""The greedy for unicast collectives (gather, scatter, all-to-all): TACOS matching with routing.

Every chunk has one source and one destination. As in the TACOS rule, time advances event by event and
every idle link starts a chunk its sender holds whenever it has one; a chunk may only move where it gets
closer to its destination: over a link ``u->w`` on a shortest path (by link time) from ``u`` to it,
``t_l + D(w, d) <= D(u, d)``. Each link keeps a first-in first-out queue of the chunks resident at its
sender that it may carry; a chunk waiting for several forward links goes to whichever becomes idle first,
which spreads the load over every shortest path (multipath routing). Chunks enter the queues of their
source in an order drawn from the seed (``chunk_order=random``) or in chunk-id order (``chunk_order=rarest``
has no meaning here and is refused by the solver), later ones in arrival order.

The event loop is one call; it returns the transfers (:class:`~solvers.greedy._kernel_common.Transfers`) and
counters (``U_*``). Queue entries come from a pool sized by the caller; ``ST_GROW`` asks for a larger one (the
run is deterministic, so the caller reruns it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from tacos_bench.graph import dijkstra, pair_pop, pair_push

from ._kernel_common import EVENT_REL, FORWARD_REL, ST_DONE, ST_GROW, ST_STUCK
from ._kernel_common import shuffle as shuffle_in_place

# counters in ``stats``
U_EVENTS, U_STALE = 0, 1   # events; queue entries dropped because their chunk had left the sender
NUM_UNICAST_STATS = 2


class LinkQueues(NamedTuple):
    """A FIFO queue per link of the chunks resident at its sender that it may carry, as linked lists in a
    shared pool of entries."""

    head: np.ndarray   # int64 [M]: first entry of each link's queue, -1 empty
    tail: np.ndarray   # int64 [M]: last entry, -1 empty
    next: np.ndarray   # int64 [pool]: the entry after each entry, -1 last
    chunk: np.ndarray  # int64 [pool]: the chunk of each entry


@njit(cache=True)
def distances_to(N, in_ptr, in_src, lt_in):
    """``D[u, d]``: shortest-path time from ``u`` to ``d`` (one Dijkstra per destination on the reversed links)."""
    D = np.empty((N, N))
    dist = np.empty(N)
    pred = np.empty(N, np.int64)
    cap = lt_in.shape[0] + 1
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    for d in range(N):
        dijkstra(in_ptr, in_src, lt_in, d, dist, pred, hk, hv)
        for u in range(N):
            D[u, d] = dist[u]
    return D


@njit(cache=True, inline="always")
def _enqueue(c, u, dest, D, links, lq, npool):
    """Put chunk ``c`` (resident at ``u``, bound for ``dest``) on the queue of every forward out-link of ``u``;
    returns the new pool size, or -1 when the pool is full."""
    out_ptr, ldst, lt = links.out_ptr, links.dst, links.time
    qhead, qtail, pnext, pchunk = lq.head, lq.tail, lq.next, lq.chunk
    cap = pchunk.shape[0]
    du = D[u, dest]
    for l in range(out_ptr[u], out_ptr[u + 1]):
        w = ldst[l]
        if lt[l] + D[w, dest] <= du * (1.0 + FORWARD_REL) + 1e-12:
            if npool >= cap:
                return -1
            e = npool
            npool += 1
            pchunk[e] = c
            pnext[e] = -1
            if qtail[l] < 0:
                qhead[l] = e
            else:
                pnext[qtail[l]] = e
            qtail[l] = e
    return npool


@njit(cache=True)
def run_unicast(N, C, links, D, src_of, dst_of, shuffle, farthest, rng, cap, out, stats):
    """Synthesize into the ``out`` buffers with a queue pool of ``cap`` entries. Returns ``(status, transfers)``."""
    lsrc, ldst, lt, out_ptr = links.src, links.dst, links.time, links.out_ptr
    out_c, out_l, out_s, out_e = out.chunk, out.link, out.start, out.end
    M = lsrc.shape[0]
    lq = LinkQueues(head=np.full(M, -1, np.int64), tail=np.full(M, -1, np.int64), next=np.empty(cap, np.int64),
                    chunk=np.empty(cap, np.int64))
    qhead, qtail, pnext, pchunk = lq.head, lq.tail, lq.next, lq.chunk
    npool = 0
    pos = np.full(C, -1, np.int64)       # the NPU a chunk rests at; -1 in flight or delivered
    busy = np.zeros(M, np.bool_)
    lchunk = np.full(M, -1, np.int64)
    hk = np.empty(M + 1)
    hv = np.empty(M + 1, np.int64)
    hsize = 0
    order = np.arange(C)
    if shuffle:
        shuffle_in_place(rng, order)
    if farthest:  # longest remaining path first (stable: the shuffled order breaks ties)
        key = np.empty(C)
        for i in range(C):
            c = order[i]
            key[i] = -D[src_of[c], dst_of[c]] if src_of[c] != dst_of[c] else 0.0
        order = order[np.argsort(key, kind="mergesort")]
    remaining = 0
    for i in range(C):
        c = order[i]
        if src_of[c] == dst_of[c]:
            continue  # already where it must be
        remaining += 1
        pos[c] = src_of[c]
        npool = _enqueue(c, src_of[c], dst_of[c], D, links, lq, npool)
        if npool < 0:
            return ST_GROW, 0
    touched = np.arange(N)
    nt = N
    stamp = np.full(N, -1, np.int64)
    nout = 0
    now = 0.0
    ev = 0
    while True:
        stats[U_EVENTS] += 1
        for ti in range(nt):
            u = touched[ti]
            for l in range(out_ptr[u], out_ptr[u + 1]):
                if busy[l]:
                    continue
                e = qhead[l]
                while e >= 0 and pos[pchunk[e]] != u:  # sent over another link, or moved on: drop
                    e = pnext[e]
                    stats[U_STALE] += 1
                qhead[l] = e
                if e < 0:
                    qtail[l] = -1
                    continue
                c = pchunk[e]
                qhead[l] = pnext[e]
                if qhead[l] < 0:
                    qtail[l] = -1
                pos[c] = -1
                busy[l] = True
                lchunk[l] = c
                end = now + lt[l]
                out_c[nout] = c
                out_l[nout] = l
                out_s[nout] = now
                out_e[nout] = end
                nout += 1
                hsize = pair_push(hk, hv, hsize, end, l)
        if remaining == 0:
            break
        if hsize == 0:
            return ST_STUCK, nout
        ev += 1
        nt = 0
        t0, l, hsize = pair_pop(hk, hv, hsize)
        now = t0
        while True:
            c = lchunk[l]
            w = ldst[l]
            busy[l] = False
            lchunk[l] = -1
            u = lsrc[l]
            if stamp[u] != ev:
                stamp[u] = ev
                touched[nt] = u
                nt += 1
            if w == dst_of[c]:
                remaining -= 1
            else:
                pos[c] = w
                npool = _enqueue(c, w, dst_of[c], D, links, lq, npool)
                if npool < 0:
                    return ST_GROW, nout
                if stamp[w] != ev:
                    stamp[w] = ev
                    touched[nt] = w
                    nt += 1
            if hsize == 0 or hk[0] > t0 + EVENT_REL * max(1.0, t0):
                break
            t1, l, hsize = pair_pop(hk, hv, hsize)
            if t1 > now:
                now = t1
    return ST_DONE, nout
