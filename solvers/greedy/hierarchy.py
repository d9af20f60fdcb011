"""Groups of faster links and the rails between them, detected from the topology alone (the tiers of
:mod:`tacos_bench.topology.tiers`); the rail sub-problems that ``hier`` and the tier decomposition solve."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.collective import ALL_GATHER, Collective
from tacos_bench.cost import MIB
from tacos_bench.errors import SolverError
from tacos_bench.graph import undirected_components
from tacos_bench.problem import Problem
from tacos_bench.topology.tiers import Tiers
from tacos_bench.topology.transforms import induced_subtopology


@dataclass(frozen=True)
class Hierarchy:
    """Groups (label per NPU) and rails (member NPUs, one per group, in group order)."""

    group: np.ndarray
    rails: list[np.ndarray]

    @property
    def num_groups(self) -> int:
        return int(self.group.max()) + 1


def detect_hierarchy(problem: Problem) -> Hierarchy:
    """Groups and rails of ``problem``'s topology, or a :class:`SolverError` naming why there are none.

    >>> from tacos_bench.topology.generators import torus2d, unequal_servers
    >>> detect_hierarchy(Problem(torus2d(4, 4), Collective("all_gather")))
    Traceback (most recent call last):
    ...
    tacos_bench.errors.SolverError: hier: topology 'torus4x4' has one link speed tier, so no groups of faster links to build a hierarchy on
    >>> detect_hierarchy(Problem(unequal_servers([4, 8]), Collective("all_gather")))
    Traceback (most recent call last):
    ...
    tacos_bench.errors.SolverError: hier: groups of unequal size in 'unequal4-8' (4 to 8 NPUs): no rail per NPU index
    """
    topo = problem.topology
    name = topo.name
    t = Tiers(problem)
    if t.num_partitions == 0:
        raise SolverError(f"hier: topology {name!r} has one link speed tier, so no groups of faster links to "
                          "build a hierarchy on")
    g = t.gid[0] - t.gid[0].min()
    sizes = np.bincount(g)
    if len(sizes) < 2:
        raise SolverError(f"hier: the fast links of {name!r} connect all its NPUs: one group, nothing between groups")
    if sizes.min() != sizes.max():
        raise SolverError(f"hier: groups of unequal size in {name!r} ({sizes.min()} to {sizes.max()} NPUs): "
                          "no rail per NPU index")
    src, dst = np.asarray(topo.src, np.int64), np.asarray(topo.dst, np.int64)
    cross = g[src] != g[dst]
    root = undirected_components(topo.num_npus, src[cross], dst[cross])   # the rails: NPUs joined across groups
    rails = []
    for r in np.unique(root):
        members = np.flatnonzero(root == r)
        if len(members) != len(sizes) or len(np.unique(g[members])) != len(sizes):
            raise SolverError(f"hier: the links between groups of {name!r} do not form rails (a rail must hold "
                              f"one NPU of each of the {len(sizes)} groups; NPU {int(members[0])}'s has "
                              f"{len(members)} NPUs in {len(np.unique(g[members]))} groups)")
        rails.append(members[np.argsort(g[members], kind="stable")])
    return Hierarchy(g, rails)


def rail_problem(problem: Problem, members: np.ndarray) -> tuple[Problem, np.ndarray]:
    """The All-Gather of a rail's own chunks over the rail's own links, with the problem's chunk size, and the
    map from its NPU ids to the problem's (the sub-topology numbers the members in increasing id order)."""
    N, cpn = problem.num_npus, problem.collective.chunks_per_npu
    keep = np.zeros(N, dtype=bool)
    keep[members] = True
    ids = np.flatnonzero(keep)
    n = len(ids)
    sub_topo = induced_subtopology(problem.topology, keep, f"{problem.topology.name}-rail")
    # the same chunk size: a buffer of n * cpn chunks of chunk_bytes (exact in binary floating point)
    sub = Problem(sub_topo, Collective(ALL_GATHER, cpn, problem.chunk_bytes * n * cpn / MIB))
    if sub.chunk_bytes != problem.chunk_bytes:  # pragma: no cover - guarded by the exact division above
        raise SolverError("hier: internal error: the rail problem's chunk size differs")
    try:
        sub_topo.check_strongly_connected()
    except Exception as e:
        raise SolverError(f"hier: a rail of {problem.topology.name!r} is not strongly connected: {e}") from None
    return sub, ids
