"""The cut bounds (docs/bounds.md (c), (i)): every chunk owned outside a set ``S`` of NPUs and needed inside
must enter ``S`` over the links into it (ForestColl's cut bound).

All-Gather and Reduce-Scatter maximise it over every cut with a parametric max-flow (a Dinkelbach sweep over
pinned sinks, :func:`max_ratio_cut`), not enumeration; All-Reduce over the directed global min cut
(:func:`min_in_cut`); a Broadcast over its root's min cuts. The other copy collectives try the sets likely to
be tight (:func:`_candidate_cuts`: faster-link groups, grid and server-torus halves, spectral bisections).
Both the latency-aware chunk form and ForestColl's pure-bandwidth form (``cut_bw_us``) are computed, each also
as a whole-chunk count through the cut's links.

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> min_in_cut(ring(4, bidirectional=False), np.ones(4))["value"]      # one link into any set
1.0
"""

from __future__ import annotations

import numpy as np

from ..cost import BYTES_PER_GIB
from ..problem import Problem
from ..topology import Topology
from ._graph import _FlowNet, _Graph, npu_orbits
from ._options import _Opts
from .drain import _drain_groups
from .load import count_time_us

# Defaults of the size limits above which the cut bound switches to a cheaper valid bound.
CUT_MAX_NPUS = 1024
CUT_SAMPLE_PINS = 0                  # above CUT_MAX_NPUS: singleton cuts only (a flow costs ~diameter * L)

_REL_TOL = 1e-12          # relative tolerance of the parametric cut sweep (termination only)

SPECTRAL_MAX_NPUS = 1024  # dense eigen-decomposition of the Laplacian up to this size
# a degenerate Fiedler eigenspace gives one vector per NPU (its projections) up to this size (each adds up to 6
# candidate sets: torus16x16 All-to-All bounds took 0.45 s with them, 0.06 s without)
SPECTRAL_PROJECTED_MAX_NPUS = 128


def _pins(n: int, max_pins: int | None) -> np.ndarray:
    if max_pins is None or max_pins >= n:
        return np.arange(n)
    if max_pins <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, max_pins).round().astype(np.int64))


def _best_singleton_cut(into: np.ndarray, out_of: np.ndarray) -> tuple[float, np.ndarray]:
    """The better of the singleton cuts ``S = {v}`` (value ``into[v]``) and ``S = V - {v}`` (``out_of[v]``),
    ``{v}`` on a tie: ``(value, S as a boolean mask)``."""
    v_in, v_out = int(np.argmin(into)), int(np.argmin(out_of))
    S = np.zeros(into.size, dtype=bool)
    if into[v_in] <= out_of[v_out]:
        S[v_in] = True
        return float(into[v_in]), S
    S[:] = True
    S[v_out] = False
    return float(out_of[v_out]), S


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
    lam, S = _best_singleton_cut(cin / (n - 1), cout)
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
    best, S = _best_singleton_cut(cin, cout)
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


def _chunk_rate_caps(t: np.ndarray) -> np.ndarray:
    """Chunks per µs a link can complete in the limit: 1 / t_l (latency included)."""
    return 1.0 / t


def _proportional(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a = k * b`` elementwise for one constant ``k`` (e.g. homogeneous links)."""
    r = a / b
    return bool(r.size == 0 or np.ptp(r) <= 1e-12 * abs(r[0]))


def _bytes_per_us(bw_GiBps: np.ndarray) -> np.ndarray:
    return np.asarray(bw_GiBps, dtype=np.float64) * BYTES_PER_GIB / 1e6


def _cut_links_time(g: _Graph, S: np.ndarray, need: int) -> float:
    """Whole-chunk count bound through the links entering ``S``."""
    sel = ~S[g.src] & S[g.dst]
    t = g.w[sel]
    return float(count_time_us(t, np.array([0, t.size]), np.array([need]))[0])


def _cut_method(name: str, n: int, pins: int | None) -> str:
    if pins is None:
        return name
    k = len(_pins(n, pins))
    return f"singleton-cuts+{name}({k} pins)" if k else "singleton-cuts"


def _ag_cut(topo, g, t, cpn, chunk_bytes, opts) -> dict:
    """Every chunk owned outside ``S`` must enter ``S``: ``cpn`` over the least capacity into a cut per NPU
    outside it (:func:`max_ratio_cut`)."""
    return _swept_cut(topo, g, t, chunk_bytes, opts, max_ratio_cut, "ratio", cpn,
                      lambda S: int(topo.num_npus - S.sum()) * cpn, "parametric-maxflow")


def _all_reduce_cut(topo: Topology, g: _Graph, t: np.ndarray, C: int, chunk_bytes: int, opts: _Opts) -> dict:
    """Every chunk of an All-Reduce must enter every proper non-empty ``S`` at least once: ``C`` over the
    directed global min cut (:func:`min_in_cut`)."""
    return _swept_cut(topo, g, t, chunk_bytes, opts, min_in_cut, "value", C, lambda S: C, "global-min-cut")


def _swept_cut(topo, g, t, chunk_bytes, opts, sweep, key, chunks, need, name) -> dict:
    """The cut bound of ``sweep`` (:func:`max_ratio_cut` or :func:`min_in_cut`, whose optimum is ``r[key]``):
    ``chunks`` over it, latency-aware and in ForestColl's bandwidth form, and each as the whole-chunk count of
    ``need(S)`` chunks through the optimal cut's links."""
    n = topo.num_npus
    pins = None if n <= opts.cut_max_npus else opts.cut_sample_pins
    # Latency-aware: a link completes at most T / t_l chunks by T (>= the pure-bandwidth form on every cut).
    r = sweep(topo, _chunk_rate_caps(t), max_pins=pins)
    whole = _cut_links_time(g, r["S"], need(r["S"]))
    # ForestColl's pure-bandwidth bound (no latency), reported for comparison.
    bw = _bytes_per_us(topo.bw_GiBps)
    if _proportional(bw, _chunk_rate_caps(t)):
        # Same cut problem up to a constant factor: same optimal S, no second sweep.
        rb = {key: r[key] * float(bw[0] * t[0]), "S": r["S"], "exact": r["exact"], "flows": 0}
    else:
        rb = sweep(topo, bw, max_pins=pins)
    cut_bw = chunks * chunk_bytes / rb[key]
    whole_bw = _cut_links_time(g, rb["S"], need(rb["S"]))
    return {"cut_us": max(chunks / r[key], whole, cut_bw, whole_bw), "cut_bw_us": cut_bw,
            "cut_exact": r["exact"] and rb["exact"], "cut_method": _cut_method(name, n, pins),
            "cut_flows": r["flows"] + rb["flows"], "cut_size": int(r["S"].sum())}


def _copy_cut(problem: Problem, g: _Graph, t: np.ndarray, src: np.ndarray, dst: np.ndarray, every: np.ndarray,
              moving: np.ndarray, opts: _Opts) -> dict:
    """The cut bound of a copy collective: the root's min cuts for a Broadcast up to ``cut_max_npus`` NPUs
    (exact), otherwise the whole-chunk count into and out of each set of :func:`_candidate_cuts`."""
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
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
    return {"cut_us": cut or None, "cut_bw_us": None, "cut_exact": cut_exact, "cut_method": method,
            "cut_flows": flows}


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
