"""``greedy_plus``'s reservation candidates for rooted collectives: each chunk (or request) in turn on its
earliest-arrival path through the links already reserved (:mod:`solvers.greedy._kernel_reserve`).

* Scatter, and Gather time-reversed (:func:`reserve_schedule`): the chunks farthest first (ties at random),
  then squeaky-wheel rounds: the chunks that arrived after the bound move ahead. ``hetero64`` Scatter and
  Gather (1 chunk per NPU): the routed greedy ends 1.052x the lower bound on 55 of 64 roots and 1.104-1.156x
  on 9; this candidate meets the bound (so it is optimal) on every root, in 3.6 runs on average.
* Broadcast, and Reduce time-reversed (:func:`reserve_broadcast`): one request per (chunk, NPU), from three
  kinds of starting order in turn (NPU by NPU, by the request's time in an ideal pipeline, by chunk; the
  farthest NPUs first within each), reordered by *squeaky-wheel* rounds (Joslin & Clements, JAIR 1999): after
  each run the requests that arrived after the lower bound move ahead in proportion to how late they were,
  and the next run serves them earlier. A pipelined Broadcast is at its bound only if the NPUs
  whose in-links limit it are fed without a gap; the greedy, matching idle links at each event, leaves those
  gaps on heterogeneous links (``hetero_mesh4x4``, 8 chunks: 1.077-1.0995x the pipeline bound on every root,
  where CP-SAT meets it), and these rounds close them (every root at the bound, docs/greedy.md).
"""

from __future__ import annotations

import time

import numpy as np

from tacos_bench.collective import BROADCAST
from tacos_bench.graph import shortest_path_tree
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

from ..base import StartState

from . import _kernel_reserve as K
from .options import MULTICAST_WORK, RESERVE_WORK

# the candidate runs up to this many NPUs x chunks (its pool and probes grow with both)
RESERVE_MAX_PAIRS = 1 << 22
# tie orders tried: at most reserve_tries, and no more than RESERVE_WORK (the option reserve_work's default)
# over (chunks x links) per order, at least 1 (hetero64: 204 orders at most; hetero512: 2, each ~50 ms)
# Scatter/Gather rounds: a late chunk gains this many times (chunks / bound) priority per µs late (the first
# order ranks the chunks 0, -1, -2, ...). hetero64, 64 roots x 4 seeds, every pair at the bound either way:
# 3.6 runs a root on average (16 at most) against 16.3 (97) with independent tie orders; gain 2: 5.9, 8: 7.7
SCATTER_LATE_GAIN = 4.0
# the Broadcast candidate: up to this many (chunk, NPU) requests; at most this work over (requests x links) in
# all its runs (hetero_mesh4x4, 8 chunks: up to 364 runs, 333 needed at the 99th percentile over seeds;
# hetero64: 6 runs, where no run beats the greedy); a fresh order after this many squeaky-wheel rounds
# (the candidate alone on hetero_mesh4x4, 16 roots: 8 chunks, 48 seeds, 1 of 768 above the bound after 364
# runs; 16 chunks, 8 seeds, none above 1.0035x; with one kind of order, NPU by NPU, every 100 runs: 17 of 512
# (32 seeds) and none; docs/greedy.md, *broadcast_reserve_tries*)
MULTICAST_MAX_REQUESTS = 1 << 14
# (the work cap, MULTICAST_WORK, is the option broadcast_reserve_work's default)
SQUEAKY_ROUNDS = 40
SQUEAKY_REQUESTS_PER_ROUND = 4      # ... or one per this many requests, if more (hetero_mesh4x4, 16 chunks: 60)
# the kinds of fresh order in turn (0: by the ideal pipeline's time, 1: by chunk, 2: NPU by NPU)
SQUEAKY_KINDS = np.array([2, 0, 1], np.int64)
# runs per kernel call (the deadline is checked between calls)
MULTICAST_BATCH = 16


def reserve_schedule(problem: Problem, *, seed: int, tries: int, bound_us: float | None = None,
                     deadline: float | None = None, stats: dict | None = None,
                     start: StartState | None = None, work: int = 0) -> Schedule | None:
    """The fastest of up to ``tries`` reservation runs (fewer on large problems: at most ``work`` (default
    ``RESERVE_WORK``) over chunks to route x links per run, at least one): the first serves the chunks farthest
    first, ties in an order drawn from ``seed``; with ``bound_us``, each later run serves first the chunks that
    arrived after it, in proportion to their lateness (``SCATTER_LATE_GAIN``), and without it each run draws
    new ties. Stops once a run ends at ``bound_us`` or after ``deadline`` (``time.perf_counter()``;
    the first run always completes). From ``start`` (a resume after a fault) a chunk leaves from any of its
    holders, from the time its copy is there (``hold_time``), links are busy until ``link_free`` and the
    failed ones are not used. ``None`` when the collective is not unicast or too large (``RESERVE_MAX_PAIRS``).

    >>> from tacos_bench import Collective
    >>> from tacos_bench.topology.generators import mesh2d
    >>> from tacos_bench.verify import verify
    >>> p = Problem(mesh2d(3, 3), Collective("scatter", 1, 9, root=4))
    >>> s = reserve_schedule(p, seed=0, tries=2)
    >>> verify(p, s).valid, round(s.makespan_us / float(p.link_time_us.max()))   # 8 chunks, 4 out-links: 2 slots
    (True, 2)
    """
    topo = problem.topology
    N, C = problem.num_npus, problem.num_chunks
    dst = np.asarray(problem.destinations, np.int64)
    src = np.asarray(problem.sources, np.int64)
    if tries <= 0 or (dst < 0).any() or (src < 0).any() or N * C > RESERVE_MAX_PAIRS:
        return None
    t = np.ascontiguousarray(problem.link_time_us, dtype=np.float64)
    free = np.zeros(t.size)
    if start is None:
        hptr, hnode, htime = np.arange(C + 1, dtype=np.int64), src, np.zeros(C)
    else:
        hptr, hnode, htime, dst = _holders(problem, start)
        keep = np.asarray(start.links, bool)
        if start.link_free is not None:
            free = np.asarray(start.link_free, np.float64).copy()
        free[~keep] = np.inf
    out_ptr = np.ascontiguousarray(topo.out_ptr, dtype=np.int64)
    lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
    ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
    # each chunk's earliest possible arrival, ignoring every other chunk: farthest first
    dist = _earliest_arrivals(topo, np.where(np.isfinite(free), t, np.inf), hptr, hnode, htime, dst)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E5E]))
    moving = int(np.sum(dist > 0))
    tries = int(min(tries, max(1, (work or RESERVE_WORK) // max(moving * topo.num_links, 1))))
    cap = max(1024, 8 * C)
    best: Schedule | None = None
    runs = 0
    # squeaky-wheel rounds (as the Broadcast candidate's): a chunk that arrived after the bound moves ahead of
    # the others in proportion to its lateness; the first order is farthest first, ties at random
    prio = np.zeros(C)
    gain = SCATTER_LATE_GAIN * C / max(bound_us or 0.0, 1e-12)
    for _ in range(tries):
        if best is not None and (deadline is not None and time.perf_counter() > deadline
                                 or bound_us is not None and best.makespan_us <= bound_us * (1 + 1e-9)):
            break
        key = rng.random(C)
        if runs == 0 or not bound_us:
            order = np.lexsort((key, -dist)).astype(np.int64)
            prio[order] = -np.arange(C, dtype=np.float64)
        else:
            order = np.lexsort((key, -dist, -prio)).astype(np.int64)
        while True:
            out = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap), np.empty(cap))
            n = K.reserve_routes(N, out_ptr, lsrc, ldst, t, hptr, hnode, htime, dst, free, order, *out)
            if n != -2:
                break
            cap *= 2
        if n < 0:   # cannot happen on a strongly connected topology
            return None
        runs += 1
        chunk, link, st, end = (a[:n] for a in out)
        if bound_us:
            arr = np.zeros(C)
            np.maximum.at(arr, chunk, end)
            late = arr > bound_us * (1 + 1e-9)
            prio[late] += (arr[late] - bound_us) * gain
        sched = Schedule(chunk, lsrc[link], ldst[link], st, end, np.full(n, COPY, np.int8))
        if best is None or sched.makespan_us < best.makespan_us * (1 - 1e-12):
            best = sched
    if stats is not None:
        stats.update(reserve_runs=runs, reserve_us=best.makespan_us if best is not None else None)
    return best


def reserve_broadcast(problem: Problem, *, seed: int, tries: int, bound_us: float | None = None,
                      deadline: float | None = None, stats: dict | None = None,
                      beat_us: float | None = None, work: int = MULTICAST_WORK) -> Schedule | None:
    """The fastest of up to ``tries`` reservation runs of a Broadcast (:func:`K.reserve_multicast`), request
    orders from ``seed``: every ``SQUEAKY_ROUNDS`` runs (one per ``SQUEAKY_REQUESTS_PER_ROUND`` requests if
    more) a fresh order, the kinds ``SQUEAKY_KINDS`` in turn (NPU by NPU, by the request's time in an ideal
    pipeline from the root, by chunk; the farthest NPUs first within each, then at random:
    :func:`K.squeaky_multicast`); after each run, every request that arrived after
    ``bound_us`` (default: the problem's lower bound, :func:`tacos_bench.bounds.lower_bounds`) gains priority
    in proportion to its lateness, and the next run serves requests by priority (ties at random). Stops at
    the bound, after ``deadline`` (checked between batches of runs; the first run always completes) or at
    ``work`` (requests x links x runs); ``None`` for another collective, beyond ``MULTICAST_MAX_REQUESTS`` or
    ``work`` for one run, or when ``beat_us`` (a schedule already found) is at the bound.

    >>> from tacos_bench import Collective
    >>> from tacos_bench.topology.generators import mesh2d
    >>> from tacos_bench.verify import verify
    >>> p = Problem(mesh2d(3, 3), Collective("broadcast", 4, 4, root=4))
    >>> s = reserve_broadcast(p, seed=0, tries=50)
    >>> verify(p, s).valid, round(s.makespan_us / float(p.link_time_us.max()))   # 1 hop to the edges, then 1 more
    (True, 3)
    """
    if problem.kind != BROADCAST or tries <= 0:
        return None
    topo = problem.topology
    N, C, root = problem.num_npus, problem.num_chunks, int(problem.collective.root)
    P = C * (N - 1)
    if P <= 0 or P > MULTICAST_MAX_REQUESTS or P * topo.num_links > work:
        return None
    if bound_us is None:
        from tacos_bench.bounds import lower_bounds
        bound_us = float(lower_bounds(problem)["best_us"])
    if beat_us is not None and beat_us <= bound_us * (1 + 1e-9):
        return None
    t = np.ascontiguousarray(problem.link_time_us, dtype=np.float64)
    out_ptr = np.ascontiguousarray(topo.out_ptr, dtype=np.int64)
    lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
    ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
    free = np.zeros(t.size)
    dist = shortest_path_tree(N, out_ptr, ldst, t, root)[0]
    npus = np.delete(np.arange(N, dtype=np.int64), root)
    req_npu = np.repeat(npus, C)
    req_chunk = np.tile(np.arange(C, dtype=np.int64), N - 1)
    tries = int(min(tries, max(1, work // max(P * t.size, 1))))
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xB0CA]))
    # every NPU but the root receives every chunk once: a run writes exactly P transfers
    out = tuple(np.empty(P, dt) for dt in (np.int64, np.int64, np.float64, np.float64))
    kept = tuple(np.empty(P, dt) for dt in (np.int64, np.int64, np.float64, np.float64))
    best = np.array([np.inf])
    prio = np.zeros(P)
    hold = np.empty((C, N))
    req_dist = dist[req_npu]
    t_out = t[out_ptr[root]:out_ptr[root + 1]]
    slot = float(t_out.max()) / t_out.size       # the root's time per chunk sent, all its links busy
    rounds = max(SQUEAKY_ROUNDS, P // SQUEAKY_REQUESTS_PER_ROUND)
    runs = 0
    while runs < tries and best[0] > bound_us * (1 + 1e-9):
        if runs and deadline is not None and time.perf_counter() > deadline:
            break
        # a batch of runs in the kernel; the deadline is checked between batches (the first run always completes)
        batch = min(tries - runs, 1 if runs == 0 else MULTICAST_BATCH)
        fresh = sum(1 for r in range(runs, runs + batch) if r % rounds == 0)
        rnd = rng.random(batch * P + fresh * (P + N))
        done = K.squeaky_multicast(N, out_ptr, lsrc, ldst, t, root, req_chunk, req_npu, req_dist, slot, free, rnd,
                                   runs, batch, rounds, SQUEAKY_KINDS, bound_us, prio, hold, best, *kept,
                                   *out)
        if done < 0:   # cannot happen on a strongly connected topology
            return None
        runs += done
        if done < batch:
            break
    chunk, link, st, end = kept
    sched = Schedule(chunk, lsrc[link], ldst[link], st, end, np.full(P, COPY, np.int8)) if runs else None
    if stats is not None:
        stats.update(broadcast_reserve_runs=runs, broadcast_reserve_us=sched.makespan_us if sched else None,
                     broadcast_reserve_bound_us=bound_us)
    return sched


def _earliest_arrivals(topo, w: np.ndarray, hptr, hnode, htime, dst) -> np.ndarray:
    """Per chunk, the earliest arrival at its destination from any holder alone on the links (link times
    ``w``, inf: unusable; 0 where unreachable or already there): one shortest-path search per holder NPU or
    per destination, whichever are fewer (a Scatter has one source, a Gather one destination)."""
    N, C = topo.num_npus, len(hptr) - 1
    owner = np.repeat(np.arange(C), np.diff(hptr))
    dist = np.full(C, np.inf)
    if np.unique(hnode).size <= np.unique(dst).size:
        out_ptr, ldst = np.asarray(topo.out_ptr, np.int64), np.asarray(topo.dst, np.int64)
        for u in np.unique(hnode).tolist():
            mine = hnode == u
            from_u = shortest_path_tree(N, out_ptr, ldst, w, int(u))[0]
            np.minimum.at(dist, owner[mine], htime[mine] + from_u[dst[owner[mine]]])
    else:
        rev = topo.reversed()
        rw = w[topo.link_ids(rev.dst, rev.src)]
        out_ptr, ldst = np.asarray(rev.out_ptr, np.int64), np.asarray(rev.dst, np.int64)
        for d in np.unique(dst).tolist():
            mine = dst[owner] == d
            to_d = shortest_path_tree(N, out_ptr, ldst, rw, int(d))[0]
            np.minimum.at(dist, owner[mine], htime[mine] + to_d[hnode[mine]])
    dist[~np.isfinite(dist)] = 0.0
    return dist


def _holders(problem: Problem, start: StartState):
    """CSR of each chunk's surviving holders and their times; a chunk bound for a failed NPU goes nowhere
    (its destination set to one of its holders)."""
    C = problem.num_chunks
    alive = np.asarray(start.alive, bool)
    hv, hc, ht = start.surviving_holds()
    order = np.lexsort((ht, hc))
    hv, hc, ht = hv[order], hc[order], ht[order]
    hptr = np.zeros(C + 1, np.int64)
    np.add.at(hptr, hc + 1, 1)
    hptr = np.cumsum(hptr)
    dst = np.asarray(problem.destinations, np.int64).copy()
    gone = ~alive[dst]
    has = np.diff(hptr) > 0
    dst[gone & has] = hv[hptr[:-1][gone & has]]
    return hptr, hv, ht, dst


def warmup() -> None:
    """Load (or compile) the kernel on a tiny instance, outside any timed region."""
    from tacos_bench import Collective
    from tacos_bench.topology.generators import ring

    reserve_schedule(Problem(ring(3), Collective("scatter", 1, 1)), seed=0, tries=1)
    reserve_broadcast(Problem(ring(3), Collective("broadcast", 1, 1)), seed=0, tries=1, bound_us=0.0)
