"""The group import + drain bound (docs/bounds.md (d), ``drain_us``): for a group ``S`` of faster links (a
server, a pod), the chunks from outside enter it one per outside in-link slot, so just before each multiple
``a`` of an outside link time some are still outside; every member must then receive all of those in what is
left of the schedule, over its outside and inside in-links. When some member cannot, no schedule ends that soon.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.named import named_topology
>>> p = Problem(named_topology("hetero2x2x4"), Collective("all_gather", 2, 1.0))
>>> t = np.asarray(p.link_time_us, np.float64)
>>> r, i = t.max(), t.min()                     # a rail, a link inside a server
>>> bool(np.isclose(_drain_bound(p.topology, t, 2, 0.0), 3 * r + 2 * i))   # above the cut bound, 3 r
True
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..topology import Topology
from ..topology.tiers import faster_link_components

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


def _all_reduce_drain(topo: Topology, t: np.ndarray, cpn: int, floor: float) -> float:
    """An All-Reduce schedule contains a Reduce-Scatter and the owners' contributions flow like an All-Gather:
    both phases' drain bounds hold for it (the reversed links carry the Reduce-Scatter's)."""
    return max(_drain_bound(topo, t, cpn, floor), _drain_bound(topo.reversed(), _reversed_times(topo, t), cpn, floor))


def _reversed_times(topo: Topology, t: np.ndarray) -> np.ndarray:
    """Per-link times of ``topo.reversed()`` in its link order (link u->v becomes v->u)."""
    rt = topo.reversed()
    return np.asarray(t, np.float64)[topo.link_ids(rt.dst, rt.src)]
