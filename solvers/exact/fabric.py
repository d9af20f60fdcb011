"""Exact copy collectives on switched fabrics (docs/fabrics.md) in continuous time, with OR-Tools CP-SAT.

``solver=cpsat`` runs this model on every problem whose topology has switches (:mod:`solvers.exact.cpsat`);
the reducing collectives come from it by the mirror composition (:mod:`solvers.compose`), as for every backend.

Hops
----
A chunk moves from an NPU ``u`` to an NPU ``v`` over a *hop*: a simple path ``u -> switches -> v`` (no
switch: a direct link). Its links split into *segments* at ``store_forward`` switches (as in
:mod:`solvers.fabric_routes`): a segment is one row of the schedule (``route`` "u>s>v" through cut-through
switches) and occupies every link of it for ``sum(lat) + chunk / min(bw)``; the next segment of the hop starts
when the previous one has ended, or later (the switch buffers). The hops are **every** simple path between two
NPUs whose interior nodes are switches (:func:`fabric_hops`, up to :data:`MAX_HOPS`; beyond, the shortest hops
of :func:`solvers.fabric_routes.build_hops` and the model no longer claims optimality, see below).

Why this is the verifier's problem (without multicast / in-network reduction): a row through cut-through
switches runs NPU (or store-and-forward switch) to NPU (or store-and-forward switch); a store-and-forward
switch without ``multicast`` forwards each incoming copy once, first in, first out, so the rows of one chunk
chain into hops, and a pairing of incoming to outgoing copies (out starts after in ends) exists exactly when
the FIFO rule holds (the k-th outgoing copy after the k-th incoming one). A longer duration than the minimum,
a second copy to an NPU that has the chunk, a copy into a switch that is never forwarded, a loop: each can be
dropped without making any other row invalid. So the schedules of the model are the verifier's, up to such
dominated rows.

Model
-----
Time is an integer number of an exact unit: the GCD of the segment durations rebuilt as fractions from the
decimal strings of the topology (as :func:`solvers.exact.continuous.time_base` does per link); in a
left-shifted schedule every start is a sum of segment durations, so the optimum is a whole number of units
(beyond ``2^40`` units the unit falls back to 1 ns with durations rounded up, ``exact_time`` false). Two
formulations of the same model, both exact on that grid:

``interval`` (the default; ``solver=cpsat`` with ``model`` auto, continuous or interval)
    per candidate (chunk ``c``, hop ``h``) a presence ``p`` and, per segment ``k``, a start ``S_k`` with an
    optional fixed-size interval, put into the ``NoOverlap`` of **every physical link** of the segment;
    ``S_{k+1} >= S_k + d_k`` (the switch buffers the chunk in between); receipt ``R = S_last + d_last``;
    ``p => S_0 >= R[c, u]`` unless ``u`` is the chunk's source (sources hold from 0).
``time_indexed`` (``model=time_indexed``)
    a Boolean per (chunk, hop, segment, start unit), ``AtMostOne`` per link and unit, segments chained by
    clauses, hold literals "``u`` has received ``c`` by ``t``" as in the TEN's time-indexed model. Only for
    coarse units (a few units per transfer: homogeneous fabrics); refused beyond :data:`TI_MAX_OCCUPANCY`.

Both: an NPU that needs ``c`` receives it over exactly one hop, a relay of a unicast chunk over at most one;
the hops of a unicast chunk (gather, scatter, all_to_all) form one path (flow conservation); ``T >=`` every
needed receipt, minimized.

Late NPUs (``collective.release_us``): a segment that holds a link of a late NPU starts no sooner than the NPU
joins (:meth:`FabricInstance.segment_lows`; the unit divides the release times too), so a chunk whose source is
late leaves it from then on; the list schedules and the re-timing keep those links idle until then, and NPUs
that join at different times are not twins. The earliest receipts (``dist``) ignore the releases: a weaker, still
valid, floor. Reducing collectives with late NPUs are refused (:meth:`solvers.exact.common.ExactSolverBase
.release_refusal`).

Cuts (all valid for the problem): ``T >=`` the project's lower bound in units
(:func:`tacos_bench.bounds.lower_bounds`; the fabric bounds; not used when a verified start beats it); per link
``sum d * p <= T - earliest start - least time still to go`` (linear, for CP-SAT's LP); chunks with the same
source are interchangeable, so their receipts at one NPU are ordered (multicast kinds); for a Broadcast, NPUs
that a relabelling of the fabric swaps (one switch, same port both ways) receive their first chunk in id order.

Start, status, schedule
-----------------------
Cold by default: the model starts from its own list schedule over hops (:func:`list_schedule`: earliest
completion first, a rarest-chunk variant, then random tie-breaks for up to 5 % of the time limit); nothing from
another backend. ``hint`` (a verified schedule of the same problem, e.g. the fabric greedy's) is re-timed into
the model's units in its own order and handed over as a complete hint when it is better. When the start meets
the lower bound no model is built (``BOUND_MET``). The returned schedule is the model's segments in their
order on each link, re-timed as early as possible with the float durations the verifier uses, so it never
ends later than the model says.

Multicast
---------
At a ``cut_through`` switch with ``multicast`` one copy may leave on several ports: the rows of a multicast copy
share the links up to the switch and start and end together (the verifier's rule), so it runs at its slowest
branch's duration. Per (chunk, sender, shared prefix) up to one *slot* per candidate hop (presence, start, a
duration among the members', one interval on the prefix links); a present hop rides one slot, starts with it,
lasts as long and holds only its links after the switch. Exact for one multicast switch per route
(:func:`multicast_refusal` refuses routes through two); reducing collectives use ``reduce`` switches through the
mirror. Store-and-forward switches that would multicast or reduce are refused in one line
(:func:`fabric_refusal`), and so is multicast in the ``time_indexed`` formulation.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.fabrics import switched
>>> p = Problem(switched(4), Collective("all_gather", 1, 1))
>>> out = solve_fabric(p, time_limit_s=10, skip_search_at_bound=False)
>>> port = float(p.topology.lat_us[0]) * 2 + p.chunk_bytes / (50 * 2**30) * 1e6
>>> out.native_status, out.proved_optimal, round(out.objective_us / port, 9)
('OPTIMAL', True, 3.0)
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from tacos_bench.cost import link_time_us
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule
from tacos_bench.topology import CUT_THROUGH, Topology

from ..fabric_routes import _segments, build_hops
from .continuous import (
    FALLBACK_UNIT_US,
    MAX_HORIZON_UNITS,
    ContinuousOutcome,
    _bound_met,
    _bound_us,
    _search,
    dijkstra_arcs,
    exact_link_release_us,
    release_units,
)

__all__ = ["MAX_HOPS", "MAX_INTERVALS", "FabricInstance", "ListScheduleTimeout", "fabric_copy_result", "fabric_hops",
           "fabric_instance", "fabric_refusal", "list_schedule", "overlap_all_reduce", "solve_fabric"]

MAX_HOPS = 20_000            # every simple NPU -> switches -> NPU path up to this many; beyond: shortest hops only
MAX_INTERVALS = 150_000      # optional segment intervals; beyond, refused before building
TI_MAX_OCCUPANCY = 2_000_000  # time-indexed: (start literal, link, unit) occupancy entries; beyond, refused
DEFAULT_WORKERS = 8
COLD_BUDGET_FRACTION = 0.05  # random list-schedule restarts within this fraction of the time limit
DEFAULT_RESTARTS = 200
_BOUND_MARGIN = 1e-9
_BYTES_PER_GIB = 2**30
_US_PER_S = 10**6


# =============================================================================================== refusal
def fabric_refusal(problem: Problem) -> str | None:
    """One line saying why the fabric model cannot take ``problem``, or None.

    In-network multicast (All-Gather, Broadcast, and the All-Gather of an All-Reduce) and reduction
    (Reduce-Scatter, Reduce and the first phase of an All-Reduce, mirrored: the reversed fabric turns ``reduce``
    into ``multicast``) are modelled at ``cut_through`` switches, one such switch per route
    (:func:`multicast_refusal`); a ``store_forward`` switch that would use them is refused. The unicast
    collectives never use them.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.fabrics import switched
    >>> fabric_refusal(Problem(switched(4, multicast=True, reduce=True), Collective("all_gather", 1, 1))) is None
    True
    >>> sf = switched(4, mode="store_forward", multicast=True)
    >>> fabric_refusal(Problem(sf, Collective("all_gather", 1, 1)))[:62]
    "cpsat's fabric model has in-network multicast and reduction at"
    >>> fabric_refusal(Problem(sf, Collective("all_to_all", 1, 1))) is None
    True
    """
    topo = problem.topology
    kind = problem.kind
    want = []
    if kind in ("reduce_scatter", "reduce", "all_reduce"):
        want.append("reduce")
    if kind in ("all_gather", "broadcast", "all_reduce"):
        want.append("multicast")
    for i, sw in enumerate(topo.switches):
        flags = [f for f in want if getattr(sw, f)]
        if flags and sw.mode != CUT_THROUGH:
            return (f"cpsat's fabric model has in-network multicast and reduction at cut_through switches only, and "
                    f"switch {topo.num_npus + i} of {topo.name!r} is {sw.mode} with {' and '.join(flags)} ({kind} "
                    f"would use it); use greedy_plus")
    return None


def multicast_refusal(inst: "FabricInstance") -> str | None:
    """One line when a route of the instance crosses two multicast switches in one segment (a tree of
    multicast switches, which the model does not share below the first), or None."""
    topo = inst.problem.topology
    for h, p in enumerate(inst.mc_prefix):
        if not p:
            continue
        nodes = inst.seg_nodes[h][0]
        inner = [v for v in nodes[1:-1] if topo.switch(v).multicast]
        if len(inner) > 1:
            return (f"cpsat's fabric model shares a multicast copy at one switch per route, and the route "
                    f"{'>'.join(map(str, nodes))} of {topo.name!r} crosses multicast switches "
                    f"{', '.join(map(str, inner))}; use greedy_plus")
    return None


# =============================================================================================== hops
def _all_simple_hops(topo: Topology, cap: int) -> list[list[int]] | None:
    """Every simple path NPU -> (switches) -> NPU as node lists, or None beyond ``cap`` of them."""
    n = topo.num_npus
    out_ptr, ldst = topo.out_ptr, topo.dst
    paths: list[list[int]] = []
    for u in range(n):
        stack = [(u, [u])]
        while stack:
            x, path = stack.pop()
            for lid in range(int(out_ptr[x]), int(out_ptr[x + 1])):
                y = int(ldst[lid])
                if y in path:
                    continue
                if y < n:
                    paths.append(path + [y])
                    if len(paths) > cap:
                        return None
                else:
                    stack.append((y, path + [y]))
    return paths


def fabric_hops(topo: Topology, chunk_bytes: int, max_hops: int = MAX_HOPS) -> tuple[list[list[int]], bool]:
    """``(paths, complete)``: every simple NPU-to-NPU path whose interior nodes are switches (``complete``), or,
    when there are more than ``max_hops``, the least-duration ones of :func:`solvers.fabric_routes.build_hops`
    (``complete`` false: the model is then exact over those hops only)."""
    paths = _all_simple_hops(topo, max_hops)
    if paths is not None:
        return sorted(paths), True
    hops = build_hops(topo, chunk_bytes)
    return sorted(list(x) for x in hops.nodes), False


# =============================================================================================== instance
@dataclass
class FabricInstance:
    """The hops of a problem with their segments in integer time units, and the chunks to move."""

    problem: Problem
    n: int
    num_links: int
    hop_nodes: list[tuple[int, ...]]
    hop_src: list[int]
    hop_dst: list[int]
    seg_links: list[list[tuple[int, ...]]]     # per hop, per segment: its link ids
    seg_nodes: list[list[tuple[int, ...]]]     # per hop, per segment: its nodes (the row's route)
    seg_dur: list[list[int]]                   # per hop, per segment: duration in units
    seg_us: list[list[float]]                  # per hop, per segment: the verifier's float duration (µs)
    hop_total: list[int]                       # sum of the segment durations (units)
    complete: bool                             # hops are every simple path (else: shortest ones only)
    unit_us: Fraction
    exact: bool
    chunks: list[int]                          # chunks that move
    source: list[int]
    dest: list[int]                            # -1: every NPU
    multicast: bool
    # per hop: how many of segment 0's first links a multicast group may share (up to its first multicast
    # switch; 0: none), and the key of the groups it may join (chunk aside): (sender, prefix links). A group's
    # rows share start and end, so it runs at its slowest branch's duration
    mc_prefix: list[int] = field(default_factory=list)
    mc_key: list[tuple] = field(default_factory=list)
    # per link, the first unit it may carry anything (late NPUs, collective.release_us; 0: from the start)
    link_rel: list[int] = field(default_factory=list)
    hops_from: list[list[int]] = field(default_factory=list)
    hops_into: list[list[int]] = field(default_factory=list)
    dist_from: dict[int, list[float]] = field(default_factory=dict)   # over hops, in units
    dist_to: dict[int, list[float]] = field(default_factory=dict)

    def needed(self, c: int) -> list[int]:
        if self.dest[c] < 0:
            return [v for v in range(self.n) if v != self.source[c]]
        return [self.dest[c]]

    def segment_lows(self, h: int, ready: int) -> list[int]:
        """The earliest start of each segment of hop ``h`` when its sender holds the chunk from ``ready``: after
        the previous segment, and not before the release of any link of the segment (late NPUs)."""
        out, t = [], ready
        for ls, d in zip(self.seg_links[h], self.seg_dur[h]):
            t = max([t] + [self.link_rel[l] for l in ls])
            out.append(t)
            t += d
        return out


def _segment_times(topo: Topology, links: list[int], chunk_bytes: int) -> tuple[Fraction, float]:
    """A segment's duration as an exact fraction (from the decimal strings) and as the verifier's float."""
    lat = sum((Fraction(str(float(topo.lat_us[l]))) for l in links), Fraction(0))
    bw = min(float(topo.bw_GiBps[l]) for l in links)
    exact = lat + Fraction(int(chunk_bytes) * _US_PER_S) / (Fraction(str(bw)) * _BYTES_PER_GIB)
    flt = float(link_time_us(np.float64(bw), np.float64(topo.lat_us[list(links)].sum()), chunk_bytes))
    if not math.isclose(float(exact), flt, rel_tol=1e-9, abs_tol=0.0):
        raise SolverError(f"fabric model: a segment takes {flt!r} µs in the cost model but {float(exact)!r} µs "
                          "rebuilt exactly; tacos_bench/cost.py changed, update solvers/exact/fabric.py")
    return exact, flt


def fabric_instance(problem: Problem, *, max_hops: int = MAX_HOPS, horizon_us: float | None = None,
                    max_units: int = MAX_HORIZON_UNITS) -> FabricInstance:
    """Hops, segments and the time unit of ``problem`` (a copy collective); ``horizon_us`` (default: a rough
    estimate) decides whether the exact unit fits in ``max_units`` or falls back to 1 ns rounded up."""
    topo = problem.topology
    n = topo.num_npus
    cb = int(problem.chunk_bytes)
    paths, complete = fabric_hops(topo, cb, max_hops)
    seg_links, seg_nodes, exact_d, float_d = [], [], [], []
    cache: dict[tuple[int, ...], tuple[Fraction, float]] = {}
    for path in paths:
        links = topo.link_ids(path[:-1], path[1:]).tolist()
        sl, sn, se, sf = [], [], [], []
        for a, b in _segments(topo, path):
            ls = tuple(links[a:b + 1])
            if ls not in cache:
                cache[ls] = _segment_times(topo, list(ls), cb)
            sl.append(ls)
            sn.append(tuple(path[a:b + 2]))
            se.append(cache[ls][0])
            sf.append(cache[ls][1])
        seg_links.append(sl)
        seg_nodes.append(sn)
        exact_d.append(se)
        float_d.append(sf)
    allf = sorted({v[0] for v in cache.values()})
    rel = exact_link_release_us(problem)
    den = 1
    for t in allf + rel:
        den = den * t.denominator // math.gcd(den, t.denominator)
    g = 0
    for t in allf + rel:
        g = math.gcd(g, int(t * den))
    unit = Fraction(g, den) if g else Fraction(1)
    if horizon_us is None:
        horizon_us = float(sum(allf) + max(rel, default=0)) * max(1, problem.num_chunks)
    # a unit so fine that one segment alone (or the horizon) needs more than max_units of it falls back too
    exact = max(Fraction(horizon_us), max(allf, default=Fraction(0))) / unit <= max_units
    if exact:
        seg_dur = [[int(t / unit) for t in se] for se in exact_d]
    else:
        ns = {t: math.ceil(t / FALLBACK_UNIT_US) for t in allf}
        g = 0
        for x in [*ns.values(), *(math.ceil(r / FALLBACK_UNIT_US) for r in rel)]:   # releases: whole ns, up
            g = math.gcd(g, x)
        unit = FALLBACK_UNIT_US * g
        seg_dur = [[ns[t] // g for t in se] for se in exact_d]
    source = problem.sources.tolist()
    dest = problem.destinations.tolist()
    chunks = [c for c in range(len(source)) if dest[c] != source[c]] if n > 1 else []
    inst = FabricInstance(problem, n, topo.num_links, [tuple(p) for p in paths], [p[0] for p in paths],
                          [p[-1] for p in paths], seg_links, seg_nodes, seg_dur, float_d,
                          [sum(d) for d in seg_dur], complete, unit, exact, chunks, source, dest,
                          bool(problem.collective.multicast))
    inst.link_rel = list(release_units(rel, unit)) or [0] * topo.num_links
    inst.mc_prefix = [0] * len(paths)
    inst.mc_key = [()] * len(paths)
    if inst.multicast:
        for h, nodes in enumerate(seg_nodes):
            first = nodes[0]
            p = next((k for k in range(1, len(first) - 1) if topo.switch(first[k]).multicast), 0)
            if p:
                inst.mc_prefix[h] = p
                inst.mc_key[h] = (first[0], seg_links[h][0][:p])
    inst.hops_from = [[] for _ in range(n)]
    inst.hops_into = [[] for _ in range(n)]
    best: dict[tuple[int, int], int] = {}
    for h, (u, v) in enumerate(zip(inst.hop_src, inst.hop_dst)):
        inst.hops_from[u].append(h)
        inst.hops_into[v].append(h)
        best[u, v] = min(best.get((u, v), math.inf), inst.hop_total[h])
    fwd = [[] for _ in range(n)]
    bwd = [[] for _ in range(n)]
    for (u, v), w in best.items():
        fwd[u].append((v, w))
        bwd[v].append((u, w))
    for s in sorted({source[c] for c in chunks}):
        inst.dist_from[s] = dijkstra_arcs(n, fwd, s)
    if not inst.multicast:
        for t in sorted({dest[c] for c in chunks}):
            inst.dist_to[t] = dijkstra_arcs(n, bwd, t)
    return inst


# =============================================================================================== list schedule
# a transfer: (chunk, hop, segment starts in units)
Transfer = tuple[int, int, tuple[int, ...]]


def _commit(inst: FabricInstance, free: np.ndarray, h: int, ready: int) -> tuple[int, ...]:
    """Segment starts of hop ``h`` placed as early as ``ready`` and its links allow (links reserved)."""
    t = ready
    starts = []
    for ls, d in zip(inst.seg_links[h], inst.seg_dur[h]):
        s = max(t, int(max(free[list(ls)])))
        starts.append(s)
        t = s + d
        free[list(ls)] = t
    return tuple(starts)


class ListScheduleTimeout(Exception):
    """The list schedule passed its deadline (the caller's time limit): it returns no schedule."""


def list_schedule(inst: FabricInstance, rule: str = "ect", rng: random.Random | None = None,
                  deadline: float | None = None) -> tuple[list[Transfer], int]:
    """A valid schedule over hops (integer units) and its makespan: repeatedly the (chunk, hop) that completes
    first among those whose sender holds the chunk and whose receiver still needs it (unicast: hops on a
    shortest hop path to the destination), appended to its links.

    ``rule``: ``ect`` (ties: lowest chunk, hop), ``rarest`` (ties: the chunk fewest NPUs hold, then lowest ids),
    ``rarest_random`` (ties: the chunk fewest NPUs hold, then at random from ``rng``), ``random`` (completion plus
    a random jitter of up to the shortest segment time). ``deadline`` (a ``time.perf_counter()`` value): raises
    :class:`ListScheduleTimeout` once past it, so that the cold start keeps to the caller's time limit.

    A unicast chunk is at one NPU at a time, so only the hops out of it are scored at a commit (not every hop
    of every chunk: the 32-NPU leaf-spine All-to-All took 91 s that way, 1 s this way); the order of the
    scored pairs is the (chunk, hop) order, so the ties fall as in a full scan."""
    H = len(inst.hop_src)
    n = inst.n
    if not inst.chunks:
        return [], 0
    K = max(len(s) for s in inst.seg_dur)
    M = max(len(ls) for s in inst.seg_links for ls in s)
    pad = np.full((H, K, M), inst.num_links, dtype=np.int64)
    dpad = np.zeros((H, K))
    nseg = np.array([len(s) for s in inst.seg_dur])
    for h in range(H):
        for k, ls in enumerate(inst.seg_links[h]):
            pad[h, k, :len(ls)] = ls
            dpad[h, k] = inst.seg_dur[h][k]
    hsrc = np.array(inst.hop_src)
    hdst = np.array(inst.hop_dst)
    total = np.array(inst.hop_total, dtype=np.float64)
    ch = np.array(inst.chunks)
    Cm = len(ch)
    R = np.full((Cm, n), np.inf)                 # when each chunk is (or will be) at each NPU
    R[np.arange(Cm), np.array(inst.source)[ch]] = 0.0
    free = np.zeros(inst.num_links + 1, dtype=np.int64)
    free[:inst.num_links] = inst.link_rel      # a late NPU's links are idle until it joins
    free[inst.num_links] = -1
    if inst.multicast:
        pending = np.ones((Cm, n), dtype=bool)
        pending[np.arange(Cm), np.array(inst.source)[ch]] = False
        left = int(pending.sum())
        # scores kept between commits: a commit changes the free times of its links (the hops through them)
        # and one chunk's holders and needs (the hops out of and into its receiver); only those are rescored
        segfree = free[pad].max(axis=2).astype(np.float64)       # (H, K)
        link_hops = [[] for _ in range(inst.num_links + 1)]
        for h in range(H):
            for l in np.unique(pad[h]).tolist():
                if l < inst.num_links:         # the padding link is never reserved
                    link_hops[l].append(h)
        link_hops = [np.array(x, dtype=np.int64) for x in link_hops]
        out_of = [np.flatnonzero(hsrc == u) for u in range(n)]
        into = [np.flatnonzero(hdst == u) for u in range(n)]

        def rescore(rows, cols) -> np.ndarray:
            """``score[rows, cols]``: completion where the sender holds the chunk and the receiver needs it."""
            r = R[rows][:, hsrc[cols]]
            t = np.maximum(r, segfree[cols, 0]) + dpad[cols, 0]
            for k in range(1, K):
                t = np.where(nseg[cols] > k, np.maximum(t, segfree[cols, k]) + dpad[cols, k], t)
            valid = np.isfinite(r) & pending[rows][:, hdst[cols]]
            return np.where(valid, t, np.inf)

        all_rows = np.arange(Cm)
        kept = rescore(all_rows, np.arange(H))
        colmin = kept.min(axis=0)
    else:
        dst_c = np.array(inst.dest)[ch]
        dist_to = {t: np.array(d) for t, d in inst.dist_to.items()}
        out_of = [np.flatnonzero(hsrc == u) for u in range(n)]
        at = np.array(inst.source)[ch]

        def hops_on_path(i: int, u: int) -> np.ndarray:
            """The hops out of ``u`` on a shortest hop path to chunk ``i``'s destination (ascending)."""
            D = dist_to[int(dst_c[i])]
            hs = out_of[u]
            if not np.isfinite(D[u]):
                return hs[:0]
            return hs[D[hdst[hs]] + total[hs] == D[u]]

        cand = [hops_on_path(i, int(at[i])) for i in range(Cm)]
        done = np.zeros(Cm, dtype=bool)
        left = Cm
    holders = np.ones(Cm)
    dmin = float(dpad[dpad > 0].min())
    out: list[Transfer] = []
    makespan = 0
    while left:
        if deadline is not None and time.perf_counter() > deadline:
            raise ListScheduleTimeout(f"{rule} list schedule: {left} receipts left at the deadline")
        fast = None
        if inst.multicast:
            score = kept
            m = colmin.min()
            if not np.isfinite(m):
                raise SolverError(f"{inst.problem.topology.name}: the fabric list schedule is stuck ({left} "
                                  "receipts unreachable over hops)")
            rows = all_rows[:, None]
            if rule in ("ect", "rarest"):
                # the first (chunk, hop) in row-major order among the earliest (then rarest) completions, found in
                # the columns whose minimum is the earliest: the same pick as an argmin over the whole matrix
                cols = np.flatnonzero(colmin == m)
                sub = kept[:, cols] == m
                if rule == "rarest":
                    sub &= holders[:, None] == holders[sub.any(axis=1)].min()
                r = int(np.argmax(sub.any(axis=1)))
                fast = r, int(cols[np.argmax(sub[r])])
        else:
            live = np.flatnonzero(~done)
            I = np.repeat(live, [cand[i].size for i in live.tolist()])
            Hh = np.concatenate([cand[i] for i in live.tolist()]) if live.size else np.zeros(0, np.int64)
            if not Hh.size:
                raise SolverError(f"{inst.problem.topology.name}: the fabric list schedule is stuck ({left} "
                                  "receipts unreachable over hops)")
            segfree = free[pad[Hh]].max(axis=2).astype(np.float64)   # (pairs, K)
            score = np.maximum(R[I, hsrc[Hh]], segfree[:, 0]) + dpad[Hh, 0]
            for k in range(1, K):
                score = np.where(nseg[Hh] > k, np.maximum(score, segfree[:, k]) + dpad[Hh, k], score)
            rows = I
        if fast is None and rule == "random" and rng is not None:
            jitter = np.array([rng.random() for _ in range(Cm)]) * dmin
            score = score + (jitter[:, None] if inst.multicast else jitter[I])
        if fast is None and rule in ("rarest", "rarest_random"):
            # the earliest completion; among those, the chunk fewest NPUs hold (then at random, or lowest ids)
            tie = np.broadcast_to(holders[rows], score.shape)
            if rule == "rarest_random" and rng is not None:
                tie = tie + np.array([rng.random() for _ in range(score.size)]).reshape(score.shape) * 0.5
            score = np.where(score == score.min(), tie, np.inf)
        if fast is not None:
            i, h = fast
        elif inst.multicast:
            i, h = divmod(int(np.argmin(score)), H)
        else:
            j = int(np.argmin(score))
            i, h = int(I[j]), int(Hh[j])
        u, v = int(hsrc[h]), int(hdst[h])
        c = int(ch[i])
        starts = _commit(inst, free, h, int(R[i, u]))
        end = starts[-1] + inst.seg_dur[h][-1]
        out.append((c, h, starts))
        makespan = max(makespan, end)
        if inst.multicast:
            R[i, v] = end
            pending[i, v] = False
            holders[i] += 1
            left -= 1
            touched = np.unique(np.concatenate([link_hops[l] for l in np.unique(pad[h]).tolist()]))
            segfree[touched] = free[pad[touched]].max(axis=2)
            kept[:, touched] = rescore(all_rows, touched)
            row = np.array([i])
            for cols in (out_of[v], into[v]):
                kept[i, cols] = rescore(row, cols)[0]
            changed = np.unique(np.concatenate([touched, out_of[v], into[v]]))
            colmin[changed] = kept[:, changed].min(axis=0)
        else:
            R[i, u] = np.inf
            R[i, v] = end
            at[i] = v
            if v == inst.dest[c]:
                done[i] = True
                left -= 1
            else:
                cand[i] = hops_on_path(i, v)
    return out, int(makespan)


def _retime(inst: FabricInstance, transfers: list[tuple[int, int, Any, Any]]) -> tuple[list[Transfer], int]:
    """``(chunk, hop, order key, end key)`` re-timed in units as early as their order allows: per (chunk, NPU)
    the receipt that ends first (unicast: the path to the destination), in key order, each hop after its
    sender's receipt and its links. Returns ``([], -1)`` when they do not complete the collective."""
    first: dict[tuple[int, int], tuple[Any, int, Any]] = {}
    for c, h, key, end_key in transfers:
        v = inst.hop_dst[h]
        if v == inst.source[c]:
            continue
        if (c, v) not in first or end_key < first[c, v][0]:
            first[c, v] = (end_key, h, key)
    keep = []
    if inst.multicast:
        keep = [(key, c, h) for (c, v), (_, h, key) in first.items()]
    else:
        for c in inst.chunks:
            v, path, seen = inst.dest[c], [], set()
            while v != inst.source[c] and (c, v) in first and v not in seen:
                seen.add(v)
                _, h, key = first[c, v]
                path.append((key, c, h))
                v = inst.hop_src[h]
            if v == inst.source[c]:
                keep.extend(path)
    keep.sort(key=lambda x: (x[0], x[1], x[2]))
    free = np.array(inst.link_rel, dtype=np.int64)
    have: dict[tuple[int, int], int] = {}
    out: list[Transfer] = []
    makespan = 0
    for _, c, h in keep:
        u = inst.hop_src[h]
        if u == inst.source[c]:
            ready = 0
        elif (c, u) in have:
            ready = have[c, u]
        else:
            continue
        starts = _commit(inst, free, h, ready)
        end = starts[-1] + inst.seg_dur[h][-1]
        have[c, inst.hop_dst[h]] = end
        out.append((c, h, starts))
        makespan = max(makespan, end)
    for c in inst.chunks:
        for v in inst.needed(c):
            if (c, v) not in have:
                return [], -1
    return out, int(makespan)


def _hint_transfers(inst: FabricInstance, hint: Schedule) -> list[tuple[int, int, float, float]]:
    """The hops of a (verified) schedule: rows chained through store-and-forward switches first in, first out,
    matched to the model's hops by their nodes; ``(chunk, hop, start µs, end µs)``. Rows that form no hop of
    the model are left out."""
    n = inst.n
    index = {nodes: h for h, nodes in enumerate(inst.hop_nodes)}
    routes = hint.route if hint.route is not None else [""] * len(hint)
    rows = []
    for i, (c, s, d, t0, t1, r) in enumerate(zip(hint.chunk.tolist(), hint.src.tolist(), hint.dst.tolist(),
                                                 hint.start_us.tolist(), hint.end_us.tolist(), routes)):
        nodes = tuple(int(x) for x in r.split(">")) if r else (s, d)
        rows.append((c, nodes, t0, t1))
    # FIFO pairing at store-and-forward switches: the k-th copy out (by start) takes the k-th copy in (by end)
    ins: dict[tuple[int, int], list[int]] = {}
    outs: dict[tuple[int, int], list[int]] = {}
    for i, (c, nodes, _, _) in enumerate(rows):
        if nodes[-1] >= n:
            ins.setdefault((nodes[-1], c), []).append(i)
        if nodes[0] >= n:
            outs.setdefault((nodes[0], c), []).append(i)
    nxt: dict[int, int] = {}
    for key, o in outs.items():
        a = sorted(ins.get(key, []), key=lambda i: (rows[i][3], i))
        b = sorted(o, key=lambda i: (rows[i][2], i))
        for x, y in zip(a, b):
            nxt[x] = y
    out = []
    for i, (c, nodes, t0, t1) in enumerate(rows):
        if nodes[0] >= n:
            continue
        path, j, end = list(nodes), i, t1
        while path[-1] >= n and j in nxt:
            j = nxt[j]
            path += list(rows[j][1][1:])
            end = rows[j][3]
        h = index.get(tuple(path))
        if h is not None and path[-1] < n:
            out.append((c, h, t0, end))
    return out


# =============================================================================================== float schedule
def _real_schedule(inst: FabricInstance, transfers: list[Transfer]) -> Schedule:
    """The verifier's schedule of integer-unit transfers: one row per segment, in the model's order on each link,
    each segment as early as its sender (or its previous segment) and its links allow with the float durations
    the verifier computes, so it never ends later than the model says."""
    if not transfers:
        return Schedule.empty()
    events = []
    copies: dict[tuple, list[int]] = {}    # a multicast copy: its hops (same chunk, prefix and model start)
    for c, h, starts in transfers:
        for k, s in enumerate(starts):
            events.append((s, k, c, h))
        if inst.mc_prefix[h]:
            copies.setdefault((c, *inst.mc_key[h], starts[0]), []).append(h)
    copy_of = {(key[0], h): key for key, hs in copies.items() if len(hs) > 1 for h in hs}
    events.sort()
    free = inst.problem.link_release_us().tolist()
    have: dict[tuple[int, int], float] = {}
    prev: dict[tuple[int, int], float] = {}
    placed: dict[tuple, float] = {}         # a multicast copy's start, once its first hop is placed
    rows = []
    routed = False
    for _, k, c, h in events:
        u = inst.hop_src[h]
        if k == 0:
            ready = 0.0 if u == inst.source[c] else have[c, u]
        else:
            ready = prev[c, h]
        key = copy_of.get((c, h)) if k == 0 else None
        if key is None:
            ls = inst.seg_links[h][k]
            s = max([ready] + [free[l] for l in ls])
        elif key in placed:
            s, ls = placed[key], ()
        else:
            # the rows of one multicast copy start and end together (the verifier wants their times
            # bit-identical), at the slowest branch's duration
            ls = sorted({l for x in copies[key] for l in inst.seg_links[x][0]})
            s = placed[key] = max([ready] + [free[l] for l in ls])
        e = s + (inst.seg_us[h][k] if key is None else max(inst.seg_us[x][0] for x in copies[key]))
        for l in ls:
            free[l] = e
        prev[c, h] = e
        nodes = inst.seg_nodes[h][k]
        route = ">".join(map(str, nodes)) if len(nodes) > 2 else ""
        routed = routed or bool(route)
        rows.append((c, nodes[0], nodes[-1], s, e, route))
        if k == len(inst.seg_links[h]) - 1:
            have[c, inst.hop_dst[h]] = e
    c, s, d, a, b, r = zip(*rows)
    return Schedule(c, s, d, a, b, np.zeros(len(rows), dtype=np.int8), route=list(r) if routed else None).sorted()


# =============================================================================================== bounds
def fabric_bound_us(problem: Problem) -> tuple[float | None, str]:
    """The project's lower bound (:func:`tacos_bench.bounds.lower_bounds`, the fabric bounds on a fabric) and
    its source, as the continuous model takes it."""
    return _bound_us(problem)


def _symmetry_groups(inst: FabricInstance) -> list[tuple[int, list[int]]]:
    """Interchangeable multicast chunks (same source) and the NPU where their receipts are ordered (the
    farthest from the source, ties to the lowest id)."""
    if not inst.multicast:
        return []
    groups: dict[int, list[int]] = {}
    for c in inst.chunks:
        groups.setdefault(inst.source[c], []).append(c)
    out = []
    for s, cs in groups.items():
        if len(cs) > 1:
            E = inst.dist_from[s]
            v = max((x for x in range(inst.n) if x != s), key=lambda x: (E[x], -x))
            out.append((v, cs))
    return out


def _symmetric(inst: FabricInstance, transfers: list[Transfer]) -> list[Transfer]:
    """The same transfers with twin NPUs (:func:`_twin_npus`) relabelled so that their first receipts come in id
    order, then interchangeable chunks relabelled so that their receipts at the symmetry NPU come in the order
    the cut imposes: the hint stays a valid schedule that satisfies both cuts."""
    twins = _twin_npus(inst)
    if twins:
        first: dict[int, int] = {}
        for c, h, st in transfers:
            v = inst.hop_dst[h]
            first[v] = min(first.get(v, math.inf), st[-1] + inst.seg_dur[h][-1])
        perm = list(range(inst.problem.topology.num_nodes))
        for g in twins:
            for new, old in zip(g, sorted(g, key=lambda v: (first.get(v, math.inf), v))):
                perm[old] = new
        index = {nodes: h for h, nodes in enumerate(inst.hop_nodes)}
        transfers = [(c, index[tuple(perm[x] for x in inst.hop_nodes[h])], st) for c, h, st in transfers]
    arrive = {(c, inst.hop_dst[h]): st[-1] + inst.seg_dur[h][-1] for c, h, st in transfers}
    relabel = {}
    for v, cs in _symmetry_groups(inst):
        by_time = sorted(cs, key=lambda c: (arrive.get((c, v), math.inf), c))
        for new, old in zip(cs, by_time):
            relabel[old] = new
    return [(relabel.get(c, c), h, st) for c, h, st in transfers]


# =============================================================================================== formulations
def _common_rows(inst: FabricInstance, cands):
    """Per chunk: the candidate hops into and out of each NPU."""
    ins: dict[tuple[int, int], list[int]] = {}
    outs: dict[tuple[int, int], list[int]] = {}
    for c, h, _, _ in cands:
        ins.setdefault((c, inst.hop_dst[h]), []).append(h)
        outs.setdefault((c, inst.hop_src[h]), []).append(h)
    return ins, outs


def _receipts_and_flow(m, inst: FabricInstance, T, H: int, pres, ins, outs, arrival, sym):
    """Receipt (exactly one hop into a needed NPU, at most one into a relay), the makespan, unicast flow
    conservation and the symmetry order; ``arrival(c, v)`` is the receipt time (a variable or expression)."""
    recv = {}
    for c in inst.chunks:
        s_c, t_c = inst.source[c], inst.dest[c]
        for v in range(inst.n):
            hs = ins.get((c, v))
            if not hs:
                continue
            lits = [pres[c, h] for h in hs]
            if t_c < 0 or v == t_c:
                m.add_exactly_one(lits)
                recv[c, v] = arrival(c, v)
                m.add(T >= recv[c, v])
            else:
                m.add_at_most_one(lits)
        for v in inst.needed(c):
            if (c, v) not in ins:
                m.add_bool_or([])                      # cannot be reached within the horizon: infeasible
        if t_c >= 0:                                   # unicast: one path of hops
            nodes = {v for (cc, v) in ins if cc == c} | {u for (cc, u) in outs if cc == c}
            for u in nodes:
                if u == t_c:
                    continue
                m.add(sum(pres[c, h] for h in outs.get((c, u), [])) - sum(pres[c, h] for h in ins.get((c, u), []))
                      == (1 if u == s_c else 0))
            if (c, s_c) not in outs:
                m.add_bool_or([])
    for v, cs in sym:
        rs = [recv.get((c, v)) for c in cs]
        for a, b in itertools.pairwise(rs):
            if a is not None and b is not None:
                m.add(a <= b)
    for group in _twin_npus(inst):
        # interchangeable NPUs receive their first chunk in id order (compatible with the chunk order above,
        # which relabels chunks only and leaves every NPU's first receipt where it is)
        firsts = []
        for v in group:
            f = m.new_int_var(0, int(H), "")
            m.add_min_equality(f, [recv[c, v] for c in inst.chunks])
            firsts.append(f)
        for a, b in itertools.pairwise(firsts):
            m.add(a <= b)


def _twin_npus(inst: FabricInstance) -> list[list[int]]:
    """Broadcast only: groups of non-root NPUs that a relabelling of the topology swaps (each joined by links to
    and from one switch only, with the same bandwidth and latency and the same release as the others of its
    group)."""
    if not inst.multicast or len({inst.source[c] for c in inst.chunks}) != 1 or not inst.chunks:
        return []
    topo = inst.problem.topology
    root = inst.source[inst.chunks[0]]
    groups: dict[tuple, list[int]] = {}
    for v in range(inst.n):
        if v == root:
            continue
        outs = [(int(topo.dst[l]), float(topo.bw_GiBps[l]), float(topo.lat_us[l]))
                for l in range(int(topo.out_ptr[v]), int(topo.out_ptr[v + 1]))]
        ins = [(int(topo.src[l]), float(topo.bw_GiBps[l]), float(topo.lat_us[l]))
               for l in topo.in_order[topo.in_ptr[v]:topo.in_ptr[v + 1]].tolist()]
        if len(outs) != 1 or len(ins) != 1 or outs[0][0] != ins[0][0] or outs[0][0] < inst.n:
            continue
        # NPUs that join at different times (collective.release_us) are not interchangeable
        groups.setdefault((outs[0], ins[0], float(inst.problem.release_us[v])), []).append(v)
    return [g for g in groups.values() if len(g) > 1]


def _link_load(m, inst: FabricInstance, T, items):
    """Per link: its load fits between the earliest start and ``T`` minus the least time still to go after it
    (``items``: link -> [(duration, presence, earliest start, time after)])."""
    for its in items.values():
        e = min(x[2] for x in its)
        f = min(x[3] for x in its)
        m.add(sum(d * p for d, p, _, _ in its) <= T - int(e + f))


def _build_interval(inst: FabricInstance, cands, H: int, T_lo: int, sym, hinted, inc_ms: int):
    """Per (chunk, hop) a presence and per segment an optional fixed-size interval in the ``NoOverlap`` of each of
    its links; segments chained (``S_{k+1} >= S_k + d_k``); receipt ``R = S_last + d_last``."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    T = m.new_int_var(int(min(T_lo, H)), int(H), "T")
    pres, starts, lo_of = {}, {}, {}
    by_link: dict[int, list] = {}
    load: dict[int, list] = {}
    groups = _multicast_groups(inst, cands)
    longest = {(x[0], x[1]): sorted({inst.seg_dur[y[1]][0] for y in members})
               for members in groups.values() for x in members}
    first_end, first_dur = {}, {}
    for c, h, lo, tail in cands:
        p = m.new_bool_var("")
        pres[c, h] = p
        durs = inst.seg_dur[h]
        rest = inst.hop_total[h]
        ss, los = [], []
        for k, (d, t_lo) in enumerate(zip(durs, inst.segment_lows(h, lo))):
            rest -= d                                  # what follows this segment on the hop
            s = m.new_int_var(int(t_lo), int(H - d - rest - tail), "")
            if k == 0 and (c, h) in longest:
                # a member of a multicast group: it holds the links after the shared prefix only, for the
                # group's duration (its slowest branch's, at least its own)
                dur = m.new_int_var_from_domain(_domain([x for x in longest[c, h] if x >= d]), "")
                end = m.new_int_var(int(t_lo + d), int(H - rest - tail), "")
                iv = m.new_optional_interval_var(s, dur, end, p, "")
                first_end[c, h], first_dur[c, h] = end, dur
                own = inst.seg_links[h][k][inst.mc_prefix[h]:]
            else:
                iv = m.new_optional_fixed_size_interval_var(s, int(d), p, "")
                own = inst.seg_links[h][k]
            for l in own:
                by_link.setdefault(l, []).append(iv)
                load.setdefault(l, []).append((int(d), p, t_lo, rest + tail))
            if ss:
                m.add(s >= (first_end[c, h] if k == 1 and (c, h) in first_end else ss[-1] + int(durs[k - 1])))
            ss.append(s)
            los.append(int(t_lo))
        starts[c, h] = ss
        lo_of[c, h] = los
    slot_hints = _slot_hints(inst, groups, hinted)
    for key, members in groups.items():
        _add_multicast_slots(m, inst, key, members, pres, starts, first_dur, H, by_link, load,
                             slot_hints.get(key, []))
    ins, outs = _common_rows(inst, cands)
    recv, recv_lo = {}, {}
    for (c, v), hs in ins.items():
        D = inst.dist_to[inst.dest[c]] if inst.dest[c] >= 0 else None
        E = inst.dist_from[inst.source[c]]
        r = m.new_int_var(int(E[v]), int(max(E[v], H - (0 if D is None else D[v]))), "")
        recv[c, v] = r
        recv_lo[c, v] = int(E[v])
        for h in hs:
            last = (first_end[c, h] if len(inst.seg_dur[h]) == 1 and (c, h) in first_end
                    else starts[c, h][-1] + int(inst.seg_dur[h][-1]))
            m.add(r == last).only_enforce_if(pres[c, h])
    for (c, u), hs in outs.items():
        if u == inst.source[c]:
            continue
        r = recv.get((c, u))
        for h in hs:
            if r is None:
                m.add(pres[c, h] == 0)
            else:
                m.add(starts[c, h][0] >= r).only_enforce_if(pres[c, h])
    _receipts_and_flow(m, inst, T, H, pres, ins, outs, lambda c, v: recv[c, v], sym)
    for ivs in by_link.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    _link_load(m, inst, T, load)
    m.minimize(T)
    chosen = {(c, h): st for c, h, st in hinted}
    for key, p in pres.items():
        st = chosen.get(key)
        m.add_hint(p, st is not None)
        for k, s in enumerate(starts[key]):
            m.add_hint(s, st[k] if st is not None else lo_of[key][k])
    for key, end in first_end.items():
        st = chosen.get(key)
        d = inst.seg_dur[key[1]][0]
        m.add_hint(first_dur[key], d)
        m.add_hint(end, (st[0] if st is not None else lo_of[key][0]) + d)
    got = {(c, inst.hop_dst[h]): st[-1] + inst.seg_dur[h][-1] for c, h, st in hinted}
    for key, r in recv.items():
        m.add_hint(r, got.get(key, recv_lo[key]))
    m.add_hint(T, inc_ms)

    def extract(solver) -> list[Transfer]:
        return [(c, h, tuple(int(solver.value(s)) for s in starts[c, h]))
                for (c, h), p in pres.items() if solver.boolean_value(p)]

    return m, T, extract


def _multicast_groups(inst: FabricInstance, cands) -> dict[tuple, list]:
    """Candidates that may share their first segment's prefix as one multicast copy: same chunk, sender,
    prefix links (up to the first multicast switch) and segment duration; only keys with two or more."""
    out: dict[tuple, list] = {}
    for cand in cands:
        c, h = cand[0], cand[1]
        if inst.mc_prefix[h]:
            out.setdefault((c, *inst.mc_key[h]), []).append(cand)
    return {k: v for k, v in out.items() if len(v) > 1}


def _slot_hints(inst: FabricInstance, groups: dict, hinted) -> dict[tuple, list[tuple[int, list[int]]]]:
    """Per group key, the hinted copies as ``(start, [hops])`` in start order (hinted hops with one start share
    a copy)."""
    at: dict[tuple, dict[int, list[int]]] = {}
    for c, h, st in hinted:
        if inst.mc_prefix[h]:
            key = (c, *inst.mc_key[h])
            if key in groups:
                at.setdefault(key, {}).setdefault(int(st[0]), []).append(h)
    return {k: sorted(v.items()) for k, v in at.items()}


def _add_multicast_slots(m, inst: FabricInstance, key, members, pres, starts, first_dur, H: int, by_link, load,
                         hint):
    """Up to one copy per member over the group's shared prefix (a slot: presence, start, duration -- the
    longest of its riders' -- and one interval on the prefix links); each present member rides exactly one
    slot, starting with it and lasting as long. Slots are used in order."""
    c, _, prefix = key
    durs = sorted({inst.seg_dur[x[1]][0] for x in members})
    lo = min(x[2] for x in members)
    after = min(inst.hop_total[x[1]] - inst.seg_dur[x[1]][0] + x[3] for x in members)
    slots = []
    for _ in members:
        q = m.new_bool_var("")
        S = m.new_int_var(int(lo), int(H - durs[0] - after), "")
        D = m.new_int_var_from_domain(_domain(durs), "")
        E = m.new_int_var(int(lo + durs[0]), int(H - after), "")
        iv = m.new_optional_interval_var(S, D, E, q, "")
        for l in prefix:
            by_link.setdefault(l, []).append(iv)
            load.setdefault(l, []).append((int(durs[0]), q, lo, after))
        slots.append((q, S, D, E))
    ride = [[m.new_bool_var("") for _ in slots] for _ in members]
    for k, (_, h, _, _) in enumerate(members):
        m.add(sum(ride[k]) == pres[c, h])
        for g, (q, S, D, _) in enumerate(slots):
            m.add_implication(ride[k][g], q)
            m.add(starts[c, h][0] == S).only_enforce_if(ride[k][g])
            m.add(first_dur[c, h] == D).only_enforce_if(ride[k][g])
    for g, (q, S, D, E) in enumerate(slots):
        m.add_bool_or([ride[k][g] for k in range(len(members))]).only_enforce_if(q)
        if g:
            m.add_implication(q, slots[g - 1][0])
            m.add(slots[g - 1][3] <= S).only_enforce_if(q)
    for g, (q, S, D, E) in enumerate(slots):
        used = g < len(hint)
        d = max(inst.seg_dur[h][0] for h in hint[g][1]) if used else durs[0]
        m.add_hint(q, used)
        m.add_hint(S, hint[g][0] if used else lo)
        m.add_hint(D, d)
        m.add_hint(E, (hint[g][0] if used else lo) + d)
        for k, (_, h, _, _) in enumerate(members):
            m.add_hint(ride[k][g], used and h in hint[g][1])


def _domain(values):
    """A CP-SAT domain of exactly ``values``."""
    from ortools.sat.python import cp_model

    return cp_model.Domain.from_values([int(v) for v in values])


def _build_time_indexed(inst: FabricInstance, cands, H: int, T_lo: int, sym, hinted, inc_ms: int):
    """Per (chunk, hop, segment, start unit) a Boolean: one start per segment of a present hop, segments chained
    by clauses, ``AtMostOne`` per link and unit, hold literals ``h[c, u, t]`` (``u`` received ``c`` by ``t``)
    as in the TEN's time-indexed model. Exact: starts are whole units in a left-shifted schedule."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    T = m.new_int_var(int(min(T_lo, H)), int(H), "T")
    pres = {}
    xs: dict[tuple[int, int], list[dict[int, Any]]] = {}
    occ: dict[tuple[int, int], list] = {}             # (link, unit) -> literals occupying it
    load: dict[int, list] = {}
    arrive: dict[tuple[int, int], list[tuple[int, Any]]] = {}   # (c, v) -> [(arrival unit, literal)]
    for c, h, lo, tail in cands:
        p = m.new_bool_var("")
        pres[c, h] = p
        durs = inst.seg_dur[h]
        rest = inst.hop_total[h]
        segs = []
        for k, (d, t_lo) in enumerate(zip(durs, inst.segment_lows(h, lo))):
            rest -= d
            hi = H - d - rest - tail
            lits = {t: m.new_bool_var("") for t in range(int(t_lo), int(hi) + 1)}
            m.add(sum(lits.values()) == p)
            if segs:                                   # this segment starts after the previous one ended
                prev = segs[-1]
                dp = durs[k - 1]
                for t, x in lits.items():
                    m.add_bool_or([y for tp, y in prev.items() if tp + dp <= t]).only_enforce_if(x)
            for t, x in lits.items():
                for l in inst.seg_links[h][k]:
                    for tau in range(t, t + d):
                        occ.setdefault((l, tau), []).append(x)
            for l in inst.seg_links[h][k]:
                load.setdefault(l, []).append((int(d), p, t_lo, rest + tail))
            segs.append(lits)
        xs[c, h] = segs
        dl = durs[-1]
        arrive.setdefault((c, inst.hop_dst[h]), []).extend((t + dl, x) for t, x in segs[-1].items())
    for lits in occ.values():
        if len(lits) > 1:
            m.add_at_most_one(lits)
    ins, outs = _common_rows(inst, cands)
    # holds: hold[c, u][t] => hold[c, u][t-1] or an arrival at t; an arrival at t => hold[c, u][t]
    hold: dict[tuple[int, int], dict[int, Any]] = {}
    for (c, u), hs in outs.items():
        if u == inst.source[c]:
            continue
        arr = arrive.get((c, u), [])
        send_ts = sorted({t for h in hs for t in xs[c, h][0]})
        if not arr:
            for h in hs:
                m.add(pres[c, h] == 0)
            continue
        first = min(t for t, _ in arr)
        by_t: dict[int, list] = {}
        for t, x in arr:
            by_t.setdefault(t, []).append(x)
        hv: dict[int, Any] = {}
        prev = None
        for t in range(first, max(send_ts[-1], first) + 1):
            y = m.new_bool_var("")
            support = by_t.get(t, []) + ([prev] if prev is not None else [])
            m.add_bool_or(support).only_enforce_if(y)
            for lit in support:
                m.add_implication(lit, y)
            hv[t] = y
            prev = y
        hold[c, u] = hv
        for h in hs:
            for t, x in xs[c, h][0].items():
                if t < first:
                    m.add(x == 0)
                else:
                    m.add_implication(x, hv[t])

    def arrival(c, v):
        return sum(t * x for t, x in arrive[c, v])

    _receipts_and_flow(m, inst, T, H, pres, ins, outs, arrival, sym)
    _link_load(m, inst, T, load)
    m.minimize(T)
    chosen = {(c, h): st for c, h, st in hinted}
    for key, p in pres.items():
        st = chosen.get(key)
        m.add_hint(p, st is not None)
        for k, lits in enumerate(xs[key]):
            for t, x in lits.items():
                m.add_hint(x, st is not None and st[k] == t)
    got = {(c, inst.hop_dst[h]): st[-1] + inst.seg_dur[h][-1] for c, h, st in hinted}
    for (c, u), hv in hold.items():
        a = got.get((c, u))
        for t, y in hv.items():
            m.add_hint(y, a is not None and a <= t)
    m.add_hint(T, inc_ms)

    def extract(solver) -> list[Transfer]:
        out = []
        for (c, h), p in pres.items():
            if solver.boolean_value(p):
                out.append((c, h, tuple(next(t for t, x in lits.items() if solver.boolean_value(x))
                                        for lits in xs[c, h])))
        return out

    return m, T, extract


# =============================================================================================== solve
def solve_fabric(problem: Problem, *, time_limit_s: float | None = 60.0, num_workers: int = DEFAULT_WORKERS,
                 seed: int = 0, hint: Schedule | None = None, mip_gap: float = 0.0, log: bool = False,
                 max_hops: int = MAX_HOPS, max_intervals: int = MAX_INTERVALS, cold_restarts: int | None = None,
                 skip_search_at_bound: bool = True, use_bound: bool = True, formulation: str = "interval",
                 on_progress: Callable[[float, float | None, float | None], None] | None = None
                 ) -> ContinuousOutcome:
    """Solve a copy collective on a switched fabric exactly in continuous time (module docstring).

    Parameters
    ----------
    problem : Problem
        all_gather, broadcast, gather, scatter or all_to_all on a topology with switches (or without: then
        every hop is a link and this is the continuous model without its extra cuts).
    time_limit_s : float or None
        Wall-clock budget of the whole call (hops, bounds, cold start, model, search).
    num_workers : int
        CP-SAT workers; fewer than 8 rarely prove optimality, even on 2 cores.
    hint : Schedule, optional
        A schedule of ``problem`` (checked with the verifier), e.g. the fabric greedy's: re-timed into the
        model and used as the start when it is better than the cold start (never returned worse).
    mip_gap : float
        CP-SAT's ``relative_gap_limit``.
    skip_search_at_bound : bool
        No model when the start meets the lower bound (``BOUND_MET``).
    use_bound : bool
        ``T >=`` the project's lower bound (off: the model proves its optimum alone).
    formulation : {"interval", "time_indexed"}
        See the module docstring.

    Returns
    -------
    ContinuousOutcome
        As :func:`solvers.exact.continuous.solve_continuous`; ``stats`` adds ``hops``, ``hops_complete``,
        ``segments_max``. ``proved_optimal`` is for the model's hops: with ``hops_complete`` false the caller
        must not report it as the problem's optimum.
    """
    t_call = time.perf_counter()
    deadline = None if time_limit_s is None else t_call + float(time_limit_s)
    if not problem.collective.copies:
        raise SolverError(f"the fabric model schedules copy collectives, not {problem.kind}")
    why = fabric_refusal(problem)
    if why:
        raise SolverError(why)
    inst = fabric_instance(problem, max_hops=max_hops, horizon_us=0.0)
    why = multicast_refusal(inst)
    if why:
        raise SolverError(why)
    stats: dict[str, Any] = {"hops": len(inst.hop_src), "hops_complete": inst.complete,
                             "segments_max": max((len(s) for s in inst.seg_dur), default=0)}
    if not inst.chunks:
        return ContinuousOutcome("TRIVIAL", Schedule.empty(), 0.0, 0.0, float(inst.unit_us), inst.exact,
                                 build_time_s=time.perf_counter() - t_call, stats=stats, solution_source="model",
                                 time_unit=inst.unit_us)
    try:
        heur, heur_ms = list_schedule(inst, "ect", deadline=deadline)
        if heur_ms > MAX_HORIZON_UNITS:
            inst = fabric_instance(problem, max_hops=max_hops, horizon_us=float(heur_ms * inst.unit_us))
            heur, heur_ms = list_schedule(inst, "ect", deadline=deadline)
    except ListScheduleTimeout as e:
        # no schedule at all within the time limit: said so, not waited for
        stats["list_schedule_note"] = f"the cold start did not finish within the time limit ({e})"
        return ContinuousOutcome("UNKNOWN", None, None, None, float(inst.unit_us), inst.exact,
                                 build_time_s=time.perf_counter() - t_call, stats=stats, time_unit=inst.unit_us)
    unit = inst.unit_us
    unit_f = float(unit)
    base = {"time_unit_us": unit_f, "exact_time": inst.exact, "time_unit": unit}

    # --- hint ----------------------------------------------------------------------------------------------
    hint_real, h_tr, h_ms = None, [], -1
    if hint is not None and len(hint):
        from tacos_bench.verify import check

        ver = check(problem, hint)
        if not ver.valid:
            raise SolverError(f"the hint is not a valid schedule of this problem: {ver.message}")
        h_tr, h_ms = _retime(inst, _hint_transfers(inst, hint))
        stats.update(hint_us=float(hint.makespan_us), hint_units=h_ms)
        hint_real = hint

    # --- lower bound ----------------------------------------------------------------------------------------
    lb_us, lb_src = fabric_bound_us(problem) if use_bound else (None, "off")
    stats.update(lower_bound_us=lb_us, lower_bound_source=lb_src)
    far = 0
    for c in inst.chunks:
        d = inst.dist_from[inst.source[c]]
        far = max(far, max(d[v] for v in inst.needed(c)))
    T_lo = int(far)
    if lb_us is not None:
        x = Fraction(lb_us) / unit
        lb_units = max(0, math.ceil(x - Fraction(max(1e-6, _BOUND_MARGIN * float(x)))))
        if lb_units > heur_ms:
            # a verified schedule beats the bound: the bound is wrong here; do not cut with it
            stats["bound_note"] = f"the bound {lb_us} µs exceeds the list schedule: not used"
        else:
            T_lo = max(T_lo, lb_units)
    stats["bound_cut_units"] = T_lo

    # --- cold start: list schedule variants until one meets the bound or the budget is spent --------------------
    t_r = time.perf_counter()
    budget = COLD_BUDGET_FRACTION * (time_limit_s if time_limit_s is not None else 60.0)
    rng = random.Random(seed)
    runs = 1
    restarts = DEFAULT_RESTARTS if cold_restarts is None else int(cold_restarts)
    for i in range(restarts):
        if min(heur_ms, h_ms if h_ms >= 0 else heur_ms) <= T_lo:
            break
        if i >= 1 and time.perf_counter() - t_r > budget:
            break
        try:
            tr, ms = list_schedule(inst, "rarest" if i == 0 else ("rarest_random", "random")[i % 2], rng,
                                   deadline=deadline if i == 0 or deadline is None else min(deadline, t_r + budget))
        except ListScheduleTimeout:
            break
        runs += 1
        if ms < heur_ms:
            heur, heur_ms = tr, ms
    stats.update(list_schedule_us=float(heur_ms * unit), list_schedule_runs=runs,
                 list_schedule_time_s=time.perf_counter() - t_r)
    incumbent, inc_ms, inc_src = heur, heur_ms, "list_schedule"
    if 0 <= h_ms <= inc_ms:
        incumbent, inc_ms, inc_src = h_tr, h_ms, "hint"
    H = inc_ms
    stats["horizon_units"] = H

    def _finish_real(transfers, src):
        sched = _real_schedule(inst, transfers)
        if hint_real is not None and sched.makespan_us > hint_real.makespan_us:
            return hint_real, "hint"
        return sched, src

    if skip_search_at_bound and inc_ms <= T_lo:
        sched, src = _finish_real(incumbent, inc_src)
        return _bound_met(sched, src, inc_ms, T_lo, unit, t_call, on_progress, stats, base)

    # --- candidates and size ------------------------------------------------------------------------------------
    cands = []   # (c, h, lo, tail)
    for c in inst.chunks:
        s_c, t_c = inst.source[c], inst.dest[c]
        E = inst.dist_from[s_c]
        D = inst.dist_to[t_c] if t_c >= 0 else None
        for h in range(len(inst.hop_src)):
            u, v = inst.hop_src[h], inst.hop_dst[h]
            if v == s_c or (D is not None and u == t_c):
                continue
            tail = 0 if D is None else D[v]
            if inst.segment_lows(h, int(E[u]))[-1] + inst.seg_dur[h][-1] + tail > H:
                continue
            cands.append((c, h, int(E[u]), tail))
    n_int = sum(len(inst.seg_dur[h]) for _, h, _, _ in cands)
    stats["intervals"] = n_int
    if n_int > max_intervals:
        raise SolverError(f"the fabric model of {problem.kind} on {problem.topology.name!r} would have {n_int:,} "
                          f"optional intervals, more than {max_intervals:,}; use greedy_plus")

    # --- model ----------------------------------------------------------------------------------------------------
    if formulation not in ("interval", "time_indexed"):
        raise SolverError(f"fabric formulation must be interval or time_indexed, got {formulation!r}")
    if formulation == "time_indexed" and any(inst.mc_prefix):
        raise SolverError(f"the time-indexed fabric model has no in-network multicast, which {problem.kind} on "
                          f"{problem.topology.name!r} may use; use the interval formulation (model=auto)")
    if formulation == "time_indexed":
        n_bool = sum(H - lo - inst.hop_total[h] - tail + 1 for _, h, lo, tail in cands for _ in inst.seg_dur[h])
        n_occ = sum((H - lo - inst.hop_total[h] - tail + 1) * d * len(ls) for _, h, lo, tail in cands
                    for d, ls in zip(inst.seg_dur[h], inst.seg_links[h]))
        stats.update(time_indexed_bools=int(n_bool), time_indexed_occupancy=int(n_occ))
        if n_occ > TI_MAX_OCCUPANCY:
            raise SolverError(f"the time-indexed fabric model of {problem.kind} on {problem.topology.name!r} would "
                              f"have {n_occ:,} (start, link, unit) entries at a unit of {float(unit):g} µs, more "
                              f"than {TI_MAX_OCCUPANCY:,}; use the interval formulation (model=auto)")
    stats["formulation"] = formulation
    sym = _symmetry_groups(inst)
    # a complete hint: the incumbent (relabelled for the symmetry cut)
    hinted = _symmetric(inst, incumbent)
    build = _build_time_indexed if formulation == "time_indexed" else _build_interval
    m, _, extract = build(inst, cands, H, T_lo, sym, hinted, inc_ms)
    proto = m.proto
    stats.update(variables=len(proto.variables), constraints=len(proto.constraints), workers=int(num_workers),
                 hinted=inc_src)
    build_s = time.perf_counter() - t_call

    # --- search ---------------------------------------------------------------------------------------------------
    limit = None
    if deadline is not None:
        left = deadline - time.perf_counter()
        reserve = min(0.2 * left, 0.03 * left + 2e-5 * (len(proto.variables) + len(proto.constraints)))
        limit = max(0.01, left - reserve)
    run = _search(m, t_call=t_call, unit_f=unit_f, on_progress=on_progress, time_limit_s=limit,
                  num_workers=num_workers, seed=seed, log=log, T_floor=min(T_lo, H), mip_gap=mip_gap, stats=stats)
    solver, name, has, obj_units, bound_units, search_s, rec = (run.solver, run.name, run.has, run.obj_units,
                                                               run.bound_units, run.search_s, run.rec)

    sched, src = None, None
    if has:
        sched, src = _finish_real(extract(solver), "model")
        if obj_units > inc_ms:
            sched, src = _finish_real(incumbent, inc_src)
    else:
        if name == "INFEASIBLE":
            # the start is a valid schedule of makespan H: only a wrong cut can make the model infeasible
            stats["model_infeasible_note"] = "CP-SAT found the model infeasible at the start's makespan: a cut is wrong"
            name = "UNKNOWN"
        sched, src = _finish_real(incumbent, inc_src)  # nothing found in time: the start
    obj_us = None if sched is None else sched.makespan_us
    rec.add(inc=None if obj_us is None else obj_us / unit_f, bound=bound_units)
    return ContinuousOutcome(name, sched, obj_us, None if bound_units is None else bound_units * unit_f,
                             trace=list(rec.rows), build_time_s=build_s, search_time_s=search_s, stats=stats,
                             solution_source=src, **base)


# =============================================================================================== solver hook
def fabric_copy_result(problem: Problem, deadline: float | None, opts):
    """One copy collective on a fabric for :class:`solvers.exact.cpsat.CpSatSolver` (an ``AgResult`` of
    :mod:`solvers.exact.common`): cold (``warm_start`` is not applied: no greedy schedule is used), the
    time-indexed formulation for ``model=time_indexed`` and the interval one otherwise; statuses as the continuous
    model maps them: optimal only when CP-SAT proved it over every hop in exact time, or the schedule meets the
    project's lower bound."""
    from .common import AgResult

    t0 = time.perf_counter()
    left = None if deadline is None else max(0.01, deadline - t0)
    workers = opts.num_workers or max(DEFAULT_WORKERS, opts.num_threads)
    formulation = "time_indexed" if getattr(opts, "model", None) == "time_indexed" else "interval"
    out = solve_fabric(problem, time_limit_s=left, num_workers=workers, seed=opts.seed, mip_gap=opts.mip_gap,
                       log=opts.log, formulation=formulation)
    native = out.native_status
    stats: dict[str, Any] = {f"fabric_{k}": v for k, v in out.stats.items() if isinstance(v, (int, float, str, bool))}
    stats.update(model_status=native, native_status=native, time_unit_us=out.time_unit_us,
                 exact_time=out.exact_time, source=out.solution_source, hinted=False,
                 model_vars=out.stats.get("variables", 0), model_constraints=out.stats.get("constraints", 0),
                 cpsat_model=f"fabric_{formulation}", num_workers=workers)
    complete = bool(out.stats.get("hops_complete", True))
    exact = out.exact_time and complete
    lb_us = out.stats.get("lower_bound_us")
    meets_lb = (out.schedule is not None and lb_us is not None
                and out.schedule.makespan_us <= lb_us * (1 + 1e-9))
    proved = (out.proved_optimal and exact) or meets_lb
    if out.schedule is None:
        status = {"INFEASIBLE": "infeasible", "MODEL_INVALID": "error"}.get(native, "no_solution")
    else:
        status = "optimal" if proved else "feasible"
        if native in ("OPTIMAL", "BOUND_MET") and not proved:
            stats["fabric_note"] = ("optimal only for " + ("the shortest hops (too many simple paths to take all)"
                                                          if not complete else
                                                          f"durations rounded up to {out.time_unit_us:g} µs")
                                    + "; not reported as the problem's optimum")
    stop = {"OPTIMAL": "proved", "BOUND_MET": "bound_met", "TRIVIAL": "bound_met", "INFEASIBLE": "proved",
            "MODEL_INVALID": "error"}.get(native, "time_limit")
    if out.stats.get("gap_limit"):
        stop = "gap_limit"
    if status == "optimal" and stop == "time_limit":
        stop = "proved"      # the re-timed schedule meets the bound
    source = {"model": "model", "list_schedule": "list_schedule", "hint": "warm_start"}.get(
        out.solution_source or "", None if out.schedule is None else "model")
    proof = None
    if status == "optimal":
        proof = "solver" if native == "OPTIMAL" and exact else "lower_bound"
    bound = out.best_bound_us if exact else lb_us
    trace = [(t0 + t, inc, b if exact else None) for t, inc, b in out.trace]
    return AgResult(status, out.schedule, out.objective_us, bound, time.perf_counter() - t0 - out.search_time_s,
                    out.search_time_s, stats, source=source, proof=proof, stop_reason=stop, ten_exact=True,
                    trace=trace, resolution_us=out.time_unit_us, branches=out.stats.get("branches"),
                    scope="continuous")


# =============================================================================================== All-Reduce
def overlap_all_reduce(problem: Problem, schedule: Schedule) -> Schedule:
    """A barrier All-Reduce on a fabric (its Reduce-Scatter rows, op reduce, then its All-Gather rows, op copy)
    with the All-Gather rows re-timed as :func:`solvers.compose.retime` does without switches (per link and
    chunk, ``collective.overlap``): in their order, each row as early as its links allow (after the Reduce-Scatter's
    last use of every link of its route and the earlier All-Gather rows on them) and its sender holds the chunk
    (the owner once the chunk's reduction is complete there; a store-and-forward switch once the incoming copy
    it forwards, first in first out, has arrived). Never later than the barrier."""
    from tacos_bench.schedule import COPY

    from ..compose import chunk_done_at_owner, link_last_use
    from ..fabric_routes import route_links

    topo = problem.topology
    n = topo.num_npus
    links = route_links(topo, schedule)
    is_ag = schedule.op == COPY
    rs = schedule.take(np.flatnonzero(~is_ag))
    free = link_last_use(problem, rs)
    ready = chunk_done_at_owner(problem, rs)
    ag = np.flatnonzero(is_ag)
    chunk, src, dst = schedule.chunk, schedule.src, schedule.dst
    start, end = schedule.start_us, schedule.end_us
    # first in, first out at store-and-forward switches, as in the schedule
    ins: dict[tuple[int, int], list[int]] = {}
    outs: dict[tuple[int, int], list[int]] = {}
    for i in ag.tolist():
        if int(dst[i]) >= n:
            ins.setdefault((int(dst[i]), int(chunk[i])), []).append(i)
        if int(src[i]) >= n:
            outs.setdefault((int(src[i]), int(chunk[i])), []).append(i)
    feeds: dict[int, int] = {}
    for key, o in outs.items():
        a = sorted(ins.get(key, []), key=lambda i: (end[i], i))
        for x, y in zip(a, sorted(o, key=lambda i: (start[i], i))):
            feeds[y] = x
    new_start = start.copy()
    new_end = end.copy()
    have: dict[tuple[int, int], float] = {}
    for i in sorted(ag.tolist(), key=lambda i: (start[i], i)):
        c, u, v = int(chunk[i]), int(src[i]), int(dst[i])
        if u >= n:
            r = new_end[feeds[i]]
        elif u == c % n:             # the owner, once the chunk is reduced there
            r = ready[c]
        else:
            r = have[c, u]
        s = max(r, float(free[links[i]].max()))
        e = s + float(end[i] - start[i])
        free[links[i]] = e
        new_start[i], new_end[i] = s, e
        if v < n:
            have[c, v] = min(have.get((c, v), math.inf), e)
    return Schedule(schedule.chunk, schedule.src, schedule.dst, new_start, new_end, schedule.op,
                    route=schedule.route).sorted()
