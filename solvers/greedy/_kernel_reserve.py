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
collectives, where the chunks are few: unicast (Scatter, and Gather time-reversed: :func:`reserve_routes`) and
multicast (Broadcast, and Reduce time-reversed: :func:`reserve_multicast`, which routes (chunk, NPU) requests;
every NPU a path passes keeps its copy and serves the later requests for that chunk).
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
def _pool(M, cap, link_free):
    """Empty reservation lists with room for ``cap`` reservations; link ``l`` busy over ``[0, link_free[l])``."""
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
    return head, nxt, rs, re, used


@njit(cache=True)
def _earliest_path(v, size, hk, hv, arr, done, via, via_s, touched, nt, out_ptr, ldst, lt, head, nxt, rs, re):
    """Label setting from the holders already on the heap (their ``arr`` set, listed in ``touched[:nt]``)
    until ``v`` is settled; returns the new ``nt``. A holder is settled at its own time before any path could
    reach it later, so it keeps its copy."""
    while size > 0:
        a, u, size = pair_pop(hk, hv, size)
        if done[u]:
            continue
        done[u] = True
        if u == v:
            break
        for l in range(out_ptr[u], out_ptr[u + 1]):
            w = ldst[l]
            if done[w] or a + lt[l] >= arr[w]:     # settled, or no gap could beat its label (a holder's, mostly)
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
    return nt


@njit(cache=True)
def _book_path(v, c, via, via_s, lsrc, ldst, lt, head, nxt, rs, re, used, path, out_chunk, out_link, out_start,
               out_end, n_out):
    """Reserve the path found to ``v`` (``via``, back to a holder) and write its hops from ``n_out`` on;
    returns ``(n_out, used)``, ``n_out`` -2 when the output is too small."""
    hops = 0
    x = v
    while via[x] != NONE:
        l = via[x]
        path[hops] = l
        hops += 1
        x = lsrc[l]
    if n_out + hops > out_chunk.shape[0]:
        return -2, used
    for h in range(hops - 1, -1, -1):
        l = path[h]
        st = via_s[ldst[l]]
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
    return n_out, used


@njit(cache=True)
def _scratch(N, M):
    """The label-setting search's arrays: ``arr, done, via, via_s, touched, hk, hv, path``."""
    return (np.full(N, np.inf), np.zeros(N, np.bool_), np.full(N, NONE, np.int64), np.zeros(N),
            np.empty(N, np.int64), np.empty(M + 2 * N + 1), np.empty(M + 2 * N + 1, np.int64),
            np.empty(N, np.int64))


@njit(cache=True)
def _seed(u, t, arr, touched, nt, hk, hv, size):
    """Put holder ``u`` (holding from ``t``; ``inf``: not a holder) on the search heap, unless it is there at an
    earlier time; returns ``(nt, size)``."""
    if t < arr[u]:
        if arr[u] == np.inf:
            touched[nt] = u
            nt += 1
        arr[u] = t
        size = pair_push(hk, hv, size, t, u)
    return nt, size


@njit(cache=True)
def _serve(v, c, size, nt, sc, out_ptr, lsrc, ldst, lt, head, nxt, rs, re, used, out_chunk, out_link, out_start,
           out_end, n_out):
    """Route chunk ``c`` to ``v`` from the holders on the heap (:func:`_earliest_path`), book the path
    (:func:`_book_path`) and reset the search; returns ``(n_out, used)``, ``n_out`` -1 when ``v`` cannot be
    reached and -2 when the output is too small."""
    arr, done, via, via_s, touched, hk, hv, path = sc
    nt = _earliest_path(v, size, hk, hv, arr, done, via, via_s, touched, nt, out_ptr, ldst, lt, head, nxt, rs, re)
    if not done[v]:
        return -1, used
    n_out, used = _book_path(v, c, via, via_s, lsrc, ldst, lt, head, nxt, rs, re, used, path, out_chunk, out_link,
                             out_start, out_end, n_out)
    for i in range(nt):
        u = touched[i]
        arr[u] = np.inf
        done[u] = False
        via[u] = NONE
    return n_out, used


@njit(cache=True)
def reserve_routes(N, out_ptr, lsrc, ldst, lt, hptr, hnode, htime, cdst, link_free, order, out_chunk, out_link,
                   out_start, out_end):
    """Route the chunks ``order[0], order[1], ...`` to ``cdst[c]``, each on its earliest-arrival path given
    the reservations before it, from any of its holders ``hnode[hptr[c]:hptr[c + 1]]`` (holding it from
    ``htime``); link ``l`` is reserved over ``[0, link_free[l])`` to begin with (an earlier transfer). Returns
    the number of transfers written (-1: a chunk could not reach its destination, -2: the output is too
    small)."""
    M = ldst.shape[0]
    head, nxt, rs, re, used = _pool(M, out_chunk.shape[0], link_free)
    sc = _scratch(N, M)
    arr, touched, hk, hv = sc[0], sc[4], sc[5], sc[6]
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
            nt, size = _seed(hnode[i], htime[i], arr, touched, nt, hk, hv, size)
        n_out, used = _serve(v, c, size, nt, sc, out_ptr, lsrc, ldst, lt, head, nxt, rs, re, used, out_chunk,
                             out_link, out_start, out_end, n_out)
        if n_out < 0:
            return n_out
    return n_out


@njit(cache=True)
def reserve_multicast(N, out_ptr, lsrc, ldst, lt, hold, req_chunk, req_npu, link_free, out_chunk, out_link,
                      out_start, out_end):
    """Serve the requests ``(req_chunk[i], req_npu[i])`` in order, each on its earliest-arrival path given the
    reservations before it, from any NPU holding the chunk (``hold[c, u]``: from when ``u`` holds chunk ``c``,
    ``inf``: not); every NPU on the path then holds the chunk from the path's arrival there (``hold`` is
    updated in place), and a request whose NPU holds the chunk already is skipped. Link ``l`` is reserved over
    ``[0, link_free[l])`` to begin with. Returns the number of transfers written (-1: an NPU could not be
    reached, -2: the output is too small)."""
    M = ldst.shape[0]
    head, nxt, rs, re, used = _pool(M, out_chunk.shape[0], link_free)
    sc = _scratch(N, M)
    arr, touched, hk, hv = sc[0], sc[4], sc[5], sc[6]
    n_out = 0
    for i in range(req_chunk.shape[0]):
        c = req_chunk[i]
        v = req_npu[i]
        if hold[c, v] < np.inf:
            continue
        nt = 0
        size = 0
        for u in range(N):
            nt, size = _seed(u, hold[c, u], arr, touched, nt, hk, hv, size)
        first = n_out
        n_out, used = _serve(v, c, size, nt, sc, out_ptr, lsrc, ldst, lt, head, nxt, rs, re, used, out_chunk,
                             out_link, out_start, out_end, n_out)
        if n_out < 0:
            return n_out
        for k in range(first, n_out):
            hold[c, ldst[out_link[k]]] = out_end[k]
    return n_out


@njit(cache=True)
def _lex_order(order, key):
    """``order`` stably re-sorted by ``key[order]``: applied to keys from the least significant up, the
    permutation of ``np.lexsort``."""
    return order[np.argsort(key[order], kind="mergesort")]


@njit(cache=True)
def squeaky_multicast(N, out_ptr, lsrc, ldst, lt, root, req_chunk, req_npu, req_dist, slot, link_free, rnd, run0,
                      runs, rounds, kinds, bound, prio, hold, best, best_chunk, best_link, best_start, best_end,
                      out_chunk, out_link, out_start, out_end):
    """Runs ``run0 .. run0 + runs - 1`` of the squeaky-wheel Broadcast (:func:`solvers.greedy.reserve.
    reserve_broadcast`). At a run divisible by ``rounds`` a fresh priority order, of the kinds ``kinds`` in
    turn: 0, by each request's time in an ideal pipeline (chunk ``k`` leaves the root at ``k * slot``, then its
    shortest time ``req_dist`` to the NPU); 1, by chunk; 2, NPU by NPU; the farther NPU first within each,
    then at random (NPU by NPU: a random key per NPU, then per request). Then each run serves the requests by
    priority, ties by a random key, through :func:`reserve_multicast`, and the late requests (arrival after
    ``bound``) gain priority in proportion to their lateness. Random keys come from ``rnd`` in that order
    (P + N per fresh order, P per run). ``best[0]``, the fastest makespan so far, and ``best_*``, its
    transfers, are updated in place, as are ``prio`` and the scratch ``hold`` (C x N). Returns the runs done
    (fewer once ``best[0]`` is at ``bound``), -1 when a request could not be served."""
    P = req_chunk.shape[0]
    late_gain = P / max(bound, 1e-12)
    r = 0
    done = 0
    for run in range(run0, run0 + runs):
        if best[0] <= bound * (1 + 1e-9):
            break
        if run % rounds == 0:
            key_req = rnd[r:r + P]
            key_npu = rnd[r + P:r + P + N]
            r += P + N
            first = np.argsort(key_req, kind="mergesort")
            kind = kinds[(run // rounds) % kinds.shape[0]]
            if kind == 2:
                first = _lex_order(first, key_npu[req_npu])
            first = _lex_order(first, -req_dist)
            if kind == 0:
                first = _lex_order(first, req_chunk * slot + req_dist)
            elif kind == 1:
                first = _lex_order(first, req_chunk.astype(np.float64))
            for i in range(P):
                prio[first[i]] = -float(i)
        order = np.argsort(rnd[r:r + P], kind="mergesort")
        r += P
        order = _lex_order(order, -prio)
        hold[:, :] = np.inf
        hold[:, root] = 0.0
        n = reserve_multicast(N, out_ptr, lsrc, ldst, lt, hold, req_chunk[order], req_npu[order], link_free,
                              out_chunk, out_link, out_start, out_end)
        if n != P:
            return -1
        done += 1
        ms = out_end.max()
        if ms < best[0] * (1 - 1e-12):
            best[0] = ms
            best_chunk[:] = out_chunk
            best_link[:] = out_link
            best_start[:] = out_start
            best_end[:] = out_end
        for i in range(P):
            a = hold[req_chunk[i], req_npu[i]]
            if a > bound * (1 + 1e-9):
                prio[i] += (a - bound) * late_gain
    return done
