"""The greedy TACOS matcher: utilization-maximizing link-chunk matching on the time-expanded network.

All-Gather is synthesized by an event-driven greedy (Won et al., TACOS,
arXiv 2304.05301): at every event time each idle directed link ``u->v`` may
start one chunk that ``u`` holds (arrived by now) and ``v`` neither holds nor is
already receiving; a node may forward a chunk the instant it arrives. Per
destination, (chunk, destination) pairs are taken in the ``chunk_order`` and
each goes to one of the idle in-links that can carry it, chosen by
``link_tiebreak``. Transfers start at an event time, when the sender already
holds the chunk, so every schedule is causal by construction, also on
heterogeneous links (the C++ reference decides at arrival time and is not).

Reduce-Scatter and All-Reduce come from :func:`solvers.compose.solve_via_all_gather`:
Reduce-Scatter is the All-Gather on the reversed topology with time reversed;
All-Reduce is Reduce-Scatter then All-Gather, back to back.

The options are documented in ``docs/greedy.md``; the hot loops live in
:mod:`solvers._greedy_kernel`.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.generators import torus2d
>>> from solvers.greedy import GreedySolver
>>> p = Problem(torus2d(3, 3), Collective("all_gather"))
>>> res = GreedySolver().solve(p, seed=1)
>>> res.status, len(res.schedule)
('feasible', 72)
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tacos_bench.collective import ALL_GATHER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

from .base import (CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_RANDOMIZED, CAP_REDUCE_SCATTER, CAP_TIME_LIMIT,
                   Solver, SolveResult, reject_unknown_options)
from .compose import solve_via_all_gather

CHUNK_ORDERS = ("random", "rarest", "farthest", "oldest")
LINK_TIEBREAKS = ("earliest_finish", "random", "lowest_id")
MATCHINGS = ("greedy", "maximum")
OPTIONS = ("chunk_order", "link_tiebreak", "restarts", "duplicates", "preempt", "matching", "window", "progress")

# tqdm shows the bar only once a run has lasted this long (seconds)
PROGRESS_DELAY_S = 2.0
# aim for kernel slices of about this long, so progress and Ctrl-C stay responsive
SLICE_TARGET_S = 0.25
# finished transfers are drained from the kernel in batches of at most this many rows
OUT_BUFFER_ROWS = 1 << 22


# ---------------------------------------------------------------------------- options
@dataclass(frozen=True)
class GreedyOptions:
    """Validated options of the greedy (see ``docs/greedy.md`` for their exact meaning)."""

    chunk_order: str = "random"
    link_tiebreak: str = "earliest_finish"
    restarts: int = 1
    duplicates: bool = False
    preempt: bool = False
    matching: str = "greedy"
    window: int = 0
    progress: bool | None = None

    @classmethod
    def parse(cls, options: dict[str, Any]) -> "GreedyOptions":
        reject_unknown_options("greedy", options, OPTIONS)
        o = dict(options)
        out = {}
        for key, allowed in (("chunk_order", CHUNK_ORDERS), ("link_tiebreak", LINK_TIEBREAKS),
                             ("matching", MATCHINGS)):
            if key in o:
                val = str(o[key]).strip().lower()
                if val not in allowed:
                    raise SolverError(f"greedy option {key}={o[key]!r} is not one of {', '.join(allowed)}")
                out[key] = val
        if "restarts" in o:
            r = o["restarts"]
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
                raise SolverError(f"greedy option restarts must be a positive integer, got {r!r}")
            out["restarts"] = int(r)
        if "window" in o:
            wv = 0 if o["window"] is None else o["window"]
            if isinstance(wv, bool) or not isinstance(wv, (int, np.integer)) or wv < 0:
                raise SolverError(f"greedy option window must be a non-negative integer (0 = no window), got {wv!r}")
            out["window"] = int(wv)
        for key in ("duplicates", "preempt"):
            if key in o:
                out[key] = _as_bool(key, o[key])
        if "progress" in o:
            out["progress"] = None if o["progress"] in (None, "auto") else _as_bool("progress", o["progress"])
        opts = cls(**out)
        if opts.preempt and not opts.duplicates:
            raise SolverError("greedy option preempt=true needs duplicates=true (only a duplicate can preempt)")
        return opts


def _as_bool(key: str, v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.strip().lower() in ("true", "1", "yes")
    raise SolverError(f"greedy option {key} must be true or false, got {v!r}")


def restart_seeds(seed: int, restarts: int) -> np.ndarray:
    """The kernel seed of each restart, derived from ``seed`` (prefix-stable in ``restarts``).

    >>> restart_seeds(0, 3)[:2].tolist() == restart_seeds(0, 2).tolist()
    True
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SolverError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.SeedSequence(int(seed)).generate_state(restarts, dtype=np.uint64)


# ---------------------------------------------------------------------------- one All-Gather run
class _Instance:
    """Static arrays of one All-Gather problem, shared by its restarts."""

    def __init__(self, problem: Problem, opts: GreedyOptions):
        from . import _greedy_kernel as K

        self.K = K
        topo = problem.topology
        self.problem = problem
        self.opts = opts
        self.N, self.C = problem.num_npus, problem.num_chunks
        self.W = (self.C + 63) // 64
        self.lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
        self.ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
        self.ltime = np.ascontiguousarray(problem.link_time_us, dtype=np.float64)
        self.in_ptr = np.ascontiguousarray(topo.in_ptr, dtype=np.int64)
        self.in_order = np.ascontiguousarray(topo.in_order, dtype=np.int64)
        self.out_ptr = np.ascontiguousarray(topo.out_ptr, dtype=np.int64)
        self.M = topo.num_links
        self.maxdeg = int(np.diff(self.in_ptr).max()) if self.N > 1 else 0
        # links of equal chunk time end in the order they start: one FIFO ring per class
        times, self.lclass = np.unique(self.ltime, return_inverse=True)
        self.lclass = self.lclass.astype(np.int64)
        self.K_classes = len(times)
        per_class = np.bincount(self.lclass, minlength=self.K_classes)
        # without preemption a link has at most one entry; stale entries of preempted links get squeezed out
        self.r_cap = (per_class * (2 if opts.preempt else 1) + (4 if opts.preempt else 0)).astype(np.int64)
        self.r_off = np.concatenate([[0], np.cumsum(self.r_cap)[:-1]]).astype(np.int64)
        self.order_code = CHUNK_ORDERS.index(opts.chunk_order)
        self.tie_code = LINK_TIEBREAKS.index(opts.link_tiebreak)
        self.match_code = MATCHINGS.index(opts.matching)
        if opts.chunk_order == "farthest":
            self.dist = K.hop_distances(self.N, self.out_ptr, self.ldst)
            owners = np.arange(self.C) % self.N
            ecc = self.dist.max(axis=1)
            self.rmax0 = ecc[owners].astype(np.int32)
            cnt = np.zeros((self.N, int(ecc.max()) + 1), dtype=np.int32)  # NPUs at each distance from each NPU
            np.add.at(cnt, (np.repeat(np.arange(self.N), self.N), self.dist.ravel()), 1)
            cnt[:, 0] = 0  # the owner holds its chunk
            self.cnt0 = cnt[owners]
        else:
            self.dist = np.zeros((1, 1), dtype=np.int32)
            self.rmax0 = np.zeros(1, dtype=np.int32)
            self.cnt0 = np.zeros((1, 1), dtype=np.int32)

    def run(self, kseed: np.uint64, bar=None):
        """One greedy run; returns the schedule columns and counters."""
        K = self.K
        N, C, W, M = self.N, self.C, self.W, self.M
        H = np.zeros((N, W), dtype=np.uint64)
        c = np.arange(C)
        np.bitwise_or.at(H, (c % N, c >> 6), np.left_shift(np.uint64(1), (c & 63).astype(np.uint64)))
        R = np.zeros((N, W), dtype=np.uint64)
        cur_chunk = np.full(M, -1, dtype=np.int64)
        cur_start = np.zeros(M)
        busy_until = np.zeros(M)
        gen = np.zeros(M, dtype=np.int64)
        window = self.opts.window
        if window:
            # per-NPU arrival logs: each link offers the `window` earliest arrivals its receiver still needs
            log = np.zeros((N, C), dtype=np.int32)
            loglen = np.full(N, C // N, dtype=np.int64)
            log[:, :C // N] = c.reshape(-1, N).T  # row u: its own chunks u, u+N, u+2N, ...
            lptr = np.zeros(M, dtype=np.int64)
            wc = np.zeros((1, 1), dtype=np.uint8)
            bc = np.zeros((1, 1), dtype=np.uint16)
            tot = np.zeros(1, dtype=np.int64)
        else:
            log = np.zeros((1, 1), dtype=np.int32)
            loglen = np.zeros(1, dtype=np.int64)
            lptr = np.zeros(1, dtype=np.int64)
            wc = np.zeros((M, W), dtype=np.uint8)
            bc = np.zeros((M, -(-W // K.BLOCK_WORDS)), dtype=np.uint16)
            tot = np.zeros(M, dtype=np.int64)
            K.init_counts(self.lsrc, self.ldst, H, R, wc, bc, tot)
        nring = int(self.r_cap.sum())
        q_link = np.zeros(nring, dtype=np.int64)
        q_gen = np.zeros(nring, dtype=np.int64)
        q_end = np.zeros(nring)
        r_head = np.zeros(self.K_classes, dtype=np.int64)
        r_size = np.zeros(self.K_classes, dtype=np.int64)
        cheap = np.zeros(self.K_classes, dtype=np.int64)
        cpos = np.full(self.K_classes, -1, dtype=np.int64)
        csize = np.zeros(1, dtype=np.int64)
        chead = np.zeros(self.K_classes)
        copies = np.ones(C, dtype=np.int32)
        cnt = self.cnt0.copy()
        rmax = self.rmax0.copy()
        if self.opts.chunk_order == "oldest":
            arr_time = np.full((N, C), np.inf)
            arr_time[c % N, c] = 0.0
        else:
            arr_time = np.zeros((1, 1))
        rng = np.array([kseed], dtype=np.uint64)
        clock = np.full(1, -1.0)
        ctr = np.zeros(K.NUM_COUNTERS, dtype=np.int64)
        fst = np.zeros(K.NUM_FSTATS)
        remaining = N * C - C
        ctr[K.C_REMAINING] = remaining
        cap = min(remaining, OUT_BUFFER_ROWS) + M
        out = [np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap), np.empty(cap)]
        ws = K.make_workspace(N, C, self.maxdeg)
        parts = []
        max_events = 32
        done_before = 0
        while True:
            t0 = time.perf_counter()
            st = K.run_events(N, self.lsrc, self.ldst, self.ltime, self.lclass, self.in_ptr, self.in_order,
                              self.out_ptr, self.order_code, self.tie_code, self.match_code, self.opts.duplicates,
                              self.opts.preempt, window, self.dist, H, R, cur_chunk, cur_start, busy_until, gen,
                              wc, bc, tot, log, loglen, lptr, q_link, q_gen, q_end, self.r_off, self.r_cap,
                              r_head, r_size, cheap, cpos, csize, chead, copies, cnt, rmax, arr_time, rng, clock,
                              ctr, fst, out[0], out[1], out[2], out[3], max_events, *ws)
            dt = time.perf_counter() - t0
            if bar is not None:
                done = remaining - int(ctr[K.C_REMAINING])
                bar.update(done - done_before)
                done_before = done
            if st == K.ST_DONE:
                break
            if st == K.ST_FLUSH:
                n = int(ctr[K.C_OUT])
                parts.append([a[:n].copy() for a in out])
                ctr[K.C_OUT] = 0
            elif st == K.ST_STUCK:  # cannot happen on a strongly connected topology
                raise SolverError(f"greedy stalled with {int(ctr[K.C_REMAINING])} (NPU, chunk) pairs undelivered")
            elif dt < SLICE_TARGET_S / 2:
                max_events = min(max_events * 2, 1 << 30)
            elif dt > SLICE_TARGET_S * 2 and max_events > 1:
                max_events //= 2
        n = int(ctr[K.C_OUT])
        parts.append([a[:n] for a in out])
        if len(parts) == 1:
            chunk, link, start, end = parts[0]
        else:
            chunk, link, start, end = (np.concatenate(cols) for cols in zip(*parts))
        arrays = (chunk, self.lsrc[link], self.ldst[link], start, end)
        counters = {
            "events": int(ctr[K.C_EVENTS]),
            "transfers_started": int(ctr[K.C_STARTED]),
            "wasted_transfers": int(ctr[K.C_WASTED]),
            "cancelled_transfers": int(ctr[K.C_CANCELLED]),
            "wasted_link_time_us": float(fst[K.F_WASTED_US]),
            "cancelled_link_time_us": float(fst[K.F_CANCELLED_US]),
            "augmentations": int(ctr[K.C_AUGMENTED]),
            "matchings": int(ctr[K.C_MATCHES]),
            "scanned": int(ctr[K.C_SCANNED]),
            "candidates": int(ctr[K.C_CANDIDATES]),
            "draws": int(ctr[K.C_DRAWS]),
        }
        return arrays, counters


_WARM = {"done": False, "seconds": 0.0}


def warmup() -> float:
    """Compile (or load from the numba cache) every kernel; returns the seconds it took.

    The first call in a process pays the JIT; later calls return 0.
    """
    if _WARM["done"]:
        return 0.0
    from tacos_bench.collective import Collective
    from tacos_bench.generators import ring

    t0 = time.perf_counter()
    p = Problem(ring(3), Collective(ALL_GATHER, 1, 1))
    for order in CHUNK_ORDERS:
        _Instance(p, GreedyOptions(chunk_order=order, matching="maximum", duplicates=True,
                                   preempt=True)).run(np.uint64(1))
    _WARM["done"] = True
    _WARM["seconds"] = time.perf_counter() - t0
    return _WARM["seconds"]


def _progress_bar(opts: GreedyOptions, total: int, desc: str):
    enabled = opts.progress if opts.progress is not None else sys.stderr.isatty()
    if not enabled or total <= 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="pair", unit_scale=True, delay=PROGRESS_DELAY_S,
                leave=False, file=sys.stderr)


def greedy_all_gather(problem: Problem, *, seed: int = 0, deadline: float | None = None,
                      opts: GreedyOptions | None = None, stats: dict | None = None) -> Schedule:
    """Best-of-``opts.restarts`` greedy All-Gather schedule.

    Parameters
    ----------
    problem : Problem
        An All-Gather problem.
    seed : int
        Master seed; restart ``i`` uses ``restart_seeds(seed, restarts)[i]``.
    deadline : float, optional
        ``time.perf_counter()`` value after which no further restart starts
        (the first restart always runs to completion).
    opts : GreedyOptions
        Parsed options (defaults when omitted).
    stats : dict, optional
        Filled with the run statistics (restarts run, best seed, counters).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.generators import mesh2d
    >>> s = greedy_all_gather(Problem(mesh2d(3, 3), Collective("all_gather")), seed=3)
    >>> len(s)
    72
    """
    if problem.kind != ALL_GATHER:
        raise SolverError(f"greedy_all_gather needs an all_gather problem, got {problem.kind}")
    opts = opts or GreedyOptions()
    inst = _Instance(problem, opts)
    seeds = restart_seeds(seed, opts.restarts)
    best = None
    makespans = []
    total = (problem.num_npus - 1) * problem.num_chunks
    for i, ks in enumerate(seeds):
        if i > 0 and deadline is not None and time.perf_counter() >= deadline:
            break
        bar = _progress_bar(opts, total, f"greedy {problem.topology.name} run {i + 1}/{len(seeds)}")
        try:
            arrays, counters = inst.run(ks, bar)
        finally:
            if bar is not None:
                bar.close()
        ms = float(arrays[4].max()) if len(arrays[4]) else 0.0
        makespans.append(ms)
        if best is None or ms < best[0]:
            best = (ms, i, int(ks), arrays, counters)
    ms, i, ks, arrays, counters = best
    sched = Schedule(*arrays, np.full(len(arrays[0]), COPY, dtype=np.int8))
    if stats is not None:
        stats.update({
            "restarts": opts.restarts,
            "restarts_run": len(makespans),
            "best_restart": i,
            "best_seed": ks,
            "makespans_us": makespans,
            "transfers": len(sched),
            **counters,
        })
    return sched


# ---------------------------------------------------------------------------- the solver
class GreedySolver(Solver):
    """TACOS greedy link-chunk matching (All-Gather; RS/AR by composition).

    Options (all optional): ``chunk_order`` (random|rarest|farthest|oldest),
    ``link_tiebreak`` (earliest_finish|random|lowest_id), ``restarts`` (int >= 1),
    ``duplicates`` (bool), ``preempt`` (bool, needs duplicates), ``matching``
    (greedy|maximum), ``progress`` (bool or None = when stderr is a terminal).
    ``time_limit_s`` stops starting new restarts once exceeded.
    """

    name = "greedy"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_RANDOMIZED, CAP_TIME_LIMIT})

    def solve(self, problem: Problem, *, time_limit_s: float | None = None, seed: int = 0, threads: int = 1,
              **options) -> SolveResult:
        opts = GreedyOptions.parse(options)
        self.check_supported(problem)
        restart_seeds(seed, 1)  # validates the seed before any work
        if time_limit_s is not None and not (float(time_limit_s) > 0):
            raise SolverError(f"time_limit_s must be positive, got {time_limit_s!r}")
        jit_s = warmup()
        t0 = time.perf_counter()
        deadline = None if time_limit_s is None else t0 + float(time_limit_s)
        phases: list[dict] = []

        def ag_solve(ag_problem: Problem) -> Schedule:
            st: dict = {}
            sched = greedy_all_gather(ag_problem, seed=seed, deadline=deadline, opts=opts, stats=st)
            phases.append(st)
            return sched

        sched = solve_via_all_gather(problem, ag_solve)
        dt = time.perf_counter() - t0
        stats: dict[str, Any] = {"jit_warmup_s": jit_s, "options": {
            "chunk_order": opts.chunk_order, "link_tiebreak": opts.link_tiebreak, "restarts": opts.restarts,
            "duplicates": opts.duplicates, "preempt": opts.preempt, "matching": opts.matching,
            "window": opts.window}}
        if len(phases) == 1:
            stats.update(phases[0])
        else:
            for name, st in zip(("rs", "ag"), phases):
                stats.update({f"{name}_{k}": v for k, v in st.items()})
            stats["transfers"] = len(sched)
        timed_out = deadline is not None and any(st["restarts_run"] < st["restarts"] for st in phases)
        msg = "time limit reached: fewer restarts than asked" if timed_out else ""
        return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=dt,
                           stats=stats, message=msg)
