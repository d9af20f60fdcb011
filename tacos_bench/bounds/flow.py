"""The multicommodity-flow lower bound of the unicast collectives (All-to-All, Scatter, Gather).

Every chunk has one source ``s`` and one destination ``d``; ``D[s, d]`` chunks go from ``s`` to ``d``. Let
``occ[e]`` be the least time one transfer holds link ``e`` (its latency plus the chunk at its bandwidth; through
cut-through switches also the least latency to the route's ends, :func:`~tacos_bench.bounds_fabric.occupancy_us`)
and ``r[e] = 1 / occ[e]`` the most chunks per µs the link can carry. The LP (sources aggregated: one commodity
per source, switches as transit nodes)::

    minimise T  subject to  f_s >= 0 a flow from s delivering D[s, d] to every d      (every source s)
                            sum_s f_s[e] <= r[e] T                                   (every link e)

is a lower bound on the makespan of every verified schedule (docs/flow_bound.md has the proof): a chunk
reaches its destination through a chain of transfers, which contains a simple path ``s -> d`` crossing each
of its links once; distinct chunks never share a link's time (a multicast or reduction group is one chunk),
each of them holds it at least ``occ[e]``, all within ``[0, T]``: with ``n_e`` such chunks on ``e``,
``n_e occ[e] <= T``, and the path counts are a feasible (integral) point of the LP. This *is* the latency
term: each chunk pays the link's latency where it crosses it, so ``latency=False`` (capacities of the
bandwidth alone, the textbook fluid bound) is never larger.

The value reported is never the LP's objective but a **dual certificate** evaluated exactly: for any link
lengths ``l >= 0``::

    T  >=  sum_{s,d} D[s, d] dist_l(s, d)  /  sum_e r[e] l[e]

(every chunk's path has length at least ``dist_l``: ``T sum_e r l >= sum_e l sum_s f_s >= sum D dist_l``).
The LP's optimal duals make it equal to the LP's optimum; any other lengths still give a valid bound, so what
keeps the work small at scale can only make the bound weaker, never wrong (``flow_source`` says which ran):

* ``lp``: the plain LP, one commodity per source (per destination when those are fewer: Gather), solved by
  HiGHS's interior point, up to ``max_lp_columns`` commodity-link pairs (64 NPUs of degree 3: ~0.5 s);
* ``lp_orbits``: sources and links grouped by colour refinement of the topology (demand and link rates
  included), one commodity per class of sources, capacities summed per link class; exact when the classes are
  orbits of automorphisms (``hetero512``: one commodity, 0.3 s; leaf-spines, DGX fabrics, tori);
* ``garg_koenemann``: beyond ``max_lp_columns`` without symmetry, the lengths of Fleischer's phases of the
  Garg-Koenemann max-concurrent-flow algorithm (one shortest-path tree per source), the best certified one
  (random128d3s5: 0.9998 of the LP's optimum in ~3 s; 512 NPUs: ~0.95 in 30 s);
* ``total_load``: the lengths ``occ`` themselves (the project's link-load bound), when nothing beat them.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> p = Problem(ring(4, bidirectional=False), Collective("all_to_all", 1, 4))
>>> b = lb_flow_us(p)      # 12 chunks of 1 + 2 + 3 hops = 24 link crossings over 4 links: 6 chunk times
>>> b["flow_source"], b["flow_us"] == 6 * float(p.link_time_us[0])
('lp_orbits', True)
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from .fabric import occupancy_us
from ..collective import UNICAST_KINDS
from ..cost import BYTES_PER_GIB
from ..errors import SolverError
from ..graph import dijkstra
from ..problem import Problem

__all__ = ["lb_flow_us", "unicast_demand", "chunk_rates", "certificate_us", "flow_solution", "path_decomposition",
           "FlowSolution"]

MAX_LP_COLUMNS = 20_000       # commodity x link pairs of the plain LP (HiGHS's interior point: ~1 s there)
EPS_MIN = 0.02                # the finest step of the Garg-Koenemann phases
DEFAULT_TIME_BUDGET_S = 30.0
_MIX = np.uint64(0x9E3779B97F4A7C15)
_BANNER_DONE = False


# ============================================================================ the problem's data
def unicast_demand(problem: Problem) -> np.ndarray:
    """``D[s, d]``: chunks that must go from NPU ``s`` to NPU ``d`` (``s != d``; zero diagonal).

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> unicast_demand(Problem(ring(3), Collective("gather", 2, 1, root=1))).tolist()
    [[0, 2, 0], [0, 0, 0], [0, 2, 0]]
    """
    if problem.kind not in UNICAST_KINDS:
        raise SolverError(f"the flow bound needs a unicast collective ({', '.join(UNICAST_KINDS)}), "
                          f"not {problem.kind}")
    n = problem.num_npus
    src, dst = np.asarray(problem.sources, np.int64), np.asarray(problem.destinations, np.int64)
    moving = src != dst
    return np.bincount(src[moving] * n + dst[moving], minlength=n * n).reshape(n, n)


def chunk_rates(problem: Problem, latency: bool = True) -> np.ndarray:
    """Most chunks per µs each link can carry: ``1 / occupancy`` (``latency=False``: the bandwidth alone).

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(2), Collective("all_to_all", 1, 2))   # 1 MiB chunks, 50 GiB/s, 0.5 µs
    >>> (1 / chunk_rates(p)).tolist(), (1 / chunk_rates(p, latency=False)).tolist()
    ([20.03125, 20.03125], [19.53125, 19.53125])
    """
    topo, c = problem.topology, problem.chunk_bytes
    if not latency:
        return topo.bw_GiBps * (BYTES_PER_GIB / 1e6) / c
    occ = occupancy_us(topo, c) if topo.is_fabric else np.asarray(problem.link_time_us, np.float64)
    return 1.0 / occ


@dataclass(frozen=True)
class _Net:
    """The graph the LP routes on, oriented so that commodities are the rows of ``D``."""

    num_nodes: int
    tail: np.ndarray        # per link id (the topology's order; reversed for Gather-like demand)
    head: np.ndarray
    rate: np.ndarray        # chunks per µs
    D: np.ndarray           # (num_npus, num_npus) chunks, rows = commodities' origins
    reversed: bool

    @property
    def num_links(self) -> int:
        return int(self.tail.size)

    def csr(self):
        order = np.argsort(self.tail, kind="stable")
        ptr = np.searchsorted(self.tail[order], np.arange(self.num_nodes + 1)).astype(np.int64)
        return ptr, self.head[order].astype(np.int64), order


def _net(problem: Problem, latency: bool) -> _Net:
    topo = problem.topology
    D = unicast_demand(problem)
    tail, head = topo.src.astype(np.int64), topo.dst.astype(np.int64)
    # one commodity per origin: per destination instead when fewer destinations than sources (Gather)
    rev = np.count_nonzero(D.any(axis=0)) < np.count_nonzero(D.any(axis=1))
    if rev:
        tail, head, D = head, tail, D.T.copy()
    return _Net(topo.num_nodes, tail, head, chunk_rates(problem, latency), D, bool(rev))


# ============================================================================ the certificate
@njit(cache=True)
def _demand_distances(out_ptr, dst, w, sources, D):
    """``sum_d D[i, d] dist_w(sources[i], d)`` for every ``i`` (inf when a demanded NPU is unreachable)."""
    n = out_ptr.shape[0] - 1
    k = sources.shape[0]
    out = np.zeros(k)
    dist = np.empty(n)
    pred = np.empty(n, np.int64)
    cap = max(dst.shape[0] + 1, n + 1)
    hk = np.empty(cap)
    hv = np.empty(cap, np.int64)
    for i in range(k):
        dijkstra(out_ptr, dst, w, sources[i], dist, pred, hk, hv)
        s = 0.0
        for d in range(D.shape[1]):
            if D[i, d] > 0:
                s += D[i, d] * dist[d]
        out[i] = s
    return out


def _certify(net: _Net, lengths: np.ndarray) -> float:
    """The weak-duality bound of ``lengths`` (µs); 0 for lengths that are all zero."""
    lengths = np.maximum(np.asarray(lengths, np.float64), 0.0)
    denom = float(np.dot(net.rate, lengths))
    if not denom > 0:
        return 0.0
    ptr, dst, order = net.csr()
    origins = np.flatnonzero(net.D.any(axis=1))
    num = _demand_distances(ptr, dst, lengths[order], origins.astype(np.int64),
                            net.D[origins].astype(np.float64))
    return float(num.sum()) / denom


def certificate_us(problem: Problem, lengths: np.ndarray, latency: bool = True) -> float:
    """The lower bound (µs) that link lengths ``lengths >= 0`` (in link-id order) prove by weak duality:
    ``sum_{s,d} D[s, d] dist(s, d) / sum_e rate[e] lengths[e]``.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(4), Collective("all_to_all", 1, 4))       # 4 chunks of 2 hops, 8 of 1, 8 links
    >>> certificate_us(p, np.ones(8)) == 2 * float(p.link_time_us[0])
    True
    """
    net = _net(problem, latency)
    lengths = np.asarray(lengths, np.float64)
    if lengths.shape != (net.num_links,) or np.any(~np.isfinite(lengths)) or np.any(lengths < 0):
        raise SolverError(f"lengths must be {net.num_links} finite non-negative numbers, one per link")
    return _certify(net, lengths)


# ============================================================================ colour refinement
def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of ``x`` (uint64): hash values whose sums identify multisets (up to 2^-64 collisions)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) * _MIX + np.uint64(salt)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _refine(init: np.ndarray, tails, heads, ecol) -> np.ndarray:
    """Colour refinement (1-WL) of a digraph with coloured edges, from the node colours ``init``: nodes
    keep one colour only while they see the same multisets of (edge colour, neighbour colour) both ways."""
    c = np.unique(init, return_inverse=True)[1].astype(np.int64)
    n = c.size
    ecol = np.asarray(ecol, np.int64)
    while True:
        width = int(c.max()) + 1
        out_h = np.zeros(n, np.uint64)
        in_h = np.zeros(n, np.uint64)
        with np.errstate(over="ignore"):
            np.add.at(out_h, tails, _mix(ecol * width + c[heads], 1))
            np.add.at(in_h, heads, _mix(ecol * width + c[tails], 2))
        sig = np.stack([c.astype(np.uint64), out_h, in_h], axis=1)
        new = np.unique(sig, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
        if new.max() == c.max():
            return new
        c = new


def _classes(net: _Net, num_npus: int):
    """Node colours and link classes (``(colour of tail, colour of head, rate)``) of the oriented net."""
    rate_col = np.unique(net.rate, return_inverse=True)[1].astype(np.int64)
    init = np.zeros(net.num_nodes, np.int64)
    init[num_npus:] = 1                                     # switches: transit only
    tails, heads, ecol = [net.tail], [net.head], [rate_col]
    D = net.D
    off = ~np.eye(num_npus, dtype=bool)
    if not (D[off].min() == D[off].max() > 0):              # uniform All-to-All refines nothing
        s, d = np.nonzero(D)
        tails.append(s)
        heads.append(d)
        ecol.append(int(rate_col.max()) + 1 + np.unique(D[s, d], return_inverse=True)[1])
    colour = _refine(init, np.concatenate(tails), np.concatenate(heads), np.concatenate(ecol))
    key = np.stack([colour[net.tail], colour[net.head], rate_col], axis=1)
    link_class = np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return colour, link_class


# ============================================================================ the LP (HiGHS)
@dataclass
class _LP:
    value_us: float | None    # the LP's objective (µs), None unless solved to optimality
    lengths: np.ndarray | None  # per-link lengths from the capacity duals
    status: str
    flows: np.ndarray | None  # (commodities, links) chunks, when asked


def _silent_highs(highspy):
    """A ``Highs`` with its log off; the first one of a process prints HiGHS's banner to the C-level stdout
    before any option can be set, so that one is built with file descriptor 1 pointed at /dev/null."""
    global _BANNER_DONE
    if _BANNER_DONE:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _BANNER_DONE = True
    h.setOptionValue("output_flag", False)
    return h


def _solve(net: _Net, origins: np.ndarray, weights: np.ndarray, link_class: np.ndarray, time_limit_s: float,
           want_flows: bool = False) -> _LP:
    """One LP: commodity ``k`` ships the demand row of ``origins[k]``, counted ``weights[k]`` times on the
    capacity rows, which sum the links of each class of ``link_class``."""
    import highspy

    K, m, nn = origins.size, net.num_links, net.num_nodes
    ncls = int(link_class.max()) + 1
    # scale: demand in units of its mean, time in units of the mean link's chunk time
    tau = 1.0 / float(np.mean(net.rate))
    dscale = float(net.D[net.D > 0].mean())
    demand = np.zeros((K, nn))                         # out - in of each commodity at each node
    demand[:, :net.D.shape[1]] = -net.D[origins] / dscale
    demand[np.arange(K), origins] -= demand.sum(axis=1)
    base = K * nn
    kk = np.repeat(np.arange(K), m)
    ee = np.tile(np.arange(m), K)
    r1, r2 = kk * nn + net.tail[ee], kk * nn + net.head[ee]
    # column (k, e): +1 in the row of (k, tail), -1 in (k, head), weight k in e's capacity row (rows sorted)
    idx = np.stack([np.minimum(r1, r2), np.maximum(r1, r2), base + link_class[ee]], axis=1)
    val = np.stack([np.where(r1 < r2, 1.0, -1.0), np.where(r1 < r2, -1.0, 1.0), weights[kk].astype(float)], axis=1)
    cls_rate = np.bincount(link_class, weights=net.rate * tau, minlength=ncls)
    ncol = K * m + 1                                   # the last column is T
    index = np.concatenate([idx.ravel(), base + np.arange(ncls)])
    value = np.concatenate([val.ravel(), -cls_rate])
    start = np.append(np.arange(0, 3 * K * m + 1, 3), 3 * K * m + ncls)
    cost = np.zeros(ncol)
    cost[-1] = 1.0
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncol, base + ncls
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(ncol)
    lp.col_upper_ = np.full(ncol, highspy.kHighsInf)
    rhs = demand.ravel()
    lp.row_lower_ = np.concatenate([rhs, np.full(ncls, -highspy.kHighsInf)])
    lp.row_upper_ = np.concatenate([rhs, np.zeros(ncls)])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start.astype(np.int32)
    lp.a_matrix_.index_ = index.astype(np.int32)
    lp.a_matrix_.value_ = value
    h = _silent_highs(highspy)
    h.setOptionValue("time_limit", max(float(time_limit_s), 0.01))
    # interior point: 5-10x faster than the simplex on these degenerate LPs; without crossover its duals
    # are optimal to ~1e-9, which is all the certificate needs (the path decomposition wants a vertex)
    h.setOptionValue("solver", "ipm")
    h.setOptionValue("run_crossover", "on" if want_flows else "off")
    h.setOptionValue("ipm_optimality_tolerance", 1e-10)
    if h.passModel(lp) != highspy.HighsStatus.kOk:
        return _LP(None, None, "model rejected", None)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    sol = h.getSolution()
    if not sol.dual_valid:
        return _LP(None, None, status, None)
    y = -np.asarray(sol.row_dual)[base:]            # HiGHS: a binding <= row of a minimisation has dual <= 0
    lengths = np.maximum(y, 0.0)[link_class]
    value = h.getInfo().objective_function_value * dscale * tau if status == "Optimal" else None
    flows = None
    if want_flows and sol.value_valid:
        flows = np.maximum(np.asarray(sol.col_value)[:K * m].reshape(K, m), 0.0) * dscale
    return _LP(value, lengths, status, flows)


# ============================================================================ Garg-Koenemann (Fleischer) phases
@njit(cache=True)
def _tree_order(pred, tail, source, depth, stack):
    """Nodes of the shortest-path tree ``pred`` by depth (parents first; unreached ones, depth -1, first)."""
    n = pred.shape[0]
    depth[:] = -1
    depth[source] = 0
    for v in range(n):
        k = 0
        u = v
        while depth[u] < 0 and pred[u] >= 0:
            stack[k] = u
            k += 1
            u = tail[pred[u]]
        d = depth[u]
        if d < 0:
            continue
        for j in range(k - 1, -1, -1):
            d += 1
            depth[stack[j]] = d
    return np.argsort(depth)


@njit(cache=True)
def _gk_phases(out_ptr, dst, tail, cap, origins, D, lengths, flow, eps, phases, best_lengths):
    """``phases`` phases of Fleischer's max-concurrent-flow algorithm with one shortest-path tree per origin.

    Per origin, what is left of its demand goes down its shortest-path tree under ``lengths`` in steps of
    at most every link's capacity ``cap`` (the link that limits a step is full), and every link's length
    grows by ``1 + eps * (its step flow) / cap``. After each phase the lengths are certified (the exact
    weak-duality ratio ``sum D dist / sum cap lengths``) and normalised; the best lengths go to
    ``best_lengths`` and their ratio is returned. ``flow`` accumulates the routed flow (one ``D`` per phase),
    all arrays in CSR link order."""
    n = out_ptr.shape[0] - 1
    m = dst.shape[0]
    dist = np.empty(n)
    pred = np.empty(n, np.int64)
    depth = np.empty(n, np.int64)
    stack = np.empty(n, np.int64)
    hk = np.empty(m + n + 1)
    hv = np.empty(m + n + 1, np.int64)
    acc = np.empty(n)
    step = np.zeros(m)
    best = 0.0
    for _ in range(phases):
        for i in range(origins.shape[0]):
            left = 1.0
            while left > 1e-12:
                dijkstra(out_ptr, dst, lengths, origins[i], dist, pred, hk, hv)
                order = _tree_order(pred, tail, origins[i], depth, stack)
                acc[:] = 0.0
                for v in range(D.shape[1]):
                    acc[v] = D[i, v] * left
                sigma = 1.0
                for j in range(n - 1, -1, -1):          # children before parents: subtree sums
                    v = order[j]
                    if depth[v] <= 0:
                        break
                    e = pred[v]
                    step[e] = acc[v]
                    acc[tail[e]] += acc[v]
                    if acc[v] * sigma > cap[e]:
                        sigma = cap[e] / acc[v]
                for j in range(n - 1, -1, -1):
                    v = order[j]
                    if depth[v] <= 0:
                        break
                    e = pred[v]
                    if step[e] > 0.0:
                        flow[e] += sigma * step[e]
                        lengths[e] *= 1.0 + eps * sigma * step[e] / cap[e]
                        step[e] = 0.0
                left *= 1.0 - sigma
        num = 0.0
        for i in range(origins.shape[0]):
            dijkstra(out_ptr, dst, lengths, origins[i], dist, pred, hk, hv)
            for v in range(D.shape[1]):
                if D[i, v] > 0.0:
                    num += D[i, v] * dist[v]
        den = 0.0
        for e in range(m):
            den += cap[e] * lengths[e]
        if num / den > best:
            best = num / den
            best_lengths[:] = lengths / den
        lengths /= den
    return best


def _garg_koenemann(net: _Net, floor_us: float, deadline: float, rel_gap: float = 1e-3):
    """Lengths from Fleischer's phases until ``deadline`` (perf_counter) or until the best certificate is
    within ``rel_gap`` of the routed flow's time: ``(lengths in link-id order, upper_us, phases)``, where
    ``upper_us`` is the time of the average routed flow (an upper bound on the LP's optimum).

    The capacities are scaled by the best bound so far (at first ``floor_us``) so that one step (one tree)
    moves an origin's whole demand; ``eps`` starts coarse (0.3: within 0.3 % in a few phases on random
    graphs) and halves, down to ``EPS_MIN``, whenever a batch of phases improves the certificate by less than
    0.01 %; at ``EPS_MIN`` a batch of 16 phases that improves it by less than 0.002 % ends the run
    (random128d3s5: 0.9998 of the LP's optimum after ~270 phases, 2-4 s; 400 more phases add 0.00003)."""
    ptr, dst, order = net.csr()
    tail = net.tail[order].astype(np.int64)
    rate = net.rate[order]
    origins = np.flatnonzero(net.D.any(axis=1)).astype(np.int64)
    D = np.zeros((origins.size, net.num_nodes))
    D[:, :net.D.shape[1]] = net.D[origins]
    lengths = 1.0 / rate                                 # GK's start, up to scale: delta / capacity
    flow = np.zeros(rate.size)
    best_l = lengths.copy()
    best, eps, phases, batch, upper = floor_us, 0.3, 0, 1, np.inf
    # no phase: compiles the kernel on its first use, so that the first batch's time predicts the next ones
    _gk_phases(ptr, dst, tail, rate, origins, D, lengths, flow, eps, 0, np.empty_like(rate))
    while True:
        t = time.perf_counter()
        found = np.empty_like(rate)
        # capacities over the best bound so far: one step (one tree) routes an origin's whole demand
        value = best * _gk_phases(ptr, dst, tail, rate * best, origins, D, lengths, flow, eps, batch, found)
        phases += batch
        upper = min(upper, float((flow / rate).max()) / phases)   # the average flow is feasible
        stalled = value <= best * (1 + 2e-5) and eps == EPS_MIN and batch == 16
        if value <= best * (1 + 1e-4):
            eps = max(eps / 2, EPS_MIN)
        if value > best:
            best, best_l = value, found
        spent = time.perf_counter() - t
        if stalled or best >= upper * (1 - rel_gap) or time.perf_counter() + 2 * spent > deadline:
            break
        batch = min(2 * batch, 16)
    lengths_by_id = np.empty_like(best_l)
    lengths_by_id[order] = best_l
    return lengths_by_id, upper, phases


# ============================================================================ the bound
METHODS = ("auto", "lp", "lp_orbits", "garg_koenemann")


def lb_flow_us(problem: Problem, *, time_budget_s: float = DEFAULT_TIME_BUDGET_S, latency: bool = True,
               max_lp_columns: int = MAX_LP_COLUMNS, method: str = "auto") -> dict:
    """The multicommodity-flow lower bound (µs) of a unicast collective (module docstring).

    Parameters
    ----------
    problem : Problem
        All-to-All, Scatter or Gather (any topology, switched fabrics included).
    time_budget_s : float
        Time for the LP (HiGHS's time limit: its duals so far still certify a bound) or the phases.
    latency : bool
        Count each chunk's latency on every link it crosses (valid: module docstring); ``False`` gives the
        bandwidth-only fluid bound.
    max_lp_columns : int
        Largest LP (commodities x links) solved; above it, Garg-Koenemann phases certify the bound.
    method : str
        ``auto`` (``lp_orbits`` where the topology has symmetry and it fits, else ``lp`` where it fits, else
        ``garg_koenemann``), or one of them by name (``lp_orbits`` also when its LP is large).

    Returns
    -------
    dict
        ``flow_us`` (None for other collectives), ``flow_source`` (module docstring), ``flow_lp_status``
        (HiGHS's model status, or ``phases=<count>``), ``flow_lp_us`` (the LP's own objective: equal to
        ``flow_us`` up to HiGHS's tolerance for ``lp`` and for exact orbits; for ``garg_koenemann`` the time of
        its routed flow, an upper bound on the LP's optimum), ``flow_commodities`` (commodities of the LP) and
        ``flow_time_s``.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.named import named_topology
    >>> p = Problem(named_topology("random16d3s0"), Collective("all_to_all", 1, 1024))
    >>> round(lb_flow_us(p, latency=False)["flow_us"], 1), round(lb_flow_us(p)["flow_us"], 1)
    (37500.0, 37507.5)
    """
    t0 = time.perf_counter()
    if method not in METHODS:
        raise SolverError(f"unknown flow-bound method {method!r}; choose one of {', '.join(METHODS)}")
    out = {"flow_us": None, "flow_source": None, "flow_lp_status": None, "flow_lp_us": None,
           "flow_commodities": 0, "flow_time_s": 0.0}
    if problem.kind not in UNICAST_KINDS:
        return out
    net = _net(problem, latency)
    origins = np.flatnonzero(net.D.any(axis=1))
    if not origins.size:
        out.update(flow_us=0.0, flow_source="lp", flow_lp_status="Optimal", flow_lp_us=0.0)
        out["flow_time_s"] = time.perf_counter() - t0
        return out
    best, source = _certify(net, 1.0 / net.rate), "total_load"
    m = net.num_links
    plan, weights, cls = method, np.ones(origins.size, np.int64), np.arange(m)
    if method in ("auto", "lp_orbits"):
        colour, link_class = _classes(net, problem.num_npus)
        _, first, size = np.unique(colour[origins], return_index=True, return_counts=True)
        if first.size < origins.size and (first.size * m <= max_lp_columns or method == "lp_orbits"):
            # one commodity per class of origins (its first member), capacities summed over link classes
            plan, origins, weights, cls = "lp_orbits", origins[first], size, link_class
        elif method == "lp_orbits" or origins.size * m <= max_lp_columns:
            plan = "lp"
        else:
            plan = "garg_koenemann"
    deadline = t0 + time_budget_s
    if plan == "garg_koenemann":
        lengths, upper, phases = _garg_koenemann(net, best, deadline)
        status, lp_us = f"phases={phases}", upper
    else:
        lp = _solve(net, origins, weights, cls, deadline - time.perf_counter())
        lengths, status, lp_us = lp.lengths, lp.status, lp.value_us
    if lengths is not None:
        value = _certify(net, lengths)
        if value >= best * (1 - 1e-9):      # a tie with the lengths occ: the LP proves them optimal
            best, source = max(best, value), plan
    out.update(flow_us=float(best), flow_source=source, flow_lp_status=status, flow_lp_us=lp_us,
               flow_commodities=int(origins.size), flow_time_s=time.perf_counter() - t0)
    return out


# ============================================================================ paths (for flow routing)
@dataclass(frozen=True)
class FlowSolution:
    """The plain LP's optimal flow: ``flows[k, e]`` chunks of origin ``origins[k]`` on link ``e`` (link ids of
    the topology; for a Gather-like demand the LP ran on the reversed links: ``reversed``)."""

    origins: np.ndarray
    flows: np.ndarray
    D: np.ndarray
    reversed: bool
    T_us: float
    status: str


def flow_solution(problem: Problem, *, time_budget_s: float = DEFAULT_TIME_BUDGET_S, latency: bool = True,
                  max_lp_columns: int = MAX_LP_COLUMNS) -> FlowSolution:
    """Solve the plain LP (one commodity per origin, no symmetry reduction) and keep its flow.

    Raises :class:`~tacos_bench.errors.SolverError` when the LP has more than ``max_lp_columns``
    commodity-link pairs or did not finish.
    """
    net = _net(problem, latency)
    origins = np.flatnonzero(net.D.any(axis=1))
    if origins.size * net.num_links > max_lp_columns:
        raise SolverError(f"the flow LP of {problem.describe()} has {origins.size * net.num_links} "
                          f"commodity-link pairs, above max_lp_columns={max_lp_columns}")
    if not origins.size:
        return FlowSolution(origins, np.zeros((0, net.num_links)), net.D, net.reversed, 0.0, "Optimal")
    lp = _solve(net, origins, np.ones(origins.size, np.int64), np.arange(net.num_links), time_budget_s,
                want_flows=True)
    if lp.status != "Optimal" or lp.flows is None:
        raise SolverError(f"the flow LP of {problem.describe()} ended {lp.status!r}")
    return FlowSolution(origins, lp.flows, net.D, net.reversed, float(lp.value_us), lp.status)


def path_decomposition(problem: Problem, solution: FlowSolution | None = None, *, tol: float = 1e-9,
                       **options) -> dict[tuple[int, int], list[tuple[tuple[int, ...], float]]]:
    """Per ``(source, destination)`` pair with demand: its LP flow as paths (link ids, source to destination)
    with the fraction of the pair's chunks on each (fractions sum to 1).

    Paths are peeled from each origin's flow toward each sink in turn: a path in the support of what is
    left (breadth first: fewest links), as much as its least link and the sink's remaining demand allow.
    Flow on cycles is dropped. ``options`` go to :func:`flow_solution` when ``solution`` is not given.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(3, bidirectional=False), Collective("scatter", 1, 3))
    >>> path_decomposition(p)
    {(0, 1): [((0,), 1.0)], (0, 2): [((0, 1), 1.0)]}
    """
    sol = solution or flow_solution(problem, **options)
    topo = problem.topology
    tail, head = topo.src.astype(np.int64), topo.dst.astype(np.int64)
    if sol.reversed:
        tail, head = head, tail
    out_links = [[] for _ in range(topo.num_nodes)]
    for e in range(tail.size):
        out_links[int(tail[e])].append(e)
    result = {}
    for k, o in enumerate(sol.origins.tolist()):
        left = sol.flows[k].copy()
        scale = max(float(sol.D[o].max()), 1.0)
        for d in np.flatnonzero(sol.D[o]).tolist():
            need = float(sol.D[o, d])
            paths = []
            while need > tol * scale:
                path = _bfs_path(out_links, tail, head, left, o, d, tol * scale)
                if path is None:           # the LP's tolerance left a sliver: the rest on the last path
                    break
                amount = min(need, float(left[path].min()))
                left[path] -= amount
                need -= amount
                paths.append((path, amount))
            if not paths:
                raise SolverError(f"the LP flow of origin {o} does not reach {d}")
            total = sum(a for _, a in paths)
            pairs = [(tuple(p[::-1].tolist()) if sol.reversed else tuple(p.tolist()), a / total) for p, a in paths]
            result[(d, o) if sol.reversed else (o, d)] = pairs
    return dict(sorted(result.items()))


def _bfs_path(out_links, tail, head, left, o, d, tol):
    """Fewest-link path ``o -> d`` over links with more than ``tol`` flow left (link ids), or None."""
    prev = {o: -1}
    queue = [o]
    for u in queue:
        if u == d:
            break
        for e in out_links[u]:
            v = int(head[e])
            if v not in prev and left[e] > tol:
                prev[v] = e
                queue.append(v)
    if d not in prev:
        return None
    path = []
    v = d
    while v != o:
        path.append(prev[v])
        v = int(tail[prev[v]])
    return np.array(path[::-1], np.int64)
