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
    # links that slow down at the fault instead of failing: (u, v, factor), the bandwidth times factor from at_us on
    slow: tuple = ()

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
        slow = []
        for item in self.slow:
            u, v, f = item
            if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)) or not 0 < f <= 1:
                raise ConfigError(f"a slow link's factor must be a number in (0, 1], got {f!r}")
            slow.append((int(u), int(v), float(f)))
        object.__setattr__(self, "slow", tuple(slow))
        if not self.links and not self.npus and not self.slow:
            raise ConfigError("fault.at_us is set but nothing fails: give fault.links=[[u,v],...], "
                              "fault.npus=[...], fault.random_links=K, or links that slow down there "
                              "(fault.slow_links, fault.slow_npus)")

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

    def slow_factors(self, topo: Topology) -> np.ndarray:
        """Per link of ``topo``, the share of its bandwidth left after the fault (1 where it does not slow)."""
        f = np.ones(topo.num_links)
        if self.slow:
            pairs = np.asarray([(u, v) for u, v, _ in self.slow], np.int64)
            ids = topo.link_ids(pairs[:, 0], pairs[:, 1])
            if np.any(ids < 0):
                u, v = pairs[np.flatnonzero(ids < 0)[0]]
                raise TopologyError(f"fault.slow_links: topology {topo.name!r} has no link {u}->{v}")
            np.multiply.at(f, ids, [x for _, _, x in self.slow])
        return f

    def slowed(self, problem: Problem) -> Problem:
        """``problem`` on the network as it is after the fault: the slow links at their new bandwidth (the same
        link ids; failed links are still there: :meth:`surviving_links` masks them)."""
        if not self.slow:
            return problem
        return Problem(self._slowed_topology(problem.topology), problem.collective)

    def _slowed_topology(self, topo: Topology) -> Topology:
        """``topo`` with the slow links at their new bandwidth (:func:`tacos_bench.topology.transforms.slow_links`)."""
        from .topology.transforms import slow_links

        return slow_links(topo, [list(x) for x in self.slow]) if self.slow else topo

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
        topo = self._slowed_topology(topo)
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
        events = [f"{' and '.join(what)} fail"] if what else []
        if self.slow:
            events.append(f"{len(self.slow)} link(s) slow down")
        when = (f"{self.at_us:g} µs" if self.at_us is not None
                else f"{self.at_fraction:g} of the healthy time")
        return f"{' and '.join(events)} at {when}"


def least_end_us(problem: Problem, fault: Fault, schedule: Schedule, row: np.ndarray, link: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(slowed, end)``: per row of ``schedule`` (``row[k]`` holds ``link[k]``), whether it holds a link that slows
    down at ``fault.at_us``, and the earliest it can end under the slow-down model.

    The model: a row sends the chunk at the bandwidth of the slowest link it holds, then pays its links'
    latencies. A slow-down changes that bandwidth from the fault on: a row that started before serializes the
    share of the chunk it has not sent yet at the new rate, one that starts after sends all of it at the new rate,
    and one that had sent the whole chunk before the fault only has its latency left (latencies do not change).
    """
    from .cost import link_time_us

    topo, T = problem.topology, float(fault.at_us)
    n = len(schedule)
    f = fault.slow_factors(topo)
    bw0 = np.full(n, np.inf)
    bw1 = np.full(n, np.inf)
    lat = np.zeros(n)
    np.minimum.at(bw0, row, topo.bw_GiBps[link])
    np.minimum.at(bw1, row, topo.bw_GiBps[link] * f[link])
    np.add.at(lat, row, topo.lat_us[link])
    slowed = np.zeros(n, bool)
    slowed[row[f[link] < 1]] = True
    ser0 = link_time_us(bw0, 0.0, problem.chunk_bytes)
    ser1 = link_time_us(bw1, 0.0, problem.chunk_bytes)
    s = schedule.start_us
    sent = np.clip((T - s) / ser0, 0.0, 1.0)           # the share serialized before the fault
    end = np.where(s >= T, s + ser1, np.where(sent >= 1.0, s + ser0, T + (1.0 - sent) * ser1)) + lat
    return slowed, end


def slowed_topology(cfg: Mapping[str, Any] | None, topo: Topology) -> Topology:
    """``topo`` with the ``fault.slow_links`` (``[[u, v, factor], ...]``, ``[u, v, factor, "both"]``) and
    ``fault.slow_npus`` (``[[npu, factor], ...]``: every link of the NPU; ``[npu, factor, "nics"]``: its
    scale-out links) slowed from the start: bandwidth times ``factor``
    (:func:`tacos_bench.topology.transforms.slow_links`). The whole run (bounds, synthesis, verifier) then sees
    the degraded network. With ``fault.at_us`` / ``fault.at_fraction`` they slow down at that time instead
    (:func:`fault_from_config`, :func:`least_end_us`): ``topo`` is returned as it is.

    Examples
    --------
    >>> from tacos_bench.topology.generators import mesh2d
    >>> t = slowed_topology({"slow_npus": [[0, 0.5]]}, mesh2d(2, 2, bw=50.0))
    >>> sorted(set(t.bw_GiBps.tolist()))
    [25.0, 50.0]
    """
    from .topology.transforms import slow_links

    cfg = dict(cfg or {})
    slow, npus = cfg.get("slow_links") or [], cfg.get("slow_npus") or []
    if not slow and not npus:
        return topo
    if cfg.get("at_us") is not None or cfg.get("at_fraction") is not None:
        return topo   # they slow down at the fault's time (fault_from_config): the run starts on the healthy network
    if topo.meta.get("original_ids") is not None:
        raise ConfigError("fault.slow_links / fault.slow_npus with renumbered NPUs (topo.failed_npus or "
                          "topo.subset) are not supported: give them on the topology before NPUs are removed")
    return slow_links(topo, slow, npus=npus)


def fault_from_config(cfg: Mapping[str, Any] | None, topo: Topology, seed: int = 0) -> Fault | None:
    """The :class:`Fault` of a ``fault`` config mapping, or ``None``.

    Keys: ``at_us`` or ``at_fraction`` (of the healthy schedule's time), ``links``, ``npus``, ``slow_links`` /
    ``slow_npus`` (they slow down at that time: :func:`least_end_us`) and ``random_links`` (that many more links drawn from ``seed``: a link and its reverse fail together, and
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
    # slow_links / slow_npus apply from the start (slowed_topology): valid here, not part of the Fault
    valid = ("at_us", "at_fraction", "links", "npus", "random_links", "slow_links", "slow_npus")
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
    slow = ()
    if cfg.get("slow_links") or cfg.get("slow_npus"):
        from .topology.transforms import slow_links

        if orig is not None:
            raise ConfigError("fault.slow_links / fault.slow_npus with renumbered NPUs (topo.failed_npus or "
                              "topo.subset) are not supported: give them on the topology before NPUs are removed")
        slowed = slow_links(topo, cfg.get("slow_links") or [], npus=cfg.get("slow_npus") or [])
        slow = tuple(tuple(x) for x in slowed.meta["slow_links"])
    return Fault(at, pairs, dead, configured={"links": links.tolist(), "npus": [int(v) for v in npus],
                                              "random_links": int(nrand)}, at_fraction=frac, slow=slow)


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
    (``inf`` for failed links). For a reducing collective the holds are of *whole* chunks (every contribution),
    and ``pieces`` maps each chunk still to be reduced at its collector to the partial sums still to combine:
    ``(npu, contributions bitmask, ready time)`` of every NPU that holds some and has not sent them on
    (:func:`reduce_pieces`); they are disjoint and together hold every contribution.
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
    pieces: dict | None = None


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
    if problem.collective.reduces and (fault.npus or problem.collective.general):
        raise ConfigError(f"a {problem.kind} is repaired after links fail or slow down, not after NPUs fail (their "
                          "contributions, and the partial sums holding them, are lost with them) nor on a chunk "
                          "table; give fault.links or fault.slow_links")
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
    if fault.slow:
        # a transfer in flight on a link that slows down goes on at the new rate (least_end_us)
        slowed, least = least_end_us(problem, fault, schedule, row, link)
        late = flying & ~on_failed & slowed
        if late.any():
            schedule = Schedule(schedule.chunk, schedule.src, schedule.dst, schedule.start_us,
                                np.where(late, np.maximum(schedule.end_us, least), schedule.end_us), schedule.op,
                                route=schedule.route)
    executed = schedule.take(np.flatnonzero(keep))
    alive = np.ones(problem.num_npus, bool)
    alive[list(fault.npus)] = False
    C = problem.num_chunks
    pieces = None
    if problem.collective.reduces:
        pieces, hv, hc, ht = reduce_pieces(problem, executed)
    else:
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
                      in_flight=int(np.sum(flying & ~on_failed)), pieces=pieces)


def collector_of(problem: Problem) -> np.ndarray:
    """Per chunk of a reducing collective, the NPU its reduction completes at: its one destination, or for an
    All-Reduce the owner ``c mod N`` its Reduce-Scatter phase reduces into (:mod:`solvers.compose`)."""
    d = np.asarray(problem.destinations, np.int64)
    return np.where(d >= 0, d, problem.collective.owner(np.arange(problem.num_chunks), problem.num_npus))


def reduce_pieces(problem: Problem, executed: Schedule) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """The state of a reducing collective after ``executed`` (replayed as the verifier does): per chunk not yet
    whole at its collector (:func:`collector_of`; for an All-Reduce, at any NPU: a reduction may complete at
    another NPU, e.g. ``greedy_plus``'s group trees), its pieces ``[(npu, bitmask, ready), ...]``: the partial sums
    of the NPUs that hold some and sent none of them on (an NPU's reduce of a chunk sends everything it holds);
    and ``(npu, chunk, time)`` of every whole chunk held. Raises :class:`ConfigError` when the pieces are not a
    partition of the contributions (the schedule relayed partial sums in a way a resume cannot take apart)."""
    from .schedule import REDUCE

    n, C = problem.num_npus, problem.num_chunks
    full = (1 << n) - 1
    state = [[1 << v] * C for v in range(n)]
    ready = np.zeros((n, C))
    sent = np.zeros((n, C), bool)
    T = len(executed)
    if T:
        tol = 1e-9 * max(1.0, executed.makespan_us)
        payload = [0] * T
        chunk, src, dst, op = (executed.chunk.tolist(), executed.src.tolist(), executed.dst.tolist(),
                               executed.op.tolist())
        for e in executed.event_order(tol).tolist():
            if e >= T:
                i = e - T
                payload[i] = state[src[i]][chunk[i]] if src[i] < n else 0
                if src[i] < n and op[i] == REDUCE:
                    sent[src[i], chunk[i]] = True
                continue
            i, v, c = e, dst[e], chunk[e]
            if v >= n:
                continue
            state[v][c] = payload[i] if op[i] != REDUCE else state[v][c] | payload[i]
            ready[v, c] = max(ready[v, c], float(executed.end_us[i]))
    col = collector_of(problem)
    every = np.asarray(problem.destinations, np.int64) < 0   # All-Reduce: whole anywhere is reduced
    pieces: dict = {}
    hv, hc, ht = [], [], []
    for c in range(C):
        whole = False
        for v in range(n):
            if state[v][c] == full:
                hv.append(v), hc.append(c), ht.append(ready[v, c])
                whole = True
        if state[int(col[c])][c] == full or (whole and every[c]):
            continue
        own = [(v, state[v][c], float(ready[v, c])) for v in range(n) if not sent[v, c] and state[v][c] != full]
        union = 0
        for _, m, _ in own:
            if union & m:
                raise ConfigError(f"chunk {c}: the partial sums held at the fault overlap; this schedule cannot be "
                                  "resumed")
            union |= m
        if union != full:
            raise ConfigError(f"chunk {c}: some contribution is held only by NPUs that sent it on to a transfer "
                              "that was lost; this schedule cannot be resumed")
        pieces[c] = own
    return (pieces, np.asarray(hv, np.int64), np.asarray(hc, np.int64), np.asarray(ht, np.float64))


def check_repairable(problem: Problem, state: FaultState, fault: Fault) -> None:
    """Raise :class:`TopologyError` naming the problem when the survivors cannot complete the collective:
    some chunk a survivor needs has no surviving copy, or the surviving links cut survivors apart."""
    topo = problem.topology
    C = problem.num_chunks
    alive = state.alive
    dest = np.asarray(problem.destinations, np.int64)
    needed = (dest < 0) | alive[np.maximum(dest, 0)]
    if C and not needed.any():
        # a Gather whose root fails: every chunk is bound for it and what it gathered is lost with it; a
        # collective with no surviving destination has no result to repair (a Broadcast or Scatter from a
        # failed root goes on from the copies that survive)
        who = (f"NPU {problem.collective.root}, the {problem.kind}'s root," if problem.collective.rooted
               else "every destination")
        raise TopologyError(f"{fault.describe()}: {who} fails, so no surviving NPU is to receive anything and "
                            "what was delivered is lost with it: nothing to repair")
    held = np.zeros(C, bool)
    held[state.hold_chunk] = True
    if state.pieces is not None:
        # a chunk still being reduced is whole once its pieces meet at its collector (the plan finds the way)
        held[list(state.pieces)] = True
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
    if state.pieces:
        cs = np.asarray(sorted(state.pieces), np.int64)
        hv, hc = np.concatenate([hv, collector_of(problem)[cs]]), np.concatenate([hc, cs])
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


# the repair bound lives with the other bounds (tacos_bench.bounds.repair); imported on first use so that this
# module stays as light as it was (the bounds bring numba in)
def __getattr__(name: str):
    """The names that moved to :mod:`tacos_bench.bounds` (:func:`tacos_bench.bounds.repair_bound_us`), still
    importable from here."""
    if name == "repair_bound_us":
        from .bounds import repair_bound_us

        return repair_bound_us
    if name in ("REPAIR_BOUND_MAX_NPUS", "REPAIR_BOUND_MAX_PAIRS"):
        from .bounds import repair

        return getattr(repair, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
