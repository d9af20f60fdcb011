"""Graph kernels (numba) shared by the bounds, the baselines and the greedy: heaps, BFS, Dijkstra.

Graphs are CSR arrays: the out-links of node ``u`` are ``out_ptr[u]:out_ptr[u+1]``,
link ``l`` goes to ``dst[l]`` with weight ``w[l]`` (a
:class:`~tacos_bench.topology.Topology`'s ``out_ptr``/``dst`` and per-link times).

Two binary min-heaps:

* a *pair heap* (``pair_push``/``pair_pop``): ``(key, value)`` pairs stored in
  the heap itself, ordered by key then value, duplicates allowed (Dijkstra's
  lazy deletion);
* an *index heap* (``index_push``/``index_remove``/``index_pop``/``sift_down``):
  items are integer ids ordered by ``(key[i], prio[i], i)`` read from outside
  arrays, with a position array so that an item can be removed or re-sifted
  when its key changes (event queues, list schedulers).

Both orders are total, so every result here is deterministic.

Examples
--------
>>> import numpy as np
>>> from tacos_bench.topology.generators import ring
>>> t = ring(5, bidirectional=False)
>>> dist, pred = shortest_path_tree(t.num_npus, t.out_ptr, np.asarray(t.dst, np.int64), np.ones(5), 0)
>>> dist.tolist()
[0.0, 1.0, 2.0, 3.0, 4.0]
>>> hop_distances(t.num_npus, t.out_ptr, np.asarray(t.dst, np.int64))[4].tolist()
[1, 2, 3, 4, 0]
"""

from __future__ import annotations

import numpy as np
from numba import njit


# ---------------------------------------------------------------------------------------------- pair heap
@njit(cache=True, inline="always")
def _pair_less(hk, hv, a, b):
    return hk[a] < hk[b] or (hk[a] == hk[b] and hv[a] < hv[b])


@njit(cache=True)
def pair_push(hk, hv, size, key, val):
    """Push ``(key, val)`` onto the heap ``hk[:size], hv[:size]``; returns the new size."""
    i = size
    hk[i] = key
    hv[i] = val
    while i > 0:
        p = (i - 1) >> 1
        if not _pair_less(hk, hv, i, p):
            break
        hk[i], hk[p] = hk[p], hk[i]
        hv[i], hv[p] = hv[p], hv[i]
        i = p
    return size + 1


@njit(cache=True)
def pair_pop(hk, hv, size):
    """Pop the smallest pair; returns ``(key, val, new size)``."""
    key = hk[0]
    val = hv[0]
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _pair_less(hk, hv, c + 1, c):
            c += 1
        if not _pair_less(hk, hv, c, i):
            break
        hk[i], hk[c] = hk[c], hk[i]
        hv[i], hv[c] = hv[c], hv[i]
        i = c
    return key, val, size


# --------------------------------------------------------------------------------------------- index heap
@njit(cache=True, inline="always")
def _index_less(key, prio, a, b):
    ka, kb = key[a], key[b]
    if ka != kb:
        return ka < kb
    if prio[a] != prio[b]:
        return prio[a] < prio[b]
    return a < b


@njit(cache=True, _nrt=False)
def sift_up(heap, pos, key, prio, i):
    x = heap[i]
    while i > 0:
        p = (i - 1) >> 1
        y = heap[p]
        if _index_less(key, prio, x, y):
            heap[i] = y
            pos[y] = i
            i = p
        else:
            break
    heap[i] = x
    pos[x] = i


@njit(cache=True, _nrt=False)
def sift_down(heap, pos, key, prio, i, n):
    x = heap[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _index_less(key, prio, heap[c + 1], heap[c]):
            c += 1
        y = heap[c]
        if _index_less(key, prio, y, x):
            heap[i] = y
            pos[y] = i
            i = c
        else:
            break
    heap[i] = x
    pos[x] = i


@njit(cache=True, _nrt=False)
def index_push(heap, pos, hsize, key, prio, item):
    """Insert ``item`` (``hsize[0]`` is the heap's size, updated in place)."""
    n = hsize[0]
    heap[n] = item
    pos[item] = n
    hsize[0] = n + 1
    sift_up(heap, pos, key, prio, n)


@njit(cache=True, _nrt=False)
def index_remove(heap, pos, hsize, key, prio, item):
    """Remove ``item`` wherever it is (its ``pos`` becomes -1)."""
    i = pos[item]
    n = hsize[0] - 1
    hsize[0] = n
    pos[item] = -1
    if i == n:
        return
    last = heap[n]
    heap[i] = last
    pos[last] = i
    sift_down(heap, pos, key, prio, i, n)
    sift_up(heap, pos, key, prio, pos[last])


@njit(cache=True, _nrt=False)
def index_pop(heap, pos, hsize, key, prio):
    """Remove and return the smallest item."""
    top = heap[0]
    index_remove(heap, pos, hsize, key, prio, top)
    return top


# ------------------------------------------------------------------------------------------ searches
@njit(cache=True)
def bfs(out_ptr, dst, source, hops, queue):
    """Hop counts from ``source`` into ``hops`` (-1: unreachable); ``queue`` is scratch of length N.
    Returns the number of nodes reached (they are ``queue[:count]``, in BFS order)."""
    for i in range(hops.shape[0]):
        hops[i] = -1
    hops[source] = 0
    queue[0] = source
    head, tail = 0, 1
    while head < tail:
        u = queue[head]
        head += 1
        du = hops[u] + 1
        for lk in range(out_ptr[u], out_ptr[u + 1]):
            v = dst[lk]
            if hops[v] < 0:
                hops[v] = du
                queue[tail] = v
                tail += 1
    return tail


@njit(cache=True)
def hop_distances(num_npus, out_ptr, dst):
    """All-pairs hop distances by one BFS per source (``int32[N, N]``, -1 = unreachable)."""
    n = num_npus
    out = np.empty((n, n), dtype=np.int32)
    hops = np.empty(n, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    for s in range(n):
        bfs(out_ptr, dst, s, hops, queue)
        for v in range(n):
            out[s, v] = hops[v]
    return out


@njit(cache=True)
def dijkstra(out_ptr, dst, w, source, dist, pred, hk, hv):
    """Shortest paths from ``source``: distances into ``dist`` (inf: unreachable), the link into each node
    on its shortest-path tree into ``pred`` (-1 for the source and unreachable nodes).

    Deterministic: nodes settle in (distance, id) order and a node keeps the first predecessor that
    reached its final distance. ``hk``/``hv`` are heap scratch of length ``len(dst) + 1``.
    """
    n = dist.shape[0]
    for i in range(n):
        dist[i] = np.inf
        pred[i] = -1
    done = np.zeros(n, np.bool_)
    dist[source] = 0.0
    size = pair_push(hk, hv, 0, 0.0, source)
    while size > 0:
        d, u, size = pair_pop(hk, hv, size)
        if done[u]:
            continue
        done[u] = True
        for lk in range(out_ptr[u], out_ptr[u + 1]):
            v = dst[lk]
            nd = d + w[lk]
            if nd < dist[v]:
                dist[v] = nd
                pred[v] = lk
                size = pair_push(hk, hv, size, nd, v)


@njit(cache=True)
def shortest_path_tree(num_npus, out_ptr, dst, w, source):
    """:func:`dijkstra` with its own arrays: returns ``(dist, pred)``."""
    dist = np.empty(num_npus)
    pred = np.empty(num_npus, np.int64)
    cap = dst.shape[0] + 1
    dijkstra(out_ptr, dst, w, source, dist, pred, np.empty(cap), np.empty(cap, np.int64))
    return dist, pred


@njit(cache=True)
def dijkstra_within(out_ptr, dst, w, source, radius, dist, hk, hv, reached):
    """Shortest paths from ``source`` up to ``radius`` (inclusive): fills ``dist`` for the nodes it settles
    and lists them in ``reached``; returns how many. ``dist`` must be ``inf`` everywhere on entry; the caller
    resets the listed entries afterwards. Cost: the ball, not the graph."""
    n_reached = 0
    dist[source] = 0.0
    size = pair_push(hk, hv, 0, 0.0, source)
    while size > 0:
        d, u, size = pair_pop(hk, hv, size)
        if d > dist[u] or d > radius:
            continue
        reached[n_reached] = u
        n_reached += 1
        dist[u] = -d - 1.0  # settled: negative marks it, |value| - 1 is the distance
        for lk in range(out_ptr[u], out_ptr[u + 1]):
            v = dst[lk]
            nd = d + w[lk]
            if nd <= radius and (dist[v] >= 0.0 and nd < dist[v]):
                dist[v] = nd
                size = pair_push(hk, hv, size, nd, v)
    for i in range(n_reached):
        dist[reached[i]] = -dist[reached[i]] - 1.0
    return n_reached


@njit(cache=True)
def strong_components(n, out_ptr, dst, keep):
    """Strongly connected components of the graph restricted to the links with ``keep[l]``: a label per
    node, components numbered in the order of their smallest node (iterative Tarjan, no recursion)."""
    index = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    on_stack = np.zeros(n, np.bool_)
    stack = np.empty(n, np.int64)
    call_v = np.empty(n, np.int64)
    call_e = np.empty(n, np.int64)
    comp = np.full(n, -1, np.int64)
    sp = 0
    counter = 0
    ncomp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        depth = 0
        call_v[0] = root
        call_e[0] = out_ptr[root]
        index[root] = counter
        low[root] = counter
        counter += 1
        stack[sp] = root
        sp += 1
        on_stack[root] = True
        while depth >= 0:
            u = call_v[depth]
            e = call_e[depth]
            if e < out_ptr[u + 1]:
                call_e[depth] = e + 1
                if not keep[e]:
                    continue
                v = dst[e]
                if index[v] < 0:
                    index[v] = counter
                    low[v] = counter
                    counter += 1
                    stack[sp] = v
                    sp += 1
                    on_stack[v] = True
                    depth += 1
                    call_v[depth] = v
                    call_e[depth] = out_ptr[v]
                elif on_stack[v] and index[v] < low[u]:
                    low[u] = index[v]
                continue
            if low[u] == index[u]:
                while True:
                    sp -= 1
                    x = stack[sp]
                    on_stack[x] = False
                    comp[x] = ncomp
                    if x == u:
                        break
                ncomp += 1
            depth -= 1
            if depth >= 0:
                p = call_v[depth]
                if low[u] < low[p]:
                    low[p] = low[u]
    # renumber by smallest member, so labels do not depend on the traversal
    first = np.full(ncomp, n, np.int64)
    for v in range(n):
        if v < first[comp[v]]:
            first[comp[v]] = v
    order = np.argsort(first)
    rank = np.empty(ncomp, np.int64)
    for i in range(ncomp):
        rank[order[i]] = i
    for v in range(n):
        comp[v] = rank[comp[v]]
    return comp


def undirected_components(num_nodes: int, src, dst) -> np.ndarray:
    """Component labels (0, 1, ... in order of each component's smallest node) of the graph on ``num_nodes``
    nodes with the edges ``src[i] - dst[i]`` taken both ways (union-find).

    >>> undirected_components(5, [0, 3], [1, 4]).tolist()
    [0, 0, 1, 2, 2]
    """
    parent = np.arange(int(num_nodes))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in zip(np.asarray(src, np.int64).tolist(), np.asarray(dst, np.int64).tolist()):
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    roots = np.array([find(x) for x in range(int(num_nodes))], dtype=np.int64)
    return np.unique(roots, return_inverse=True)[1].astype(np.int64).reshape(-1)


def fastest_link_groups(topology, rel: float = 1e-9) -> np.ndarray:
    """Per NPU, its group over the topology's fastest NPU-to-NPU links (within ``rel`` of the top bandwidth;
    both directions count): the servers of a cluster whose NVLink is its fastest tier. One link speed makes
    one group of every NPU."""
    n = topology.num_npus
    bw = np.asarray(topology.bw_GiBps, np.float64)
    src, dst = np.asarray(topology.src), np.asarray(topology.dst)
    if not bw.size:
        return np.arange(n, dtype=np.int64)
    fast = (bw >= bw.max() * (1 - rel)) & (src < n) & (dst < n)
    return undirected_components(n, src[fast], dst[fast])
