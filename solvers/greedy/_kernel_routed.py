"""Unicast greedy with balanced routes (numba): gather, scatter, all-to-all, ``routing=balanced``.

Two steps, both greedy:

1. **Routes.** Every chunk gets one shortest path (by link time) from where it is to its destination,
   chosen on the shortest-path DAG to minimize, lexicographically, the largest link load on it and then
   the growth of the sum of squared link loads (a link's load is the link time of every chunk routed over
   it). Chunks are routed longest first, ties in seeded random order; then ``passes`` rounds of rip-up
   and re-route move chunks off the most loaded links. With every link's work fixed, no schedule can end
   before the most loaded link's total time, so this step decides the collective time's floor.
2. **Schedule.** TACOS's event loop: whenever a link is idle it starts, among the chunks waiting at its
   sender whose route continues over it, the one with the longest remaining route (ties: the random key),
   so links whose chunks still have far to go never starve the rest.

On tori and meshes the schedule ends at (or within a link time of) the most loaded link's total, and the
routes are within a few percent of the link-load bound (docs/collectives.md).

The routes are :class:`Routes`; both steps take the links (:class:`~solvers.greedy._kernel_common.Links`) and
write transfers to :class:`~solvers.greedy._kernel_common.Transfers`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from tacos_bench.graph import pair_pop, pair_push

from ._kernel_common import EVENT_REL, FORWARD_REL, below, shuffle

# a route looks for a detour only when its worst link is within this fraction of the most loaded link
DETOUR_HOT = 0.9
R_EVENTS = 0  # the one counter in ``stats``


class Routes(NamedTuple):
    """One route per chunk: its links are ``link[offset[c]:offset[c] + length[c]]`` (each chunk has room for
    its longest admissible route)."""

    offset: np.ndarray  # int64 [C + 1]
    length: np.ndarray  # int64 [C]
    link: np.ndarray    # int64 [room]


@njit(cache=True, inline="always")
def _forward(l, x, d, D, ldst, lt):
    return lt[l] + D[ldst[l], d] <= D[x, d] * (1.0 + FORWARD_REL) + 1e-12


@njit(cache=True)
def _best_path(u, d, D, out_ptr, ldst, lt, load, rng, stamp, tag, nodes, fmax, fsq, nxt, path):
    """Write into ``path`` the links of the shortest ``u -> d`` path minimizing (max load, added squares);
    returns its length. ``stamp``/``tag`` mark the DAG nodes of this call."""
    # the DAG nodes reachable from u, by depth-first search
    n = 0
    nodes[n] = u
    n += 1
    stamp[u] = tag
    i = 0
    while i < n:
        x = nodes[i]
        i += 1
        if x == d:
            continue
        for l in range(out_ptr[x], out_ptr[x + 1]):
            w = ldst[l]
            if stamp[w] != tag and _forward(l, x, d, D, ldst, lt):
                stamp[w] = tag
                nodes[n] = w
                n += 1
    # dynamic programme from d outwards (closest to d first)
    key = np.empty(n)
    for j in range(n):
        key[j] = D[nodes[j], d]
    order = np.argsort(key)
    for j in range(n):
        x = nodes[order[j]]
        if x == d:
            fmax[x] = 0.0
            fsq[x] = 0.0
            nxt[x] = -1
            continue
        bm = np.inf
        bs = np.inf
        bl = -1
        ties = 0
        for l in range(out_ptr[x], out_ptr[x + 1]):
            w = ldst[l]
            if stamp[w] != tag or not _forward(l, x, d, D, ldst, lt):
                continue
            nl = load[l] + lt[l]
            m = max(fmax[w], nl)
            sq = fsq[w] + nl * nl - load[l] * load[l]
            if m < bm or (m == bm and sq < bs):
                bm, bs, bl = m, sq, l
                ties = 1
            elif m == bm and sq == bs:
                ties += 1
                if below(rng, ties) == 0:
                    bl = l
        fmax[x] = bm
        fsq[x] = bs
        nxt[x] = bl
    k = 0
    x = u
    while x != d:
        l = nxt[x]
        path[k] = l
        k += 1
        x = ldst[l]
    return k


@njit(cache=True)
def max_hops(N, D, links):
    """``H[u, d]``: the most links on any shortest ``u -> d`` path (the room a route needs)."""
    out_ptr, ldst, lt = links.out_ptr, links.dst, links.time
    H = np.zeros((N, N), np.int64)
    for d in range(N):
        order = np.argsort(D[:, d])
        for j in range(N):
            x = order[j]
            if x == d:
                continue
            h = 0
            for l in range(out_ptr[x], out_ptr[x + 1]):
                if _forward(l, x, d, D, ldst, lt):
                    h = max(h, 1 + H[ldst[l], d])
            H[x, d] = h
    return H


@njit(cache=True)
def _route_one(u, d, stretch, D, out_ptr, ldst, lt, load, rng, stamp, tag, nodes, fmax, fsq, nxt, path, alt, hot):
    """The best route of one chunk: the balanced shortest path or, with ``stretch > 0``, a detour whose first
    link leaves the shortest-path DAG and whose time is at most ``(1 + stretch)`` times the shortest, when
    its (max load, added squares) is lower; only routes whose worst link is within ``DETOUR_HOT`` of the most
    loaded link so far (``hot[0]``) look for one. Returns ``(hops, tag)``."""
    tag += 1
    k = _best_path(u, d, D, out_ptr, ldst, lt, load, rng, stamp, tag, nodes, fmax, fsq, nxt, path)
    if stretch <= 0.0 or fmax[u] < DETOUR_HOT * hot[0]:
        return k, tag  # no detour asked for, or the route avoids the most loaded links anyway
    bm, bs = fmax[u], fsq[u]
    for l0 in range(out_ptr[u], out_ptr[u + 1]):
        w = ldst[l0]
        if _forward(l0, u, d, D, ldst, lt) or lt[l0] + D[w, d] > (1.0 + stretch) * D[u, d]:
            continue
        nl = load[l0] + lt[l0]
        if nl >= bm:
            continue  # its first link alone is as loaded as the best route's worst
        tag += 1
        alt[0] = l0
        kk = 1
        if w != d:
            kk += _best_path(w, d, D, out_ptr, ldst, lt, load, rng, stamp, tag, nodes, fmax, fsq, nxt, alt[1:])
            m, sq = max(nl, fmax[w]), fsq[w] + nl * nl - load[l0] * load[l0]
        else:
            m, sq = nl, nl * nl - load[l0] * load[l0]
        if m < bm or (m == bm and sq < bs):
            bm, bs = m, sq
            for h in range(kk):
                path[h] = alt[h]
            k = kk
    return k, tag


@njit(cache=True)
def route(N, C, pos, dst_of, D, links, passes, rng, routes, load, stretch):
    """Route every chunk from ``pos`` to ``dst_of`` (``pos == dst_of``: nothing to do). ``routes.offset``
    gives each chunk room for its longest admissible route (:func:`max_hops`, plus one link with
    ``stretch``); fills ``routes.length``, ``routes.link`` and ``load``."""
    out_ptr, ldst, lt = links.out_ptr, links.dst, links.time
    path_ptr, path_len, paths = routes.offset, routes.length, routes.link
    stamp = np.zeros(N, np.int64)
    nodes = np.empty(N, np.int64)
    fmax = np.empty(N)
    fsq = np.empty(N)
    nxt = np.empty(N, np.int64)
    scratch = np.empty(N + 1, np.int64)
    alt = np.empty(N + 1, np.int64)
    hot = np.zeros(1)  # the most loaded link seen (an upper bound once rip-ups lower loads)
    order = np.arange(C)
    shuffle(rng, order)
    key = np.empty(C)
    for i in range(C):
        c = order[i]
        key[i] = -D[pos[c], dst_of[c]] if pos[c] != dst_of[c] else 0.0
    order = order[np.argsort(key, kind="mergesort")]
    tag = 0
    for rnd in range(passes + 1):
        for i in range(C):
            c = order[i]
            if pos[c] == dst_of[c]:
                path_len[c] = 0
                continue
            if rnd > 0:
                for h in range(path_len[c]):
                    l = paths[path_ptr[c] + h]
                    load[l] -= lt[l]
            k, tag = _route_one(pos[c], dst_of[c], stretch, D, out_ptr, ldst, lt, load, rng, stamp, tag, nodes,
                                fmax, fsq, nxt, scratch, alt, hot)
            for h in range(k):
                l = scratch[h]
                paths[path_ptr[c] + h] = l
                load[l] += lt[l]
                if load[l] > hot[0]:
                    hot[0] = load[l]
            path_len[c] = k
        if rnd == 0:  # later passes in seeded random order
            shuffle(rng, order)


@njit(cache=True, inline="always")
def _hpush(hk, ht, hv, off, size, l, key, tie, val):
    """Push onto link ``l``'s max-heap (key, then tie) in its segment."""
    base = off[l]
    i = size[l]
    size[l] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if hk[base + p] > key or (hk[base + p] == key and ht[base + p] >= tie):
            break
        hk[base + i] = hk[base + p]
        ht[base + i] = ht[base + p]
        hv[base + i] = hv[base + p]
        i = p
    hk[base + i] = key
    ht[base + i] = tie
    hv[base + i] = val


@njit(cache=True, inline="always")
def _hpop(hk, ht, hv, off, size, l):
    base = off[l]
    top = hv[base]
    n = size[l] - 1
    size[l] = n
    if n == 0:
        return top
    k, t, v = hk[base + n], ht[base + n], hv[base + n]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        b = a + 1
        if b < n and (hk[base + b] > hk[base + a] or (hk[base + b] == hk[base + a] and ht[base + b] > ht[base + a])):
            a = b
        if hk[base + a] < k or (hk[base + a] == k and ht[base + a] <= t):
            break
        hk[base + i] = hk[base + a]
        ht[base + i] = ht[base + a]
        hv[base + i] = hv[base + a]
        i = a
    hk[base + i] = k
    ht[base + i] = t
    hv[base + i] = v
    return top


@njit(cache=True)
def remaining_route(C, routes, lt):
    """Each hop's remaining route time (indexed like ``routes.link``): the longest remaining route first."""
    path_ptr, path_len, paths = routes.offset, routes.length, routes.link
    rem = np.zeros(max(paths.shape[0], 1))
    for c in range(C):
        acc = 0.0
        for h in range(path_len[c] - 1, -1, -1):
            acc += lt[paths[path_ptr[c] + h]]
            rem[path_ptr[c] + h] = acc
    return rem


@njit(cache=True)
def run_routed(C, links, routes, rng, out, stats, link_free, ready, key):
    """Schedule the routed chunks (see the module docstring); returns the number of transfers.

    Link ``l`` is busy until ``link_free[l]`` and chunk ``c`` reaches the start of its route at ``ready[c]``
    (both 0 on a fresh run; a resume after a fault passes the in-flight transfers' ends, so the schedule is
    placed as it will run). At a link the waiting chunk of the largest ``key`` goes first (indexed like
    ``routes.link``: a chunk's key at each hop; :func:`remaining_route` gives the longest remaining route
    first, the flow candidate's forward-backward passes give each pass the other's times)."""
    lt = links.time
    path_ptr, path_len, paths = routes.offset, routes.length, routes.link
    out_c, out_l, out_s, out_e = out.chunk, out.link, out.start, out.end
    M = links.src.shape[0]
    cnt = np.zeros(M, np.int64)
    total = 0
    for c in range(C):
        for h in range(path_len[c]):
            cnt[paths[path_ptr[c] + h]] += 1
        total += path_len[c]
    off = np.zeros(M + 1, np.int64)
    for l in range(M):
        off[l + 1] = off[l] + cnt[l]
    hk = np.empty(max(total, 1))
    ht = np.empty(max(total, 1))
    hv = np.empty(max(total, 1), np.int64)
    size = np.zeros(M, np.int64)
    # the priority at each hop, and a random tie key per chunk
    rem = key
    tie = np.empty(C)
    for c in range(C):
        tie[c] = below(rng, 1 << 30) / float(1 << 30)
    hop = np.zeros(C, np.int64)
    # events: a link's transfer ends (value l), or chunk c reaches its route's start (value M + c)
    ek = np.empty(M + C + 1)
    ev = np.empty(M + C + 1, np.int64)
    esize = 0
    for c in range(C):
        if path_len[c] > 0:
            if ready[c] > 0.0:
                esize = pair_push(ek, ev, esize, ready[c], M + c)
            else:
                _hpush(hk, ht, hv, off, size, paths[path_ptr[c]], rem[path_ptr[c]], tie[c], c)
    busy = np.zeros(M, np.bool_)
    lchunk = np.full(M, -1, np.int64)
    for l in range(M):
        if link_free[l] > 0.0:   # busy with a transfer that is not this schedule's (lchunk -1)
            busy[l] = True
            esize = pair_push(ek, ev, esize, link_free[l], l)
    nout = 0
    now = 0.0
    touched = np.arange(M)
    nt = M
    mark = np.full(M, -1, np.int64)
    e = 0
    done = 0
    while True:
        stats[R_EVENTS] += 1
        for ti in range(nt):
            l = touched[ti]
            if busy[l] or size[l] == 0:
                continue
            c = _hpop(hk, ht, hv, off, size, l)
            busy[l] = True
            lchunk[l] = c
            out_c[nout] = c
            out_l[nout] = l
            out_s[nout] = now
            out_e[nout] = now + lt[l]
            nout += 1
            esize = pair_push(ek, ev, esize, now + lt[l], l)
        if esize == 0:
            break
        e += 1
        nt = 0
        t0, l, esize = pair_pop(ek, ev, esize)
        now = t0
        while True:
            if l >= M:   # a chunk reaches the start of its route
                c = l - M
                nl = paths[path_ptr[c]]
                _hpush(hk, ht, hv, off, size, nl, rem[path_ptr[c]], tie[c], c)
                if mark[nl] != e:
                    mark[nl] = e
                    touched[nt] = nl
                    nt += 1
            else:
                c = lchunk[l]
                busy[l] = False
                lchunk[l] = -1
                if mark[l] != e:
                    mark[l] = e
                    touched[nt] = l
                    nt += 1
                if c >= 0:   # (c < 0: the end of a transfer from before this schedule)
                    hop[c] += 1
                    if hop[c] < path_len[c]:
                        p = path_ptr[c] + hop[c]
                        nl = paths[p]
                        _hpush(hk, ht, hv, off, size, nl, rem[p], tie[c], c)
                        if mark[nl] != e:
                            mark[nl] = e
                            touched[nt] = nl
                            nt += 1
                    else:
                        done += 1
            if esize == 0 or ek[0] > t0 + EVENT_REL * max(1.0, t0):
                break
            t1, l, esize = pair_pop(ek, ev, esize)
            if t1 > now:
                now = t1
    return nout
