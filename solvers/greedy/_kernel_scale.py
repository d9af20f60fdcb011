"""The scale kernel of the greedy (numba): the default rule for very large topologies.

The default rule (random chunk order, greedy matching, no duplicates, no window) with the same decisions as
the counted fast path of :mod:`solvers.greedy._kernel_classic` (every distinct candidate chunk of the free in-links
equally likely, then the link by ``link_tiebreak``), with a layout and loop structure built for memory-level
parallelism rather than cache hits. ``docs/scale.md`` has the measurements behind each choice.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from tacos_bench._native import prefetch as _prefetch

from ._kernel_common import (ST_DONE, ST_EVFULL, ST_FLUSH, ST_GROW, ST_SLICE, ST_STUCK, TIE_LOWEST, TIE_RANDOM, U0,
                             U1, below32, class_advance, class_open, ctz, next_end, nth_bit, popcount, ring_pop,
                             ring_slot)

# ============================================================================ the scale kernel
# The default rule (random chunk order, greedy matching, no duplicates, no window) for very large topologies:
# the same decisions as the classic kernel's `run_counted_random` (every distinct candidate chunk of the free
# in-links equally likely, then the link by `link_tiebreak`), with a layout and loop structure built for
# memory-level parallelism rather than cache hits. At 40,000 NPUs the state is gigabytes and nearly every access misses;
# a dependent miss costs ~400 ns on this VM, an overlapped (prefetched) one ~10-25 ns.
#
# * `state[c, v]` (uint8/16/32/64 by in-degree): bit 0 = v holds chunk c, bit 1 = v holds or receives it
#   ("claimed"), bit 2 + j = the sender of v's j-th in-link (`in_order[in_ptr[v] + j]`) holds it.
#   Chunk-major, so one transfer's words (its chunk at the receiver and at the neighbours) share cache lines
#   when neighbour ids are close (grids: +-1, +-X): a draw needs one line to know every in-link that can
#   carry the chunk.
# * Candidate set of destination v: `S[v, :slen[v]]`, every chunk that some in-neighbour holds and v has not
#   claimed, without repeats (appended when the first in-neighbour gets the chunk, swap-removed when v
#   claims it; a claim always comes from a draw in S[v], so no entry is ever stale). `jinfo[j, J_TOT]` counts
#   the candidates of in-link j exactly (as `Counts.total` in the classic kernel), to know when the free
#   in-links have nothing left. Per-link arrays are indexed by in-position (the link's index in `in_order`), so
#   a destination's in-links are contiguous in memory.
# * A draw takes a uniform entry of S[v] and keeps it when a free in-link can carry it: uniform over the
#   distinct candidates of the free in-links. After SCALE_REJECT_SCAN misses in a row, the entries are
#   probed in order from a random position instead, and the first carriable one is taken (cheaper when few
#   entries are carriable; a slight bias toward entries that follow non-carriable ones).
# * Every phase is a loop over independent items (arrivals; active destinations, one draw each per round),
#   with software prefetches one stage or a fixed distance ahead, so the cache misses overlap.
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


class InLinks(NamedTuple):
    """The links addressed by their *in-position* ``j`` (their index in ``in_order``): the in-links of v are
    ``j = in_ptr[v] .. in_ptr[v+1]-1``, so everything a matching reads about them is contiguous."""

    num_npus: int
    num_groups: int              # G: in-link groups per destination (SCALE_MAX_GROUPS at most)
    dst: np.ndarray              # int64 [M]: receiver of in-position j
    link: np.ndarray             # int64 [M]: its link id
    time: np.ndarray             # float64 [M]: its chunk time
    group: np.ndarray            # int8 [M]: its group among the receiver's in-links
    group_mask: np.ndarray       # uint64 [M]: the in-link bits (j - in_ptr[v]) of its group
    npu_group_mask: np.ndarray   # uint64 [N * G]: the in-link bits of group g of v, at v * G + g
    in_ptr: np.ndarray           # int64 [N + 1]
    out_ptr: np.ndarray          # int64 [N + 1]: out-links of u are the link ids out_ptr[u] .. out_ptr[u + 1] - 1
    link_dst: np.ndarray         # int64 [M]: receiver of each link id
    link_pos: np.ndarray         # int64 [M]: in-position of each link id


class ScaleState(NamedTuple):
    """Holdings, candidate sets and in-link records (the layout comment above)."""

    state: np.ndarray            # uint8..64 [C, N]: S_HELD, S_CLAIMED and one bit per in-link sender holding it
    cand: np.ndarray             # uint16/32 [N * G, cap]: the candidate set of each (NPU, group)
    cand_len: np.ndarray         # int64 [N * G]
    jinfo: np.ndarray            # int32 [M, 2]: J_TOT, J_CUR of each in-position
    # flat views of the three above: the prefetch hints take a flat array and an index
    state_flat: np.ndarray
    cand_flat: np.ndarray
    jinfo_flat: np.ndarray


class RingEntry(NamedTuple):
    """The per-slot arrays of the event queue besides the end time."""

    pos: np.ndarray              # int64: in-position of the transfer
    chunk: np.ndarray            # int64
    start_event: np.ndarray      # int64: index of the event it started at


class Partitions(NamedTuple):
    """The NPUs in contiguous partitions, each with its own random stream and counters (one row each, on its
    own cache lines: no false sharing between threads)."""

    lo: np.ndarray               # int64 [P + 1]: partition p is lo[p] .. lo[p + 1] - 1
    rng: np.ndarray              # uint64 [P, 8]: splitmix64 state in column 0
    ctr: np.ndarray              # int64 [P, 64]: SC_* counters in the first columns


class ScaleWork(NamedTuple):
    """Scratch of an event, indexed by NPU (each partition uses its own range) or by in-position."""

    dirty: np.ndarray            # int64 [N]: NPUs to match at this event (partition p from lo[p])
    is_dirty: np.ndarray         # bool [N]
    active: np.ndarray           # int64 [N]: NPUs still drawing in this round
    draw_pos: np.ndarray         # int64 [N]: position of the drawn entry in its candidate set
    draw_chunk: np.ndarray       # int64 [N]: the drawn chunk
    misses: np.ndarray           # int64 [N]: draws in a row that found no free in-link to carry them
    free_mask: np.ndarray        # int64 [N]: in-link bits of the idle in-links
    draw_row: np.ndarray         # int64 [N]: the candidate set drawn from (v * G + group)
    eligible: np.ndarray         # int64 [N]: bits of the groups with an idle in-link that has a candidate
    arr_pos: np.ndarray          # int64 [M]: in-positions of this event's arrivals
    arr_chunk: np.ndarray        # int64 [M]: their chunks
    start_pos: np.ndarray        # int64 [M]: in-positions of the transfers started (partition p from in_ptr[lo[p]])
    start_chunk: np.ndarray      # int64 [M]: their chunks
    part_dirty: np.ndarray       # int64 [P]: length of each partition's dirty list at this event
    part_started: np.ndarray     # int64 [P]: transfers each partition started at this event


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
    return (np.uint64(st >> S_SHIFT) & jgmask[j]) == U0


@njit(cache=True, _nrt=False)
def scale_init(C, links, cs, ctr, src_of):
    """Sources hold their chunks from time 0 (chunk c at NPU src_of[c]); candidate sets and counts."""
    G, ldst, out_ptr, jpos = links.num_groups, links.link_dst, links.out_ptr, links.link_pos
    in_ptr, jgrp, jgmask = links.in_ptr, links.group, links.group_mask
    state, S, slen, jinfo = cs.state, cs.cand, cs.cand_len, cs.jinfo
    for c in range(C):
        v = src_of[c]
        state[c, v] |= S_HELD | S_CLAIMED
    for c in range(C):
        u = src_of[c]
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
def _scale_arrivals(lo, hi, n_arr, links, cs, work, pctr):
    """Apply the arrivals of one event to the NPUs ``lo .. hi-1`` (receivers and neighbours in that range).

    Every update has one owner (the NPU whose state, candidate set or in-link record it changes), so the
    partitions can run concurrently; each goes through the arrivals in the same order, so the result is
    that of one sequential pass. Returns the length of the partition's dirty list (``dirty[lo:]``).
    """
    N, G, jdst, in_ptr, out_ptr = links.num_npus, links.num_groups, links.dst, links.in_ptr, links.out_ptr
    ldst, jpos, jgrp, jgmask = links.link_dst, links.link_pos, links.group, links.group_mask
    state, S, slen, jinfo = cs.state, cs.cand, cs.cand_len, cs.jinfo
    statef, Sf, jinfof = cs.state_flat, cs.cand_flat, cs.jinfo_flat
    arr_j, arr_c, dirty, is_dirty = work.arr_pos, work.arr_chunk, work.dirty, work.is_dirty
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
def _scale_match(lo, nd, links, link_tiebreak, cs, work, rng, pctr, st0):
    """The matchings of one event for the dirty NPUs ``dirty[lo:lo+nd]`` (one partition).

    Reads and writes only these NPUs' candidate sets, state words (column v) and in-link records, so the
    partitions can run concurrently. Started transfers go to ``start_pos/start_chunk[st0:]``; returns how many.
    """
    N, G, jlink, jtime, in_ptr = links.num_npus, links.num_groups, links.link, links.time, links.in_ptr
    jgrp, vgmask = links.group, links.npu_group_mask
    state, S, slen, jinfo = cs.state, cs.cand, cs.cand_len, cs.jinfo
    statef, Sf, jinfof = cs.state_flat, cs.cand_flat, cs.jinfo_flat
    dirty, is_dirty, act, act_q, act_c = work.dirty, work.is_dirty, work.active, work.draw_pos, work.draw_chunk
    act_rej, act_fm, act_row, act_em = work.misses, work.free_mask, work.draw_row, work.eligible
    st_j, st_c = work.start_pos, work.start_chunk
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
                    q = below32(rng, slen[v])
                else:
                    # one draw over the entries of the eligible groups' sets picks the group and the entry
                    tot = 0
                    for g in range(G):
                        if (em >> g) & 1:
                            tot += slen[v * G + g]
                    if first_round:
                        pctr[SC_CANDIDATES] += tot
                    q = below32(rng, tot)
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
                ok = carr != U0
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
                            if (em >> g) & 1 and (np.uint64(st >> S_SHIFT) & vgmask[v * G + g]) != U0:
                                m += 1
                        if m > 1 and below32(rng, m) != 0:
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
                    i = below32(rng, nS)
                    carr = U0
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
                        if carr != U0:
                            q = i
                            c = ci
                            st = sti
                            break
                        i += 1
                        if i == nS:
                            i = 0
                    if carr == U0:  # cannot happen (see above); a safe retry next round
                        continue
                act_rej[a] = 0
                # the in-link, by the tie-break rule among those that can carry c
                j0 = in_ptr[v]
                if link_tiebreak == TIE_RANDOM:
                    jb = nth_bit(carr, below32(rng, np.int64(popcount(carr))))
                else:
                    jb = -1
                    ties = 0
                    x = carr
                    while x != U0:
                        jj = np.int64(ctz(x))
                        x &= x - U1
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
                                if below32(rng, ties) == 0:
                                    jb = jj
                best = j0 + jb
                # claim c for v: out of S[v], and out of the counts of every in-link whose sender holds it
                state[c, v] = st | S_CLAIMED
                n = slen[row] - 1
                S[row, q] = S[row, n]
                slen[row] = n
                x = np.uint64(st >> S_SHIFT)
                while x != U0:
                    jinfo[j0 + np.int64(ctz(x)), J_TOT] -= 1
                    x &= x - U1
                act_fm[a] = fm & ~(1 << jb)
                jinfo[best, J_CUR] = c
                st_j[st0 + nst] = best
                st_c[st0 + nst] = c
                nst += 1
        nact = n2
        first_round = False
    return nst


# NRT (numba's reference counting) is off, as in the classic kernel: this kernel allocates nothing (the
# per-partition counts live in the workspace), and with it on every array read from a structure in the
# per-transfer loops would cost an atomic count update.
@njit(cache=True, parallel=True, _nrt=False)
def run_scale(links, cs, q, parts, work, out, ev_time, ev_base, clock, ctr, link_tiebreak, grow_margin, max_events):
    """Advance the scale kernel by at most ``max_events`` event times (status ``ST_*``).

    Links are addressed by their in-position (:class:`InLinks`). ``cs.jinfo[j]`` (int32, 8 bytes per
    position, so a destination's in-links share a cache line) holds the number of candidates of position j
    (``J_TOT``) and the chunk in flight on it (``J_CUR``, -1: idle). The event queue's entries
    (:class:`RingEntry`) carry the position, chunk and start event of each transfer in flight.

    The NPUs are split into partitions (:class:`Partitions`), each with its own random stream and
    counters; the arrivals and the matchings of an event touch one partition's data at a time, so the
    partitions run on parallel threads (``prange``, as many as ``numba.set_num_threads`` allows) with the
    same result as one after the other. Finished transfers go to ``out`` up to ``ctr[SC_OUT]`` as (chunk,
    link id, start event, end event); event ``e`` happens at ``ev_time[e - ev_base[0]]``. Before an event it
    returns ``ST_FLUSH`` when fewer than ``num_links`` output rows are free, ``ST_EVFULL`` when ``ev_time`` is
    full and ``ST_GROW`` when a candidate set could outgrow ``cs.cand`` (up to ``grow_margin`` entries can
    join one set per event).
    """
    # a parallel loop body takes arrays and scalars only: the fields it needs are read here, and the
    # structures rebuilt inside it
    N, G = links.num_npus, links.num_groups
    jdst, jlink, jtime, jgrp, jgmask = links.dst, links.link, links.time, links.group, links.group_mask
    vgmask, in_ptr, out_ptr = links.npu_group_mask, links.in_ptr, links.out_ptr
    ldst, jpos = links.link_dst, links.link_pos
    state, S, slen, jinfo = cs.state, cs.cand, cs.cand_len, cs.jinfo
    statef, Sf, jinfof = cs.state_flat, cs.cand_flat, cs.jinfo_flat
    dirty, is_dirty, act, act_q, act_c = work.dirty, work.is_dirty, work.active, work.draw_pos, work.draw_chunk
    act_rej, act_fm, act_row, act_em = work.misses, work.free_mask, work.draw_row, work.eligible
    arr_j, arr_c, st_j, st_c = work.arr_pos, work.arr_chunk, work.start_pos, work.start_chunk
    nd, nst = work.part_dirty, work.part_started
    part_lo, rngs, pctr = parts.lo, parts.rng, parts.ctr
    q_pos, q_chunk, q_sev, q_end = q.entry.pos, q.entry.chunk, q.entry.start_event, q.end
    r_off, r_head, r_size, cheap, csize = q.ring_off, q.ring_head, q.ring_size, q.heap, q.heap_size
    jclass = q.class_of
    out_c, out_l, out_s, out_e = out.chunk, out.link, out.start, out.end
    M = jdst.shape[0]
    P = part_lo.shape[0] - 1
    cap = out_c.shape[0]
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
            t = next_end(q)
            # the arrivals at t, in queue order: output rows now, state updates per partition below
            n_arr = 0
            while csize[0] > 0 and next_end(q) == t:
                kc = cheap[0]
                while r_size[kc] > 0:
                    s = r_off[kc] + r_head[kc]
                    if q_end[s] != t:
                        break
                    ring_pop(q, kc)
                    j = q_pos[s]
                    c = q_chunk[s]
                    arr_j[n_arr] = j
                    arr_c[n_arr] = c
                    n_arr += 1
                    o = ctr[SC_OUT]
                    out_c[o] = c
                    out_l[o] = jlink[j]
                    out_s[o] = q_sev[s]
                    out_e[o] = e
                    ctr[SC_OUT] = o + 1
                class_advance(q, kc)
            ctr[SC_REMAINING] -= n_arr
            for p in prange(P):
                nd[p] = _scale_arrivals(
                    part_lo[p], part_lo[p + 1], n_arr,
                    InLinks(num_npus=N, num_groups=G, dst=jdst, link=jlink, time=jtime, group=jgrp, group_mask=jgmask,
                            npu_group_mask=vgmask, in_ptr=in_ptr, out_ptr=out_ptr, link_dst=ldst, link_pos=jpos),
                    ScaleState(state=state, cand=S, cand_len=slen, jinfo=jinfo, state_flat=statef, cand_flat=Sf,
                               jinfo_flat=jinfof),
                    ScaleWork(dirty=dirty, is_dirty=is_dirty, active=act, draw_pos=act_q, draw_chunk=act_c,
                              misses=act_rej, free_mask=act_fm, draw_row=act_row, eligible=act_em, arr_pos=arr_j,
                              arr_chunk=arr_c, start_pos=st_j, start_chunk=st_c, part_dirty=nd,
                              part_started=nst),
                    pctr[p])
        clock[0] = t
        ev_time[e - ev_base[0]] = t
        events += 1
        ctr[SC_EVENTS] = e + 1
        # the matchings, one partition per thread
        for p in prange(P):
            nst[p] = _scale_match(
                part_lo[p], nd[p],
                InLinks(num_npus=N, num_groups=G, dst=jdst, link=jlink, time=jtime, group=jgrp, group_mask=jgmask,
                        npu_group_mask=vgmask, in_ptr=in_ptr, out_ptr=out_ptr, link_dst=ldst, link_pos=jpos),
                link_tiebreak,
                ScaleState(state=state, cand=S, cand_len=slen, jinfo=jinfo, state_flat=statef, cand_flat=Sf,
                           jinfo_flat=jinfof),
                ScaleWork(dirty=dirty, is_dirty=is_dirty, active=act, draw_pos=act_q, draw_chunk=act_c,
                          misses=act_rej, free_mask=act_fm, draw_row=act_row, eligible=act_em, arr_pos=arr_j,
                          arr_chunk=arr_c, start_pos=st_j, start_chunk=st_c, part_dirty=nd,
                              part_started=nst),
                rngs[p], pctr[p], in_ptr[part_lo[p]])
        # the started transfers join the event queue (partition by partition: deterministic)
        for p in range(P):
            st0 = in_ptr[part_lo[p]]
            for k in range(st0, st0 + nst[p]):
                j = st_j[k]
                kc = jclass[j]
                end_t = t + jtime[j]
                class_open(q, kc, end_t)
                s = ring_slot(q, kc)
                q_pos[s] = j
                q_chunk[s] = st_c[k]
                q_sev[s] = e
                q_end[s] = end_t
    if ctr[SC_REMAINING] == 0:
        return ST_DONE
    return ST_SLICE
