"""Lower bounds on the collective time (µs) of a :class:`~tacos_bench.problem.Problem`.

Every number returned here is a *proven* lower bound on the makespan of any
schedule the verifier accepts (store-and-forward, one chunk at a time per link,
a transfer of a chunk over link ``l`` lasts at least ``t_l = problem.link_time_us[l]``,
a node forwards only what it holds). They hold for any topology: heterogeneous,
asymmetric, irregular. The derivations are in ``docs/bounds.md``; in short:

``ingress``
    A node must receive every chunk it lacks; in-link ``l`` completes at most
    ``floor(T / t_l)`` deliveries by time ``T``. Refined (when all-pairs
    distances are affordable) by the earliest time a chunk can *start* on a
    node's in-links: chunks that cannot start before ``tau`` must fit in
    ``[tau, T]``. For All-Reduce the count is ``N*cpn`` per node (every chunk,
    both directions), plus a global bound from one-way gossip (every chunk needs
    ``2(N-1)`` transfers).
``distance``
    A chunk cannot reach a node sooner than the shortest link-time path from
    its owner: the weighted diameter.
``cut``
    ForestColl's cut bound: every chunk owned outside ``S`` must enter ``S``.
    Maximised over all cuts with a parametric max-flow (Dinkelbach sweep over
    pinned sinks), not enumeration.

Reduce-Scatter uses the All-Gather bounds of the reversed topology; All-Reduce
uses bounds valid for All-Reduce directly (never the RS+AG sum of optima, which
is not a valid bound in general).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import torus2d
>>> b = lower_bounds(Problem(torus2d(4, 4), Collective("all_gather", 1, 1024)))
>>> b["ingress_basic_steps"], b["ingress_steps"], b["best_us"]
(4, 4, 5002.0)
"""

from __future__ import annotations


import numpy as np
from numba import njit

from .bounds_fabric import fabric_lower_bounds
from .collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from .count_bound import count_time_us
from .cost import BYTES_PER_GIB
from .errors import ConfigError
from .graph import bfs, dijkstra
from .problem import Problem
from .topology import Topology
from .topology.tiers import faster_link_components

__all__ = ["lower_bounds", "lower_bound_us", "count_time_us", "max_ratio_cut", "min_in_cut", "npu_orbits"]

# Defaults of the size limits above which a component switches to a cheaper valid bound.
DISTANCE_EXACT_MAX_NPUS = 5000
DISTANCE_EXACT_MAX_WORK = 4e8        # N * (N + L) edge relaxations for all-pairs
HOP_SLOT_MAX_WORK = 2e8              # candidate slot values of the first/last-hop pipeline bounds, all sources
REFINE_MAX_NPUS = 2048               # the refinement keeps an N x N matrix of entry times
CUT_MAX_NPUS = 1024
DISTANCE_SAMPLES = 32
CUT_SAMPLE_PINS = 0                  # above CUT_MAX_NPUS: singleton cuts only (a flow costs ~diameter * L)

_REL_TOL = 1e-12          # relative tolerance of the parametric cut sweep (termination only)
_FLOW_EPS = 1e-13         # residual capacities (scaled to <= 1) below this count as zero


# the whole-chunk count bound lives in .count_bound (the fabric bounds share it)


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


class _Graph:
    """CSR views of a topology with one weight per link (internal)."""

    def __init__(self, topo: Topology, w: np.ndarray):
        self.n = topo.num_npus
        self.src = np.asarray(topo.src, dtype=np.int64)
        self.dst = np.asarray(topo.dst, dtype=np.int64)
        self.w = np.ascontiguousarray(w, dtype=np.float64)
        self.out_ptr = np.asarray(topo.out_ptr, dtype=np.int64)
        self.in_order = np.asarray(topo.in_order, dtype=np.int64)
        self.in_ptr = np.asarray(topo.in_ptr, dtype=np.int64)
        self.in_src = self.src[self.in_order]
        self.uniform = bool(self.w.size == 0 or np.ptp(self.w) == 0)

    def reversed(self) -> "_Graph":
        g = object.__new__(_Graph)
        g.n = self.n
        order = np.lexsort((self.src, self.dst))       # reversed link u->v becomes v->u, sorted by new src
        g.src, g.dst, g.w = self.dst[order], self.src[order], self.w[order]
        g.out_ptr = np.searchsorted(g.src, np.arange(g.n + 1)).astype(np.int64)
        g.in_order = np.lexsort((g.src, g.dst)).astype(np.int64)
        g.in_ptr = np.searchsorted(g.dst[g.in_order], np.arange(g.n + 1)).astype(np.int64)
        g.in_src = g.src[g.in_order]
        g.uniform = self.uniform
        return g


def _sampled_diameter(g: _Graph, samples: int) -> float:
    """max d(o, v) over the pairs met by ``samples`` single-source runs (a valid lower bound on the diameter).

    Runs alternate forward from a node and backward (on the reversed links)
    from the farthest node found, a double sweep that finds the diameter of
    many graphs quickly; when a sweep repeats itself the next source is taken
    from an evenly spaced, deterministic list of NPUs.
    """
    rg = g.reversed()
    spare = iter(np.unique(np.linspace(0, g.n - 1, max(2, samples)).round().astype(np.int64)).tolist())
    best = 0.0
    node, forward = 0, True
    seen = set()
    for _ in range(max(1, samples)):
        while (node, forward) in seen:
            node = next(spare, None)
            if node is None:
                return best
        seen.add((node, forward))
        gg = g if forward else rg
        d = _distance_row(gg.out_ptr, gg.dst, gg.w, node, gg.uniform)
        far = int(np.argmax(d))   # first farthest id: deterministic
        best = max(best, float(d[far]))
        node, forward = far, not forward
    return best


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


def _pins(n: int, max_pins: int | None) -> np.ndarray:
    if max_pins is None or max_pins >= n:
        return np.arange(n)
    if max_pins <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, max_pins).round().astype(np.int64))


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


def max_ratio_cut(topo: Topology, cap: np.ndarray, max_pins: int | None = None) -> dict:
    """``min over cuts S`` of ``cap(into S) / |V \\ S|`` by a parametric max-flow sweep.

    ``S`` ranges over non-empty proper subsets of the NPUs. For a guess
    ``lam`` some ``S`` containing a pinned NPU ``x`` has
    ``cap(into S) < lam * |V \\ S|`` iff the max flow from a super source (edge
    of capacity ``lam`` to every NPU) to ``x`` is below ``lam * N``; the min cut
    then yields that ``S`` and ``lam`` drops to its ratio (Dinkelbach). A pin
    certified at some ``lam`` stays certified for smaller ones, so one pass
    over the pins (plus one flow per improvement) gives the exact optimum.

    Parameters
    ----------
    topo : Topology
    cap : ndarray
        Capacity per link (link-id order), > 0.
    max_pins : int or None
        Pin only this many evenly spaced NPUs (0: only the singleton cuts
        ``{v}`` and ``V - {v}``). The result is then still the ratio of a real
        cut, hence a valid bound, but maybe not the minimum.

    Returns
    -------
    dict
        ``ratio`` (the minimum found), ``S`` (boolean mask), ``exact``
        (every NPU pinned), ``flows`` (max-flow calls).

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> r = max_ratio_cut(ring(4, bidirectional=False), np.ones(4))
    >>> r["ratio"], int(r["S"].sum())
    (0.3333333333333333, 1)
    """
    n = topo.num_npus
    cap = np.asarray(cap, dtype=np.float64)
    net = _FlowNet(topo, cap)
    src, dst = net.src, net.dst
    c = net.cap
    cin = np.bincount(dst, weights=c, minlength=n)
    cout = np.bincount(src, weights=c, minlength=n)
    # Start from the best singleton cut: S = {v} (ratio cin/(N-1)) or S = V - {v} (ratio cout/1).
    r_in = cin / (n - 1)
    v_in, v_out = int(np.argmin(r_in)), int(np.argmin(cout))
    S = np.zeros(n, dtype=bool)
    if r_in[v_in] <= cout[v_out]:
        lam = float(r_in[v_in])
        S[v_in] = True
    else:
        lam = float(cout[v_out])
        S[:] = True
        S[v_out] = False
    if max_pins is None:
        # min over S containing x is the same for every x of an automorphism orbit: pin one per orbit.
        pins = np.unique(npu_orbits(topo, cap))
        exact = True
    else:
        pins = _pins(n, max_pins)
        exact = pins.size == n
    for x in pins.tolist():
        while True:
            _, reach = net.max_flow(n, x, lam)
            cand = ~reach[:n]
            n_out = n - int(cand.sum())
            if n_out == 0:
                break
            ratio = net.in_capacity(cand) / n_out
            if ratio < lam * (1 - _REL_TOL):
                lam, S = ratio, cand
                continue
            break
    return {"ratio": lam * net.scale, "S": S, "exact": bool(exact), "flows": net.flows}


def min_in_cut(topo: Topology, cap: np.ndarray, max_pins: int | None = None) -> dict:
    """``min over cuts S`` of ``cap(into S)`` (directed global min cut) with ``2(N-1)`` max flows.

    With NPU 0 fixed, every cut separates 0 from some ``x``: flows ``0 -> x``
    and ``x -> 0`` for every ``x`` cover all of them.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> min_in_cut(ring(5), np.ones(10))["value"]
    2.0
    """
    n = topo.num_npus
    net = _FlowNet(topo, np.asarray(cap, dtype=np.float64))
    c = net.cap
    cin = np.bincount(net.dst, weights=c, minlength=n)
    cout = np.bincount(net.src, weights=c, minlength=n)
    S = np.zeros(n, dtype=bool)
    v_in, v_out = int(np.argmin(cin)), int(np.argmin(cout))
    if cin[v_in] <= cout[v_out]:
        best = float(cin[v_in])
        S[v_in] = True
    else:
        best = float(cout[v_out])
        S[:] = True
        S[v_out] = False
    pins = _pins(n, max_pins)
    for x in pins.tolist():
        if x == 0:
            continue
        for s, t in ((0, x), (x, 0)):
            value, reach = net.max_flow(s, t, 0.0)
            if value < best * (1 - _REL_TOL):
                cand = ~reach[:n]
                v = net.in_capacity(cand)
                if v < best:
                    best, S = v, cand
    return {"value": best * net.scale, "S": S, "exact": bool(np.isin(np.arange(1, n), pins).all()),
            "flows": net.flows}


# ============================================================================ the bounds
def _chunk_rate_caps(t: np.ndarray) -> np.ndarray:
    """Chunks per µs a link can complete in the limit: 1 / t_l (latency included)."""
    return 1.0 / t


def _proportional(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a = k * b`` elementwise for one constant ``k`` (e.g. homogeneous links)."""
    r = a / b
    return bool(r.size == 0 or np.ptp(r) <= 1e-12 * abs(r[0]))


def _bytes_per_us(bw_GiBps: np.ndarray) -> np.ndarray:
    return np.asarray(bw_GiBps, dtype=np.float64) * BYTES_PER_GIB / 1e6


class _Opts:
    def __init__(self, distance_exact_max_npus, refine_max_npus, cut_max_npus, distance_samples, cut_sample_pins,
                 drain=True):
        for name, v in (("distance_exact_max_npus", distance_exact_max_npus), ("refine_max_npus", refine_max_npus),
                        ("cut_max_npus", cut_max_npus), ("distance_samples", distance_samples),
                        ("cut_sample_pins", cut_sample_pins)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"bounds option {name} must be an integer >= 0, got {v!r}")
        self.distance_exact_max_npus = int(distance_exact_max_npus)
        self.refine_max_npus = int(refine_max_npus)
        self.cut_max_npus = int(cut_max_npus)
        self.distance_samples = int(distance_samples)
        self.cut_sample_pins = int(cut_sample_pins)
        self.drain = bool(drain)


def _distances(g: _Graph, opts: _Opts, want_entry: bool):
    """``(diameter, exact, E)``: E is the entry-time matrix or None when not affordable."""
    n, L = g.n, g.w.size
    exact = n <= opts.distance_exact_max_npus and n * (n + L) <= DISTANCE_EXACT_MAX_WORK
    entry = want_entry and exact and n <= opts.refine_max_npus
    if exact:
        ecc, E = _distance_rows(g.out_ptr, g.dst, g.w, g.in_ptr, g.in_src, np.arange(n, dtype=np.int64),
                                g.uniform, entry)
        return float(ecc.max()), True, (E if entry else None)
    return _sampled_diameter(g, opts.distance_samples), False, None


def _node_groups(g: _Graph):
    """Link times grouped by receiving NPU (``t`` in in-link order, CSR ``in_ptr``)."""
    return g.w[g.in_order], g.in_ptr


def _refined_ingress(g: _Graph, E: np.ndarray, cpn: int, floor: float) -> float:
    """max over v, tau of ``tau + F_v(#chunks that cannot start on v's in-links before tau)``.

    ``floor`` is a value already proven (the plain count bound); queries whose
    upper estimate cannot beat it are skipped. Columns are processed in blocks
    and candidate windows in batches, so memory stays O(N * block).
    """
    n = g.n
    t_in, ptr = _node_groups(g)
    deg_i = np.diff(ptr)
    R = np.add.reduceat(1.0 / t_in, ptr[:-1])          # every NPU has an in-link (strongly connected, N >= 2)
    k = np.arange(n - 1)
    need_k = (n - 1 - k) * cpn                           # owners with entry time >= the k-th smallest
    best = float(floor)
    block = max(1, int(2_000_000 // max(n, 1)))
    qbatch = max(1, int(1_000_000 // max(int(deg_i.max()) * 4, 1)))
    for c0 in range(0, n, block):
        cols = np.arange(c0, min(n, c0 + block))
        Eb = E[:, cols].copy()
        Eb[cols, np.arange(cols.size)] = -np.inf       # the NPU's own chunks need no delivery
        tau = np.sort(Eb, axis=0)[1:, :]               # (n-1, B): other owners' entry times, ascending
        Rb, db = R[cols][None, :], deg_i[cols][None, :].astype(np.float64)
        lo = tau + need_k[:, None] / Rb
        hi = tau + (need_k[:, None] + db) / Rb
        # tau + F lies in [lo, hi] (hi up to rounding): only queries whose hi reaches the best known
        # value, or the block's best lower estimate, can hold the maximum.
        thresh = max(best, float(lo.max()))
        kk, jj = np.nonzero(hi >= thresh * (1 - 1e-9))
        if kk.size == 0:
            continue
        vv = cols[jj]
        for q0 in range(0, kk.size, qbatch):
            qk, qv, qj = kk[q0:q0 + qbatch], vv[q0:q0 + qbatch], jj[q0:q0 + qbatch]
            qdeg = deg_i[qv]
            qptr = np.concatenate([[0], np.cumsum(qdeg)])
            link_pos = np.repeat(ptr[qv], qdeg) + (np.arange(qptr[-1]) - np.repeat(qptr[:-1], qdeg))
            F = count_time_us(t_in[link_pos], qptr, need_k[qk])
            best = max(best, float((tau[qk, qj] + F).max()))
    return best


def _basic_ingress(g: _Graph, need_per_node: int) -> float:
    t_in, ptr = _node_groups(g)
    return float(count_time_us(t_in, ptr, np.full(g.n, need_per_node, dtype=np.int64)).max())


def _steps(value: float | None, step: float | None):
    if value is None or step is None or step <= 0:
        return None
    return int(round(value / step))


def _cut_links_time(g: _Graph, S: np.ndarray, need: int) -> float:
    """Whole-chunk count bound through the links entering ``S``."""
    sel = ~S[g.src] & S[g.dst]
    t = g.w[sel]
    return float(count_time_us(t, np.array([0, t.size]), np.array([need]))[0])


# ============================================================================ group import + drain
_DRAIN_EPS = 1e-9


@njit(cache=True)
def _drain_short(a, K, t_out):
    """``X(a) = K - sum_l #{k >= 1: k t_l < a}``: the outside chunks no member of the group can hold just
    before ``a`` (multiples equal to ``a`` up to ``1e-9`` relative count as equal)."""
    entered = 0.0
    for i in range(t_out.shape[0]):
        entered += np.ceil(a / t_out[i] - _DRAIN_EPS) - 1.0
    return K - entered


@njit(cache=True)
def _drain_cap(a, T, m, mo_ptr, mo_t, mi_ptr, mi_t):
    """``cap_v(a, T)`` of member ``m``: what it can still receive in ``(a - delta, T]`` (``a <= T``)."""
    x = T - a
    cap = 0.0
    for j in range(mo_ptr[m], mo_ptr[m + 1]):
        tj = mo_t[j]
        cap += min(np.floor(x / tj + _DRAIN_EPS) + 1.0, np.floor(T / tj + _DRAIN_EPS))
    for j in range(mi_ptr[m], mi_ptr[m + 1]):
        cap += np.floor(x / mi_t[j] + _DRAIN_EPS)
    return cap


@njit(cache=True)
def _drain_infeasible(T, K, t_out, uniq_out, mo_ptr, mo_t, mi_ptr, mi_t):
    """Whether the check of :func:`_drain_bound` rules out makespan ``T`` for one group: ``X(a) > cap_v(a, T)``
    for some multiple ``a = k t_l <= T`` of an outside in-link time and some member ``v``. Not monotone in
    ``T`` (the floors); a ruled-out ``T`` still proves that no schedule ends by ``T``."""
    for u in range(uniq_out.shape[0]):
        t = uniq_out[u]
        k = 1
        while k * t <= T * (1.0 + 1e-12):  # a = T counts (float rounding: up to 1e-12 relative)
            a = k * t  # the argument holds just below a: a link's k-th transfer ends at k t at the earliest
            X = _drain_short(a, K, t_out)
            if X <= 0:
                break
            for m in range(mo_ptr.shape[0] - 1):
                if X > _drain_cap(a, T, m, mo_ptr, mo_t, mi_ptr, mi_t) + 1e-9:
                    return True
            k += 1
    return False


@njit(cache=True)
def _drain_group_bound(floor, K, t_out, uniq_out, mo_ptr, mo_t, mi_ptr, mi_t):
    """``max(floor, sup of the T the check rules out)`` for one group, up to ``1e-10`` relative from below.

    For one ``a`` and member ``m``, ``cap_m(a, T)`` only grows with ``T``: the ``T >= a`` it rules out form
    one interval ``[a, T_am)``, and ``T_am`` (the least ``T >= a`` with ``cap_m(a, T) >= X(a)``) is found by
    bisection from ``max(a, best)``. Every ``a = k t_l`` with ``X(a) > 0`` is visited, so no ruled-out
    interval is missed, whatever the floor."""
    best = floor
    for u in range(uniq_out.shape[0]):
        t = uniq_out[u]
        k = 1
        while True:
            a = k * t
            X = _drain_short(a, K, t_out)
            if X <= 0:
                break
            for m in range(mo_ptr.shape[0] - 1):
                lo = max(a, best)
                if X <= _drain_cap(a, lo, m, mo_ptr, mo_t, mi_ptr, mi_t) + 1e-9:
                    continue  # (a, m) rules out nothing above best
                # lo is ruled out; at a + X * (fastest in-link of m), cap_m >= X: m can take X by then
                tmin = np.inf
                for j in range(mo_ptr[m], mo_ptr[m + 1]):
                    tmin = min(tmin, mo_t[j])
                for j in range(mi_ptr[m], mi_ptr[m + 1]):
                    tmin = min(tmin, mi_t[j])
                if not np.isfinite(tmin):
                    continue  # no in-link at all (not strongly connected): leave it to the other bounds
                hi = (a + X * tmin) * (1.0 + 1e-12) + 1e-12
                for _ in range(200):
                    mid = 0.5 * (lo + hi)
                    if mid <= lo or mid >= hi:
                        break
                    if X > _drain_cap(a, mid, m, mo_ptr, mo_t, mi_ptr, mi_t) + 1e-9:
                        lo = mid
                    else:
                        hi = mid
                    if hi - lo <= 1e-10 * hi:
                        break
                best = lo  # lo is ruled out: any valid schedule takes longer
            k += 1
    return best


def _drain_groups(topo: Topology, t: np.ndarray) -> list[np.ndarray]:
    """Non-trivial strongly connected groups of the links faster than each link time tier
    (:func:`tacos_bench.topology.tiers.faster_link_components`, the groups the greedy's rules see)."""
    n = topo.num_npus
    seen, groups = set(), []
    for _, lab in faster_link_components(n, topo.out_ptr, topo.dst, t):
        order = np.argsort(lab, kind="stable")
        cuts = np.flatnonzero(np.diff(lab[order])) + 1
        for mem in np.split(order, cuts):
            if 1 < mem.size < n and mem.tobytes() not in seen:
                seen.add(mem.tobytes())
                groups.append(np.sort(mem))
    return groups


def _drain_bound(topo: Topology, t: np.ndarray, cpn: int, floor: float, sources: np.ndarray | None = None) -> float:
    """The group import + drain bound (docs/bounds.md (d)), never below ``floor``.

    For a group ``S`` of faster links and a multiple ``a = k t_l`` of an outside in-link time, at least
    ``X(a) = K - sum_l #{k: k t_l < a}`` of the ``K`` outside chunks have not entered ``S`` just before
    ``a``; every member must then receive all of them in ``(a - delta, T]``, over its outside in-links (at
    most ``min(floor((T-a)/t)+1, floor(T/t))`` each) and its inside in-links (at most ``floor((T-a)/t)``
    each: the sender gets the chunk only after ``a - delta``). When some member cannot (``a <= T``, ``a = T``
    included), no schedule ends by ``T``. The result is the largest such ``T`` over all groups and ``a``
    (a ruled-out ``T`` up to ``1e-10`` relative below the supremum; :func:`_drain_group_bound`), or
    ``floor``: every ``a`` is visited, so a floor at a multiple of a link time, or one below a ``T`` the
    check does not rule out, hides nothing. Groups with the same link-time signature are checked once.
    ``sources`` (a multicast collective's chunk sources; default: All-Gather's ``c mod N``) decide ``K``."""
    n = topo.num_npus
    per_npu = None if sources is None else np.bincount(sources, minlength=n)
    src = np.asarray(topo.src, np.int64)
    dst = np.asarray(topo.dst, np.int64)
    best = float(floor)
    done = set()
    for S in _drain_groups(topo, t):
        inS = np.zeros(n, dtype=bool)
        inS[S] = True
        into = inS[dst]
        outside_in = into & ~inS[src]
        if not outside_in.any():
            continue
        inside_in = into & inS[src]
        t_out = np.sort(t[outside_in])
        K = float(cpn * (n - S.size)) if per_npu is None else float(per_npu.sum() - per_npu[S].sum())
        if K <= 0:
            continue
        # members with the same in-link times are one check
        members = sorted({(np.sort(t[outside_in & (dst == v)]).tobytes(),
                           np.sort(t[inside_in & (dst == v)]).tobytes()) for v in S.tolist()})
        sig = (K, t_out.tobytes(), tuple(members))
        if sig in done:
            continue
        done.add(sig)
        mo_ptr, mo_t = _csr([np.frombuffer(a, dtype=t.dtype) for a, _ in members])
        mi_ptr, mi_t = _csr([np.frombuffer(b, dtype=t.dtype) for _, b in members])
        best = max(best, _drain_group_bound(best, K, t_out, np.unique(t_out), mo_ptr, mo_t, mi_ptr, mi_t))
    return best


def _csr(arrs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr, values)``: the arrays concatenated, row ``m`` at ``values[ptr[m]:ptr[m + 1]]``."""
    ptr = np.concatenate([[0], np.cumsum([len(a) for a in arrs])]).astype(np.int64)
    return ptr, (np.concatenate(arrs).astype(np.float64) if ptr[-1] else np.zeros(0))


def _all_gather_bounds(topo: Topology, t: np.ndarray, cpn: int, chunk_bytes: int, opts: _Opts) -> dict:
    """All-Gather bounds on ``topo`` with per-link chunk times ``t``."""
    n = topo.num_npus
    g = _Graph(topo, t)
    need = (n - 1) * cpn
    basic = _basic_ingress(g, need)
    diameter, d_exact, E = _distances(g, opts, want_entry=True)
    refined = _refined_ingress(g, E, cpn, basic) if E is not None else None
    ingress = max(basic, refined) if refined is not None else basic
    out = {"ingress_basic_us": basic, "ingress_refined": refined is not None, "ingress_us": ingress,
           "distance_us": diameter, "distance_exact": d_exact}
    out.update(_ag_cut(topo, g, t, cpn, chunk_bytes, opts))
    # the drain argument rules nothing out below its first outside link time: start from the bounds above
    floor = max(v for v in (ingress, diameter, out["cut_us"]) if v is not None)
    out["drain_us"] = _drain_bound(topo, t, cpn, floor) if opts.drain else None
    return out


def _cut_method(name: str, n: int, pins: int | None) -> str:
    if pins is None:
        return name
    k = len(_pins(n, pins))
    return f"singleton-cuts+{name}({k} pins)" if k else "singleton-cuts"


def _ag_cut(topo, g, t, cpn, chunk_bytes, opts) -> dict:
    n = topo.num_npus
    pins = None if n <= opts.cut_max_npus else opts.cut_sample_pins
    # Latency-aware: a link completes at most T / t_l chunks by T (>= the pure-bandwidth form on every cut).
    r = max_ratio_cut(topo, _chunk_rate_caps(t), max_pins=pins)
    cut_chunks = cpn / r["ratio"]
    whole = _cut_links_time(g, r["S"], int(n - r["S"].sum()) * cpn)
    # ForestColl's pure-bandwidth bound (no latency), reported for comparison.
    bw = _bytes_per_us(topo.bw_GiBps)
    if _proportional(bw, _chunk_rate_caps(t)):
        # Same cut problem up to a constant factor: same optimal S, no second sweep.
        rb = {"ratio": r["ratio"] * float(bw[0] * t[0]), "S": r["S"], "exact": r["exact"], "flows": 0}
    else:
        rb = max_ratio_cut(topo, bw, max_pins=pins)
    cut_bw = cpn * chunk_bytes / rb["ratio"]
    whole_bw = _cut_links_time(g, rb["S"], int(n - rb["S"].sum()) * cpn)
    return {"cut_us": max(cut_chunks, whole, cut_bw, whole_bw), "cut_bw_us": cut_bw,
            "cut_exact": r["exact"] and rb["exact"],
            "cut_method": _cut_method("parametric-maxflow", n, pins),
            "cut_flows": r["flows"] + rb["flows"], "cut_size": int(r["S"].sum())}


def _all_reduce_bounds(problem: Problem, opts: _Opts) -> dict:
    topo = problem.topology
    n = topo.num_npus
    C = problem.num_chunks
    t = np.asarray(problem.link_time_us, dtype=np.float64)
    g = _Graph(topo, t)
    rg = g.reversed()
    # Every chunk needs one transfer into and one out of every NPU; the one carrying the farthest
    # contribution into v cannot start before max_o E[o, v] (mirror image for the way out).
    diameter, d_exact, E = _distances(g, opts, want_entry=True)
    _, _, Er = _distances(rg, opts, want_entry=True) if E is not None else (None, None, None)
    t_in, ptr = _node_groups(g)
    F_in = count_time_us(t_in, ptr, np.full(n, C, dtype=np.int64))
    t_out, optr = _node_groups(rg)
    F_out = count_time_us(t_out, optr, np.full(n, C, dtype=np.int64))
    basic = float(max(F_in.max(), F_out.max()))
    ingress = basic
    if E is not None:
        E2, Er2 = E.copy(), Er.copy()
        np.fill_diagonal(E2, -np.inf)
        np.fill_diagonal(Er2, -np.inf)
        ingress = max(ingress, float((E2.max(axis=0) + F_in).max()), float((Er2.max(axis=0) + F_out).max()))
    # One-way gossip needs 2(N-1) transfers per chunk (Harary-Schwenk argument, see docs/bounds.md).
    gossip = float(count_time_us(t, np.array([0, t.size]), np.array([2 * (n - 1) * C]))[0])
    out = {"ingress_basic_us": basic, "ingress_refined": E is not None, "ingress_us": max(ingress, gossip),
           "gossip_us": gossip, "distance_us": diameter, "distance_exact": d_exact}
    pins = None if n <= opts.cut_max_npus else opts.cut_sample_pins
    # Every chunk must enter every proper non-empty S at least once: C / min-cut.
    r = min_in_cut(topo, _chunk_rate_caps(t), max_pins=pins)
    whole = _cut_links_time(g, r["S"], C)
    bw = _bytes_per_us(topo.bw_GiBps)
    if _proportional(bw, _chunk_rate_caps(t)):
        rb = {"value": r["value"] * float(bw[0] * t[0]), "S": r["S"], "exact": r["exact"], "flows": 0}
    else:
        rb = min_in_cut(topo, bw, max_pins=pins)
    cut_bw = C * problem.chunk_bytes / rb["value"]
    whole_bw = _cut_links_time(g, rb["S"], C)
    out.update(cut_us=max(C / r["value"], whole, cut_bw, whole_bw), cut_bw_us=cut_bw,
               cut_exact=r["exact"] and rb["exact"],
               cut_method=_cut_method("global-min-cut", n, pins),
               cut_flows=r["flows"] + rb["flows"], cut_size=int(r["S"].sum()))
    if opts.drain:
        # an All-Reduce schedule contains a Reduce-Scatter and the owners' contributions flow like an
        # All-Gather: both phases' drain bounds hold for it (the reversed links carry the Reduce-Scatter's)
        cpn = problem.collective.chunks_per_npu
        floor = max(out["ingress_us"], out["distance_us"], out["cut_us"])
        out["drain_us"] = max(_drain_bound(topo, t, cpn, floor),
                              _drain_bound(topo.reversed(), _reversed_times(topo, t), cpn, floor))
    else:
        out["drain_us"] = None
    return out


def _reversed_times(topo: Topology, t: np.ndarray) -> np.ndarray:
    """Per-link times of ``topo.reversed()`` in its link order (link u->v becomes v->u)."""
    rt = topo.reversed()
    return np.asarray(t, np.float64)[topo.link_ids(rt.dst, rt.src)]


def _group_cut_times(topo: Topology, g: _Graph, t: np.ndarray, sets, need_in, need_out) -> float:
    """Whole-chunk count bound through the links entering and leaving each candidate set ``S``
    (``need_in(S)``/``need_out(S)`` chunks must cross)."""
    best = 0.0
    src, dst = g.src, g.dst
    for S in sets:
        inS = np.zeros(topo.num_npus, dtype=bool)
        inS[S] = True
        for sel, need in ((~inS[src] & inS[dst], need_in(inS)), (inS[src] & ~inS[dst], need_out(inS))):
            if need > 0:
                tt = t[sel]
                best = max(best, float(count_time_us(tt, np.array([0, tt.size]), np.array([need]))[0]))
    return best


SPECTRAL_MAX_NPUS = 1024  # dense eigen-decomposition of the Laplacian up to this size
# a degenerate Fiedler eigenspace gives one vector per NPU (its projections) up to this size (each adds up to 6
# candidate sets: torus16x16 All-to-All bounds took 0.45 s with them, 0.06 s without)
SPECTRAL_PROJECTED_MAX_NPUS = 128


def _candidate_cuts(topo: Topology, t: np.ndarray) -> list[np.ndarray]:
    """Sets worth a cut: the groups of faster links (servers, pods); for grids, half of each dimension; for
    two-tier clusters, half of each dimension of the server torus; and, on any topology up to
    ``SPECTRAL_MAX_NPUS`` NPUs, spectral bisections (sweeps of the Laplacian's Fiedler vector, or of its
    eigenspace's projections when that is degenerate, link weights ``1 / t``, split at the quartiles and the
    median from either end: :func:`_fiedler_vectors`, :func:`_sweep_sets`). Any set gives a valid bound; these
    are the ones likely to be tight."""
    sets = list(_drain_groups(topo, t))
    meta = topo.meta if isinstance(topo.meta, dict) else {}
    n = topo.num_npus
    # a relabelled copy carries its layout in the ids as built: NPU i of the copy is original_ids[i] there
    orig = np.arange(n)
    if meta.get("layout") and len(meta.get("original_ids") or ()) == n:
        orig = np.asarray(meta["original_ids"], dtype=np.int64)
        meta = meta["layout"]
    dims = meta.get("dims")
    if dims and int(np.prod(dims)) == n:
        coords = np.stack(np.unravel_index(orig, [int(d) for d in dims][::-1])[::-1], axis=1)
        for a, size in enumerate(dims):
            if size >= 2:
                sets.append(np.flatnonzero(coords[:, a] < size // 2))
    if meta.get("kind") == "hetero" and {"servers_x", "servers_y", "npus_per_server"} <= set(meta):
        sx, sy, p = int(meta["servers_x"]), int(meta["servers_y"]), int(meta["npus_per_server"])
        server = orig // p
        for coord, size in ((server % sx, sx), (server // sx, sy)):
            if size >= 2:
                sets.append(np.flatnonzero(coord < size // 2))
    if 4 <= n <= SPECTRAL_MAX_NPUS and topo.num_links:
        W = np.zeros((n, n))
        np.add.at(W, (topo.src, topo.dst), 1.0 / t)
        W = W + W.T
        L = np.diag(W.sum(axis=1)) - W
        vals, vecs = np.linalg.eigh(L)
        sets.extend(_sweep_sets(_fiedler_vectors(vals, vecs, n)))
    return sets


def _fiedler_vectors(vals: np.ndarray, vecs: np.ndarray, n: int) -> np.ndarray:
    """Vectors whose sweep sets do not depend on the NPU labels: the Fiedler vector when its eigenvalue is
    simple; when it is not (a symmetric topology), which basis of the eigenspace LAPACK returns depends on the
    row order, so the eigenspace's projections of every NPU's unit vector instead (a relabelling permutes
    them), up to ``SPECTRAL_PROJECTED_MAX_NPUS`` NPUs (beyond: one basis vector, label-dependent)."""
    tol = 1e-9 * max(1.0, float(abs(vals[-1])))
    space = vecs[:, np.abs(vals - vals[1]) <= tol]
    if space.shape[1] == 1 or n > SPECTRAL_PROJECTED_MAX_NPUS:
        return space[:, :1].T
    return space @ space.T          # row i: NPU i's unit vector projected onto the eigenspace


def _sweep_sets(vectors: np.ndarray) -> list[np.ndarray]:
    """Per vector, the NPUs at or below its quartiles and median and those at or above them (a vector's sign
    is arbitrary); a tie at a split goes wholly to one side, so equal values never split by label. Values
    equal within a relative 1e-9 count as equal; duplicate sets once."""
    out: dict[bytes, np.ndarray] = {}
    for f in np.atleast_2d(vectors):
        scale = max(float(np.abs(f).max()), 1e-300)
        f = np.round(f / scale, 9)
        n = f.size
        srt = np.sort(f)
        for q in (n // 4, n // 2, (3 * n) // 4):
            if 0 < q < n:
                for inside in (f <= srt[q - 1], f >= srt[n - q]):
                    if 0 < inside.sum() < n:
                        out.setdefault(np.packbits(inside).tobytes(), np.flatnonzero(inside))
    return list(out.values())


def start_slots(t: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` earliest transfer start offsets over links of times ``t`` (each link starts at ``0, t_l,
    2 t_l, ...``), ascending: the ``j``-th value is the least window length in which ``j + 1`` transfers
    can start (or end) over those links.

    >>> start_slots(np.array([1.0, 2.0]), 5).tolist()
    [0.0, 0.0, 1.0, 2.0, 2.0]
    """
    t = np.asarray(t, np.float64)
    if m <= 0:
        return np.zeros(0)
    if t.size == 0:
        return np.full(m, np.inf)
    # the m-th slot is at most (m / #links) slowest-link times away; every slot up to it, sorted
    tau = float(np.ceil(m / t.size)) * float(t.max())
    k = np.floor(tau / t).astype(np.int64) + 1
    slots = np.sort(np.concatenate([np.arange(kk) * tt for kk, tt in zip(k.tolist(), t.tolist())]))
    return slots[:m]


def _pipeline_bound(need: np.ndarray, slots: np.ndarray) -> float:
    """``max_j (slot_j + x_j)`` with ``x`` in descending order: the chunks that still need at least ``x``
    after leaving (or have needed at least ``x`` before arriving) must all start (end) within a window of
    ``T - x`` (docs/bounds.md, pipeline bound)."""
    if need.size == 0:
        return 0.0
    return float(np.max(np.sort(need)[::-1] + slots[:need.size]))


def _collective_bounds(problem: Problem, opts: _Opts) -> dict:
    """Bounds of the copy collectives beyond All-Gather (broadcast, gather, scatter, all_to_all), from their
    sources and destinations: every NPU must receive what it lacks (ingress) and send what only it holds
    (egress); a chunk cannot arrive sooner than its shortest path (distance); every chunk occupies at least
    its shortest path's total link time (link load); chunks that must cross a cut fit through its links
    (cut: the source's min-cuts for broadcast up to ``cut_max_npus``, otherwise the sets of
    :func:`_candidate_cuts`: faster-link groups, grid halves, server-torus halves, spectral bisections); the
    chunks a node sends or receives, by distance, through its links' start/end slots (pipeline); and, for
    broadcast, the group import + drain bound."""
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    t = np.asarray(problem.link_time_us, dtype=np.float64)
    g = _Graph(topo, t)
    rg = g.reversed()
    src, dst = np.asarray(problem.sources), np.asarray(problem.destinations)
    every = dst < 0
    moving = every | (dst != src)
    need_in = np.full(n, int(every.sum())) - np.bincount(src[every], minlength=n)
    need_in += np.bincount(dst[~every & (dst != src)], minlength=n)
    need_out = np.bincount(src[moving], minlength=n)
    t_in, ptr = _node_groups(g)
    ingress = float(count_time_us(t_in, ptr, need_in).max())
    t_out, optr = _node_groups(rg)
    egress = float(count_time_us(t_out, optr, need_out).max())
    # distances from each source that has chunks to move
    srcs = np.unique(src[moving])
    exact = n <= opts.distance_exact_max_npus and srcs.size * (n + g.w.size) <= DISTANCE_EXACT_MAX_WORK
    distance, load, pipeline = 0.0, None, None
    if exact and srcs.size:
        D = np.vstack([_distance_row(g.out_ptr, g.dst, g.w, int(s), g.uniform) for s in srcs.tolist()])
        row = np.minimum(np.searchsorted(srcs, src), srcs.size - 1)  # rows of chunks that stay put are unused
        if every.any():
            distance = float(D[row[every]].max())
        one = ~every & (dst != src)
        if one.any():
            d1 = D[row[one], dst[one]]
            distance = max(distance, float(d1.max()))
            load = float(d1.sum()) / max(topo.num_links, 1)   # total link time the unicast chunks need
        pipeline = _pipeline_bounds(g, rg, D, row, src, dst, every, moving)
    out = {"ingress_basic_us": ingress, "ingress_refined": False, "ingress_us": max(ingress, egress),
           "egress_us": egress, "distance_us": distance, "distance_exact": bool(exact), "linkload_us": load,
           "pipeline_us": pipeline}
    # cuts
    flows = 0
    cut = 0.0
    cut_exact = False
    method = "groups+halves+spectral"
    if problem.kind == "broadcast" and n <= opts.cut_max_npus:
        net = _FlowNet(topo, _chunk_rate_caps(t))
        root = problem.collective.root
        worst = np.inf
        for v in range(n):
            if v != root:
                value, _ = net.max_flow(root, v, 0.0)
                worst = min(worst, value * net.scale)
        flows = net.flows
        cut = C / worst if worst > 0 else np.inf
        method = "source-min-cuts"
        cut_exact = True  # the least of the root's N - 1 max flows is the minimum over every cut
    else:
        def chunks_into(inS):
            return int(np.sum(~inS[src] & np.where(every, True, inS[np.maximum(dst, 0)]) & moving))

        def chunks_out(inS):
            return int(np.sum(inS[src] & np.where(every, True, ~inS[np.maximum(dst, 0)]) & moving))

        cut = _group_cut_times(topo, g, t, _candidate_cuts(topo, t), chunks_into, chunks_out)
    out.update(cut_us=cut or None, cut_bw_us=None, cut_exact=cut_exact, cut_method=method, cut_flows=flows)
    floor = max(v for v in (out["ingress_us"], distance, cut, load or 0.0, pipeline or 0.0) if v is not None)
    out["drain_us"] = (_drain_bound(topo, t, 1, floor, src) if opts.drain and problem.collective.multicast
                       else None)
    return out


def _pipeline_bounds(g: _Graph, rg: _Graph, D: np.ndarray, row: np.ndarray, src: np.ndarray, dst: np.ndarray,
                     every: np.ndarray, moving: np.ndarray) -> float:
    """Departure and arrival pipeline bounds of every NPU (:func:`_pipeline_bound`).

    Departure: each chunk leaves its source at least once; from then it still needs its shortest path to
    its destination (to the farthest NPU when every NPU needs it). Arrival: each chunk reaches each NPU that
    needs it no sooner than the shortest path from its source; its arrivals end on the NPU's in-links.
    """
    n = g.n
    best = 0.0
    t_out, optr = _node_groups(rg)
    t_in, iptr = _node_groups(g)
    need = np.where(every, D.max(axis=1)[row], D[row, np.maximum(dst, 0)])
    for u in np.unique(src[moving]).tolist():
        x = need[moving & (src == u)]
        best = max(best, _pipeline_bound(x, start_slots(t_out[optr[u]:optr[u + 1]], x.size)))
    sources, first = np.unique(src[moving], return_index=True)
    row_of = dict(zip(sources.tolist(), row[moving][first].tolist()))
    hop, complete = _hop_slot_bounds(g, D, row_of, src, dst, every, moving)
    best = max(best, hop)
    if complete and len(row_of) == 1:
        # one source (Broadcast, Scatter): at every NPU its last-hop bound is at least the arrival bound below
        # (each in-link's d(u, tail) + t >= d(u, v)), and the departure bound is at least the distance
        return best
    # arrivals: per NPU, the distances its chunks have come (multicast chunks arrive everywhere)
    uni = moving & ~every
    for v in range(n):
        rel = D[row[every & (src != v)], v]
        mine = uni & (dst == v)
        if mine.any():
            rel = np.concatenate([rel, D[row[mine], v]])
        if rel.size:
            best = max(best, _pipeline_bound(rel, start_slots(t_in[iptr[v]:iptr[v + 1]], rel.size)))
    return best


def _kth_of_sequences(first: np.ndarray, step: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per column ``v``: the ``k[v]``-th smallest (1-based) of the multiset ``{first[i, v] + j step[i, v] : i,
    j >= 0}`` (``k >= 1``; a row of ``inf`` is no link).

    >>> _kth_of_sequences(np.array([[1.0], [2.0]]), np.array([[3.0], [1.0]]), np.array([3])).tolist()
    [3.0]
    """
    jj = np.arange(int(k.max()))
    vals = (first[:, None, :] + jj[None, :, None] * step[:, None, :]).reshape(-1, first.shape[1])
    vals.sort(axis=0)
    return vals[k - 1, np.arange(first.shape[1])]


def _hop_slot_bounds(g: _Graph, D: np.ndarray, row_of: dict[int, int], src: np.ndarray, dst: np.ndarray,
                     every: np.ndarray, moving: np.ndarray) -> tuple[float, bool]:
    """Pipeline bounds through the first and the last hop, per (source ``u``, NPU ``v``) with ``K >= 2``
    chunks of ``u`` that ``v`` needs (docs/bounds.md, (g), first and last hop): the max over them of
    :func:`_hop_slot_times`, and whether every source was done (``HOP_SLOT_MAX_WORK``)."""
    best = 0.0
    work = 0
    deg_in = int(np.diff(g.in_ptr).max(initial=0))
    for u in np.unique(src[moving]).tolist():
        K = _needed_from(u, g.n, src, dst, every, moving)
        work += (g.out_ptr[u + 1] - g.out_ptr[u] + deg_in) * int(K.max(initial=0)) * int((K >= 2).sum())
        if work > HOP_SLOT_MAX_WORK:
            return best, False
        best = max(best, float(_hop_slot_times(g, u, K, D[row_of[u]], row_of, D).max(initial=0.0)))
    return best, True


def _needed_from(u: int, n: int, src: np.ndarray, dst: np.ndarray, every: np.ndarray,
                 moving: np.ndarray) -> np.ndarray:
    """Per NPU: how many of source ``u``'s moving chunks it needs (multicast chunks: every NPU but ``u``)."""
    mine = moving & (src == u)
    K = np.bincount(dst[mine & ~every], minlength=n) + int((mine & every).sum())
    K[u] = 0
    return K


def _hop_slot_times(g: _Graph, u: int, K: np.ndarray, du: np.ndarray, row_of: dict[int, int] | None = None,
                    D: np.ndarray | None = None) -> np.ndarray:
    """Per NPU ``v``: the larger of the first-hop and the last-hop bound on when the ``K[v]`` chunks of
    source ``u`` it needs can all have arrived (0 where ``K[v] < 2``: the distance says as much).

    First hop: the ``K`` chunks leave ``u`` on distinct transfers; the ``j``-th transfer on out-link ``l``
    ends no sooner than ``j t_l``, and its chunk then needs ``d(head(l), v)``: ``T`` is at least the
    ``K``-th smallest ``j t_l + d(head(l), v)``. Last hop: they first reach ``v`` on distinct transfers of its
    in-links; those on in-link ``l`` all start no sooner than ``du[tail(l)] = d(u, tail(l))``, so the ``j``-th
    of them ends no sooner than ``d(u, tail(l)) + j t_l``: ``T`` is at least the ``K``-th smallest of those.
    ``D[row_of[x]]``, when given, is the distance row of ``x`` (others are computed).
    """
    n = g.n
    out = np.zeros(n)
    cols = np.flatnonzero(K >= 2)
    if cols.size == 0 or g.out_ptr[u + 1] == g.out_ptr[u]:
        return out
    k = K[cols]

    def dist_from(x: int) -> np.ndarray:
        if row_of is not None and x in row_of:
            return D[row_of[x]]
        return _distance_row(g.out_ptr, g.dst, g.w, x, g.uniform)

    links = np.arange(g.out_ptr[u], g.out_ptr[u + 1])
    t_out = g.w[links]
    first = np.vstack([dist_from(int(g.dst[l]))[cols] for l in links.tolist()]) + t_out[:, None]
    out[cols] = _kth_of_sequences(first, np.broadcast_to(t_out[:, None], first.shape), k)
    # in-links of each column as a padded matrix (the pad is an extra link that is never free)
    in_links = g.in_order
    deg = np.diff(g.in_ptr)
    head = np.repeat(np.arange(n), deg)
    pad = np.full((n, int(deg.max())), in_links.size, np.int64)
    pad[head, np.arange(in_links.size) - g.in_ptr[head]] = np.arange(in_links.size)
    pad = pad[cols].T
    t_in = np.append(g.w[in_links], 0.0)
    tail = np.append(g.src[in_links], 0)
    first_in = np.where(pad < in_links.size, du[tail[pad]] + t_in[pad], np.inf)
    out[cols] = np.maximum(out[cols], _kth_of_sequences(first_in, t_in[pad], k))
    return out


def root_pipeline_bound_us(problem: Problem) -> float:
    """The pipeline bounds (docs/bounds.md (g)) of a rooted Broadcast or Scatter at its root alone: the
    departure bound (each chunk leaves the root on its out-link slots, then needs its shortest time to its
    farthest destination) and the first- and last-hop bounds; a few shortest-path searches (the root's and its
    out-neighbours'), for a solver's stopping test. :func:`lower_bounds` includes both.

    >>> from tacos_bench import Collective
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(4, bidirectional=False), Collective("broadcast", 3, 3))   # 3 chunks from NPU 0
    >>> root_pipeline_bound_us(p) / float(p.link_time_us[0])    # the 3rd leaves at 2t, then 3 hops to NPU 3
    5.0
    """
    g = _Graph(problem.topology, np.asarray(problem.link_time_us, dtype=np.float64))
    root = int(problem.collective.root)
    du = _distance_row(g.out_ptr, g.dst, g.w, root, g.uniform)
    if not np.isfinite(du).all():
        return 0.0
    src, dst = np.asarray(problem.sources), np.asarray(problem.destinations)
    every = dst < 0
    moving = every | (dst != src)
    need = np.where(every, du.max(), du[np.maximum(dst, 0)])[moving & (src == root)]
    t_out = g.w[g.out_ptr[root]:g.out_ptr[root + 1]]
    departure = _pipeline_bound(need, start_slots(t_out, need.size)) if t_out.size else 0.0
    K = _needed_from(root, g.n, src, dst, every, moving)
    return max(departure, float(_hop_slot_times(g, root, K, du).max(initial=0.0)))


def lower_bounds(problem: Problem, *, distance_exact_max_npus: int = DISTANCE_EXACT_MAX_NPUS,
                 refine_max_npus: int = REFINE_MAX_NPUS, cut_max_npus: int = CUT_MAX_NPUS,
                 distance_samples: int = DISTANCE_SAMPLES, cut_sample_pins: int = CUT_SAMPLE_PINS,
                 drain: bool = True) -> dict:
    """All lower bounds (µs) on the collective time of ``problem``.

    Parameters
    ----------
    problem : Problem
    distance_exact_max_npus : int
        All-pairs shortest paths (exact diameter) up to this many NPUs (and
        ``N*(N+L) <= 4e8``); above, the max over alternating forward/backward
        sweeps from ``distance_samples`` sources (a valid, maybe smaller, bound).
    refine_max_npus : int
        The distance-refined ingress bound needs an ``N x N`` matrix; above this
        only the plain count bound is used.
    cut_max_npus : int
        The cut bound is maximised exactly over all cuts up to this size
        (All-Gather/Reduce-Scatter: one max flow per automorphism orbit of
        NPUs plus one per improvement; All-Reduce: ``2(N-1)`` max flows);
        above, only the singleton cuts ``{v}`` and ``V - {v}`` (O(L)) plus
        ``cut_sample_pins`` evenly spaced pinned max flows are used: still
        valid, flagged ``cut_exact=False``.
    distance_samples, cut_sample_pins : int
        Effort of the cheap fallbacks above the size limits.

    Returns
    -------
    dict
        ``ingress_us``, ``ingress_steps`` (``ingress_us`` in link times when the
        topology is homogeneous, else None), ``ingress_basic_us`` /
        ``ingress_basic_steps`` (plain count bound, no distance refinement),
        ``distance_us``, ``cut_us`` (None only for one NPU), ``cut_bw_us`` (ForestColl's
        bandwidth-only form), ``drain_us`` (group import + drain; All-Gather, Reduce-Scatter,
        All-Reduce, broadcast, reduce), ``egress_us``, ``pipeline_us`` (broadcast, reduce, gather,
        scatter, All-to-All) and ``linkload_us`` (gather, scatter, All-to-All), ``best_us`` (max of
        ingress, distance, cut, drain, link load and pipeline where not None), ``best_source``, flags
        ``distance_exact``/``ingress_refined``/``cut_exact``,
        ``cut_method``, ``cut_flows``, ``cut_size`` (NPUs in the best cut's
        receiving side), ``kind``, ``step_us``; All-Reduce fills ``gossip_us``.
        Keys a collective does not use are None (docs/bounds.md has the table).
        Every value is a scalar (flat records). Deterministic for a given
        problem and options.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import mesh2d
    >>> b = lower_bounds(Problem(mesh2d(4, 4), Collective("all_gather", 1, 1024)))
    >>> b["ingress_steps"], b["best_us"] == 8 * 1250.5
    (8, True)
    """
    if problem.topology.is_fabric:
        return fabric_lower_bounds(problem)
    opts = _Opts(distance_exact_max_npus, refine_max_npus, cut_max_npus, distance_samples, cut_sample_pins, drain)
    topo = problem.topology
    kind = problem.kind
    n = topo.num_npus
    step = float(problem.link_time_us[0]) if (topo.is_homogeneous and topo.num_links) else None
    if n == 1:
        res = {"ingress_us": 0.0, "ingress_basic_us": 0.0, "ingress_refined": True, "distance_us": 0.0,
               "distance_exact": True, "cut_us": None, "cut_bw_us": None, "cut_exact": True,
               "cut_method": "none (single NPU)", "cut_flows": 0}
    elif kind == ALL_GATHER:
        res = _all_gather_bounds(topo, np.asarray(problem.link_time_us, dtype=np.float64),
                                 problem.collective.chunks_per_npu, problem.chunk_bytes, opts)
    elif kind == REDUCE_SCATTER:
        # Each All-Gather argument on the reversed links, mirrored in time, holds for Reduce-Scatter.
        rp = problem.reversed_all_gather()
        res = _all_gather_bounds(rp.topology, np.asarray(rp.link_time_us, dtype=np.float64),
                                 problem.collective.chunks_per_npu, problem.chunk_bytes, opts)
    elif kind == ALL_REDUCE:
        res = _all_reduce_bounds(problem, opts)
    elif kind == "reduce":
        # the broadcast's arguments on the reversed links, mirrored in time (as Reduce-Scatter from All-Gather)
        res = _collective_bounds(problem.mirror(), opts)
    else:
        res = _collective_bounds(problem, opts)
    # drain starts from the others (it is at least their max): on a tie the argument that proved it is named
    parts = {"ingress": res["ingress_us"], "distance": res["distance_us"], "cut": res["cut_us"],
             "linkload": res.get("linkload_us"), "pipeline": res.get("pipeline_us"), "drain": res.get("drain_us")}
    best = max(v for v in parts.values() if v is not None)
    # Ties (common: the cut bound of a single NPU equals its ingress bound) go to the first listed.
    best_source = next(k for k, v in parts.items() if v is not None and v >= best * (1 - 1e-12))
    res.update(kind=kind, step_us=step, ingress_steps=_steps(res["ingress_us"], step),
               ingress_basic_steps=_steps(res["ingress_basic_us"], step),
               best_us=float(best), best_source=best_source)
    res.setdefault("gossip_us", None)
    res.setdefault("cut_size", None)
    res.setdefault("drain_us", None)
    res.setdefault("linkload_us", None)
    res.setdefault("egress_us", None)
    res.setdefault("pipeline_us", None)
    return res


def cheap_bound_us(problem: Problem) -> float:
    """The cheap All-Gather bounds, without the distance and cut computations: the per-NPU ingress bound
    (O(links): every NPU receives ``(N - 1) * cpn`` chunks over its in-links, a link of chunk time ``t``
    completing at most ``floor(T / t)`` by ``T``) and the group import + drain bound (one check per group
    shape). A solver that meets it may stop: its schedule is optimal.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import hetero_cluster, mesh2d
    >>> p = Problem(mesh2d(3, 3), Collective("all_gather", 1, 1024))
    >>> cheap_bound_us(p) == 4 * float(p.link_time_us[0])   # a corner NPU: 8 chunks over 2 in-links
    True
    >>> h = Problem(hetero_cluster(8, 8, 8), Collective("all_gather", 1, 1024))
    >>> round(cheap_bound_us(h), 2) == round(lower_bounds(h)["drain_us"], 2)   # 1321.81: the drain bound
    True
    """
    if problem.topology.is_fabric:
        return fabric_lower_bounds(problem)["best_us"]
    t = np.asarray(problem.link_time_us, dtype=np.float64)
    g = _Graph(problem.topology, t)
    if g.n < 2:
        return 0.0
    cpn = problem.collective.chunks_per_npu
    ingress = _basic_ingress(g, (g.n - 1) * cpn)
    return max(ingress, _drain_bound(problem.topology, t, cpn, ingress))


def lower_bound_us(problem: Problem, **options) -> float:
    """The best lower bound (µs): ``lower_bounds(problem, **options)["best_us"]``.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> lower_bound_us(Problem(ring(4, bidirectional=False), Collective("all_gather", 1, 1024)))
    15001.5
    """
    return float(lower_bounds(problem, **options)["best_us"])
