"""The fabric greedy's event loop for unicast chunks (Gather, Scatter, All-to-All, All-to-Allv, a table's
per-destination expansion), compiled (numba).

The rules are those of :mod:`solvers.greedy.fabric` (which documents them and keeps the Python loop as the
reference): the same random draws in the same order (the caller passes the stream of ``rng.random(n)`` per
event), the same candidate chunks per hop, the same ordered matching with one level of augmentation, the same
reservations — so the schedule is the Python loop's, row for row, at the speed per-iteration use asks for.
Holdings are bitsets (64 chunks per word); the chunks at each NPU are indexed once per event (a unicast chunk
has one holder at a time).

Outputs one row per (chunk, hop, segment): ``(chunk, hop, segment, start, end)``; the caller turns hops and
segments into ``src``/``dst``/``route``.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from ._kernel_fabric import _DB_TABLE, _DEBRUIJN, _next_time


@njit(cache=True, inline="always")
def _bit(c):
    return np.uint64(1) << np.uint64(c % 64)


@njit(cache=True, inline="always")
def _next_on_route(c, u, rptr, rnode):
    """The NPU after ``u`` on chunk ``c``'s planned route, or -1 (``u`` not on it)."""
    for j in range(rptr[c], rptr[c + 1] - 1):
        if rnode[j] == u:
            return rnode[j + 1]
    return -1


@njit(cache=True, inline="always")
def _first_valid(u, v, d, bits, hint, off, pos_chunk, has, coming, moving, routed, rptr, rnode):
    """The first chunk (in key order) of the bucket of chunks at ``u`` bound for ``d`` that may go to ``v``
    now, or -1. Empty leading words move the bucket's hint on (chunks only leave a bucket at or after it)."""
    lo = off[d]
    hi = off[d + 1]
    w = hint[u, d]
    lead = True
    while w * 64 < hi:
        x = bits[u, w]
        if w * 64 < lo:
            x &= ~((np.uint64(1) << np.uint64(lo - w * 64)) - np.uint64(1))
        if hi - w * 64 < 64:
            x &= (np.uint64(1) << np.uint64(hi - w * 64)) - np.uint64(1)
        if x == 0:
            if lead:
                hint[u, d] = w + 1
            w += 1
            continue
        lead = False
        while x:
            low = x & (~x + np.uint64(1))
            c = pos_chunk[w * 64 + _DB_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]]
            x ^= low
            wi = c // 64
            b = _bit(c)
            if moving[c] or (has[v, wi] & b) or (coming[v, wi] & b) or not (has[u, wi] & b):
                continue
            if routed and _next_on_route(c, u, rptr, rnode) != v:
                continue
            return c
        w += 1
    return -1


@njit(cache=True, inline="always")
def _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, bcnt, hint, off, pos_chunk, has, coming, moving, dist, key,
                rarest, routed, rptr, rnode):
    """The chunk hop ``h`` would bring ``v`` and its score ``(lead, key)`` (the hop's duration is the score's
    middle term), or chunk -1: as ``fabric._best_chunk`` for unicast chunks. Only the destinations the hop
    brings closer (``qual_d``) are looked at, each through its bucket's first chunk that may go."""
    u = hsrc[h]
    best_c = -1
    best_a = 0.0
    best_k = 2.0
    for j in range(qual_ptr[h], qual_ptr[h + 1]):
        d = qual_d[j]
        if bcnt[u, d] == 0:
            continue
        # rarest: the longest way still to go first (then the key, then the id); random: the key
        a = -dist[u, d] if rarest else 0.0
        if best_c >= 0 and a > best_a:
            continue
        c = _first_valid(u, v, d, bits, hint, off, pos_chunk, has, coming, moving, routed, rptr, rnode)
        if c < 0:
            continue
        k = key[c]
        if best_c < 0 or a < best_a or (a == best_a and (k < best_k or (k == best_k and c < best_c))):
            best_c = c
            best_a = a
            best_k = k
    return best_c, best_a, best_k


@njit(cache=True, inline="always")
def _blocked(h, owner, link_pad, hlen):
    for k in range(hlen[h]):
        if owner[link_pad[h, k]] != -1:
            return True
    return False


@njit(cache=True, inline="always")
def _best_option(v, skip, free, into_ptr, into_idx, owner, link_pad, hlen, hsrc, hdur, qual_ptr, qual_d, bits, bcnt,
                 hint, off, pos_chunk, has, coming, moving, dist, key, rarest, routed, rptr, rnode):
    """The least ``(score, hop, chunk)`` over the free, unblocked hops into ``v`` other than ``skip``: the
    first of ``fabric._match``'s sorted options; (-1, -1) when there is none."""
    bh = -1
    bc = -1
    ba = 0.0
    bd = 0.0
    bk = 0.0
    for j in range(into_ptr[v], into_ptr[v + 1]):
        h = into_idx[j]
        if h == skip or not free[h] or _blocked(h, owner, link_pad, hlen):
            continue
        c, a, k = _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, bcnt, hint, off, pos_chunk, has, coming, moving,
                              dist, key, rarest, routed, rptr, rnode)
        if c < 0:
            continue
        d = hdur[h]
        better = bh < 0
        if not better:
            if a != ba:
                better = a < ba
            elif d != bd:
                better = d < bd
            elif k != bk:
                better = k < bk
            elif h != bh:
                better = h < bh
            else:
                better = c < bc
        if better:
            bh = h
            bc = c
            ba = a
            bd = d
            bk = k
    return bh, bc


@njit(cache=True, inline="always")
def _place(q, v, h, c, pk_v, pk_h, pk_c, hlen, link_pad, owner, moving, had_pick):
    pk_v[q] = v
    pk_h[q] = h
    pk_c[q] = c
    for k in range(hlen[h]):
        owner[link_pad[h, k]] = q
    moving[c] = True
    had_pick[v] = True


@njit(cache=True, inline="always")
def _leave(c, at, dst_of, pos, bits, bcnt, counted, scnt1, scnt2, routed):
    """Chunk ``c`` leaves ``at[c]``: out of its bucket and the senders' counts."""
    u = at[c]
    if u < 0:
        return
    if u != dst_of[c]:
        bits[u, pos[c] // 64] &= ~_bit(pos[c])
        bcnt[u, dst_of[c]] -= 1
    if counted[c] != -2:
        if routed:
            scnt2[u, counted[c]] -= 1
        else:
            scnt1[u] -= 1
        counted[c] = -2


@njit(cache=True, inline="always")
def _join(c, at, dst_of, pos, bits, bcnt, hint, counted, scnt1, scnt2, need_c, has, routed, rptr, rnode):
    """Chunk ``c`` is at ``at[c]``: into its bucket (a chunk at its destination never moves on) and, while it is
    still on its way, the senders' counts."""
    u = at[c]
    d = dst_of[c]
    if u < 0:
        return
    if u != d:
        bits[u, pos[c] // 64] |= _bit(pos[c])
        bcnt[u, d] += 1
        if pos[c] // 64 < hint[u, d]:
            hint[u, d] = pos[c] // 64
    if need_c[c] and not (has[d, c // 64] & _bit(c)):
        if routed:
            nx = _next_on_route(c, u, rptr, rnode)
            if nx >= 0:
                scnt2[u, nx] += 1
                counted[c] = nx
        else:
            scnt1[u] += 1
            counted[c] = -1


@njit(cache=True)
def _qualifying(n, hsrc, hdst, hdur, dist, routed):
    """Per hop ``u -> v``, the destinations ``d`` it may bring a chunk closer to (CSR): ``v`` itself, or ``d``
    with ``v`` on a shortest way (the Python loop's test; on planned routes, whose hop ``u -> v`` may be
    another of the pair's hops, the test with the pair's fastest hop and a looser tolerance: a superset the
    route test then narrows)."""
    H = hsrc.shape[0]
    fast = np.full((n, n), np.inf)
    for h in range(H):
        if hdur[h] < fast[hsrc[h], hdst[h]]:
            fast[hsrc[h], hdst[h]] = hdur[h]
    ptr = np.zeros(H + 1, dtype=np.int64)
    out = []
    for h in range(H):
        u = hsrc[h]
        v = hdst[h]
        for d in range(n):
            if d == v:
                ok = True
            elif routed:
                ok = dist[v, d] + fast[u, v] <= dist[u, d] * (1 + 1e-6) + 1e-6
            else:
                ok = dist[v, d] + hdur[h] <= dist[u, d] * (1 + 1e-9) + 1e-9
            if ok and d != u:
                out.append(d)
        ptr[h + 1] = len(out)
    return ptr, np.array(out, dtype=np.int64)


@njit(cache=True)
def fabric_unicast_kernel(n, C, init_v, init_c, init_t, src_of, dst_of, need_c, key, draws, rarest, routed,
                          rptr, rnode, dist, busy0, hsrc, hdst, hdur, link_pad, off_pad, end_pad, hlen,
                          into_ptr, into_idx, seg_ptr, seg_a, seg_b, order_c):
    """Returns ``(chunk, hop, segment, start, end, missing, events, status)``: ``status`` 0 done, 1 stuck
    (``missing`` (NPU, chunk) pairs unreached), 2 the draws ran out (call again with more)."""
    W = (C + 63) // 64
    L1 = busy0.shape[0]            # links + the padding link (always free)
    H = hsrc.shape[0]
    busy = busy0.copy()
    has = np.zeros((n, W), dtype=np.uint64)
    coming = np.zeros((n, W), dtype=np.uint64)
    got = np.zeros(n, dtype=np.int64)
    at = src_of.copy()              # as the Python loop: at its source before it is ready there
    qual_ptr, qual_d = _qualifying(n, hsrc, hdst, hdur, dist, routed)
    # buckets: chunk c sits at bit pos[c] of bits[at[c]]; positions run by destination, then key, then id
    # (order_c: the chunk at each position)
    pos = np.empty(C, dtype=np.int64)
    pos[order_c] = np.arange(C)
    off = np.zeros(n + 1, dtype=np.int64)
    for c in range(C):
        off[dst_of[c] + 1] += 1
    for d in range(n):
        off[d + 1] += off[d]
    bits = np.zeros((n, W), dtype=np.uint64)
    bcnt = np.zeros((n, n), dtype=np.int64)
    hint = np.zeros((n, n), dtype=np.int64)
    for d in range(n):
        for u in range(n):
            hint[u, d] = off[d] // 64
    # who may send: the holder of a chunk still on its way (on a planned route: to its next NPU only)
    scnt1 = np.zeros(n, dtype=np.int64)
    scnt2 = np.zeros((n, n) if routed else (1, 1), dtype=np.int64)
    counted = np.full(C, -2, dtype=np.int64)      # -2: not counted; else the next NPU counted (-1: any)
    for c in range(C):
        _join(c, at, dst_of, pos, bits, bcnt, hint, counted, scnt1, scnt2, need_c, has, routed, rptr, rnode)
    events = [(0.0, np.int64(0), np.int64(0))]
    events.pop()
    for i in range(init_v.shape[0]):
        s = init_v[i]
        c = init_c[i]
        if not (coming[s, c // 64] & _bit(c)):
            coming[s, c // 64] |= _bit(c)
            got[s] += 1
        heapq.heappush(events, (init_t[i], np.int64(s), np.int64(c)))
    missing = 0
    for c in range(C):
        if need_c[c]:
            missing += 1
    r_chunk = []
    r_hop = []
    r_seg = []
    r_start = []
    r_end = []
    owner = np.full(L1, -1, dtype=np.int64)
    moving = np.zeros(C, dtype=np.bool_)
    had_pick = np.zeros(n, dtype=np.bool_)
    free = np.zeros(H, dtype=np.bool_)
    any_free = np.zeros(n, dtype=np.bool_)
    pk_v = np.empty(L1, dtype=np.int64)
    pk_h = np.empty(L1, dtype=np.int64)
    pk_c = np.empty(L1, dtype=np.int64)
    t = init_t.min()
    n_events = 0
    while True:
        eps = 1e-9 * max(1.0, abs(t))
        while len(events) > 0 and events[0][0] <= t + eps:
            e = heapq.heappop(events)
            v = e[1]
            c = e[2]
            wi = c // 64
            if not (has[v, wi] & _bit(c)):
                has[v, wi] |= _bit(c)
                coming[v, wi] &= ~_bit(c)
                if need_c[c] and dst_of[c] == v:
                    missing -= 1
                _leave(c, at, dst_of, pos, bits, bcnt, counted, scnt1, scnt2, routed)
                at[c] = v
                _join(c, at, dst_of, pos, bits, bcnt, hint, counted, scnt1, scnt2, need_c, has, routed, rptr,
                      rnode)
        if missing == 0:
            break
        if (n_events + 1) * n > draws.shape[0]:
            return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64),
                    np.array(r_seg, dtype=np.int64), np.array(r_start), np.array(r_end), missing, n_events, 2)
        # the neediest receivers first, ties by this event's draws (np.lexsort((draws, got)))
        r = draws[n_events * n:(n_events + 1) * n]
        o1 = np.argsort(r, kind="mergesort")
        order = o1[np.argsort(got[o1], kind="mergesort")]
        n_events += 1
        any_free[:] = False
        for h in range(H):
            ok = scnt2[hsrc[h], hdst[h]] > 0 if routed else scnt1[hsrc[h]] > 0
            if ok:
                for k in range(hlen[h]):
                    if busy[link_pad[h, k]] > t + off_pad[h, k] + eps:
                        ok = False
                        break
            free[h] = ok
            if ok:
                any_free[hdst[h]] = True
        # ---- greedy matching, in order
        npk = 0
        for oi in range(n):
            v = order[oi]
            if not any_free[v]:
                continue
            while True:
                bh, bc = _best_option(v, -1, free, into_ptr, into_idx, owner, link_pad, hlen, hsrc, hdur, qual_ptr,
                                      qual_d, bits, bcnt, hint, off, order_c, has, coming, moving,
                                      dist, key, rarest, routed, rptr, rnode)
                if bh < 0:
                    break
                _place(npk, v, bh, bc, pk_v, pk_h, pk_c, hlen, link_pad, owner, moving, had_pick)
                npk += 1
        # ---- augment: a receiver without a pick takes a hop held by one other pick that can move
        for oi in range(n):
            v = order[oi]
            if had_pick[v] or not any_free[v]:
                continue
            for j in range(into_ptr[v], into_ptr[v + 1]):
                h = into_idx[j]
                if not free[h]:
                    continue
                kb = -1
                one = True
                for k in range(hlen[h]):
                    o = owner[link_pad[h, k]]
                    if o >= 0:
                        if kb >= 0 and o != kb:
                            one = False
                            break
                        kb = o
                if not one or kb < 0:
                    continue
                c, a, kk = _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, bcnt, hint, off, order_c, has, coming,
                                       moving, dist, key, rarest, routed, rptr, rnode)
                if c < 0:
                    continue
                w = pk_v[kb]
                hw = pk_h[kb]
                cw = pk_c[kb]
                for k in range(hlen[hw]):
                    owner[link_pad[hw, k]] = -1
                for k in range(hlen[h]):
                    if owner[link_pad[h, k]] == -1:
                        owner[link_pad[h, k]] = -2
                moving[cw] = False
                h2, c2 = _best_option(w, hw, free, into_ptr, into_idx, owner, link_pad, hlen, hsrc, hdur, qual_ptr,
                                      qual_d, bits, bcnt, hint, off, order_c, has, coming, moving, dist, key, rarest,
                                      routed, rptr, rnode)
                for k in range(hlen[h]):
                    if owner[link_pad[h, k]] == -2:
                        owner[link_pad[h, k]] = -1
                if h2 >= 0:
                    _place(kb, w, h2, c2, pk_v, pk_h, pk_c, hlen, link_pad, owner, moving, had_pick)
                    _place(npk, v, h, c, pk_v, pk_h, pk_c, hlen, link_pad, owner, moving, had_pick)
                    npk += 1
                    break
                for k in range(hlen[hw]):
                    owner[link_pad[hw, k]] = kb
                moving[cw] = True
        # ---- commit, in pick order (picks hold disjoint links: a unicast transfer grows no tree)
        for q in range(npk):
            v = pk_v[q]
            h = pk_h[q]
            c = pk_c[q]
            wi = c // 64
            if (has[v, wi] & _bit(c)) or (coming[v, wi] & _bit(c)):
                continue
            okh = True
            for k in range(hlen[h]):
                if busy[link_pad[h, k]] > t + off_pad[h, k] + eps:
                    okh = False
                    break
            if not okh:
                continue
            _leave(c, at, dst_of, pos, bits, bcnt, counted, scnt1, scnt2, routed)
            at[c] = -1
            en = t
            for sidx in range(seg_ptr[h], seg_ptr[h + 1]):
                a0 = seg_a[sidx]
                st = t + off_pad[h, a0]
                en = t + end_pad[h, a0]
                for k in range(a0, seg_b[sidx] + 1):
                    l = link_pad[h, k]
                    if busy[l] < en:
                        busy[l] = en
                r_chunk.append(c)
                r_hop.append(h)
                r_seg.append(sidx)
                r_start.append(st)
                r_end.append(en)
            w = hdst[h]
            coming[w, wi] |= _bit(c)
            got[w] += 1
            heapq.heappush(events, (en, np.int64(w), np.int64(c)))
        # reset this event's marks
        for q in range(npk):
            moving[pk_c[q]] = False
            had_pick[pk_v[q]] = False
            for k in range(hlen[pk_h[q]]):
                owner[link_pad[pk_h[q], k]] = -1
        nxt = _next_time(events, busy, t, eps)
        if nxt == np.inf:
            return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64),
                    np.array(r_seg, dtype=np.int64), np.array(r_start), np.array(r_end), missing, n_events, 1)
        t = nxt
    return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64), np.array(r_seg, dtype=np.int64),
            np.array(r_start), np.array(r_end), missing, n_events, 0)
