"""Servers of a topology for the server-aware baselines (FAST-like, DeepEP-like): the NPUs joined by the
fastest links (NVLink / NVSwitch inside a node), each server's NPUs in id order, and an NPU's *lane* (its
position in its server: GPU ``i`` of one node faces GPU ``i`` of every other over its rail)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.graph import fastest_link_groups
from tacos_bench.topology import Topology

# links within this relative distance of the fastest bandwidth count as the fast tier
FAST_TIER_REL = 1e-9


@dataclass(frozen=True)
class Servers:
    """``server[v]``: NPU ``v``'s server; ``lane[v]``: its position there; ``members[s]``: server ``s``'s NPUs."""

    server: np.ndarray
    lane: np.ndarray
    members: list[np.ndarray]

    @property
    def count(self) -> int:
        return len(self.members)


def servers(topology: Topology) -> Servers:
    """The connected groups of NPUs over the topology's fastest links (both directions count).

    One link speed everywhere makes one server of every NPU (the baselines then send inside it only).

    Examples
    --------
    >>> from tacos_bench.topology import Topology
    >>> t = Topology.from_edges(4, [(0, 1, 100, 0.1), (1, 0, 100, 0.1), (2, 3, 100, 0.1), (3, 2, 100, 0.1),
    ...                             (1, 2, 10, 1.0), (2, 1, 10, 1.0)])
    >>> s = servers(t)
    >>> s.server.tolist(), s.lane.tolist(), s.count
    ([0, 0, 1, 1], [0, 1, 0, 1], 2)
    """
    server = fastest_link_groups(topology, FAST_TIER_REL)
    members = [np.flatnonzero(server == s) for s in range(int(server.max()) + 1)]
    lane = np.empty(topology.num_npus, np.int64)
    for m in members:
        lane[m] = np.arange(m.size)
    return Servers(server, lane, members)


def deliveries(problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row per (chunk, destination) a copy problem delivers: chunk, source, destination (a chunk's own source
    left out; a table's every-NPU destinations expanded, :meth:`tacos_bench.demand.Demand.required_pairs`)."""
    coll = problem.collective
    if coll.demand is None or coll.unicast:
        c = np.arange(problem.num_chunks)
        s, d = np.asarray(problem.sources), np.asarray(problem.destinations)
    else:
        d, c = coll.demand.required_pairs()
        s = np.asarray(coll.demand.source)[c]
    keep = s != d
    return c[keep], s[keep], d[keep]
