"""The classic greedy kernel (numba): every option of :class:`solvers.greedy.GreedyOptions`.

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
  chunks ``u`` holds in arrival order; link ``l`` keeps a position ``log_pos[l]``
  past the prefix its receiver no longer needs and offers the first ``window``
  entries still needed (:class:`Window`).
* Event queue: :class:`~solvers.greedy._kernel_common.EventQueue` (one FIFO ring per link-time class).
  Ring entries are ``(link, generation, end)`` (:class:`RingEntry`); a preempted transfer leaves a
  stale entry that the generation check skips.
* Finished transfers are appended to the output buffers (``out``) at their arrival,
  when it is known whether they were the first copy; the caller drains the
  buffers between slices (``ST_FLUSH``), so their size does not grow with the
  schedule.

State is passed as a few named tuples of arrays: the links
(:class:`~solvers.greedy._kernel_common.Links`), the options (:class:`Rules`), the holdings and the
links' transfers (:class:`State`), the candidate counts (:class:`Counts`), the arrival logs
(:class:`Window`), what the chunk orders rank by (:class:`ChunkKeys`), the event queue
(:class:`~solvers.greedy._kernel_common.EventQueue`), the output
(:class:`~solvers.greedy._kernel_common.Transfers`) and the scratch (:class:`Workspace`,
:func:`make_workspace`). The event loop is resumable: :data:`run_counted_random`
and :data:`run_listed` (the same loop, compiled for the two matching paths so a
run compiles only what it uses) process at most ``max_events`` event times and
return with all state left in their arrays. They allocate nothing and run with
numba's reference counting (NRT) off.

Integer codes shared with :mod:`solvers.greedy`: chunk order ``ORDER_*``, link
tie-break ``TIE_*``, matching ``MATCH_*``, return status ``ST_*``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ._kernel_common import (ST_DONE, ST_FLUSH, ST_SLICE, ST_STUCK, TIE_EARLIEST, TIE_LOWEST, TIE_RANDOM, U0, U1,
                             below, class_advance, class_open, ctz, has_bit, next_end, popcount, ring_pop, ring_slot)

__all__ = ["BLOCK_WORDS", "MATCH_GREEDY", "MATCH_MAXIMUM", "ORDER_FARTHEST", "ORDER_OLDEST", "ORDER_RANDOM",
           "ORDER_RAREST", "ORDER_USER", "ST_DONE", "ST_FLUSH", "ST_SLICE", "ST_STUCK", "TIE_EARLIEST", "TIE_LOWEST", "TIE_RANDOM",
           "ChunkKeys", "Counts", "RingEntry", "Rules", "State", "Window", "Workspace", "init_counts", "make_workspace",
           "run_counted_random", "run_listed", "uses_counted_random"]

ORDER_RANDOM, ORDER_RAREST, ORDER_FARTHEST, ORDER_OLDEST = 0, 1, 2, 3
# a user's chunk score (solvers.greedy.priority): the kernel gets it as a first-class function ``score``; the
# built-in orders pass ``None`` and numba prunes the call, so their specialization is the code it was
ORDER_USER = 4
MATCH_GREEDY, MATCH_MAXIMUM = 0, 1

# counters in the int64 ``ctr`` array
(C_EVENTS, C_REMAINING, C_WASTED, C_CANCELLED, C_OUT, C_STARTED, C_AUGMENTED, C_MATCHES,
 C_SCANNED, C_CANDIDATES, C_DRAWS) = range(11)
NUM_COUNTERS = 11
# float statistics in ``fst``
F_WASTED_US, F_CANCELLED_US = 0, 1
NUM_FSTATS = 2

BLOCK_SHIFT = 5            # blocks of 32 bitset words (2048 chunks) in the candidate counts
BLOCK_WORDS = 1 << BLOCK_SHIFT


class Rules(NamedTuple):
    """The options of a run, as the integer codes and flags the kernel branches on."""

    chunk_order: int     # ORDER_*
    link_tiebreak: int   # TIE_*
    matching: int        # MATCH_*
    duplicates: bool     # a faster link may send a chunk already in flight to its receiver
    preempt: bool        # ... and the slower copy is withdrawn
    window: int          # 0: candidates from the exact counts; k > 0: the first k needed arrivals of a log


class State(NamedTuple):
    """What the NPUs hold and what each link carries (``H`` and ``R`` in the code are the first two)."""

    held: np.ndarray        # uint64 [N, W]: bitsets of the chunks each NPU holds
    receiving: np.ndarray   # uint64 [N, W]: chunks whose first copy is in flight to the NPU
    cur_chunk: np.ndarray   # int64 [M]: chunk in flight on each link, -1 idle
    cur_start: np.ndarray   # float64 [M]: its start time
    busy_until: np.ndarray  # float64 [M]: its end time
    gen: np.ndarray         # int64 [M]: transfers started on the link (tells a preempted ring entry from a live one)


class Counts(NamedTuple):
    """Candidates of each link ``l = u->v`` (``H[u] & ~(H[v] | R[v])``), exact in counted mode (``window == 0``);
    one-element stand-ins otherwise. ``wc``, ``bc`` and ``tot`` in the code."""

    per_word: np.ndarray    # uint8 [M, W]: in each bitset word
    per_block: np.ndarray   # uint16 [M, blocks]: in each block of BLOCK_WORDS words
    total: np.ndarray       # int64 [M]


class Window(NamedTuple):
    """Arrival logs of window mode (``window > 0``); one-element stand-ins otherwise."""

    log: np.ndarray         # int32 [N, C]: the chunks each NPU holds, in arrival order
    log_len: np.ndarray     # int64 [N]
    log_pos: np.ndarray     # int64 [M]: position in the sender's log before which the receiver needs nothing


class ChunkKeys(NamedTuple):
    """What the chunk orders rank by (``rarest``, ``farthest``, ``oldest``); one-element stand-ins for an
    order that does not use a field."""

    copies: np.ndarray      # int32 [C]: NPUs holding or receiving each chunk
    need_at: np.ndarray     # int32 [C, hops]: NPUs at each hop distance from its source without it (or it in flight)
    max_need: np.ndarray    # int32 [C]: the largest such distance
    arrival: np.ndarray     # float64 [N, C]: when each NPU got each chunk (inf: not yet)
    hops: np.ndarray        # int32 [N, N]: hop distances
    src_of: np.ndarray      # int64 [C]: the source of each chunk


class RingEntry(NamedTuple):
    """The per-slot arrays of the event queue besides the end time."""

    link: np.ndarray        # int64: the link of the transfer
    gen: np.ndarray         # int64: the link's generation when it started (a mismatch: withdrawn)


class Workspace(NamedTuple):
    """Scratch of the event loop, allocated once per run (:func:`make_workspace`). ``d``: the largest
    in-degree; ``C64``: chunks rounded up to whole bitset words; a destination's free in-links are addressed
    by their local index ``i`` (link id ``free_links[i]``), its candidates by their list index ``j``."""

    free_links: np.ndarray  # int64 [d]: the destination's idle in-links
    link_cand: np.ndarray   # int64 [d]: candidate given to each free in-link, -1 none
    link_chunk: np.ndarray  # int64 [d]: chunk given to each free in-link, -1 none
    claimed: np.ndarray     # bool [d]: that chunk's first copy was already claimed
    slot: np.ndarray        # int64 [C64]: list index of a chunk, -1 none (reset after each matching)
    cand: np.ndarray        # int64 [C64]: the listed chunks
    key: np.ndarray         # float64 [C64]: their priority key (smaller first)
    carriers: np.ndarray    # uint64 [C64, words of d]: bit i = free in-link i can carry candidate j
    cand_link: np.ndarray   # int64 [C64]: free in-link a candidate went to, -1 none
    alive: np.ndarray       # int64 [C64]: candidates still worth a look
    unmatched: np.ndarray   # uint64 [words of d]: bit i = free in-link i not yet matched
    bfs_queue: np.ndarray   # int64 [d]
    bfs_parent: np.ndarray  # int64 [d]
    bfs_seen: np.ndarray    # bool [d]
    dirty: np.ndarray       # int64 [N]: destinations to match at this event
    is_dirty: np.ndarray    # bool [N]


# ---------------------------------------------------------------------------- candidate counts
@njit(cache=True, inline="always")
def _count_add(wc, bc, tot, l, w, delta):
    wc[l, w] += delta
    bc[l, w >> BLOCK_SHIFT] += delta
    tot[l] += delta


@njit(cache=True, _nrt=False)
def init_counts(links, st, counts):
    """Candidate counts of the initial state (every link may offer what its sender starts with)."""
    lsrc, ldst = links.src, links.dst
    H, R = st.held, st.receiving
    wc, bc, tot = counts.per_word, counts.per_block, counts.total
    W = H.shape[1]
    for l in range(lsrc.shape[0]):
        u = lsrc[l]
        v = ldst[l]
        for w in range(W):
            x = H[u, w] & ~(H[v, w] | R[v, w])
            if x != U0:
                n = np.int64(popcount(x))
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
        x &= x - U1
    return (w << 6) + np.int64(ctz(x))


@njit(cache=True, inline="always")
def _holds(H, x, c):
    return has_bit(H[x], c)


@njit(cache=True, inline="always")
def _claim(v, c, N, links, st, counts, counted, keys, chunk_order):
    """The first copy of chunk ``c`` to ``v`` starts: ``v`` is now receiving it."""
    lsrc, in_ptr, in_order = links.src, links.in_ptr, links.in_order
    H, R = st.held, st.receiving
    wc, bc, tot = counts.per_word, counts.per_block, counts.total
    copies, cnt, rmax, dist, src_of = keys.copies, keys.need_at, keys.max_need, keys.hops, keys.src_of
    w = c >> 6
    bit = U1 << np.uint64(c & 63)
    R[v, w] |= bit
    copies[c] += 1
    if counted:
        for j in range(in_ptr[v], in_ptr[v + 1]):
            l = in_order[j]
            if H[lsrc[l], w] & bit:
                _count_add(wc, bc, tot, l, w, -1)
    if chunk_order == ORDER_FARTHEST:
        o = src_of[c]
        cnt[c, dist[o, v]] -= 1
        r = rmax[c]
        while r > 0 and cnt[c, r] == 0:
            r -= 1
        rmax[c] = r


# ---------------------------------------------------------------------------- link choice
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
    return (i if below(rng, ties) == 0 else best), ties


@njit(cache=True, inline="always")
def _pick_holder(c, k, F, achunk, lsrc, H, ltime, link_tiebreak, rng):
    """Among the free, unassigned in-links whose sender holds ``c``, one by the tie-break rule."""
    best = -1
    ties = 0
    for i in range(k):
        if achunk[i] < 0 and _holds(H, lsrc[F[i]], c):
            best, ties = _tie_step(i, best, ties, F, ltime, link_tiebreak, rng)
    return best


@njit(cache=True, inline="always")
def _mask_has(cmask, j, i):
    return (cmask[j, i >> 6] >> np.uint64(i & 63)) & U1


@njit(cache=True, inline="always")
def _offered(cmask, j, free):
    """True if a still-free in-link can carry candidate ``j``."""
    for q in range(free.shape[0]):
        if cmask[j, q] & free[q]:
            return True
    return False


@njit(cache=True, inline="always")
def _pick_link(j, cmask, free, F, ltime, link_tiebreak, k, rng):
    """Among the free in-links offering candidate ``j``, choose one by the tie-break rule."""
    best = -1
    ties = 0
    for i in range(k):
        if (free[i >> 6] >> np.uint64(i & 63)) & U1 and _mask_has(cmask, j, i):
            best, ties = _tie_step(i, best, ties, F, ltime, link_tiebreak, rng)
    return best


# ---------------------------------------------------------------------------- candidate lists
@njit(cache=True, inline="always")
def _user_key(score, c, v, src, holders, owner, t):
    if score is None:
        return 0.0
    return score(c, v, src, holders, owner, t)


@njit(cache=True, inline="always")
def _add_candidate(c, i, v, N, chunk_order, src, ws, nc, keys, t, score):
    """Record that free in-link ``i`` (from ``src``) can carry chunk ``c``; returns the new count. A user's
    score is the smallest over the senders that can carry the chunk (NaN counts as last)."""
    slot, cand, ckey, cmask, casg = ws.slot, ws.cand, ws.key, ws.carriers, ws.cand_link
    copies, rmax, arr_time, dist, src_of = keys.copies, keys.max_need, keys.arrival, keys.hops, keys.src_of
    j = slot[c]
    if j < 0:
        j = nc
        nc += 1
        slot[c] = j
        cand[j] = c
        casg[j] = -1
        for q in range(cmask.shape[1]):
            cmask[j, q] = U0
        if chunk_order == ORDER_RAREST:
            ckey[j] = np.float64(copies[c])
        elif chunk_order == ORDER_FARTHEST:
            # minus a lower bound on the hops c still has to travel beyond v
            ckey[j] = -np.float64(rmax[c] - dist[src_of[c], v])
        elif chunk_order == ORDER_OLDEST or chunk_order == ORDER_USER:
            ckey[j] = np.inf
        else:
            ckey[j] = 0.0
    cmask[j, i >> 6] |= U1 << np.uint64(i & 63)
    if chunk_order == ORDER_OLDEST:
        a = arr_time[src, c]
        if a < ckey[j]:
            ckey[j] = a
    elif chunk_order == ORDER_USER:
        a = _user_key(score, c, v, src, np.int64(copies[c]), np.int64(src_of[c]), t)
        if a < ckey[j]:
            ckey[j] = a
    return nc


# ---------------------------------------------------------------------------- augmenting paths
@njit(cache=True, _nrt=False)
def _augmenting_path(a, k, listed, assign, F, lsrc, H, tot, cmask, casg, ckey, nc, bfs_q, bfs_par, bfs_seen,
                     rng):
    """Breadth-first search over free in-links from the idle link ``a`` for an augmenting path.

    Link ``i`` can pass its assignment to link ``i2`` when ``i`` can carry the chunk ``i2`` holds
    (``assign[i2]``); the path ends at a link that can take a fresh candidate: with ``listed`` one of the
    unassigned candidates of the list (the best by chunk key, ties at random, returned as ``endj``), else
    any link with a candidate left in its counts. Returns ``(end, endj)``, ``end = -1`` when none; the
    path is ``end, bfs_par[end], ...`` back to ``a``.
    """
    for i in range(k):
        bfs_seen[i] = False
        bfs_par[i] = -1
    head, tail = 0, 1
    bfs_q[0] = a
    bfs_seen[a] = True
    endj = -1
    while head < tail:
        i = bfs_q[head]
        head += 1
        if listed:
            ties = 0
            for j in range(nc):
                if casg[j] >= 0 or not _mask_has(cmask, j, i):
                    continue
                if endj < 0 or ckey[j] < ckey[endj]:
                    endj, ties = j, 1
                elif ckey[j] == ckey[endj]:
                    ties += 1
                    if below(rng, ties) == 0:
                        endj = j
            if endj >= 0:
                return i, endj
        elif tot[F[i]] > 0:
            return i, -1
        ui = lsrc[F[i]]
        for i2 in range(k):
            if bfs_seen[i2] or assign[i2] < 0:
                continue
            if (_mask_has(cmask, assign[i2], i) if listed else _holds(H, ui, assign[i2])):
                bfs_seen[i2] = True
                bfs_par[i2] = i
                bfs_q[tail] = i2
                tail += 1
    return -1, -1


# ---------------------------------------------------------------------------- matching one destination
@njit(cache=True, inline="always")
def _free_links(v, links, st, ws):
    """Collect ``v``'s idle in-links into ``F``; returns ``(k, busy)`` (busy: some in-link is not idle)."""
    in_ptr, in_order = links.in_ptr, links.in_order
    cur_chunk = st.cur_chunk
    F, achunk, rdone = ws.free_links, ws.link_chunk, ws.claimed
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
    return k, busy


@njit(cache=True, _nrt=False)
def _match_dirty_counted(ndirty, t, N, links, rules, st, counts, win, keys, q, ws, rng, ctr, fst):
    """The matchings of one event, random order from the counts: per dirty destination, draw (link,
    candidate) uniformly and keep a chunk offered by ``m`` free links with probability ``1/m`` (uniform over
    distinct chunks); augmenting paths for ``maximum``; then start the transfers. (No duplicates here, so
    nothing is ever preempted.)"""
    lsrc, ltime = links.src, links.time
    chunk_order, link_tiebreak, matching = rules.chunk_order, rules.link_tiebreak, rules.matching
    H, R = st.held, st.receiving
    wc, bc, tot = counts.per_word, counts.per_block, counts.total
    F, achunk, rdone = ws.free_links, ws.link_chunk, ws.claimed
    dirty, is_dirty = ws.dirty, ws.is_dirty
    for di in range(ndirty):
        v = dirty[di]
        is_dirty[v] = False
        k, _ = _free_links(v, links, st, ws)
        if k == 0:
            continue
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
            r = below(rng, S)
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
            if mult > 1 and below(rng, mult) != 0:
                continue
            i = _pick_holder(c, k, F, achunk, lsrc, H, ltime, link_tiebreak, rng)
            achunk[i] = c
            rdone[i] = True
            nfree -= 1
            _claim(v, c, N, links, st, counts, True, keys, chunk_order)
        if matching == MATCH_MAXIMUM and nfree > 0:
            # augmenting paths: an idle link takes the chunk of a link that can take a fresh one
            for a in range(k):
                if achunk[a] >= 0:
                    continue
                end, _ = _augmenting_path(a, k, False, achunk, F, lsrc, H, tot, ws.carriers, ws.cand_link, ws.key,
                                          0, ws.bfs_queue, ws.bfs_parent, ws.bfs_seen, rng)
                if end < 0:
                    continue
                c = _select(F[end], below(rng, tot[F[end]]), lsrc[F[end]], v, H, R, wc, bc)
                _claim(v, c, N, links, st, counts, True, keys, chunk_order)
                i = end
                while True:
                    prev = achunk[i]
                    achunk[i] = c
                    rdone[i] = True
                    p = ws.bfs_parent[i]
                    if p < 0:
                        break
                    c = prev
                    i = p
                ctr[C_AUGMENTED] += 1
        _commit(v, k, t, N, links, rules, st, counts, keys, q, ws, ctr, fst)


@njit(cache=True, inline="always")
def _list_candidates(v, k, busy, t, N, links, rules, st, counts, win, keys, ws, ctr, score):
    """The candidates of ``v``'s free in-links as a list (``cand``, ``ckey``, ``cmask``); returns their count."""
    lsrc, ltime, in_ptr, in_order = links.src, links.time, links.in_ptr, links.in_order
    chunk_order, duplicates, window = rules.chunk_order, rules.duplicates, rules.window
    H, R, cur_chunk, busy_until = st.held, st.receiving, st.cur_chunk, st.busy_until
    wc, bc, tot = counts.per_word, counts.per_block, counts.total
    log, loglen, lptr = win.log, win.log_len, win.log_pos
    F = ws.free_links
    counted = window == 0
    Hv = H[v]
    Rv = R[v]
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
                if ((Hv[c >> 6] | Rv[c >> 6]) >> np.uint64(c & 63)) & U1:
                    if prefix:
                        lptr[l] = q  # never needed again over this link
                    continue
                prefix = False
                found += 1
                nc = _add_candidate(c, i, v, N, chunk_order, u, ws, nc, keys, t, score)
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
                while x != U0:
                    c = (w << 6) + np.int64(ctz(x))
                    x &= x - U1
                    nc = _add_candidate(c, i, v, N, chunk_order, u, ws, nc, keys, t, score)
    if duplicates and busy:
        # a chunk in flight to v may be sent again over a link that delivers it strictly earlier
        for j in range(in_ptr[v], in_ptr[v + 1]):
            lb = in_order[j]
            c = cur_chunk[lb]
            if c < 0 or has_bit(Hv, c):
                continue
            first_end = busy_until[lb]
            for j2 in range(in_ptr[v], in_ptr[v + 1]):  # the earliest copy in flight counts
                l2 = in_order[j2]
                if cur_chunk[l2] == c and busy_until[l2] < first_end:
                    first_end = busy_until[l2]
            for i in range(k):
                u = lsrc[F[i]]
                if t + ltime[F[i]] < first_end and has_bit(H[u], c):
                    nc = _add_candidate(c, i, v, N, chunk_order, u, ws, nc, keys, t, score)
    return nc


@njit(cache=True, inline="always")
def _match_listed(v, k, nc, links, rules, st, counts, ws, rng, ctr):
    """Match the listed candidates to free in-links: greedy in chunk order, then augmenting paths for
    ``maximum``; the chunks given to each link end up in ``achunk``."""
    ltime = links.time
    chunk_order, link_tiebreak, matching = rules.chunk_order, rules.link_tiebreak, rules.matching
    F, asg, achunk = ws.free_links, ws.link_cand, ws.link_chunk
    slot, cand, ckey, cmask, casg = ws.slot, ws.cand, ws.key, ws.carriers, ws.cand_link
    alive, free = ws.alive, ws.unmatched
    ctr[C_MATCHES] += 1
    ctr[C_CANDIDATES] += nc
    for q in range(free.shape[0]):
        free[q] = U0
    for i in range(k):
        free[i >> 6] |= U1 << np.uint64(i & 63)
        asg[i] = -1
    for j in range(nc):
        alive[j] = j
    # greedy pass: candidates in chunk order, each to a free in-link by the tie-break rule
    nalive = nc
    nfree = k
    while nfree > 0 and nalive > 0:
        if chunk_order == ORDER_RANDOM:
            p = below(rng, nalive)
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
                    if below(rng, ties) == 0:
                        p = q
                q += 1
            if p < 0:
                break
            j = alive[p]
        i = _pick_link(j, cmask, free, F, ltime, link_tiebreak, k, rng)
        asg[i] = j
        casg[j] = i
        free[i >> 6] &= ~(U1 << np.uint64(i & 63))
        nfree -= 1
        nalive -= 1
        alive[p] = alive[nalive]
    if matching == MATCH_MAXIMUM and nfree > 0:
        # augmenting paths (BFS over links) give an idle link a chunk whenever a maximum matching allows it
        for a in range(k):
            if asg[a] >= 0:
                continue
            end, j = _augmenting_path(a, k, True, asg, F, links.src, st.held, counts.total, cmask, casg, ckey, nc,
                                      ws.bfs_queue, ws.bfs_parent, ws.bfs_seen, rng)
            if end < 0:
                continue
            i = end
            while True:
                prev = asg[i]
                asg[i] = j
                casg[j] = i
                p = ws.bfs_parent[i]
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


@njit(cache=True, inline="always")
def _ring_push(q, kc, l, g, end_t, gen, cur_chunk):
    """Append ``(link, generation, end)`` to class ``kc``'s ring; a ring full of entries left stale by
    preemption is squeezed first."""
    q_link, q_gen, q_end = q.entry.link, q.entry.gen, q.end
    r_off, r_cap, r_head, r_size = q.ring_off, q.ring_cap, q.ring_head, q.ring_size
    if r_size[kc] == r_cap[kc]:
        off, cap, h, n = r_off[kc], r_cap[kc], r_head[kc], r_size[kc]
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
        r_size[kc] = j
    s = ring_slot(q, kc)
    q_link[s] = l
    q_gen[s] = g
    q_end[s] = end_t


@njit(cache=True, inline="always")
def _commit(v, k, t, N, links, rules, st, counts, keys, q, ws, ctr, fst):
    """Start the matched transfers at ``t``; returns True when a slower copy in flight was withdrawn."""
    ltime, in_ptr, in_order = links.time, links.in_ptr, links.in_order
    lclass = q.class_of
    chunk_order, preempt, window = rules.chunk_order, rules.preempt, rules.window
    R, cur_chunk, cur_start, busy_until, gen = st.receiving, st.cur_chunk, st.cur_start, st.busy_until, st.gen
    F, achunk, rdone = ws.free_links, ws.link_chunk, ws.claimed
    preempted = False
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
        class_open(q, kc, end_t)
        _ring_push(q, kc, l, gen[l], end_t, gen, cur_chunk)
        if rdone[i]:
            continue
        if has_bit(R[v], c):
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
        _claim(v, c, N, links, st, counts, window == 0, keys, chunk_order)
    return preempted


@njit(cache=True, _nrt=False)
def _match_dirty_listed(ndirty, t, N, links, rules, st, counts, win, keys, q, ws, rng, ctr, fst, score):
    """The matchings of one event from candidate lists (every option but the counted random order): per
    dirty destination, list the candidates, match them, start the transfers; a preempted link is free
    again at ``t`` and gets another round."""
    in_ptr = links.in_ptr
    dirty, is_dirty = ws.dirty, ws.is_dirty
    maxdeg = 0
    for v in range(N):
        d = in_ptr[v + 1] - in_ptr[v]
        if d > maxdeg:
            maxdeg = d
    for di in range(ndirty):
        v = dirty[di]
        is_dirty[v] = False
        rounds = 0
        while True:
            rounds += 1
            k, busy = _free_links(v, links, st, ws)
            if k == 0:
                break
            nc = _list_candidates(v, k, busy, t, N, links, rules, st, counts, win, keys, ws, ctr, score)
            if nc == 0:
                break
            _match_listed(v, k, nc, links, rules, st, counts, ws, rng, ctr)
            preempted = _commit(v, k, t, N, links, rules, st, counts, keys, q, ws, ctr, fst)
            if not preempted or rounds > maxdeg * maxdeg + 1:
                break


# ---------------------------------------------------------------------------- arrivals
@njit(cache=True, _nrt=False)
def _apply_arrivals(t, links, rules, st, counts, win, keys, q, out, ws, ctr, fst):
    """Apply every arrival at ``t`` (a node may forward a chunk the instant it arrives); the receivers and
    the neighbours that can now be offered something join the dirty list. Returns its length."""
    ldst, out_ptr = links.dst, links.out_ptr
    chunk_order, duplicates, window = rules.chunk_order, rules.duplicates, rules.window
    H, R, cur_chunk, cur_start, gen = st.held, st.receiving, st.cur_chunk, st.cur_start, st.gen
    wc, bc, tot = counts.per_word, counts.per_block, counts.total
    log, loglen = win.log, win.log_len
    arr_time = keys.arrival
    q_link, q_gen, q_end = q.entry.link, q.entry.gen, q.end
    r_off, r_head, r_size, cheap, csize = q.ring_off, q.ring_head, q.ring_size, q.heap, q.heap_size
    out_chunk, out_link, out_start, out_end = out.chunk, out.link, out.start, out.end
    dirty, is_dirty = ws.dirty, ws.is_dirty
    counted = window == 0
    ndirty = 0
    while csize[0] > 0 and next_end(q) == t:
        kc = cheap[0]
        while r_size[kc] > 0:
            s = r_off[kc] + r_head[kc]
            if q_end[s] != t:
                break
            ring_pop(q, kc)
            l = q_link[s]
            if gen[l] != q_gen[s] or cur_chunk[l] < 0:
                continue  # withdrawn by preemption
            c = cur_chunk[l]
            cur_chunk[l] = -1
            v = ldst[l]
            if not is_dirty[v]:
                is_dirty[v] = True
                dirty[ndirty] = v
                ndirty += 1
            w = c >> 6
            bit = U1 << np.uint64(c & 63)
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
        class_advance(q, kc)
    return ndirty


# ---------------------------------------------------------------------------- the event loop
def make_workspace(N, C, maxdeg):
    """Scratch arrays of the event loop (allocated once per run, reused by every slice)."""
    W = (C + 63) // 64
    C64 = W * 64
    MWd = max(1, (maxdeg + 63) // 64)
    d = max(1, maxdeg)
    return Workspace(
        free_links=np.empty(d, dtype=np.int64),
        link_cand=np.empty(d, dtype=np.int64),
        link_chunk=np.empty(d, dtype=np.int64),
        claimed=np.empty(d, dtype=np.bool_),
        slot=np.full(C64, -1, dtype=np.int64),
        cand=np.empty(C64, dtype=np.int64),
        key=np.empty(C64, dtype=np.float64),
        carriers=np.zeros((C64, MWd), dtype=np.uint64),
        cand_link=np.empty(C64, dtype=np.int64),
        alive=np.empty(C64, dtype=np.int64),
        unmatched=np.empty(MWd, dtype=np.uint64),
        bfs_queue=np.empty(d, dtype=np.int64),
        bfs_parent=np.empty(d, dtype=np.int64),
        bfs_seen=np.empty(d, dtype=np.bool_),
        dirty=np.empty(N, dtype=np.int64),
        is_dirty=np.zeros(N, dtype=np.bool_),
    )


@njit(cache=True, _nrt=False)
def _next_event(N, links, rules, st, counts, win, keys, q, out, ws, clock, ctr, fst):
    """Advance to the next event: ``(status, ndirty, t)``; ``status`` is ``ST_SLICE`` when the event's
    matchings are due (the dirty destinations are ``ws.dirty[:ndirty]``), else why the slice ends."""
    dirty, is_dirty = ws.dirty, ws.is_dirty
    if ctr[C_REMAINING] == 0:
        return ST_DONE, 0, 0.0
    if out.chunk.shape[0] - ctr[C_OUT] < links.src.shape[0]:
        return ST_FLUSH, 0, 0.0
    if clock[0] < 0.0:
        t = 0.0
        for v in range(N):
            dirty[v] = v
            is_dirty[v] = True
        ndirty = N
    else:
        if q.heap_size[0] == 0:
            return ST_STUCK, 0, 0.0
        t = next_end(q)
        ndirty = _apply_arrivals(t, links, rules, st, counts, win, keys, q, out, ws, ctr, fst)
    clock[0] = t
    ctr[C_EVENTS] += 1
    return ST_SLICE, ndirty, t


# NRT (numba's reference counting) is off: these kernels allocate nothing, and the atomic
# reference-count updates on every array view otherwise dominate their run time.
@njit(cache=True, _nrt=False)
def run_counted_random(N, links, rules, st, counts, win, keys, q, out, ws, rng, clock, ctr, fst, max_events):
    for _ in range(max_events):
        status, ndirty, t = _next_event(N, links, rules, st, counts, win, keys, q, out, ws, clock, ctr, fst)
        if status != ST_SLICE:
            return status
        _match_dirty_counted(ndirty, t, N, links, rules, st, counts, win, keys, q, ws, rng, ctr, fst)
    return ST_DONE if ctr[C_REMAINING] == 0 else ST_SLICE


@njit(cache=True, _nrt=False)
def run_listed(N, links, rules, st, counts, win, keys, q, out, ws, rng, clock, ctr, fst, max_events, score):
    for _ in range(max_events):
        status, ndirty, t = _next_event(N, links, rules, st, counts, win, keys, q, out, ws, clock, ctr, fst)
        if status != ST_SLICE:
            return status
        _match_dirty_listed(ndirty, t, N, links, rules, st, counts, win, keys, q, ws, rng, ctr, fst, score)
    return ST_DONE if ctr[C_REMAINING] == 0 else ST_SLICE


run_counted_random.__doc__ = run_listed.__doc__ = """Advance the greedy matcher by at most ``max_events`` event times.

Returns a status code (``ST_*``). ``clock[0]`` is the current event time (negative before the first event).
The kernel returns ``ST_FLUSH`` before an event whenever fewer than ``num_links`` output slots are free; the
caller then drains the ``out`` columns up to ``ctr[C_OUT]`` and resets it. ``run_counted_random`` serves the
random chunk order from the candidate counts (no window, no duplicates); ``run_listed`` every other option,
``score`` being a user's chunk score (``chunk_order`` ``ORDER_USER``, :mod:`solvers.greedy.priority`) or None.
"""


def uses_counted_random(chunk_order: int, duplicates: bool, window: int) -> bool:
    """Whether the options run on :data:`run_counted_random` (uniform draws from the counts, no list)."""
    return window == 0 and chunk_order == ORDER_RANDOM and not duplicates
