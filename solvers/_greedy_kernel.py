"""numba kernels of the greedy TACOS matcher (see :mod:`solvers.greedy` and ``docs/greedy.md``).

Everything works on flat arrays, so no Python object is built per transfer.

Data layout
-----------
* Holdings are bitsets: bit ``b`` of ``H[v, w]`` says NPU ``v`` holds chunk
  ``64*w + b``; ``R[v]`` marks chunks whose first copy is in flight to ``v``.
* Candidate counts (exact mode, ``window == 0``): for link ``l = u->v`` the
  candidates are ``D_l = H[u] & ~(H[v] | R[v])``. ``wc[l, w]`` is the number of
  them in bitset word ``w``, ``bc[l, b]`` the number in the block of
  ``BLOCK_WORDS`` words ``b`` and ``tot[l]`` the total. They are kept exact in
  O(degree) per transfer (a chunk joins ``D_l`` when ``u`` receives it and ``v``
  still needs it; it leaves every ``D_{x->v}`` when its first copy to ``v``
  starts). A matching then reaches the candidates without touching empty words,
  and the random order draws a uniform candidate in O(blocks + words per block)
  without listing them (:func:`_select`).
* Arrival logs (window mode, ``window > 0``): ``log[u, :loglen[u]]`` are the
  chunks ``u`` holds in arrival order; link ``l`` keeps a pointer ``lptr[l]``
  past the prefix its receiver no longer needs and offers the first ``window``
  entries still needed.
* Event queue: links are grouped into classes of equal chunk time; transfers of
  one class end in the order they start, so each class is a FIFO ring of
  ``(link, generation, end)`` entries and a small indexed heap orders the class
  heads. A homogeneous topology has one class and no heap work at all.
* Finished transfers are appended to the ``out_*`` buffers at their arrival,
  when it is known whether they were the first copy; the caller drains the
  buffers between slices (``ST_FLUSH``), so their size does not grow with the
  schedule.

The event loop is resumable: :func:`run_events` processes at most
``max_events`` event times and returns with all state left in its arrays. It
allocates nothing and runs with numba's reference counting (NRT) off.

Integer codes shared with :mod:`solvers.greedy`:

* chunk order: ``ORDER_RANDOM, ORDER_RAREST, ORDER_FARTHEST, ORDER_OLDEST``
* link tie-break: ``TIE_EARLIEST, TIE_RANDOM, TIE_LOWEST``
* matching: ``MATCH_GREEDY, MATCH_MAXIMUM``
* return status: ``ST_DONE, ST_SLICE, ST_FLUSH, ST_STUCK``
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from tacos_bench._native import prefetch as _prefetch

ORDER_RANDOM, ORDER_RAREST, ORDER_FARTHEST, ORDER_OLDEST = 0, 1, 2, 3
TIE_EARLIEST, TIE_RANDOM, TIE_LOWEST = 0, 1, 2
MATCH_GREEDY, MATCH_MAXIMUM = 0, 1
ST_DONE, ST_SLICE, ST_FLUSH, ST_STUCK = 0, 1, 2, 3

# counters in the int64 ``ctr`` array
(C_EVENTS, C_REMAINING, C_WASTED, C_CANCELLED, C_OUT, C_STARTED, C_AUGMENTED, C_MATCHES,
 C_SCANNED, C_CANDIDATES, C_DRAWS) = range(11)
NUM_COUNTERS = 11
# float statistics in ``fst``
F_WASTED_US, F_CANCELLED_US = 0, 1
NUM_FSTATS = 2

BLOCK_SHIFT = 5            # blocks of 32 bitset words (2048 chunks) in the candidate counts
BLOCK_WORDS = 1 << BLOCK_SHIFT

_U1 = np.uint64(1)
_U0 = np.uint64(0)


@intrinsic
def _popcount(typingctx, x):
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(64)])
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _ctz(typingctx, x):
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.cttz", [ir.IntType(64), ir.IntType(1)])
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])

    return sig, codegen


# ---------------------------------------------------------------------------- random numbers
@njit(cache=True, inline="always")
def _next_u64(rng):
    """splitmix64: tiny, portable, and fully determined by the seed."""
    z = rng[0] + np.uint64(0x9E3779B97F4A7C15)
    rng[0] = z
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _below(rng, n):
    """Uniform integer in ``[0, n)`` (n < 2**32 here, so the modulo bias is < 2**-32)."""
    return np.int64(_next_u64(rng) % np.uint64(n))


# ---------------------------------------------------------------------------- bit helpers
@njit(cache=True, inline="always")
def _has(row, c):
    return (row[c >> 6] >> np.uint64(c & 63)) & _U1


# ---------------------------------------------------------------------------- indexed min-heap
@njit(cache=True, inline="always")
def _heap_less(key, a, b):
    ka, kb = key[a], key[b]
    return ka < kb or (ka == kb and a < b)


@njit(cache=True, _nrt=False)
def _sift_up(heap, pos, key, i):
    x = heap[i]
    while i > 0:
        p = (i - 1) >> 1
        y = heap[p]
        if _heap_less(key, x, y):
            heap[i] = y
            pos[y] = i
            i = p
        else:
            break
    heap[i] = x
    pos[x] = i


@njit(cache=True, _nrt=False)
def _sift_down(heap, pos, key, i, n):
    x = heap[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _heap_less(key, heap[c + 1], heap[c]):
            c += 1
        y = heap[c]
        if _heap_less(key, y, x):
            heap[i] = y
            pos[y] = i
            i = c
        else:
            break
    heap[i] = x
    pos[x] = i


@njit(cache=True, _nrt=False)
def _heap_push(heap, pos, hsize, key, item):
    n = hsize[0]
    heap[n] = item
    pos[item] = n
    hsize[0] = n + 1
    _sift_up(heap, pos, key, n)


@njit(cache=True, _nrt=False)
def _heap_remove(heap, pos, hsize, key, item):
    i = pos[item]
    n = hsize[0] - 1
    hsize[0] = n
    pos[item] = -1
    if i == n:
        return
    last = heap[n]
    heap[i] = last
    pos[last] = i
    _sift_down(heap, pos, key, i, n)
    _sift_up(heap, pos, key, pos[last])


# ---------------------------------------------------------------------------- hop distances
@njit(cache=True)
def hop_distances(num_npus, out_ptr, ldst):
    """All-pairs hop distances by one BFS per source (``int32[N, N]``, -1 = unreachable)."""
    n = num_npus
    dist = np.full((n, n), -1, dtype=np.int32)
    queue = np.empty(n, dtype=np.int64)
    for s in range(n):
        row = dist[s]
        row[s] = 0
        head, tail = 0, 1
        queue[0] = s
        while head < tail:
            u = queue[head]
            head += 1
            du = row[u] + 1
            for l in range(out_ptr[u], out_ptr[u + 1]):
                w = ldst[l]
                if row[w] < 0:
                    row[w] = du
                    queue[tail] = w
                    tail += 1
    return dist


# ---------------------------------------------------------------------------- candidate counts
@njit(cache=True, inline="always")
def _count_add(wc, bc, tot, l, w, delta):
    wc[l, w] += delta
    bc[l, w >> BLOCK_SHIFT] += delta
    tot[l] += delta


@njit(cache=True, _nrt=False)
def init_counts(lsrc, ldst, H, R, wc, bc, tot):
    """Candidate counts of the initial state (every link may offer what its sender starts with)."""
    W = H.shape[1]
    for l in range(lsrc.shape[0]):
        u = lsrc[l]
        v = ldst[l]
        for w in range(W):
            x = H[u, w] & ~(H[v, w] | R[v, w])
            if x != _U0:
                n = np.int64(_popcount(x))
                wc[l, w] = n
                bc[l, w >> BLOCK_SHIFT] += n
                tot[l] += n


@njit(cache=True, inline="always")
def _select(l, r, u, v, H, R, wc, bc):
    """The ``r``-th (0-based, in chunk-id order) candidate chunk of link ``l = u->v``."""
    b = 0
    while r >= bc[l, b]:
        r -= bc[l, b]
        b += 1
    w = b << BLOCK_SHIFT
    while r >= wc[l, w]:
        r -= wc[l, w]
        w += 1
    x = H[u, w] & ~(H[v, w] | R[v, w])
    for _ in range(r):
        x &= x - _U1
    return (w << 6) + np.int64(_ctz(x))


@njit(cache=True, inline="always")
def _claim(v, c, N, H, R, in_ptr, in_order, lsrc, counted, wc, bc, tot, copies, chunk_order, cnt, rmax, dist):
    """The first copy of chunk ``c`` to ``v`` starts: ``v`` is now receiving it."""
    w = c >> 6
    bit = _U1 << np.uint64(c & 63)
    R[v, w] |= bit
    copies[c] += 1
    if counted:
        for j in range(in_ptr[v], in_ptr[v + 1]):
            l = in_order[j]
            if H[lsrc[l], w] & bit:
                _count_add(wc, bc, tot, l, w, -1)
    if chunk_order == ORDER_FARTHEST:
        o = c % N
        cnt[c, dist[o, v]] -= 1
        r = rmax[c]
        while r > 0 and cnt[c, r] == 0:
            r -= 1
        rmax[c] = r


@njit(cache=True, inline="always")
def _holds(H, x, c):
    return (H[x, c >> 6] >> np.uint64(c & 63)) & _U1


@njit(cache=True, inline="always")
def _tie_step(i, best, ties, F, ltime, link_tiebreak, rng):
    """One eligible in-link ``i`` (local index; link id ``F[i]``) against the best so far: the new
    ``(best, ties)`` under the tie-break rule (equal candidates are kept by reservoir sampling)."""
    if best < 0:
        return i, 1
    if link_tiebreak == TIE_LOWEST:
        return (i if F[i] < F[best] else best), ties
    if link_tiebreak == TIE_EARLIEST:
        if ltime[F[i]] < ltime[F[best]]:
            return i, 1
        if ltime[F[i]] != ltime[F[best]]:
            return best, ties
    ties += 1
    return (i if _below(rng, ties) == 0 else best), ties


@njit(cache=True, inline="always")
def _pick_holder(c, k, F, achunk, lsrc, H, ltime, link_tiebreak, rng):
    """Among the free, unassigned in-links whose sender holds ``c``, one by the tie-break rule."""
    best = -1
    ties = 0
    for i in range(k):
        if achunk[i] < 0 and _holds(H, lsrc[F[i]], c):
            best, ties = _tie_step(i, best, ties, F, ltime, link_tiebreak, rng)
    return best


# ---------------------------------------------------------------------------- event rings
@njit(cache=True, inline="always")
def _ring_push(q_link, q_gen, q_end, r_off, r_cap, r_head, r_size, k, l, g, end_t, gen, cur_chunk):
    if r_size[k] == r_cap[k]:
        # full only with stale entries left by preemption: squeeze them out in place
        off, cap, h, n = r_off[k], r_cap[k], r_head[k], r_size[k]
        j = 0
        for p in range(n):
            s = off + (h + p) % cap
            ll = q_link[s]
            if gen[ll] == q_gen[s] and cur_chunk[ll] >= 0:
                d = off + (h + j) % cap
                q_link[d] = ll
                q_gen[d] = q_gen[s]
                q_end[d] = q_end[s]
                j += 1
        r_size[k] = j
    s = r_off[k] + (r_head[k] + r_size[k]) % r_cap[k]
    q_link[s] = l
    q_gen[s] = g
    q_end[s] = end_t
    r_size[k] += 1


# ---------------------------------------------------------------------------- candidate lists
@njit(cache=True, inline="always")
def _mask_has(cmask, j, i):
    return (cmask[j, i >> 6] >> np.uint64(i & 63)) & _U1


@njit(cache=True, inline="always")
def _offered(cmask, j, free):
    """True if a still-free in-link can carry candidate ``j``."""
    for q in range(free.shape[0]):
        if cmask[j, q] & free[q]:
            return True
    return False


@njit(cache=True, inline="always")
def _add_candidate(c, i, v, N, chunk_order, src, slot, cand, ckey, cmask, casg, nc,
                   copies, rmax, dist, arr_time):
    """Record that free in-link ``i`` (from ``src``) can carry chunk ``c``; returns the new count."""
    j = slot[c]
    if j < 0:
        j = nc
        nc += 1
        slot[c] = j
        cand[j] = c
        casg[j] = -1
        for q in range(cmask.shape[1]):
            cmask[j, q] = _U0
        if chunk_order == ORDER_RAREST:
            ckey[j] = np.float64(copies[c])
        elif chunk_order == ORDER_FARTHEST:
            # minus a lower bound on the hops c still has to travel beyond v
            ckey[j] = -np.float64(rmax[c] - dist[c % N, v])
        elif chunk_order == ORDER_OLDEST:
            ckey[j] = np.inf
        else:
            ckey[j] = 0.0
    cmask[j, i >> 6] |= _U1 << np.uint64(i & 63)
    if chunk_order == ORDER_OLDEST:
        a = arr_time[src, c]
        if a < ckey[j]:
            ckey[j] = a
    return nc


@njit(cache=True, inline="always")
def _pick_link(j, cmask, free, F, ltime, link_tiebreak, k, rng):
    """Among the free in-links offering candidate ``j``, choose one by the tie-break rule."""
    best = -1
    ties = 0
    for i in range(k):
        if (free[i >> 6] >> np.uint64(i & 63)) & _U1 and _mask_has(cmask, j, i):
            best, ties = _tie_step(i, best, ties, F, ltime, link_tiebreak, rng)
    return best


# ---------------------------------------------------------------------------- the event loop
def make_workspace(N, C, maxdeg):
    """Scratch arrays of :func:`run_events` (allocated once per run, reused by every slice)."""
    W = (C + 63) // 64
    C64 = W * 64
    MWd = max(1, (maxdeg + 63) // 64)
    d = max(1, maxdeg)
    return (
        np.empty(d, dtype=np.int64),              # F: free in-links of the destination
        np.empty(d, dtype=np.int64),              # asg: candidate index given to each free in-link, -1 none
        np.empty(d, dtype=np.int64),              # achunk: chunk given to each free in-link, -1 none
        np.empty(d, dtype=np.bool_),              # rdone: its first copy was already claimed
        np.full(C64, -1, dtype=np.int64),         # slot: candidate index of a chunk, -1 none
        np.empty(C64, dtype=np.int64),            # cand: candidate chunks
        np.empty(C64, dtype=np.float64),          # ckey: their priority key (smaller first)
        np.zeros((C64, MWd), dtype=np.uint64),    # cmask: bit i = free in-link F[i] can carry it
        np.empty(C64, dtype=np.int64),            # casg: link index a candidate went to, -1 none
        np.empty(C64, dtype=np.int64),            # alive: candidates still worth a look
        np.empty(MWd, dtype=np.uint64),           # free: bit i = free in-link F[i] not yet matched
        np.empty(d, dtype=np.int64),              # bfs_q
        np.empty(d, dtype=np.int64),              # bfs_par
        np.empty(d, dtype=np.bool_),              # bfs_seen
        np.empty(N, dtype=np.int64),              # dirty: destinations to match at this event
        np.zeros(N, dtype=np.bool_),              # is_dirty
    )


# NRT (numba's reference counting) is off: this kernel allocates nothing, and the atomic
# reference-count updates on every array view and inlined helper call otherwise dominate its run time.
@njit(cache=True, _nrt=False)
def run_events(N, lsrc, ldst, ltime, lclass, in_ptr, in_order, out_ptr,
               chunk_order, link_tiebreak, matching, duplicates, preempt, window, dist,
               H, R, cur_chunk, cur_start, busy_until, gen,
               wc, bc, tot, log, loglen, lptr,
               q_link, q_gen, q_end, r_off, r_cap, r_head, r_size,
               cheap, cpos, csize, chead,
               copies, cnt, rmax, arr_time, rng, clock, ctr, fst,
               out_chunk, out_link, out_start, out_end, max_events,
               F, asg, achunk, rdone, slot, cand, ckey, cmask, casg, alive, free, bfs_q, bfs_par, bfs_seen,
               dirty, is_dirty):
    """Advance the greedy matcher by at most ``max_events`` event times.

    Returns a status code (``ST_*``). ``clock[0]`` is the current event time
    (negative before the first event). The kernel returns ``ST_FLUSH`` before
    an event whenever fewer than ``num_links`` output slots are free; the
    caller then drains ``out_*[:ctr[C_OUT]]`` and resets ``ctr[C_OUT]``.
    """
    M = lsrc.shape[0]
    maxdeg = 0
    for v in range(N):
        d = in_ptr[v + 1] - in_ptr[v]
        if d > maxdeg:
            maxdeg = d
    cap = out_chunk.shape[0]
    counted = window == 0
    # uniform draws from the counts: no candidate list needed
    fast = counted and chunk_order == ORDER_RANDOM and not duplicates

    events = 0
    while events < max_events:
        if ctr[C_REMAINING] == 0:
            return ST_DONE
        if cap - ctr[C_OUT] < M:
            return ST_FLUSH
        ndirty = 0
        if clock[0] < 0.0:
            t = 0.0
            for v in range(N):
                dirty[ndirty] = v
                ndirty += 1
                is_dirty[v] = True
        else:
            if csize[0] == 0:
                return ST_STUCK
            t = chead[cheap[0]]
            # apply every arrival at t before any matching: a node may forward a chunk the instant it arrives
            while csize[0] > 0 and chead[cheap[0]] == t:
                kc = cheap[0]
                off, rc = r_off[kc], r_cap[kc]
                while r_size[kc] > 0:
                    s = off + r_head[kc]
                    if q_end[s] != t:
                        break
                    l = q_link[s]
                    g = q_gen[s]
                    r_head[kc] = (r_head[kc] + 1) % rc
                    r_size[kc] -= 1
                    if gen[l] != g or cur_chunk[l] < 0:
                        continue  # withdrawn by preemption
                    c = cur_chunk[l]
                    cur_chunk[l] = -1
                    v = ldst[l]
                    if not is_dirty[v]:
                        is_dirty[v] = True
                        dirty[ndirty] = v
                        ndirty += 1
                    w = c >> 6
                    bit = _U1 << np.uint64(c & 63)
                    if H[v, w] & bit:
                        ctr[C_WASTED] += 1
                        fst[F_WASTED_US] += t - cur_start[l]
                        continue
                    o = ctr[C_OUT]
                    out_chunk[o] = c
                    out_link[o] = l
                    out_start[o] = cur_start[l]
                    out_end[o] = t
                    ctr[C_OUT] = o + 1
                    H[v, w] |= bit
                    R[v, w] &= ~bit
                    ctr[C_REMAINING] -= 1
                    if chunk_order == ORDER_OLDEST:
                        arr_time[v, c] = t
                    if not counted:
                        log[v, loglen[v]] = c
                        loglen[v] += 1
                    for ol in range(out_ptr[v], out_ptr[v + 1]):
                        nb = ldst[ol]
                        if H[nb, w] & bit:
                            continue
                        if R[nb, w] & bit:
                            # in flight to nb: only a faster duplicate could still help
                            if duplicates and cur_chunk[ol] < 0 and not is_dirty[nb]:
                                is_dirty[nb] = True
                                dirty[ndirty] = nb
                                ndirty += 1
                            continue
                        if counted:
                            _count_add(wc, bc, tot, ol, w, 1)
                        if cur_chunk[ol] < 0 and not is_dirty[nb]:
                            is_dirty[nb] = True
                            dirty[ndirty] = nb
                            ndirty += 1
                if r_size[kc] == 0:
                    _heap_remove(cheap, cpos, csize, chead, kc)
                else:
                    chead[kc] = q_end[off + r_head[kc]]
                    _sift_down(cheap, cpos, chead, cpos[kc], csize[0])
        clock[0] = t
        events += 1
        ctr[C_EVENTS] += 1

        for di in range(ndirty):
            v = dirty[di]
            is_dirty[v] = False
            rounds = 0
            while True:
                rounds += 1
                preempted = False
                for _once in range(1):  # the matching of v; `break` leaves it early
                    k = 0
                    busy = False
                    for j in range(in_ptr[v], in_ptr[v + 1]):
                        l = in_order[j]
                        if cur_chunk[l] < 0:
                            F[k] = l
                            achunk[k] = -1
                            rdone[k] = False
                            k += 1
                        else:
                            busy = True
                    if k == 0:
                        break
                    Hv = H[v]
                    Rv = R[v]

                    if fast:
                        # ---- random order from the counts: draw (link, candidate) uniformly, keep a chunk
                        # offered by m free links with probability 1/m: uniform over distinct chunks
                        nfree = k
                        first = True
                        while nfree > 0:
                            S = 0
                            for i in range(k):
                                if achunk[i] < 0:
                                    S += tot[F[i]]
                            if S == 0:
                                break
                            if first:
                                ctr[C_MATCHES] += 1
                                ctr[C_CANDIDATES] += S
                                first = False
                            ctr[C_DRAWS] += 1
                            r = _below(rng, S)
                            i = 0
                            while True:
                                if achunk[i] < 0:
                                    if r < tot[F[i]]:
                                        break
                                    r -= tot[F[i]]
                                i += 1
                            c = _select(F[i], r, lsrc[F[i]], v, H, R, wc, bc)
                            mult = 0
                            for j in range(k):
                                if achunk[j] < 0 and _holds(H, lsrc[F[j]], c):
                                    mult += 1
                            if mult > 1 and _below(rng, mult) != 0:
                                continue
                            i = _pick_holder(c, k, F, achunk, lsrc, H, ltime, link_tiebreak, rng)
                            achunk[i] = c
                            rdone[i] = True
                            nfree -= 1
                            _claim(v, c, N, H, R, in_ptr, in_order, lsrc, counted, wc, bc, tot, copies,
                                   chunk_order, cnt, rmax, dist)
                        if matching == MATCH_MAXIMUM and nfree > 0:
                            # augmenting paths: an idle link takes the chunk of a link that can take a fresh one
                            for a in range(k):
                                if achunk[a] >= 0:
                                    continue
                                for i in range(k):
                                    bfs_seen[i] = False
                                    bfs_par[i] = -1
                                head, tail = 0, 1
                                bfs_q[0] = a
                                bfs_seen[a] = True
                                end = -1
                                while head < tail:
                                    i = bfs_q[head]
                                    head += 1
                                    if tot[F[i]] > 0:
                                        end = i
                                        break
                                    ui = lsrc[F[i]]
                                    for i2 in range(k):
                                        if not bfs_seen[i2] and achunk[i2] >= 0 and _holds(H, ui, achunk[i2]):
                                            bfs_seen[i2] = True
                                            bfs_par[i2] = i
                                            bfs_q[tail] = i2
                                            tail += 1
                                if end < 0:
                                    continue
                                c = _select(F[end], _below(rng, tot[F[end]]), lsrc[F[end]], v, H, R, wc, bc)
                                _claim(v, c, N, H, R, in_ptr, in_order, lsrc, counted, wc, bc, tot, copies,
                                       chunk_order, cnt, rmax, dist)
                                i = end
                                while True:
                                    prev = achunk[i]
                                    achunk[i] = c
                                    rdone[i] = True
                                    p = bfs_par[i]
                                    if p < 0:
                                        break
                                    c = prev
                                    i = p
                                ctr[C_AUGMENTED] += 1
                    else:
                        # ---- list the candidates, then match them in chunk order
                        nc = 0
                        for i in range(k):
                            l = F[i]
                            u = lsrc[l]
                            if not counted:
                                # the `window` earliest arrivals at the sender that v still needs
                                q0 = lptr[l]
                                q = q0
                                qend = loglen[u]
                                found = 0
                                prefix = True
                                while q < qend and found < window:
                                    c = np.int64(log[u, q])
                                    q += 1
                                    if ((Hv[c >> 6] | Rv[c >> 6]) >> np.uint64(c & 63)) & _U1:
                                        if prefix:
                                            lptr[l] = q  # never needed again over this link
                                        continue
                                    prefix = False
                                    found += 1
                                    nc = _add_candidate(c, i, v, N, chunk_order, u, slot, cand, ckey, cmask, casg,
                                                        nc, copies, rmax, dist, arr_time)
                                ctr[C_SCANNED] += q - q0
                                continue
                            if tot[l] == 0:
                                continue
                            Hs = H[u]
                            for b in range(bc.shape[1]):
                                if bc[l, b] == 0:
                                    continue
                                w1 = min((b + 1) << BLOCK_SHIFT, wc.shape[1])
                                for w in range(b << BLOCK_SHIFT, w1):
                                    if wc[l, w] == 0:
                                        continue
                                    ctr[C_SCANNED] += 1
                                    x = Hs[w] & ~(Hv[w] | Rv[w])
                                    while x != _U0:
                                        c = (w << 6) + np.int64(_ctz(x))
                                        x &= x - _U1
                                        nc = _add_candidate(c, i, v, N, chunk_order, u, slot, cand, ckey, cmask,
                                                            casg, nc, copies, rmax, dist, arr_time)
                        if duplicates and busy:
                            # a chunk in flight to v may be sent again over a link that delivers it strictly earlier
                            for j in range(in_ptr[v], in_ptr[v + 1]):
                                lb = in_order[j]
                                c = cur_chunk[lb]
                                if c < 0 or _has(Hv, c):
                                    continue
                                first_end = busy_until[lb]
                                for j2 in range(in_ptr[v], in_ptr[v + 1]):  # the earliest copy in flight counts
                                    l2 = in_order[j2]
                                    if cur_chunk[l2] == c and busy_until[l2] < first_end:
                                        first_end = busy_until[l2]
                                for i in range(k):
                                    u = lsrc[F[i]]
                                    if t + ltime[F[i]] < first_end and _has(H[u], c):
                                        nc = _add_candidate(c, i, v, N, chunk_order, u, slot, cand, ckey, cmask,
                                                            casg, nc, copies, rmax, dist, arr_time)
                        if nc == 0:
                            break
                        ctr[C_MATCHES] += 1
                        ctr[C_CANDIDATES] += nc
                        for q in range(free.shape[0]):
                            free[q] = _U0
                        for i in range(k):
                            free[i >> 6] |= _U1 << np.uint64(i & 63)
                            asg[i] = -1
                        for j in range(nc):
                            alive[j] = j

                        # greedy pass: candidates in chunk order, each to a free in-link by the tie-break rule
                        nalive = nc
                        nfree = k
                        while nfree > 0 and nalive > 0:
                            if chunk_order == ORDER_RANDOM:
                                p = _below(rng, nalive)
                                j = alive[p]
                                if not _offered(cmask, j, free):
                                    nalive -= 1  # every link that could carry it is taken
                                    alive[p] = alive[nalive]
                                    continue
                            else:
                                p = -1
                                ties = 0
                                q = 0
                                while q < nalive:
                                    j = alive[q]
                                    if not _offered(cmask, j, free):
                                        nalive -= 1
                                        alive[q] = alive[nalive]
                                        continue
                                    if p < 0 or ckey[j] < ckey[alive[p]]:
                                        p, ties = q, 1
                                    elif ckey[j] == ckey[alive[p]]:
                                        ties += 1
                                        if _below(rng, ties) == 0:
                                            p = q
                                    q += 1
                                if p < 0:
                                    break
                                j = alive[p]
                            i = _pick_link(j, cmask, free, F, ltime, link_tiebreak, k, rng)
                            asg[i] = j
                            casg[j] = i
                            free[i >> 6] &= ~(_U1 << np.uint64(i & 63))
                            nfree -= 1
                            nalive -= 1
                            alive[p] = alive[nalive]

                        if matching == MATCH_MAXIMUM and nfree > 0:
                            # augmenting paths (BFS over links) give an idle link a chunk whenever a maximum
                            # matching allows it
                            for a in range(k):
                                if asg[a] >= 0:
                                    continue
                                for i in range(k):
                                    bfs_seen[i] = False
                                    bfs_par[i] = -1
                                head, tail = 0, 1
                                bfs_q[0] = a
                                bfs_seen[a] = True
                                end = -1
                                endj = -1
                                while head < tail:
                                    i = bfs_q[head]
                                    head += 1
                                    # an unassigned candidate link i can carry ends the path (best by chunk order)
                                    ties = 0
                                    for j in range(nc):
                                        if casg[j] >= 0 or not _mask_has(cmask, j, i):
                                            continue
                                        if endj < 0 or ckey[j] < ckey[endj]:
                                            endj, ties = j, 1
                                        elif ckey[j] == ckey[endj]:
                                            ties += 1
                                            if _below(rng, ties) == 0:
                                                endj = j
                                    if endj >= 0:
                                        end = i
                                        break
                                    for i2 in range(k):
                                        if not bfs_seen[i2] and asg[i2] >= 0 and _mask_has(cmask, asg[i2], i):
                                            bfs_seen[i2] = True
                                            bfs_par[i2] = i
                                            bfs_q[tail] = i2
                                            tail += 1
                                if end < 0:
                                    continue
                                j = endj
                                i = end
                                while True:
                                    prev = asg[i]
                                    asg[i] = j
                                    casg[j] = i
                                    p = bfs_par[i]
                                    if p < 0:
                                        break
                                    j = prev
                                    i = p
                                ctr[C_AUGMENTED] += 1

                        for j in range(nc):
                            slot[cand[j]] = -1
                        for i in range(k):
                            if asg[i] >= 0:
                                achunk[i] = cand[asg[i]]

                    # commit the matching: the transfers start now
                    for i in range(k):
                        c = achunk[i]
                        if c < 0:
                            continue
                        l = F[i]
                        ctr[C_STARTED] += 1
                        end_t = t + ltime[l]
                        cur_chunk[l] = c
                        cur_start[l] = t
                        busy_until[l] = end_t
                        gen[l] += 1
                        kc = lclass[l]
                        if r_size[kc] == 0:
                            chead[kc] = end_t
                            _heap_push(cheap, cpos, csize, chead, kc)
                        _ring_push(q_link, q_gen, q_end, r_off, r_cap, r_head, r_size, kc, l, gen[l], end_t, gen,
                                   cur_chunk)
                        if rdone[i]:
                            continue
                        if _has(Rv, c):
                            # a faster duplicate of a chunk already in flight
                            if preempt:
                                for j in range(in_ptr[v], in_ptr[v + 1]):
                                    l2 = in_order[j]
                                    if l2 != l and cur_chunk[l2] == c and busy_until[l2] > end_t:
                                        ctr[C_CANCELLED] += 1
                                        fst[F_CANCELLED_US] += t - cur_start[l2]
                                        cur_chunk[l2] = -1
                                        busy_until[l2] = t
                                        preempted = True
                            continue
                        _claim(v, c, N, H, R, in_ptr, in_order, lsrc, counted, wc, bc, tot, copies,
                               chunk_order, cnt, rmax, dist)
                # a preempted link is free again at t and may carry something else
                if not preempted or rounds > maxdeg * maxdeg + 1:
                    break
    if ctr[C_REMAINING] == 0:
        return ST_DONE
    return ST_SLICE




# ============================================================================ the scale kernel
# The default rule (random chunk order, greedy matching, no duplicates, no window) for very large topologies:
# the same decisions as the fast path of `run_events` (every distinct candidate chunk of the free in-links
# equally likely, then the link by `link_tiebreak`), with a layout and loop structure built for memory-level
# parallelism rather than cache hits. At 40,000 NPUs the state is gigabytes and nearly every access misses;
# a dependent miss costs ~400 ns on this VM, an overlapped (prefetched) one ~10-25 ns.
#
# * `state[c, v]` (uint8/16/32/64 by in-degree): bit 0 = v holds chunk c, bit 1 = v holds or receives it
#   ("claimed"), bit 2 + j = the sender of v's j-th in-link (`in_order[in_ptr[v] + j]`) holds it.
#   Chunk-major, so one transfer's words (its chunk at the receiver and at the neighbours) share cache lines
#   when neighbour ids are close (grids: +-1, +-X): a draw needs one line to know every in-link that can
#   carry the chunk.
# * Candidate set of destination v: `S[v, :slen[v]]`, every chunk that some in-neighbour holds and v has not
#   claimed, without repeats (appended when the first in-neighbour gets the chunk, swap-removed when v
#   claims it; a claim always comes from a draw in S[v], so no entry is ever stale). `jinfo[j, J_TOT]` counts the
#   candidates of in-link j exactly (as `tot` in `run_events`), to know when the free in-links have nothing
#   left. Per-link arrays are indexed by in-position (the link's index in `in_order`), so a destination's
#   in-links are contiguous in memory.
# * A draw takes a uniform entry of S[v] and keeps it when a free in-link can carry it: uniform over the
#   distinct candidates of the free in-links. After SCALE_REJECT_SCAN misses in a row, the entries are
#   probed in order from a random position instead, and the first carriable one is taken (cheaper when few
#   entries are carriable; a slight bias toward entries that follow non-carriable ones).
# * Every phase is a loop over independent items (arrivals; active destinations, one draw each per round),
#   with software prefetches one stage or a fixed distance ahead, so the cache misses overlap.
ST_EVFULL, ST_GROW = 4, 5
SCALE_REJECT_SCAN = 6
SCALE_PF_DIST = 16  # items are prefetched this many places ahead
SCALE_PF_SCAN = 8   # probes of a scan are prefetched this many entries ahead
J_TOT, J_CUR = 0, 1  # fields of the per-in-position records `jinfo`
SCALE_BLOCK = 512   # the stages of a round run block by block, so a block's lines stay in L2 between stages
S_HELD, S_CLAIMED, S_SHIFT = 1, 2, 2
(SC_EVENTS, SC_REMAINING, SC_OUT, SC_DRAWS, SC_REJECTED, SC_SCANS, SC_SCANNED, SC_MATCHES, SC_ROUNDS,
 SC_CANDIDATES, SC_SMAX, SC_STALE) = range(12)
NUM_SCALE_COUNTERS = 12
SCALE_MAX_GROUPS = 4  # in-link groups (by link time) per destination, each with its own candidate set


@njit(cache=True, inline="always")
def _below32(rng, n):
    """Uniform integer in ``[0, n)`` for n < 2**32 by multiply-shift (bias < n / 2**32, no division)."""
    return np.int64(((_next_u64(rng) >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@njit(cache=True, inline="always")
def _nth_bit(x, r):
    """Index of the ``r``-th (0-based) set bit of ``x``."""
    for _ in range(r):
        x &= x - _U1
    return np.int64(_ctz(x))


def scale_state_dtype(max_in_degree: int):
    """Smallest unsigned dtype holding the 2 flag bits and one bit per in-link."""
    bits = S_SHIFT + max_in_degree
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= np.dtype(dt).itemsize * 8:
            return dt
    return None


@njit(cache=True, inline="always")
def _first_in_group(G, st, jgmask, j):
    """Whether no sender of j's group held the chunk before (``st``: the receiver's word before the update)."""
    if G == 1:
        return (st >> S_SHIFT) == 0
    return (np.uint64(st >> S_SHIFT) & jgmask[j]) == _U0


@njit(cache=True, _nrt=False)
def scale_init(N, C, G, ldst, out_ptr, jpos, in_ptr, jgrp, jgmask, state, S, slen, jinfo, ctr):
    """Owners hold their chunks from time 0 (chunk c is owned by NPU c mod N); candidate sets and counts."""
    for c in range(C):
        v = c % N
        state[c, v] |= S_HELD | S_CLAIMED
    for c in range(C):
        u = c % N
        for ol in range(out_ptr[u], out_ptr[u + 1]):
            nb = ldst[ol]
            j = jpos[ol]
            st = state[c, nb]
            state[c, nb] = st | (1 << (S_SHIFT + j - in_ptr[nb]))
            if st & S_CLAIMED:
                continue
            jinfo[j, J_TOT] += 1
            if _first_in_group(G, st, jgmask, j):
                r = nb * G + jgrp[j]
                n = slen[r]
                S[r, n] = c
                slen[r] = n + 1
                if n + 1 > ctr[SC_SMAX]:
                    ctr[SC_SMAX] = n + 1


@njit(cache=True, _nrt=False)
def _scale_arrivals(lo, hi, n_arr, arr_j, arr_c, N, G, jdst, in_ptr, out_ptr, ldst, jpos, jgrp, jgmask,
                    state, S, slen, jinfo, pctr, dirty, is_dirty, statef, Sf, jinfof):
    """Apply the arrivals of one event to the NPUs ``lo .. hi-1`` (receivers and neighbours in that range).

    Every update has one owner (the NPU whose state, candidate set or in-link record it changes), so the
    partitions can run concurrently; each goes through the arrivals in the same order, so the result is
    that of one sequential pass. Returns the length of the partition's dirty list (``dirty[lo:]``).
    """
    scap = S.shape[1]
    nd = 0
    for i in range(n_arr):
        if i + SCALE_PF_DIST < n_arr:
            j2 = arr_j[i + SCALE_PF_DIST]
            row = arr_c[i + SCALE_PF_DIST] * N
            v2 = jdst[j2]
            if lo <= v2 < hi:
                _prefetch(statef, row + v2)
            for ol in range(out_ptr[v2], out_ptr[v2 + 1]):
                nb = ldst[ol]
                if lo <= nb < hi:
                    _prefetch(statef, row + nb)
                    r2 = nb * G + jgrp[jpos[ol]] if G > 1 else nb
                    _prefetch(Sf, r2 * scap + slen[r2])
                    _prefetch(jinfof, jpos[ol] * 2)
        j = arr_j[i]
        c = arr_c[i]
        v = jdst[j]
        if lo <= v < hi:
            jinfo[j, J_CUR] = -1
            state[c, v] |= S_HELD
            if not is_dirty[v]:
                is_dirty[v] = True
                dirty[lo + nd] = v
                nd += 1
        for ol in range(out_ptr[v], out_ptr[v + 1]):
            nb = ldst[ol]
            if nb < lo or nb >= hi:
                continue
            jo = jpos[ol]
            st = state[c, nb]
            state[c, nb] = st | (1 << (S_SHIFT + jo - in_ptr[nb]))
            if st & S_CLAIMED:
                continue
            jinfo[jo, J_TOT] += 1
            if _first_in_group(G, st, jgmask, jo):  # the first in-neighbour of nb's group with c: a new candidate
                r = nb * G + jgrp[jo]
                n = slen[r]
                S[r, n] = c
                slen[r] = n + 1
                if n + 1 > pctr[SC_SMAX]:
                    pctr[SC_SMAX] = n + 1
            if jinfo[jo, J_CUR] < 0 and not is_dirty[nb]:
                is_dirty[nb] = True
                dirty[lo + nd] = nb
                nd += 1
    return nd


@njit(cache=True, _nrt=False)
def _scale_match(lo, nd, e, N, G, jlink, jtime, in_ptr, jgrp, vgmask, link_tiebreak, state, S, slen, jinfo,
                 rng, pctr, dirty, is_dirty, act, act_q, act_c, act_rej, act_fm, act_row, act_em, st_j, st_c, st0,
                 statef, Sf, jinfof):
    """The matchings of one event for the dirty NPUs ``dirty[lo:lo+nd]`` (one partition).

    Reads and writes only these NPUs' candidate sets, state words (column v) and in-link records, so the
    partitions can run concurrently. Started transfers go to ``st_j/st_c[st0:]``; returns how many.
    """
    scap = S.shape[1]
    nact = 0
    for di in range(nd):
        v = dirty[lo + di]
        is_dirty[v] = False
        act[lo + nact] = v
        act_rej[lo + nact] = 0
        nact += 1
    nst = 0
    first_round = True
    while nact > 0:
        pctr[SC_ROUNDS] += 1
        # the three stages run block by block (a block's cache lines stay in L2 from one stage to the next)
        n2 = 0
        for b0 in range(0, nact, SCALE_BLOCK):
            b1 = min(b0 + SCALE_BLOCK, nact)
            m0 = n2
            # stage 1: does v still have a free in-link with a candidate? then draw an entry of S[v]
            for a in range(lo + b0, lo + b1):
                if a + SCALE_PF_DIST < lo + nact:
                    _prefetch(jinfof, in_ptr[act[a + SCALE_PF_DIST]] * 2)
                v = act[a]
                T = 0
                fm = 0
                em = 0  # eligible groups: those with an idle in-link that has a candidate
                j0 = in_ptr[v]
                for j in range(j0, in_ptr[v + 1]):
                    if jinfo[j, J_CUR] < 0:
                        tj = jinfo[j, J_TOT]
                        T += tj
                        fm |= 1 << (j - j0)
                        if G > 1 and tj > 0:
                            em |= 1 << jgrp[j]
                if T == 0:
                    continue
                k = lo + n2
                act[k] = v
                act_rej[k] = act_rej[a]
                act_fm[k] = fm
                if G == 1:
                    row = v
                    if first_round:
                        pctr[SC_CANDIDATES] += slen[v]
                    q = _below32(rng, slen[v])
                else:
                    # one draw over the entries of the eligible groups' sets picks the group and the entry
                    tot = 0
                    for g in range(G):
                        if (em >> g) & 1:
                            tot += slen[v * G + g]
                    if first_round:
                        pctr[SC_CANDIDATES] += tot
                    q = _below32(rng, tot)
                    row = v * G
                    for g in range(G):
                        if (em >> g) & 1:
                            L = slen[v * G + g]
                            if q < L:
                                row = v * G + g
                                break
                            q -= L
                    act_em[k] = em
                    _prefetch(vgmask, v * G)
                if first_round:
                    pctr[SC_MATCHES] += 1
                act_row[k] = row
                act_q[k] = q
                _prefetch(Sf, row * scap + q)
                n2 += 1
            # stage 2: the drawn chunks (prefetched by stage 1); prefetch the state word stage 3 needs
            for a in range(lo + m0, lo + n2):
                v = act[a]
                row = act_row[a]
                c = np.int64(S[row, act_q[a]])
                act_c[a] = c
                _prefetch(statef, c * N + v)
                _prefetch(Sf, row * scap + slen[row] - 1)
            # stage 3: assign the chunk to a free in-link that can carry it, or count a miss
            for a in range(lo + m0, lo + n2):
                v = act[a]
                q = act_q[a]
                c = act_c[a]
                fm = act_fm[a]
                row = act_row[a]
                pctr[SC_DRAWS] += 1
                st = state[c, v]
                carr = np.uint64(st >> S_SHIFT) & np.uint64(fm)
                ok = carr != _U0
                if G > 1:
                    if st & S_CLAIMED:
                        # left behind by a claim through another group: drop it
                        pctr[SC_STALE] += 1
                        n = slen[row] - 1
                        S[row, q] = S[row, n]
                        slen[row] = n
                        ok = False
                    elif ok:
                        # c has an entry in every eligible group holding it: keep it with probability 1/m
                        em = act_em[a]
                        m = 0
                        for g in range(G):
                            if (em >> g) & 1 and (np.uint64(st >> S_SHIFT) & vgmask[v * G + g]) != _U0:
                                m += 1
                        if m > 1 and _below32(rng, m) != 0:
                            ok = False
                if not ok:
                    pctr[SC_REJECTED] += 1
                    act_rej[a] += 1
                    if act_rej[a] < SCALE_REJECT_SCAN:
                        continue
                    # many misses in a row: probe the group's entries in order from a random position (a
                    # carriable one exists: the group has an idle in-link with a candidate)
                    pctr[SC_SCANS] += 1
                    nS = slen[row]
                    i = _below32(rng, nS)
                    carr = _U0
                    for _k in range(2 * nS):
                        pctr[SC_SCANNED] += 1
                        ip = i + SCALE_PF_SCAN
                        if ip >= nS:
                            ip -= nS
                        if ip < nS:
                            _prefetch(statef, np.int64(S[row, ip]) * N + v)
                        ci = np.int64(S[row, i])
                        sti = state[ci, v]
                        if G > 1 and sti & S_CLAIMED:
                            pctr[SC_STALE] += 1
                            nS -= 1
                            S[row, i] = S[row, nS]
                            slen[row] = nS
                            if nS == 0:
                                break
                            if i == nS:
                                i = 0
                            continue
                        carr = np.uint64(sti >> S_SHIFT) & np.uint64(fm)
                        if carr != _U0:
                            q = i
                            c = ci
                            st = sti
                            break
                        i += 1
                        if i == nS:
                            i = 0
                    if carr == _U0:  # cannot happen (see above); a safe retry next round
                        continue
                act_rej[a] = 0
                # the in-link, by the tie-break rule among those that can carry c
                j0 = in_ptr[v]
                if link_tiebreak == TIE_RANDOM:
                    jb = _nth_bit(carr, _below32(rng, np.int64(_popcount(carr))))
                else:
                    jb = -1
                    ties = 0
                    x = carr
                    while x != _U0:
                        jj = np.int64(_ctz(x))
                        x &= x - _U1
                        if jb < 0:
                            jb, ties = jj, 1
                        elif link_tiebreak == TIE_LOWEST:
                            if jlink[j0 + jj] < jlink[j0 + jb]:
                                jb = jj
                        else:
                            lt, lb = jtime[j0 + jj], jtime[j0 + jb]
                            if lt < lb:
                                jb, ties = jj, 1
                            elif lt == lb:
                                ties += 1
                                if _below32(rng, ties) == 0:
                                    jb = jj
                best = j0 + jb
                # claim c for v: out of S[v], and out of the counts of every in-link whose sender holds it
                state[c, v] = st | S_CLAIMED
                n = slen[row] - 1
                S[row, q] = S[row, n]
                slen[row] = n
                x = np.uint64(st >> S_SHIFT)
                while x != _U0:
                    jinfo[j0 + np.int64(_ctz(x)), J_TOT] -= 1
                    x &= x - _U1
                act_fm[a] = fm & ~(1 << jb)
                jinfo[best, J_CUR] = c
                st_j[st0 + nst] = best
                st_c[st0 + nst] = c
                nst += 1
        nact = n2
        first_round = False
    return nst


@njit(cache=True, parallel=True)
def run_scale(N, G, jdst, jlink, jtime, jclass, jgrp, jgmask, vgmask, in_ptr, out_ptr, ldst, jpos, link_tiebreak,
              state, S, slen, jinfo,
              q_pos, q_chunk, q_sev, q_end, r_off, r_cap, r_head, r_size, cheap, cpos, csize, chead,
              rngs, clock, ctr, pctr, ev_time, ev_base,
              out_c, out_l, out_s, out_e, max_events,
              dirty, is_dirty, act, act_q, act_c, act_rej, act_fm, act_row, act_em, arr_j, arr_c, st_j, st_c,
              part_lo, grow_margin, statef, Sf, jinfof):
    """Advance the scale kernel by at most ``max_events`` event times (status ``ST_*``).

    Links are addressed by their *in-position* ``j`` (their index in ``in_order``): the in-links of v are
    ``j = in_ptr[v] .. in_ptr[v+1]-1``, so everything a matching reads about them is contiguous. ``jdst``,
    ``jlink``, ``jtime``, ``jclass`` give the receiver, link id, chunk time and time class of position j;
    ``jpos[l]`` is the position of link ``l``. ``jinfo[j]`` (int32, 8 bytes per position, so a destination's
    in-links share a cache line) holds the number of candidates of position j (``J_TOT``) and the chunk in
    flight on it (``J_CUR``, -1: idle). The event queue entries carry the position, chunk, start event and
    end time of each transfer in flight.

    The NPUs are split into ``P = len(part_lo) - 1`` contiguous partitions (``part_lo[p] .. part_lo[p+1]``),
    each with its own random stream ``rngs[p]`` and counters ``pctr[p]``; the arrivals and the matchings of
    an event touch one partition's data at a time, so the partitions run on parallel threads (``prange``,
    as many as ``numba.set_num_threads`` allows) with the same result as one after the other.
    Finished transfers go to ``out_*[:ctr[SC_OUT]]`` as (chunk, link id, start event, end event); event
    ``e`` happens at ``ev_time[e - ev_base[0]]``. Before an event it returns ``ST_FLUSH`` when fewer than
    ``num_links`` output rows are free, ``ST_EVFULL`` when ``ev_time`` is full and ``ST_GROW`` when a
    candidate set could outgrow ``S`` (up to ``grow_margin`` entries can join one set per event).
    ``statef``, ``Sf`` and ``jinfof`` are flat views of ``state``, ``S`` and ``jinfo`` for prefetch hints.
    """
    M = jdst.shape[0]
    P = part_lo.shape[0] - 1
    cap = out_c.shape[0]
    nd = np.zeros(P, dtype=np.int64)
    nst = np.zeros(P, dtype=np.int64)
    events = 0
    while events < max_events:
        if ctr[SC_REMAINING] == 0:
            return ST_DONE
        if cap - ctr[SC_OUT] < M:
            return ST_FLUSH
        e = ctr[SC_EVENTS]
        if e - ev_base[0] >= ev_time.shape[0]:
            return ST_EVFULL
        smax = 0
        for p in range(P):
            smax = max(smax, pctr[p, SC_SMAX])
        if smax + grow_margin > S.shape[1]:
            return ST_GROW
        if clock[0] < 0.0:
            t = 0.0
            for p in range(P):
                nd[p] = part_lo[p + 1] - part_lo[p]
                for v in range(part_lo[p], part_lo[p + 1]):
                    dirty[v] = v
                    is_dirty[v] = True
        else:
            if csize[0] == 0:
                return ST_STUCK
            t = chead[cheap[0]]
            # the arrivals at t, in queue order: output rows now, state updates per partition below
            n_arr = 0
            while csize[0] > 0 and chead[cheap[0]] == t:
                kc = cheap[0]
                off, rc = r_off[kc], r_cap[kc]
                while r_size[kc] > 0:
                    s = off + r_head[kc]
                    if q_end[s] != t:
                        break
                    j = q_pos[s]
                    c = q_chunk[s]
                    h = r_head[kc] + 1
                    r_head[kc] = 0 if h == rc else h
                    r_size[kc] -= 1
                    arr_j[n_arr] = j
                    arr_c[n_arr] = c
                    n_arr += 1
                    o = ctr[SC_OUT]
                    out_c[o] = c
                    out_l[o] = jlink[j]
                    out_s[o] = q_sev[s]
                    out_e[o] = e
                    ctr[SC_OUT] = o + 1
                if r_size[kc] == 0:
                    _heap_remove(cheap, cpos, csize, chead, kc)
                else:
                    chead[kc] = q_end[off + r_head[kc]]
                    _sift_down(cheap, cpos, chead, cpos[kc], csize[0])
            ctr[SC_REMAINING] -= n_arr
            for p in prange(P):
                nd[p] = _scale_arrivals(part_lo[p], part_lo[p + 1], n_arr, arr_j, arr_c, N, G, jdst, in_ptr,
                                        out_ptr, ldst, jpos, jgrp, jgmask, state, S, slen, jinfo, pctr[p], dirty,
                                        is_dirty, statef, Sf, jinfof)
        clock[0] = t
        ev_time[e - ev_base[0]] = t
        events += 1
        ctr[SC_EVENTS] = e + 1
        # the matchings, one partition per thread
        for p in prange(P):
            nst[p] = _scale_match(part_lo[p], nd[p], e, N, G, jlink, jtime, in_ptr, jgrp, vgmask, link_tiebreak,
                                  state, S, slen, jinfo, rngs[p], pctr[p], dirty, is_dirty, act, act_q, act_c,
                                  act_rej, act_fm, act_row, act_em, st_j, st_c, in_ptr[part_lo[p]], statef, Sf,
                                  jinfof)
        # the started transfers join the event queue (partition by partition: deterministic)
        for p in range(P):
            st0 = in_ptr[part_lo[p]]
            for k in range(st0, st0 + nst[p]):
                j = st_j[k]
                kc = jclass[j]
                end_t = t + jtime[j]
                if r_size[kc] == 0:
                    chead[kc] = end_t
                    _heap_push(cheap, cpos, csize, chead, kc)
                s = r_head[kc] + r_size[kc]
                if s >= r_cap[kc]:
                    s -= r_cap[kc]
                s += r_off[kc]
                q_pos[s] = j
                q_chunk[s] = st_c[k]
                q_sev[s] = e
                q_end[s] = end_t
                r_size[kc] += 1
    if ctr[SC_REMAINING] == 0:
        return ST_DONE
    return ST_SLICE
