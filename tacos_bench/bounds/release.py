"""The bound of late NPUs (``collective.release_us``): what a straggler must still send and receive once it joins.

An NPU ``v`` that joins at ``r`` neither sends nor receives before ``r``. Every chunk whose data ``v`` holds (its
source, or one of its contributors) and that some other NPU needs must leave ``v`` on one of its out-links, one
chunk per transfer; every chunk ``v`` needs and does not hold whole must arrive on one of its in-links. ``k`` such
transfers over links of chunk times ``t_l`` (one at a time per link) take at least the optimum of ``k`` unit jobs on
machines of speeds ``1/t_l``, ``min over n_l with sum n_l = k of max_l n_l t_l``, computed exactly
(:func:`tacos_bench.bounds.load.count_time_us`). So the collective takes at least ``r + max(send, receive)`` for each late NPU;
the bounds of the problem without release stay valid too, and the larger is the bound.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> p = Problem(ring(4), Collective("all_gather", 1, 1024, release=((0, 100.0),)))
>>> t = float(p.link_time_us[0])
>>> b = release_bound_us(p)            # NPU 0 receives 3 chunks over 2 in-links from 100 µs on
>>> b == 100.0 + 2 * t
True
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from .load import count_time_us


def late_npu_counts(problem: Problem, v: int) -> tuple[int, int]:
    """``(send, receive)``: the chunks NPU ``v`` must send (it holds data of them that another NPU needs) and
    receive (it needs them and does not hold them whole)."""
    d = problem.demand
    n, C = problem.num_npus, d.num_chunks
    nsrc, ndst = np.diff(d.src_ptr), np.diff(d.dst_ptr)
    src_chunk = np.repeat(np.arange(C), nsrc)
    dst_chunk = np.repeat(np.arange(C), ndst)
    v_src = np.zeros(C, bool)
    v_src[src_chunk[d.src_ids == v]] = True
    v_dst = np.zeros(C, bool)
    v_dst[dst_chunk[d.dst_ids == v]] = True
    holds = (nsrc == 0) | v_src                       # an empty list: every NPU
    needs = (ndst == 0) | v_dst
    others_need = np.where(ndst == 0, n > 1, ndst - v_dst > 0)
    others_hold = np.where(nsrc == 0, n > 1, nsrc - v_src > 0)
    return int(np.sum(holds & others_need)), int(np.sum(needs & others_hold))


def transfers_time_us(count: int, link_times: np.ndarray) -> float:
    """The least time ``count`` one-chunk transfers take over links of chunk times ``link_times`` (one transfer
    at a time per link): :func:`tacos_bench.bounds.load.count_time_us` of one group.

    >>> transfers_time_us(3, np.array([1.0, 2.0]))
    2.0
    """
    t = np.asarray(link_times, np.float64)
    return float(count_time_us(t, np.array([0, t.size]), np.array([int(count)]))[0])


def release_bound_us(problem: Problem) -> float:
    """The largest ``r + max(send, receive)`` over the late NPUs (see the module docstring); 0 without any."""
    topo, lt = problem.topology, problem.link_time_us
    best = 0.0
    for v, r in problem.collective.release:
        if r <= 0:
            continue
        send, recv = late_npu_counts(problem, v)
        out_t, in_t = lt[topo.src == v], lt[topo.dst == v]
        best = max(best, r + max(transfers_time_us(send, out_t), transfers_time_us(recv, in_t)))
    return best


def with_release_bound(problem: Problem, healthy: dict) -> dict:
    """The bounds ``healthy`` of the problem without release, with ``release_us`` added and ``best_us`` raised to
    it where it is higher (``best_source`` ``release``)."""
    out = dict(healthy)
    rb = release_bound_us(problem)
    out["release_us"] = rb
    if rb > (out.get("best_us") or 0.0) * (1 + 1e-12):
        out["best_us"], out["best_source"] = rb, "release"
    return out
