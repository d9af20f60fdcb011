"""The pipeline bounds (docs/bounds.md (g), ``pipeline_us``) of the copy collectives beyond All-Gather: the chunks
a node sends (receives), sorted by the distance they still have to go (have come), through its links' start
(end) slots; and the first- and last-hop bounds, per source and NPU, through the source's out-links and the
NPU's in-links.

Examples
--------
>>> _pipeline_bound(np.array([3.0, 1.0, 2.0]), start_slots(np.array([1.0]), 3))   # one link: 3 + 0, 2 + 1, 1 + 2
3.0
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from ._graph import _distance_row, _Graph, _node_groups

HOP_SLOT_MAX_WORK = 2e8              # candidate slot values of the first/last-hop pipeline bounds, all sources


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
    out-neighbours'), for a solver's stopping test. :func:`tacos_bench.bounds.lower_bounds` includes both.

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
