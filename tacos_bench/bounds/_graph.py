"""Graph kernels the bound families share: link-time shortest paths (numba), a CSR view of a topology with
one weight per link, max flow (numba Dinic) on the topology plus a super source, and the NPU orbits under the
automorphisms that can be verified cheaply.

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> t = ring(4, bidirectional=False)
>>> g = _Graph(t, np.ones(t.num_links))
>>> _distance_row(g.out_ptr, g.dst, g.w, 1, g.uniform).tolist()
[3.0, 0.0, 1.0, 2.0]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..graph import bfs, dijkstra
from ..topology import Topology

_FLOW_EPS = 1e-13         # residual capacities (scaled to <= 1) below this count as zero


# ============================================================================ shortest paths (numba)
@njit(cache=True)
def _sssp(out_ptr, dst, w, source, uniform, dist, hops, pred, hk, hv):
    """Link-time distances from ``source`` into ``dist`` (BFS when all ``w`` are equal)."""
    if uniform:
        # hops * w keeps distances exact multiples of the link time (same products as the count bound).
        w0 = w[0] if w.shape[0] > 0 else 0.0
        bfs(out_ptr, dst, source, hops, hv)
        for i in range(dist.shape[0]):
            dist[i] = hops[i] * w0 if hops[i] >= 0 else np.inf
        return
    dijkstra(out_ptr, dst, w, source, dist, pred, hk, hv)


@njit(cache=True)
def _distance_rows(out_ptr, dst, w, in_ptr, in_src, sources, uniform, want_entry):
    """Per source: eccentricity, and optionally the entry-time row ``E[o, v] = min_{u in in(v)} d(o, u)``."""
    n = out_ptr.shape[0] - 1
    k = sources.shape[0]
    ecc = np.empty(k)
    E = np.empty((k if want_entry else 0, n))
    dist = np.empty(n)
    hops = np.empty(n, dtype=np.int64)
    pred = np.empty(n, dtype=np.int64)
    cap = max(dst.shape[0] + 1, n + 1)
    hk = np.empty(cap)
    hv = np.empty(cap, dtype=np.int64)
    for i in range(k):
        _sssp(out_ptr, dst, w, sources[i], uniform, dist, hops, pred, hk, hv)
        m = 0.0
        for v in range(n):
            if dist[v] > m:
                m = dist[v]
        ecc[i] = m
        if want_entry:
            for v in range(n):
                e = np.inf
                for j in range(in_ptr[v], in_ptr[v + 1]):
                    dv = dist[in_src[j]]
                    if dv < e:
                        e = dv
                E[i, v] = e
    return ecc, E


@njit(cache=True)
def _distance_row(out_ptr, dst, w, source, uniform):
    n = out_ptr.shape[0] - 1
    dist = np.empty(n)
    cap = max(dst.shape[0] + 1, n + 1)
    _sssp(out_ptr, dst, w, source, uniform, dist, np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
          np.empty(cap), np.empty(cap, dtype=np.int64))
    return dist


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: the arrays the kernels read have the same flags (a topology's own are read-only)
    whether they come from a topology, a fault's survivors or :meth:`_Graph.reversed`, so numba compiles
    each kernel once, not once per combination of flags."""
    v = a.view()
    v.flags.writeable = False
    return v


class _Graph:
    """CSR views of a topology with one weight per link (internal)."""

    def __init__(self, topo: Topology, w: np.ndarray):
        self.n = topo.num_npus
        self.src = np.asarray(topo.src, dtype=np.int64)
        self.dst = _readonly(np.asarray(topo.dst, dtype=np.int64))
        self.w = _readonly(np.ascontiguousarray(w, dtype=np.float64))
        self.out_ptr = _readonly(np.asarray(topo.out_ptr, dtype=np.int64))
        self.in_order = np.asarray(topo.in_order, dtype=np.int64)
        self.in_ptr = _readonly(np.asarray(topo.in_ptr, dtype=np.int64))
        self.in_src = _readonly(self.src[self.in_order])
        self.uniform = bool(self.w.size == 0 or np.ptp(self.w) == 0)

    def reversed(self) -> "_Graph":
        g = object.__new__(_Graph)
        g.n = self.n
        order = np.lexsort((self.src, self.dst))       # reversed link u->v becomes v->u, sorted by new src
        g.src, g.dst, g.w = self.dst[order], _readonly(self.src[order]), _readonly(self.w[order])
        g.out_ptr = _readonly(np.searchsorted(g.src, np.arange(g.n + 1)).astype(np.int64))
        g.in_order = np.lexsort((g.src, g.dst)).astype(np.int64)
        g.in_ptr = _readonly(np.searchsorted(g.dst[g.in_order], np.arange(g.n + 1)).astype(np.int64))
        g.in_src = _readonly(g.src[g.in_order])
        g.uniform = self.uniform
        return g


def _node_groups(g: _Graph):
    """Link times grouped by receiving NPU (``t`` in in-link order, CSR ``in_ptr``)."""
    return g.w[g.in_order], g.in_ptr


# ============================================================================ max-flow (numba Dinic)
@njit(cache=True)
def _dinic(n, adj_ptr, adj_e, to, cap, s, t, eps):
    """Max flow ``s -> t`` on a residual graph (edge ``e`` and ``e ^ 1`` are a pair); ``cap`` is updated.

    Returns the flow value and the mask of nodes reachable from ``s`` in the final residual graph
    (the source side of the minimum cut closest to ``s``).
    """
    level = np.empty(n, dtype=np.int64)
    it = np.empty(n, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    path = np.empty(n, dtype=np.int64)
    flow = 0.0
    while True:
        for i in range(n):
            level[i] = -1
        level[s] = 0
        queue[0] = s
        head = 0
        tail = 1
        while head < tail:
            u = queue[head]
            head += 1
            for j in range(adj_ptr[u], adj_ptr[u + 1]):
                e = adj_e[j]
                v = to[e]
                if level[v] < 0 and cap[e] > eps:
                    level[v] = level[u] + 1
                    queue[tail] = v
                    tail += 1
        if level[t] < 0:
            break
        for i in range(n):
            it[i] = adj_ptr[i]
        plen = 0
        u = s
        while True:
            if u == t:
                f = np.inf
                for i in range(plen):
                    if cap[path[i]] < f:
                        f = cap[path[i]]
                cut = plen
                for i in range(plen):
                    e = path[i]
                    cap[e] -= f
                    cap[e ^ 1] += f
                    if cut == plen and cap[e] <= eps:
                        cut = i
                flow += f
                # Resume from the tail of the first saturated edge: the path prefix is still usable.
                plen = cut
                u = s if cut == 0 else to[path[cut - 1]]
                continue
            advanced = False
            while it[u] < adj_ptr[u + 1]:
                e = adj_e[it[u]]
                v = to[e]
                if cap[e] > eps and level[v] == level[u] + 1:
                    path[plen] = e
                    plen += 1
                    u = v
                    advanced = True
                    break
                it[u] += 1
            if not advanced:
                if u == s:
                    break
                level[u] = -1          # dead end for the rest of this phase
                plen -= 1
                u = to[path[plen] ^ 1]
                it[u] += 1
    reach = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        reach[i] = level[i] >= 0
    return flow, reach


class _FlowNet:
    """Residual network of the topology plus a super source ``s = N`` with an edge to every NPU."""

    def __init__(self, topo: Topology, cap: np.ndarray):
        n, L = topo.num_npus, topo.num_links
        self.n, self.L = n, L
        self.src = np.asarray(topo.src, dtype=np.int64)
        self.dst = np.asarray(topo.dst, dtype=np.int64)
        self.scale = float(cap.max())       # capacities scaled to <= 1 so that one absolute eps fits all
        self.cap = np.asarray(cap, dtype=np.float64) / self.scale
        m = L + n
        tail = np.empty(2 * m, dtype=np.int64)
        self.to = np.empty(2 * m, dtype=np.int64)
        a = np.concatenate([self.src, np.full(n, n)])
        b = np.concatenate([self.dst, np.arange(n)])
        tail[0::2], self.to[0::2] = a, b
        tail[1::2], self.to[1::2] = b, a
        self.adj_e = np.argsort(tail, kind="stable").astype(np.int64)
        self.adj_ptr = np.searchsorted(tail[self.adj_e], np.arange(n + 2)).astype(np.int64)
        self.base = np.zeros(2 * m)
        self.base[0:2 * L:2] = self.cap
        self.flows = 0

    def max_flow(self, s: int, t: int, lam: float):
        """Flow from ``s`` to ``t`` with super-source edges of (scaled) capacity ``lam``."""
        cap = self.base.copy()
        cap[2 * self.L::2] = lam
        self.flows += 1
        return _dinic(self.n + 1, self.adj_ptr, self.adj_e, self.to, cap, s, t, _FLOW_EPS)

    def in_capacity(self, S: np.ndarray) -> float:
        """Scaled capacity of the links entering ``S`` (a boolean mask over NPUs)."""
        return float(self.cap[~S[self.src] & S[self.dst]].sum())


# ============================================================================ automorphism orbits
def _candidate_permutations(topo: Topology):
    """Cheap guesses of NPU permutations that may be automorphisms (each is verified before use)."""
    n = topo.num_npus
    ids = np.arange(n)
    yield (ids + 1) % n                                    # rings, fully connected
    if n & (n - 1) == 0:
        for k in range(n.bit_length() - 1):               # binary hypercubes
            yield ids ^ (1 << k)
    dims = topo.meta.get("dims") if isinstance(topo.meta, dict) else None
    if dims and all(isinstance(d, (int, np.integer)) and d >= 1 for d in dims) and int(np.prod(dims)) == n:
        dims = [int(d) for d in dims]
        coords = np.stack(np.unravel_index(ids, dims[::-1])[::-1], axis=1)   # x fastest
        strides = np.cumprod([1] + dims[:-1])
        for a, size in enumerate(dims):
            if size < 2:
                continue
            for newc in ((coords[:, a] + 1) % size, size - 1 - coords[:, a]):   # translation, reflection
                c = coords.copy()
                c[:, a] = newc
                yield c @ strides
        for a in range(len(dims)):
            for b in range(a + 1, len(dims)):
                if dims[a] == dims[b] and dims[a] > 1:
                    c = coords.copy()
                    c[:, [a, b]] = c[:, [b, a]]
                    yield c @ strides


def npu_orbits(topo: Topology, weight: np.ndarray) -> np.ndarray:
    """Orbit label (smallest member) of every NPU under the verified automorphisms found.

    Only permutations that map every link onto a link of equal ``weight`` are
    used, so NPUs in one orbit are interchangeable for any cut problem on
    ``weight``. Candidates are rotations, hypercube bit flips and grid
    translations/reflections/axis swaps (from ``topo.meta["dims"]``); a graph
    without any of these symmetries gets one orbit per NPU.

    Examples
    --------
    >>> from tacos_bench.topology.generators import torus2d, mesh2d
    >>> len(set(npu_orbits(torus2d(4, 4), np.ones(64)).tolist()))
    1
    >>> len(set(npu_orbits(mesh2d(4, 4), np.ones(48)).tolist()))
    3
    """
    n = topo.num_npus
    weight = np.asarray(weight, dtype=np.float64)
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for perm in _candidate_permutations(topo):
        perm = np.asarray(perm, dtype=np.int64)
        if np.array_equal(perm, np.arange(n)) or np.unique(perm).size != n:
            continue
        img = topo.link_ids(perm[topo.src], perm[topo.dst])
        if np.any(img < 0) or not np.array_equal(weight[img], weight):
            continue
        for a, b in zip(range(n), perm.tolist()):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(a) for a in range(n)], dtype=np.int64)


def switch_groups(topo: Topology) -> list[np.ndarray]:
    """Each switch with the NPUs joined to it both ways (node id sets: the switch first)."""
    n = topo.num_npus
    out = []
    for s in range(n, topo.num_nodes):
        down = set(topo.out_neighbors(s).tolist())
        up = set(topo.in_neighbors(s).tolist())
        members = sorted(v for v in down & up if v < n)
        if 0 < len(members) < n:
            out.append(np.array([s] + members))
    return out
