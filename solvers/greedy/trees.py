"""``greedy_plus``'s tree candidate for All-Gather: spanning trees packed by link load, then a greedy that
sends each chunk along its tree first.

The greedy matches every idle link with a chunk its receiver lacks; on links of unequal multiplicity it
keeps the links busy but routes more data over the most loaded ones than a fluid optimum would (the AMD
MI250 node of ForestColl, 64 chunks per NPU: its busiest links carry 3208.6 µs of data, the cut bound is
3145.7 µs). Tree packing (ForestColl, Blink) fixes the load instead: each NPU's chunks go down a few
out-arborescences chosen so that no link carries much more than its share. Here

1. *packing* (:func:`pack_trees`): ``trees_per_source`` rounds; in each, every NPU in turn takes the
   minimum-cost spanning out-arborescence (Chu-Liu/Edmonds, :func:`_min_arborescence`) under the cost
   ``load + chunks x link time`` and adds its chunks' time to the load; chunk ``k`` of an NPU takes tree
   ``k mod trees_per_source`` (a multiplicative-weights packing with linear weights); ``TREE_VARIANTS``
   packings, the plain one and seeded jitters of the costs, the fastest schedule kept;
2. *scheduling* (:func:`_tree_guided`): events in time; an idle link sends the queued chunk of the highest
   remaining height in its tree (then the lowest chunk index), a chunk joining the queue of the links of
   its tree when their sender receives it; a link with nothing queued sends the chunk its receiver lacks
   that the fewest NPUs hold (TACOS's rarest rule), so links never idle while the greedy would send, and a
   copy that arrives another way leaves its tree queue.

Measured (docs/peer_topologies.md): MI250, 1 GiB, 64 chunks per NPU: 1.011x ForestColl's throughput
optimum (greedy_plus without it 1.026x), 16 chunks 1.025x (1.051x); over 10 random relabellings too:
1.011-1.018x at 64 chunks (1.020-1.026x without).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos_bench.graph import pair_pop, pair_push
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

from .options import TREE_MAX_PAIRS

# the candidate runs up to TREE_MAX_PAIRS (NPU, chunk) pairs by default (its fallback scans every chunk at an
# idle link; the option tree_max_pairs)
TREES_PER_SOURCE = 16
# packings tried: the plain one, then costs jittered by up to TREE_JITTER (seeded): which of several equally
# cheap arborescences Edmonds keeps decides a lot (MI250, 64 chunks per NPU, 11 labellings: 1.011-1.038x
# ForestColl with the plain packing alone, 1.011-1.018x with the best of 4)
TREE_VARIANTS = 4
TREE_JITTER = 1e-2


@njit(cache=True)
def _min_arborescence(n, root, eu, ev, w):
    """Chu-Liu/Edmonds: the link into each node of a minimum-weight spanning arborescence out of ``root``
    (links ``eu[l] -> ev[l]`` of weight ``w[l]``), -1 at the root; ``out[0] == -2`` when some node is
    unreachable. Each round picks every node's cheapest in-link, contracts the cycles they form and
    re-weights the links entering a cycle; the rounds are then unfolded: a contracted node keeps the link
    chosen into it one round up where that link enters it, and its own cheapest in-link otherwise."""
    M = eu.shape[0]
    U = eu.copy()
    V = ev.copy()
    W = w.copy()
    lev_id = np.full((n + 1, n), -1, np.int64)
    lev_pre = np.full((n + 1, n), -1, np.int64)
    lev_head = np.empty((n + 1, M), np.int64)
    lev_n = np.zeros(n + 1, np.int64)
    cur, r, L = n, root, 0
    while True:
        in_w = np.full(cur, np.inf)
        pre = np.full(cur, -1, np.int64)
        for e in range(M):
            if U[e] != V[e] and W[e] < in_w[V[e]]:
                in_w[V[e]] = W[e]
                pre[V[e]] = e
        for v in range(cur):
            if v != r and pre[v] < 0:
                out = np.full(n, -1, np.int64)
                out[0] = -2
                return out
        pre[r] = -1
        in_w[r] = 0.0
        lev_pre[L, :cur] = pre
        lev_head[L] = V
        lev_n[L] = cur
        ids = np.full(cur, -1, np.int64)
        vis = np.full(cur, -1, np.int64)
        cnt = 0
        for v in range(cur):
            x = v
            while vis[x] != v and ids[x] == -1 and x != r:
                vis[x] = v
                x = U[pre[x]]
            if x != r and ids[x] == -1:     # x is on a cycle first found from v
                y = U[pre[x]]
                while y != x:
                    ids[y] = cnt
                    y = U[pre[y]]
                ids[x] = cnt
                cnt += 1
        if cnt == 0:
            break
        for v in range(cur):
            if ids[v] == -1:
                ids[v] = cnt
                cnt += 1
        lev_id[L, :cur] = ids
        for e in range(M):
            v0 = V[e]
            U[e] = ids[U[e]]
            V[e] = ids[V[e]]
            if U[e] != V[e]:
                W[e] -= in_w[v0]
        cur = cnt
        r = ids[r]
        L += 1
    sel = lev_pre[L, :lev_n[L]].copy()
    for lv in range(L - 1, -1, -1):
        nl = lev_n[lv]
        new = np.full(nl, -1, np.int64)
        for x in range(nl):
            e = sel[lev_id[lv, x]]
            if e < 0:
                continue
            new[x] = e if lev_head[lv, e] == x else lev_pre[lv, x]
        sel = new
    return sel


@njit(cache=True)
def pack_trees(N, lsrc, ldst, lt, K, T, jitter):
    """``tree[k * N + s, v]``: the link into ``v`` of chunk ``k`` of NPU ``s`` (its tree ``k mod T``), -1 at
    ``s``; (-2 in row 0 when the topology is not strongly connected). Link ``l``'s cost is scaled by
    ``1 + jitter[l]`` (zeros: the plain packing)."""
    M = lsrc.shape[0]
    C = N * K
    load = np.zeros(M)
    tree = np.full((C, N), -1, np.int64)
    w = np.empty(M)
    for j in range(min(T, K)):
        for s in range(N):
            nch = (K - j + T - 1) // T
            for e in range(M):
                w[e] = (load[e] + nch * lt[e]) * (1.0 + jitter[e]) if ldst[e] != s else np.inf
            par = _min_arborescence(N, s, lsrc, ldst, w)
            if par[0] == -2:
                tree[0, 0] = -2
                return tree
            for v in range(N):
                if v != s:
                    load[par[v]] += nch * lt[par[v]]
            for k in range(j, K, T):
                tree[k * N + s] = par
    return tree


@njit(cache=True)
def _heights(tree, owner, lsrc, lt):
    """``h[c, v]``: the longest link time below ``v`` in chunk ``c``'s tree."""
    C, N = tree.shape
    h = np.zeros((C, N))
    for c in range(C):
        for v in range(N):
            acc = 0.0
            x = v
            while x != owner[c]:
                e = tree[c, x]
                acc += lt[e]
                x = lsrc[e]
                if acc > h[c, x]:
                    h[c, x] = acc
    return h


@njit(cache=True)
def _q_less(ka, kb, ca, cb, N):
    # higher remaining height first, then the lower chunk index k = c // N, then the chunk id
    if ka != kb:
        return ka > kb
    if ca // N != cb // N:
        return ca // N < cb // N
    return ca < cb


@njit(cache=True)
def _q_push(qk, qc, base, size, key, c, N):
    i = size
    qk[base + i] = key
    qc[base + i] = c
    while i > 0:
        p = (i - 1) >> 1
        if not _q_less(qk[base + i], qk[base + p], qc[base + i], qc[base + p], N):
            break
        qk[base + i], qk[base + p] = qk[base + p], qk[base + i]
        qc[base + i], qc[base + p] = qc[base + p], qc[base + i]
        i = p
    return size + 1


@njit(cache=True)
def _q_pop(qk, qc, base, size, N):
    c = qc[base]
    size -= 1
    qk[base] = qk[base + size]
    qc[base] = qc[base + size]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= size:
            break
        if a + 1 < size and _q_less(qk[base + a + 1], qk[base + a], qc[base + a + 1], qc[base + a], N):
            a += 1
        if not _q_less(qk[base + a], qk[base + i], qc[base + a], qc[base + i], N):
            break
        qk[base + a], qk[base + i] = qk[base + i], qk[base + a]
        qc[base + a], qc[base + i] = qc[base + i], qc[base + a]
        i = a
    return c, size


@njit(cache=True)
def _tree_guided(N, out_ptr, lsrc, ldst, lt, tree, owner, out_chunk, out_link, out_start, out_end):
    """The event loop of the module docstring (links sorted by sender, ``out_ptr`` their CSR pointer);
    returns the number of transfers (-1: stuck)."""
    C = tree.shape[0]
    M = lsrc.shape[0]
    h = _heights(tree, owner, lsrc, lt)
    # per link, a heap of its tree chunks (capacity: the chunks whose tree uses it)
    qptr = np.zeros(M + 1, np.int64)
    for c in range(C):
        for v in range(N):
            if tree[c, v] >= 0:
                qptr[tree[c, v] + 1] += 1
    for e in range(M):
        qptr[e + 1] += qptr[e]
    qk = np.empty(qptr[M])
    qc = np.empty(qptr[M], np.int64)
    qs = np.zeros(M, np.int64)
    have = np.zeros((C, N), np.bool_)
    coming = np.zeros((C, N), np.bool_)
    nheld = np.zeros(C, np.int64)
    free = np.zeros(M)
    # the last fallback scan found nothing, and nothing the receiver lacks arrived at the sender since
    stale = np.zeros(M, np.bool_)
    # the fallback's candidates for a link u -> v: what u holds (held[u]) and what v neither holds nor is
    # being sent (need[v], swap-removed when a send to v starts); the scan walks the shorter list
    held = np.empty((N, C), np.int64)
    nheld_at = np.zeros(N, np.int64)
    need = np.empty((N, C), np.int64)
    need_pos = np.empty((C, N), np.int64)
    nneed = np.zeros(N, np.int64)
    for c in range(C):
        for v in range(N):
            if v != owner[c]:
                need[v, nneed[v]] = c
                need_pos[c, v] = nneed[v]
                nneed[v] += 1
    hk = np.empty(C * N + 1)
    hv = np.empty(C * N + 1, np.int64)
    hsize = 0
    remaining = C * (N - 1)
    for c in range(C):
        hsize = pair_push(hk, hv, hsize, 0.0, c * N + owner[c])
    n_out = 0
    now = 0.0
    while True:
        while hsize > 0 and hk[0] <= now:
            _, cv, hsize = pair_pop(hk, hv, hsize)
            c = cv // N
            v = cv % N
            have[c, v] = True
            nheld[c] += 1
            held[v, nheld_at[v]] = c
            nheld_at[v] += 1
            if v != owner[c]:
                remaining -= 1
            for w in range(N):
                e = tree[c, w]
                if e >= 0 and lsrc[e] == v:
                    qs[e] = _q_push(qk, qc, qptr[e], qs[e], h[c, w], c, N)
            # a stale out-link of v scans again only if v now holds a chunk its receiver lacks and is not
            # being sent (the only way its fallback candidates grow)
            for e in range(out_ptr[v], out_ptr[v + 1]):
                if not have[c, ldst[e]] and not coming[c, ldst[e]]:
                    stale[e] = False
        if remaining == 0:
            break
        for e in range(M):
            if free[e] > now:
                continue
            u = lsrc[e]
            v = ldst[e]
            pick = -1
            while qs[e] > 0:
                c, qs[e] = _q_pop(qk, qc, qptr[e], qs[e], N)
                if not have[c, v] and not coming[c, v]:
                    pick = c
                    break
            if pick < 0 and not stale[e]:
                # the rarest chunk u holds and v needs (ties: the lowest id)
                best = C * N
                if nheld_at[u] <= nneed[v]:
                    for i in range(nheld_at[u]):
                        c = held[u, i]
                        if not have[c, v] and not coming[c, v] and nheld[c] * C + c < best:
                            best = nheld[c] * C + c
                            pick = c
                else:
                    for i in range(nneed[v]):
                        c = need[v, i]
                        if have[c, u] and nheld[c] * C + c < best:
                            best = nheld[c] * C + c
                            pick = c
                if pick < 0:
                    stale[e] = True
            if pick >= 0:
                end = now + lt[e]
                free[e] = end
                coming[pick, v] = True
                i = need_pos[pick, v]
                nneed[v] -= 1
                last = need[v, nneed[v]]
                need[v, i] = last
                need_pos[last, v] = i
                out_chunk[n_out] = pick
                out_link[n_out] = e
                out_start[n_out] = now
                out_end[n_out] = end
                n_out += 1
                hsize = pair_push(hk, hv, hsize, end, pick * N + v)
        nxt = hk[0] if hsize > 0 else np.inf
        for e in range(M):
            if free[e] > now and free[e] < nxt:
                nxt = free[e]
        if nxt == np.inf:
            return -1
        now = nxt
    return n_out


def tree_all_gather(problem: Problem, trees_per_source: int = TREES_PER_SOURCE, variants: int = TREE_VARIANTS,
                    seed: int = 0, max_pairs: int = TREE_MAX_PAIRS) -> Schedule | None:
    """The tree candidate's All-Gather schedule (module docstring): the fastest of ``variants`` packings (the
    plain one, then link costs jittered by up to ``TREE_JITTER``, from ``seed``); ``None`` beyond
    ``max_pairs`` NPUs x chunks or when the collective is not an All-Gather of ``chunks_per_npu`` chunks on each NPU.

    >>> from tacos_bench import Collective
    >>> from tacos_bench.topology.generators import ring
    >>> from tacos_bench.verify import verify
    >>> p = Problem(ring(4), Collective("all_gather", 2, 8))
    >>> s = tree_all_gather(p)
    >>> verify(p, s).valid, len(s) == p.num_chunks * (p.num_npus - 1)
    (True, True)
    """
    N, C = problem.num_npus, problem.num_chunks
    if problem.kind != "all_gather" or N < 2 or N * C > max_pairs or C % N:
        return None
    owner = np.asarray(problem.sources, np.int64)
    if not np.array_equal(owner, np.arange(C) % N):
        return None
    topo = problem.topology
    lsrc = np.ascontiguousarray(topo.src, np.int64)
    ldst = np.ascontiguousarray(topo.dst, np.int64)
    lt = np.ascontiguousarray(problem.link_time_us, np.float64)
    out_ptr = np.ascontiguousarray(topo.out_ptr, np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7EE5]))
    n = C * (N - 1)
    best: Schedule | None = None
    for v in range(max(1, int(variants))):
        jitter = np.zeros(lsrc.size) if v == 0 else rng.random(lsrc.size) * TREE_JITTER
        tree = pack_trees(N, lsrc, ldst, lt, C // N, int(trees_per_source), jitter)
        if tree[0, 0] == -2:
            return None
        out = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n), np.empty(n))
        if _tree_guided(N, out_ptr, lsrc, ldst, lt, tree, owner, *out) != n:
            continue
        if best is None or out[3].max() < best.makespan_us * (1 - 1e-12):
            chunk, link, st, end = out
            best = Schedule(chunk, lsrc[link], ldst[link], st, end, np.full(n, COPY, np.int8))
    return best


def warmup() -> None:
    """Load (or compile) the kernels on a tiny instance, outside any timed region."""
    from tacos_bench import Collective
    from tacos_bench.topology.generators import ring

    tree_all_gather(Problem(ring(3), Collective("all_gather", 1, 1)))
