"""One greedy run of a copy collective on a kernel (classic, scale, tiered, unicast/routed): instances,
sinks, the engine choice and :func:`greedy_all_gather`."""

from __future__ import annotations

import sys
import time
from functools import cached_property
from pathlib import Path

import numpy as np

from tacos_bench._memory import huge_zeros
from tacos_bench.collective import ALL_GATHER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule
from tacos_bench.topology import Topology

from ..base import (StartState)

from .options import (CHUNK_ORDERS, COMPACT_MIN_ROWS, DENSE_PAIRS_MAX, ENGINES, EVENT_BUFFER, GreedyOptions,
                      GreedyPlusOptions, IMPORTS, LINK_ORDERS, LINK_TIEBREAKS, MATCHINGS, OUTPUTS, OUT_BUFFER_ROWS,
                      PLUS_STRETCH, PROGRESS_DELAY_S, RESUME_PASSES, RESUME_STRETCH, RESUME_TRIES, ROUTE_TRIES_MAX,
                      ROUTE_WORK, SCALE_MIN_PAIRS, SCALE_PARTITIONS, SLICE_TARGET_S, restart_count, restart_seeds)

# ---------------------------------------------------------------------------- one All-Gather run
class _Slices:
    """The kernels run in slices of ``max_events`` events, so the progress bar moves and Ctrl-C is seen
    between calls; the slice length adapts to about ``SLICE_TARGET_S`` of work per call."""

    def __init__(self, max_events: int, bar, total: int):
        self.max_events, self.bar, self.total, self.done = max_events, bar, total, 0

    def progress(self, remaining: int) -> None:
        if self.bar is not None:
            done = self.total - remaining
            self.bar.update(done - self.done)
            self.done = done

    def adapt(self, seconds: float) -> None:
        """After a slice that ended only because its events ran out."""
        if seconds < SLICE_TARGET_S / 2:
            self.max_events = min(self.max_events * 2, 1 << 30)
        elif seconds > SLICE_TARGET_S * 2 and self.max_events > 1:
            self.max_events //= 2


class _Static:
    """The arrays the multicast kernels read, as contiguous int64/float64 (shared by a problem's restarts)."""

    def __init__(self, problem: Problem, opts: GreedyOptions, start: StartState | None = None):
        from ._kernel_common import Links

        topo, ltime = _links_of(problem, start)
        self.problem = problem
        self.opts = opts
        self.start = start
        self.N, self.C, self.M = problem.num_npus, problem.num_chunks, topo.num_links
        self.lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
        self.ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
        self.ltime = np.ascontiguousarray(ltime, dtype=np.float64)
        self.in_ptr = np.ascontiguousarray(topo.in_ptr, dtype=np.int64)
        self.in_order = np.ascontiguousarray(topo.in_order, dtype=np.int64)
        self.out_ptr = np.ascontiguousarray(topo.out_ptr, dtype=np.int64)
        self.links = Links(src=self.lsrc, dst=self.ldst, time=self.ltime, in_ptr=self.in_ptr, in_order=self.in_order,
                           out_ptr=self.out_ptr)
        self.maxdeg = int(np.diff(self.in_ptr).max()) if self.N > 1 else 0
        if not problem.collective.multicast:
            raise SolverError(f"the multicast kernels serve all_gather and broadcast, not {problem.kind}")
        # the NPU holding each chunk at the start (all_gather: c mod N, broadcast: the root)
        self.src_of = np.ascontiguousarray(problem.sources, dtype=np.int64)

    @cached_property
    def initial_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (NPU, chunk) held at the start, once each, in (NPU, chunk) order; NPUs that need nothing
        (failed, :class:`StartState`) count as holding every chunk. Computed once for all restarts."""
        if self.start is None:
            v, c = self.src_of, np.arange(self.C, dtype=np.int64)
        else:
            dead = np.flatnonzero(~np.asarray(self.start.alive, bool))
            v = np.concatenate([np.asarray(self.start.hold_npu, np.int64), np.repeat(dead, self.C)])
            c = np.concatenate([np.asarray(self.start.hold_chunk, np.int64), np.tile(np.arange(self.C), dead.size)])
        # a dense table is cheaper than sorting when it is small (a repair's state has ~N C / 2 pairs)
        if self.N * self.C <= DENSE_PAIRS_MAX:
            held = np.zeros(self.N * self.C, bool)
            held[v * self.C + c] = True
            key = np.flatnonzero(held)
        else:
            key = np.unique(v * self.C + c)
        return key // self.C, key % self.C


def _set_bits(H: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
    """``H[r]`` bit ``c`` for every pair (bitsets of 64-bit words), through a packed boolean table when small."""
    n, w = H.shape
    if n * w * 64 <= DENSE_PAIRS_MAX and sys.byteorder == "little":  # packed bytes read as little-endian words
        dense = np.zeros((n, w * 64), bool)
        dense[rows, cols] = True
        H |= np.packbits(dense, axis=1, bitorder="little").view(np.uint64)
    else:
        np.bitwise_or.at(H, (rows, cols >> 6), np.left_shift(np.uint64(1), (cols & 63).astype(np.uint64)))


def _event_queue(class_of: np.ndarray, ring_off: np.ndarray, ring_cap: np.ndarray, entry_type):
    """An empty event queue (:class:`~solvers.greedy._kernel_common.EventQueue`) with ring ``k`` in the
    slots ``ring_off[k] .. ring_off[k] + ring_cap[k] - 1``; ``entry_type`` is the kernel's named tuple of the
    other per-slot arrays (int64, every field)."""
    from ._kernel_common import EventQueue

    slots, k = int(ring_cap.sum()), len(ring_cap)
    return EventQueue(class_of=class_of, end=np.zeros(slots),
                      entry=entry_type(*(np.zeros(slots, dtype=np.int64) for _ in entry_type._fields)),
                      ring_off=ring_off, ring_cap=ring_cap, ring_head=np.zeros(k, dtype=np.int64),
                      ring_size=np.zeros(k, dtype=np.int64), heap=np.zeros(k, dtype=np.int64),
                      heap_pos=np.full(k, -1, dtype=np.int64), heap_size=np.zeros(1, dtype=np.int64),
                      head_end=np.zeros(k), prio=np.zeros(k, dtype=np.int64))


def _links_of(problem: Problem, start: StartState | None):
    """The topology and link times a run uses: all links, or those ``start`` leaves usable (same NPU ids)."""
    topo = problem.topology
    if start is None:
        return topo, problem.link_time_us
    keep = np.asarray(start.links, bool)
    sub = Topology(topo.num_npus, topo.src[keep], topo.dst[keep], topo.bw_GiBps[keep], topo.lat_us[keep],
                   name=topo.name, meta={"kind": "degraded"})
    return sub, np.asarray(problem.link_time_us)[keep]


class _Instance(_Static):
    """Static arrays of one All-Gather problem for the classic kernel."""

    def __init__(self, problem: Problem, opts: GreedyOptions, start: StartState | None = None):
        super().__init__(problem, opts, start)
        from . import _kernel_classic as K

        if start is not None and opts.chunk_order == "farthest":
            raise SolverError("chunk_order=farthest ranks chunks by their one source; it cannot start from a "
                              "state with several holders (use random, rarest or oldest)")
        self.K = K
        self.W = (self.C + 63) // 64
        # links of equal chunk time end in the order they start: one FIFO ring per class
        times, self.lclass = np.unique(self.ltime, return_inverse=True)
        self.lclass = self.lclass.astype(np.int64)
        self.K_classes = len(times)
        per_class = np.bincount(self.lclass, minlength=self.K_classes)
        # without preemption a link has at most one entry; stale entries of preempted links get squeezed out
        self.r_cap = (per_class * (2 if opts.preempt else 1) + (4 if opts.preempt else 0)).astype(np.int64)
        self.r_off = np.concatenate([[0], np.cumsum(self.r_cap)[:-1]]).astype(np.int64)
        from .priority import is_plugin, load_score

        # a user's chunk score runs as a first-class function of the listed kernel (solvers.greedy.priority)
        self.score = load_score(opts.chunk_order) if is_plugin(opts.chunk_order) else None
        self.order_code = K.ORDER_USER if self.score is not None else CHUNK_ORDERS.index(opts.chunk_order)
        self.counted_random = K.uses_counted_random(self.order_code, opts.duplicates, opts.window)
        self.rules = K.Rules(chunk_order=self.order_code, link_tiebreak=LINK_TIEBREAKS.index(opts.link_tiebreak),
                             matching=MATCHINGS.index(opts.matching), duplicates=bool(opts.duplicates),
                             preempt=bool(opts.preempt), window=int(opts.window))
        if opts.chunk_order == "farthest":
            from tacos_bench.graph import hop_distances

            self.dist = hop_distances(self.N, self.out_ptr, self.ldst)
            owners = self.src_of
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

    @cached_property
    def initial_bits(self) -> np.ndarray:
        """:attr:`initial_pairs` as per-NPU bitsets (each run starts from a copy)."""
        H = np.zeros((self.N, self.W), dtype=np.uint64)
        _set_bits(H, *self.initial_pairs)
        return H

    def run(self, kseed: np.uint64, bar=None):
        """One greedy run; returns the schedule columns and counters."""
        from ._kernel_common import Transfers

        K = self.K
        N, C, W, M = self.N, self.C, self.W, self.M
        hv, hc = self.initial_pairs
        st = K.State(held=self.initial_bits.copy(), receiving=np.zeros((N, W), dtype=np.uint64),
                     cur_chunk=np.full(M, -1, dtype=np.int64), cur_start=np.zeros(M), busy_until=np.zeros(M),
                     gen=np.zeros(M, dtype=np.int64))
        window = self.opts.window
        if window:
            # per-NPU arrival logs: each link offers the `window` earliest arrivals its receiver still needs
            log = np.zeros((N, C), dtype=np.int32)
            loglen = np.bincount(hv, minlength=N).astype(np.int64)
            # row u: the chunks it starts with, in id order (initial_pairs is sorted by NPU, then chunk)
            pos = np.arange(hv.size) - np.repeat(np.cumsum(loglen) - loglen, loglen)
            log[hv, pos] = hc
            win = K.Window(log=log, log_len=loglen, log_pos=np.zeros(M, dtype=np.int64))
            counts = K.Counts(per_word=np.zeros((1, 1), dtype=np.uint8), per_block=np.zeros((1, 1), dtype=np.uint16),
                              total=np.zeros(1, dtype=np.int64))
        else:
            win = K.Window(log=np.zeros((1, 1), dtype=np.int32), log_len=np.zeros(1, dtype=np.int64),
                           log_pos=np.zeros(1, dtype=np.int64))
            counts = K.Counts(per_word=np.zeros((M, W), dtype=np.uint8),
                              per_block=np.zeros((M, -(-W // K.BLOCK_WORDS)), dtype=np.uint16),
                              total=np.zeros(M, dtype=np.int64))
            K.init_counts(self.links, st, counts)
        queue = _event_queue(self.lclass, self.r_off, self.r_cap, K.RingEntry)
        if self.opts.chunk_order == "oldest":
            arr_time = np.full((N, C), np.inf)
            arr_time[hv, hc] = 0.0
        else:
            arr_time = np.zeros((1, 1))
        keys = K.ChunkKeys(copies=np.bincount(hc, minlength=C).astype(np.int32), need_at=self.cnt0.copy(),
                           max_need=self.rmax0.copy(), arrival=arr_time, hops=self.dist, src_of=self.src_of)
        rng = np.array([kseed], dtype=np.uint64)
        clock = np.full(1, -1.0)
        ctr = np.zeros(K.NUM_COUNTERS, dtype=np.int64)
        fst = np.zeros(K.NUM_FSTATS)
        remaining = N * C - hv.size
        ctr[K.C_REMAINING] = remaining
        cap = min(remaining, OUT_BUFFER_ROWS) + M
        out = Transfers(chunk=np.empty(cap, dtype=np.int64), link=np.empty(cap, dtype=np.int64), start=np.empty(cap),
                        end=np.empty(cap))
        ws = K.make_workspace(N, C, self.maxdeg)
        run = K.run_counted_random if self.counted_random else K.run_listed
        parts = []
        slices = _Slices(32, bar, remaining)
        while True:
            t0 = time.perf_counter()
            if self.counted_random:
                status = run(N, self.links, self.rules, st, counts, win, keys, queue, out, ws, rng, clock, ctr, fst,
                             slices.max_events)
            else:
                status = run(N, self.links, self.rules, st, counts, win, keys, queue, out, ws, rng, clock, ctr, fst,
                             slices.max_events, self.score)
            slices.progress(int(ctr[K.C_REMAINING]))
            if status == K.ST_DONE:
                break
            if status == K.ST_FLUSH:
                n = int(ctr[K.C_OUT])
                parts.append([a[:n].copy() for a in out])
                ctr[K.C_OUT] = 0
            elif status == K.ST_STUCK:  # cannot happen on a strongly connected topology
                raise SolverError(f"greedy stalled with {int(ctr[K.C_REMAINING])} (NPU, chunk) pairs undelivered")
            else:
                slices.adapt(time.perf_counter() - t0)
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


class ScaleInstance(_Static):
    """Static arrays of one All-Gather problem for the scale kernel (the default rule only)."""

    def __init__(self, problem: Problem, opts: GreedyOptions):
        super().__init__(problem, opts)
        from . import _kernel_scale as K

        self.K = K
        in_order = self.in_order
        # links addressed by in-position j (index in in_order): a destination's in-links are contiguous
        self.jlink = in_order
        self.jpos = np.empty(self.M, dtype=np.int64)
        self.jpos[in_order] = np.arange(self.M)
        self.jdst = self.ldst[in_order]
        self.jtime = self.ltime[in_order]
        times, jclass = np.unique(self.jtime, return_inverse=True)
        self.jclass = jclass.astype(np.int64)
        self.r_cap = np.bincount(self.jclass, minlength=len(times)).astype(np.int64)
        self.r_off = np.concatenate([[0], np.cumsum(self.r_cap)[:-1]]).astype(np.int64)
        self.K_classes = len(times)
        self._in_link_groups(K.SCALE_MAX_GROUPS)
        self.state_dtype = K.scale_state_dtype(self.maxdeg)
        self.tie_code = LINK_TIEBREAKS.index(opts.link_tiebreak)
        self.inlinks = K.InLinks(num_npus=self.N, num_groups=self.G, dst=self.jdst, link=self.jlink, time=self.jtime,
                                 group=self.jgrp, group_mask=self.jgmask, npu_group_mask=self.vgmask,
                                 in_ptr=self.in_ptr, out_ptr=self.out_ptr, link_dst=self.ldst, link_pos=self.jpos)

    def _in_link_groups(self, max_groups: int):
        """Group each destination's in-links by link time (fastest first, the slowest ones merged past
        ``max_groups``): every group has its own candidate set, so a draw only meets chunks that the idle
        links' group can carry. ``jgrp[j]``: group of in-position j; ``vgmask[v * G + g]``: the in-link bits of
        group g of v (bit j - in_ptr[v]); ``jgmask[j]``: the bits of j's group."""
        N, M = self.N, self.M
        jgrp = np.zeros(M, dtype=np.int64)
        if M:
            order = np.lexsort((self.jclass, self.jdst))
            d, k = self.jdst[order], self.jclass[order]
            new_v = np.r_[True, d[1:] != d[:-1]]
            new_g = new_v | np.r_[True, k[1:] != k[:-1]]
            cs = np.cumsum(new_g)
            rank = cs - np.maximum.accumulate(np.where(new_v, cs, 0))
            jgrp[order] = np.minimum(rank, max_groups - 1)
        self.G = int(jgrp.max()) + 1 if M else 1
        bit = np.left_shift(np.uint64(1), (np.arange(M) - self.in_ptr[self.jdst]).astype(np.uint64))
        self.vgmask = np.zeros(N * self.G, dtype=np.uint64)
        np.bitwise_or.at(self.vgmask, self.jdst * self.G + jgrp, bit)
        self.jgmask = self.vgmask[self.jdst * self.G + jgrp]
        self.jgrp = jgrp.astype(np.int8)

    @staticmethod
    def supports(problem: Problem, opts: GreedyOptions) -> bool:
        from . import _kernel_scale as K

        if (opts.chunk_order, opts.matching, opts.duplicates, opts.window) != ("random", "greedy", False, 0):
            return False
        deg = np.diff(problem.topology.in_ptr)
        return problem.num_npus > 1 and K.scale_state_dtype(int(deg.max())) is not None

    def run(self, kseed: np.uint64, bar=None, sink=None, threads: int = 1):
        """One greedy run, its transfers streamed to ``sink`` (``add_events``/``append``); returns counters.

        ``threads`` (at most ``SCALE_PARTITIONS`` are used) changes the speed, not the schedule.
        """
        import numba

        from ._kernel_common import Transfers

        K = self.K
        numba.set_num_threads(max(1, min(int(threads), SCALE_PARTITIONS, numba.config.NUMBA_NUM_THREADS)))
        N, C, M, G = self.N, self.C, self.M, self.G
        state = huge_zeros((C, N), self.state_dtype)
        # candidate sets start with the in-neighbours' own chunks (up to maxdeg * C/N) and grow on demand
        start_cap = 64
        while start_cap < self.maxdeg * (C // N) + self.maxdeg * self.maxdeg + 1:
            start_cap *= 2
        S = huge_zeros((N * G, start_cap), np.uint16 if C <= 1 << 16 else np.uint32)
        # per in-position: candidates and chunk in flight (-1 idle); a destination's in-links share a line
        jinfo = np.zeros((M, 2), dtype=np.int32)
        jinfo[:, K.J_CUR] = -1
        cs = K.ScaleState(state=state, cand=S, cand_len=np.zeros(N * G, dtype=np.int64), jinfo=jinfo,
                          state_flat=state.reshape(-1), cand_flat=S.reshape(-1), jinfo_flat=jinfo.reshape(-1))
        P = SCALE_PARTITIONS
        # one random stream per partition, all determined by the run's seed
        rngs = np.zeros((P, 8), dtype=np.uint64)
        rngs[:, 0] = np.random.SeedSequence(int(kseed)).generate_state(P, dtype=np.uint64)
        parts = K.Partitions(lo=np.array([N * p // P for p in range(P + 1)], dtype=np.int64), rng=rngs,
                             ctr=np.zeros((P, 64), dtype=np.int64))
        ctr = np.zeros(K.NUM_SCALE_COUNTERS, dtype=np.int64)
        remaining = N * C - C
        ctr[K.SC_REMAINING] = remaining
        K.scale_init(C, self.inlinks, cs, parts.ctr[0], self.src_of)
        queue = _event_queue(self.jclass, self.r_off, self.r_cap, K.RingEntry)
        clock = np.full(1, -1.0)
        ev_time = np.zeros(EVENT_BUFFER)
        ev_base = np.zeros(1, dtype=np.int64)
        cap = min(remaining, OUT_BUFFER_ROWS) + M
        out = Transfers(*(np.empty(cap, dtype=np.int32) for _ in Transfers._fields))
        work = K.ScaleWork(dirty=np.empty(N, dtype=np.int64), is_dirty=np.zeros(N, dtype=np.bool_),
                           **{f: np.empty(N, dtype=np.int64) for f in ("active", "draw_pos", "draw_chunk", "misses",
                                                                       "free_mask", "draw_row", "eligible")},
                           **{f: np.empty(M, dtype=np.int64) for f in ("arr_pos", "arr_chunk", "start_pos",
                                                                       "start_chunk")},
                           part_dirty=np.zeros(P, dtype=np.int64), part_started=np.zeros(P, dtype=np.int64))
        # at most maxdeg arrivals at each of maxdeg in-neighbours can join one candidate set per event
        margin = self.maxdeg * self.maxdeg + 1
        slices = _Slices(8, bar, remaining)
        while True:
            t0 = time.perf_counter()
            status = K.run_scale(self.inlinks, cs, queue, parts, work, out, ev_time, ev_base, clock, ctr,
                                 self.tie_code, margin, slices.max_events)
            slices.progress(int(ctr[K.SC_REMAINING]))
            if status == K.ST_DONE:
                break
            if status == K.ST_FLUSH:
                n = int(ctr[K.SC_OUT])
                sink.append(out.chunk[:n], out.link[:n], out.start[:n], out.end[:n])
                ctr[K.SC_OUT] = 0
            elif status == K.ST_EVFULL:
                sink.add_events(ev_time)
                ev_base[0] += len(ev_time)
            elif status == K.ST_GROW:
                S = cs.cand
                S2 = huge_zeros((N * G, 2 * S.shape[1]), S.dtype)
                S2[:, :S.shape[1]] = S
                cs = cs._replace(cand=S2, cand_flat=S2.reshape(-1))
            elif status == K.ST_STUCK:  # cannot happen on a strongly connected topology
                raise SolverError(f"greedy stalled with {int(ctr[K.SC_REMAINING])} (NPU, chunk) pairs undelivered")
            else:
                slices.adapt(time.perf_counter() - t0)
        sink.add_events(ev_time[:int(ctr[K.SC_EVENTS] - ev_base[0])])
        n = int(ctr[K.SC_OUT])
        sink.append(out.chunk[:n], out.link[:n], out.start[:n], out.end[:n])
        ctr += parts.ctr[:, :K.NUM_SCALE_COUNTERS].sum(axis=0)
        ctr[K.SC_SMAX] = parts.ctr[:, K.SC_SMAX].max()
        return {
            "events": int(ctr[K.SC_EVENTS]),
            "transfers_started": remaining,
            "wasted_transfers": 0,
            "cancelled_transfers": 0,
            "wasted_link_time_us": 0.0,
            "cancelled_link_time_us": 0.0,
            "augmentations": 0,
            "matchings": int(ctr[K.SC_MATCHES]),
            "scanned": int(ctr[K.SC_SCANNED]),
            "candidates": int(ctr[K.SC_CANDIDATES]),
            "draws": int(ctr[K.SC_DRAWS]),
            "rejected_draws": int(ctr[K.SC_REJECTED]),
            "probe_scans": int(ctr[K.SC_SCANS]),
            "match_rounds": int(ctr[K.SC_ROUNDS]),
            "max_candidate_set": int(ctr[K.SC_SMAX]),
            "stale_candidates": int(ctr[K.SC_STALE]),
            "candidate_groups": G,
            "threads": numba.get_num_threads(),
        }


class _TieredInstance(_Static):
    """Static arrays of one All-Gather problem for the topology-aware kernel (:mod:`solvers.greedy._kernel_tiered`)."""

    def __init__(self, problem: Problem, opts: GreedyOptions, start: StartState | None = None):
        super().__init__(problem, opts, start)
        from tacos_bench.topology.tiers import Tiers

        from . import _kernel_tiered as K

        self.K = K
        sub, lt = _links_of(problem, start)
        t = self.tiers = Tiers(problem, sub, lt)
        self.tr = K.TierArrays(**{f: getattr(t, f) for f in K.TierArrays._fields})
        self.rules = K.Rules(
            imports=IMPORTS.index(opts.imports), gamma=float(opts.import_gate),
            key={"random": K.KEY_RANDOM, "rarest": K.KEY_RAREST, "local_rarest": K.KEY_LOCAL}[opts.chunk_order],
            link_order=LINK_ORDERS.index(opts.link_order), group_matching=bool(opts.group_matching),
            tiebreak=LINK_TIEBREAKS.index(opts.link_tiebreak))

    def run(self, kseed: np.uint64):
        """One run; returns the schedule columns and counters."""
        from ._kernel_common import Transfers

        K = self.K
        hv, hc = self.initial_pairs
        total = self.N * self.C - hv.size
        out = Transfers(chunk=np.empty(total, np.int64), link=np.empty(total, np.int64), start=np.empty(total),
                        end=np.empty(total))
        stats = np.zeros(K.NUM_STATS, np.int64)
        n = K.run_tiered(self.N, self.C, self.links, self.tr, self.rules, np.array([kseed], np.uint64), out, stats,
                         hv, hc)
        if n < total:
            raise SolverError(f"greedy stalled with {total - n} (NPU, chunk) pairs undelivered")
        chunk, link, start, end = (a[:n] for a in out)
        names = ("events", "matchings", "gate_checks", "gate_closed", "deferred_links", "augmentations",
                 "fallbacks", "candidates")
        counters = {k: int(stats[i]) for i, k in enumerate(names)}
        counters.update(self.tiers.stats())
        return (chunk, self.lsrc[link], self.ldst[link], start, end), counters


class _UnicastInstance:
    """One unicast problem (gather, scatter, all-to-all) for :mod:`solvers.greedy._kernel_unicast`."""

    def __init__(self, problem: Problem, opts: GreedyOptions, start: StartState | None = None):
        from . import _kernel_unicast as K
        from ._kernel_common import Links

        if opts.tiered:
            # the link-tier rules (greedy_plus) are about multicast data; unicast data is routed, and the
            # routing rule that corresponds (longest remaining path first) is farthest
            self.farthest = True
        elif (opts.chunk_order not in ("random", "farthest") or opts.duplicates or opts.window
                or opts.matching != "greedy"):
            raise SolverError(f"{problem.kind} runs the routing greedy, which takes chunk_order random or farthest "
                              "and no matching, duplicates or window option")
        else:
            self.farthest = opts.chunk_order == "farthest"
        self.routing, self.passes = opts.routing, int(opts.route_passes)
        self.resumed = start is not None
        # detours pay off after a fault: the chunks left then have few shortest paths around the failed links
        # and greedy_plus tries them on any topology besides the shortest routes, keeping the faster schedule
        # (irregular graphs gain most, e.g. random32d3s1 All-to-All 1.43x -> 1.11x; on two-tier clusters the
        # longer routes can lose, e.g. hetero64 scatter 1.05x -> 1.32x, so never detours alone)
        if opts.route_stretch is not None:
            self.stretches = (float(opts.route_stretch),)
        elif start is not None:
            self.stretches = (RESUME_STRETCH,)
        else:
            self.stretches = (0.0, PLUS_STRETCH) if opts.tiered else (0.0,)
        self.K = K
        topo, lt = _links_of(problem, start)
        self.problem = problem
        self.N, self.C = problem.num_npus, problem.num_chunks
        self.lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
        self.ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
        self.lt = np.ascontiguousarray(lt, dtype=np.float64)
        self.out_ptr = np.ascontiguousarray(topo.out_ptr, dtype=np.int64)
        in_ptr = np.ascontiguousarray(topo.in_ptr, dtype=np.int64)
        in_order = np.ascontiguousarray(topo.in_order, dtype=np.int64)
        self.links = Links(src=self.lsrc, dst=self.ldst, time=self.lt, in_ptr=in_ptr, in_order=in_order,
                           out_ptr=self.out_ptr)
        self.D = K.distances_to(self.N, in_ptr, np.ascontiguousarray(self.lsrc[in_order]),
                                np.ascontiguousarray(self.lt[in_order]))
        self.src_of = np.ascontiguousarray(problem.sources, dtype=np.int64)
        self.dst_of = np.ascontiguousarray(problem.destinations, dtype=np.int64)
        # when each link is free and each chunk is at its route's start (0 on a fresh run)
        self.link_free = np.zeros(self.lsrc.size)
        self.ready = np.zeros(self.C)
        if start is not None:
            self._resume(start)
            far = np.flatnonzero((self.src_of != self.dst_of) & ~np.isfinite(self.D[self.src_of, self.dst_of]))
            if far.size:   # the kernels would route past their buffers: say which chunk cannot get there
                c = int(far[0])
                raise SolverError(f"chunk {c} cannot reach NPU {int(self.dst_of[c])} from NPU {int(self.src_of[c])} "
                                  "over the links it may use")
            if start.link_free is not None:
                self.link_free = np.ascontiguousarray(
                    np.asarray(start.link_free, np.float64)[np.asarray(start.links, bool)])
        # a repair must beat a fresh synthesis on time: small ones route in 2 orders with 1 re-route pass
        # (1 link failed at mid-collective, 3 seeds: torus8x8 All-to-All 1.00x a fresh run's time in 0.24x its
        # synthesis time; without the pass 1.06x), large ones (routes of more hops in all than this) route once
        # without passes (hetero512 All-to-All: 6.5 s, a fresh run's time; with 1 pass 11 s)
        self.thrifty = self.resumed and int(self.hops(detour=True).sum()) > ROUTE_WORK // ROUTE_TRIES_MAX
        self.cap = max(1024, 8 * self.C)
        self.load_floor = None if start is not None else _flow_floor(problem)
        self.detour_gap = float(opts.detour_gap)

    def _resume(self, start: StartState) -> None:
        """Each chunk resumes from the holder nearest its destination; chunks bound for a failed NPU or
        already there stay put."""
        alive = np.asarray(start.alive, bool)
        hv, hc, ht = start.surviving_holds()
        # the holder where the chunk would arrive first (a copy still in flight counts from its arrival)
        pick = cheapest_per_chunk(hc, self.D[hv, self.dst_of[hc]] + ht)
        src = self.dst_of.copy()
        src[hc[pick]] = hv[pick]
        self.ready[hc[pick]] = ht[pick]
        stuck = ~np.isin(np.arange(self.C), hc[pick]) & alive[self.dst_of]
        if stuck.any():
            raise SolverError(f"chunk {int(np.flatnonzero(stuck)[0])} has no holder to resume from")
        src[~alive[self.dst_of]] = self.dst_of[~alive[self.dst_of]]
        self.src_of = np.ascontiguousarray(src)

    def hops(self, detour: bool = False) -> np.ndarray:
        """Per chunk, the most links a shortest path from where it is to its destination can have (with
        ``detour``: or a path that starts with any out-link and continues on a shortest path)."""
        from ._kernel_routed import max_hops

        if not hasattr(self, "_H"):
            self._H = max_hops(self.N, self.D, self.links)
        H = self._H
        if detour:
            H = H.copy()
            np.maximum.at(H, self.lsrc, 1 + H[self.ldst])
        return np.where(self.src_of != self.dst_of, H[self.src_of, self.dst_of], 0)

    def run(self, kseed: np.uint64):
        if self.routing == "balanced":
            return self._run_balanced(kseed)
        from ._kernel_common import Transfers

        K = self.K
        while True:
            bound = int(self.hops().sum())
            out = Transfers(chunk=np.empty(bound, np.int64), link=np.empty(bound, np.int64), start=np.empty(bound),
                            end=np.empty(bound))
            stats = np.zeros(K.NUM_UNICAST_STATS, np.int64)
            status, n = K.run_unicast(self.N, self.C, self.links, self.D, self.src_of, self.dst_of, True,
                                      self.farthest, np.array([kseed], np.uint64), self.cap, out, stats)
            if status == K.ST_GROW:
                self.cap *= 2
                continue
            if status == K.ST_STUCK:  # cannot happen on a strongly connected topology
                raise SolverError("the routing greedy stalled with chunks undelivered")
            chunk, link, start, end = (a[:n] for a in out)
            return ((chunk, self.lsrc[link], self.ldst[link], start, end),
                    {"events": int(stats[K.U_EVENTS]), "stale_queue_entries": int(stats[K.U_STALE]),
                     "queue_pool": self.cap})

    def _run_balanced(self, kseed: np.uint64):
        best = None
        for i, stretch in enumerate(self.stretches):
            if i and self.load_floor is not None \
                    and best[2]["max_link_load_us"] <= self.load_floor() * (1 + self.detour_gap):
                # the shortest routes load no link more than detour_gap above the least any routing can (the
                # flow LP): detours have little to win (hetero512 All-to-All: 0.2 % above, and detours took 24 s
                # of a 28 s synthesis and changed nothing)
                best[2]["detours_skipped"] = True
                break
            arrays, counters = self._run_routed(kseed, stretch)
            end = float(arrays[4].max()) if len(arrays[4]) else 0.0
            if best is None or end < best[0]:
                best = (end, arrays, {**counters, "route_stretch": stretch})
        return best[1], best[2]

    def _run_routed(self, kseed: np.uint64, stretch: float):
        from . import _kernel_routed as R
        from ._kernel_common import Transfers

        rng = np.array([kseed], np.uint64)
        room = self.hops(detour=stretch > 0)
        ptr = np.concatenate([[0], np.cumsum(room)]).astype(np.int64)
        # routing orders are cheap next to scheduling on small problems: try several, keep the least loaded
        most = RESUME_TRIES if self.resumed else ROUTE_TRIES_MAX
        tries = 1 if self.thrifty else int(np.clip(ROUTE_WORK // max(int(ptr[-1]), 1), 1, most))
        passes = 0 if self.thrifty else min(self.passes, RESUME_PASSES) if self.resumed else self.passes
        best = None
        for _ in range(tries):
            routes = R.Routes(offset=ptr, length=np.zeros(self.C, np.int64),
                              link=np.empty(max(int(ptr[-1]), 1), np.int64))
            load = np.zeros(self.lsrc.size)
            R.route(self.N, self.C, self.src_of, self.dst_of, self.D, self.links, passes, rng, routes, load, stretch)
            key = (float(load.max()) if load.size else 0.0, float(np.dot(load, load)))
            if best is None or key < best[0]:
                best = (key, routes, load)
        _, routes, load = best
        total = int(routes.length.sum())
        # list scheduling is tight but for ties: as many tie-key draws, keep the earliest end
        sched = None
        for _ in range(tries):
            out = Transfers(chunk=np.empty(total, np.int64), link=np.empty(total, np.int64), start=np.empty(total),
                            end=np.empty(total))
            stats = np.zeros(1, np.int64)
            n = R.run_routed(self.C, self.links, routes, rng, out, stats, self.link_free, self.ready,
                             R.remaining_route(self.C, routes, self.lt))
            if n != total:  # cannot happen: every route is a path of existing links
                raise SolverError("the routed greedy left chunks undelivered")
            end = float(out.end.max()) if total else 0.0
            if sched is None or end < sched[0]:
                sched = (end, out, stats)
            if load.size == 0 or end <= float(load.max()) * (1 + 1e-12):
                break  # at the most loaded link's total: nothing can end sooner on these routes
        _, out, stats = sched
        return ((out.chunk, self.lsrc[out.link], self.ldst[out.link], out.start, out.end),
                {"events": int(stats[R.R_EVENTS]), "max_link_load_us": float(load.max()) if load.size else 0.0,
                 "route_passes": passes, "route_tries": tries})


# the flow floor that lets the routed engine skip its detours gets at most this long (a certificate so far is valid)
FLOW_FLOOR_TIME_S = 2.0


def _flow_floor(problem: Problem):
    """The least most-loaded-link time of any routing (the flow LP's value, :mod:`tacos_bench.bounds.flow`),
    computed once when first asked."""
    memo: list = []

    def floor() -> float:
        if not memo:
            from tacos_bench.bounds.flow import lb_flow_us

            memo.append(lb_flow_us(problem, time_budget_s=FLOW_FLOOR_TIME_S)["flow_us"] or 0.0)
        return memo[0]
    return floor


def cheapest_per_chunk(chunk: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the least-cost entry of each chunk present in ``chunk`` (ties: the first listed)."""
    order = np.lexsort((cost, chunk))
    first = np.ones(order.size, bool)
    first[1:] = chunk[order][1:] != chunk[order][:-1]
    return order[first]


def gather_resume_reversed(problem: Problem, start: StartState, opts: GreedyOptions, seed: int = 0,
                           stats: dict | None = None) -> Schedule | None:
    """A gather's remainder from ``start``, built as its fresh synthesis is: the time-reversed scatter on the
    reversed usable links, the root sending each chunk not yet at it to the chunk's holder nearest the root.

    A forward resume cannot order the root's arrivals (each link takes what is there first); reversed, the
    root sends the farthest chunks first, so they leave their holders first (hetero64, random32d3s1: the
    repaired gather 1.07x a fresh synthesis on average with the forward resume alone). ``None`` when the
    reversed usable links do not make a problem of their own (not strongly connected)."""
    from dataclasses import replace as _replace

    from tacos_bench.collective import SCATTER
    from tacos_bench.errors import TacosError

    from .options import restart_count, restart_seeds

    topo = problem.topology
    keep = np.asarray(start.links, bool)
    rev_topo = Topology(topo.num_npus, topo.dst[keep], topo.src[keep], topo.bw_GiBps[keep], topo.lat_us[keep],
                        name=f"{topo.name}-reversed", meta={"kind": "degraded"})
    try:
        rev = Problem(rev_topo, _replace(problem.collective, kind=SCATTER))
    except TacosError:
        return None
    inst = _UnicastInstance(rev, opts)
    root = int(problem.collective.root)
    hv, hc, _ = start.surviving_holds()
    # per chunk, the holder nearest the root (the root itself when it has the chunk: nothing to send)
    pick = cheapest_per_chunk(hc, inst.D[root, hv])
    dst = np.full(problem.num_chunks, root, np.int64)
    dst[hc[pick]] = hv[pick]
    inst.dst_of = np.ascontiguousarray(dst)
    best = None
    for ks in restart_seeds(seed, restart_count(problem, opts)):
        arrays, counters = inst.run(ks)
        sched = Schedule(*arrays, np.full(len(arrays[0]), COPY, dtype=np.int8))
        if best is None or sched.makespan_us < best[0].makespan_us:
            best = (sched, counters)
    if stats is not None:
        stats.update(best[1])
    return best[0].time_reversed()


class TableSink:
    """Collects streamed transfers as schedule columns (for schedules that fit in memory)."""

    def __init__(self, lsrc, ldst):
        self.lsrc, self.ldst = lsrc, ldst
        self.events: list[np.ndarray] = []
        self.parts: list[tuple] = []

    def add_events(self, times):
        self.events.append(np.array(times, dtype=np.float64))

    def append(self, chunk, link, start_ev, end_ev):
        if len(chunk):
            self.parts.append((chunk.astype(np.int64), link.astype(np.int64), start_ev.astype(np.int64),
                               end_ev.astype(np.int64)))

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Chunk, link id, start and end time (µs) of every row, in the order they came (end-time order)."""
        if not self.parts:
            z = np.zeros(0, dtype=np.int64)
            return z, z, np.zeros(0), np.zeros(0)
        ev = np.concatenate(self.events) if self.events else np.zeros(0)
        chunk, link, s, e = (np.concatenate(cols) for cols in zip(*self.parts))
        return chunk, link, ev[s], ev[e]

    def schedule(self) -> Schedule:
        chunk, link, start, end = self.columns()
        if not len(chunk):
            return Schedule.empty()
        return Schedule(chunk, self.lsrc[link], self.ldst[link], start, end, np.full(len(chunk), COPY, np.int8))


KERNELS = ("counted", "listed", "scale", "tiered", "unicast", "routed", "scored")
_WARM = dict.fromkeys(KERNELS, False)


def warmup(kernels=KERNELS) -> float:
    """Compile (or load from the numba cache) ``kernels``; returns the seconds it took.

    ``counted``: the classic kernel's default rule; ``listed``: the classic kernel's other options;
    ``scale``: the scale engine; ``tiered``: the topology-aware rules. Each is compiled once per process;
    later calls return 0.
    """
    todo = [k for k in kernels if not _WARM[k]]
    if not todo:
        return 0.0
    from tacos_bench.collective import Collective
    from tacos_bench.topology.generators import ring

    t0 = time.perf_counter()
    p = Problem(ring(3), Collective(ALL_GATHER, 1, 1))
    if "counted" in todo:
        _Instance(p, GreedyOptions(matching="maximum")).run(np.uint64(1))
    if "listed" in todo:
        # one kernel serves every listed option (they are runtime codes); this run takes its rare branches
        _Instance(p, GreedyOptions(chunk_order="oldest", matching="maximum", duplicates=True,
                                   preempt=True)).run(np.uint64(1))
    if "scored" in todo:
        # the listed kernel with a user's score (one specialization for every score: solvers.greedy.priority)
        _Instance(p, GreedyOptions(chunk_order="solvers.greedy.priority:rarest_score")).run(np.uint64(1))
    if "scale" in todo:
        inst = ScaleInstance(p, GreedyOptions())
        inst.run(np.uint64(1), sink=TableSink(inst.ldst, inst.ldst))
    if "unicast" in todo:
        _UnicastInstance(Problem(ring(3), Collective("all_to_all", 1, 1)),
                         GreedyOptions(routing="adaptive")).run(np.uint64(1))
    if "routed" in todo:
        _UnicastInstance(Problem(ring(3), Collective("all_to_all", 1, 1)), GreedyOptions()).run(np.uint64(1))
    if "tiered" in todo:
        from tacos_bench.topology.generators import hetero_cluster

        hp = Problem(hetero_cluster(2, 1, 2), Collective(ALL_GATHER, 1, 1))
        for o in (GreedyPlusOptions(), GreedyOptions(imports="group", link_order="chunk_first",
                                                     group_matching=True, chunk_order="rarest")):
            _TieredInstance(hp, o).run(np.uint64(1))
    for k in todo:
        _WARM[k] = True
    return time.perf_counter() - t0


def kernel_for(problem: Problem, opts: GreedyOptions, resume: bool = False) -> str:
    """Which compiled kernel a run of ``opts`` on ``problem`` uses (see :func:`warmup`)."""
    engine = pick_engine(problem, opts, resume=resume)
    if engine == "unicast":
        return "routed" if opts.routing == "balanced" else "unicast"
    if engine in ("scale", "tiered"):
        return engine
    from . import _kernel_classic as K

    from .priority import is_plugin

    if is_plugin(opts.chunk_order):
        return "scored"
    return "counted" if K.uses_counted_random(CHUNK_ORDERS.index(opts.chunk_order), opts.duplicates,
                                              opts.window) else "listed"


def _progress_bar(opts: GreedyOptions, total: int, desc: str):
    enabled = opts.progress if opts.progress is not None else sys.stderr.isatty()
    if not enabled or total <= 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="pair", unit_scale=True, delay=PROGRESS_DELAY_S,
                leave=False, file=sys.stderr)


def pick_engine(problem: Problem, opts: GreedyOptions, engine: str = "auto", resume: bool = False) -> str:
    """Which kernel runs (``auto``: scale for the default rule on large problems; ``resume``: a run from a
    :class:`StartState`, which the scale kernel does not take, so the classic kernel runs the same rule)."""
    if engine not in ENGINES:
        raise SolverError(f"greedy engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if problem.collective.unicast or engine == "unicast":
        if not problem.collective.unicast:
            raise SolverError("the unicast engine serves gather, scatter and all_to_all")
        return "unicast"
    if opts.tiered or engine == "tiered":
        if not opts.tiered:
            raise SolverError("the tiered engine runs the topology-aware rules only")
        return "tiered"
    ok = ScaleInstance.supports(problem, opts) and not resume
    if engine == "scale" and not ok:
        raise SolverError("the scale engine runs the default rule only (chunk_order=random, matching=greedy, "
                          "no duplicates, no window, in-degree <= 62)")
    if engine == "auto":
        return "scale" if ok and problem.num_npus * problem.num_chunks >= SCALE_MIN_PAIRS else "classic"
    return engine


def greedy_all_gather(problem: Problem, *, seed: int = 0, deadline: float | None = None,
                      opts: GreedyOptions | None = None, stats: dict | None = None, engine: str = "auto",
                      output: str = "table", spool=None, threads: int = 1, start: StartState | None = None):
    """Best-of-``opts.restarts`` greedy schedule of a copy collective (``start``: resumed from that state).

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
    engine : {"auto", "classic", "scale"}
        The kernel: ``scale`` (docs/scale.md) runs the default rule with a
        memory layout for very large topologies; ``auto`` uses it from
        ``SCALE_MIN_PAIRS`` (NPU, chunk) pairs on when the options allow.
    output : {"table", "compact", "auto"}
        ``table`` returns a :class:`Schedule`; ``compact`` a
        :class:`tacos_bench.compact.CompactSchedule` streamed to disk while
        the kernel runs (scale engine only); ``auto`` is compact above
        ``COMPACT_MIN_ROWS`` transfers when the scale engine runs.
    spool : path, optional
        Directory for the compact output (default: a temporary directory that
        is removed with the object unless :meth:`CompactSchedule.save` moves it).
    threads : int
        Threads of the scale engine (up to ``SCALE_PARTITIONS``); the classic
        kernel is single-threaded. The schedule does not depend on it.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import mesh2d
    >>> s = greedy_all_gather(Problem(mesh2d(3, 3), Collective("all_gather")), seed=3)
    >>> len(s)
    72
    >>> c = greedy_all_gather(Problem(mesh2d(3, 3), Collective("all_gather")), engine="scale", output="compact")
    >>> len(c), c.is_compact
    (72, True)
    """
    if not problem.collective.copies:
        raise SolverError(f"greedy_all_gather needs a copy collective, got {problem.kind}")
    if output not in OUTPUTS:
        raise SolverError(f"greedy output must be one of {', '.join(OUTPUTS)}, got {output!r}")
    opts = opts or GreedyOptions()
    engine = pick_engine(problem, opts, engine, resume=start is not None)
    total = (problem.num_npus - 1) * problem.num_chunks
    if output == "auto":
        output = "compact" if engine == "scale" and total > COMPACT_MIN_ROWS else "table"
    if output == "compact" and engine != "scale":
        raise SolverError("compact output needs the scale engine (the default rule)")
    kernels = {"classic": _Instance, "scale": ScaleInstance, "tiered": _TieredInstance, "unicast": _UnicastInstance}
    inst = kernels[engine](problem, opts) if start is None else kernels[engine](problem, opts, start)
    seeds = restart_seeds(seed, restart_count(problem, opts))
    best = None
    makespans = []
    ends = []   # perf_counter at the end of each restart (the anytime trace)
    for i, ks in enumerate(seeds):
        if i > 0 and deadline is not None and time.perf_counter() >= deadline:
            break
        bar = _progress_bar(opts, total, f"greedy {problem.topology.name} run {i + 1}/{len(seeds)}")
        try:
            if engine == "classic":
                arrays, counters = inst.run(ks, bar)
                result = Schedule(*arrays, np.full(len(arrays[0]), COPY, dtype=np.int8))
            elif engine in ("tiered", "unicast"):
                arrays, counters = inst.run(ks)
                result = Schedule(*arrays, np.full(len(arrays[0]), COPY, dtype=np.int8))
            else:
                result, counters = _run_scale(inst, ks, bar, output, spool if len(seeds) == 1 else None, threads)
        finally:
            if bar is not None:
                bar.close()
        ms = result.makespan_us
        makespans.append(ms)
        ends.append(time.perf_counter())
        if best is None or ms < best[0]:
            if best is not None and output == "compact":
                best[3].delete()
            best = (ms, i, int(ks), result, counters)
        elif output == "compact":
            result.delete()
    ms, i, ks, result, counters = best
    if output == "compact" and spool is not None and len(seeds) > 1:
        result = result.save(spool)
    if stats is not None:
        stats.update({
            "engine": engine,
            "output": output,
            "restarts": len(seeds),
            "restarts_run": len(makespans),
            "best_restart": i,
            "best_seed": ks,
            "makespans_us": makespans,
            "restart_ends": ends,
            "transfers": len(result),
            **counters,
        })
    return result


def _run_scale(inst: ScaleInstance, kseed, bar, output: str, spool, threads: int = 1):
    """One scale-kernel run into a table or a compact schedule."""
    topo = inst.problem.topology
    if output == "table":
        sink = TableSink(np.asarray(topo.src, dtype=np.int64), inst.ldst)
        counters = inst.run(kseed, bar, sink, threads)
        return sink.schedule(), counters
    from tacos_bench.compact import CompactWriter, spool_dir

    path = Path(spool) if spool is not None else spool_dir()
    writer = CompactWriter(path, inst.N, inst.C, topo.src, topo.dst, topology=topo.name)
    try:
        counters = inst.run(kseed, bar, writer, threads)
    except BaseException:
        writer.abort()
        raise
    compact = writer.close({"solver": "greedy", "engine": "scale", "kernel_seed": int(kseed)})
    if spool is None:
        compact._own_temporary()
    return compact, counters


