"""Unicast chunks on the multicommodity-flow LP's paths: rounding to one path per chunk, then a list schedule of
the fixed routes improved by forward-backward passes (candidate ``flow``, :mod:`solvers.greedy.candidates`).

1. **Rounding.** The LP (:func:`tacos_bench.bounds.flow.flow_solution`) splits few pairs (random 32-64-NPU graphs:
   1.02-1.03 paths a pair). Each pair's chunks go on its LP paths: an unsplit pair's on its one path, the split
   pairs' by a small MILP (HiGHS) that minimizes the most loaded link (link time as load) given the unsplit
   pairs' load, so the routes' floor is as close to the LP's as whole chunks allow.
2. **Schedule.** With the routes fixed, no schedule ends before the most loaded link's total. The routed
   greedy's list schedule (:func:`solvers.greedy._kernel_routed.run_routed`: at each idle link the waiting chunk
   with the largest key) starts with the longest remaining route first; then *forward-backward improvement*
   (as for project scheduling): the time-reversed problem (each route backwards, same links) is scheduled with
   the forward schedule's end times as keys (the latest first), and the forward problem again with the
   backward schedule's times, while the makespan drops. A backward schedule, reversed in time, is itself a
   valid forward schedule. On random32d3s0 / random64d3s0 All-to-All one round reaches the routes' floor.
"""

from __future__ import annotations

import numpy as np

from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

# forward-backward rounds at most (each round: one backward and one forward list schedule)
FBI_ROUNDS = 6
ROUNDING_TIME_S = 5.0


def round_routes(problem: Problem, paths: dict) -> list[tuple[int, ...]]:
    """One route (link ids) per chunk from the LP's paths per pair (module docstring, step 1); a chunk for its
    own source gets the empty route."""
    t = np.asarray(problem.link_time_us, np.float64)
    src, dst = np.asarray(problem.sources), np.asarray(problem.destinations)
    per_pair: dict[tuple[int, int], list[int]] = {}
    for c in range(problem.num_chunks):
        if src[c] != dst[c]:    # a chunk for its own source stays where it is
            per_pair.setdefault((int(src[c]), int(dst[c])), []).append(c)
    routes: list[tuple[int, ...]] = [()] * problem.num_chunks
    base = np.zeros(t.size)
    split = []
    for pair, chunks in per_pair.items():
        options = paths[pair]
        if len(options) == 1:
            path = tuple(options[0][0])
            for c in chunks:
                routes[c] = path
            idx = np.asarray(path, np.int64)
            base[idx] += t[idx] * len(chunks)
        else:
            split.append((chunks, [tuple(p) for p, _ in options], [f for _, f in options]))
    if split:
        counts = _split_counts(split, base, t)
        for (chunks, options, _), n in zip(split, counts):
            it = iter(chunks)
            for path, k in zip(options, n):
                for _ in range(k):
                    routes[next(it)] = path
    return routes


def _split_counts(split: list, base: np.ndarray, t: np.ndarray) -> list[list[int]]:
    """How many chunks of each split pair take each of its paths: the MILP's answer (its best incumbent at the
    time limit), or the largest remainders of the LP's fractions if HiGHS found none."""
    import highspy

    from tacos_bench.bounds.flow import _silent_highs

    h = _silent_highs(highspy)
    h.setOptionValue("time_limit", ROUNDING_TIME_S)
    inf = highspy.kHighsInf
    h.addVar(0.0, inf)                 # z: the most loaded link
    h.changeColCost(0, 1.0)
    col, touch = 1, {}
    cols = []
    for chunks, options, _ in split:
        mine = []
        for path in options:
            h.addVar(0.0, float(len(chunks)))
            h.changeColIntegrality(col, highspy.HighsVarType.kInteger)
            for e in path:
                touch.setdefault(int(e), []).append(col)
            mine.append(col)
            col += 1
        cols.append(mine)
        h.addRow(len(chunks), len(chunks), len(mine), np.array(mine, np.int32), np.ones(len(mine)))
    for e, cs in touch.items():
        # base_e + t_e * (chunks on e) <= z
        h.addRow(-inf, -float(base[e]), len(cs) + 1, np.array([0] + cs, np.int32),
                 np.array([-1.0] + [float(t[e])] * len(cs)))
    h.run()
    x = np.asarray(h.getSolution().col_value) if h.getInfo().primal_solution_status == 2 else None
    out = []
    for (chunks, _, frac), mine in zip(split, cols):
        if x is not None:
            n = [int(round(x[c])) for c in mine]
        else:
            n = _largest_remainders(np.asarray(frac) * len(chunks))
        # numerical slack must not lose or invent a chunk
        n[int(np.argmax(n))] += len(chunks) - sum(n)
        out.append(n)
    return out


def _largest_remainders(quota: np.ndarray) -> list[int]:
    n = np.floor(quota).astype(int)
    rest = int(round(quota.sum())) - int(n.sum())
    n[np.argsort(-(quota - n), kind="stable")[:rest]] += 1
    return n.tolist()


def schedule_routes(problem: Problem, routes: list[tuple[int, ...]], seed: int) -> Schedule:
    """The list schedule of the fixed ``routes`` improved by forward-backward passes (module docstring, step 2)."""
    from . import _kernel_routed as R
    from ._kernel_common import Links

    topo = problem.topology
    C = problem.num_chunks
    lt = np.ascontiguousarray(problem.link_time_us, np.float64)
    links = Links(src=np.ascontiguousarray(topo.src, np.int64), dst=np.ascontiguousarray(topo.dst, np.int64),
                  time=lt, in_ptr=np.ascontiguousarray(topo.in_ptr, np.int64),
                  in_order=np.ascontiguousarray(topo.in_order, np.int64),
                  out_ptr=np.ascontiguousarray(topo.out_ptr, np.int64))
    length = np.array([len(r) for r in routes], np.int64)
    offset = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
    flat = np.array([l for r in routes for l in r], np.int64)
    if not flat.size:
        return Schedule.empty()
    fwd = R.Routes(offset=offset, length=length, link=flat)
    # slot i of a route is slot mirror[i] of the same route backwards
    hop = np.arange(flat.size) - np.repeat(offset[:-1], length)
    mirror = np.repeat(offset[:-1] + length - 1, length) - hop
    bwd = R.Routes(offset=offset, length=length, link=flat[mirror])
    floor = float(np.bincount(flat, weights=lt[flat], minlength=lt.size).max())
    rng = np.array([np.random.SeedSequence([int(seed), 0xF10]).generate_state(1, np.uint64)[0]], np.uint64)

    def run(routes_, key):
        out = _run(R, C, links, routes_, rng, key)
        start = np.empty(flat.size)
        end = np.empty(flat.size)
        order = np.lexsort((out.start, out.chunk))     # a chunk's transfers in hop order
        idx = offset[out.chunk[order]] + _hops_in_order(out, order)
        start[idx], end[idx] = out.start[order], out.end[order]
        return out, start, end

    out, start, end = run(fwd, R.remaining_route(C, fwd, lt))
    best = (float(out.end.max()), out, False)
    for _ in range(FBI_ROUNDS):
        if best[0] <= floor * (1 + 1e-12):
            break
        # backward: the forward schedule's latest ends first; forward: the backward schedule's latest ends
        # (the earliest forward starts) first
        bout, _, bend = run(bwd, end[mirror])
        tb = float(bout.end.max())
        out, start, end = run(fwd, bend[mirror])
        tf = float(out.end.max())
        improved = False
        if tb < best[0] * (1 - 1e-12):
            best, improved = (tb, bout, True), True
        if tf < best[0] * (1 - 1e-12):
            best, improved = (tf, out, False), True
        if not improved:
            break
    T, out, backward = best
    s, e = (T - out.end, T - out.start) if backward else (out.start, out.end)
    return Schedule(out.chunk, links.src[out.link], links.dst[out.link], s, e, np.full(out.chunk.size, COPY, np.int8))


def _hops_in_order(out, order: np.ndarray) -> np.ndarray:
    """The hop index of each transfer of ``out`` taken in ``order`` (chunk, then start)."""
    c = out.chunk[order]
    first = np.r_[0, np.flatnonzero(np.diff(c)) + 1]
    return np.arange(c.size) - np.repeat(first, np.diff(np.r_[first, c.size]))


def _run(R, C, links, routes, rng, key):
    from ._kernel_common import Transfers

    total = int(routes.length.sum())
    out = Transfers(chunk=np.empty(total, np.int64), link=np.empty(total, np.int64), start=np.empty(total),
                    end=np.empty(total))
    n = R.run_routed(C, links, routes, rng, out, np.zeros(1, np.int64), np.zeros(links.src.size), np.zeros(C),
                     np.ascontiguousarray(key, np.float64))
    if n != total:  # cannot happen: every route is a path of existing links
        from tacos_bench.errors import SolverError

        raise SolverError("the flow-routed schedule left chunks undelivered")
    return out
