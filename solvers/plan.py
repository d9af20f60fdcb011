"""Routing and list scheduling shared by the baseline algorithms.

A baseline is described as a *plan*: single-hop transfers (one chunk over one
directed link) plus zero-time *barriers*, joined by "starts after" edges. The
engine then times the plan on the topology's cost model:

* a transfer becomes ready when all its predecessors have ended (and not before
  its release time);
* every link is a first-come first-served queue: ready transfers are taken in
  order of ready time (ties: ``prio``, then creation order), and each starts at
  ``max(ready, link next-free time)``, so a link carries one chunk at a time.

Logical messages between NPUs that are not neighbours are routed over shortest
paths (by link time) and expanded into store-and-forward hops, see
:func:`send_path`. The simulation is an event loop over a binary heap
(:func:`_simulate`, numba), ``O(T log T)`` for ``T`` transfers; routing is one
Dijkstra per source that is actually used, cached.

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> from tacos_bench import Collective, Problem
>>> p = Problem(ring(4, bidirectional=False), Collective("all_gather", 1, 1))
>>> plan = Plan(p.topology, p.link_time_us, p.num_chunks)
>>> router = Router(p.topology, p.link_time_us)
>>> last = send_path(plan, 0, router.path(0, 2), COPY, NO_PRED)
>>> sched = plan.run()
>>> len(sched), round(sched.makespan_us / float(p.link_time_us[0]), 6)
(2, 2.0)
"""

from __future__ import annotations

import time
from array import array

import numpy as np
from numba import njit

from tacos_bench.errors import SolverError
from tacos_bench.graph import index_pop, index_push, shortest_path_tree
from tacos_bench.schedule import COPY, REDUCE, Schedule
from tacos_bench.topology import Topology

__all__ = ["COPY", "REDUCE", "NO_PRED", "UNREACHED", "MAX_TRANSFERS", "Router", "Plan", "Holdings",
           "send_path", "warmup"]

NO_PRED = -1      # "no predecessor" (also: the NPU holds the chunk from the start)
UNREACHED = -2    # Holdings: the NPU has not been given the chunk yet
# A plan beyond this many transfers would need gigabytes; refuse it with a clear message instead.
MAX_TRANSFERS = 50_000_000


# ------------------------------------------------------------------------------------------- kernels
@njit(cache=True)
def _simulate(link, dur, release, prio, succ_ptr, succ_idx, npred, link_free):
    """Event-driven FCFS list scheduling of a transfer DAG (see module docstring).

    Ready transfers wait in an index heap ordered by (ready time, prio, id); a transfer's ready time
    is final before it enters the heap.
    """
    T = link.shape[0]
    ready = release.copy()
    remaining = npred.copy()
    start = np.full(T, np.nan)
    end = np.full(T, np.nan)
    heap = np.empty(max(T, 1), np.int64)
    pos = np.full(max(T, 1), -1, np.int64)
    size = np.zeros(1, np.int64)
    for i in range(T):
        if remaining[i] == 0:
            index_push(heap, pos, size, ready, prio, i)
    done = 0
    while size[0] > 0:
        i = index_pop(heap, pos, size, ready, prio)
        r = ready[i]
        lk = link[i]
        if lk >= 0:
            s = r if r > link_free[lk] else link_free[lk]
            e = s + dur[i]
            link_free[lk] = e
        else:
            s = r
            e = r
        start[i] = s
        end[i] = e
        done += 1
        for q in range(succ_ptr[i], succ_ptr[i + 1]):
            j = succ_idx[q]
            if e > ready[j]:
                ready[j] = e
            remaining[j] -= 1
            if remaining[j] == 0:
                index_push(heap, pos, size, ready, prio, j)
    return start, end, done


# ------------------------------------------------------------------------------------------- routing
class Router:
    """Shortest paths by link time, one cached Dijkstra tree per source.

    Parameters
    ----------
    topology : Topology
    link_time : array_like
        Per-link weight (µs), in link-id order.
    """

    def __init__(self, topology: Topology, link_time):
        self.topology = topology
        self._ptr = np.ascontiguousarray(topology.out_ptr, dtype=np.int64)
        self._dst = np.ascontiguousarray(topology.dst, dtype=np.int64)
        self._w = np.ascontiguousarray(link_time, dtype=np.float64)
        self._src_l = topology.src.tolist()
        self._trees: dict[int, tuple[np.ndarray, list[int]]] = {}

    def _tree(self, source: int):
        t = self._trees.get(source)
        if t is None:
            dist, pred = shortest_path_tree(self.topology.num_npus, self._ptr, self._dst, self._w, int(source))
            t = (dist, pred.tolist())
            self._trees[source] = t
        return t

    def distances(self, source: int) -> np.ndarray:
        """Shortest-path times (µs) from ``source`` to every NPU."""
        return self._tree(source)[0]

    def path(self, source: int, target: int) -> list[int]:
        """Link ids of a shortest path ``source -> target`` (empty when equal)."""
        if source == target:
            return []
        _, pred = self._tree(source)
        src_l = self._src_l
        out = []
        v = target
        while v != source:
            lk = pred[v]
            if lk < 0:
                raise SolverError(f"no path from NPU {source} to NPU {target}")
            out.append(lk)
            v = src_l[lk]
        out.reverse()
        return out


# ------------------------------------------------------------------------------------------- plans
class Holdings:
    """Which transfer first gives each NPU each chunk (static de-duplication).

    ``get(c, v)`` is the id of the transfer that delivered chunk ``c`` to NPU
    ``v``, :data:`NO_PRED` if ``v`` holds it from the start, or
    :data:`UNREACHED`. Plans consult it so that an NPU that already holds a
    chunk is never sent it again; it forwards its own copy instead.
    """

    def __init__(self, num_npus: int, num_chunks: int, owners_hold: bool = True):
        self.n = n = int(num_npus)
        # a plain list: scalar access from Python loops is several times faster than numpy's
        self.a = a = [UNREACHED] * (n * int(num_chunks))
        if owners_hold:
            for c in range(int(num_chunks)):
                a[c * n + c % n] = NO_PRED

    def get(self, c: int, v: int) -> int:
        return self.a[c * self.n + v]

    def set(self, c: int, v: int, tid: int) -> None:
        self.a[c * self.n + v] = tid


class Plan:
    """A DAG of single-hop transfers and barriers, timed by :meth:`run`.

    Parameters
    ----------
    topology : Topology
    link_time : array_like
        Per-link chunk time (µs).
    num_chunks : int
    """

    def __init__(self, topology: Topology, link_time, num_chunks: int):
        self.topology = topology
        self.link_time = np.asarray(link_time, dtype=np.float64)
        self.num_chunks = int(num_chunks)
        self._chunk = array("q")
        self._link = array("q")
        self._op = array("b")
        self._rel = array("d")
        self._prio = array("q")
        self._pa = array("q")   # predecessor ids ...
        self._pb = array("q")   # ... and their successors
        self._dst = topology.dst.tolist()
        self.engine_time_s = 0.0
        self.start: np.ndarray | None = None
        self.end: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._link)

    def transfer(self, chunk: int, link: int, op: int, preds=(), prio: int = 0, release: float = 0.0) -> int:
        """Add one chunk crossing one link; it starts after every transfer in ``preds`` ended."""
        tid = len(self._link)
        if tid >= MAX_TRANSFERS:
            raise SolverError(f"baseline plan exceeds {MAX_TRANSFERS:,} transfers; use a smaller topology "
                              "or fewer chunks per NPU")
        self._chunk.append(chunk)
        self._link.append(link)
        self._op.append(op)
        self._rel.append(release)
        self._prio.append(prio)
        for p in preds:
            if p >= 0:
                self._pa.append(p)
                self._pb.append(tid)
        return tid

    def barrier(self, preds, prio: int = 0) -> int:
        """A zero-time node that completes when all ``preds`` have ended."""
        return self.transfer(-1, -1, COPY, preds, prio)

    def run(self) -> Schedule:
        """Time the plan; returns the transfers (barriers dropped) as a :class:`Schedule`.

        ``self.start``/``self.end`` then hold the times of every node by id.
        """
        t0 = time.perf_counter()
        T = len(self._link)

        def col(buf, dtype):
            return np.frombuffer(buf, dtype=dtype).copy() if len(buf) else np.zeros(0, dtype)

        link, chunk, op = col(self._link, np.int64), col(self._chunk, np.int64), col(self._op, np.int8)
        rel, prio = col(self._rel, np.float64), col(self._prio, np.int64)
        pa, pb = col(self._pa, np.int64), col(self._pb, np.int64)
        is_x = link >= 0
        dur = np.zeros(T)
        dur[is_x] = self.link_time[link[is_x]]
        order = np.argsort(pa, kind="stable")
        succ_idx = pb[order]
        succ_ptr = np.zeros(T + 1, dtype=np.int64)
        np.cumsum(np.bincount(pa, minlength=T), out=succ_ptr[1:])
        npred = np.bincount(pb, minlength=T).astype(np.int64)
        free = np.zeros(self.topology.num_links)
        start, end, done = _simulate(link, dur, rel, prio, succ_ptr, succ_idx, npred, free)
        if done != T:
            raise SolverError(f"internal error: baseline plan has a dependency cycle "
                              f"({T - done} transfers never start)")
        self.start, self.end = start, end
        topo = self.topology
        lk = link[is_x]
        sched = Schedule(chunk[is_x], topo.src[lk], topo.dst[lk], start[is_x], end[is_x], op[is_x])
        self.engine_time_s += time.perf_counter() - t0
        return sched


_warm: list[float] = []


def warmup() -> float:
    """Load (or compile) the list scheduler's kernel before a clock starts: the seconds it took on the first call
    in a process, 0 on later ones."""
    if _warm:
        return 0.0
    t0 = time.perf_counter()
    topo = Topology.from_edges(2, [(0, 1, 1.0, 1.0), (1, 0, 1.0, 1.0)], name="warmup")
    plan = Plan(topo, np.ones(topo.num_links), 1)
    plan.transfer(0, 0, COPY)
    plan.run()
    _warm.append(time.perf_counter() - t0)
    return _warm[0]


def send_path(plan: Plan, chunk: int, links, op: int, preds, prio: int = 0,
              have: Holdings | None = None, ops=None) -> int:
    """Expand a logical message into store-and-forward hops along ``links``.

    Each hop starts after the previous one ended (the first after ``preds``, an
    int or a sequence of ids). With ``have``, a hop into an NPU that already
    holds the chunk is dropped and the message continues from that NPU's own
    copy (after the transfer that gave it the chunk). ``ops`` optionally gives
    one op per hop. Returns the id of the transfer that put the chunk at the
    last NPU of the path (:data:`NO_PRED` if it held the chunk from the start).
    """
    cur = (int(preds),) if isinstance(preds, (int, np.integer)) else tuple(preds)
    if UNREACHED in cur:
        raise SolverError(f"internal error: a message of chunk {chunk} leaves an NPU that does not hold it")
    last = cur[0] if len(cur) == 1 else NO_PRED
    if have is None:
        for h, lk in enumerate(links):
            last = plan.transfer(chunk, lk, op if ops is None else ops[h], cur, prio)
            cur = (last,)
        return last
    dst_l, held, base = plan._dst, have.a, chunk * have.n
    for h, lk in enumerate(links):
        key = base + dst_l[lk]
        got = held[key]
        if got != UNREACHED:
            cur = (got,)
            last = got
            continue
        last = plan.transfer(chunk, lk, op if ops is None else ops[h], cur, prio)
        held[key] = last
        cur = (last,)
    return last
