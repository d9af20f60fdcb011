"""Failures during a collective: what fails when, and the state a schedule has reached by then.

A :class:`Fault` says that at ``at_us`` some directed links fail, and some NPUs: a failed NPU loses every
link touching it, holds nothing from then on and needs nothing any more (the collective completes among
the survivors). A schedule executed until the fault keeps

* every transfer that ended by ``at_us`` (on any link: it completed before the failure), and
* every transfer in flight at ``at_us`` on a link that survives (it completes);

transfers in flight on a failed link are lost, and transfers not started by ``at_us`` are dropped: the
repair (:mod:`solvers.repair`) re-synthesizes what is left from the state this module computes, on the
links that survive. The verifier (:func:`tacos_bench.verify.verify` with ``fault=``) checks a repaired
schedule against the same rules: no transfer on a failed link ends after ``at_us``, and failed NPUs are
exempt from the postcondition.

Examples
--------
>>> from tacos_bench import Collective, Problem, Schedule
>>> from tacos_bench.topology.generators import ring
>>> p = Problem(ring(4), Collective("all_gather", 1, 1))
>>> t = float(p.link_time_us[0])
>>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (0, 1, 2, t, 2 * t, "copy"), (1, 1, 0, 0.0, t, "copy"),
...                         (1, 0, 3, t, 2 * t, "copy"), (2, 2, 1, 2 * t, 3 * t, "copy")])
>>> st = state_at(p, s, Fault(1.5 * t, links=((0, 3),)))   # 0->1 ended; 1->2 continues; 0->3 is lost
>>> len(st.executed), st.in_flight, st.lost, st.dropped
(3, 1, 1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from .errors import ConfigError, TopologyError
from .problem import Problem
from .schedule import Schedule, row_links
from .topology import FABRIC, POINT_TO_POINT, Topology, network_kind
from .topology.transforms import parse_links, remove_links, remove_npus


# repairability is checked pair by pair (all-pairs reachability) up to this many NPUs
REACH_EXACT_MAX_NPUS = 4096


@dataclass(frozen=True)
class Fault:
    """Links and NPUs failing at ``at_us`` (ids of the problem's topology).

    Parameters
    ----------
    at_us : float
        When the failure happens (µs from the start of the collective).
    links : tuple of (int, int)
        Directed links that fail.
    npus : tuple of int
        NPUs that fail (with every link touching them).
    """

    at_us: float | None
    links: tuple = ()
    npus: tuple = ()
    configured: dict = field(default_factory=dict, compare=False)
    at_fraction: float | None = None

    def __post_init__(self):
        f = self.at_fraction
        if f is not None:
            if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)) or not 0 <= f <= 1:
                raise ConfigError(f"fault.at_fraction must be a number in [0, 1], got {f!r}")
            if self.at_us is not None:
                raise ConfigError("give fault.at_us or fault.at_fraction, not both")
            object.__setattr__(self, "at_fraction", float(f))
        t = self.at_us
        if t is not None or f is None:
            if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(t) or t < 0:
                raise ConfigError(f"fault.at_us must be a non-negative number of µs, got {t!r}")
            object.__setattr__(self, "at_us", float(t))
        object.__setattr__(self, "links", tuple((int(u), int(v)) for u, v in self.links))
        object.__setattr__(self, "npus", tuple(sorted({int(v) for v in self.npus})))
        if not self.links and not self.npus:
            raise ConfigError("fault.at_us is set but nothing fails: give fault.links=[[u,v],...], "
                              "fault.npus=[...] or fault.random_links=K")

    def at(self, healthy_us: float) -> "Fault":
        """This fault with its time fixed (``at_fraction`` of the healthy schedule's time)."""
        if self.at_fraction is None:
            return self
        return replace(self, at_us=self.at_fraction * float(healthy_us), at_fraction=None)

    def failed_link_ids(self, topo: Topology) -> np.ndarray:
        """Ids of every link that fails: the listed ones and every link touching a failed NPU."""
        ids = np.zeros(0, np.int64)
        if self.links:
            pairs = np.asarray(self.links, np.int64).reshape(-1, 2)
            ids = topo.link_ids(pairs[:, 0], pairs[:, 1])
            if np.any(ids < 0):
                u, v = pairs[np.flatnonzero(ids < 0)[0]]
                raise TopologyError(f"fault.links: topology {topo.name!r} has no link {u}->{v}")
        if self.npus:
            dead = np.zeros(topo.num_nodes, bool)
            dead[list(self.npus)] = True
            ids = np.concatenate([ids, np.flatnonzero(dead[topo.src] | dead[topo.dst])])
        return np.unique(ids)

    def surviving_links(self, topo: Topology) -> np.ndarray:
        """Bool mask of the links that survive."""
        keep = np.ones(topo.num_links, bool)
        keep[self.failed_link_ids(topo)] = False
        return keep

    def surviving_topology(self, topo: Topology) -> Topology:
        """The links that survive, NPU ids unchanged (failed NPUs are left without links)."""
        keep = self.surviving_links(topo)
        return Topology(topo.num_npus, topo.src[keep], topo.dst[keep], topo.bw_GiBps[keep], topo.lat_us[keep],
                        name=f"{topo.name}-fault", meta={"kind": "degraded", "parent": topo.name},
                        switches=topo.switches)

    def scratch_topology(self, topo: Topology) -> Topology:
        """The topology a from-scratch run after the failure would use: the failed links and NPUs removed
        (survivors renumbered as :func:`tacos_bench.topology.transforms.remove_npus` does)."""
        out = remove_links(topo, self.links, "fault.links") if self.links else topo
        if self.npus:
            out = without_npus(out, self.npus)
        return out.with_name(topo.name)

    def describe(self) -> str:
        what = []
        if self.links:
            what.append(f"{len(self.links)} link(s)")
        if self.npus:
            what.append(f"NPU(s) {', '.join(map(str, self.npus))}")
        when = (f"{self.at_us:g} µs" if self.at_us is not None
                else f"{self.at_fraction:g} of the healthy time")
        return f"{' and '.join(what)} fail at {when}"


def fault_from_config(cfg: Mapping[str, Any] | None, topo: Topology, seed: int = 0) -> Fault | None:
    """The :class:`Fault` of a ``fault`` config mapping, or ``None``.

    Keys: ``at_us`` or ``at_fraction`` (of the healthy schedule's time), ``links``, ``npus`` and
    ``random_links`` (that many more links drawn from ``seed``: a link and its reverse fail together, and
    a draw that would cut the topology apart is redrawn). Ids are as configured (like ``topo.failed_npus``)
    and are mapped to the topology's ids; a link or NPU that is not part of the topology is an error
    naming it.

    Examples
    --------
    >>> from tacos_bench.topology.generators import mesh2d
    >>> fault_from_config({"at_us": 10, "links": [[0, 1, "both"]]}, mesh2d(2, 2)).links
    ((0, 1), (1, 0))
    >>> fault_from_config({"at_us": None}, mesh2d(2, 2)) is None
    True
    """
    cfg = dict(cfg or {})
    valid = ("at_us", "at_fraction", "links", "npus", "random_links")
    unknown = sorted(set(cfg) - set(valid))
    if unknown:
        raise ConfigError(f"unknown fault setting(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    at, frac = cfg.get("at_us"), cfg.get("at_fraction")
    links = parse_links(cfg.get("links") or [], "fault.links")
    npus = cfg.get("npus") or []
    nrand = cfg.get("random_links") or 0
    if isinstance(nrand, bool) or not isinstance(nrand, (int, np.integer)) or nrand < 0:
        raise ConfigError(f"fault.random_links must be a non-negative integer, got {nrand!r}")
    if at is None and frac is None:
        if links.size or npus or nrand:
            raise ConfigError("fault.links/fault.npus/fault.random_links need fault.at_us or fault.at_fraction "
                              "(when they fail)")
        return None
    orig = topo.meta.get("original_ids")
    to_id = ({int(o): i for i, o in enumerate(orig)} if orig is not None
             else {i: i for i in range(topo.num_npus)})
    def mapped(v, what, switches=False):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ConfigError(f"{what}: NPU id {v!r} is not an integer")
        # a fabric's switches keep their ids (a failed switch port is the failed link between NPU and switch)
        if switches and orig is None and topo.num_npus <= int(v) < topo.num_nodes:
            return int(v)
        if int(v) not in to_id:
            word, a_word = _ID_WORDS[topo.network_kind if switches else POINT_TO_POINT]
            raise TopologyError(f"{what}: {word} {v} is not {a_word} of {topo.name} (failed, outside the subset "
                                "or out of range)")
        return to_id[int(v)]

    pairs = tuple((mapped(u, "fault.links", True), mapped(v, "fault.links", True)) for u, v in links.tolist())
    if isinstance(npus, (str, bytes)) or not hasattr(npus, "__iter__"):
        raise ConfigError(f"fault.npus must be a list of NPU ids, got {npus!r}")
    dead = tuple(mapped(v, "fault.npus") for v in npus)
    if len(set(dead)) >= topo.num_npus:
        raise TopologyError("fault.npus lists every NPU: nothing would remain")
    if pairs:
        Fault(0.0, pairs, dead).failed_link_ids(topo)  # every listed link exists
    if nrand:
        pairs = pairs + random_links(topo, int(nrand), seed, pairs, dead)
    return Fault(at, pairs, dead, configured={"links": links.tolist(), "npus": [int(v) for v in npus],
                                              "random_links": int(nrand)}, at_fraction=frac)


# what a fault's link ends are called: on a fabric a link may end at a switch (a switch port)
_ID_WORDS = {POINT_TO_POINT: ("NPU", "an NPU"), FABRIC: ("node", "a node")}


def without_npus(topo: Topology, npus) -> Topology:
    """``topo`` without the NPUs ``npus`` (renumbered as
    :func:`tacos_bench.topology.transforms.remove_npus` does); on a switched fabric the switches stay
    (:func:`tacos_bench.topology.named.regroup_npus`)."""
    return _WITHOUT_NPUS[topo.network_kind](topo, npus)


def _fabric_without_npus(topo: Topology, npus) -> Topology:
    """:func:`without_npus` on a switched fabric: the NPUs regrouped, the switches kept."""
    from .topology.named import regroup_npus

    roles = np.ones(topo.num_npus, np.int64)   # 1: a member NPU, 0: dropped (regroup_npus' roles)
    roles[np.asarray(list(npus), np.int64)] = 0
    removed = sorted({int(v) for v in npus})
    return regroup_npus(topo, roles, f"{topo.name}-minus{len(removed)}", removed_npus=removed)


_WITHOUT_NPUS = {POINT_TO_POINT: remove_npus, FABRIC: _fabric_without_npus}


def random_links(topo: Topology, count: int, seed: int, failed=(), dead=()) -> tuple:
    """``count`` random links (each with its reverse, when it exists) whose failure, on top of the links
    ``failed`` and the NPUs ``dead``, leaves the NPUs that survive strongly connected; drawn from ``seed``.

    >>> from tacos_bench.topology.generators import torus2d
    >>> random_links(torus2d(4, 4), 2, seed=3) == random_links(torus2d(4, 4), 2, seed=3)
    True
    """
    rng = np.random.default_rng([int(seed), 0xFA17])
    chosen, dead = list(failed), list(dead)
    out: list = []
    tries = 0
    while _groups(out) < count:
        if tries > 100 * max(count, 1):
            raise TopologyError(f"fault.random_links={count}: no more links can fail without cutting "
                                f"{topo.name} apart")
        tries += 1
        l = int(rng.integers(topo.num_links))
        u, v = int(topo.src[l]), int(topo.dst[l])
        pair = [(u, v)] + ([(v, u)] if topo.has_link(v, u) else [])
        if any(p in chosen or p in out for p in pair) or u in dead or v in dead:
            continue
        sub = Fault(0.0, tuple(chosen + out + pair), tuple(dead)).surviving_topology(topo)
        part = without_npus(sub, dead) if dead else sub
        try:
            part.check_strongly_connected()
        except TopologyError:
            continue
        out += pair
    return tuple(out)


def _groups(pairs: list) -> int:
    """Links counted once per direction pair."""
    return len({tuple(sorted(p)) for p in pairs})


@dataclass
class FaultState:
    """What a schedule has done when a fault strikes (:func:`state_at`).

    ``executed`` are the transfers that stay in the executed schedule; ``hold_npu/hold_chunk/hold_time``
    list every (NPU, chunk) held by then or arriving on an in-flight transfer that survives, with the time
    it is (or will be) held, failed NPUs excluded; ``link_free`` is when each link can start something new
    (``inf`` for failed links).
    """

    executed: Schedule
    hold_npu: np.ndarray
    hold_chunk: np.ndarray
    hold_time: np.ndarray
    link_free: np.ndarray
    alive: np.ndarray
    lost: int
    dropped: int
    in_flight: int


def row_link_pairs(topo: Topology, schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """``(row, link)``: every link each row of ``schedule`` holds (one per row, or its route's on a fabric)."""
    return _ROW_LINKS[network_kind(topo, schedule)](topo, schedule)


def _one_link_per_row(topo: Topology, schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(len(schedule)), topo.link_ids(schedule.src, schedule.dst)


def _route_links(topo: Topology, schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    links = row_links(topo, schedule)
    row = np.repeat(np.arange(len(schedule)), [x.size for x in links])
    return row, (np.concatenate(links) if links else np.zeros(0, np.int64))


# the links a row holds, per network kind (tacos_bench.topology.network_kind of the topology and the schedule)
_ROW_LINKS = {POINT_TO_POINT: _one_link_per_row, FABRIC: _route_links}


def rows_crossing(schedule: Schedule, row: np.ndarray, link: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """Per row of ``schedule``: it holds a link that ``failed`` (a per-link mask) marks."""
    out = np.zeros(len(schedule), bool)
    out[row[failed[link]]] = True
    return out


def state_at(problem: Problem, schedule: Schedule, fault: Fault) -> FaultState:
    """The state ``schedule`` (valid on the healthy ``problem``) reaches at ``fault.at_us``."""
    if problem.collective.reduces:
        raise ConfigError(f"a {problem.kind} has no forward state to repair from (it is synthesized "
                          "time-reversed); faults work with all_gather, broadcast, gather, scatter, all_to_all")
    topo = problem.topology
    T = fault.at_us
    tol = 1e-9 * max(1.0, T)
    failed = ~fault.surviving_links(topo)
    ended = schedule.end_us <= T + tol
    flying = (schedule.start_us < T - tol) & ~ended
    # a row holds every link of its route; a copy that reached a switch and was not sent on by the fault is
    # lost with the switch's buffer (the switch holds no data of its own)
    row, link = row_link_pairs(topo, schedule)
    on_failed = rows_crossing(schedule, row, link, failed)
    keep = ended | (flying & ~on_failed)
    executed = schedule.take(np.flatnonzero(keep))
    alive = np.ones(problem.num_npus, bool)
    alive[list(fault.npus)] = False
    C = problem.num_chunks
    src = np.asarray(problem.sources, np.int64)
    c0 = np.arange(C, dtype=np.int64)
    to_npu = executed.dst < problem.num_npus
    hv = np.concatenate([src, executed.dst[to_npu].astype(np.int64)])
    hc = np.concatenate([c0, executed.chunk[to_npu].astype(np.int64)])
    ht = np.concatenate([np.zeros(C), executed.end_us[to_npu]])
    ok = alive[hv]
    hv, hc, ht = hv[ok], hc[ok], ht[ok]
    # earliest time per (NPU, chunk)
    key = hv * C + hc
    order = np.lexsort((ht, key))
    first = np.ones(order.size, bool)
    first[1:] = key[order][1:] != key[order][:-1]
    pick = order[first]
    free = np.full(topo.num_links, T)
    kept = keep[row]
    if kept.any():
        np.maximum.at(free, link[kept], schedule.end_us[row[kept]])
    free[failed] = np.inf
    return FaultState(executed, hv[pick], hc[pick], ht[pick], free, alive,
                      lost=int(np.sum(flying & on_failed)), dropped=int(np.sum(~keep & ~(flying & on_failed))),
                      in_flight=int(np.sum(flying & ~on_failed)))


def check_repairable(problem: Problem, state: FaultState, fault: Fault) -> None:
    """Raise :class:`TopologyError` naming the problem when the survivors cannot complete the collective:
    some chunk a survivor needs has no surviving copy, or the surviving links cut survivors apart."""
    topo = problem.topology
    C = problem.num_chunks
    alive = state.alive
    dest = np.asarray(problem.destinations, np.int64)
    needed = (dest < 0) | alive[np.maximum(dest, 0)]
    held = np.zeros(C, bool)
    held[state.hold_chunk] = True
    lost = np.flatnonzero(needed & ~held)
    if lost.size:
        raise TopologyError(f"{fault.describe()}: chunk(s) {', '.join(map(str, lost[:5].tolist()))}"
                            f"{' ...' if lost.size > 5 else ''} have no copy left on a surviving NPU")
    sub = fault.surviving_topology(topo)
    part = without_npus(sub, np.flatnonzero(~alive)) if (~alive).any() else sub
    try:
        part.check_strongly_connected()
        return  # every survivor reaches every other: each held chunk can reach whoever needs it
    except TopologyError:
        pass  # some survivors are cut off from others: look at what is still missing, pair by pair
    if topo.num_npus > REACH_EXACT_MAX_NPUS:
        # all-pairs reachability would not fit: ask for the survivors to stay strongly connected
        raise TopologyError(f"{fault.describe()}: the surviving links cut the surviving NPUs apart")
    from .graph import hop_distances

    n = topo.num_npus   # a fabric's paths cross its switches: search every node, keep the NPUs
    reach = hop_distances(topo.num_nodes, np.asarray(sub.out_ptr, np.int64), np.asarray(sub.dst, np.int64))[:n, :n] >= 0
    hv, hc = state.hold_npu, state.hold_chunk
    # every (NPU, chunk) still missing must be reachable from some surviving holder of the chunk
    every = dest < 0
    can = np.zeros((C, topo.num_npus), bool) if every.any() else None
    if can is not None:
        m = every[hc]
        np.logical_or.at(can, hc[m], reach[hv[m]])
        miss = np.argwhere(every[:, None] & ~can & alive[None, :])
        if miss.size:
            c, v = miss[0]
            raise TopologyError(f"{fault.describe()}: NPU {v} can no longer receive chunk {c} from any NPU that "
                                "holds it over the surviving links")
    one = ~every & needed
    if one.any():
        ok = np.zeros(C, bool)
        m = one[hc]
        np.logical_or.at(ok, hc[m], reach[hv[m], dest[hc[m]]])
        bad = np.flatnonzero(one & ~ok)
        if bad.size:
            c = int(bad[0])
            raise TopologyError(f"{fault.describe()}: chunk {c} can no longer reach NPU {int(dest[c])} over the "
                                "surviving links")


# the repair bound (repair_bound_us) runs one shortest-path search per surviving NPU up to this many NPUs, and
# looks at (holder, NPU) pairs in blocks up to this many in all
REPAIR_BOUND_MAX_NPUS = 2048
REPAIR_BOUND_MAX_PAIRS = 1 << 29


def repair_bound_us(problem: Problem, fault: Fault, state: FaultState) -> float | None:
    """A lower bound on the collective time of any repair from ``state`` (µs; ``None`` beyond
    ``REPAIR_BOUND_MAX_NPUS`` NPUs or ``REPAIR_BOUND_MAX_PAIRS`` holder-NPU pairs).

    What was executed stays (its last end counts); every (NPU, chunk) pair a survivor still needs is served
    by some surviving copy, which cannot leave its holder before the fault (or before an in-flight copy
    arrives) and then takes at least the shortest path time over the surviving links (not on a switched
    fabric, where a cut-through path is faster than its links one by one: there, each survivor's missing
    chunks through its surviving in-links only). A repair is judged
    against this bound, which the executed prefix may push well above a fresh synthesis on the degraded
    topology (a gather whose root had received little by the fault).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(4), Collective("broadcast", 1, 1))
    >>> t = float(p.link_time_us[0])   # every link of this ring takes t
    >>> s = Schedule.from_rows([(0, 0, 1, 0, t, "copy"), (0, 0, 3, 0, t, "copy"), (0, 1, 2, t, 2 * t, "copy")])
    >>> f = Fault(1.5 * t, links=((1, 2), (2, 1)))   # 1->2 fails in flight: NPU 2 needs the chunk from 3
    >>> repair_bound_us(p, f, state_at(p, s, f)) == 2.5 * t
    True
    """
    from .cost import link_time_us
    from .graph import shortest_path_tree

    topo = problem.topology
    N, C = problem.num_npus, problem.num_chunks
    if N > REPAIR_BOUND_MAX_NPUS:
        return None
    done = float(state.executed.end_us.max()) if len(state.executed) else 0.0
    if topo.is_fabric:
        # a path through cut-through switches is faster than the sum of its links' times: the ingress term only
        return max(done, _ingress_after(problem, fault, state))
    sub = fault.surviving_topology(topo)
    w = np.asarray(link_time_us(sub.bw_GiBps, sub.lat_us, problem.chunk_bytes), np.float64)
    out_ptr, dst_l = np.asarray(sub.out_ptr, np.int64), np.asarray(sub.dst, np.int64)
    alive = np.asarray(state.alive, bool)
    hv = np.asarray(state.hold_npu, np.int64)
    hc = np.asarray(state.hold_chunk, np.int64)
    start = np.maximum(np.asarray(state.hold_time, np.float64), fault.at_us)
    D = np.full((N, N), np.inf)
    for u in np.unique(hv):
        D[u] = shortest_path_tree(N, out_ptr, dst_l, w, int(u))[0]
    dest = np.asarray(problem.destinations, np.int64)
    # a held pair counts from its own arrival; its shortest path from itself is 0 at its start time
    own = np.asarray(state.hold_time, np.float64)
    uni = dest[hc] >= 0
    best = 0.0
    if uni.any():
        d = dest[hc[uni]]
        arr = np.where(hv[uni] == d, own[uni], start[uni] + D[hv[uni], d])
        first = np.full(C, np.inf)
        np.minimum.at(first, hc[uni], arr)
        need = (dest >= 0) & alive[np.maximum(dest, 0)]
        best = max(best, float(first[need].max()) if need.any() else 0.0)
    multi = np.flatnonzero(~uni)
    if multi.size:
        if multi.size * N > REPAIR_BOUND_MAX_PAIRS:
            return None
        order = multi[np.argsort(hc[multi], kind="stable")]
        chunks, cut = np.unique(hc[order], return_index=True)
        block = max(1, (1 << 22) // N)
        first = np.full((chunks.size, N), np.inf)
        for b0 in range(0, chunks.size, block):
            b1 = min(chunks.size, b0 + block)
            lo, hi = cut[b0], cut[b1] if b1 < chunks.size else order.size
            rows = order[lo:hi]
            arr = start[rows, None] + D[hv[rows]]
            arr[np.arange(rows.size), hv[rows]] = own[rows]
            first[b0:b1] = np.minimum.reduceat(arr, cut[b0:b1] - lo, axis=0)
        best = max(best, float(first[:, alive].max()) if alive.any() else 0.0)
    return max(best, done, _ingress_after(problem, fault, state))


def _ingress_after(problem: Problem, fault: Fault, state: FaultState) -> float:
    """Each survivor's missing chunks arrive one per transfer over its surviving in-links, each free from the
    fault (or its in-flight transfer's end) on: the m-th earliest end among those links' back-to-back slots."""
    N = problem.num_npus
    alive = np.asarray(state.alive, bool)
    dest = np.asarray(problem.destinations, np.int64)
    hv, hc = np.asarray(state.hold_npu, np.int64), np.asarray(state.hold_chunk, np.int64)
    multi = dest < 0
    held_multi = np.bincount(hv[multi[hc]], minlength=N)
    own = (dest[hc] == hv) & ~multi[hc]
    missing = np.where(alive, int(multi.sum()) - held_multi, 0)
    uni_need = np.bincount(dest[~multi], minlength=N) - np.bincount(hv[own], minlength=N)
    missing = missing + np.where(alive, uni_need, 0)
    topo = problem.topology
    t = np.asarray(problem.link_time_us, np.float64)
    free = np.maximum(np.asarray(state.link_free, np.float64), fault.at_us)
    best = 0.0
    in_ptr, in_order = np.asarray(topo.in_ptr), np.asarray(topo.in_order)
    for v in np.flatnonzero(missing > 0):
        links = in_order[in_ptr[v]:in_ptr[v + 1]]
        links = links[np.isfinite(free[links])]
        m = int(missing[v])
        if not links.size:
            return np.inf
        ends = (free[links, None] + t[links, None] * np.arange(1, m + 1)[None, :]).ravel()
        best = max(best, float(np.partition(ends, m - 1)[m - 1]))
    return best
