"""The bounds of a point-to-point network (every transfer is one link), per collective: which families apply
and in what order (each family's floor is the bounds before it).

* All-Gather: ingress (refined by the entry times), distance, cut, drain; Reduce-Scatter: the All-Gather
  bounds of the reversed links, mirrored in time.
* All-Reduce: bounds valid for All-Reduce directly (never the RS+AG sum of optima, which is not a valid bound
  in general): ingress both ways and gossip, distance, global min cut, both phases' drain.
* Broadcast, Gather, Scatter, All-to-All: ingress and egress, distance, link load, pipeline, cuts, and a
  multicast collective's drain; Reduce: the Broadcast's bounds of the reversed links, mirrored in time.

Examples
--------
>>> from tacos_bench import Collective
>>> from tacos_bench.topology.generators import ring
>>> lower_bounds(Problem(ring(4, bidirectional=False), Collective("all_gather", 1, 1024)))["best_source"]
'ingress'
"""

from __future__ import annotations

import numpy as np

from ..collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from ..problem import Problem
from ..topology import Topology
from ._graph import _Graph
from ._options import _Opts
from .cut import CUT_MAX_NPUS, CUT_SAMPLE_PINS, _ag_cut, _all_reduce_cut, _copy_cut
from .distance import (DISTANCE_EXACT_MAX_NPUS, DISTANCE_SAMPLES, _copy_distance, _distances,
                       _source_distances)
from .drain import _all_reduce_drain, _drain_bound
from .load import count_time_us
from .ingress import REFINE_MAX_NPUS, _all_reduce_ingress, _basic_ingress, _copy_ingress_egress, _refined_ingress
from .load import _link_load_us
from .pipeline import _pipeline_bounds


def _steps(value: float | None, step: float | None):
    if value is None or step is None or step <= 0:
        return None
    return int(round(value / step))


def _all_gather_bounds(topo: Topology, t: np.ndarray, cpn: int, chunk_bytes: int, opts: _Opts) -> dict:
    """All-Gather bounds on ``topo`` with per-link chunk times ``t``."""
    n = topo.num_npus
    g = _Graph(topo, t)
    need = (n - 1) * cpn
    basic = _basic_ingress(g, need)
    diameter, d_exact, E = _distances(g, opts, want_entry=True)
    refined = _refined_ingress(g, E, cpn, basic) if E is not None else None
    ingress = max(basic, refined) if refined is not None else basic
    out = {"ingress_basic_us": basic, "ingress_refined": refined is not None, "ingress_us": ingress,
           "distance_us": diameter, "distance_exact": d_exact}
    out.update(_ag_cut(topo, g, t, cpn, chunk_bytes, opts))
    # the drain argument rules nothing out below its first outside link time: start from the bounds above
    floor = max(v for v in (ingress, diameter, out["cut_us"]) if v is not None)
    out["drain_us"] = _drain_bound(topo, t, cpn, floor) if opts.drain else None
    return out


def _group_gossip_us(topo, t: np.ndarray, C: int) -> float:
    """The one-way gossip count with groups for NPUs (docs/bounds.md, *All-Reduce over groups*): for each
    partition into groups of faster links (servers, then pods; :func:`tacos_bench.topology.tiers.faster_link_components`),
    ``2 (G-1)`` transfers per chunk into groups, over the links between groups (no switch reduces here)."""
    from ..topology.tiers import faster_link_components

    best = 0.0
    for _, label in faster_link_components(topo.num_npus, topo.out_ptr, topo.dst, t):
        G = int(label.max()) + 1
        if 1 < G < topo.num_npus:
            into = label[topo.src] != label[topo.dst]
            best = max(best, float(count_time_us(t[into], np.array([0, int(into.sum())]),
                                                 np.array([2 * (G - 1) * C]))[0]))
    return best


def _all_reduce_bounds(problem: Problem, opts: _Opts) -> dict:
    topo = problem.topology
    C = problem.num_chunks
    t = np.asarray(problem.link_time_us, dtype=np.float64)
    g = _Graph(topo, t)
    rg = g.reversed()
    diameter, d_exact, E = _distances(g, opts, want_entry=True)
    _, _, Er = _distances(rg, opts, want_entry=True) if E is not None else (None, None, None)
    out = _all_reduce_ingress(g, rg, t, C, E, Er)
    grouped = _group_gossip_us(topo, t, C)
    out.update(gossip_us=max(out["gossip_us"], grouped), ingress_us=max(out["ingress_us"], grouped))
    out.update(distance_us=diameter, distance_exact=d_exact)
    out.update(_all_reduce_cut(topo, g, t, C, problem.chunk_bytes, opts))
    if opts.drain:
        floor = max(out["ingress_us"], out["distance_us"], out["cut_us"])
        out["drain_us"] = _all_reduce_drain(topo, t, problem.collective.chunks_per_npu, floor)
    else:
        out["drain_us"] = None
    return out


def _collective_bounds(problem: Problem, opts: _Opts) -> dict:
    """Bounds of the copy collectives beyond All-Gather (broadcast, gather, scatter, all_to_all), from their
    sources and destinations: every NPU must receive what it lacks (ingress) and send what only it holds
    (egress); a chunk cannot arrive sooner than its shortest path (distance); every chunk occupies at least
    its shortest path's total link time (link load); chunks that must cross a cut fit through its links
    (cut: the source's min-cuts for broadcast up to ``cut_max_npus``, otherwise the sets of
    :func:`~tacos_bench.bounds.cut._candidate_cuts`: faster-link groups, grid halves, server-torus halves,
    spectral bisections); the chunks a node sends or receives, by distance, through its links' start/end
    slots (pipeline); and, for broadcast, the group import + drain bound."""
    topo = problem.topology
    t = np.asarray(problem.link_time_us, dtype=np.float64)
    g = _Graph(topo, t)
    rg = g.reversed()
    src, dst = np.asarray(problem.sources), np.asarray(problem.destinations)
    every = dst < 0
    moving = every | (dst != src)
    ingress, egress = _copy_ingress_egress(g, rg, src, dst, every, moving)
    # distances from each source that has chunks to move
    D, row, exact = _source_distances(g, src, moving, opts)
    distance, load, pipeline = 0.0, None, None
    if D is not None:
        one = ~every & (dst != src)
        d1 = D[row[one], dst[one]]
        distance = _copy_distance(D, row, d1, every)
        load = _link_load_us(d1, topo.num_links) if d1.size else None
        pipeline = _pipeline_bounds(g, rg, D, row, src, dst, every, moving)
    out = {"ingress_basic_us": ingress, "ingress_refined": False, "ingress_us": max(ingress, egress),
           "egress_us": egress, "distance_us": distance, "distance_exact": bool(exact), "linkload_us": load,
           "pipeline_us": pipeline}
    out.update(_copy_cut(problem, g, t, src, dst, every, moving, opts))
    floor = max(v for v in (out["ingress_us"], distance, out["cut_us"] or 0.0, load or 0.0, pipeline or 0.0)
                if v is not None)
    out["drain_us"] = (_drain_bound(topo, t, 1, floor, src) if opts.drain and problem.collective.multicast
                       else None)
    return out


def lower_bounds(problem: Problem, *, distance_exact_max_npus: int = DISTANCE_EXACT_MAX_NPUS,
                 refine_max_npus: int = REFINE_MAX_NPUS, cut_max_npus: int = CUT_MAX_NPUS,
                 distance_samples: int = DISTANCE_SAMPLES, cut_sample_pins: int = CUT_SAMPLE_PINS,
                 drain: bool = True) -> dict:
    """:func:`tacos_bench.bounds.lower_bounds` on a point-to-point network (its options and keys)."""
    opts = _Opts(distance_exact_max_npus, refine_max_npus, cut_max_npus, distance_samples, cut_sample_pins, drain)
    topo = problem.topology
    kind = problem.kind
    n = topo.num_npus
    step = float(problem.link_time_us[0]) if (topo.is_homogeneous and topo.num_links) else None
    if n == 1:
        res = {"ingress_us": 0.0, "ingress_basic_us": 0.0, "ingress_refined": True, "distance_us": 0.0,
               "distance_exact": True, "cut_us": None, "cut_bw_us": None, "cut_exact": True,
               "cut_method": "none (single NPU)", "cut_flows": 0}
    elif kind == ALL_GATHER:
        res = _all_gather_bounds(topo, np.asarray(problem.link_time_us, dtype=np.float64),
                                 problem.collective.chunks_per_npu, problem.chunk_bytes, opts)
    elif kind == REDUCE_SCATTER:
        # Each All-Gather argument on the reversed links, mirrored in time, holds for Reduce-Scatter.
        rp = problem.reversed_all_gather()
        res = _all_gather_bounds(rp.topology, np.asarray(rp.link_time_us, dtype=np.float64),
                                 problem.collective.chunks_per_npu, problem.chunk_bytes, opts)
    elif kind == ALL_REDUCE:
        res = _all_reduce_bounds(problem, opts)
    elif kind == "reduce":
        # the broadcast's arguments on the reversed links, mirrored in time (as Reduce-Scatter from All-Gather)
        res = _collective_bounds(problem.mirror(), opts)
    else:
        res = _collective_bounds(problem, opts)
    # drain starts from the others (it is at least their max): on a tie the argument that proved it is named
    parts = {"ingress": res["ingress_us"], "distance": res["distance_us"], "cut": res["cut_us"],
             "linkload": res.get("linkload_us"), "pipeline": res.get("pipeline_us"), "drain": res.get("drain_us")}
    best = max(v for v in parts.values() if v is not None)
    # Ties (common: the cut bound of a single NPU equals its ingress bound) go to the first listed.
    best_source = next(k for k, v in parts.items() if v is not None and v >= best * (1 - 1e-12))
    res.update(kind=kind, step_us=step, ingress_steps=_steps(res["ingress_us"], step),
               ingress_basic_steps=_steps(res["ingress_basic_us"], step),
               best_us=float(best), best_source=best_source)
    res.setdefault("gossip_us", None)
    res.setdefault("cut_size", None)
    res.setdefault("drain_us", None)
    res.setdefault("linkload_us", None)
    res.setdefault("egress_us", None)
    res.setdefault("pipeline_us", None)
    return res


def cheap_bound_us(problem: Problem) -> float:
    """:func:`tacos_bench.bounds.cheap_bound_us` on a point-to-point network: the per-NPU ingress bound and the
    group import + drain bound of an All-Gather."""
    t = np.asarray(problem.link_time_us, dtype=np.float64)
    g = _Graph(problem.topology, t)
    if g.n < 2:
        return 0.0
    cpn = problem.collective.chunks_per_npu
    ingress = _basic_ingress(g, (g.n - 1) * cpn)
    return max(ingress, _drain_bound(problem.topology, t, cpn, ingress))
