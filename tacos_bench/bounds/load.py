"""Link load and the whole-chunk count bound: the least time a group of links needs to carry a number of
chunks (the kernel of the ingress, cut and fabric bounds), and the link load bound of the unicast collectives
(docs/bounds.md (h)): every unicast chunk occupies at least its shortest path's total link time, and the links
share that work.

Examples
--------
>>> count_time_us(np.array([1.0, 2.0]), np.array([0, 2]), np.array([3])).tolist()   # 2 chunks on the fast link
[2.0]
"""

from __future__ import annotations

import numpy as np


def count_time_us(t: np.ndarray, ptr: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Smallest ``T`` with ``sum_l floor(T / t_l) >= need`` for each group of links.

    Group ``g`` owns the link times ``t[ptr[g]:ptr[g+1]]``. A link that carries
    one chunk at a time and needs ``t_l`` per chunk completes at most
    ``floor(T / t_l)`` chunks by ``T``, so ``T`` is a lower bound on delivering
    ``need`` chunks through the group. The minimum is always a candidate
    ``k * t_l``; only the candidates between ``need / R`` and ``(need + deg) / R``
    (``R = sum 1/t_l``) can be it, about ``2 * deg`` per group, so the search is
    a single vectorised sort.

    Parameters
    ----------
    t : ndarray of float
        Link times (> 0), grouped contiguously.
    ptr : ndarray of int
        Group boundaries, length ``G + 1``.
    need : ndarray of int
        Chunks to deliver per group; groups with ``need <= 0`` get 0.

    Returns
    -------
    ndarray of float
        ``T`` per group (``inf`` for a group without links that needs chunks).

    Examples
    --------
    >>> count_time_us(np.array([1.0, 1.0, 1.0, 1.0]), np.array([0, 4]), np.array([15])).tolist()
    [4.0]
    >>> count_time_us(np.array([2.0, 3.0]), np.array([0, 2]), np.array([4])).tolist()
    [6.0]
    """
    t = np.asarray(t, dtype=np.float64)
    ptr = np.asarray(ptr, dtype=np.int64)
    need = np.asarray(need, dtype=np.int64)
    G = need.shape[0]
    deg = np.diff(ptr)
    out = np.zeros(G, dtype=np.float64)
    out[(need > 0) & (deg == 0)] = np.inf
    act = np.flatnonzero((need > 0) & (deg > 0))
    if act.size == 0:
        return out
    grp_all = np.repeat(np.arange(G), deg)
    tmin = np.full(G, np.inf)
    tmax = np.zeros(G)
    np.minimum.at(tmin, grp_all, t)
    np.maximum.at(tmax, grp_all, t)
    # Groups whose links are all equally fast: closed form ceil(need/deg) * t.
    uni = act[tmin[act] == tmax[act]]
    out[uni] = ((need[uni] + deg[uni] - 1) // deg[uni]) * tmin[uni]
    gen = act[tmin[act] != tmax[act]]
    if gen.size == 0:
        return out
    keep = np.zeros(G, dtype=bool)
    keep[gen] = True
    lk = np.flatnonzero(keep[grp_all])
    g = grp_all[lk]
    tl = t[lk]
    R = np.bincount(g, weights=1.0 / tl, minlength=G)
    lo = need / np.where(R > 0, R, 1.0)
    hi = (need + deg) / np.where(R > 0, R, 1.0)
    # Candidates below kmin on a link are < lo - t_l <= T*, so they only shift the rank (base);
    # the -1 / +1 margins absorb rounding of the float ceil/floor.
    kmin = np.maximum(1, np.ceil(lo[g] / tl).astype(np.int64) - 1)
    kmax = np.maximum(kmin, np.floor(hi[g] / tl).astype(np.int64) + 1)
    cnt = kmax - kmin + 1
    base = np.zeros(G, dtype=np.int64)
    np.add.at(base, g, kmin - 1)
    rep = np.repeat(np.arange(lk.size), cnt)
    k = kmin[rep] + (np.arange(rep.size) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    val = k * tl[rep]
    gg = g[rep]
    order = np.lexsort((val, gg))
    per = np.bincount(gg, minlength=G)
    start = np.cumsum(per) - per
    rank = need[gen] - base[gen]
    if np.any(rank < 1) or np.any(rank > per[gen]):  # pragma: no cover - guarded by the margins above
        raise AssertionError("count_time_us: candidate window missed the optimum")
    out[gen] = val[order[start[gen] + rank - 1]]
    return out


def _link_load_us(d1: np.ndarray, num_links: int) -> float:
    """The link load bound: the total link time ``d1`` the unicast chunks need at least (each its shortest
    path's), spread over every link.

    >>> _link_load_us(np.array([1.0, 2.0, 3.0]), 2)
    3.0
    """
    return float(d1.sum()) / max(num_links, 1)
