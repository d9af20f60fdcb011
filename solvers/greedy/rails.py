"""The rail decomposition of an All-Gather on a rail-optimized fabric (``greedy_plus`` candidate ``rails``).

A rail-optimized cluster joins the GPUs of a node by their fastest hops (the NVSwitch) and GPU ``g`` of every
node by a rail of its own (the rail's leaf). The lower bound of an All-Gather there is the last import wave:
every NIC imports its rail's chunks back to back, and the node spreads the last of them (docs/rails.md). This
builds that schedule from two kinds of small problems instead of one large one:

1. **rails**: every rail runs an All-Gather of its members' chunks over its own links (the fabric greedy with
   the options' rules, :func:`solvers.greedy.fabric.fabric_copy`); rails with the same links, speeds and start
   state are solved once and relabelled;
2. **groups**: every node spreads what its members hold over its own links as each piece lands: an All-Gather
   among the node's GPUs whose chunks are ready at their rail arrival (the list schedule,
   :func:`solvers.list_schedule.list_copy`, tie rule ``group``), overlapped with the rails (the two use
   disjoint links).

The layout is read off the hops alone (:func:`rail_layout`): groups are the NPUs joined by the fastest hops,
rails the components of the hops between groups; it applies when every group has the same size, every rail has
one member in each group, and the groups' links, and each rail's, are disjoint. The mirrors (Reduce-Scatter,
All-Reduce) come from :func:`solvers.greedy.fabric_solver._composed` as for every fabric candidate.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.bounds import lower_bound_us
>>> from tacos_bench.topology.fabrics import rail_cluster
>>> from tacos_bench.verify import verify
>>> p = Problem(rail_cluster(3, 4, nvlink_GiBps=400.0, nic_GiBps=50.0), Collective("all_gather", 1, 64))
>>> s = rails_all_gather(p)
>>> round(verify(p, s).collective_time_us / lower_bound_us(p), 3)
1.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.collective import ALL_GATHER, Collective
from tacos_bench.cost import MIB
from tacos_bench.errors import SolverError
from tacos_bench.graph import undirected_components
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule
from tacos_bench.topology import Topology

from ..fabric_routes import Hops, build_hops, fastest_groups

__all__ = ["RailLayout", "rail_layout", "rails_all_gather"]


@dataclass(frozen=True)
class RailLayout:
    """``groups[i]``: the NPUs of group ``i`` in id order; ``rails[r]``: one NPU per group, in group order;
    ``group_hops[i]`` / ``rail_hops[r]``: the hops inside each."""

    groups: list
    rails: list
    group_hops: list
    rail_hops: list


def rail_layout(hops: Hops, n: int, num_links: int) -> RailLayout | str:
    """The groups and rails of a fabric's hops (module docstring), or why it has none (the last answer is kept
    for the same hops: a candidate asks before it runs)."""
    if _LAST[0] is hops:
        return _LAST[1]
    _LAST[:] = [hops, _layout(hops, n, num_links)]
    return _LAST[1]


_LAST: list = [None, None]


def _layout(hops: Hops, n: int, L: int) -> RailLayout | str:
    gid = fastest_groups(hops, n)[0]
    size = np.bincount(gid)
    if len(size) < 2 or size.min() < 2 or size.min() != size.max():
        return ("no groups of equal size joined by the fastest hops" if len(size) >= 2 else
                "one group of NPUs joined by the fastest hops")
    cross = gid[hops.src] != gid[hops.dst]
    rid = undirected_components(n, hops.src[cross], hops.dst[cross])
    groups = [np.flatnonzero(gid == g) for g in range(len(size))]
    rails = [np.flatnonzero(rid == r) for r in range(int(rid.max()) + 1)]
    if len(rails) != size[0] or any(len(r) != len(groups) or len(set(gid[r].tolist())) != len(groups) for r in rails):
        return "the hops between groups do not form rails of one NPU per group"
    rails = [r[np.argsort(gid[r])] for r in rails]
    # each hop's part (its group, or its rail after the groups); a link in two parts breaks the decomposition
    part = np.where(cross, len(groups) + rid[hops.src], gid[hops.src])
    lk = hops.link_pad.ravel()
    owner = np.repeat(part, hops.link_pad.shape[1])
    real = lk < L                          # the padding link (id L) is no link
    lo = np.full(L + 1, np.iinfo(np.int64).max)
    hi = np.full(L + 1, -1)
    np.minimum.at(lo, lk[real], owner[real])
    np.maximum.at(hi, lk[real], owner[real])
    if np.any((hi >= 0) & (lo != hi)):
        return "the groups and rails share links"
    order = np.argsort(part, kind="stable")
    cuts = np.searchsorted(part[order], np.arange(len(groups) + len(rails) + 1))
    by_part = [order[cuts[i]:cuts[i + 1]].astype(np.int64) for i in range(len(groups) + len(rails))]
    return RailLayout(groups, rails, by_part[:len(groups)], by_part[len(groups):])


def _part(topo: Topology, npus: np.ndarray, hops: Hops, hop_ids: np.ndarray, name: str
          ) -> tuple[Topology, np.ndarray, np.ndarray]:
    """The sub-fabric of ``npus`` (renumbered in that order) over the links of ``hop_ids``: the topology, each
    of its nodes' id in ``topo``, and each of its links' id in ``topo``."""
    links = np.unique(np.concatenate([np.asarray(hops.links[h], np.int64) for h in hop_ids]))
    sw = np.unique(np.concatenate([topo.src[links], topo.dst[links]]))
    sw = sw[sw >= topo.num_npus]
    nodes = np.concatenate([npus, sw]).astype(np.int64)
    new = np.full(topo.num_nodes, -1, np.int64)
    new[nodes] = np.arange(len(nodes))
    sub = Topology(len(npus), new[topo.src[links]], new[topo.dst[links]], topo.bw_GiBps[links], topo.lat_us[links],
                   name=name, switches=tuple(topo.switch(int(s)) for s in sw))
    return sub, nodes, links[np.argsort(sub.link_ids(new[topo.src[links]], new[topo.dst[links]]))]


def _sub_problem(topo: Topology, cpn: int, chunk_bytes: int) -> Problem:
    """An All-Gather of ``cpn`` chunks per NPU of exactly ``chunk_bytes`` each on ``topo``."""
    p = Problem(topo, Collective(ALL_GATHER, cpn, chunk_bytes * topo.num_npus * cpn / MIB))
    if p.chunk_bytes != chunk_bytes:
        raise SolverError(f"rails: a sub-problem's chunk is {p.chunk_bytes} B, not {chunk_bytes} B")
    return p


def _lifted(s: Schedule, nodes: np.ndarray, chunks: np.ndarray) -> Schedule:
    """A sub-problem's schedule in the whole problem's node and chunk ids."""
    route = None
    if s.route is not None:
        names = {r: ">".join(str(nodes[int(x)]) for x in r.split(">")) if r else "" for r in set(s.route.tolist())}
        route = np.array([names[r] for r in s.route.tolist()], dtype=object)
    return Schedule(chunks[s.chunk.astype(np.int64)], nodes[s.src.astype(np.int64)], nodes[s.dst.astype(np.int64)],
                    s.start_us, s.end_us, s.op, route=route)


def _solve_once(memo: dict, key, solve):
    if key not in memo:
        memo[key] = solve()
    return memo[key]


def rails_all_gather(problem: Problem, *, hops: Hops | None = None, link_free: np.ndarray | None = None,
                     chunk_ready: np.ndarray | None = None, seed: int = 0, chunk_order: str = "rarest",
                     local_first: bool = False, group_rule: str = "group") -> Schedule:
    """The rail decomposition (module docstring) of an All-Gather on a rail-optimized fabric.

    Parameters
    ----------
    problem : Problem
        An All-Gather on a fabric with a :func:`rail_layout`.
    hops : Hops, optional
        The fabric's hops (default :func:`solvers.fabric_routes.build_hops`).
    link_free, chunk_ready : array, optional
        A start state, as :func:`solvers.greedy.fabric.fabric_copy` takes it (All-Reduce's All-Gather phase).
    seed, chunk_order, local_first
        The fabric greedy's rules on the rails.
    group_rule : str
        The list schedule's tie rule inside the groups (:data:`solvers.list_schedule.RULES`).

    Raises
    ------
    SolverError
        When the problem is not an All-Gather or the fabric has no rail layout (the message says why).
    """
    from ..list_schedule import list_copy
    from .fabric import fabric_copy

    if problem.kind != ALL_GATHER:
        raise SolverError(f"rails: All-Gather only (this is {problem.kind})")
    topo = problem.topology
    n, K, cb = problem.num_npus, problem.collective.chunks_per_npu, problem.chunk_bytes
    hops = build_hops(topo, cb) if hops is None else hops
    lay = rail_layout(hops, n, topo.num_links)
    if isinstance(lay, str):
        raise SolverError(f"rails: {lay}")
    free = np.zeros(topo.num_links) if link_free is None else np.asarray(link_free, dtype=np.float64)
    ready = np.zeros(problem.num_chunks) if chunk_ready is None else np.asarray(chunk_ready, dtype=np.float64)
    G, P = len(lay.groups), len(lay.rails)
    arrival = np.full((n, problem.num_chunks), np.inf)   # when each NPU holds each chunk after the rails
    src = np.asarray(problem.sources, dtype=np.int64)
    arrival[src, np.arange(problem.num_chunks)] = ready
    parts, memo = [], {}

    # 1. rails: chunk k*G + j of a rail's All-Gather is chunk k*n + (its j-th member) of the whole
    for r, members in enumerate(lay.rails):
        sub, nodes, links = _part(topo, members, hops, lay.rail_hops[r], f"{topo.name}-rail{r}")
        chunks = (np.arange(K)[:, None] * n + members[None, :]).ravel()
        key = ("rail", sub.src.tobytes(), sub.dst.tobytes(), sub.bw_GiBps.tobytes(), sub.lat_us.tobytes(),
               sub.switches, free[links].tobytes(), ready[chunks].tobytes())

        def solve_rail(sub=sub, links=links, chunks=chunks):
            p = _sub_problem(sub, K, cb)
            return fabric_copy(p, seed=seed, chunk_order=chunk_order, local_first=local_first,
                               link_free=free[links], chunk_ready=ready[chunks])

        s = _lifted(_solve_once(memo, key, solve_rail), nodes, chunks)
        parts.append(s)
        last = s.dst < n
        np.minimum.at(arrival, (s.dst[last].astype(np.int64), s.chunk[last].astype(np.int64)), s.end_us[last])

    # 2. groups: member j's i-th chunk (by arrival, then id) is chunk i*P + j of the group's All-Gather
    for g, members in enumerate(lay.groups):
        sub, nodes, links = _part(topo, members, hops, lay.group_hops[g], f"{topo.name}-group{g}")
        held = []
        for v in members.tolist():
            cs = np.flatnonzero(np.isfinite(arrival[v]) & (src != v) | (src == v))
            cs = cs[np.lexsort((cs, arrival[v, cs]))]
            if len(cs) != G * K:
                raise SolverError(f"rails: NPU {v} holds {len(cs)} chunks after the rails, not {G * K}")
            held.append(cs)
        chunks = np.stack(held, axis=1).ravel()           # [i, j] -> chunk i*P + j
        at = np.stack([arrival[v, c] for v, c in zip(members.tolist(), held)], axis=1).ravel()
        key = ("group", sub.src.tobytes(), sub.dst.tobytes(), sub.bw_GiBps.tobytes(), sub.lat_us.tobytes(),
               sub.switches, free[links].tobytes(), at.tobytes())

        def solve_group(sub=sub, links=links, at=at):
            p = _sub_problem(sub, G * K, cb)
            return list_copy(p, link_free=free[links], chunk_ready=at, rule=group_rule)

        parts.append(_lifted(_solve_once(memo, key, solve_group), nodes, chunks))
    return Schedule.concat(parts).sorted()
