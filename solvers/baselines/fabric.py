"""The baselines on a switched fabric: each algorithm runs unchanged on the fabric's *logical* topology, and its
transfers are then placed on the fabric's routes.

The logical topology has the NPUs only and a link ``u -> v`` wherever a hop (:mod:`solvers.fabric_routes`)
joins them, as long as the hop (bandwidth of its slowest link, its duration as latency): a switch looks like
the full mesh the algorithms expect. Placing: the algorithm's transfers in the order they start, each over
the hop of its pair whose links free up first (first come, first served on every link a hop crosses),
once its sender holds the chunk. A copy algorithm keeps its order and dependencies, so the placed schedule is
valid; its time now includes the ports the hops share.

Reducing collectives are the copy mirrors on the reversed fabric (:func:`solvers.compose.mirrored`);
All-Reduce is that Reduce-Scatter followed by the All-Gather after a barrier.
"""

from __future__ import annotations

import numpy as np

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule
from tacos_bench.topology import Topology

from ..compose import mirrored
from ..fabric_routes import Hops, build_hops


def logical_topology(topo: Topology, hops: Hops, chunk_bytes: int) -> Topology:
    """NPUs joined wherever a hop joins them (see the module docstring)."""
    best: dict[tuple[int, int], tuple[float, float]] = {}
    for h in range(len(hops)):
        key = (int(hops.src[h]), int(hops.dst[h]))
        bw = float(topo.bw_GiBps[hops.links[h]].min())
        lat = float(hops.dur[h]) - chunk_bytes / (bw * 2**30 / 1e6)
        if key not in best or hops.dur[h] < best[key][2]:
            best[key] = (bw, max(lat, 0.0), float(hops.dur[h]))
    edges = [(u, v, bw, lat) for (u, v), (bw, lat, _) in sorted(best.items())]
    return Topology.from_edges(topo.num_npus, edges, name=f"{topo.name}-logical")


def place_on_fabric(problem: Problem, logical: Schedule, hops: Hops) -> Schedule:
    """The copy schedule ``logical`` (on :func:`logical_topology`) placed on the fabric's hops."""
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    busy = np.zeros(topo.num_links)
    held = np.full((n, C), np.inf)
    src = np.asarray(problem.sources)
    multi = src >= 0
    held[src[multi], np.flatnonzero(multi)] = 0.0
    by_pair: dict[tuple[int, int], list[int]] = {}
    for h in range(len(hops)):
        by_pair.setdefault((int(hops.src[h]), int(hops.dst[h])), []).append(h)
    rows = []
    order = np.lexsort((logical.end_us, logical.start_us))
    for i in order.tolist():
        c, u, v = int(logical.chunk[i]), int(logical.src[i]), int(logical.dst[i])
        ready = held[u, c]
        if not np.isfinite(ready):
            raise SolverError(f"baseline on {topo.name}: chunk {c} leaves NPU {u} before it arrives there")
        options = by_pair.get((u, v))
        if not options:
            raise SolverError(f"baseline on {topo.name}: no hop {u} -> {v}")
        # the hop whose links let it start first
        starts = [max(ready, float(np.max(busy[hops.links[h]] - hops.off[h]))) for h in options]
        k = int(np.argmin(starts))
        h, t0 = options[k], starts[k]
        nodes = hops.nodes[h]
        for a, b in hops.segments[h]:
            path = nodes[a:b + 2]
            s, e = t0 + float(hops.off[h][a]), t0 + float(hops.end[h][a])
            rows.append((c, path[0], path[-1], s, e, ">".join(map(str, path)) if len(path) > 2 else ""))
            busy[hops.links[h][a:b + 1]] = e
        held[v, c] = min(held[v, c], t0 + float(hops.dur[h]))
    if not rows:
        return Schedule.empty()
    c, a, b, s, e, r = zip(*rows)
    return Schedule(c, a, b, s, e, np.full(len(rows), COPY, dtype=np.int8),
                    route=list(r) if any(r) else None).sorted()


def solve_on_fabric(problem: Problem, build_copy) -> tuple[Schedule, dict]:
    """Any collective of ``problem`` from ``build_copy(logical_problem) -> Schedule`` (a baseline's copy
    algorithm), placed on the fabric."""
    cache: dict = {}

    def copy_solve(p: Problem) -> Schedule:
        key = (id(p.topology), p.chunk_bytes)
        if key not in cache:
            hops = build_hops(p.topology, p.chunk_bytes)
            cache[key] = (p.topology, hops, logical_topology(p.topology, hops, p.chunk_bytes))
        _, hops, logical = cache[key]
        return place_on_fabric(p, build_copy(Problem(logical, p.collective)), hops)

    if problem.collective.copies:
        sched = copy_solve(problem)
    elif problem.kind != ALL_REDUCE:
        sched = mirrored(problem, copy_solve)
    else:
        rs = mirrored(problem, copy_solve)
        ag = copy_solve(problem.with_collective(ALL_GATHER))
        sched = Schedule.concat([rs, ag.shifted(rs.makespan_us)])
    return sched, {"fabric": "logical topology, placed on hops", "all_reduce": "barrier"
                   if problem.kind == ALL_REDUCE else None}


