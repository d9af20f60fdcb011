"""Servers of a topology for the server-aware baselines (FAST-like, DeepEP-like): the NPUs joined by the
fastest links (NVLink / NVSwitch inside a node), each server's NPUs in id order, and an NPU's *lane* (its
position in its server: GPU ``i`` of one node faces GPU ``i`` of every other over its rail)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    n = topology.num_npus
    bw = np.asarray(topology.bw_GiBps, dtype=np.float64)
    src, dst = np.asarray(topology.src), np.asarray(topology.dst)
    fast = (bw >= bw.max() * (1 - FAST_TIER_REL)) & (src < n) & (dst < n)
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in zip(src[fast].tolist(), dst[fast].tolist()):
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    roots = np.array([find(v) for v in range(n)])
    _, server = np.unique(roots, return_inverse=True)
    members = [np.flatnonzero(server == s) for s in range(int(server.max()) + 1)]
    lane = np.empty(n, np.int64)
    for m in members:
        lane[m] = np.arange(m.size)
    return Servers(server.astype(np.int64), lane, members)
