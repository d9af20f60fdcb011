"""The in-memory replay of a table schedule (:class:`~tacos_bench.schedule.Schedule`): the rules of
:mod:`tacos_bench.verify`, vectorized, with the rules that depend on the network kind looked up in
:data:`NETWORKS`."""

from __future__ import annotations

import numpy as np

from ..errors import VerificationError
from ..problem import Problem
from ..schedule import REDUCE, Schedule
from ..topology.model import FABRIC, POINT_TO_POINT, network_kind
from .fabric import Fabric, verify_fabric
from .replay import DENSE_LIMIT, replay  # noqa: F401 - DENSE_LIMIT: its earlier home
from .result import Verification
from .rules import first_overlap, row_text


class PointToPoint:
    """Rules 1-3 on a point-to-point topology: every node an NPU, a row is one transfer over the link
    ``src -> dst``, and no two rows share a link at once.

    A point-to-point topology is a fabric whose every route is one link, and :class:`Fabric` replays it the same
    way, but its routes, multicast/reduction groups and FIFO switches cost it 3-6 times the time on millions of
    rows (mesh40x40 All-Gather from greedy, 2.6 M rows: 2.2 s against 0.38 s); this class is that fabric without
    them.
    """

    def __init__(self, problem: Problem, schedule: Schedule):
        topo = problem.topology
        self._problem, self._schedule = problem, schedule
        self.kind = np.zeros(topo.num_nodes, np.int8)          # every node an NPU
        self.fifo_copy = self.fifo_red = np.zeros(topo.num_nodes, bool)
        self.link = topo.link_ids(schedule.src, schedule.dst)   # one link per row
        bad = np.flatnonzero(self.link < 0)
        if bad.size:
            i = bad[0]
            raise VerificationError(f"{row_text(schedule, i)}: unknown link {int(schedule.src[i])}->"
                                    f"{int(schedule.dst[i])}")

    @property
    def row(self) -> np.ndarray:
        """The row of each of :attr:`link`: itself."""
        return np.arange(len(self._schedule))

    def need(self) -> np.ndarray:
        """Rule 2: a row needs its link's time."""
        return self._problem.link_time_us[self.link]

    def need_text(self, i: int) -> str:
        return "the link time"

    def occupancy(self, need: np.ndarray, tol: float) -> float:
        """Rule 3: one row at a time per link; returns the links' busy time."""
        s = self._schedule
        pair = first_overlap(self.link, s.start_us, s.end_us, tol)
        if pair is not None:
            a, b = pair
            raise VerificationError(f"{row_text(s, b)}: overlaps {row_text(s, a)} on link {int(s.src[a])}->"
                                    f"{int(s.dst[a])}")
        return float(need.sum())


# the rules of each network kind (tacos_bench.topology.network_kind of the problem and the schedule)
NETWORKS = {POINT_TO_POINT: PointToPoint, FABRIC: Fabric}


def verify(problem: Problem, schedule: Schedule, fault=None) -> Verification:
    """Replay ``schedule`` on ``problem``; raise :class:`VerificationError` if invalid.

    ``fault`` (a :class:`tacos_bench.faults.Fault`): the schedule was executed through that failure.
    A switched fabric, or a schedule with a non-empty route, is replayed by the rules of docs/fabrics.md
    (:func:`tacos_bench.verify.fabric.verify_fabric`), a point-to-point topology by :class:`PointToPoint`.

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
        raise VerificationError(f"{row_text(schedule, i)}: a reduce in {problem.kind}, a copy collective: there "
                                "is nothing to reduce")
    return replay(problem, schedule, fault, NETWORKS[network_kind(problem.topology, schedule)])


__all__ = ["NETWORKS", "PointToPoint", "verify", "verify_fabric"]
