"""The ingress and egress bounds (docs/bounds.md (a), (e)): a node must receive every chunk it lacks, and in-link
``l`` completes at most ``floor(T / t_l)`` deliveries by time ``T`` (the count bound,
:func:`~tacos_bench.bounds.load.count_time_us`); likewise a node sends what only it holds over its out-links.

Refined (when the all-pairs distances are affordable) by the earliest time a chunk can *start* on a node's
in-links: chunks that cannot start before ``tau`` must fit in ``[tau, T]``. For All-Reduce the count is
``N*cpn`` per node (every chunk, both directions), plus a global bound from one-way gossip (every chunk needs
``2(N-1)`` transfers).

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> t = ring(4, bidirectional=False)
>>> _basic_ingress(_Graph(t, np.ones(t.num_links)), 3)      # 3 chunks over one in-link
3.0
"""

from __future__ import annotations

import numpy as np

from ._graph import _Graph, _node_groups
from .load import count_time_us

REFINE_MAX_NPUS = 2048               # default: the refinement keeps an N x N matrix of entry times


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


def _all_reduce_ingress(g: _Graph, rg: _Graph, t: np.ndarray, C: int, E: np.ndarray | None,
                        Er: np.ndarray | None) -> dict:
    """All-Reduce: every chunk needs one transfer into and one out of every NPU; the one carrying the
    farthest contribution into ``v`` cannot start before ``max_o E[o, v]`` (mirror image for the way out,
    ``Er`` on the reversed links); one-way gossip needs ``2(N-1)`` transfers per chunk (Harary-Schwenk
    argument, see docs/bounds.md)."""
    n = g.n
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
    gossip = float(count_time_us(t, np.array([0, t.size]), np.array([2 * (n - 1) * C]))[0])
    return {"ingress_basic_us": basic, "ingress_refined": E is not None, "ingress_us": max(ingress, gossip),
            "gossip_us": gossip}


def _copy_ingress_egress(g: _Graph, rg: _Graph, src: np.ndarray, dst: np.ndarray, every: np.ndarray,
                         moving: np.ndarray) -> tuple[float, float]:
    """``(ingress, egress)`` of a copy collective: every NPU receives each multicast chunk it does not
    source and each unicast chunk addressed to it, and sends each of its chunks that moves at least once."""
    n = g.n
    need_in = np.full(n, int(every.sum())) - np.bincount(src[every], minlength=n)
    need_in += np.bincount(dst[~every & (dst != src)], minlength=n)
    need_out = np.bincount(src[moving], minlength=n)
    t_in, ptr = _node_groups(g)
    ingress = float(count_time_us(t_in, ptr, need_in).max())
    t_out, optr = _node_groups(rg)
    egress = float(count_time_us(t_out, optr, need_out).max())
    return ingress, egress
