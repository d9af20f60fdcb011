"""Continuous-time exact model of the copy collectives, solved with OR-Tools CP-SAT.

The discretized time-expanded network of the other exact models rounds every link time up to whole steps,
so its optimum holds for rounded link times only. This model keeps time continuous: every link time is an
exact integer number of a time unit chosen for the problem, so ``OPTIMAL`` here means optimal for the
problem the verifier checks (when :attr:`ContinuousOutcome.exact_time` is true).

Time unit
---------
A chunk crosses link ``l`` in ``t_l = lat_l + chunk_bytes / (bw_l * 2^30 / 10^6)`` µs (the cost model
of ``tacos_bench/cost.py``). Rebuilt from the decimal strings of the topology's bandwidth and latency
(``Fraction(str(x))``) every ``t_l`` is a rational number; with ``D`` the LCM of their denominators and
``g`` the GCD of the integers ``t_l * D``, the unit ``g / D`` µs makes every duration an exact integer.
Starting times can be integers of that unit without loss: in a left-shifted (active) schedule every start
is 0 or the end of another transfer, i.e. a sum of durations. So the optimum is an integer number of
units and the model's optimum is the problem's.

When that unit makes the horizon exceed ``2^40`` units (e.g. bandwidths such as 33.333333 GiB/s), the
model falls back to 1 ns (times the GCD of the rounded durations) with every duration rounded **up**:
a schedule of the rounded model stays valid with the real, shorter durations (it is re-timed with them
before it is returned), but the model's optimum and bound hold for the rounded durations only.
:attr:`ContinuousOutcome.exact_time` is then false and an ``OPTIMAL`` native status is *not* a proof
for the problem (:attr:`ContinuousOutcome.proved_optimal` is false); the caller decides how to report it.

Model
-----
Chunk ``c`` starts at its source ``s_c`` and is needed by every other NPU (all_gather, broadcast) or by
its destination ``t_c`` (gather, scatter, all_to_all). Per candidate (chunk ``c``, directed link
``l = (u, v)``) an optional fixed-size interval ``[S, S + d_l)`` with presence ``p``:

* **receipt** -- an NPU that needs ``c`` receives it exactly once (``ExactlyOne`` over its in-link
  presences); a relay of a unicast chunk at most once. ``p[c, (u, v)] => R[c, v] = S + d_l``;
* **causality** -- ``p[c, (u, v)] => S >= R[c, u]`` when ``u`` is not the source; for unicast chunks the
  presences form one path (flow conservation: out = in at relays, 1 out of the source), since the
  transfers of a unicast chunk off its path can be dropped;
* **link** -- ``NoOverlap`` of the intervals of each link;
* **makespan** -- ``T >= R[c, v]`` for every needed ``(c, v)``; minimize ``T``.
* **late NPUs** (``collective.release_us``) -- a link of a late NPU carries nothing that starts before the
  NPU joins: ``S >= r_l`` (in units; the unit divides the release times too), so a chunk whose source is late
  leaves it from then on. Earliest arrivals (``dist``) wait for the releases on the way; the list schedules
  and the re-timing to real time keep such links idle until then. Every cut below is a bound of the problem
  without late NPUs, or is computed from the earliest starts, so it stays valid with them; the ``bound`` cut
  includes the release bound (:mod:`tacos_bench.bounds.release`).

Domains come from shortest paths over the durations (Dijkstra): ``R[c, v] >= dist(s_c, v)``,
``S >= dist(s_c, u)``; a unicast transfer also leaves ``dist(v, t_c)`` before the horizon. Candidates
that cannot fit in the horizon are no variables: ``v = s_c`` never; for unicast chunks ``u = t_c`` never
and a link only if ``dist(s_c, u) + d_l + dist(v, t_c) <= H``; for multicast chunks only if
``dist(s_c, u) + d_l <= H``.

Strengthening (``cuts``, default :data:`DEFAULT_CUTS`; what each does is measured by
``python experiments/probe_continuous.py --ablation``):

``bound``
    ``T >= ceil(LB / unit - margin)`` with ``LB = tacos_bench.bounds.lower_bounds(problem)["best_us"]``
    (ingress, distance, cut, drain, pipeline, link load). The ceiling is valid because the optimum is a
    whole number of units; ``margin`` (``1e-9`` relative, the verifier's tolerance) absorbs the float
    error of ``LB``. Valid for the rounded model as well: its schedules re-timed with the real durations
    take at least ``LB`` and no longer than the rounded makespan.
``drain``
    multicast: ``T >=`` the group import + drain bound of ``docs/bounds.md`` (d), evaluated exactly in
    integer units by :func:`drain_bound_units`, which also checks the argument at ``a = T``. That case
    is what rules out the cut bound on two-tier clusters whose cut bound is a multiple of the scale-out
    link time (``hetero2x2x4``, 1 MiB, 2 chunks: 10.569 µs against the cut bound's 9.662 µs; the float
    version in ``tacos_bench.bounds`` checks ``a = T`` too since it was fixed to match).
``linkload``
    per link ``d_l * sum_c p[c, l] <= T - e_l - f_l``: a link is busy for its load after the earliest
    start ``e_l`` of any of its candidates and before ``T`` minus the least remaining path ``f_l`` of a
    unicast chunk after it (redundant with ``NoOverlap``, but linear, so CP-SAT's LP sees it; with the
    flow constraints it is what proves All-to-All optima).
``ingress``
    per NPU ``v``: ``sum_{l in in(v)} d_l * sum_c p[c, l] <= sum_{l in in(v)} (T - e_l)`` (the sum of the
    ``linkload`` rows of ``v``; off by default, it slowed the proofs it was measured on).
``symmetry``
    multicast chunks with the same source are interchangeable: their receipt times at the NPU farthest
    from the source are ordered (the hint is relabelled to match). Off for unicast chunks, where the
    same ordering at the destination slowed the All-to-All proofs.
``tail``
    unicast: ``p[c, (u, v)] => S + d_l + dist(v, t_c) <= T``.

Horizon, cold and warm start
----------------------------
Without a ``hint`` ("cold") no schedule from another backend is used. This module's own list schedule
(:func:`list_schedule`: store-and-forward, each link serialized in the order transfers are committed;
multicast chunks earliest completion first, optionally "group aware" -- a link does not import a chunk
into a group of faster links that already has it; unicast chunks only move closer to their destination,
most urgent destination first; :func:`routed_schedule`: unicast chunks on load-balanced routes) is run
in a few deterministic variants and then randomized, until it meets the lower bound or for up to 5 % of
the time limit (:data:`COLD_BUDGET_FRACTION`). Its makespan is the horizon, and it is
handed to CP-SAT as a complete hint. With a ``hint`` schedule (checked with the verifier), its first
receipts (for unicast chunks only the path to the destination) are re-timed as early as its order of
transfers on each link allows, in model units; the better of hint and list schedule is the horizon and
the hint. When that start already meets the lower bound (``bound`` and ``drain``), no model is built
and the native status is ``BOUND_MET`` (``skip_search_at_bound=False`` searches anyway).

Every returned schedule is the model's (or start's) transfers in their order on each link, re-timed
as early as possible with the real float link times, so it never ends later than the model says; it
can end earlier when CP-SAT's incumbent is not left-justified, and then it may meet CP-SAT's bound
although CP-SAT did not (:attr:`ContinuousOutcome.proved_optimal` accepts that in exact time). It is
never worse than the hint: if nothing better is found, the hint itself is returned.

Examples
--------
>>> from tacos_bench.problem import Problem
>>> from tacos_bench import Collective
>>> from tacos_bench.generators import ring
>>> p = Problem(ring(4), Collective("all_gather", 1, 1))
>>> out = solve_continuous(p, time_limit_s=10, skip_search_at_bound=False)
>>> out.native_status, out.proved_optimal, out.exact_time, out.objective_us / float(p.link_time_us[0])
('OPTIMAL', True, True, 2.0)
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

__all__ = [
    "CUTS",
    "DEFAULT_CUTS",
    "MAX_INTERVALS",
    "ContinuousOutcome",
    "TimeBase",
    "count_bound_units",
    "drain_bound_units",
    "exact_link_times_us",
    "list_schedule",
    "predict_size",
    "routed_schedule",
    "solve_continuous",
    "time_base",
]

# the cost model's constants (tacos_bench/cost.py); exact_link_times_us checks the result against
# problem.link_time_us, so a change of the cost model cannot go unnoticed
_BYTES_PER_GIB = 2**30
_US_PER_S = 10**6

MAX_HORIZON_UNITS = 2**40
FALLBACK_UNIT_US = Fraction(1, 1000)      # 1 ns
MAX_INTERVALS = 250_000
DEFAULT_WORKERS = 8
# cold start: list-schedule restarts with random tie-breaks, within this fraction of the time limit
DEFAULT_RESTARTS = 200
COLD_BUDGET_FRACTION = 0.05
# relative float error allowed for the project's lower bound before its ceiling in units (the verifier's)
_BOUND_MARGIN = 1e-9
CUTS = ("bound", "drain", "linkload", "ingress", "symmetry", "tail")
DEFAULT_CUTS = ("bound", "drain", "linkload", "symmetry", "tail")


# =============================================================================================== time unit
def exact_link_times_us(problem: Problem) -> list[Fraction]:
    """Every link's chunk time (µs) as an exact fraction, in link-id order.

    Built from the decimal strings of the topology's floats, i.e. the numbers a user writes
    (``33.333333`` is ``33333333/10^6``, not the nearest binary float).

    Raises
    ------
    SolverError
        If the result disagrees with ``problem.link_time_us`` (the cost model changed).

    Examples
    --------
    >>> from tacos_bench.problem import Problem
    >>> from tacos_bench import Collective
    >>> from tacos_bench.generators import ring
    >>> exact_link_times_us(Problem(ring(2, bw=150.0, lat=1.0), Collective("all_gather", 1, 1024)))[0]
    Fraction(10003, 3)
    """
    topo = problem.topology
    cb = int(problem.chunk_bytes)
    out = []
    for bw, lat in zip(topo.bw_GiBps.tolist(), topo.lat_us.tolist()):
        out.append(Fraction(str(lat)) + Fraction(cb * _US_PER_S) / (Fraction(str(bw)) * _BYTES_PER_GIB))
    ref = np.asarray(problem.link_time_us, dtype=np.float64)
    got = np.array([float(x) for x in out])
    if out and not np.allclose(got, ref, rtol=1e-9, atol=0.0):
        i = int(np.argmax(np.abs(got - ref) / ref))
        raise SolverError(f"continuous model: link {i} takes {ref[i]!r} µs in the cost model but {got[i]!r} µs "
                          "rebuilt exactly; tacos_bench/cost.py changed, update solvers/exact/continuous.py")
    return out


@dataclass(frozen=True)
class TimeBase:
    """The time unit of a model and every link's duration in it.

    ``exact`` is true when every duration is exactly ``durations[l] * unit_us``; false when they are the
    real times rounded up to the fallback resolution.
    """

    unit_us: Fraction
    durations: tuple[int, ...]
    exact: bool
    # per link, the first unit it may carry anything (late NPUs, collective.release_us); empty: none late
    release: tuple[int, ...] = ()

    def to_units_floor(self, t_us) -> int:
        return math.floor(Fraction(t_us) / self.unit_us)


def time_base(problem: Problem, horizon_us: float | None = None, *, max_units: int = MAX_HORIZON_UNITS) -> TimeBase:
    """The coarsest exact unit (module docstring), or 1 ns with rounded-up durations when ``horizon_us``
    would exceed ``max_units`` of the exact unit.

    ``horizon_us=None`` stands for a rough upper estimate, ``sum of link times * chunks``.

    Examples
    --------
    >>> from tacos_bench.problem import Problem
    >>> from tacos_bench import Collective
    >>> from tacos_bench.generators import hetero_cluster
    >>> p = Problem(hetero_cluster(2, 1, 2, intra_bw=150.0, intra_lat=1.0, inter_bw=25.0, inter_lat=5.0),
    ...             Collective("all_gather", 1, 1024))
    >>> tb = time_base(p)          # link times 5003/3 and 10005 µs
    >>> tb.exact, tb.unit_us, sorted(set(tb.durations))
    (True, Fraction(1, 3), [5003, 30015])
    >>> time_base(p, horizon_us=1e12).exact      # 3e12 units: 1 ns, rounded up
    False

    Late NPUs' release times (``collective.release_us``) are whole units too where the unit is exact (the unit
    divides them as well), rounded up on the fallback grid:

    >>> from dataclasses import replace
    >>> q = Problem(p.topology, replace(p.collective, release=((0, 2.5),)))
    >>> tb = time_base(q)
    >>> tb.unit_us, max(tb.release), sorted(set(tb.durations))
    (Fraction(1, 6), 15, [10006, 60030])
    """
    times = exact_link_times_us(problem)
    if not times:
        return TimeBase(Fraction(1), (), True)
    rel = exact_link_release_us(problem)
    den = 1
    for t in times + rel:
        den = den * t.denominator // math.gcd(den, t.denominator)
    g = 0
    for t in times + rel:
        g = math.gcd(g, int(t * den))
    unit = Fraction(g, den)
    if horizon_us is None:
        horizon_us = float(sum(times) + max(rel, default=0)) * max(1, problem.num_chunks)
    if Fraction(horizon_us) / unit <= max_units:
        return TimeBase(unit, tuple(int(t / unit) for t in times), True, release_units(rel, unit))
    ns = [math.ceil(t / FALLBACK_UNIT_US) for t in times]
    g = 0
    for x in ns + [math.ceil(r / FALLBACK_UNIT_US) for r in rel]:    # releases: whole ns, rounded up
        g = math.gcd(g, x)
    unit = FALLBACK_UNIT_US * g
    return TimeBase(unit, tuple(x // g for x in ns), False, release_units(rel, unit))


def exact_link_release_us(problem: Problem) -> list[Fraction]:
    """Per link, the later release of its two ends (``collective.release_us``, :meth:`Problem.link_release_us`)
    as an exact fraction from its decimal string; every link 0 without late NPUs."""
    if not problem.has_release:
        return [Fraction(0)] * problem.num_links
    return [Fraction(str(float(r))) for r in problem.link_release_us().tolist()]


def release_units(release_us: list[Fraction], unit: Fraction) -> tuple[int, ...]:
    """The release times in whole ``unit``s, rounded up (exact where the unit divides them); ``()`` when none
    is late."""
    if not any(release_us):
        return ()
    return tuple(math.ceil(r / unit) for r in release_us)


# =============================================================================================== instance
@dataclass
class _Instance:
    """The index structure both the list schedule and the model read (durations in integer units)."""

    n: int
    lsrc: list[int]
    ldst: list[int]
    dur: list[int]
    out_links: list[list[int]]
    in_links: list[list[int]]
    chunks: list[int]            # moving chunks
    source: list[int]            # per chunk id (all chunks)
    dest: list[int]              # per chunk id, -1 = every NPU
    multicast: bool
    rel: list[int] = field(default_factory=list)                      # per link: no transfer starts before
    dist_from: dict[int, list[float]] = field(default_factory=dict)   # source NPU -> dist to every NPU
    dist_to: dict[int, list[float]] = field(default_factory=dict)     # destination NPU -> dist from every NPU

    def needed(self, c: int) -> list[int]:
        if self.dest[c] < 0:
            return [v for v in range(self.n) if v != self.source[c]]
        return [self.dest[c]]


def _dijkstra(n: int, adj: list[list[int]], far: list[int], dur: list[int], root: int,
              rel: list[int] | None = None) -> list[float]:
    """Shortest durations from ``root`` over links ``adj[u]`` (link ``l`` leads to ``far[l]`` in ``dur[l]``,
    starting no sooner than ``rel[l]``: the earliest arrivals with late NPUs)."""
    return dijkstra_arcs(n, [[(far[l], dur[l], rel[l] if rel else 0) for l in ls] for ls in adj], root)


def dijkstra_arcs(n: int, arcs: list[list[tuple]], root: int) -> list[float]:
    """Earliest integer arrivals from ``root`` over ``arcs[u] = [(v, w), ...]`` (exact: no floating sums); an arc
    ``(v, w, r)`` starts no sooner than ``r`` (arriving later never arrives earlier beyond it: Dijkstra holds)."""
    dist = [math.inf] * n
    dist[root] = 0
    heap = [(0, root)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for arc in arcs[u]:
            v, w = arc[0], arc[1]
            nd = (d if len(arc) < 3 else max(d, arc[2])) + w
            if nd < dist[v]:
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


def _instance(problem: Problem, durations, release=()) -> _Instance:
    """The instance in integer units (``release``: per link, its release in units, :attr:`TimeBase.release`)."""
    topo = problem.topology
    n = topo.num_npus
    lsrc = topo.src.tolist()
    ldst = topo.dst.tolist()
    out_links: list[list[int]] = [[] for _ in range(n)]
    in_links: list[list[int]] = [[] for _ in range(n)]
    for l, (u, v) in enumerate(zip(lsrc, ldst)):
        out_links[u].append(l)
        in_links[v].append(l)
    source = problem.sources.tolist()
    dest = problem.destinations.tolist()
    if n > 1:
        chunks = [c for c in range(len(source)) if dest[c] != source[c]]
    else:
        chunks = []
    inst = _Instance(n, lsrc, ldst, list(durations), out_links, in_links, chunks, source, dest,
                     bool(problem.collective.multicast), list(release) or [0] * len(lsrc))
    for s in sorted({source[c] for c in chunks}):
        inst.dist_from[s] = _dijkstra(n, out_links, ldst, inst.dur, s, inst.rel)
    if not inst.multicast:
        for t in sorted({dest[c] for c in chunks}):
            inst.dist_to[t] = _dijkstra(n, in_links, lsrc, inst.dur, t)
    return inst


def _check_kind(problem: Problem) -> None:
    if not problem.collective.copies:
        raise SolverError(f"the continuous model solves copy collectives only, not {problem.kind}; reducing "
                          "ones go through their mirror (Problem.mirror) or solvers.compose")


def predict_size(problem: Problem) -> int:
    """Number of optional intervals the model would have before horizon pruning (an upper estimate).

    Multicast chunks: every link not into the chunk's source; unicast chunks: every link neither into
    the source nor out of the destination. O(chunks) with numpy, no model is built.

    Examples
    --------
    >>> from tacos_bench.problem import Problem
    >>> from tacos_bench import Collective
    >>> from tacos_bench.generators import ring
    >>> predict_size(Problem(ring(4), Collective("all_gather", 1, 1)))   # 4 chunks x (8 - 2) links
    24
    """
    _check_kind(problem)
    topo = problem.topology
    n, L = topo.num_npus, topo.num_links
    if n < 2:
        return 0
    src = np.asarray(problem.sources, dtype=np.int64)
    dst = np.asarray(problem.destinations, dtype=np.int64)
    moving = dst != src
    indeg = topo.in_degree().astype(np.int64)
    outdeg = topo.out_degree().astype(np.int64)
    s = src[moving]
    if problem.collective.multicast:
        return int(np.sum(L - indeg[s]))
    t = dst[moving]
    back = (topo.link_ids(t, s) >= 0).astype(np.int64)     # the link t->s was subtracted twice
    return int(np.sum(L - indeg[s] - outdeg[t] + back))


# =============================================================================================== count bounds
def _count_time(durs: list[int], need: int) -> int:
    """Smallest ``T`` with ``sum_d floor(T / d) >= need``: links of these durations, one chunk at a time,
    complete ``need`` transfers no sooner (the ingress argument of :mod:`tacos_bench.bounds`)."""
    if need <= 0:
        return 0
    lo, hi = 0, need * min(durs)
    while lo < hi:
        mid = (lo + hi) // 2
        if sum(mid // d for d in durs) >= need:
            hi = mid
        else:
            lo = mid + 1
    return lo


def count_bound_units(inst: _Instance) -> int:
    """The plain ingress and egress count bounds, exact in the model's units.

    Every NPU receives the chunks it needs over its in-links (a unicast relay aside), and every source
    sends each of its chunks at least once over its out-links. The float versions in
    :mod:`tacos_bench.bounds` enter the ``bound`` cut with a relative margin, which can lose whole units
    when the unit is fine; these do not.
    """
    need_in = [0] * inst.n
    need_out = [0] * inst.n
    for c in inst.chunks:
        need_out[inst.source[c]] += 1
        for v in inst.needed(c):
            need_in[v] += 1
    best = 0
    for v in range(inst.n):
        if need_in[v]:
            best = max(best, _count_time([inst.dur[l] for l in inst.in_links[v]], need_in[v]))
        if need_out[v]:
            best = max(best, _count_time([inst.dur[l] for l in inst.out_links[v]], need_out[v]))
    return best


# =============================================================================================== group drain
def _sccs(n: int, edges: list[tuple[int, int]]) -> list[list[int]]:
    """Strongly connected components (iterative Kosaraju)."""
    fwd: list[list[int]] = [[] for _ in range(n)]
    bwd: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        fwd[u].append(v)
        bwd[v].append(u)
    seen = [False] * n
    order: list[int] = []
    for r in range(n):
        if seen[r]:
            continue
        seen[r] = True
        stack = [(r, 0)]
        while stack:
            u, i = stack.pop()
            if i < len(fwd[u]):
                stack.append((u, i + 1))
                w = fwd[u][i]
                if not seen[w]:
                    seen[w] = True
                    stack.append((w, 0))
            else:
                order.append(u)
    comp = [-1] * n
    out: list[list[int]] = []
    for r in reversed(order):
        if comp[r] >= 0:
            continue
        comp[r] = len(out)
        members, stack = [r], [r]
        while stack:
            u = stack.pop()
            for w in bwd[u]:
                if comp[w] < 0:
                    comp[w] = comp[r]
                    members.append(w)
                    stack.append(w)
        out.append(sorted(members))
    return out


def _drain_groups_units(inst: _Instance) -> list[list[int]]:
    """For every distinct duration, the strongly connected components of the strictly faster links
    with ``1 < |S| < N`` (the servers, pods, ... of a multi-tier cluster), each once."""
    groups, seen = [], set()
    for tau in sorted(set(inst.dur)):
        edges = [(u, v) for u, v, d in zip(inst.lsrc, inst.ldst, inst.dur) if d < tau]
        for S in _sccs(inst.n, edges):
            key = tuple(S)
            if 1 < len(S) < inst.n and key not in seen:
                seen.add(key)
                groups.append(S)
    return groups


def _drain_ruled_out(T: int, K: int, o_all: list[int], t_out: list[int], members) -> bool:
    """Whether the import + drain argument rules out makespan ``T`` for one group (:func:`drain_bound_units`):
    ``o_all`` the times of the links into the group, ``members`` per member (outside in-link times,
    inside in-link times)."""
    for t in t_out:
        k = 1
        while k * t <= T:
            a = k * t
            # transfers over the group's in-links that can end before a: the j-th ends at j t_o at the earliest
            X = K - sum((a - 1) // to for to in o_all)
            if X <= 0:
                break
            x = T - a
            for ow, iw in members:
                cap = sum(min(x // to + 1, T // to) for to in ow) + sum(x // ti for ti in iw)
                if X > cap:
                    return True
            k += 1
    return False


def drain_bound_units(inst: _Instance, lo: int, hi: int, max_checks: int = 20000) -> int:
    """The group import + drain bound (docs/bounds.md (d)) in the model's integer units, multicast only.

    For a group ``S`` of members that all need ``K`` chunks from outside, ``T`` is ruled out (no schedule
    ends by ``T``) when for some ``a = k t_l <= T`` (``t_l`` an in-link time of ``S`` from outside) the
    ``X(a) = K - sum_l #{k >= 1: k t_l < a}`` chunks not yet in ``S`` exceed what some member can still
    receive in ``(a - delta, T]``. In integer units every comparison is exact, and ``a = T`` is checked
    too (at most one transfer per outside in-link ends in ``(T - delta, T]``, none over inside links),
    as the float version in :mod:`tacos_bench.bounds` does since it was fixed to match; with an exact time
    unit the two agree (checked on 25 instances), on a rounded time base this one bounds the rounded
    durations. Returns ``1 +`` the
    largest ruled-out ``T`` in ``[lo, hi]`` (``lo`` if none); the check is constant between consecutive
    capacity breakpoints except for new ``a``, which only rule out more, so only the last ``T`` before
    each breakpoint is checked, at most ``max_checks`` of them (a smaller, still valid bound beyond).
    """
    if not inst.multicast or lo > hi:
        return lo
    best = lo
    checks = 0
    for S in _drain_groups_units(inst):
        inS = [False] * inst.n
        for v in S:
            inS[v] = True
        K = sum(1 for c in inst.chunks if not inS[inst.source[c]])
        o_all = [inst.dur[l] for l in range(len(inst.dur)) if inS[inst.ldst[l]] and not inS[inst.lsrc[l]]]
        if K == 0 or not o_all:
            continue
        members = []
        for w in S:
            ow = [inst.dur[l] for l in inst.in_links[w] if not inS[inst.lsrc[l]]]
            iw = [inst.dur[l] for l in inst.in_links[w] if inS[inst.lsrc[l]]]
            members.append((ow, iw))
        t_out = sorted(set(o_all))
        steps = sorted({d for ow, iw in members for d in ow + iw} | set(t_out))

        T = best
        while T <= hi and checks < max_checks:
            # next capacity breakpoint above T: some floor((T - a)/t) or floor(T/t) grows there
            nxt = min((T // t + 1) * t for t in steps)
            for t in t_out:
                k = 1
                while k * t <= T:
                    a = k * t
                    nxt = min(nxt, min(a + ((T - a) // d + 1) * d for d in steps))
                    k += 1
            last = min(nxt - 1, hi)
            checks += 1
            if _drain_ruled_out(last, K, o_all, t_out, members):
                best = max(best, last + 1)
            T = nxt
    return best


# =============================================================================================== list schedule
def list_schedule(inst: _Instance, group_aware: bool = True, rng=None, unicast_rule: str = "slack",
                  noise: float = 0.0) -> tuple[list[tuple[int, int, int]], int]:
    """A simple store-and-forward schedule of ``inst`` in its integer units: ``([(chunk, link, start)], makespan)``.

    Among the transfers possible now (a holder of a chunk to a neighbour that lacks it) commit the one
    with the smallest key, given when its link is free; links serve their transfers in commit order,
    back to back. It is this module's own cold start (no other backend's schedule), not a tuned heuristic.

    Parameters
    ----------
    group_aware : bool
        Multicast: a link of time ``d`` into ``v`` carries no chunk that an NPU of ``v``'s group of links
        faster than ``d`` (strongly connected) already holds or will receive; the group spreads it.
    rng : random.Random, optional
        Breaks ties (multicast) or perturbs keys (unicast, with ``noise``) at random, for restarts.
    unicast_rule : str
        Unicast chunks move only to a neighbour strictly closer to the destination; key ``slack``
        (estimated arrival minus the remaining ingress time of the destination: the ingress argument of
        the bounds), ``farthest`` (longest remaining path first) or ``arrival`` (earliest estimated arrival).
    noise : float
        Unicast: keys get up to ``noise`` link times of random delay.

    Multicast keys are the completion time, then the sender's receipt time (a chunk leaves the NPU that
    got it first, which spreads a group's imports over its members), then ``rng`` or commit order.
    """
    lsrc, ldst, dur = inst.lsrc, inst.ldst, inst.dur
    free = list(inst.rel)       # a late NPU's links are idle until it joins
    out: list[tuple[int, int, int]] = []
    heap: list = []
    seq = 0
    makespan = 0

    def tie() -> float:
        # equal completion times are frequent (uniform tiers); rng breaks them at random for restarts
        nonlocal seq
        seq += 1
        return seq if rng is None else rng.random()
    if inst.multicast:
        have: dict[tuple[int, int], int] = {}
        # group_aware: a link of time d into v does not carry a chunk that some NPU of v's group of
        # faster links already holds or will receive; the group spreads it over its faster links
        levels = sorted(set(dur))
        level_of = {d: i for i, d in enumerate(levels)}
        labels = []
        if group_aware:
            for tau in levels:
                lab = [0] * inst.n
                for g, S in enumerate(_sccs(inst.n, [(u, v) for u, v, d in zip(lsrc, ldst, dur) if d < tau])):
                    for v in S:
                        lab[v] = g
                labels.append(lab)
        group_has: set[tuple[int, int, int]] = set()

        def taken(c: int, l: int) -> bool:
            v = ldst[l]
            if (c, v) in have:
                return True
            if group_aware:
                i = level_of[dur[l]]
                return (i, labels[i][v], c) in group_has
            return False

        def mark(c: int, v: int) -> None:
            for i, lab in enumerate(labels):
                group_has.add((i, lab[v], c))

        def offer(c: int, u: int, ready: int) -> None:
            for l in inst.out_links[u]:
                if not taken(c, l):
                    heapq.heappush(heap, (max(ready, free[l]) + dur[l], ready, tie(), c, l))

        for c in inst.chunks:
            have[c, inst.source[c]] = 0
            mark(c, inst.source[c])
        for c in inst.chunks:
            offer(c, inst.source[c], 0)
        while heap:
            key, _, _, c, l = heapq.heappop(heap)
            v = ldst[l]
            if taken(c, l):
                continue
            ready = have[c, lsrc[l]]
            end = max(ready, free[l]) + dur[l]
            if end > key:
                heapq.heappush(heap, (end, ready, tie(), c, l))
                continue
            out.append((c, l, end - dur[l]))
            free[l] = end
            have[c, v] = end
            mark(c, v)
            makespan = max(makespan, end)
            offer(c, v, end)
        return out, makespan
    at: dict[int, tuple[int, int]] = {}      # chunk -> (NPU holding it last, since)
    # "slack": a chunk is urgent when its destination's in-links still have much to receive (the ingress
    # argument of the bounds), so the key is the estimated arrival minus that remaining ingress time;
    # "farthest": longest remaining path first; "arrival": earliest estimated arrival first
    per_chunk: dict[int, float] = {}
    left: dict[int, int] = {}
    for c in inst.chunks:
        t = inst.dest[c]
        left[t] = left.get(t, 0) + 1
        if t not in per_chunk:
            per_chunk[t] = 1.0 / sum(1.0 / dur[l] for l in inst.in_links[t])

    def key_of(c: int, l: int, end: int) -> float:
        t = inst.dest[c]
        rest = inst.dist_to[t][ldst[l]]
        if unicast_rule == "slack":
            k = end + rest - left[t] * per_chunk[t]
        elif unicast_rule == "farthest":
            k = end - rest
        else:
            k = end + rest
        return k + (rng.random() * noise * dur[l] if rng is not None and noise else 0.0)

    def offer_u(c: int) -> None:
        u, ready = at[c]
        to = inst.dist_to[inst.dest[c]]
        for l in inst.out_links[u]:
            if to[ldst[l]] < to[u]:
                end = max(ready, free[l]) + dur[l]
                heapq.heappush(heap, (key_of(c, l, end), tie(), c, l, end))

    for c in inst.chunks:
        at[c] = (inst.source[c], 0)
        offer_u(c)
    while heap:
        _, _, c, l, end0 = heapq.heappop(heap)
        u, ready = at[c]
        if lsrc[l] != u or u == inst.dest[c]:
            continue
        end = max(ready, free[l]) + dur[l]
        if end > end0:      # the link got busier since the offer: offer again at the new time
            heapq.heappush(heap, (key_of(c, l, end), tie(), c, l, end))
            continue
        out.append((c, l, end - dur[l]))
        free[l] = end
        at[c] = (ldst[l], end)
        makespan = max(makespan, end)
        if ldst[l] != inst.dest[c]:
            offer_u(c)
        else:
            left[inst.dest[c]] -= 1
    return out, makespan


def routed_schedule(inst: _Instance, alpha: float = 1.0, rule: str = "farthest", rng=None
                    ) -> tuple[list[tuple[int, int, int]], int]:
    """Unicast cold start on load-balanced routes: ``([(chunk, link, start)], makespan)`` in integer units.

    Chunks are routed one after the other (longest first; in random order with ``rng``) on the shortest
    path for link costs ``d_l (1 + alpha * chunks already routed over l)``, so that shortest paths do not all
    pile onto the same links; then each chunk follows its route, the transfer with the smallest key next
    (``farthest``: completion minus the remaining route; ``slack``: completion plus the remaining route
    minus the remaining ingress time of the destination), each link serialized.
    """
    lsrc, ldst, dur = inst.lsrc, inst.ldst, inst.dur
    load = [0] * len(dur)
    order = sorted(inst.chunks, key=lambda c: (-inst.dist_to[inst.dest[c]][inst.source[c]], c))
    if rng is not None:
        rng.shuffle(order)
    path: dict[int, list[int]] = {}
    for c in order:
        s_c, t_c = inst.source[c], inst.dest[c]
        dist, pred, heap = {s_c: 0.0}, {}, [(0.0, s_c)]
        while heap:
            d, u = heapq.heappop(heap)
            if u == t_c:
                break
            if d > dist[u]:
                continue
            for l in inst.out_links[u]:
                v, nd = ldst[l], d + dur[l] * (1.0 + alpha * load[l])
                if nd < dist.get(v, math.inf):
                    dist[v], pred[v] = nd, l
                    heapq.heappush(heap, (nd, v))
        route, v = [], t_c
        while v != s_c:
            route.append(pred[v])
            v = lsrc[pred[v]]
        route.reverse()
        path[c] = route
        for l in route:
            load[l] += 1
    rem = {c: sum(dur[l] for l in path[c]) for c in path}
    left: dict[int, int] = {}
    per_chunk: dict[int, float] = {}
    for c in path:
        t = inst.dest[c]
        left[t] = left.get(t, 0) + 1
        per_chunk.setdefault(t, 1.0 / sum(1.0 / dur[l] for l in inst.in_links[t]))
    pos = dict.fromkeys(path, 0)
    ready = dict.fromkeys(path, 0)
    free = list(inst.rel)       # a late NPU's links are idle until it joins
    heap2: list = []
    out: list[tuple[int, int, int]] = []
    makespan = 0

    def push(c: int) -> None:
        l = path[c][pos[c]]
        end = max(ready[c], free[l]) + dur[l]
        rest = rem[c] - dur[l]
        t = inst.dest[c]
        key = end - rest if rule == "farthest" else end + rest - left[t] * per_chunk[t]
        heapq.heappush(heap2, (key, c, end))

    for c in path:
        push(c)
    while heap2:
        _, c, end0 = heapq.heappop(heap2)
        l = path[c][pos[c]]
        end = max(ready[c], free[l]) + dur[l]
        if end > end0:      # the link got busier since: offer again at the new time
            push(c)
            continue
        out.append((c, l, end - dur[l]))
        free[l] = ready[c] = end
        rem[c] -= dur[l]
        pos[c] += 1
        makespan = max(makespan, end)
        if pos[c] < len(path[c]):
            push(c)
        else:
            left[inst.dest[c]] -= 1
    return out, makespan


_UNICAST_VARIANTS = (("list", "slack"), ("list", "farthest"), ("list", "arrival"), ("routed", "farthest"),
                     ("routed", "slack"))


def _deterministic_variants(inst: _Instance) -> int:
    return 2 if inst.multicast else len(_UNICAST_VARIANTS)


def _list_variant(inst: _Instance, i: int, rng) -> tuple[list[tuple[int, int, int]], int]:
    """Cold-start variant ``i``: the first :func:`_deterministic_variants` are deterministic (multicast:
    without / with group awareness; unicast: :data:`_UNICAST_VARIANTS`), the next ones cycle through the
    same with random tie-breaks (multicast), keys perturbed by up to half a link time (unicast list) or a
    random routing order (unicast routed)."""
    k = _deterministic_variants(inst)
    rnd = None if i < k else rng
    if inst.multicast:
        tr, ms = list_schedule(inst, group_aware=i % 2 == 1, rng=rnd)
    else:
        kind, rule = _UNICAST_VARIANTS[i % k]
        if kind == "list":
            tr, ms = list_schedule(inst, unicast_rule=rule, rng=rnd, noise=0.0 if rnd is None else 0.5)
        else:
            tr, ms = routed_schedule(inst, rule=rule, rng=rnd)
    got = {(c, inst.ldst[l]) for c, l, _ in tr}
    if any((c, v) not in got for c in inst.chunks for v in inst.needed(c)):  # pragma: no cover - a bug guard
        raise SolverError(f"continuous model: cold-start variant {i} left a chunk undelivered")
    return tr, ms


def _retime(inst: _Instance, transfers) -> tuple[list[tuple[int, int, int]], int]:
    """Re-time ``(chunk, link, start_key)`` transfers as early as their order allows (integer units).

    Keeps, per (chunk, NPU), the receipt that ``start_key`` + duration delivers first and, for unicast
    chunks, only the path to the destination; then starts each transfer at the later of its sender's
    receipt and the end of the previous transfer on its link, in ``start_key`` order. ``start_key`` may
    be any order-preserving time (µs of a hint); transfers whose sender never receives are dropped.
    """
    lsrc, ldst, dur = inst.lsrc, inst.ldst, inst.dur
    first: dict[tuple[int, int], tuple[Any, int, int]] = {}
    for c, l, key, end_key in transfers:
        v = ldst[l]
        if v == inst.source[c]:
            continue
        k = (c, v)
        if k not in first or end_key < first[k][0]:
            first[k] = (end_key, l, key)
    keep = []
    if inst.multicast:
        keep = [(key, c, l) for (c, v), (_, l, key) in first.items()]
    else:
        for c in inst.chunks:
            t = inst.dest[c]
            v, path = t, []
            seen = set()
            while v != inst.source[c] and (c, v) in first and v not in seen:
                seen.add(v)
                _, l, key = first[c, v]
                path.append((key, c, l))
                v = lsrc[l]
            if v == inst.source[c]:
                keep.extend(path)
    keep.sort(key=lambda x: (x[0], x[1], x[2]))
    have: dict[tuple[int, int], int] = {}
    free = list(inst.rel)       # a late NPU's links are idle until it joins
    out = []
    makespan = 0
    for _, c, l in keep:
        u = lsrc[l]
        if u == inst.source[c]:
            ready = 0
        elif (c, u) in have:
            ready = have[c, u]
        else:
            continue
        s = max(ready, free[l])
        free[l] = s + dur[l]
        have[c, ldst[l]] = s + dur[l]
        out.append((c, l, s))
        makespan = max(makespan, s + dur[l])
    for c in inst.chunks:
        for v in inst.needed(c):
            if (c, v) not in have:
                return [], -1       # the transfers do not complete the collective
    return out, makespan


def _real_schedule(problem: Problem, inst: _Instance, transfers) -> Schedule:
    """The verifier's schedule of integer-unit transfers: same order per link and chunk, each transfer as
    early as its sender's receipt and its link allow with the real float link times (so it never ends
    later than the model says, and float rounding cannot break causality)."""
    if not transfers:
        return Schedule.empty()
    lt = np.asarray(problem.link_time_us, dtype=np.float64).tolist()
    lsrc, ldst = inst.lsrc, inst.ldst
    order = sorted(transfers, key=lambda x: (x[2], x[1], x[0]))
    have: dict[tuple[int, int], float] = {}
    free = problem.link_release_us().tolist()
    rows_c, rows_s, rows_d, rows_t0, rows_t1 = [], [], [], [], []
    for c, l, _ in order:
        u = lsrc[l]
        ready = 0.0 if u == inst.source[c] else have[c, u]
        s = max(ready, free[l])
        e = s + lt[l]
        free[l] = e
        have[c, ldst[l]] = e
        rows_c.append(c)
        rows_s.append(u)
        rows_d.append(ldst[l])
        rows_t0.append(s)
        rows_t1.append(e)
    return Schedule(rows_c, rows_s, rows_d, rows_t0, rows_t1, np.zeros(len(rows_c), dtype=np.int8)).sorted()


# =============================================================================================== outcome
@dataclass(frozen=True)
class ContinuousOutcome:
    """What :func:`solve_continuous` returns.

    Attributes
    ----------
    native_status : str
        CP-SAT's status name (``OPTIMAL``, ``FEASIBLE``, ``INFEASIBLE``, ``UNKNOWN``, ``MODEL_INVALID``);
        ``BOUND_MET`` when the start (list schedule or hint) already met the lower bound and no model was
        built; ``TRIVIAL`` when nothing has to move. ``OPTIMAL`` and ``BOUND_MET`` prove optimality for
        the problem only when ``exact_time`` (see :attr:`proved_optimal`): otherwise they hold for the
        rounded-up durations, and the caller must not report the schedule as optimal.
    schedule : Schedule or None
        The best schedule, with the real link times (``end = start + problem.link_time_us``); None when
        none is known.
    objective_us : float or None
        Makespan of ``schedule`` (µs).
    best_bound_us : float or None
        The model's best bound in µs: CP-SAT's, never below the cuts on ``T`` (``bound``, ``drain``). A
        lower bound for the problem only when ``exact_time``; otherwise for the rounded-up durations
        (it can then exceed ``objective_us``).
    time_unit_us : float
        The model's time unit (µs); ``time_unit`` has it as an exact fraction.
    exact_time : bool
        Every link time is an exact integer number of units (false: rounded up to ``time_unit_us``).
    trace : list of (float, float or None, float or None)
        ``(wall_s, incumbent_us, bound_us)``: wall seconds since the call started (model building
        included), at every CP-SAT solution and bound improvement; the last row is the returned schedule
        and the final bound. The model's objective in µs (the rounded one when not ``exact_time``).
    build_time_s, search_time_s : float
        Bounds, cold start and model building; CP-SAT's search.
    stats : dict
        ``intervals`` (optional intervals), ``variables``, ``constraints``, ``branches``, ``conflicts``,
        ``workers``, ``predicted_intervals``, ``horizon_units``, ``list_schedule_us``, ``list_schedule_runs``,
        ``list_schedule_time_s``, ``hint_us``, ``lower_bound_us`` and ``lower_bound_source`` (from
        :mod:`tacos_bench.bounds`), ``bound_cut_units``, ``drain_cut_units``, ``drain_cut_us``, ``cuts``,
        ``hinted``, ``model_objective_units``, ``model_bound_units``.
    solution_source : str or None
        ``model`` (CP-SAT), ``list_schedule`` (this module's cold start, CP-SAT found nothing better)
        or ``hint``.
    time_unit : Fraction
        The time unit (µs), exact.
    """

    native_status: str
    schedule: Schedule | None
    objective_us: float | None
    best_bound_us: float | None
    time_unit_us: float
    exact_time: bool
    trace: list = field(default_factory=list)
    build_time_s: float = 0.0
    search_time_s: float = 0.0
    stats: dict = field(default_factory=dict)
    solution_source: str | None = None
    time_unit: Fraction = Fraction(1)

    @property
    def proved_optimal(self) -> bool:
        """CP-SAT proved the schedule optimal *for the problem* (never with rounded-up durations)."""
        if not self.exact_time or self.schedule is None:
            return False
        if self.native_status in ("OPTIMAL", "TRIVIAL", "BOUND_MET"):
            return True
        # the returned schedule is re-timed as early as its order allows, so it can meet the bound
        # CP-SAT proved although its own incumbent (not left-shifted) did not
        return (self.best_bound_us is not None and self.objective_us is not None
                and self.objective_us <= self.best_bound_us * (1 + 1e-12))


class _Recorder:
    """Anytime trace from CP-SAT's solution and bound callbacks (which run on solver threads)."""

    def __init__(self, t0: float, unit: float, on_progress):
        self.t0, self.unit, self.on_progress = t0, unit, on_progress
        self.rows: list[tuple[float, float | None, float | None]] = []
        self.inc: float | None = None
        self.bound: float | None = None
        self.lock = threading.Lock()

    def add(self, inc=None, bound=None):
        with self.lock:
            if inc is not None:
                self.inc = inc * self.unit
            if bound is not None and math.isfinite(bound):
                self.bound = bound * self.unit
            row = (time.perf_counter() - self.t0, self.inc, self.bound)
            self.rows.append(row)
        if self.on_progress is not None:
            self.on_progress(*row)


def _solution_callback(rec: _Recorder):
    from ortools.sat.python import cp_model

    class _Cb(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            rec.add(inc=self.objective_value, bound=self.best_objective_bound)

    return _Cb()


@dataclass
class _Search:
    """What one CP-SAT search leaves: the solver (for values), its status name, whether it holds a solution,
    the objective and the bound in model units (the bound at least ``T``'s lower end when stopped early)."""

    solver: Any
    name: str
    has: bool
    obj_units: int | None
    bound_units: float | None
    search_s: float
    rec: "_Recorder"


def _search(m, *, t_call: float, unit_f: float, on_progress, time_limit_s: float | None, num_workers: int,
            seed: int, log: bool, T_floor: float, mip_gap: float = 0.0, cpsat_params=None,
            stats: dict | None = None) -> _Search:
    """Solve the CP-SAT model ``m`` (its objective the makespan in units) with the project's parameters and map
    what comes back: ``OPTIMAL`` within a caller's ``mip_gap`` becomes ``FEASIBLE``; a bound below ``T_floor``
    (CP-SAT reports 0 when stopped before presolve ends) is raised to it. Shared by the continuous and the
    fabric models."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    prm = solver.parameters
    if time_limit_s is not None:
        prm.max_time_in_seconds = float(time_limit_s)
    prm.num_workers = int(num_workers)
    prm.random_seed = int(seed) % 2147483647
    if mip_gap:
        prm.relative_gap_limit = float(mip_gap)
    prm.log_search_progress = bool(log)
    for k, v in (cpsat_params or {}).items():
        cur = getattr(prm, k)
        if isinstance(v, str) and not isinstance(cur, str):   # an enum given by name
            v = getattr(type(cur), v)
        setattr(prm, k, v)
    rec = _Recorder(t_call, unit_f, on_progress)
    solver.best_bound_callback = lambda b: rec.add(bound=b)
    t1 = time.perf_counter()
    code = solver.solve(m, _solution_callback(rec))
    search_s = time.perf_counter() - t1
    name = solver.status_name(code)
    has = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound_units = None
    if name in ("OPTIMAL", "FEASIBLE", "UNKNOWN"):
        b = float(solver.best_objective_bound)
        bound_units = b if math.isfinite(b) else None
    obj_units = round(solver.objective_value) if has else None
    if name == "OPTIMAL" and mip_gap > 0 and obj_units is not None and bound_units is not None \
            and bound_units < obj_units - 1e-9:
        name = "FEASIBLE"                               # stopped at the gap the caller allowed
        if stats is not None:
            stats["gap_limit"] = True
    if name == "OPTIMAL":
        bound_units = float(solver.objective_value)
    elif name in ("FEASIBLE", "UNKNOWN"):
        bound_units = max(bound_units or 0.0, float(T_floor))
    if stats is not None:
        stats.update(branches=int(solver.num_branches), conflicts=int(solver.num_conflicts),
                     model_objective_units=obj_units, model_bound_units=bound_units)
    return _Search(solver, name, has, obj_units, bound_units, search_s, rec)


def _bound_met(sched: Schedule, src: str, inc_ms: int, T_lo: int, unit: float, t_call: float, on_progress,
               stats: dict, base: dict) -> "ContinuousOutcome":
    """The outcome when the start already meets a valid lower bound (no model built, no search)."""
    stats.update(intervals=0, variables=0, constraints=0, workers=0, branches=0, conflicts=0,
                 model_objective_units=inc_ms, model_bound_units=T_lo)
    build_s = time.perf_counter() - t_call
    row = (build_s, float(inc_ms * unit), float(T_lo * unit))
    if on_progress is not None:
        on_progress(*row)
    return ContinuousOutcome("BOUND_MET", sched, sched.makespan_us, float(T_lo * unit), trace=[row],
                             build_time_s=build_s, stats=stats, solution_source=src, **base)


# =============================================================================================== solve
def _bound_us(problem: Problem) -> tuple[float | None, str]:
    from tacos_bench.bounds import lower_bounds

    try:
        b = lower_bounds(problem)
    except Exception as e:  # noqa: BLE001 - a failing bound must not take the exact solve down
        return None, f"failed ({type(e).__name__}: {e})"
    return float(b["best_us"]), str(b.get("best_source"))


def solve_continuous(problem: Problem, *, time_limit_s: float | None = 60.0, num_workers: int = DEFAULT_WORKERS,
                     seed: int = 0, hint: Schedule | None = None, horizon_us: float | None = None,
                     use_bound_cuts: bool = True, cuts: Collection[str] | None = None,
                     max_intervals: int = MAX_INTERVALS, log: bool = False,
                     cpsat_params: dict[str, Any] | None = None,
                     cold_restarts: int | None = None, skip_search_at_bound: bool = True,
                     on_progress: Callable[[float, float | None, float | None], None] | None = None,
                     ) -> ContinuousOutcome:
    """Solve a copy collective exactly in continuous time with CP-SAT (module docstring).

    Parameters
    ----------
    problem : Problem
        all_gather, broadcast, gather, scatter or all_to_all.
    time_limit_s : float or None
        CP-SAT's ``max_time_in_seconds`` (None: no limit). Building the model is not counted; the cold
        start's random restarts take up to 5 % of it more.
    num_workers : int
        CP-SAT workers; fewer than 8 rarely prove optimality, even on 2 cores.
    seed : int
        CP-SAT's ``random_seed``.
    hint : Schedule, optional
        A valid schedule to warm-start from (``AddHint``); the result is never worse. Without it the run
        is cold: nothing from another backend is used.
    horizon_us : float, optional
        Upper bound on the makespan (µs); the model holds no schedule above it (``INFEASIBLE`` if none fits).
    use_bound_cuts : bool
        False drops every strengthening cut (``cuts`` then ignored): the bare model.
    cuts : collection of str, optional
        Strengthening cuts, from :data:`CUTS` (default :data:`DEFAULT_CUTS`).
    max_intervals : int
        Refuse (:class:`SolverError`) when :func:`predict_size` exceeds this, before building anything.
        Measured here: 113k intervals (``hetero4x4x4``, All-Gather, 4 chunks) take 4.7 s to build and
        0.76 GB; 89k (``random32d3s0`` All-to-All) 1.15 GB with 8 workers searching, so the default
        (:data:`MAX_INTERVALS`, 250k) keeps a run within a few GB and about 10 s of building.
    log : bool
        CP-SAT's search log on stdout.
    cpsat_params : dict, optional
        More CP-SAT parameters by name (enums by their name, e.g. ``{"search_branching": "FIXED_SEARCH"}``).
    cold_restarts : int, optional
        How many list-schedule variants the cold start may try (default :data:`DEFAULT_RESTARTS`; 0: the
        first deterministic one only). They stop at the lower bound or after 5 % of ``time_limit_s``.
    skip_search_at_bound : bool
        Return ``BOUND_MET`` without building a model when the start meets the lower bound.
    on_progress : callable, optional
        Called as ``on_progress(wall_s, incumbent_us, bound_us)`` with every trace row (from solver threads).

    Returns
    -------
    ContinuousOutcome

    Raises
    ------
    SolverError
        For a reducing collective, an unknown cut, an invalid ``hint``, or a model predicted larger than
        ``max_intervals`` (one line with the estimate).
    """
    from ortools.sat.python import cp_model

    t_call = time.perf_counter()
    _check_kind(problem)
    size = predict_size(problem)
    if size > max_intervals:
        raise SolverError(f"continuous CP-SAT model refused: about {size:,} optional intervals predicted for "
                          f"{problem.describe()} (budget {max_intervals:,})")
    active = set(DEFAULT_CUTS if cuts is None else cuts) if use_bound_cuts else set()
    unknown = active - set(CUTS)
    if unknown:
        raise SolverError(f"unknown continuous-model cut(s) {', '.join(sorted(unknown))}; "
                          f"choose from {', '.join(CUTS)}")
    stats: dict[str, Any] = {"cuts": ",".join(c for c in CUTS if c in active), "predicted_intervals": size}

    # --- time unit and cold start (list schedule); a too-fine unit falls back to 1 ns -----------------
    tb = time_base(problem, horizon_us=0.0)
    inst = _instance(problem, tb.durations, tb.release)
    heur, heur_ms = _list_variant(inst, 0, None)
    if heur_ms > MAX_HORIZON_UNITS:
        tb = time_base(problem, horizon_us=float(heur_ms * tb.unit_us))
        inst = _instance(problem, tb.durations, tb.release)
        heur, heur_ms = _list_variant(inst, 0, None)
    unit = tb.unit_us
    unit_f = float(unit)
    base = {"time_unit_us": unit_f, "exact_time": tb.exact, "time_unit": unit}
    if not inst.chunks:
        return ContinuousOutcome("TRIVIAL", Schedule.empty(), 0.0, 0.0, build_time_s=time.perf_counter() - t_call,
                                 stats=stats, solution_source="model", **base)

    # --- warm start: the hint re-timed in model units --------------------------------------------------------
    hint_real, h_tr, h_ms = None, [], -1
    if hint is not None and len(hint):
        from tacos_bench.verify import check

        # an invalid hint must not come back as the answer ("never worse than the hint" returns it as is)
        ver = check(problem, hint)
        if not ver.valid:
            raise SolverError(f"the hint is not a valid schedule of this problem: {ver.message}")
        links = problem.topology.link_ids(hint.src, hint.dst).tolist()
        rows = [(c, l, s, e) for c, l, s, e in zip(hint.chunk.tolist(), links, hint.start_us.tolist(),
                                                    hint.end_us.tolist()) if l >= 0]
        h_tr, h_ms = _retime(inst, rows)
        stats["hint_us"] = float(hint.makespan_us)
        hint_real = hint

    # --- lower bound (needs the unit only) -------------------------------------------------------------------
    lb_us, lb_src = _bound_us(problem)
    stats.update(lower_bound_us=lb_us, lower_bound_source=lb_src)
    lb_units = 0
    if lb_us is not None:
        x = Fraction(lb_us) / unit
        lb_units = max(0, math.ceil(x - Fraction(max(1e-6, _BOUND_MARGIN * float(x)))))
    # a floor every model has (no cut): the farthest needed NPU of any chunk
    far = 0
    for c in inst.chunks:
        d = inst.dist_from[inst.source[c]]
        far = max(far, max(d[v] for v in inst.needed(c)))
    T_lo = far
    if "bound" in active:
        # the float bound loses up to its margin; the count bounds are exact in units (fine units: many)
        T_lo = max(far, lb_units, count_bound_units(inst))
    stats["bound_cut_units"] = T_lo if "bound" in active else None
    if "drain" in active:
        t_d = time.perf_counter()
        drain = drain_bound_units(inst, T_lo, heur_ms)
        stats.update(drain_cut_units=drain, drain_cut_us=float(drain * unit), drain_time_s=time.perf_counter() - t_d)
        T_lo = max(T_lo, drain)

    # --- cold start: list schedule restarts, until one meets the bound or the budget is spent ---------------
    if cold_restarts is None:
        cold_restarts = DEFAULT_RESTARTS
    t_r = time.perf_counter()
    budget = COLD_BUDGET_FRACTION * (time_limit_s if time_limit_s is not None else 60.0)
    rng = random.Random(seed)
    runs = 1
    for variant in range(1, 1 + int(cold_restarts)):
        best = heur_ms if h_ms < 0 else min(heur_ms, h_ms)
        if best <= T_lo or (variant >= _deterministic_variants(inst) and time.perf_counter() - t_r > budget):
            break
        tr, ms = _list_variant(inst, variant, rng)
        runs += 1
        if ms < heur_ms:
            heur, heur_ms = tr, ms
    stats.update(list_schedule_us=float(heur_ms * unit), list_schedule_runs=runs,
                 list_schedule_time_s=time.perf_counter() - t_r)
    incumbent, inc_ms, inc_src = heur, heur_ms, "list_schedule"
    if h_ms >= 0 and h_ms <= inc_ms:
        incumbent, inc_ms, inc_src = h_tr, h_ms, "hint"
    H = inc_ms
    if horizon_us is not None:
        H = min(H, tb.to_units_floor(horizon_us))
    stats["horizon_units"] = H

    if skip_search_at_bound and inc_ms <= T_lo and inc_ms <= H:
        # the start already meets a valid lower bound: no search can improve it
        sched = _real_schedule(problem, inst, incumbent)
        if hint_real is not None and sched.makespan_us > hint_real.makespan_us:
            sched, inc_src = hint_real, "hint"
        return _bound_met(sched, inc_src, inc_ms, T_lo, unit, t_call, on_progress, stats, base)

    # --- model ---------------------------------------------------------------------------------------------
    m = cp_model.CpModel()
    lsrc, ldst, dur = inst.lsrc, inst.ldst, inst.dur
    T = m.new_int_var(int(min(T_lo, H)) if H >= 0 else 0, int(max(H, 0)), "T")
    if T_lo > H:
        m.add(T >= int(T_lo))       # infeasible by the bound: say so through CP-SAT
    pres: dict[tuple[int, int], Any] = {}
    start: dict[tuple[int, int], Any] = {}
    recv: dict[tuple[int, int], Any] = {}
    start_lo: dict[tuple[int, int], int] = {}
    recv_lo: dict[tuple[int, int], int] = {}
    by_link: dict[int, list] = {}
    by_link_keys: dict[int, list[tuple[int, int]]] = {}
    e_link: dict[int, int] = {}
    f_link: dict[int, float] = {}
    n_int = 0
    for c in inst.chunks:
        s_c, t_c = inst.source[c], inst.dest[c]
        E = inst.dist_from[s_c]
        D = inst.dist_to[t_c] if t_c >= 0 else None
        ins: dict[int, list] = {}
        outs: dict[int, list] = {}
        for l in range(len(dur)):
            u, v = lsrc[l], ldst[l]
            if v == s_c or (D is not None and u == t_c):
                continue
            tail = 0 if D is None else D[v]
            lo = max(E[u], inst.rel[l])     # a late NPU's links carry nothing before it joins
            hi = H - dur[l] - tail
            if lo > hi:
                continue
            p = m.new_bool_var("")
            s = m.new_int_var(int(lo), int(hi), "")
            iv = m.new_optional_fixed_size_interval_var(s, int(dur[l]), p, "")
            n_int += 1
            pres[c, l] = p
            start[c, l] = s
            start_lo[c, l] = int(lo)
            by_link.setdefault(l, []).append(iv)
            by_link_keys.setdefault(l, []).append((c, l))
            e_link[l] = min(e_link.get(l, math.inf), lo)
            f_link[l] = min(f_link.get(l, math.inf), tail)
            ins.setdefault(v, []).append(l)
            outs.setdefault(u, []).append(l)
            if "tail" in active and D is not None and tail > 0:
                m.add(s + int(dur[l] + tail) <= T).only_enforce_if(p)
        # receipts
        for v, ls in ins.items():
            tail = 0 if D is None else D[v]
            r = m.new_int_var(int(E[v]), int(max(E[v], H - tail)), "")
            recv[c, v] = r
            recv_lo[c, v] = int(E[v])
            lits = [pres[c, l] for l in ls]
            if D is None or v == t_c:
                m.add_exactly_one(lits)
                m.add(T >= r)
            else:
                m.add_at_most_one(lits)
            for l in ls:
                m.add(r == start[c, l] + int(dur[l])).only_enforce_if(pres[c, l])
        for v in inst.needed(c):
            if v not in ins:
                m.add_bool_or([])          # a needed NPU cannot receive in the horizon: infeasible
        # causality
        for u, ls in outs.items():
            if u == s_c:
                continue
            r = recv.get((c, u))
            for l in ls:
                if r is None:
                    m.add(pres[c, l] == 0)
                else:
                    m.add(start[c, l] >= r).only_enforce_if(pres[c, l])
        if D is not None:       # unicast: one path
            if s_c not in outs:
                m.add_bool_or([])          # the chunk cannot leave its source in the horizon: infeasible
            for u in set(ins) | set(outs):
                if u == t_c:
                    continue
                m.add(sum(pres[c, l] for l in outs.get(u, [])) - sum(pres[c, l] for l in ins.get(u, []))
                      == (1 if u == s_c else 0))
    for ivs in by_link.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    if "linkload" in active:
        for l, keys in by_link_keys.items():
            slack = int(e_link[l] + f_link[l])
            m.add(int(dur[l]) * sum(pres[k] for k in keys) <= T - slack)
    if "ingress" in active:
        for v in range(inst.n):
            ls = [l for l in inst.in_links[v] if l in by_link_keys]
            if ls:
                m.add(sum(int(dur[l]) * pres[k] for l in ls for k in by_link_keys[l])
                      <= len(ls) * T - int(sum(e_link[l] for l in ls)))
    sym = "symmetry" in active and inst.multicast
    if sym:
        for v, cs in _symmetry_groups(inst):
            rs = [recv.get((c, v)) for c in cs]
            for a, b in itertools.pairwise(rs):
                if a is not None and b is not None:
                    m.add(a <= b)
    m.minimize(T)

    # --- hint ------------------------------------------------------------------------------------------------
    hinted = None
    if inc_ms <= H:
        hinted = incumbent
        if sym:
            hinted = _symmetric_hint(inst, incumbent)
        # a complete hint (absent intervals and unused relays at their earliest) lets CP-SAT take it as is
        chosen = {(c, l): s for c, l, s in hinted}
        for k, p in pres.items():
            s = chosen.get(k)
            m.add_hint(p, s is not None)
            m.add_hint(start[k], s if s is not None else start_lo[k])
        got = {(c, ldst[l]): s + dur[l] for c, l, s in hinted}
        for k, r in recv.items():
            m.add_hint(r, got.get(k, recv_lo[k]))
        m.add_hint(T, inc_ms)
    proto = m.proto
    stats.update(intervals=n_int, variables=len(proto.variables), constraints=len(proto.constraints),
                 workers=int(num_workers), hinted=inc_src if hinted is not None else None)
    build_s = time.perf_counter() - t_call

    # --- search ----------------------------------------------------------------------------------------------
    run = _search(m, t_call=t_call, unit_f=unit_f, on_progress=on_progress, time_limit_s=time_limit_s,
                  num_workers=num_workers, seed=seed, log=log, T_floor=min(T_lo, H), cpsat_params=cpsat_params,
                  stats=stats)
    solver, name, has, obj_units, bound_units, search_s, rec = (run.solver, run.name, run.has, run.obj_units,
                                                               run.bound_units, run.search_s, run.rec)

    # --- schedule ------------------------------------------------------------------------------------------
    sched, src = None, None
    if has:
        transfers = [(c, l, int(solver.value(start[c, l]))) for (c, l), p in pres.items() if solver.boolean_value(p)]
        sched, src = _real_schedule(problem, inst, transfers), "model"
    if (sched is None or obj_units > inc_ms) and inc_ms >= 0 and name != "INFEASIBLE" and inc_ms <= H:
        sched, src = _real_schedule(problem, inst, incumbent), inc_src   # CP-SAT found nothing better
    if (hint_real is not None and (sched is None or sched.makespan_us > hint_real.makespan_us)
            and (horizon_us is None or hint_real.makespan_us <= horizon_us)):
        sched, src = hint_real, "hint"                                     # never worse than the hint
    obj_us = None if sched is None else sched.makespan_us
    # the last row: what is returned (the re-timed schedule may end before the model's objective)
    rec.add(inc=None if obj_us is None else obj_us / unit_f, bound=bound_units)
    return ContinuousOutcome(name, sched, obj_us, None if bound_units is None else bound_units * unit_f,
                             trace=list(rec.rows), build_time_s=build_s, search_time_s=search_s, stats=stats,
                             solution_source=src, **base)


def _symmetry_groups(inst: _Instance) -> list[tuple[int, list[int]]]:
    """``(NPU, chunks)``: interchangeable chunks (same source and destinations) and the NPU where the
    ``symmetry`` cut orders their receipts (the destination; for multicast chunks the NPU farthest from
    the source, ties to the lowest id)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for c in inst.chunks:
        groups.setdefault((inst.source[c], inst.dest[c]), []).append(c)
    out = []
    for (s_c, t_c), cs in groups.items():
        if len(cs) < 2:
            continue
        if t_c >= 0:
            v = t_c
        else:
            E = inst.dist_from[s_c]
            v = max((x for x in range(inst.n) if x != s_c), key=lambda x: (E[x], -x))
        out.append((v, cs))
    return out


def _symmetric_hint(inst: _Instance, transfers):
    """The same schedule with interchangeable chunks relabelled so that their receipts at the symmetry
    NPU come in the order the ``symmetry`` cut imposes (ties: chunk id): the hint stays feasible."""
    arrive = {(c, inst.ldst[l]): s + inst.dur[l] for c, l, s in transfers}
    relabel = {}
    for v, cs in _symmetry_groups(inst):
        by_time = sorted(cs, key=lambda c: (arrive.get((c, v), math.inf), c))
        for new, old in zip(cs, by_time):
            relabel[old] = new
    return [(relabel.get(c, c), l, s) for c, l, s in transfers]
