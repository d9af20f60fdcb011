"""Unicast routing by reservation (numba): each chunk in turn takes its earliest-arrival path through the
links already reserved, and reserves it.

Chunks go one at a time in a given order (``greedy_plus`` uses the farthest first, ties in seeded random
order). A chunk's path is a time-dependent shortest path: from a node reached at time ``a``, link ``l``
can carry it in the earliest gap of ``l``'s reservations that starts at or after ``a`` and lasts the link
time (the chunk may wait at a node). Earliest-fit is monotone in ``a`` (a later arrival never finds an
earlier gap), so Dijkstra's label setting is exact for each chunk given the earlier chunks' reservations.
The result is a valid schedule by construction: no two reservations on a link overlap and every hop starts
after the previous one ends.

Each link's reservations are a singly linked list sorted by start, in one pool; a probe walks the list
from its head, so the work is (chunks) x (links probed) x (reservations per link): meant for rooted
unicast collectives (Scatter, and Gather time-reversed), where the chunks are few.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos_bench.graph import pair_pop, pair_push

NONE = -1


@njit(cache=True)
def _fit(head, nxt, rs, re, l, a, dur):
    """Earliest start >= a of a gap of length dur on link l; also the pool slot it follows (NONE: the head)."""
    s = a
    prev = NONE
    k = head[l]
    while k != NONE:
        if re[k] <= s:
            prev = k
            k = nxt[k]
            continue
        if s + dur <= rs[k] * (1 + 1e-12) + 1e-12:
            return s, prev
        s = max(s, re[k])
        prev = k
        k = nxt[k]
    return s, prev


@njit(cache=True)
def reserve_routes(N, out_ptr, lsrc, ldst, lt, hptr, hnode, htime, cdst, link_free, order, out_chunk, out_link,
                   out_start, out_end):
    """Route the chunks ``order[0], order[1], ...`` to ``cdst[c]``, each on its earliest-arrival path given
    the reservations before it, from any of its holders ``hnode[hptr[c]:hptr[c + 1]]`` (holding it from
    ``htime``); link ``l`` is reserved over ``[0, link_free[l])`` to begin with (an earlier transfer). Returns
    the number of transfers written (-1: a chunk could not reach its destination, -2: the output is too
    small)."""
    M = ldst.shape[0]
    cap = out_chunk.shape[0]
    pool = cap + M
    head = np.full(M, NONE, np.int64)
    nxt = np.full(pool, NONE, np.int64)
    rs = np.zeros(pool)
    re = np.zeros(pool)
    used = 0
    for l in range(M):
        if link_free[l] > 0.0:
            rs[used] = -np.inf
            re[used] = link_free[l]
            head[l] = used
            used += 1
    arr = np.full(N, np.inf)
    done = np.zeros(N, np.bool_)
    via = np.full(N, NONE, np.int64)
    via_s = np.zeros(N)
    touched = np.empty(N, np.int64)
    hk = np.empty(M + 2 * N + 1)
    hv = np.empty(M + 2 * N + 1, np.int64)
    path = np.empty(N, np.int64)
    n_out = 0
    for oi in range(order.shape[0]):
        c = order[oi]
        v = cdst[c]
        held = False
        for i in range(hptr[c], hptr[c + 1]):
            if hnode[i] == v:
                held = True
        if held:
            continue
        nt = 0
        size = 0
        for i in range(hptr[c], hptr[c + 1]):
            u = hnode[i]
            if htime[i] < arr[u]:
                if arr[u] == np.inf:
                    touched[nt] = u
                    nt += 1
                arr[u] = htime[i]
                size = pair_push(hk, hv, size, htime[i], u)
        while size > 0:
            a, u, size = pair_pop(hk, hv, size)
            if done[u]:
                continue
            done[u] = True
            if u == v:
                break
            for l in range(out_ptr[u], out_ptr[u + 1]):
                w = ldst[l]
                if done[w]:
                    continue
                st, _ = _fit(head, nxt, rs, re, l, a, lt[l])
                e = st + lt[l]
                if e < arr[w]:
                    if arr[w] == np.inf:
                        touched[nt] = w
                        nt += 1
                    arr[w] = e
                    via[w] = l
                    via_s[w] = st
                    size = pair_push(hk, hv, size, e, w)
        if not done[v]:
            return -1
        # the path, destination first, back to the holder it started from
        hops = 0
        x = v
        while via[x] != NONE:
            l = via[x]
            path[hops] = l
            hops += 1
            x = lsrc[l]
        if n_out + hops > cap:
            return -2
        for h in range(hops - 1, -1, -1):
            l = path[h]
            w = ldst[l]
            st = via_s[w]
            # insert the reservation [st, st + lt) into l's sorted list
            _, prev = _fit(head, nxt, rs, re, l, st, lt[l])
            k = used
            used += 1
            rs[k] = st
            re[k] = st + lt[l]
            if prev == NONE:
                nxt[k] = head[l]
                head[l] = k
            else:
                nxt[k] = nxt[prev]
                nxt[prev] = k
            out_chunk[n_out] = c
            out_link[n_out] = l
            out_start[n_out] = st
            out_end[n_out] = st + lt[l]
            n_out += 1
        for i in range(nt):
            u = touched[i]
            arr[u] = np.inf
            done[u] = False
            via[u] = NONE
    return n_out
