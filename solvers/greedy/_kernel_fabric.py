"""The fabric greedy's event loop for the multicast collectives (All-Gather, Broadcast), compiled (numba).

The rules are those of :mod:`solvers.greedy.fabric` (which documents them and keeps the Python loop as the
reference; the unicast chunks have their own kernel, :mod:`solvers.greedy._kernel_fabric_unicast`); this kernel runs them on arrays so a 1,024-GPU rail-optimized cluster synthesizes in
seconds: holdings are bitsets (64 chunks per word), a hop's offer is the rarest chunk of ``sender holds and
receiver lacks`` scanned word by word, and each event rebuilds only what changed.

Outputs one row per (chunk, hop, segment): ``(chunk, hop, segment, start, end)``; the caller turns hops and
segments into ``src``/``dst``/``route``.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

BIG = 1 << 40
# The helpers are inlined into the kernel: as calls, each passed its arrays with a reference-count increment and
# decrement (atomic), which took a third of the kernel's time on MoE dispatch (measured with perf; inlined, the
# 64-GPU dispatch at 128 tokens per GPU ran 2.0 s instead of 3.25 s).


# the index of the lowest set bit of a 64-bit word (de Bruijn multiplication)
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DB_TABLE = np.array([0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22,
                      45, 39, 33, 30, 24, 18, 12, 5, 63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11,
                      46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6], dtype=np.int64)


@njit(cache=True, inline="always")
def _best_in_words(cand, holders, key, rarest, cap, start):
    """The best chunk among the set bits of ``cand`` (min holders, then key; or min key), looking at no more
    than ``cap`` candidates (0: all) from word ``start`` on: (chunk, holders, key)."""
    best_c = -1
    best_h = BIG
    best_k = 2.0
    W = cand.shape[0]
    seen = 0
    for step in range(W):
        wi = (start + step) % W
        best_c, best_h, best_k, seen, full = _best_of_word(cand[wi], wi, holders, key, rarest, best_c, best_h,
                                                           best_k, seen, cap)
        if full:
            break
    return best_c, best_h, best_k


@njit(cache=True, inline="always")
def _best_of_word(x, wi, holders, key, rarest, best_c, best_h, best_k, seen, cap):
    """The chunks of word ``wi``'s set bits ``x`` folded into the best so far (min holders, then key; or min
    key) and counted in ``seen``; ``full``: ``cap`` (> 0) candidates seen, look no further."""
    while x:
        low = x & (~x + np.uint64(1))
        c = wi * 64 + _DB_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]
        h = holders[c] if rarest else 0
        k = key[c]
        if h < best_h or (h == best_h and k < best_k):
            best_c = c
            best_h = h
            best_k = k
        x ^= low
        seen += 1
        if cap > 0 and seen >= cap:
            return best_c, best_h, best_k, seen, True
    return best_c, best_h, best_k, seen, False


@njit(cache=True, inline="always")
def _offer(h, v, hsrc, has, coming, picked, near_ptr, near_npu, near_dur, hdur, holders, key, rarest,
           local_first, cand, cap, needbits, mode, relay_ptr, relay_idx, kept):
    """Fill ``cand`` with the chunks hop ``h`` may bring ``v``; return its best (chunk, holders, key).
    ``mode`` 0: every NPU needs every chunk; 1 (``SUBSET_SCAN``): only chunks ``v`` needs or relays: chunks an
    NPU ``relay_idx[relay_ptr[h]:relay_ptr[h + 1]]`` (those ``h`` is on a shortest way to) needs and lacks (a
    chunk table's multicast to some NPUs); 2 (``SUBSET_KEPT``): the same chunks, from the hop's candidate set
    kept up to date by :func:`_kept_arrival` and :func:`_kept_receiving` (``kept``) instead of rebuilt."""
    if mode == SUBSET_KEPT:
        return _offer_cached(h, v, picked, holders, key, rarest, local_first, cap, kept)
    u = hsrc[h]
    W = cand.shape[0]
    for wi in range(W):
        cand[wi] = has[u, wi] & ~(has[v, wi] | coming[v, wi] | picked[v, wi])
    if mode == SUBSET_SCAN:
        for wi in range(W):
            m = needbits[v, wi]
            for j in range(relay_ptr[h], relay_ptr[h + 1]):
                w = relay_idx[j]
                m |= needbits[w, wi] & ~(has[w, wi] | coming[w, wi])
            cand[wi] &= m
    if local_first:
        lim = hdur[h] * (1.0 - 1e-9)
        for j in range(near_ptr[v], near_ptr[v + 1]):
            if near_dur[j] >= lim:
                break
            w = near_npu[j]
            if w == u:
                continue
            for wi in range(W):
                cand[wi] &= ~(has[w, wi] | coming[w, wi] | picked[w, wi])
    return _best_in_words(cand, holders, key, rarest, cap, (h + v) % W)


# how the multicast kernel finds a hop's candidate chunks (its ``mode``)
EVERY_NPU = 0        # All-Gather, Broadcast: every NPU needs every chunk, the sets rebuilt per offer
SUBSET_SCAN = 1      # a table's multicast to subsets, the sets rebuilt per offer (the reference)
SUBSET_KEPT = 2      # the same, each hop's set kept up to date as chunks arrive and leave (the fast path)


@njit(cache=True, inline="always")
def _offer_kept(h, v, picked, holders, key, rarest, local_first, cap, kept):
    """:func:`_best_in_words` over hop ``h``'s kept candidate set less this event's picks (``v``'s, and with
    ``local_first`` those of the NPUs nearer ``v`` than the hop), in the same order: words cyclic from
    ``(h + v) % W``, bits upwards, the non-empty words found through the set's summary bits."""
    hcand, summ, count, nsl_ptr, nsl_idx = kept[0], kept[1], kept[2], kept[3], kept[4]
    best_c = -1
    best_h = BIG
    best_k = 2.0
    if count[h] == 0:
        return best_c, best_h, best_k
    W = hcand.shape[1]
    W2 = summ.shape[1]
    start = (h + v) % W
    s_word = start // 64
    s_bit = np.uint64(start % 64)
    seen = 0
    for k in range(W2 + 1):
        sw = (s_word + k) % W2
        m = summ[h, sw]
        if k == 0:
            m &= ~((np.uint64(1) << s_bit) - np.uint64(1))
        elif k == W2:
            m &= (np.uint64(1) << s_bit) - np.uint64(1)
        while m:
            low = m & (~m + np.uint64(1))
            wi = sw * 64 + _DB_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]
            m ^= low
            x = hcand[h, wi] & ~picked[v, wi]
            if local_first:
                for j in range(nsl_ptr[h], nsl_ptr[h + 1]):
                    x &= ~picked[nsl_idx[j], wi]
            best_c, best_h, best_k, seen, full = _best_of_word(x, wi, holders, key, rarest, best_c, best_h, best_k,
                                                               seen, cap)
            if full:
                return best_c, best_h, best_k
    return best_c, best_h, best_k


@njit(cache=True, inline="always")
def _offer_cached(h, v, picked, holders, key, rarest, local_first, cap, kept):
    """:func:`_offer_kept`, computed once per event and hop until :func:`_kept_picked` says a pick changed it
    (within an event's matching the candidate sets and holder counts stand still; only the picks move)."""
    oc, oh, ok, stamp, epoch = kept[11], kept[12], kept[13], kept[14], kept[15]
    if stamp[h] == epoch[0]:
        return oc[h], oh[h], ok[h]
    c, hh, kk = _offer_kept(h, v, picked, holders, key, rarest, local_first, cap, kept)
    oc[h] = c
    oh[h] = hh
    ok[h] = kk
    stamp[h] = epoch[0]
    return c, hh, kk


@njit(cache=True, inline="always")
def _kept_picked(v, c, into_ptr, into_idx, local_first, kept):
    """``v``'s picks gained or lost ``c``: the cached offers of the hops that have ``c`` as a candidate and
    exclude ``v``'s picks (the hops into ``v``; with ``local_first`` those ``v`` is nearer the receiver than)."""
    hcand, ninv_ptr, ninv_idx, stamp = kept[0], kept[5], kept[6], kept[14]
    wi = c // 64
    b = np.uint64(1) << np.uint64(c % 64)
    for j in range(into_ptr[v], into_ptr[v + 1]):
        g = into_idx[j]
        if hcand[g, wi] & b:
            stamp[g] = -1
    if local_first:
        for j in range(ninv_ptr[v], ninv_ptr[v + 1]):
            g = ninv_idx[j]
            if hcand[g, wi] & b:
                stamp[g] = -1


@njit(cache=True, inline="always")
def _kept_set(kept, h, c):
    hcand, summ, count = kept[0], kept[1], kept[2]
    wi = c // 64
    b = np.uint64(1) << np.uint64(c % 64)
    if not (hcand[h, wi] & b):
        hcand[h, wi] |= b
        count[h] += 1
        summ[h, wi // 64] |= np.uint64(1) << np.uint64(wi % 64)


@njit(cache=True, inline="always")
def _kept_clear(kept, h, c):
    hcand, summ, count = kept[0], kept[1], kept[2]
    wi = c // 64
    b = np.uint64(1) << np.uint64(c % 64)
    if hcand[h, wi] & b:
        hcand[h, wi] &= ~b
        count[h] -= 1
        if hcand[h, wi] == 0:
            summ[h, wi // 64] &= ~(np.uint64(1) << np.uint64(wi % 64))


@njit(cache=True, inline="always")
def _wanted(h, c, hdst, has, coming, needbits, relay_ptr, relay_idx):
    """Whether hop ``h``'s receiver needs chunk ``c``, or relays it to an NPU that needs and lacks it."""
    wi = c // 64
    b = np.uint64(1) << np.uint64(c % 64)
    if needbits[hdst[h], wi] & b:
        return True
    for j in range(relay_ptr[h], relay_ptr[h + 1]):
        w = relay_idx[j]
        if (needbits[w, wi] & b) and not ((has[w, wi] | coming[w, wi]) & b):
            return True
    return False


@njit(cache=True, inline="always")
def _kept_arrival(x, c, hdst, has, coming, needbits, relay_ptr, relay_idx, local_first, kept):
    """``x`` now holds ``c``: each hop out of ``x`` whose receiver lacks it and wants it (and, with
    ``local_first``, no NPU nearer the receiver holds or receives it) gains it. Every other term of that test
    only turns false later, so a hop that does not gain ``c`` now never will."""
    nsl_ptr, nsl_idx, out_ptr, out_idx = kept[3], kept[4], kept[9], kept[10]
    wi = c // 64
    b = np.uint64(1) << np.uint64(c % 64)
    for j in range(out_ptr[x], out_ptr[x + 1]):
        h = out_idx[j]
        v = hdst[h]
        if (has[v, wi] | coming[v, wi]) & b:
            continue
        if not _wanted(h, c, hdst, has, coming, needbits, relay_ptr, relay_idx):
            continue
        ok = True
        if local_first:
            for q in range(nsl_ptr[h], nsl_ptr[h + 1]):
                w = nsl_idx[q]
                if (has[w, wi] | coming[w, wi]) & b:
                    ok = False
                    break
        if ok:
            _kept_set(kept, h, c)


@njit(cache=True, inline="always")
def _kept_receiving(x, c, into_ptr, into_idx, hdst, has, coming, needbits, relay_ptr, relay_idx, kept):
    """``x`` now receives ``c``: hops into ``x`` and hops for which ``x`` is a nearer NPU lose it; hops that
    relayed it towards ``x`` keep it only while another NPU they lead to wants it."""
    ninv_ptr, ninv_idx, rinv_ptr, rinv_idx = kept[5], kept[6], kept[7], kept[8]
    for j in range(into_ptr[x], into_ptr[x + 1]):
        _kept_clear(kept, into_idx[j], c)
    for j in range(ninv_ptr[x], ninv_ptr[x + 1]):
        _kept_clear(kept, ninv_idx[j], c)
    hcand = kept[0]
    wi = c // 64
    b = np.uint64(1) << np.uint64(c % 64)
    for j in range(rinv_ptr[x], rinv_ptr[x + 1]):
        h = rinv_idx[j]
        if (hcand[h, wi] & b) and not _wanted(h, c, hdst, has, coming, needbits, relay_ptr, relay_idx):
            _kept_clear(kept, h, c)


@njit(cache=True, inline="always")
def _hop_free(h, t, eps, busy, link_pad, off_pad, owner):
    for k in range(link_pad.shape[1]):
        l = link_pad[h, k]
        if busy[l] > t + off_pad[h, k] + eps or owner[l] != -1:
            return False
    return True


@njit(cache=True, inline="always")
def _best_free_hop(v, skip, t, eps, into_ptr, into_idx, busy, link_pad, off_pad, owner, hsrc, has, coming, picked,
                   near_ptr, near_npu, near_dur, hdur, holders, key, rarest, local_first, cand, cap, needbits,
                   mode, relay_ptr, relay_idx, kept):
    """The free hop into ``v`` (not ``skip``) whose offer is best — fewest holders, then the shortest hop, then
    the key — and its chunk, or (-1, -1)."""
    bh = -1
    bc = -1
    b_h = BIG
    b_d = 0.0
    b_k = 2.0
    for j in range(into_ptr[v], into_ptr[v + 1]):
        h = into_idx[j]
        if h == skip or not _hop_free(h, t, eps, busy, link_pad, off_pad, owner):
            continue
        c, hh, kk = _offer(h, v, hsrc, has, coming, picked, near_ptr, near_npu, near_dur, hdur, holders, key,
                           rarest, local_first, cand, cap, needbits, mode, relay_ptr, relay_idx, kept)
        if c < 0:
            continue
        d = hdur[h]
        if hh < b_h or (hh == b_h and (d < b_d or (d == b_d and kk < b_k))):
            bh = h
            bc = c
            b_h = hh
            b_d = d
            b_k = kk
    return bh, bc


@njit(cache=True, inline="always")
def _place(q, v, h, c, pk_v, pk_h, pk_c, hlen, link_pad, owner, picked):
    """Pick ``q``: hop ``h`` brings chunk ``c`` to ``v``; it holds the hop's links."""
    pk_v[q] = v
    pk_h[q] = h
    pk_c[q] = c
    for k in range(hlen[h]):
        owner[link_pad[h, k]] = q
    picked[v, c // 64] |= np.uint64(1) << np.uint64(c % 64)


@njit(cache=True)
def floyd_warshall(D):
    """``D`` (square, 0 on the diagonal, ``inf`` where no edge) made the least sums over paths, in place: the
    numpy form ``D = min(D, D[:, k] + D[k, :])`` per ``k`` with the same additions (row and column ``k`` do not
    change in round ``k``), skipping the rows ``k`` cannot improve."""
    n = D.shape[0]
    for k in range(n):
        for i in range(n):
            dik = D[i, k]
            if dik == np.inf:
                continue
            for j in range(n):
                x = dik + D[k, j]
                if x < D[i, j]:
                    D[i, j] = x
    return D


@njit(cache=True, inline="always")
def _next_time(events, busy, t, eps):
    """The next event: the first arrival, or a link (not the padding one, last) becoming free; inf: none."""
    nxt = np.inf
    if len(events) > 0:
        nxt = events[0][0]
    for l in range(busy.shape[0] - 1):
        if busy[l] > t + eps and busy[l] < nxt:
            nxt = busy[l]
    return nxt


@njit(cache=True)
def fabric_multicast_kernel(n, C, init_v, init_c, init_t, needbits, need0, key, seed, rarest, local_first, cap, mode,
                            busy0,
                            hsrc, hdst, hdur, link_pad, off_pad, end_pad, hlen,
                            into_ptr, into_idx, grp, grp_ptr, grp_idx, mc_pos,
                            seg_ptr, seg_a, seg_b, seg_start_node,
                            near_ptr, near_npu, near_dur, relay_ptr, relay_idx, kept):
    np.random.seed(seed)
    W = (C + 63) // 64
    L1 = busy0.shape[0]           # links + the padding link (always free)
    busy = busy0.copy()
    has = np.zeros((n, W), dtype=np.uint64)
    coming = np.zeros((n, W), dtype=np.uint64)
    picked = np.zeros((n, W), dtype=np.uint64)
    holders = np.zeros(C, dtype=np.int64)
    got = np.zeros(n, dtype=np.int64)
    events = [(0.0, np.int64(0), np.int64(0))]
    events.pop()
    # the start: NPU init_v[i] holds chunk init_c[i] from init_t[i] on (the sources at 0, or a fault's state);
    # needbits[v]: the chunks v must end with (need0 bits in all; a copy held at the start counts on arrival)
    for i in range(init_v.shape[0]):
        s = init_v[i]
        c = init_c[i]
        bit = np.uint64(1) << np.uint64(c % 64)
        if not (coming[s, c // 64] & bit):
            holders[c] += 1
            got[s] += 1
            coming[s, c // 64] |= bit
        heapq.heappush(events, (init_t[i], np.int64(s), np.int64(c)))
    need = np.int64(need0)
    # rows out
    r_chunk = []
    r_hop = []
    r_seg = []
    r_start = []
    r_end = []
    owner = np.full(L1, -1, dtype=np.int64)
    pending = np.zeros(L1, dtype=np.int64)
    cand = np.zeros(W, dtype=np.uint64)
    t = init_t.min()
    # the picks of one event hold disjoint links: at most one per link
    pk_v = np.empty(L1, dtype=np.int64)
    pk_h = np.empty(L1, dtype=np.int64)
    pk_c = np.empty(L1, dtype=np.int64)
    in_tree = np.zeros(n, dtype=np.bool_)
    used = np.zeros(L1, dtype=np.bool_)
    n_events = 0
    while True:
        eps = 1e-9 * max(1.0, abs(t))
        while len(events) > 0 and events[0][0] <= t + eps:
            e = heapq.heappop(events)
            v = e[1]
            c = e[2]
            wi = c // 64
            bit = np.uint64(1) << np.uint64(c % 64)
            if not (has[v, wi] & bit):
                has[v, wi] |= bit
                coming[v, wi] &= ~bit
                if needbits[v, wi] & bit:
                    need -= 1
                if mode == SUBSET_KEPT:
                    _kept_arrival(v, c, hdst, has, coming, needbits, relay_ptr, relay_idx, local_first, kept)
        if need == 0:
            break
        n_events += 1
        # the neediest receivers first, ties at random
        order = np.argsort(got + np.random.random(n) * 0.5)
        if mode == SUBSET_KEPT:
            kept[15][0] += 1          # a new event: every cached offer is stale
        # ---- greedy matching
        npk = 0
        for oi in range(n):
            v = order[oi]
            while True:
                bh, bc = _best_free_hop(v, -1, t, eps, into_ptr, into_idx, busy, link_pad, off_pad, owner, hsrc, has,
                                        coming, picked, near_ptr, near_npu, near_dur, hdur, holders, key, rarest,
                                        local_first, cand, cap, needbits, mode, relay_ptr, relay_idx, kept)
                if bh < 0:
                    break
                _place(npk, v, bh, bc, pk_v, pk_h, pk_c, hlen, link_pad, owner, picked)
                if mode == SUBSET_KEPT:
                    _kept_picked(v, bc, into_ptr, into_idx, local_first, kept)
                npk += 1
        # ---- augment: a receiver without a pick takes a hop held by one other pick that can move
        for q in range(npk):
            in_tree[pk_v[q]] = True          # (borrowed as "has a pick" until the commit)
        for oi in range(n):
            v = order[oi]
            if in_tree[v]:
                continue
            for j in range(into_ptr[v], into_ptr[v + 1]):
                h = into_idx[j]
                k_block = -1
                ok = True
                for k in range(link_pad.shape[1]):
                    l = link_pad[h, k]
                    if busy[l] > t + off_pad[h, k] + eps:
                        ok = False
                        break
                    o = owner[l]
                    if o >= 0:
                        if k_block >= 0 and o != k_block:
                            ok = False
                            break
                        k_block = o
                if not ok or k_block < 0:
                    continue
                c, hh, kk = _offer(h, v, hsrc, has, coming, picked, near_ptr, near_npu, near_dur, hdur, holders,
                                   key, rarest, local_first, cand, cap, needbits, mode, relay_ptr, relay_idx, kept)
                if c < 0:
                    continue
                w = pk_v[k_block]
                hw = pk_h[k_block]
                cw = pk_c[k_block]
                # release k_block, block h's links, look for another hop for w
                for k in range(hlen[hw]):
                    owner[link_pad[hw, k]] = -1
                for k in range(hlen[h]):
                    owner[link_pad[h, k]] = -2
                picked[w, cw // 64] &= ~(np.uint64(1) << np.uint64(cw % 64))
                if mode == SUBSET_KEPT:
                    _kept_picked(w, cw, into_ptr, into_idx, local_first, kept)
                h2, c2 = _best_free_hop(w, hw, t, eps, into_ptr, into_idx, busy, link_pad, off_pad, owner, hsrc, has,
                                        coming, picked, near_ptr, near_npu, near_dur, hdur, holders, key, rarest,
                                        local_first, cand, cap, needbits, mode, relay_ptr, relay_idx, kept)
                for k in range(hlen[h]):
                    owner[link_pad[h, k]] = -1
                if h2 >= 0:
                    _place(k_block, w, h2, c2, pk_v, pk_h, pk_c, hlen, link_pad, owner, picked)
                    _place(npk, v, h, c, pk_v, pk_h, pk_c, hlen, link_pad, owner, picked)
                    if mode == SUBSET_KEPT:
                        _kept_picked(w, c2, into_ptr, into_idx, local_first, kept)
                        _kept_picked(v, c, into_ptr, into_idx, local_first, kept)
                    npk += 1
                    in_tree[v] = True
                    break
                for k in range(hlen[hw]):
                    owner[link_pad[hw, k]] = k_block
                picked[w, cw // 64] |= np.uint64(1) << np.uint64(cw % 64)
                if mode == SUBSET_KEPT:
                    _kept_picked(w, cw, into_ptr, into_idx, local_first, kept)
        # ---- commit: each pick grows its multicast tree and reserves its links
        for q in range(npk):
            in_tree[pk_v[q]] = False
        for q in range(npk):
            for k in range(hlen[pk_h[q]]):
                pending[link_pad[pk_h[q], k]] += 1
        for q in range(npk):
            v = pk_v[q]
            h = pk_h[q]
            c = pk_c[q]
            for k in range(hlen[h]):
                pending[link_pad[h, k]] -= 1
            wi = c // 64
            bit = np.uint64(1) << np.uint64(c % 64)
            if (has[v, wi] & bit) or (coming[v, wi] & bit):
                continue
            okh = True
            for k in range(hlen[h]):
                if busy[link_pad[h, k]] > t + off_pad[h, k] + eps:
                    okh = False
                    break
            if not okh:
                continue
            # the tree: h plus branches at its first multicast switch
            tree = [h]
            in_tree[v] = True
            for k in range(hlen[h]):
                used[link_pad[h, k]] = True
            p = mc_pos[h]
            if p >= 0:
                g = grp[h]
                for j in range(grp_ptr[g], grp_ptr[g + 1]):
                    h2 = grp_idx[j]
                    w = hdst[h2]
                    if in_tree[w] or not (needbits[w, wi] & bit) or (has[w, wi] & bit) or (coming[w, wi] & bit):
                        continue
                    okb = True
                    for k in range(p, hlen[h2]):
                        l = link_pad[h2, k]
                        if used[l] or pending[l] > 0 or busy[l] > t + off_pad[h2, k] + eps:
                            okb = False
                            break
                    if not okb:
                        continue
                    tree.append(h2)
                    in_tree[w] = True
                    for k in range(p, hlen[h2]):
                        used[link_pad[h2, k]] = True
            # rows: segments starting at the same node and time share their first links: one end for all
            for x in tree:
                for k in range(hlen[x]):
                    used[link_pad[x, k]] = False
                in_tree[hdst[x]] = False
            m = len(tree)
            # the latest end of each (segment start node, start time) among the tree's segments
            for a in range(m):
                x = tree[a]
                for sidx in range(seg_ptr[x], seg_ptr[x + 1]):
                    st = t + off_pad[x, seg_a[sidx]]
                    en = t + end_pad[x, seg_a[sidx]]
                    node = seg_start_node[sidx]
                    for b in range(m):
                        y = tree[b]
                        for s2 in range(seg_ptr[y], seg_ptr[y + 1]):
                            if seg_start_node[s2] == node and abs(t + off_pad[y, seg_a[s2]] - st) <= eps:
                                e2 = t + end_pad[y, seg_a[s2]]
                                if e2 > en:
                                    en = e2
                    # a segment identical to one already written (shared prefix) is written once
                    dup = False
                    for b in range(a):
                        y = tree[b]
                        for s2 in range(seg_ptr[y], seg_ptr[y + 1]):
                            if (seg_b[s2] - seg_a[s2] == seg_b[sidx] - seg_a[sidx]
                                    and abs(off_pad[y, seg_a[s2]] - off_pad[x, seg_a[sidx]]) <= eps):
                                same = True
                                for k in range(seg_b[sidx] - seg_a[sidx] + 1):
                                    if link_pad[y, seg_a[s2] + k] != link_pad[x, seg_a[sidx] + k]:
                                        same = False
                                        break
                                if same:
                                    dup = True
                                    break
                        if dup:
                            break
                    for k in range(seg_a[sidx], seg_b[sidx] + 1):
                        l = link_pad[x, k]
                        if busy[l] < en:
                            busy[l] = en
                    if not dup:
                        r_chunk.append(c)
                        r_hop.append(x)
                        r_seg.append(sidx)
                        r_start.append(st)
                        r_end.append(en)
                    if sidx == seg_ptr[x + 1] - 1:
                        w = hdst[x]
                        coming[w, wi] |= bit
                        if mode == SUBSET_KEPT:
                            _kept_receiving(w, c, into_ptr, into_idx, hdst, has, coming, needbits, relay_ptr,
                                            relay_idx, kept)
                        holders[c] += 1
                        got[w] += 1
                        heapq.heappush(events, (en, np.int64(w), np.int64(c)))
        # reset this event's marks (a pick's own bit: the picks are all the bits set, and rows are W words long)
        for q in range(npk):
            c = pk_c[q]
            picked[pk_v[q], c // 64] &= ~(np.uint64(1) << np.uint64(c % 64))
            for k in range(hlen[pk_h[q]]):
                owner[link_pad[pk_h[q], k]] = -1
        # the next event: an arrival, or a link becoming free
        nxt = _next_time(events, busy, t, eps)
        if nxt == np.inf:
            return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64),
                    np.array(r_seg, dtype=np.int64), np.array(r_start), np.array(r_end), need, n_events)
        t = nxt
    return (np.array(r_chunk, dtype=np.int64), np.array(r_hop, dtype=np.int64), np.array(r_seg, dtype=np.int64),
            np.array(r_start), np.array(r_end), need, n_events)
