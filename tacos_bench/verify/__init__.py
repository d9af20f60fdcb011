"""Independent replay checker for schedules.

The verifier knows nothing about any solver. It replays a
:class:`~tacos_bench.schedule.Schedule` against a
:class:`~tacos_bench.problem.Problem` and rejects it, with a message naming the
row (its file line, for a schedule read from a CSV file) and the reason, on:

* a transfer on a link the topology does not have (or an unknown NPU/chunk id);
* a transfer shorter than its link's chunk time;
* two transfers overlapping on one directed link;
* a sender that holds no part of the chunk when the transfer starts (non-causal);
* a reduction that counts some NPU's contribution twice, or any reduction in a copy collective;
* an unmet postcondition of the collective;
* with a :class:`~tacos_bench.faults.Fault`: a transfer on a failed link that ends after the failure
  (failed NPUs are then exempt from the postcondition);
* with late NPUs (``collective.release_us``): a transfer on a link of a late NPU that starts before it joins.

It returns the collective time (the last arrival). Times are compared with a
tolerance of ``1e-9`` relative to the schedule's makespan, so CSV round trips
do not matter.

Replay semantics: a transfer reads the sender's state at ``start_us`` and applies
it at the receiver at ``end_us``; events at the same instant apply arrivals
before reads, because a node may forward a chunk the instant it arrives.

One replay serves both network kinds (:func:`tacos_bench.topology.network_kind`): a
point-to-point topology is a fabric whose every route is one link
(:mod:`~tacos_bench.verify.rules`, :mod:`~tacos_bench.verify.replay`); what differs
-- routes, groups sharing a link, switches -- comes from the kind's entry in
:data:`tacos_bench.verify.table.NETWORKS`.
"""

from __future__ import annotations

from ..errors import VerificationError
from ..problem import Problem
from ..schedule import ScheduleLike
from .compact import check_compact, verify_compact
from .result import REL_TOL, TOL_LINK_FRACTION, Verification
from .table import verify

__all__ = ["REL_TOL", "TOL_LINK_FRACTION", "Verification", "check", "check_compact", "verify", "verify_compact"]


def _check_table(problem, schedule, progress, fault) -> Verification:
    try:
        return verify(problem, schedule, fault)
    except VerificationError as e:
        return Verification(False, None, len(schedule), message=str(e))


# one replay per ScheduleLike storage: in memory, or streamed from disk in one pass
_REPLAYS = {"table": _check_table, "compact": lambda problem, schedule, progress, fault: check_compact(
    problem, schedule, progress=progress)}


def check(problem: Problem, schedule: ScheduleLike, *, progress: bool | None = None, fault=None) -> Verification:
    """Replay any schedule and report instead of raising: ``valid=False`` with the message when rejected.

    The one entry point for callers: a :class:`~tacos_bench.compact.CompactSchedule`
    (very large All-Gathers) goes to the streaming
    :func:`tacos_bench.verify.compact.verify_compact`, a :class:`Schedule` to
    :func:`verify`; both apply the same rules.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> check(Problem(ring(2), Collective("all_gather", 1, 1)), Schedule.empty()).message
    'postcondition unmet: NPU 0 never receives chunk 1 (2 (NPU, chunk) pairs missing)'
    """
    if fault is not None or problem.has_release:  # faults and late NPUs are replayed on the table form only
        schedule = schedule.to_schedule()
    return _REPLAYS[schedule.storage](problem, schedule, progress, fault)
