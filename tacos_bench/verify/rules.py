"""The per-row rules every replay applies, whatever the network: a point-to-point topology is read as a fabric
whose every route is one link (docs/fabrics.md, "The rules the verifier enforces"), so one piece of code names
the rows and checks their ids and times, their durations against what their links need, the failed links of a
fault and the overlaps on one link.

What depends on the network kind (the links of a row, what it needs, which rows may share a link) comes from
the network's rules object (:class:`tacos_bench.verify.table.PointToPoint`,
:class:`tacos_bench.verify.fabric.Fabric`); :func:`tacos_bench.verify.replay.replay` applies them in order.
Rows are named by :func:`tacos_bench.schedule.row_text` (their file line, for a schedule read from a CSV).
"""

from __future__ import annotations

import numpy as np

from ..errors import VerificationError
from ..problem import Problem
from ..schedule import Schedule, row_text
from .result import REL_TOL, TOL_LINK_FRACTION, Verification

NPU, CUT, STORE = 0, 1, 2   # node kinds: an NPU, a cut_through switch, a store_forward switch
_NODE_NAMES = ("NPU", "cut_through switch", "store_forward switch")


def node_text(kind: np.ndarray, v: int) -> str:
    """Node ``v`` by its kind: ``NPU 3``, ``cut_through switch 8``."""
    return f"{_NODE_NAMES[int(kind[int(v)])]} {int(v)}"


def tolerance(problem: Problem, makespan_us: float) -> float:
    """The time tolerance of a replay: ``REL_TOL`` of the makespan, capped far below every link time.

    The tolerance absorbs float rounding only (CSV round trips): capped at ``TOL_LINK_FRACTION`` of the shortest
    link time, so neither a padded makespan nor tiny links let a transfer end before its own read or
    overlap/precede another one.
    """
    tol = REL_TOL * max(1.0, abs(makespan_us))
    if problem.num_links:
        tol = min(tol, TOL_LINK_FRACTION * float(problem.link_time_us.min()))
    return tol


def check_ids_and_times(schedule: Schedule, num_chunks: int, num_nodes: int, tol: float) -> None:
    """Every chunk id in ``0..num_chunks-1``, every endpoint a node, every time finite and no start before 0."""
    for name, arr, hi in (("chunk", schedule.chunk, num_chunks), ("src", schedule.src, num_nodes),
                          ("dst", schedule.dst, num_nodes)):
        bad = np.flatnonzero((arr < 0) | (arr >= hi))
        if bad.size:
            raise VerificationError(f"{row_text(schedule, bad[0])}: {name} id out of range 0..{hi - 1}")
    start, end = schedule.start_us, schedule.end_us
    bad = np.flatnonzero(~np.isfinite(start) | ~np.isfinite(end) | (start < -tol))
    if bad.size:
        raise VerificationError(f"{row_text(schedule, bad[0])}: times must be finite and start >= 0")


def check_durations(schedule: Schedule, need: np.ndarray, tol: float, need_text) -> None:
    """Every row lasts at least ``need`` (its links' time); ``need_text(i)`` says what row ``i`` needs."""
    start, end = schedule.start_us, schedule.end_us
    bad = np.flatnonzero(end - start < need - tol)
    if bad.size:
        i = bad[0]
        raise VerificationError(f"{row_text(schedule, i)}: lasts {end[i] - start[i]:.6f} µs, shorter than "
                                f"{need_text(i)} {need[i]:.6f} µs")


def check_fault(problem: Problem, schedule: Schedule, fault, row: np.ndarray, link: np.ndarray,
                tol: float) -> np.ndarray:
    """With a :class:`~tacos_bench.faults.Fault`: no row holds a failed link (``row[k]`` holds ``link[k]``) past
    the failure; returns which NPUs survive."""
    topo = problem.topology
    failed = np.zeros(problem.num_links, bool)
    failed[fault.failed_link_ids(topo)] = True
    hit = failed[link] & (schedule.end_us[row] > fault.at_us + tol)
    if hit.any():
        rows = row[hit]
        k = int(np.argmin(schedule.start_us[rows]))
        i, lk = rows[k], link[hit][k]
        raise VerificationError(f"{row_text(schedule, i)}: link {int(topo.src[lk])}->{int(topo.dst[lk])} fails "
                                f"at {fault.at_us:.6f} µs, before this transfer ends")
    if fault.slow:
        _check_slow(problem, schedule, fault, row, link, tol)
    alive = np.ones(problem.num_npus, bool)
    alive[list(fault.npus)] = False
    return alive


def _check_slow(problem: Problem, schedule: Schedule, fault, row: np.ndarray, link: np.ndarray, tol: float) -> None:
    """Links that slow down at the fault: every row holding one lasts at least what the slow-down model gives
    (:func:`tacos_bench.faults.least_end_us`: the chunk not yet sent goes at the new bandwidth)."""
    from ..faults import least_end_us

    slowed, least = least_end_us(problem, fault, schedule, row, link)
    short = np.flatnonzero(slowed & (schedule.end_us < least - tol))
    if short.size:
        i = int(short[np.argmin(schedule.start_us[short])])
        topo = problem.topology
        f = fault.slow_factors(topo)
        held = link[row == i]
        lk = int(held[np.argmin(f[held])])
        raise VerificationError(f"{row_text(schedule, i)}: ends at {schedule.end_us[i]:.6f} µs, before "
                                f"{least[i]:.6f} µs: link {int(topo.src[lk])}->{int(topo.dst[lk])} runs at "
                                f"{f[lk]:g} of its bandwidth from {fault.at_us:.6f} µs (the fault's slow-down)")


def check_release(problem: Problem, schedule: Schedule, row: np.ndarray, link: np.ndarray, tol: float) -> None:
    """Stragglers (``collective.release_us``): no row holds a link of a late NPU (``row[k]`` holds ``link[k]``)
    before that NPU joins: it neither sends, receives nor forwards before its release."""
    free = problem.link_release_us()
    hit = schedule.start_us[row] < free[link] - tol
    if hit.any():
        rows, lks = row[hit], link[hit]
        k = int(np.argmin(schedule.start_us[rows]))
        i, lk = rows[k], lks[k]
        topo, n = problem.topology, problem.num_npus
        late = max((int(v) for v in (topo.src[lk], topo.dst[lk]) if v < n), key=lambda v: problem.release_us[v])
        raise VerificationError(f"{row_text(schedule, i)}: starts at {schedule.start_us[i]:.6f} µs on link "
                                f"{int(topo.src[lk])}->{int(topo.dst[lk])}, before NPU {late} joins at "
                                f"{problem.release_us[late]:.6f} µs (collective.release_us)")


def first_overlap(link: np.ndarray, start: np.ndarray, end: np.ndarray, tol: float) -> tuple[int, int] | None:
    """The first two occupancies (indices into the arrays) of one link that overlap by more than ``tol``, the
    earlier one first; None when every link carries one at a time."""
    if len(link) < 2:
        return None
    order = np.lexsort((end, start, link))
    ls, ss, es = link[order], start[order], end[order]
    clash = np.flatnonzero((ls[1:] == ls[:-1]) & (ss[1:] < es[:-1] - tol))
    if not clash.size:
        return None
    return int(order[clash[0]]), int(order[clash[0] + 1])


def missing_text(v: int, c: int, count: int) -> str:
    """The message of a copy postcondition that ``count`` (NPU, chunk) pairs miss, NPU ``v``'s chunk ``c``
    first."""
    return f"postcondition unmet: NPU {v} never receives chunk {c} ({count} (NPU, chunk) pairs missing)"


def accepted(num_links: int, rows: int, makespan_us: float, busy_us: float) -> Verification:
    """The verdict of a schedule that broke no rule: its time, rows, the links' busy time and utilization."""
    util = busy_us / (num_links * makespan_us) if makespan_us > 0 and num_links else None
    return Verification(True, makespan_us, rows, busy_us, util, "")
