"""The topology-aware greedy kernel (numba): TACOS matching with rules derived from link tiers.

Same event loop as the TACOS rule (time advances arrival by arrival; at each event every idle in-link of
every touched destination may start a chunk its sender holds and its receiver neither holds nor is
receiving; transfers start at the event, so schedules are causal by construction), with four ablatable
rules on top (:class:`solvers.greedy.GreedyOptions`, ``docs/greedy.md``):

``imports``
    ``near``: a link does not carry a chunk that an NPU of its near class (:mod:`tacos_bench.topology.tiers`) holds
    or is receiving, *import once per near set*; ``group``: the same with the strongly connected group
    of the faster links (import once per group); ``all``: the TACOS rule.
``import_gate`` (gamma)
    The near rule applies to a link only while the receiver's near in-links can deliver their backlog
    soon enough: ``t_fastest_near + gamma * Q / rate < t_l``, ``Q`` the chunks the near senders hold that the
    receiver lacks, ``rate`` their summed chunk rate (0: the rule always applies).
``link_order``
    ``chunk_first``: the TACOS order (a chunk by key, then a link by ``link_tiebreak``);
    ``fewest_first``: the idle link with the fewest candidates picks first, its best chunk by key.
``chunk_order`` keys (smaller first, ties uniformly at random)
    ``random``: none; ``rarest``: NPUs holding or receiving the chunk; ``local_rarest``: for an in-group
    link (in-neighbours of the receiver holding it, NPUs holding it), for a cross-group link (groups
    holding it, neighbour groups of the receiver's group holding it): chunks only few senders can supply
    go first, so every in-link stays supplied, and rare chunks spread.
``group_matching``
    Cross-group links into one group are matched together after the per-destination matchings of an
    event (fewest candidates first, then augmenting paths: a maximum matching per group), so two NPUs of
    a group never import the same chunk and as many links as possible are busy.

State per chunk (:class:`ChunkState`) is bitsets (held, receiving, per near class, per group) and
counters (NPUs, groups per partition, in-neighbours holding it per receiver, neighbour groups holding it
per group), updated in O(degree + classes + groups) per transfer. The kernel takes the links
(:class:`~solvers.greedy._kernel_common.Links`), the near classes and groups (:class:`TierArrays`) and the
options (:class:`Rules`). All randomness is one splitmix64 stream seeded by the run's seed.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from tacos_bench.graph import pair_pop, pair_push

from ._kernel_common import EVENT_REL, TIE_EARLIEST, TIE_LOWEST, U0, U1, below, ctz, popcount

IMPORT_ALL, IMPORT_NEAR, IMPORT_GROUP = 0, 1, 2
KEY_RANDOM, KEY_RAREST, KEY_LOCAL = 0, 1, 2
LINKS_CHUNK_FIRST, LINKS_FEWEST_FIRST = 0, 1
(T_EVENTS, T_MATCHINGS, T_GATE_CHECKS, T_GATE_CLOSED, T_DEFERRED, T_AUGMENTED, T_FALLBACKS,
 T_CANDIDATES) = range(8)
NUM_STATS = 8


class Rules(NamedTuple):
    """The options of a run as the codes the kernel branches on."""

    imports: int          # IMPORT_*
    gamma: float          # the near rule's gate (0: always on)
    key: int              # KEY_*: the chunk order
    link_order: int       # LINKS_*
    group_matching: bool  # cross-group links into a group are matched together
    tiebreak: int         # TIE_*


class TierArrays(NamedTuple):
    """The arrays of :class:`tacos_bench.topology.tiers.Tiers` the kernel reads (same names)."""

    near_of_link: np.ndarray  # int64 [M]: near class of each link, -1 none
    near_ptr: np.ndarray      # int64 [classes + 1]: CSR of the classes' members (the kernel needs their number)
    rev_ptr: np.ndarray       # int64 [N + 1]: classes containing w are rev_cls[rev_ptr[w]:rev_ptr[w + 1]]
    rev_cls: np.ndarray       # int64
    fin_ptr: np.ndarray       # int64 [classes + 1]: the gate's near in-links of class k are fin_links[fin_ptr[k]:...]
    fin_links: np.ndarray     # int64
    fin_rate: np.ndarray      # float64 [classes]: their summed chunk rate
    fin_tmin: np.ndarray      # float64 [classes]: the fastest of their chunk times
    part_of_link: np.ndarray  # int64 [M]: partition in which the link is cross-group, -1 none
    gid: np.ndarray           # int64 [partitions, N]: group of each NPU in each partition
    ngrev_ptr: np.ndarray     # int64 [groups + 1]: groups having g as a neighbour group are ngrev[ngrev_ptr[g]:...]
    ngrev: np.ndarray         # int64


class ChunkState(NamedTuple):
    """What holds or receives each chunk (built by :func:`run_tiered`)."""

    held: np.ndarray                # uint64 [N, W]: bitsets of the chunks each NPU holds
    receiving: np.ndarray           # uint64 [N, W]: chunks in flight to each NPU
    near_has: np.ndarray            # uint64 [classes, W]: chunks an NPU of the near class holds or receives
    group_has: np.ndarray           # uint64 [groups, W]: chunks an NPU of the group holds or receives
    groups_holding: np.ndarray      # int32 [partitions, C]: groups of the partition holding or receiving it
    in_nbrs_holding: np.ndarray     # uint16 [N, C] (local_rarest only): in-neighbours of the NPU holding it
    nbr_groups_holding: np.ndarray  # uint16 [groups, C] (local_rarest only): neighbour groups of g holding it
    holders: np.ndarray             # int32 [C]: NPUs holding or receiving it


@njit(cache=True, inline="always")
def _set(B, r, c):
    B[r, c >> 6] |= U1 << np.uint64(c & 63)


@njit(cache=True, inline="always")
def _has(B, r, c):
    return (B[r, c >> 6] >> np.uint64(c & 63)) & U1


@njit(cache=True)
def _gain(w, c, N, C, P, st, tr, key):
    """``w`` holds or receives ``c`` from now on: near classes, groups and the counters learn it."""
    NB, GB, gcnt, lrg, cnt = st.near_has, st.group_has, st.groups_holding, st.nbr_groups_holding, st.holders
    rev_ptr, rev_cls, gid, ngrev_ptr, ngrev = tr.rev_ptr, tr.rev_cls, tr.gid, tr.ngrev_ptr, tr.ngrev
    cnt[c] += 1
    for q in range(rev_ptr[w], rev_ptr[w + 1]):
        _set(NB, rev_cls[q], c)
    for p in range(P):
        g = gid[p, w]
        if _has(GB, g, c) == 0:
            _set(GB, g, c)
            gcnt[p, c] += 1
            if key == KEY_LOCAL:
                for q in range(ngrev_ptr[g], ngrev_ptr[g + 1]):
                    lrg[ngrev[q], c] += 1


@njit(cache=True)
def _arrive(v, c, links, st, key):
    """``c`` lands at ``v``: it holds it, and its out-neighbours count one more in-neighbour holding it."""
    ldst, out_ptr = links.dst, links.out_ptr
    H, R, lrv = st.held, st.receiving, st.in_nbrs_holding
    _set(H, v, c)
    R[v, c >> 6] &= ~(U1 << np.uint64(c & 63))
    if key == KEY_LOCAL:
        for ol in range(out_ptr[v], out_ptr[v + 1]):
            lrv[ldst[ol], c] += 1


@njit(cache=True, inline="always")
def _key(c, v, p, g, key, st, scale):
    """Key of chunk ``c`` for a link into ``v`` (smaller first): cross-group links (``p >= 0``, the
    receiver's group ``g``) by (groups holding it, neighbour groups holding it), in-group links by
    (in-neighbours of ``v`` holding it, NPUs holding it); lexicographic pairs packed as one integer."""
    if key == KEY_RANDOM:
        return 0
    if key == KEY_RAREST:
        return np.int64(st.holders[c])
    if p >= 0:
        return np.int64(st.groups_holding[p, c]) * scale + np.int64(st.nbr_groups_holding[g, c])
    return np.int64(st.in_nbrs_holding[v, c]) * scale + np.int64(st.holders[c])


@njit(cache=True)
def _gate_open(k, v, l, W, st, links, tr, gamma):
    """The near rule applies to ``l`` (class ``k``) only if the receiver's near in-links can drain their
    backlog before ``l`` would deliver: ``t_fastest + gamma * Q / rate < t_l``."""
    H, R = st.held, st.receiving
    lsrc, lt = links.src, links.time
    fin_ptr, fin_links, fin_rate, fin_tmin = tr.fin_ptr, tr.fin_links, tr.fin_rate, tr.fin_tmin
    if fin_ptr[k] == fin_ptr[k + 1]:
        return True
    Q = 0
    for w in range(W):
        x = U0
        for f in range(fin_ptr[k], fin_ptr[k + 1]):
            x |= H[lsrc[fin_links[f]], w]
        Q += np.int64(popcount(x & ~(H[v, w] | R[v, w])))
    return fin_tmin[k] + gamma * Q / fin_rate[k] < lt[l]


@njit(cache=True)
def _candidates(l, v, k, g, row, CB, W, st, links):
    """Candidate bitset of idle link ``l`` into ``CB[row]``: its sender holds it, ``v`` neither holds nor
    receives it, and (``k``/``g`` >= 0) no NPU of the near class / group holds or receives it. Returns
    their number."""
    H, R, NB, GB = st.held, st.receiving, st.near_has, st.group_has
    u = links.src[l]
    n = 0
    for w in range(W):
        x = H[u, w] & ~(H[v, w] | R[v, w])
        if k >= 0:
            x &= ~NB[k, w]
        if g >= 0:
            x &= ~GB[g, w]
        CB[row, w] = x
        n += np.int64(popcount(x))
    return n


@njit(cache=True)
def _best(row, CB, W, v, l, key, st, tr, taken, rng):
    """The smallest-key candidate of ``CB[row]`` not in ``taken`` (ties uniformly at random), or -1;
    ``l`` is the link (``-1``: the destination's own key)."""
    p = tr.part_of_link[l] if l >= 0 else -1
    g = tr.gid[p, v] if p >= 0 else -1
    scale = np.int64(st.held.shape[0] + st.group_has.shape[0] + 1)
    bk = np.int64(1) << np.int64(62)
    best = -1
    ties = 0
    for w in range(W):
        x = CB[row, w] & ~taken[w]
        while x != U0:
            c = (w << 6) + np.int64(ctz(x))
            x &= x - U1
            k = _key(c, v, p, g, key, st, scale)
            if k < bk:
                bk, best, ties = k, c, 1
            elif k == bk:
                ties += 1
                if below(rng, ties) == 0:
                    best = c
    return best


@njit(cache=True)
def _start(l, c, now, N, C, P, links, st, tr, key, busy, lchunk, hk, hv, hsize, out, nout):
    """Start ``c`` on ``l`` at ``now``; returns the new heap size."""
    ldst, lt, R = links.dst, links.time, st.receiving
    out_c, out_l, out_s, out_e = out.chunk, out.link, out.start, out.end
    v = ldst[l]
    busy[l] = True
    lchunk[l] = c
    _set(R, v, c)
    _gain(v, c, N, C, P, st, tr, key)
    e = now + lt[l]
    out_c[nout[0]] = c
    out_l[nout[0]] = l
    out_s[nout[0]] = now
    out_e[nout[0]] = e
    nout[0] += 1
    return pair_push(hk, hv, hsize, e, l)


@njit(cache=True)
def run_tiered(N, C, links, tr, rules, rng, out, stats, init_v, init_c):
    """Synthesize an All-Gather with the tiered rules; the transfers go to ``out``
    (:class:`~solvers.greedy._kernel_common.Transfers`), in start order. Returns the number of transfers."""
    ldst, lt, in_ptr, in_order, out_ptr = links.dst, links.time, links.in_ptr, links.in_order, links.out_ptr
    near_of_link, part_of_link, gid = tr.near_of_link, tr.part_of_link, tr.gid
    imports, gamma, key, link_order = rules.imports, rules.gamma, rules.key, rules.link_order
    group_matching, tiebreak = rules.group_matching, rules.tiebreak
    M = links.src.shape[0]
    W = (C + 63) // 64
    K = max(tr.near_ptr.shape[0] - 1, 1)
    P = gid.shape[0]
    G = 1
    for p in range(P):
        for v in range(N):
            if gid[p, v] + 1 > G:
                G = gid[p, v] + 1
    st = ChunkState(held=np.zeros((N, W), np.uint64), receiving=np.zeros((N, W), np.uint64),
                    near_has=np.zeros((K, W), np.uint64), group_has=np.zeros((G, W), np.uint64),
                    groups_holding=np.zeros((max(P, 1), C), np.int32),
                    in_nbrs_holding=np.zeros((N if key == KEY_LOCAL else 1, C), np.uint16),
                    nbr_groups_holding=np.zeros((G if key == KEY_LOCAL else 1, C), np.uint16),
                    holders=np.zeros(C, np.int32))
    R = st.receiving
    for i in range(init_v.shape[0]):  # (NPU, chunk) pairs held at the start, once each
        o = init_v[i]
        c = init_c[i]
        _gain(o, c, N, C, P, st, tr, key)
        R[o, c >> 6] |= U1 << np.uint64(c & 63)  # _arrive clears it again
        _arrive(o, c, links, st, key)
    maxdeg = 1
    for v in range(N):
        maxdeg = max(maxdeg, in_ptr[v + 1] - in_ptr[v])
    busy = np.zeros(M, np.bool_)
    lchunk = np.full(M, -1, np.int64)
    hk = np.empty(M + 1)
    hv = np.empty(M + 1, np.int64)
    hsize = 0
    nout = np.zeros(1, np.int64)
    total = N * C - init_v.shape[0]
    CB = np.zeros((maxdeg, W), np.uint64)
    jl = np.empty(maxdeg, np.int64)
    jn = np.empty(maxdeg, np.int64)
    jalive = np.zeros(maxdeg, np.bool_)
    taken = np.zeros(W, np.uint64)
    none = np.zeros(W, np.uint64)
    # deferred cross-group links of an event, and the group matching's scratch
    dg = np.empty(M, np.int64)
    dl = np.empty(M, np.int64)
    dk = np.empty(M, np.int64)
    GCB = np.zeros((maxdeg if not group_matching else M, W), np.uint64)
    gl = np.empty(M, np.int64)
    gch = np.empty(M, np.int64)
    gcount = np.empty(M, np.int64)
    owner = np.full(C, -1, np.int64)
    parent = np.full(C, -1, np.int64)
    seen = np.zeros(W, np.uint64)
    bq = np.empty(M + 1, np.int64)
    gate_stamp = np.full(K, -1, np.int64)
    gate_val = np.zeros(K, np.bool_)
    stamp = np.full(N, -1, np.int64)
    touched = np.arange(N)
    nt = N
    now = 0.0
    ev = 0
    fallback = False
    while True:
        stats[T_EVENTS] += 1
        nd = 0
        # ---------------------------------------------------------------- per-destination matchings
        for ti in range(nt):
            v = touched[ti]
            stats[T_MATCHINGS] += 1
            nj = 0
            for q in range(in_ptr[v], in_ptr[v + 1]):
                l = in_order[q]
                if busy[l]:
                    continue
                k = near_of_link[l] if imports == IMPORT_NEAR and not fallback else -1
                pg = part_of_link[l] if imports == IMPORT_GROUP and not fallback else -1
                g = gid[pg, v] if pg >= 0 else -1
                if k >= 0 and gamma > 0.0:
                    if gate_stamp[k] != stats[T_MATCHINGS]:
                        gate_stamp[k] = stats[T_MATCHINGS]
                        stats[T_GATE_CHECKS] += 1
                        gate_val[k] = _gate_open(k, v, l, W, st, links, tr, gamma)
                        if not gate_val[k]:
                            stats[T_GATE_CLOSED] += 1
                    if not gate_val[k]:
                        k = -1
                if group_matching and part_of_link[l] >= 0 and (k >= 0 or g >= 0):
                    dg[nd] = gid[part_of_link[l], v]
                    dl[nd] = l
                    dk[nd] = k if k >= 0 else -2 - g  # the group rule's group, encoded
                    nd += 1
                    continue
                n = _candidates(l, v, k, g, nj, CB, W, st, links)
                if n > 0:
                    jl[nj] = l
                    jn[nj] = n
                    jalive[nj] = True
                    nj += 1
            if nj == 0:
                continue
            stats[T_CANDIDATES] += nj
            if link_order == LINKS_CHUNK_FIRST:
                while True:
                    for w in range(W):
                        taken[w] = U0
                    any_alive = False
                    for j in range(nj):
                        if jalive[j]:
                            any_alive = True
                            for w in range(W):
                                taken[w] |= CB[j, w]
                    if not any_alive:
                        break
                    for w in range(W):  # the union of the alive rows, as one row to pick from
                        GCB[0, w] = taken[w]
                    c = _best(0, GCB, W, v, -1, key, st, tr, none, rng)
                    if c < 0:
                        break
                    bj = -1
                    ties = 0
                    for j in range(nj):
                        if not jalive[j] or _has(CB, j, c) == 0:
                            continue
                        if bj < 0:
                            bj, ties = j, 1
                        elif tiebreak == TIE_LOWEST:
                            if jl[j] < jl[bj]:
                                bj = j
                        elif tiebreak == TIE_EARLIEST and lt[jl[j]] != lt[jl[bj]]:
                            if lt[jl[j]] < lt[jl[bj]]:
                                bj, ties = j, 1
                        else:
                            ties += 1
                            if below(rng, ties) == 0:
                                bj = j
                    jalive[bj] = False
                    for j in range(nj):
                        CB[j, c >> 6] &= ~(U1 << np.uint64(c & 63))
                    hsize = _start(jl[bj], c, now, N, C, P, links, st, tr, key, busy, lchunk, hk, hv, hsize, out,
                                   nout)
            else:
                while True:
                    bj = -1
                    bn = 0
                    ties = 0
                    for j in range(nj):
                        if not jalive[j]:
                            continue
                        n = 0
                        for w in range(W):
                            n += np.int64(popcount(CB[j, w]))
                        if n == 0:
                            jalive[j] = False
                            continue
                        if bj < 0 or n < bn:
                            bj, bn, ties = j, n, 1
                        elif n == bn:
                            ties += 1
                            if below(rng, ties) == 0:
                                bj = j
                    if bj < 0:
                        break
                    jalive[bj] = False
                    c = _best(bj, CB, W, v, jl[bj], key, st, tr, none, rng)
                    for j in range(nj):
                        CB[j, c >> 6] &= ~(U1 << np.uint64(c & 63))
                    hsize = _start(jl[bj], c, now, N, C, P, links, st, tr, key, busy, lchunk, hk, hv, hsize, out,
                                   nout)
        # ---------------------------------------------------------------- group matchings
        if nd > 0:
            stats[T_DEFERRED] += nd
            oi = np.argsort(dg[:nd], kind="mergesort")
            i0 = 0
            while i0 < nd:
                g = dg[oi[i0]]
                i1 = i0
                while i1 < nd and dg[oi[i1]] == g:
                    i1 += 1
                nL = 0
                for a in range(i0, i1):
                    idx = oi[a]
                    l = dl[idx]
                    k = dk[idx] if dk[idx] >= 0 else -1
                    gg = -2 - dk[idx] if dk[idx] < -1 else -1
                    n = _candidates(l, ldst[l], k, gg, nL, GCB, W, st, links)
                    if n > 0:
                        gl[nL] = l
                        gch[nL] = -1
                        gcount[nL] = n
                        nL += 1
                i0 = i1
                if nL == 0:
                    continue
                # greedy: fewest candidates first, each its best chunk not yet taken in the group
                for w in range(W):
                    taken[w] = U0
                srt = np.argsort(gcount[:nL], kind="mergesort")
                for a0 in range(nL):
                    a = srt[a0]
                    c = _best(a, GCB, W, ldst[gl[a]], gl[a], key, st, tr, taken, rng)
                    if c >= 0:
                        gch[a] = c
                        owner[c] = a
                        taken[c >> 6] |= U1 << np.uint64(c & 63)
                # augmenting paths (link -> chunk -> the link that holds it): a maximum matching per group
                for a in range(nL):
                    if gch[a] >= 0:
                        continue
                    for w in range(W):
                        seen[w] = U0
                    qh = 0
                    qt = 1
                    bq[0] = a
                    fx = -1
                    fc = -1
                    while qh < qt and fx < 0:
                        x = bq[qh]
                        qh += 1
                        for w in range(W):
                            y = GCB[x, w] & ~seen[w]
                            while y != U0:
                                c = (w << 6) + np.int64(ctz(y))
                                y &= y - U1
                                seen[w] |= U1 << np.uint64(c & 63)
                                parent[c] = x
                                if owner[c] < 0:
                                    fx, fc = x, c
                                    break
                                bq[qt] = owner[c]
                                qt += 1
                            if fx >= 0:
                                break
                    if fx >= 0:
                        stats[T_AUGMENTED] += 1
                        x, c = fx, fc
                        while True:
                            old = gch[x]
                            gch[x] = c
                            owner[c] = x
                            if x == a:
                                break
                            c = old
                            x = parent[old]
                for a in range(nL):
                    c = gch[a]
                    if c < 0:
                        continue
                    owner[c] = -1
                    hsize = _start(gl[a], c, now, N, C, P, links, st, tr, key, busy, lchunk, hk, hv, hsize, out,
                                   nout)
        # ---------------------------------------------------------------- the next event
        if nout[0] == total and hsize == 0:
            break
        ev += 1
        nt = 0
        if hsize == 0:
            # nothing in flight and nothing startable under the rules (not expected): the TACOS rule from here
            if fallback:
                break  # not even that: unreachable pairs (the caller reports the stall)
            stats[T_FALLBACKS] += 1
            fallback = True
            for v in range(N):
                touched[nt] = v
                nt += 1
            continue
        t0, l, hsize = pair_pop(hk, hv, hsize)
        now = t0
        while True:
            v = ldst[l]
            c = lchunk[l]
            busy[l] = False
            lchunk[l] = -1
            _arrive(v, c, links, st, key)
            if stamp[v] != ev:
                stamp[v] = ev
                touched[nt] = v
                nt += 1
            for ol in range(out_ptr[v], out_ptr[v + 1]):
                d = ldst[ol]
                if stamp[d] != ev:
                    stamp[d] = ev
                    touched[nt] = d
                    nt += 1
            if hsize == 0 or hk[0] > t0 + EVENT_REL * max(1.0, t0):
                break
            t1, l, hsize = pair_pop(hk, hv, hsize)
            if t1 > now:
                now = t1
    return nout[0]
