"""The in-memory replay of a table schedule (:class:`~tacos_bench.schedule.Schedule`): the rules of
:mod:`tacos_bench.verify`, vectorized."""

from __future__ import annotations


import numpy as np

from ..errors import VerificationError
from ..problem import Problem
from ..schedule import COPY, OPS, REDUCE, Schedule
from .arrivals import earliest_arrivals
from .fabric import verify_fabric
from .result import REL_TOL, TOL_LINK_FRACTION, Verification

DENSE_LIMIT = 200_000_000


def _row(schedule: Schedule, i: int) -> str:
    return (f"row {int(i)} (chunk {int(schedule.chunk[i])}, {int(schedule.src[i])}->{int(schedule.dst[i])}, "
            f"{schedule.start_us[i]:.6f}-{schedule.end_us[i]:.6f} µs, {OPS[int(schedule.op[i])]})")


def verify(problem: Problem, schedule: Schedule, fault=None) -> Verification:
    """Replay ``schedule`` on ``problem``; raise :class:`VerificationError` if invalid.

    ``fault`` (a :class:`tacos_bench.faults.Fault`): the schedule was executed through that failure.
    A switched fabric, or a schedule with a non-empty route, is replayed by
    :func:`tacos_bench.verify.fabric.verify_fabric` (docs/fabrics.md) instead.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
    >>> verify(p, s).collective_time_us == t
    True
    """
    if problem.collective.copies and len(schedule) and np.any(schedule.op == REDUCE):
        i = int(np.flatnonzero(schedule.op == REDUCE)[0])
        raise VerificationError(f"{_row(schedule, i)}: a reduce in {problem.kind}, a copy collective: there is "
                                "nothing to reduce")
    if problem.topology.is_fabric or (schedule.route is not None and bool(np.any(schedule.route != ""))):
        return verify_fabric(problem, schedule, fault)
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    T = len(schedule)
    makespan = schedule.makespan_us
    tol = REL_TOL * max(1.0, abs(makespan))
    if problem.num_links:
        # The tolerance absorbs float rounding only: capped far below every link time, so neither a padded
        # makespan nor tiny links let a transfer end before its own read or overlap/precede another one.
        tol = min(tol, TOL_LINK_FRACTION * float(problem.link_time_us.min()))

    chunk, src, dst = schedule.chunk, schedule.src, schedule.dst
    start, end = schedule.start_us, schedule.end_us

    # --- ids and times ----------------------------------------------------------
    for name, arr, hi in (("chunk", chunk, C), ("src", src, n), ("dst", dst, n)):
        bad = np.flatnonzero((arr < 0) | (arr >= hi))
        if bad.size:
            raise VerificationError(f"{_row(schedule, bad[0])}: {name} id out of range 0..{hi - 1}")
    bad = np.flatnonzero(~np.isfinite(start) | ~np.isfinite(end) | (start < -tol))
    if bad.size:
        raise VerificationError(f"{_row(schedule, bad[0])}: times must be finite and start >= 0")

    # --- links and durations ----------------------------------------------------
    link = topo.link_ids(src, dst)
    bad = np.flatnonzero(link < 0)
    if bad.size:
        i = bad[0]
        raise VerificationError(f"{_row(schedule, i)}: unknown link {int(src[i])}->{int(dst[i])}")
    need = problem.link_time_us[link]
    bad = np.flatnonzero(end - start < need - tol)
    if bad.size:
        i = bad[0]
        raise VerificationError(
            f"{_row(schedule, i)}: lasts {end[i] - start[i]:.6f} µs, shorter than the link time {need[i]:.6f} µs")

    alive = None
    if fault is not None:
        failed = np.zeros(problem.num_links, bool)
        failed[fault.failed_link_ids(topo)] = True
        bad = np.flatnonzero(failed[link] & (end > fault.at_us + tol))
        if bad.size:
            i = bad[np.argmin(start[bad])]
            raise VerificationError(f"{_row(schedule, i)}: link {int(src[i])}->{int(dst[i])} fails at "
                                    f"{fault.at_us:.6f} µs, before this transfer ends")
        alive = np.ones(n, bool)
        alive[list(fault.npus)] = False

    # --- one chunk at a time per link -------------------------------------------
    if T > 1:
        order = np.lexsort((end, start, link))
        ls, ss, es = link[order], start[order], end[order]
        clash = np.flatnonzero((ls[1:] == ls[:-1]) & (ss[1:] < es[:-1] - tol))
        if clash.size:
            a, b = order[clash[0]], order[clash[0] + 1]
            raise VerificationError(
                f"{_row(schedule, b)}: overlaps {_row(schedule, a)} on link {int(src[a])}->{int(dst[a])}")

    # --- causality, reductions, postcondition -----------------------------------
    if problem.collective.copies and (T == 0 or not np.any(schedule.op == REDUCE)):
        _replay_copies(problem, schedule, tol, alive)
    else:
        _replay_general(problem, schedule, tol, alive)

    busy = float(need.sum())
    util = busy / (topo.num_links * makespan) if makespan > 0 and topo.num_links else None
    return Verification(True, makespan, T, busy, util, "")


def _replay_copies(problem: Problem, schedule: Schedule, tol: float, alive=None) -> None:
    """Vectorized replay of a copy-only schedule of a copy collective (one source per chunk).

    Every value is the whole chunk, so a copy is valid exactly when the sender is the chunk's source or
    has received it by the start time; the earliest arrival per (NPU, chunk) decides. Transfers have
    positive length, so checking every transfer against the earliest arrivals (including those of invalid
    transfers) cannot accept a cycle: the earliest-ending ungrounded transfer would have to read from an
    arrival that ends even earlier. Only the (NPU, chunk) pairs a transfer touches are looked at when the
    dense table would be large (All-to-All has N^2 K chunks).
    """
    n, C = problem.num_npus, problem.num_chunks
    chunk, src, dst = schedule.chunk, schedule.src, schedule.dst
    start, end = schedule.start_us, schedule.end_us
    source = problem.sources
    dest = problem.destinations
    T = len(schedule)
    dense = n * C <= DENSE_LIMIT
    uniq = np.zeros(0, np.int64)
    if T:
        if float(np.min(end - start)) <= 0:
            i = int(np.argmin(end - start))
            raise VerificationError(f"{_row(schedule, i)}: a transfer must take positive time")
        key_in = dst.astype(np.int64) * C + chunk
        key_hold = src.astype(np.int64) * C + chunk
        need = src != source[chunk]
        if dense:
            earliest = np.full(n * C, np.inf)
            np.minimum.at(earliest, key_in, end)
            hold_t = earliest[key_hold]
            received = np.isfinite(earliest)
        else:  # sparse: sort arrivals by (NPU, chunk) key
            uniq, hold_t = earliest_arrivals(key_in, end, key_hold)
        bad = np.flatnonzero(need & (hold_t > start + tol))
        if bad.size:
            i = bad[np.argmin(start[bad])]
            when = "never receives it" if not np.isfinite(hold_t[i]) else f"receives it only at {hold_t[i]:.6f} µs"
            raise VerificationError(
                f"{_row(schedule, i)}: non-causal: NPU {int(src[i])} does not hold chunk {int(chunk[i])} "
                f"at {start[i]:.6f} µs ({when})")
    # postcondition: every (destination, chunk) pair the collective requires is the source or was reached
    c_all = np.arange(C, dtype=np.int64)
    if (dest < 0).all():
        if dense:
            got = received.copy() if T else np.zeros(n * C, dtype=bool)
            got[source * C + c_all] = True
            if alive is not None:
                got.reshape(n, C)[~alive] = True   # failed NPUs need nothing
            missing_keys = np.flatnonzero(~got)
            n_missing = missing_keys.size
        else:
            rc, rv = uniq % C, uniq // C
            live = np.ones(n, bool) if alive is None else alive
            cnt = np.bincount(rc[(rv != source[rc]) & live[rv]], minlength=C)
            want = int(live.sum()) - live[source].astype(np.int64)
            short = np.flatnonzero(cnt < want)
            n_missing = int((want - cnt).sum())
            missing_keys = (_missing_every(uniq, C, n, source, short[:1], live) if short.size
                            else np.zeros(0, np.int64))
    else:
        req = dest * C + c_all
        keep = (dest >= 0) & (dest != source)
        if alive is not None:
            keep &= alive[np.maximum(dest, 0)]
        req = req[keep]
        if dense:
            have = received[req] if T else np.zeros(req.size, dtype=bool)
        else:
            have = np.isin(req, uniq)
        missing_keys = req[~have]
        n_missing = missing_keys.size
    if n_missing:
        miss = int(missing_keys[0])
        raise VerificationError(
            f"postcondition unmet: NPU {miss // C} never receives chunk {miss % C} "
            f"({n_missing} (NPU, chunk) pairs missing)")


def _missing_every(uniq: np.ndarray, C: int, n: int, source: np.ndarray, chunks: np.ndarray,
                   live: np.ndarray) -> np.ndarray:
    """Keys ``v * C + c`` of the pairs that no transfer reached, for chunks every (live) NPU needs (sparse
    case)."""
    out = []
    for c in chunks.tolist():
        got = set((uniq[uniq % C == c] // C).tolist())
        out += [v * C + c for v in range(n) if v != source[c] and v not in got and live[v]]
    return np.array(sorted(out), np.int64)


def _replay_general(problem: Problem, schedule: Schedule, tol: float, alive=None) -> None:
    """Event replay with per-(NPU, chunk) contribution bitmasks (Python ints)."""
    n, C = problem.num_npus, problem.num_chunks
    full = (1 << n) - 1
    if problem.collective.reduces:
        state = [[1 << v] * C for v in range(n)]
    else:
        state = [[0] * C for _ in range(n)]
        for c, v in enumerate(problem.sources.tolist()):
            state[v][c] = full
    T = len(schedule)
    if T == 0:
        _check_post(problem, state, alive)
        return
    chunk = schedule.chunk.tolist()
    src = schedule.src.tolist()
    dst = schedule.dst.tolist()
    op = schedule.op.tolist()
    # Arrivals (kind 0) are ordered by end - tol so that an arrival counts for
    # a read at the same instant; reads (kind 1) at their start.
    times = np.concatenate([schedule.end_us - tol, schedule.start_us])
    kinds = np.concatenate([np.zeros(T, np.int8), np.ones(T, np.int8)])
    idx = np.concatenate([np.arange(T), np.arange(T)])
    order = np.lexsort((idx, kinds, times))
    payload = [0] * T
    end_l = schedule.end_us.tolist()
    last = {}  # (npu, chunk) -> (time, op) of the latest arrival, to catch same-instant races
    for e in order.tolist():
        i = e if e < T else e - T
        if e >= T:  # read at start
            v = state[src[i]][chunk[i]]
            if v == 0:
                raise VerificationError(
                    f"{_row(schedule, i)}: non-causal: NPU {src[i]} holds no part of chunk {chunk[i]} "
                    f"at {schedule.start_us[i]:.6f} µs")
            payload[i] = v
        else:  # arrival
            v = payload[i]
            d, c = dst[i], chunk[i]
            cur = state[d][c]
            if op[i] == COPY:
                new = v
            else:
                both = cur & v
                if both:
                    twice = [k for k in range(n) if both >> k & 1][:5]
                    raise VerificationError(
                        f"{_row(schedule, i)}: reduction counts the contribution of NPU(s) "
                        f"{', '.join(map(str, twice))} twice at NPU {d}")
                new = cur | v
            prev = last.get((d, c))
            if prev is not None and end_l[i] - prev[0] <= tol and COPY in (op[i], prev[1]) and new != cur:
                raise VerificationError(
                    f"{_row(schedule, i)}: races with another transfer landing on NPU {d}, chunk {c} at the same "
                    f"instant; with a copy involved the result depends on their order")
            state[d][c] = new
            last[(d, c)] = (end_l[i], op[i])
    _check_post(problem, state, alive)


def _check_post(problem: Problem, state, alive=None) -> None:
    n, C = problem.num_npus, problem.num_chunks
    full = (1 << n) - 1
    dest = problem.destinations.tolist()
    missing = []
    for c in range(C):
        for v in (range(n) if dest[c] < 0 else (dest[c],)):
            if state[v][c] != full and (alive is None or alive[v]):
                missing.append((v, c))
    missing.sort()
    if missing:
        v, c = missing[0]
        have = state[v][c]
        lacking = [k for k in range(n) if not (have >> k & 1)]
        what = ("holds nothing" if have == 0 else
                f"lacks the contribution(s) of NPU(s) {', '.join(map(str, lacking[:5]))}"
                + ("..." if len(lacking) > 5 else ""))
        raise VerificationError(
            f"postcondition unmet: NPU {v}, chunk {c} {what} at the end ({len(missing)} (NPU, chunk) pairs wrong)")
