"""The fabric greedy's event loop for unicast chunks (Gather, Scatter, All-to-All, All-to-Allv, a table's
per-destination expansion), compiled (numba).

The rules are those of :mod:`solvers.greedy.fabric` (which documents them and keeps the Python loop as the
reference): the same random draws in the same order (the caller passes the stream of ``rng.random(n)`` per
event), the same candidate chunks per hop, the same ordered matching with one level of augmentation, the same
reservations — so the schedule is the Python loop's, row for row, at the speed per-iteration use asks for.
Holdings are bitsets (64 chunks per word); the chunks at each NPU sit in per-destination buckets in key order
(a unicast chunk has one holder at a time), each bucket's first chunk copied beside every hop entry that reads it.
Each hop keeps a memo of its best chunk, recomputed only when its own chunk leaves (a chunk that joins a bucket
it reads replaces it if better; a chunk sits in ~2 hops' buckets, while every receiver asks all its free hops at
every event), and a receiver's options are looked at once per event, the least taken once it is checked fresh.
At 512 GPUs (261,632 chunks) this took the kernel from 4.6 to 1.9 s with the same schedules; the biggest single
step was keeping the per-hop memo read out of any call (see :func:`_match_receiver`); then 1.5 s with the
chunks' moves written as closures and the hops renumbered by receiver (see the kernel).

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
def _may_go(c, u, v, has, coming, routed, rptr, rnode):
    """Chunk ``c``, in a bucket at ``u``, may go to ``v``: ``u`` holds it (it is not still on its way there),
    ``v`` neither has it nor receives it, and on planned routes ``v`` is its next NPU."""
    wi = c // 64
    b = _bit(c)
    if (has[v, wi] & b) or (coming[v, wi] & b) or not (has[u, wi] & b):
        return False
    return not routed or _next_on_route(c, u, rptr, rnode) == v


@njit(cache=True, inline="always")
def _first_valid(u, v, d, bits, head, off, pos_chunk, has, coming, moving, use_moving, routed, rptr, rnode):
    """The first chunk (in key order) of the bucket of chunks at ``u`` bound for ``d`` that may go to ``v``
    now (``use_moving`` false: also if another pick of this event moves it), or -1."""
    lo = head[u, d]
    hi = off[d + 1]
    w = lo // 64
    while w * 64 < hi:
        x = bits[u, w]
        if w * 64 < lo:
            x &= ~((np.uint64(1) << np.uint64(lo - w * 64)) - np.uint64(1))
        if hi - w * 64 < 64:
            x &= (np.uint64(1) << np.uint64(hi - w * 64)) - np.uint64(1)
        while x:
            low = x & (~x + np.uint64(1))
            c = pos_chunk[w * 64 + _DB_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]]
            x ^= low
            if (use_moving and moving[c]) or not _may_go(c, u, v, has, coming, routed, rptr, rnode):
                continue
            return c
        w += 1
    return -1


@njit(cache=True, inline="always")
def _before(a, k, c, a2, k2, c2):
    """A hop's offer ``(lead, key, chunk)`` before the second one: the order its best chunk is chosen in."""
    if a != a2:
        return a < a2
    if k != k2:
        return k < k2
    return c < c2


@njit(cache=True, inline="always")
def _scan_chunk(h, v, use_moving, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving, key,
                routed, rptr, rnode, ent_f):
    """The chunk hop ``h`` would bring ``v`` and its score ``(lead, key)`` (the hop's duration is the score's
    middle term), or chunk -1: as ``fabric._best_chunk`` for unicast chunks (``use_moving`` false: as if no
    other pick of this event moved one). Only the destinations the hop brings closer (``qual_d``) are looked
    at, each through its bucket's first chunk that may go."""
    u = hsrc[h]
    best_c = -1
    best_a = 0.0
    best_k = 2.0
    for j in range(qual_ptr[h], qual_ptr[h + 1]):
        d = qual_d[j]
        if head[u, d] >= off[d + 1]:
            continue
        # rarest: the longest way still to go first (then the key, then the id); random: the key (lead 0)
        a = ent_f[0, j]
        if best_c >= 0 and a > best_a:
            continue
        c = _first_valid(u, v, d, bits, head, off, pos_chunk, has, coming, moving, use_moving, routed, rptr, rnode)
        if c < 0:
            continue
        k = key[c]
        if best_c < 0 or _before(a, k, c, best_a, best_k, best_c):
            best_c = c
            best_a = a
            best_k = k
    return best_c, best_a, best_k


@njit(cache=True, inline="always")
def _scan_heads(h, v, u, qual_ptr, ent_i, ent_f, has, coming, routed, rptr, rnode):
    """:func:`_scan_chunk` as if no pick moved a chunk, from the first chunk of each bucket the hop reads,
    copied beside the hop's entries (one pass over contiguous arrays instead of a walk through each bucket's
    words); chunk -2 when the least of them may not go to ``v`` (then a later chunk of its bucket might, and
    only the full scan can say)."""
    best_c = -1
    best_a = 0.0
    best_k = 2.0
    for j in range(qual_ptr[h], qual_ptr[h + 1]):
        c = ent_i[0, j]
        if c < 0:
            continue
        a = ent_f[0, j]
        k = ent_f[1, j]
        if best_c < 0 or _before(a, k, c, best_a, best_k, best_c):
            best_c = c
            best_a = a
            best_k = k
    if best_c >= 0 and not _may_go(best_c, u, v, has, coming, routed, rptr, rnode):
        return -2, best_a, best_k
    return best_c, best_a, best_k


@njit(cache=True, inline="always")
def _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving, key, routed, rptr,
                rnode, ent_i, ent_f, memo_i, memo_f):
    """:func:`_scan_chunk` of this event's picks, through the hop's memo (see :func:`_readers`): the
    best chunk as if no pick moved one, kept until that chunk leaves its bucket (``memo_i[1]``; the kernel's
    ``bucket_changed`` puts a better chunk that joins a bucket the hop reads in its place). A best that no
    pick moves is the best of the chunks left too (they are a subset that holds it); only when a pick moves it
    is the hop scanned again. Why it pays: a hop's buckets rarely change between events (a chunk sits in ~2
    hops' buckets), while every receiver asks its free hops again at every event."""
    if memo_i[1, h]:
        c, a, k = _scan_heads(h, v, hsrc[h], qual_ptr, ent_i, ent_f, has, coming, routed, rptr, rnode)
        if c == -2:
            c, a, k = _scan_chunk(h, v, False, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving,
                                  key, routed, rptr, rnode, ent_f)
        memo_i[0, h] = c
        memo_i[1, h] = 0
        memo_f[0, h] = a
        memo_f[1, h] = k
    c = memo_i[0, h]
    if c < 0 or not moving[c]:
        return c, memo_f[0, h], memo_f[1, h]
    return _scan_chunk(h, v, True, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving, key,
                       routed, rptr, rnode, ent_f)


@njit(cache=True, inline="always")
def _blocked(h, owner, link_pad, hlen):
    for k in range(hlen[h]):
        if owner[link_pad[h, k]] != -1:
            return True
    return False


@njit(cache=True, inline="always")
def _precedes(a, d, k, h, c, a2, d2, k2, h2, c2):
    """``(lead, duration, key, hop, chunk)`` before the second one: the order of ``fabric._match``'s options."""
    if a != a2:
        return a < a2
    if d != d2:
        return d < d2
    if k != k2:
        return k < k2
    if h != h2:
        return h < h2
    return c < c2


@njit(cache=True, inline="always")
def _best_option(v, skip, free, into_ptr, hid, owner, link_pad, hlen, hsrc, hdur, qual_ptr, qual_d, bits, head,
                 off, pos_chunk, has, coming, moving, key, routed, rptr, rnode, ent_i, ent_f, memo_i, memo_f):
    """The least ``(score, hop, chunk)`` over the free, unblocked hops into ``v`` other than ``skip``: the
    first of ``fabric._match``'s sorted options; (-1, -1) when there is none."""
    bh = -1
    bc = -1
    ba = 0.0
    bd = 0.0
    bk = 0.0
    for h in range(into_ptr[v], into_ptr[v + 1]):
        if h == skip or not free[h] or _blocked(h, owner, link_pad, hlen):
            continue
        c, a, k = _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving, key,
                              routed, rptr, rnode, ent_i, ent_f, memo_i, memo_f)
        if c < 0:
            continue
        d = hdur[h]
        if bh < 0 or _precedes(a, d, k, hid[h], c, ba, bd, bk, hid[bh], bc):
            bh = h
            bc = c
            ba = a
            bd = d
            bk = k
    return bh, bc


@njit(cache=True, inline="always")
def _match_receiver(v, q0, free, into_ptr, hid, owner, link_pad, hlen, hsrc, hdur, qual_ptr, qual_d, bits, head,
                    off, pos_chunk, has, coming, moving, key, rptr, rnode, ent_i, ent_f, memo_i, memo_f, pk, had_pick,
                    opt_i, opt_f):
    """``v`` takes :func:`_best_option` again and again until none is left, placed as picks from ``q0`` on;
    returns the next pick's index. The same picks, from one look at the hops into ``v``: an option's score
    only gets worse as picks move chunks and hold links, so the least of the scores seen is taken once it is
    checked fresh (not blocked, its chunk not moved), else looked at again. Inlined, and its arrays few (every
    array a function takes is reference-counted at each call, atomically; LLVM prunes only some of those counts at
    an inlined site): hence at most 30 arguments (numba's limit for inlining), ``routed`` read from the routes,
    and picks and options as rows of one array each."""
    routed = rnode.shape[0] > 0
    m = 0
    for h in range(into_ptr[v], into_ptr[v + 1]):
        if not free[h] or _blocked(h, owner, link_pad, hlen):
            continue
        # the memo read here, not through _best_chunk: an inlined call still counts a reference to each of its
        # arrays (atomically), and this line runs for every free hop of every receiver at every event
        c = memo_i[0, h]
        if memo_i[1, h] == 0 and (c < 0 or not moving[c]):
            a = memo_f[0, h]
            k = memo_f[1, h]
        else:
            c, a, k = _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving, key,
                                  routed, rptr, rnode, ent_i, ent_f, memo_i, memo_f)
        if c < 0:
            continue
        opt_i[0, m] = h
        opt_i[1, m] = c
        opt_f[0, m] = a
        opt_f[1, m] = k
        m += 1
    q = q0
    while m > 0:
        b = 0
        for i in range(1, m):
            if _precedes(opt_f[0, i], hdur[opt_i[0, i]], opt_f[1, i], hid[opt_i[0, i]], opt_i[1, i],
                         opt_f[0, b], hdur[opt_i[0, b]], opt_f[1, b], hid[opt_i[0, b]], opt_i[1, b]):
                b = i
        h = opt_i[0, b]
        c = opt_i[1, b]
        if moving[c]:
            c, a, k = _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, head, off, pos_chunk, has, coming, moving, key,
                                  routed, rptr, rnode, ent_i, ent_f, memo_i, memo_f)
            if c >= 0:
                opt_i[1, b] = c
                opt_f[0, b] = a
                opt_f[1, b] = k
                continue
        else:
            _place(q, v, h, c, pk, hlen, link_pad, owner, moving, had_pick)
            q += 1
        opt_i[0, b] = -1
        # the pick's links block other options for good: drop them all now, not one by one as the least
        kept = 0
        for i in range(m):
            if opt_i[0, i] >= 0 and not _blocked(opt_i[0, i], owner, link_pad, hlen):
                opt_i[0, kept] = opt_i[0, i]
                opt_i[1, kept] = opt_i[1, i]
                opt_f[0, kept] = opt_f[0, i]
                opt_f[1, kept] = opt_f[1, i]
                kept += 1
        m = kept
    return q


@njit(cache=True, inline="always")
def _place(q, v, h, c, pk, hlen, link_pad, owner, moving, had_pick):
    pk[0, q] = v
    pk[1, q] = h
    pk[2, q] = c
    for k in range(hlen[h]):
        owner[link_pad[h, k]] = q
    moving[c] = True
    had_pick[v] = True


@njit(cache=True, inline="always")
def _next_set(bits, u, p, hi):
    """The first position after ``p`` and before ``hi`` set in ``bits[u]``, else ``hi``."""
    w = p // 64
    x = bits[u, w] & ~((_bit(p) << np.uint64(1)) - np.uint64(1)) if p % 64 < 63 else np.uint64(0)
    while True:
        if x:
            q = w * 64 + _DB_TABLE[((x & (~x + np.uint64(1))) * _DEBRUIJN) >> np.uint64(58)]
            return q if q < hi else hi
        w += 1
        if w * 64 >= hi:
            return hi
        x = bits[u, w]


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
def _readers(n, hsrc, qual_ptr, qual_d, dist, rarest):
    """What the hops' memos need: per bucket ``(u, d)`` (row ``u * n + d``) the hop entries that read it
    (``qual_d``'s positions, CSR ``rev_ptr`` into ``ent_i[2]``); per entry ``j`` the bucket's first chunk
    ``ent_i[0, j]`` (-1 while empty), its hop ``ent_i[1, j]``, the score's lead ``ent_f[0, j]`` (``-dist[u, d]``
    with ``rarest``) and the first chunk's key ``ent_f[1, j]``; per hop its memo: chunk ``memo_i[0]``, stale
    ``memo_i[1]`` (1 at first), lead and key ``memo_f``. Rows of one array each, not a tuple of arrays: every
    array taken out of a tuple costs an atomic reference count, millions of them per synthesis."""
    H = hsrc.shape[0]
    E = qual_d.shape[0]
    ptr = np.zeros(n * n + 1, dtype=np.int64)
    ent_i = np.full((3, E), -1, dtype=np.int64)
    ent_f = np.zeros((2, E))
    ent_f[1, :] = 2.0
    for h in range(H):
        for j in range(qual_ptr[h], qual_ptr[h + 1]):
            ptr[hsrc[h] * n + qual_d[j] + 1] += 1
            ent_i[1, j] = h
            if rarest:
                ent_f[0, j] = -dist[hsrc[h], qual_d[j]]
    for i in range(n * n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    for j in range(E):
        r = hsrc[ent_i[1, j]] * n + qual_d[j]
        ent_i[2, fill[r]] = j
        fill[r] += 1
    memo_i = np.zeros((2, H), dtype=np.int64)
    memo_i[0, :] = -1
    memo_i[1, :] = 1
    return ptr, ent_i, ent_f, memo_i, np.zeros((2, H))


@njit(cache=True)
def fabric_unicast_kernel(n, C, init_v, init_c, init_t, src_of, dst_of, need_c, key, draws, rarest, routed,
                          rptr, rnode, dist, busy0, hsrc, hdst, hdur, link_pad, off_pad, end_pad, hlen,
                          seg_ptr, seg_a, seg_b, order_c):
    """Returns ``(chunk, hop, segment, start, end, missing, events, status)``: ``status`` 0 done, 1 stuck
    (``missing`` (NPU, chunk) pairs unreached), 2 the draws ran out (call again with more)."""
    W = (C + 63) // 64
    L1 = busy0.shape[0]            # links + the padding link (always free)
    H = hsrc.shape[0]
    # hops renumbered by receiver (each receiver's in id order): a receiver's turn reads its hops' flags, memos
    # and links as one stretch of each array; hid[h] is hop h's id, which orders ties and names it in the rows
    hid = np.argsort(hdst, kind="mergesort")
    hsrc, hdst, hdur, hlen = hsrc[hid], hdst[hid], hdur[hid], hlen[hid]
    link_pad, off_pad, end_pad = link_pad[hid], off_pad[hid], end_pad[hid]
    into_ptr = np.zeros(n + 1, dtype=np.int64)
    for h in range(H):
        into_ptr[hdst[h] + 1] += 1
    for v in range(n):
        into_ptr[v + 1] += into_ptr[v]
    busy = busy0.copy()
    has = np.zeros((n, W), dtype=np.uint64)
    coming = np.zeros((n, W), dtype=np.uint64)
    got = np.zeros(n, dtype=np.int64)
    at = src_of.copy()              # as the Python loop: at its source before it is ready there
    qual_ptr, qual_d = _qualifying(n, hsrc, hdst, hdur, dist, routed)
    rev_ptr, ent_i, ent_f, memo_i, memo_f = _readers(n, hsrc, qual_ptr, qual_d, dist, rarest)
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
    head = np.zeros((n, n), dtype=np.int64)
    for d in range(n):
        for u in range(n):
            head[u, d] = off[d + 1]
    # who may send: the holder of a chunk still on its way (on a planned route: to its next NPU only)
    scnt1 = np.zeros(n, dtype=np.int64)
    scnt2 = np.zeros((n, n) if routed else (1, 1), dtype=np.int64)
    counted = np.full(C, -2, dtype=np.int64)      # -2: not counted; else the next NPU counted (-1: any)

    # Moving a chunk in and out of its buckets is written as closures over the kernel's arrays, not as functions
    # taking them: numba inlines a closure with the arrays it captures as they are, while every array a function
    # takes (inlined or not) is reference-counted at each call (an atomic operation; ~20 arrays, ~1 M calls).
    def bucket_changed(u, d, moved, joined):
        # chunk `moved` joined bucket (u, d) or left it: its first chunk copied to the entries that read it; a
        # hop's fresh memo (the least over its buckets of the first chunk that may go) stays fresh: a chunk that
        # left only matters if it was the memo's, and one that joined replaces the memo if it is less and may go
        p = head[u, d]
        c = order_c[p] if p < off[d + 1] else -1
        k = key[c] if c >= 0 else 2.0
        km = key[moved]
        for i in range(rev_ptr[u * n + d], rev_ptr[u * n + d + 1]):
            j = ent_i[2, i]
            ent_i[0, j] = c
            ent_f[1, j] = k
            h = ent_i[1, j]
            if memo_i[1, h]:
                continue
            mc = memo_i[0, h]
            if not joined:
                if mc == moved:
                    memo_i[1, h] = 1
                continue
            a = ent_f[0, j]
            ma = memo_f[0, h]
            mk = memo_f[1, h]
            if mc < 0 or _before(a, km, moved, ma, mk, mc):
                if _may_go(moved, u, hdst[h], has, coming, routed, rptr, rnode):
                    memo_i[0, h] = moved
                    memo_f[0, h] = a
                    memo_f[1, h] = km

    def leave(c):
        # chunk c leaves at[c]: out of its bucket and the senders' counts
        u = at[c]
        d = dst_of[c]
        if u < 0:
            return
        if u != d:
            bits[u, pos[c] // 64] &= ~_bit(pos[c])
            if head[u, d] == pos[c]:
                head[u, d] = _next_set(bits, u, pos[c], off[d + 1])
            bucket_changed(u, d, c, False)
        if counted[c] != -2:
            if routed:
                scnt2[u, counted[c]] -= 1
            else:
                scnt1[u] -= 1
            counted[c] = -2

    def join(c):
        # chunk c is at at[c]: into its bucket (a chunk at its destination never moves on) and, while it is still
        # on its way, the senders' counts
        u = at[c]
        d = dst_of[c]
        if u < 0:
            return
        if u != d:
            bits[u, pos[c] // 64] |= _bit(pos[c])
            if pos[c] < head[u, d]:
                head[u, d] = pos[c]
            bucket_changed(u, d, c, True)
        if need_c[c] and not (has[d, c // 64] & _bit(c)):
            if routed:
                nx = _next_on_route(c, u, rptr, rnode)
                if nx >= 0:
                    scnt2[u, nx] += 1
                    counted[c] = nx
            else:
                scnt1[u] += 1
                counted[c] = -1

    for c in range(C):
        join(c)
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
    pk = np.empty((3, L1), dtype=np.int64)         # picks: receiver, hop, chunk
    deg = int(np.max(into_ptr[1:] - into_ptr[:-1])) if n > 0 else 0
    opt_i = np.empty((2, deg), dtype=np.int64)      # a receiver's options: hop, chunk; lead, key
    opt_f = np.empty((2, deg))
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
                leave(c)
                at[c] = v
                join(c)
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
        # ---- greedy matching, in order; whether a hop is free is settled in its receiver's turn (no pick
        # changes it: picks hold links for this event only, and busy times change when they are committed)
        npk = 0
        for oi in range(n):
            v = order[oi]
            anyf = False
            for h in range(into_ptr[v], into_ptr[v + 1]):
                ok = scnt2[hsrc[h], v] > 0 if routed else scnt1[hsrc[h]] > 0
                if ok:
                    for k in range(hlen[h]):
                        if busy[link_pad[h, k]] > t + off_pad[h, k] + eps:
                            ok = False
                            break
                free[h] = ok
                anyf |= ok
            any_free[v] = anyf
            if not anyf:
                continue
            npk = _match_receiver(v, npk, free, into_ptr, hid, owner, link_pad, hlen, hsrc, hdur, qual_ptr,
                                  qual_d, bits, head, off, order_c, has, coming, moving, key, rptr, rnode, ent_i,
                                  ent_f, memo_i, memo_f, pk, had_pick, opt_i, opt_f)
        # ---- augment: a receiver without a pick takes a hop held by one other pick that can move
        for oi in range(n):
            v = order[oi]
            if had_pick[v] or not any_free[v]:
                continue
            for h in range(into_ptr[v], into_ptr[v + 1]):
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
                c, a, kk = _best_chunk(h, v, hsrc, qual_ptr, qual_d, bits, head, off, order_c, has, coming, moving,
                                       key, routed, rptr, rnode, ent_i, ent_f, memo_i, memo_f)
                if c < 0:
                    continue
                w = pk[0, kb]
                hw = pk[1, kb]
                cw = pk[2, kb]
                for k in range(hlen[hw]):
                    owner[link_pad[hw, k]] = -1
                for k in range(hlen[h]):
                    if owner[link_pad[h, k]] == -1:
                        owner[link_pad[h, k]] = -2
                moving[cw] = False
                h2, c2 = _best_option(w, hw, free, into_ptr, hid, owner, link_pad, hlen, hsrc, hdur, qual_ptr,
                                      qual_d, bits, head, off, order_c, has, coming, moving, key, routed, rptr, rnode,
                                      ent_i, ent_f, memo_i, memo_f)
                for k in range(hlen[h]):
                    if owner[link_pad[h, k]] == -2:
                        owner[link_pad[h, k]] = -1
                if h2 >= 0:
                    _place(kb, w, h2, c2, pk, hlen, link_pad, owner, moving, had_pick)
                    _place(npk, v, h, c, pk, hlen, link_pad, owner, moving, had_pick)
                    npk += 1
                    break
                for k in range(hlen[hw]):
                    owner[link_pad[hw, k]] = kb
                moving[cw] = True
        # ---- commit, in pick order (picks hold disjoint links: a unicast transfer grows no tree)
        for q in range(npk):
            v = pk[0, q]
            h = pk[1, q]
            c = pk[2, q]
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
            leave(c)
            at[c] = -1
            en = t
            for sidx in range(seg_ptr[hid[h]], seg_ptr[hid[h] + 1]):
                a0 = seg_a[sidx]
                st = t + off_pad[h, a0]
                en = t + end_pad[h, a0]
                for k in range(a0, seg_b[sidx] + 1):
                    l = link_pad[h, k]
                    if busy[l] < en:
                        busy[l] = en
                r_chunk.append(c)
                r_hop.append(hid[h])
                r_seg.append(sidx)
                r_start.append(st)
                r_end.append(en)
            w = hdst[h]
            coming[w, wi] |= _bit(c)
            got[w] += 1
            heapq.heappush(events, (en, np.int64(w), np.int64(c)))
        # reset this event's marks
        for q in range(npk):
            moving[pk[2, q]] = False
            had_pick[pk[0, q]] = False
            for k in range(hlen[pk[1, q]]):
                owner[link_pad[pk[1, q], k]] = -1
        nxt = _next_time(events, busy, t, eps)
        if nxt == np.inf:
            return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64),
                    np.array(r_seg, dtype=np.int64), np.array(r_start), np.array(r_end), missing, n_events, 1)
        t = nxt
    return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64), np.array(r_seg, dtype=np.int64),
            np.array(r_start), np.array(r_end), missing, n_events, 0)
