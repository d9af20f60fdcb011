"""One-pass verifier for compact All-Gather schedules (:mod:`tacos_bench.compact`).

It checks what :func:`tacos_bench.verify.verify` checks for a copy-only
All-Gather, with the same tolerance, streaming over the segments in their
(end-event) order, and knows nothing about the solver that wrote them:

* every row uses a link of the problem's topology (the compact file's
  ``(src, dst)`` table is looked up in the topology, its link ids are not
  trusted) and a valid chunk id and event;
* rows come in non-decreasing end time (the format's promise, checked);
* a transfer lasts at least its link's chunk time (and a positive time);
* no two transfers overlap on one directed link: in end order it suffices that
  each starts no earlier than the previous one on its link ended;
* causality: the sender owns the chunk or received it (earliest arrival) no
  later than the start. In end order, every arrival that can precede a start
  has already been seen, because transfers take positive time;
* postcondition: every NPU receives every chunk it does not own.

State: the earliest arrival (as an event index) of every (chunk, NPU), ``uint16``
when there are fewer than 65,535 events else ``uint32`` (chunk-major, so a
transfer's sender and receiver entries share cache lines on grids), plus the
last end time per link: ``N * C * 2`` (or 4) bytes, 3.2 GB at 40,000 NPUs.

The random accesses (the arrival state, the links' last end) dominate; they are
split over ``threads`` parts that read the same rows: part ``p`` keeps the
arrivals of the chunks ``c % P == p`` and the links ``l % P == p``, and every part
repeats the cheap per-row checks. Each part's state depends on its own rows only,
so the first violation (lowest row, then the first check in row order) is the one
a single pass finds, whatever the number of parts.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> from tacos_bench.schedule import Schedule
>>> from tacos_bench.compact import CompactSchedule
>>> p = Problem(ring(2), Collective("all_gather", 1, 1))
>>> t = float(p.link_time_us[0])
>>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
>>> verify_compact(p, CompactSchedule.from_schedule(p, s)).collective_time_us == t
True
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .._native import prefetch as _prefetch
from ..collective import ALL_GATHER
from ..errors import ScheduleError, VerificationError
from ..problem import Problem
from .._memory import huge_empty
from ..schedule import describe_row
from .result import Verification
from .rules import accepted, missing_text, tolerance

# error codes of the kernel
(E_OK, E_CHUNK, E_LINK_ID, E_UNKNOWN_LINK, E_EVENT, E_ORDER, E_SHORT, E_NONPOSITIVE, E_OVERLAP,
 E_NONCAUSAL) = range(10)
_PF = 16  # rows prefetched this many places ahead, so their cache misses overlap


@njit(cache=True, nogil=True)
def _verify_segment(chunk, link, lag, end_first, end_count, row0, N, C, lid, lsrc, ldst, ltime, events, tol,
                    arr, last_end, never, state, info, part, P):
    """Check part ``part`` of ``P`` of one segment; returns an error code (``info[0]`` = the row, ``info[1]`` a
    detail) or ``E_OK``.

    ``state`` = [last end event seen, (NPU, chunk) pairs received so far]; ``info[3]`` = link busy time.
    """
    E = events.shape[0]
    M = lid.shape[0]
    nrows = chunk.shape[0]
    arrf = arr.reshape(-1)
    i = 0
    busy = 0.0
    prev_e = state[0]
    for k in range(end_count.shape[0]):
        e = end_first + k
        n = end_count[k]
        if n == 0:
            continue
        if e < 0 or e >= E:
            info[0] = row0 + i
            return E_EVENT
        if e < prev_e:
            info[0] = row0 + i
            return E_ORDER
        prev_e = e
        te = events[e]
        for _ in range(n):
            if i + _PF < nrows:
                # hint the cache lines of the row _PF places ahead (their misses overlap with this row's work)
                l_pf = lid[min(np.int64(link[i + _PF]), M - 1)]
                if l_pf >= 0:
                    c_pf = min(np.int64(chunk[i + _PF]), C - 1)
                    if c_pf % P == part:
                        _prefetch(arrf, c_pf * N + lsrc[l_pf])
                        _prefetch(arrf, c_pf * N + ldst[l_pf])
                    if l_pf % P == part:
                        _prefetch(last_end, l_pf)
            c = np.int64(chunk[i])
            k_link = np.int64(link[i])
            s = e - np.int64(lag[i])
            info[0] = row0 + i
            if c >= C:
                return E_CHUNK
            if k_link >= M:
                return E_LINK_ID
            l = lid[k_link]
            if l < 0:
                info[1] = k_link
                return E_UNKNOWN_LINK
            if s < 0:
                return E_EVENT
            ts = events[s]
            need = ltime[l]
            if te - ts < need - tol:
                return E_SHORT
            if te - ts <= 0.0:
                return E_NONPOSITIVE
            if l % P == part:
                if ts < last_end[l] - tol:
                    info[1] = l
                    return E_OVERLAP
                if te > last_end[l]:
                    last_end[l] = te
            busy += need
            i += 1
            if c % P != part:
                continue
            u = lsrc[l]
            v = ldst[l]
            o = c % N
            if u != o:
                a = arr[c, u]
                if a == never or events[a] > ts + tol:
                    info[1] = -1 if a == never else a
                    return E_NONCAUSAL
            if v != o and arr[c, v] == never:
                arr[c, v] = e
                state[1] += 1
    state[0] = prev_e
    info[3] = busy
    return E_OK


@njit(cache=True)
def _first_missing(arr, N, never):
    C = arr.shape[0]
    for c in range(C):
        o = c % N
        for v in range(N):
            if v != o and arr[c, v] == never:
                return v, c
    return -1, -1


def verify_compact(problem: Problem, compact, *, progress: bool | None = None,
                   threads: int | None = None) -> Verification:
    """Replay a :class:`~tacos_bench.compact.CompactSchedule` on ``problem``; raise on the first violation.

    Returns the same :class:`~tacos_bench.verify.Verification` as
    :func:`tacos_bench.verify.verify`, whose checks (for a copy-only All-Gather)
    it repeats; the messages name the row (0-based, in the compact file's order).
    ``progress`` shows a bar over the rows (default: when stderr is a terminal). ``threads``
    (default: the usable cores, at most 4) splits the work; the result does not depend on it.
    """
    if problem.kind != ALL_GATHER:
        raise VerificationError(f"a compact schedule is an All-Gather; the problem is {problem.kind}")
    topo = problem.topology
    N, C = problem.num_npus, problem.num_chunks
    if compact.num_npus != N or compact.num_chunks != C:
        raise VerificationError(f"compact schedule is for {compact.num_npus} NPUs and {compact.num_chunks} chunks, "
                                f"the problem has {N} and {C}")
    events = np.ascontiguousarray(compact.events, dtype=np.float64)
    if len(events) and (not np.all(np.isfinite(events)) or np.any(np.diff(events) <= 0)):
        raise VerificationError("compact schedule: event times must be finite and strictly increasing")
    links = np.asarray(compact.links)
    lid = topo.link_ids(links[:, 0], links[:, 1]).astype(np.int64) if len(links) else np.zeros(0, np.int64)
    # the makespan (last end) sets the tolerance, as in verify(): from the segment headers only
    T = len(compact)
    makespan = 0.0
    for seg in compact.iter_segments() if T else ():
        cnt = np.asarray(seg["end_count"])
        nz = np.flatnonzero(cnt)
        if len(nz):
            e_last = int(seg["end_first"]) + int(nz[-1])
            if not 0 <= e_last < len(events):
                raise VerificationError(f"compact schedule: end event {e_last} does not exist")
            makespan = max(makespan, float(events[e_last]))
    tol = tolerance(problem, makespan)
    if len(events) and events[0] < -tol:
        raise VerificationError(f"compact schedule: event time {events[0]} is negative; times must be >= 0")

    never = np.iinfo(np.uint16).max if len(events) < np.iinfo(np.uint16).max else np.iinfo(np.uint32).max
    arr = huge_empty((C, N), np.uint16 if never == np.iinfo(np.uint16).max else np.uint32)
    arr.fill(never)
    last_end = np.full(max(topo.num_links, 1), -np.inf)
    lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
    ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
    ltime = np.ascontiguousarray(problem.link_time_us, dtype=np.float64)
    if threads is None:  # threads pay off on large schedules only
        P = min(4, _usable_cores()) if T >= (1 << 20) else 1
    else:
        P = max(1, int(threads))
    state = np.zeros((P, 3), dtype=np.int64)
    state[:, 0] = -1
    info = np.zeros((P, 4))
    codes = np.zeros(P, dtype=np.int64)
    busy = 0.0
    row0 = 0
    bar = _bar(progress, T)
    pool = ThreadPoolExecutor(P) if P > 1 else None
    try:
        for seg in compact.iter_segments() if T else ():
            chunk, link, lag = seg["chunk"], seg["link"], seg["lag"]
            count = np.asarray(seg["end_count"], dtype=np.int64)
            if not (len(chunk) == len(link) == len(lag) == int(count.sum())):
                raise VerificationError(f"compact schedule segment at row {row0}: column lengths disagree")
            args = (chunk, link, lag, np.int64(seg["end_first"]), count, row0, N, C, lid, lsrc, ldst, ltime,
                    events, tol, arr, last_end, never)

            def part(p, args=args):
                codes[p] = _verify_segment(*args, state[p], info[p], p, P)

            if pool is None:
                part(0)
            else:
                for f in [pool.submit(part, p) for p in range(P)]:
                    f.result()
            bad = [p for p in range(P) if codes[p] != E_OK]
            if bad:  # the first violation in row order, then in the order of the checks within a row
                p = min(bad, key=lambda q: (info[q, 0], codes[q]))
                _raise(int(codes[p]), info[p], seg, row0, compact, lid, events, ltime, problem, arr, never)
            busy += float(info[0, 3])
            row0 += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if pool is not None:
            pool.shutdown()
        if bar is not None:
            bar.close()
    if row0 != T:
        raise VerificationError(f"compact schedule: meta.json says {T} rows, the segments hold {row0}")
    missing = (N - 1) * C - int(state[:, 1].sum())
    if missing:
        v, c = _first_missing(arr, N, never)
        raise VerificationError(missing_text(v, c, missing))
    return accepted(topo.num_links, T, makespan, busy)


def check_compact(problem: Problem, compact, *, progress: bool | None = None) -> Verification:
    """Like :func:`verify_compact` but returns ``valid=False`` with the message instead of raising."""
    try:
        return verify_compact(problem, compact, progress=progress)
    except (VerificationError, ScheduleError) as e:
        return Verification(False, None, len(compact), message=str(e))


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _bar(progress, total):
    enabled = sys.stderr.isatty() if progress is None else bool(progress)
    if not enabled or total <= 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="verify (compact)", unit="row", unit_scale=True, delay=2.0, leave=False,
                file=sys.stderr)


def _raise(code, info, seg, row0, compact, lid, events, ltime, problem, arr, never):
    i = int(info[0])
    j = i - row0
    c = int(seg["chunk"][j]) if j < len(seg["chunk"]) else -1
    k = int(seg["link"][j]) if j < len(seg["link"]) else -1
    links = compact.links
    end_ev = _end_event_of(seg, j)
    s_ev = end_ev - int(seg["lag"][j])
    if 0 <= k < len(links):
        u, v = int(links[k, 0]), int(links[k, 1])
    else:
        u = v = -1
    ts = float(events[s_ev]) if 0 <= s_ev < len(events) else float("nan")
    te = float(events[end_ev]) if 0 <= end_ev < len(events) else float("nan")
    row = describe_row(f"row {i}", c, u, v, ts, te, "copy")
    if code == E_CHUNK:
        msg = f"{row}: chunk id out of range 0..{problem.num_chunks - 1}"
    elif code == E_LINK_ID:
        msg = f"row {i}: link index {k} not in the compact schedule's link table ({len(links)} links)"
    elif code == E_UNKNOWN_LINK:
        msg = f"{row}: unknown link {u}->{v}"
    elif code == E_EVENT:
        msg = f"row {i}: start or end event out of range 0..{len(events) - 1}"
    elif code == E_ORDER:
        msg = f"row {i}: rows are not in non-decreasing end-time order"
    elif code == E_SHORT:
        need = float(ltime[lid[k]])
        msg = f"{row}: lasts {te - ts:.6f} µs, shorter than the link time {need:.6f} µs"
    elif code == E_NONPOSITIVE:
        msg = f"{row}: a transfer must take positive time"
    elif code == E_OVERLAP:
        msg = f"{row}: overlaps an earlier transfer on link {u}->{v} (it ends after this one starts)"
    elif code == E_NONCAUSAL:
        a = int(info[1])
        when = "never receives it" if a < 0 else f"receives it only at {float(events[a]):.6f} µs"
        msg = f"{row}: non-causal: NPU {u} does not hold chunk {c} at {ts:.6f} µs ({when})"
    else:  # pragma: no cover - all codes are handled above
        msg = f"row {i}: invalid (code {code})"
    raise VerificationError(msg)


def _end_event_of(seg, j):
    cum = np.cumsum(np.asarray(seg["end_count"], dtype=np.int64))
    k = int(np.searchsorted(cum, j, side="right"))
    return int(seg["end_first"]) + k
