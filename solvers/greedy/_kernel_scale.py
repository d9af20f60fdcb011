"""The scale kernel of the greedy (numba): the default rule for very large topologies.

The default rule (random chunk order, greedy matching, no duplicates, no window) with the same decisions as
the counted fast path of :mod:`solvers.greedy._kernel_classic` (every distinct candidate chunk of the free in-links
equally likely, then the link by ``link_tiebreak``), with a layout and loop structure built for memory-level
parallelism rather than cache hits. ``docs/scale.md`` has the measurements behind each choice.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from tacos_bench._native import prefetch as _prefetch

from ._kernel_common import (ST_DONE, ST_EVFULL, ST_FLUSH, ST_GROW, ST_SLICE, ST_STUCK, TIE_LOWEST, TIE_RANDOM, U0,
                             U1, below32, class_advance, class_open, ctz, nth_bit, popcount, ring_pop, ring_slot)

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
def scale_init(N, C, G, ldst, out_ptr, jpos, in_ptr, jgrp, jgmask, state, S, slen, jinfo, ctr, src_of):
    """Sources hold their chunks from time 0 (chunk c at NPU src_of[c]); candidate sets and counts."""
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


@njit(cache=True, parallel=True)
def run_scale(N, G, jdst, jlink, jtime, jclass, jgrp, jgmask, vgmask, in_ptr, out_ptr, ldst, jpos, link_tiebreak,
              state, S, slen, jinfo,
              q_pos, q_chunk, q_sev, q_end, r_off, r_cap, r_head, r_size, cheap, cpos, csize, chead, cprio,
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
                while r_size[kc] > 0:
                    s = r_off[kc] + r_head[kc]
                    if q_end[s] != t:
                        break
                    ring_pop(r_off, r_cap, r_head, r_size, kc)
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
                class_advance(q_end, r_off, r_head, r_size, cheap, cpos, csize, chead, cprio, kc)
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
                class_open(r_size, cheap, cpos, csize, chead, cprio, kc, end_t)
                s = ring_slot(r_off, r_cap, r_head, r_size, kc)
                q_pos[s] = j
                q_chunk[s] = st_c[k]
                q_sev[s] = e
                q_end[s] = end_t
    if ctr[SC_REMAINING] == 0:
        return ST_DONE
    return ST_SLICE
