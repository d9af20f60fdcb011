"""Lower bounds on the collective time (µs) of a :class:`~tacos_bench.problem.Problem`: one entry point,
:func:`lower_bounds`.

Every number returned here is a *proven* lower bound on the makespan of any schedule the verifier accepts
(store-and-forward, one chunk at a time per link, a transfer of a chunk over link ``l`` lasts at least
``t_l = problem.link_time_us[l]``, a node forwards only what it holds). They hold for any topology:
heterogeneous, asymmetric, irregular. The derivations are in ``docs/bounds.md``. One module per family:

:mod:`~tacos_bench.bounds.ingress`
    A node must receive every chunk it lacks (and send what only it holds), one per link slot; refined by
    the earliest time a chunk can start on a node's in-links; All-Reduce's one-way gossip.
:mod:`~tacos_bench.bounds.distance`
    A chunk cannot reach a node sooner than the shortest link-time path from its owner.
:mod:`~tacos_bench.bounds.cut`
    ForestColl's cut bound: every chunk owned outside ``S`` must enter ``S``; maximised over all cuts with a
    parametric max-flow where that is affordable.
:mod:`~tacos_bench.bounds.drain`
    Group import + drain: the chunks still outside a group of faster links must all reach each member.
:mod:`~tacos_bench.bounds.pipeline`
    The chunks a node sends or receives, by distance, through its links' slots; first and last hop.
:mod:`~tacos_bench.bounds.load`
    The whole-chunk count bound every family counts with, and the link load of the unicast collectives.
:mod:`~tacos_bench.bounds.fabric`
    A switched fabric's own bounds (ports, switch groups, the last import wave, start-up, distance).
:mod:`~tacos_bench.bounds.flow`
    Unicast collectives (Gather, Scatter, All-to-All): the fluid multicommodity-flow bound, certified by a
    feasible dual (an LP by HiGHS, reduced by symmetry where the topology has some, or Garg-Koenemann phases),
    on either network kind.
:mod:`~tacos_bench.bounds.repair`
    A repair after a fault: the state at the fault, and the healthy problem's bound.

:mod:`~tacos_bench.bounds.point_to_point` assembles the families per collective on a point-to-point network,
:mod:`~tacos_bench.bounds.fabric` on a switched fabric; ``_graph`` holds the kernels they share (shortest paths,
max flow, NPU orbits). This module picks one of the two per network kind, once (``_NETWORKS``).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import torus2d
>>> b = lower_bounds(Problem(torus2d(4, 4), Collective("all_gather", 1, 1024)))
>>> b["ingress_basic_steps"], b["ingress_steps"], b["best_us"]
(4, 4, 5002.0)
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..problem import Problem
from . import fabric, point_to_point, repair
# re-exported: what the solvers, the tests and the docs import from here (private names: the tests' checks)
from ._graph import _FlowNet, npu_orbits
from .cut import (CUT_MAX_NPUS, CUT_SAMPLE_PINS, SPECTRAL_MAX_NPUS, SPECTRAL_PROJECTED_MAX_NPUS, _candidate_cuts,
                  max_ratio_cut, min_in_cut)
from .distance import DISTANCE_EXACT_MAX_NPUS, DISTANCE_EXACT_MAX_WORK, DISTANCE_SAMPLES
from .drain import _drain_bound, _drain_groups, _drain_infeasible
from .fabric import fabric_lower_bounds
from .ingress import REFINE_MAX_NPUS
from .load import count_time_us
from .pipeline import HOP_SLOT_MAX_WORK, _kth_of_sequences, _pipeline_bound, root_pipeline_bound_us, start_slots

__all__ = ["lower_bounds", "lower_bound_us", "cheap_bound_us", "root_pipeline_bound_us", "repair_bound_us",
           "repair_bounds", "count_time_us", "fabric_lower_bounds", "max_ratio_cut", "min_in_cut", "npu_orbits",
           "start_slots"]


class _Network(NamedTuple):
    """The bounds of one network kind."""

    lower_bounds: Callable[..., dict]
    cheap_bound_us: Callable[[Problem], float]
    repair_us: Callable[..., float | None]        # the bound on a repair from the state at a fault


# Keyed by network kind (Topology.network_kind): the one place the package tells a fabric from point-to-point links.
_NETWORKS = {
    "point_to_point": _Network(point_to_point.lower_bounds, point_to_point.cheap_bound_us,
                               repair.point_to_point_repair_us),
    "fabric": _Network(fabric.fabric_lower_bounds, fabric.cheap_bound_us, repair.fabric_repair_us),
}


def _network(problem: Problem) -> _Network:
    return _NETWORKS[problem.topology.network_kind]


def lower_bounds(problem: Problem, *, distance_exact_max_npus: int = DISTANCE_EXACT_MAX_NPUS,
                 refine_max_npus: int = REFINE_MAX_NPUS, cut_max_npus: int = CUT_MAX_NPUS,
                 distance_samples: int = DISTANCE_SAMPLES, cut_sample_pins: int = CUT_SAMPLE_PINS,
                 drain: bool = True, flow: bool = True) -> dict:
    """All lower bounds (µs) on the collective time of ``problem``: on a switched fabric those of
    :mod:`tacos_bench.bounds.fabric` (the same keys; the size limits below do not apply there), otherwise
    those of :mod:`tacos_bench.bounds.point_to_point`.

    Parameters
    ----------
    problem : Problem
    distance_exact_max_npus : int
        All-pairs shortest paths (exact diameter) up to this many NPUs (and
        ``N*(N+L) <= 4e8``); above, the max over alternating forward/backward
        sweeps from ``distance_samples`` sources (a valid, maybe smaller, bound).
    refine_max_npus : int
        The distance-refined ingress bound needs an ``N x N`` matrix; above this
        only the plain count bound is used.
    cut_max_npus : int
        The cut bound is maximised exactly over all cuts up to this size
        (All-Gather/Reduce-Scatter: one max flow per automorphism orbit of
        NPUs plus one per improvement; All-Reduce: ``2(N-1)`` max flows);
        above, only the singleton cuts ``{v}`` and ``V - {v}`` (O(L)) plus
        ``cut_sample_pins`` evenly spaced pinned max flows are used: still
        valid, flagged ``cut_exact=False``.
    distance_samples, cut_sample_pins : int
        Effort of the cheap fallbacks above the size limits.
    flow : bool
        Gather, Scatter, All-to-All: also the multicommodity-flow bound (:mod:`~tacos_bench.bounds.flow`,
        its keys ``flow_*``; ``best_source`` then says ``flow:<method>``).

    Returns
    -------
    dict
        ``ingress_us``, ``ingress_steps`` (``ingress_us`` in link times when the
        topology is homogeneous, else None), ``ingress_basic_us`` /
        ``ingress_basic_steps`` (plain count bound, no distance refinement),
        ``distance_us``, ``cut_us`` (None only for one NPU), ``cut_bw_us`` (ForestColl's
        bandwidth-only form), ``drain_us`` (group import + drain; All-Gather, Reduce-Scatter,
        All-Reduce, broadcast, reduce), ``egress_us``, ``pipeline_us`` (broadcast, reduce, gather,
        scatter, All-to-All) and ``linkload_us`` (gather, scatter, All-to-All), ``best_us`` (max of
        ingress, distance, cut, drain, link load and pipeline where not None), ``best_source``, flags
        ``distance_exact``/``ingress_refined``/``cut_exact``,
        ``cut_method``, ``cut_flows``, ``cut_size`` (NPUs in the best cut's
        receiving side), ``kind``, ``step_us``; All-Reduce fills ``gossip_us``.
        Keys a collective does not use are None (docs/bounds.md has the table).
        Every value is a scalar (flat records). Deterministic for a given
        problem and options.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import mesh2d
    >>> b = lower_bounds(Problem(mesh2d(4, 4), Collective("all_gather", 1, 1024)))
    >>> b["ingress_steps"], b["best_us"] == 8 * 1250.5
    (8, True)
    """
    kw = dict(distance_exact_max_npus=distance_exact_max_npus, refine_max_npus=refine_max_npus,
              cut_max_npus=cut_max_npus, distance_samples=distance_samples, cut_sample_pins=cut_sample_pins,
              drain=drain, flow=flow)
    coll = problem.collective
    if problem.has_release:
        from .release import with_release_bound

        return with_release_bound(problem, lower_bounds(problem.without_release(), **kw))
    if coll.general and coll.reduces and coll.demand.one_destination:
        # a reducing table into one destination per chunk: its copy mirror's bounds, in reversed time
        return {**lower_bounds(problem.mirror(), **kw), "kind": problem.kind}
    if coll.general and not coll.unicast:
        return _table_bounds(problem)
    out = _network(problem).lower_bounds(problem, **{k: v for k, v in kw.items() if k != "flow"})
    return with_flow_bound(problem, out) if flow else out


def _table_bounds(problem: Problem) -> dict:
    """A chunk table of copies to subsets or of mixed ops (:mod:`~tacos_bench.bounds.table`), with the keys of
    the other bounds (None where they do not apply); a concurrent collective also counts each part alone."""
    from .table import table_bounds

    out = {k: None for k in ("ingress_basic_us", "cut_us", "cut_bw_us", "drain_us", "pipeline_us", "linkload_us",
                             "gossip_us", "cut_size", "step_us", "ingress_steps", "ingress_basic_steps")}
    out.update(table_bounds(problem))
    out.update(kind=problem.kind, ingress_refined=False, distance_exact=True, cut_exact=False,
               cut_method="none (chunk table)", cut_flows=0)
    parts = problem.collective.demand.meta.get("parts")
    if parts is not None:
        for part in parts.parts:
            b = lower_bounds(part_problem(problem, part))["best_us"]
            if b > out["best_us"] * (1 + 1e-12):
                out["best_us"], out["best_source"] = b, f"part {part.index}"
    return out


def part_problem(problem: Problem, part) -> Problem:
    """One part of a concurrent collective as a problem of its own on the whole network (its named collective
    when its group is every NPU, else its chunk table)."""
    from ..collective import Collective

    coll = part.collective if part.whole else Collective("custom", demand=part.table)
    return Problem(problem.topology, coll)


def with_flow_bound(problem: Problem, out: dict) -> dict:
    """``out`` with the flow bound's keys (:func:`tacos_bench.bounds.flow.lb_flow_us`; None for the collectives it
    does not cover) and, where it is the highest, ``best_us`` from it (``best_source`` ``flow:<method>``)."""
    from .flow import lb_flow_us

    fl = lb_flow_us(problem)
    out.update(fl)
    out.setdefault("kind", problem.kind)
    if fl["flow_us"] is not None and (out.get("best_us") is None or fl["flow_us"] > out["best_us"] * (1 + 1e-12)):
        out["best_us"], out["best_source"] = fl["flow_us"], f"flow:{fl['flow_source']}"
    return out


def cheap_bound_us(problem: Problem) -> float:
    """The cheap All-Gather bounds, without the distance and cut computations: the per-NPU ingress bound
    (O(links): every NPU receives ``(N - 1) * cpn`` chunks over its in-links, a link of chunk time ``t``
    completing at most ``floor(T / t)`` by ``T``) and the group import + drain bound (one check per group
    shape). A solver that meets it may stop: its schedule is optimal. On a switched fabric: every fabric bound.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import hetero_cluster, mesh2d
    >>> p = Problem(mesh2d(3, 3), Collective("all_gather", 1, 1024))
    >>> cheap_bound_us(p) == 4 * float(p.link_time_us[0])   # a corner NPU: 8 chunks over 2 in-links
    True
    >>> h = Problem(hetero_cluster(8, 8, 8), Collective("all_gather", 1, 1024))
    >>> round(cheap_bound_us(h), 2) == round(lower_bounds(h)["drain_us"], 2)   # 1321.81: the drain bound
    True
    """
    if problem.collective.general:   # a chunk table: its own bounds (the per-network ones read named kinds)
        return float(lower_bounds(problem, flow=False)["best_us"])
    return _network(problem).cheap_bound_us(problem)


def lower_bound_us(problem: Problem, **options) -> float:
    """The best lower bound (µs): ``lower_bounds(problem, **options)["best_us"]``.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> lower_bound_us(Problem(ring(4, bidirectional=False), Collective("all_gather", 1, 1024)))
    15001.5
    """
    return float(lower_bounds(problem, **options)["best_us"])


def repair_bounds(problem: Problem, fault, state, healthy_bound_us: float | None = None) -> dict:
    """The lower bound on any repair from ``state`` (:func:`tacos_bench.faults.state_at` of ``fault``), as record
    fields: ``repair_bound_us`` (µs; None when neither bound is known) and ``repair_bound_source``
    (:func:`~tacos_bench.bounds.repair.with_healthy_bound`).

    ``healthy_bound_us`` is the healthy problem's ``lower_bounds(problem)["best_us"]`` when the caller has it
    (None: the bound from the state alone); it counts only when no NPU fails.
    """
    return repair.with_healthy_bound(_network(problem).repair_us(problem, fault, state), healthy_bound_us, fault)


def repair_bound_us(problem: Problem, fault, state) -> float | None:
    """A lower bound on the collective time of any repair from ``state`` (µs; :mod:`tacos_bench.bounds.repair`):
    the bound from the state at the fault and, when no NPU fails, the healthy problem's
    :func:`lower_bounds` (computed here; :func:`repair_bounds` takes it when it is known).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.faults import Fault, state_at
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(4), Collective("broadcast", 3, 1))        # 3 chunks from NPU 0
    >>> t = float(p.link_time_us[0])
    >>> f = Fault(0.0, links=((1, 0),))       # before anything moved, a link the broadcast does not need
    >>> st = state_at(p, Schedule.from_rows([]), f)
    >>> repair_bounds(p, f, st)["repair_bound_us"] / t     # from the state: NPU 2 is two links away
    2.0
    >>> repair_bound_us(p, f, st) / t       # the healthy pipeline bound: the third chunk leaves NPU 0 at t
    3.0
    """
    healthy = None if fault.npus else lower_bounds(problem)["best_us"]
    return repair_bounds(problem, fault, state, healthy)["repair_bound_us"]
