"""The hierarchical All-Gather streamed to a compact schedule: the tier decomposition at 40,000-NPU scale.

A 40,000-NPU All-Gather has 1.6 billion transfers; neither a :class:`~tacos_bench.schedule.Schedule` table
(``hier``'s plan) nor the tiered kernel of ``greedy_plus`` (per-receiver counters over every chunk) fits in
memory. This builds the same two-level schedule as :func:`solvers.greedy.hierarchical.hierarchical_all_gather` for
the common case where every group is a complete digraph of fast links (every NPU has a direct link to each
peer of its group, as inside a server):

1. every rail runs the greedy's All-Gather of its members' chunks over its own links (the scale engine with
   the TACOS rule when the rail is large: at the ingress bound on tori and meshes, docs/scale.md);
2. every NPU forwards each chunk it holds (its own at time 0, each rail arrival when it lands) to each group
   peer over the direct link, first come first served in arrival order (ties: the order the rail produced).

Each chunk enters each group exactly once, over its own rail: the group-import rule of ``greedy_plus`` in its
strict form. The rows are produced window by window in end-time order (rail rows from the rails' tables,
forwarding rows by :func:`_forward_window`) and written with :class:`~tacos_bench.compact.CompactWriter`, so
memory holds the rails' transfers (one group size less than the whole) and one window.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import hetero_cluster
>>> from tacos_bench.verify import check
>>> p = Problem(hetero_cluster(3, 2, 4), Collective("all_gather", 2, 64))
>>> cs = hier_compact_all_gather(p, window_rows=100)
>>> len(cs) == p.num_npus * (p.num_npus - 1) * 2, cs.is_compact, cs.num_segments > 1
(True, True, True)
>>> check(p, cs).valid
True
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from tacos_bench.compact import CompactSchedule, CompactWriter, spool_dir
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem

from .engine import ScaleInstance, TableSink, greedy_all_gather
from .hierarchy import detect_hierarchy, rail_problem
from .options import SCALE_MIN_PAIRS, GreedyOptions, restart_seeds

# rows per written window (a window's rows are sorted by end time in memory: ~24 bytes each)
WINDOW_ROWS = 1 << 25
# a window's rows are counting-sorted by end time up to this many distinct end times (6,263 in all on hetero40000)
DISTINCT_MAX = 1 << 12


def complete_group_links(problem: Problem, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The direct links inside every group, as ``(sender, link id)`` sorted by sender, or a
    :class:`SolverError` naming a missing one.

    >>> from tacos_bench import Collective
    >>> from tacos_bench.topology.generators import hetero_cluster
    >>> p = Problem(hetero_cluster(2, 1, 3), Collective("all_gather"))
    >>> u, lk = complete_group_links(p, np.repeat([0, 1], 3))
    >>> len(lk), bool(np.all(p.topology.src[lk] == u))
    (12, True)
    """
    topo = problem.topology
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group)
    start = np.concatenate([[0], np.cumsum(sizes)])
    u_all, v_all = [], []
    for k in range(len(sizes)):
        mem = order[start[k]:start[k + 1]]
        u, v = np.meshgrid(mem, mem, indexing="ij")
        off = u != v
        u_all.append(u[off])
        v_all.append(v[off])
    u, v = np.concatenate(u_all), np.concatenate(v_all)
    lk = topo.link_ids(u, v)
    if (lk < 0).any():
        i = int(np.flatnonzero(lk < 0)[0])
        raise SolverError(f"the compact hierarchical All-Gather needs a direct link between every two NPUs of a "
                          f"group; {topo.name!r} has no link {int(u[i])}->{int(v[i])}")
    by_sender = np.argsort(u, kind="stable")
    return u[by_sender], lk[by_sender]


def _rail_rows(problem: Problem, members: np.ndarray, seed: int, threads: int):
    """The rail's All-Gather as rows in the problem's ids, sorted by end time: chunk, link, start, end, receiver."""
    topo = problem.topology
    N, cpn = problem.num_npus, problem.collective.chunks_per_npu
    sub, ids = rail_problem(problem, members)
    sub_topo, n = sub.topology, len(ids)
    glink = topo.link_ids(ids[sub_topo.src], ids[sub_topo.dst]).astype(np.int32)   # sub link -> link
    if n * n * cpn >= SCALE_MIN_PAIRS:
        # large rails: the TACOS rule on the scale engine, its rows taken as they stream (in end order)
        opts = GreedyOptions(seed=seed)
        sub_src, sub_dst_of = (np.asarray(a, dtype=np.int64) for a in (sub_topo.src, sub_topo.dst))
        sink = TableSink(sub_src, sub_dst_of)
        ScaleInstance(sub, opts).run(restart_seeds(seed, 1)[0], None, sink, threads)
        c, sub_link, start, end = sink.columns()
        sub_dst = sub_dst_of[sub_link]
    else:
        # small rails: the rule hier's table path uses
        opts = GreedyOptions(seed=seed, chunk_order="rarest", matching="maximum")
        s = greedy_all_gather(sub, seed=seed, opts=opts, output="table", threads=threads)
        order = np.argsort(s.end_us, kind="stable")
        c, start, end, sub_dst = s.chunk[order], s.start_us[order], s.end_us[order], s.dst[order]
        sub_link = sub_topo.link_ids(s.src[order], sub_dst)
    chunk = ((c // n) * N + ids[c % n]).astype(np.int32)
    return [chunk, glink[sub_link], start, end, ids[sub_dst].astype(np.int32)]


@njit(cache=True)
def _forward_window(t1, count_only, f_u, f_time, f_k, f_prev, arr_ptr, arr_time, f_link, arr_chunk,
                    out_chunk, out_link, out_start, out_end):
    """Advance every forwarding link by the transfers that end before ``t1`` (first come first served over its
    sender's arrival list); ``count_only``: count them without advancing. Returns the number of rows."""
    n = 0
    for i in range(f_u.shape[0]):
        u = f_u[i]
        k = f_k[i]
        prev = f_prev[i]
        t = f_time[i]
        hi = arr_ptr[u + 1]
        while k < hi:
            s = arr_time[k]
            if prev > s:
                s = prev
            e = s + t
            if e >= t1:
                break
            if not count_only:
                out_chunk[n] = arr_chunk[k]
                out_link[n] = f_link[i]
                out_start[n] = s
                out_end[n] = e
            n += 1
            prev = e
            k += 1
        if not count_only:
            f_k[i] = k
            f_prev[i] = prev
    return n


@njit(cache=True)
def _bucket(key, ptr, vals_i, vals_f, out_i, out_f):
    """Stable counting sort of ``vals_*`` by ``key`` into ``out_*`` (``ptr``: the buckets' starts)."""
    pos = ptr[:-1].copy()
    for i in range(key.shape[0]):
        k = key[i]
        out_i[pos[k]] = vals_i[i]
        out_f[pos[k]] = vals_f[i]
        pos[k] += 1


@njit(cache=True)
def _distinct(x, cap):
    """The distinct values of ``x`` in increasing order, or an empty array when there are more than ``cap``."""
    u = np.empty(cap)
    k = 0
    for i in range(x.shape[0]):
        v = x[i]
        lo, hi = 0, k
        while lo < hi:
            mid = (lo + hi) >> 1
            if u[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        if lo < k and u[lo] == v:
            continue
        if k == cap:
            return np.empty(0)
        for j in range(k, lo, -1):
            u[j] = u[j - 1]
        u[lo] = v
        k += 1
    return u[:k]


def _by_end(end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows in end-time order and the distinct end times, by a comparison sort."""
    order = np.argsort(end, kind="stable")
    e = end[order]
    return order, e[np.concatenate([[True], e[1:] != e[:-1]])]


@njit(cache=True)
def _rank_count(end, uniq, count):
    """Add the number of rows of each end time (``uniq[r]``) to ``count[r + 1]``."""
    for i in range(end.shape[0]):
        count[np.searchsorted(uniq, end[i]) + 1] += 1


@njit(cache=True)
def _scatter(end, start, chunk, link, uniq, events, pos, base, out_chunk, out_link, out_lag):
    """Place the rows at their end-time slots ``pos`` (advanced) with their lag (end event ``base + rank``
    minus the start time's index in ``events``); returns False if a start time is not an event."""
    ok = True
    for i in range(end.shape[0]):
        r = np.searchsorted(uniq, end[i])
        p = pos[r]
        pos[r] = p + 1
        out_chunk[p] = chunk[i]
        out_link[p] = link[i]
        e = np.searchsorted(events, start[i])
        if e >= events.shape[0] or events[e] != start[i]:
            ok = False
        out_lag[p] = base + r - e
    return ok


def _write_window(writer: CompactWriter, parts, events: np.ndarray) -> np.ndarray:
    """Write one window's rows (``parts``: chunk, link, start, end arrays) in end-time order; returns the
    event times so far. A counting sort by end time when the window has few distinct times (All-Gather
    arrivals come in waves), a comparison sort otherwise."""
    n = sum(len(p[0]) for p in parts)
    if n == 0:
        return events
    distinct = [_distinct(p[3], DISTINCT_MAX) for p in parts if len(p[3])]
    few = all(len(d) for d in distinct)    # _distinct gives up (empty) beyond DISTINCT_MAX
    uniq = np.unique(np.concatenate(distinct)) if few else np.zeros(0)
    if few and len(uniq) <= DISTINCT_MAX:
        base = len(events)
        events = np.concatenate([events, uniq])
        count = np.zeros(len(uniq) + 1, dtype=np.int64)
        for p in parts:
            _rank_count(p[3], uniq, count)
        pos = np.cumsum(count)[:-1].copy()
        chunk, link, lag = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
        ok = True
        for c, lk, st, en in parts:
            ok &= _scatter(en, st, c, lk, uniq, events, pos, base, chunk, link, lag)
        if not ok:  # pragma: no cover - a bug, not an input problem
            raise SolverError("hier: internal error: a transfer starts between events")
        writer.add_events(uniq)
        writer.append_counted(chunk, link, lag, base, count[1:])
        return events
    chunk, link, start, end = (np.concatenate(cols) for cols in zip(*parts))
    order, uniq = _by_end(end)
    chunk, link, start = chunk[order], link[order], start[order]
    end_ev = len(events) + np.searchsorted(uniq, end[order])
    events = np.concatenate([events, uniq])
    start_ev = np.searchsorted(events, start)
    if np.any(events[np.minimum(start_ev, len(events) - 1)] != start):  # pragma: no cover - a bug
        raise SolverError("hier: internal error: a transfer starts between events")
    writer.add_events(uniq)
    writer.append(chunk, link, start_ev, end_ev)
    return events


def _arrivals(N: int, cpn: int, rails):
    """Per NPU, the chunks it holds in arrival order (its own at 0, then its rail's deliveries): CSR arrays."""
    own = np.arange(cpn * N, dtype=np.int32)
    # own chunks first (time 0), then the rails' deliveries (one rail per NPU, each in end order)
    dst = np.concatenate([own % N] + [r[4] for r in rails])
    ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=N))]).astype(np.int64)
    chunk = np.empty(len(dst), dtype=np.int32)
    time = np.empty(len(dst))
    _bucket(dst, ptr, np.concatenate([own] + [r[0] for r in rails]),
            np.concatenate([np.zeros(own.size)] + [r[3] for r in rails]), chunk, time)
    return ptr, chunk, time


_WARM = [False]


def warmup() -> float:
    """Compile (or load from numba's cache) this module's kernels on a tiny problem, once per process;
    returns the seconds spent (timed regions start after it)."""
    if _WARM[0]:
        return 0.0
    import time

    from tacos_bench.collective import Collective
    from tacos_bench.topology.generators import hetero_cluster

    t0 = time.perf_counter()
    hier_compact_all_gather(Problem(hetero_cluster(2, 1, 2), Collective("all_gather", 1, 1)), in_memory=True)
    _WARM[0] = True
    return time.perf_counter() - t0


def hier_compact_all_gather(problem: Problem, *, seed: int = 0, threads: int = 1, spool=None,
                            in_memory: bool = False, window_rows: int = WINDOW_ROWS, hierarchy=None) -> CompactSchedule:
    """The hierarchical All-Gather of ``problem`` as a :class:`CompactSchedule` (see the module docstring).

    ``spool``: the directory to write (default: a temporary one, removed with the object unless saved);
    ``in_memory``: keep the segments in memory instead (schedules small enough for a table);
    ``window_rows``: about how many rows each written window holds; ``hierarchy``: the problem's
    :func:`~solvers.greedy.hierarchical.detect_hierarchy`, if the caller has it. Raises :class:`SolverError` when the
    topology has no rails or a group is not a complete digraph of links.
    """
    h = hierarchy if hierarchy is not None else detect_hierarchy(problem)
    topo = problem.topology
    N, cpn, C = problem.num_npus, problem.collective.chunks_per_npu, problem.num_chunks
    f_u, f_link = complete_group_links(problem, h.group)
    f_time = np.asarray(problem.link_time_us, dtype=np.float64)[f_link]
    rails = [_rail_rows(problem, r, seed, threads) for r in h.rails]
    arr_ptr, arr_chunk, arr_time = _arrivals(N, cpn, rails)
    for r in rails:   # the receivers are in the arrival lists now
        del r[4:]
    total = N * (N - 1) * cpn
    # window ends: quantiles of the arrival times (forwarding follows the arrivals), the last one open
    n_win = max(1, -(-total // max(int(window_rows), 1)))
    sample = arr_time[:: max(1, len(arr_time) // 1_000_000)]
    bounds = np.unique(np.quantile(sample, np.arange(1, n_win) / n_win)) if n_win > 1 else np.zeros(0)
    bounds = np.concatenate([bounds[bounds > 0], [np.inf]])
    f_k = arr_ptr[f_u].copy()
    f_prev = np.zeros(len(f_u))
    path = None if in_memory else Path(spool) if spool is not None else spool_dir()
    writer = CompactWriter(path, N, C, topo.src, topo.dst, topology=topo.name)
    try:
        events = np.zeros(1)
        writer.add_events(events)
        rail_pos = [0] * len(rails)
        empty_i, empty_l = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        for t1 in bounds.tolist():
            n = int(_forward_window(t1, True, f_u, f_time, f_k, f_prev, arr_ptr, arr_time, f_link, arr_chunk,
                                    empty_i, empty_l, np.zeros(0), np.zeros(0)))
            fc, fl = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int64)
            fs, fe = np.empty(n), np.empty(n)
            _forward_window(t1, False, f_u, f_time, f_k, f_prev, arr_ptr, arr_time, f_link, arr_chunk, fc, fl, fs, fe)
            parts = [(fc, fl, fs, fe)]
            for i, (rc, rl, rs, re) in enumerate(rails):
                j = int(np.searchsorted(re, t1, side="left"))
                parts.append((rc[rail_pos[i]:j], rl[rail_pos[i]:j], rs[rail_pos[i]:j], re[rail_pos[i]:j]))
                rail_pos[i] = j
            events = _write_window(writer, parts, events)
    except BaseException:
        writer.abort()
        raise
    compact = writer.close({"solver": "hier", "engine": "compact", "rails": len(h.rails),
                            "groups": h.num_groups, "seed": int(seed)})
    if len(compact) != total:  # pragma: no cover - a bug, not an input problem
        compact.delete()
        raise SolverError(f"hier: internal error: {len(compact)} transfers written, {total} expected")
    if spool is None and not in_memory:
        compact._own_temporary()
    return compact
