"""All-Reduce by trees over switch groups (``greedy_plus`` candidate ``group_trees``).

On a fabric whose NPUs split into switch groups of one size (a DGX-like node: GPUs on an NVSwitch that reduces
and multicasts), every chunk is reduced inside each group by the switch, combined between groups over their
outside links (on a rail cluster the NICs), and multicast inside each group again. Each chunk crosses every
group's cut once each way: Reduce-Scatter then All-Gather with its owner in a group makes the owner's group
take the other groups' parts in and send the sum out in two phases, on the owner's links alone. Here the
crossings of a chunk use whichever position (rail) frees first, so a cluster whose rails, or whose nodes, run at
unequal speeds spreads its chunks over them by their speed.

For each chunk a tree over the groups:

* *star* at a root group ``A``: every other group reduces the chunk to one member, which sends it to the member
  of ``A`` at the same position (the rail); ``A`` reduces what landed with its own part, multicasts the sum
  inside, and sends it back to each other group, which multicasts it inside;
* *through the slow group* (when exactly one group's cut is slower than the others', e.g. a node whose NICs run
  at half speed): the other groups first combine theirs at a group ``h`` as above, ``h`` sends that sum to the
  slow group, which adds its own part and sends the whole chunk back to ``h``, which spreads it.

The slow group's NICs carry each chunk once out and once in either way. On each of its NICs the chunks go in
a planned order: the stars' exports first and the other kind's exports last; its imports the other way round,
so both directions of every slow NIC are busy from the first chunk to the last (docs/faults.md).

Operations are placed by a list schedule with insertion: in a priority order (:data:`PRIORITIES`, :func:`_run`)
as their predecessors are placed, each at the earliest time its links are idle for its duration, at the position
whose links free first where the plan leaves it open. Cut-through switches only. Where this stands (docs/faults.md):
one ``dgx_h100x4`` node's NICs at half speed, 1.104x the All-Reduce bound from the best variant, 1.080x with the
roots searched (:func:`search_roots`); the healthy NICs then carry as much as the slow ones (the slow transfers
hold them at the slow rate).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.fabrics import rail_cluster
>>> from tacos_bench.verify import verify
>>> t = rail_cluster(3, 4, nvlink_GiBps=400.0, nic_GiBps=50.0, nvswitch_multicast=True, nvswitch_reduce=True)
>>> p = Problem(t, Collective("all_reduce", 1, 64))
>>> verify(p, group_trees_all_reduce(p)).valid
True
"""

from __future__ import annotations

import bisect
import heapq
from typing import Callable, Sequence

import numpy as np

from tacos_bench.collective import ALL_REDUCE
from tacos_bench.cost import link_time_us
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule
from tacos_bench.topology import CUT_THROUGH, Topology

__all__ = ["PRIORITIES", "ROOTS", "group_layout", "group_trees_all_reduce", "variants_for"]

_REL = 1e-9


def group_layout(topo: Topology) -> tuple[list[int], list[list[int]]] | str:
    """The switch groups of the trees: ``(switches, members)``, for the first partition of the NPUs into switch
    groups of one size whose switches reduce and multicast and whose members can be lined up in positions, each
    position's members joined both ways through one switch outside (a rail); or why there is none. The first
    group's members are in id order and every other group's lined up with them by those switches (the lowest id
    where several qualify), so relabelled NPUs give the same layout up to the labels. The last answer is kept
    for the same topology (the candidate, its variants and the root search each ask)."""
    if _LAST[0] is not topo:
        _LAST[:] = [topo, _layout(topo)]
    return _LAST[1]


_LAST: list = [None, None]


def _layout(topo: Topology) -> tuple[list[int], list[list[int]]] | str:
    from tacos_bench.bounds.fabric import _partitions

    if not topo.is_fabric:
        return "point-to-point links: no switch groups"
    if any(topo.switch(s).mode != CUT_THROUGH for s in range(topo.num_npus, topo.num_nodes)):
        return "a store-and-forward switch"
    n = topo.num_npus
    hub = None
    for family in _partitions(topo):
        sw = [int(X[0]) for X in family]
        if sw[0] < n or not all(topo.switch(s).reduce and topo.switch(s).multicast for s in sw):
            continue
        hub = _rail_switches(topo) if hub is None else hub
        mem = _lined_up([sorted(int(v) for v in X[1:]) for X in family], hub)
        if mem is not None:
            return sw, mem
    return "no switch groups of one size whose switches reduce and multicast, joined position by position"


def _lined_up(groups: list[list[int]], hub: np.ndarray) -> list[list[int]] | None:
    """``groups`` with every group's members reordered so that position ``q`` of each pair of groups is joined
    both ways through one switch (``hub``), or None."""
    joined = (hub >= 0) & (hub.T >= 0)
    out = [groups[0]]
    for g in groups[1:]:
        row, free = [], set(g)
        for u in groups[0]:
            v = next((v for v in g if v in free and joined[u, v]), None)
            if v is None:
                return None
            row.append(v)
            free.discard(v)
        out.append(row)
    pos = np.array(out)
    a, b = pos[:, None, :], pos[None, :, :]
    off = ~np.eye(len(out), dtype=bool)[:, :, None]
    return out if bool(np.all(joined[a, b] | ~off)) else None


def _rail_switches(topo: Topology) -> np.ndarray:
    """``hub[u, v]``: the first switch ``s`` (in id order) with links ``u -> s -> v`` between NPUs, or -1."""
    n, S = topo.num_npus, topo.num_nodes - topo.num_npus
    up = np.zeros((n, S), dtype=bool)
    down = np.zeros((S, n), dtype=bool)
    m = (topo.src < n) & (topo.dst >= n)
    up[topo.src[m], topo.dst[m] - n] = True
    m = (topo.src >= n) & (topo.dst < n)
    down[topo.src[m] - n, topo.dst[m]] = True
    both = up[:, None, :] & down.T[None, :, :]        # u x v x switch
    return np.where(both.any(2), both.argmax(2) + n, -1)


class _Net:
    """The links' reservations and the routes ``u > s > v`` through one switch."""

    def __init__(self, topo: Topology, chunk_bytes: int):
        self.topo, self.bytes = topo, chunk_bytes
        self.starts: list[list[float]] = [[] for _ in range(topo.num_links)]
        self.ends: list[list[float]] = [[] for _ in range(topo.num_links)]
        self._via: dict[tuple[int, int, int], tuple[list[int], float, str]] = {}

    def via(self, u: int, s: int, v: int) -> tuple[list[int], float, str]:
        """Links, duration and route of ``u > s > v`` (the chunk at the slower link, plus both latencies)."""
        key = (u, s, v)
        got = self._via.get(key)
        if got is None:
            t = self.topo
            a, b = t.link_id(u, s), t.link_id(s, v)
            dur = float(link_time_us(min(float(t.bw_GiBps[a]), float(t.bw_GiBps[b])), t.lat_us[a] + t.lat_us[b],
                                     self.bytes))
            got = self._via[key] = ([a, b], dur, f"{u}>{s}>{v}")
        return got

    def at(self, links: list[int], s: float, dur: float) -> float:
        """The earliest start ``>= s`` at which every link of ``links`` is idle for ``dur`` (a link's
        reservations are disjoint: in start order they are in end order too)."""
        starts, ends = self.starts, self.ends
        tol = _REL * (abs(s) + dur + 1.0)
        moved = True
        while moved:
            moved = False
            for lk in links:
                st = starts[lk]
                if not st:
                    continue
                en = ends[lk]
                i = max(bisect.bisect_right(st, s) - 1, 0)
                while i < len(st) and st[i] < s + dur - tol:
                    if s < en[i] - tol:
                        s, moved = en[i], True
                        tol = _REL * (abs(s) + dur + 1.0)
                    i += 1
        return s

    def take(self, links: list[int], s: float, e: float) -> None:
        for lk in links:
            i = bisect.bisect_right(self.starts[lk], s)
            self.starts[lk].insert(i, s)
            self.ends[lk].insert(i, e)


class _Op:
    """One placement: stages (rows that start and end together: a reduction or multicast inside a group, or
    one transfer) in sequence, chosen among ``alternatives()`` -> ``[(ready, stages, info)]`` with stages
    ``[(links, dur, rows)]`` and rows ``(u, v, route, op)``."""

    __slots__ = ("alternatives", "chunk", "preds", "nominal", "latest", "info", "start", "end", "placed",
                 "waiting", "users", "lane", "rank", "first")

    def __init__(self, alternatives: Callable, chunk: int, preds, nominal: float):
        self.alternatives, self.chunk, self.preds, self.nominal = alternatives, chunk, list(preds), nominal
        self.latest = 0.0
        self.info = None
        self.start = self.end = None
        self.placed: list = []
        self.waiting = 0
        self.users: list[_Op] = []
        self.lane = False
        self.rank = 1
        self.first = False

    def follow(self, prev: "_Op | None") -> None:
        """Start no sooner than ``prev`` ends (the next transfer on a NIC whose order is planned)."""
        if prev is None:
            return
        self.preds.append(prev)
        base = self.alternatives

        def alternatives():
            return [(max(ready, prev.end), stages, info) for ready, stages, info in base()]
        self.alternatives = alternatives


def _choose(net: _Net, op: _Op):
    """The alternative of ``op`` that ends first: ``(end, stages, spans, info)``."""
    best = None
    for ready, stages, info in op.alternatives():
        t, spans = ready, []
        for links, dur, rows in stages:
            s = net.at(links, t, dur)
            spans.append((s, s + dur))
            t = s + dur
        if best is None or t < best[0] - _REL * max(1.0, t):
            best = (t, stages, spans, info)
    if best is None:
        raise SolverError("group trees: an operation has no route")
    return best


def _commit(net: _Net, op: _Op, best) -> None:
    t, stages, spans, op.info = best
    op.start, op.end = spans[0][0], t
    for (links, dur, rows), (s, e) in zip(stages, spans):
        net.take(links, s, e)
        op.placed.append((s, e, rows))


PRIORITIES = ("critical", "blended")
# which healthy group combines each chunk through the slow group, rotated over them: in plan order (lane by lane),
# by chunk id, or in plan order shifted by the lane
ROOTS = ("plan", "chunk", "shifted")
_BLEND = 0.3   # the blended priority's weight on the earliest start (of 0.1-0.8, 0.25-0.3 were fastest: docs/faults.md)


def _run(net: _Net, ops: list[_Op], priority: str) -> None:
    """Place every operation, the one of least priority value first among those whose predecessors are placed.

    ``critical``: the operations on a slow group's NICs and those they wait for first, then the rest, each by
    its latest start (a backward pass over nominal times); ``blended``: every operation by a blend of its
    earliest and latest start (the operations off the critical path, e.g. spreading a finished chunk, come
    earlier than their latest start would put them). Operations marked ``first`` (the slow group's exports and
    the reductions they wait for, when asked) go before all others."""
    for op in ops:
        op.preds = list({id(p): p for p in op.preds}.values())
        op.waiting = len(op.preds)
        for p in op.preds:
            p.users.append(op)
    order = _topological(ops)
    for op in reversed(order):
        op.latest = min((u.latest for u in op.users), default=0.0) - op.nominal
    if priority == "critical":
        stack = [op for op in ops if op.lane]
        while stack:
            op = stack.pop()
            if op.rank:
                op.rank = 0
                stack.extend(op.preds)
    else:
        early: dict[int, float] = {}
        for op in order:
            early[id(op)] = max((early[id(p)] + p.nominal for p in op.preds), default=0.0)
        span = max(early[id(op)] + op.nominal for op in ops)
        for op in ops:
            op.rank = 0
            op.latest = _BLEND * early[id(op)] + (1 - _BLEND) * (op.latest + span)
    for op in ops:
        if op.first:
            op.rank = -1
    seq = {id(op): i for i, op in enumerate(ops)}
    heap = [(op.rank, op.latest, seq[id(op)], op) for op in ops if op.waiting == 0]
    heapq.heapify(heap)
    done = 0
    while heap:
        op = heapq.heappop(heap)[-1]
        _commit(net, op, _choose(net, op))
        done += 1
        for u in op.users:
            u.waiting -= 1
            if u.waiting == 0:
                heapq.heappush(heap, (u.rank, u.latest, seq[id(u)], u))
    if done != len(ops):
        raise SolverError("group trees: operations left unplaced (a dependency cycle)")


def _topological(ops: list[_Op]) -> list[_Op]:
    left = {id(op): len(op.preds) for op in ops}
    out = [op for op in ops if left[id(op)] == 0]
    i = 0
    while i < len(out):
        for u in out[i].users:
            left[id(u)] -= 1
            if left[id(u)] == 0:
                out.append(u)
        i += 1
    if len(out) != len(ops):
        raise SolverError("group trees: a dependency cycle")
    return out


def variants_for(problem: Problem) -> list[dict] | str:
    """The variants of :func:`group_trees_all_reduce` worth running on ``problem`` (keyword arguments), or why
    none is. With one group slower than the others: each rotation of the roots, with and without the slow group's
    exports first, in the ``blended`` order (6; on eight slow-node cases of docs/faults.md each rotation and both
    settings of ``exports_first`` were the fastest somewhere, and ``critical`` only tied). Else one: without a
    slow group the trees are stars rotated by chunk, and the two priorities placed the same schedules on every
    case measured. Not on three or more groups whose links to the outside all run at one speed: there
    Reduce-Scatter then All-Gather (the rail decomposition) reaches the phase-bound sum and the trees were behind
    it on every rail cluster of docs/rails.md; with two groups they were 0.90-0.91x of it (``dgx_h100x2``)."""
    found = group_layout(problem.topology)
    if isinstance(found, str):
        return found
    trees = _Trees(problem, *found)
    if trees.G >= 3 and np.ptp(trees.out_us) <= _REL * trees.out_us.max() and \
            np.ptp(trees.in_us) <= _REL * trees.in_us.max():
        return f"{trees.G} groups whose links out all run at one speed (the rail decomposition is at the " \
               f"phase-bound sum there)"
    if trees.slow is None:
        return [{"priority": "critical"}]
    return [{"priority": "blended", "roots": r, "exports_first": f} for f in (True, False) for r in ROOTS]


def search_roots(problem: Problem, variant: dict, evaluations: int) -> tuple[Schedule, list[int]]:
    """Hill climbing on the per-chunk roots from ``variant`` (a slow group's, :func:`variants_for`): chunk by
    chunk, each other healthy group as its root, kept when the makespan drops, sweeps until one improves nothing
    or ``evaluations`` schedules were placed. Deterministic. Returns the fastest schedule and its roots (indices
    into the healthy groups).

    On ``dgx_h100x4`` with node 0's NICs at half speed (1 chunk per NPU): 7,261.3 -> 7,105.6 µs in two sweeps
    (128 schedules, 1.9 s); docs/faults.md."""
    found = group_layout(problem.topology)
    if isinstance(found, str):
        raise SolverError(f"group trees on {problem.topology.name}: {found}")
    probe = _Trees(problem, *found, roots=variant.get("roots", "plan"))
    if probe.slow is None:
        raise SolverError("group trees: the roots are searched only with one slow group")
    H = probe.G - 1
    roots = probe.plan_roots(problem.num_chunks)
    priority, first = variant.get("priority", "critical"), variant.get("exports_first", True)

    def place(trial):
        return _Trees(problem, *found, roots=trial, exports_first=first, like=probe).schedule(priority)

    best = place(roots)
    left = evaluations - 1
    improved = True
    while improved and left > 0:
        improved = False
        for c in range(problem.num_chunks):
            for step in range(1, H):
                if left <= 0:
                    break
                trial = list(roots)
                trial[c] = (roots[c] + step) % H
                s = place(trial)
                left -= 1
                if s.makespan_us < best.makespan_us * (1 - _REL):
                    best, roots, improved = s, trial, True
    return best, roots


def group_trees_all_reduce(problem: Problem, priority: str = "critical", roots: str | Sequence[int] = "plan",
                           exports_first: bool = True) -> Schedule:
    """The group-tree All-Reduce of ``problem`` (see the module docstring), its operations placed in the order
    ``priority`` (one of :data:`PRIORITIES`, see :func:`_run`). With a slow group: ``roots`` (one of
    :data:`ROOTS`, or per chunk an index into the healthy groups, modulo their number) rotates the healthy group
    that combines each chunk, and ``exports_first`` places the slow
    group's exports (and the reductions they wait for) before everything else, so its NICs send back to back from
    the first chunk its switch has gathered.

    Raises
    ------
    SolverError
        When ``problem`` is not an All-Reduce of every NPU on a fabric of such switch groups.
    """
    if problem.kind != ALL_REDUCE or problem.collective.general:
        raise SolverError(f"group trees: an All-Reduce, not {problem.kind}")
    topo = problem.topology
    found = group_layout(topo)
    if isinstance(found, str):
        raise SolverError(f"group trees on {topo.name}: {found}")
    if priority not in PRIORITIES:
        raise SolverError(f"group trees: priority {priority!r} is not one of {', '.join(PRIORITIES)}")
    if isinstance(roots, str) and roots not in ROOTS:
        raise SolverError(f"group trees: roots {roots!r} is not one of {', '.join(ROOTS)} or a list per chunk")
    if not isinstance(roots, str) and len(roots) != problem.num_chunks:
        raise SolverError(f"group trees: {len(roots)} roots for {problem.num_chunks} chunks")
    return _Trees(problem, *found, roots=roots, exports_first=exports_first).schedule(priority)


class _Trees:
    def __init__(self, problem: Problem, sw: list[int], mem: list[list[int]], roots: str | Sequence[int] = "plan",
                 exports_first: bool = True, like: "_Trees | None" = None):
        """``like``: a plan of the same problem whose routes, speeds and switch stages this one reuses (the root
        search places many plans)."""
        self.problem, self.sw, self.mem = problem, sw, mem
        self.roots, self.exports_first = roots, exports_first
        self.G, self.m = len(mem), len(mem[0])
        self.ops: list[_Op] = []
        topo = problem.topology
        self.net = _Net(topo, problem.chunk_bytes)
        if like is not None:
            self.net._via, self._inside_memo = like.net._via, like._inside_memo
            self.rail, self.out_us, self.in_us, self.slow = like.rail, like.out_us, like.in_us, like.slow
            return
        self._inside_memo: dict = {}
        self.rail = {}
        hub = _rail_switches(topo)
        for a in range(self.G):
            for b in range(self.G):
                if a != b:
                    for q in range(self.m):
                        u, v = mem[a][q], mem[b][q]
                        self.rail[a, b, q] = self.net.via(u, int(hub[u, v]), v)
        # a group's cut: its positions' chunk times out, and its capacity (chunks per µs)
        self.out_us = np.array([[min(self.rail[a, b, q][1] for b in range(self.G) if b != a)
                                 for q in range(self.m)] for a in range(self.G)])
        self.in_us = np.array([[min(self.rail[b, a, q][1] for b in range(self.G) if b != a)
                                for q in range(self.m)] for a in range(self.G)])
        cap = np.minimum((1 / self.out_us).sum(1), (1 / self.in_us).sum(1))
        slow = np.flatnonzero(cap < cap.max() * (1 - 1e-6))
        self.slow = int(slow[0]) if slow.size == 1 and self.G >= 3 else None

    # --- operations -----------------------------------------------------------------------------------
    def _op(self, alts, c, preds, nominal) -> _Op:
        op = _Op(alts, c, preds, nominal)
        self.ops.append(op)
        return op

    def _inside(self, g: int, root: int, code: int) -> tuple[list[int], float, list]:
        """The stage of group ``g``'s switch: every other member to ``root`` (``REDUCE``) or ``root`` to every
        other member (``COPY``)."""
        key = (g, root, code)
        if key in self._inside_memo:
            return self._inside_memo[key]
        s, parts, rows = self.sw[g], [], []
        for u in self.mem[g]:
            if u != root:
                a, b = (u, root) if code == REDUCE else (root, u)
                links, dur, route = self.net.via(a, s, b)
                parts.append((links, dur))
                rows.append((a, b, route, code))
        links = sorted({lk for p in parts for lk in p[0]})
        got = self._inside_memo[key] = (links, max((p[1] for p in parts), default=0.0), rows)
        return got

    def reduce_send(self, c: int, g: int, to: int) -> _Op:
        """Group ``g`` reduces chunk ``c`` to its member at the position whose links free first, which adds it
        into ``to``'s member at that position."""
        mem = self.mem

        def alts():
            out = []
            for q in range(self.m):
                links, dur, route = self.rail[g, to, q]
                out.append((0.0, [self._inside(g, mem[g][q], REDUCE),
                                  (links, dur, [(mem[g][q], mem[to][q], route, REDUCE)])], q))
            return out

        nominal = float(np.mean([self.rail[g, to, q][1] for q in range(self.m)])) + \
            self._inside(g, mem[g][0], REDUCE)[1]
        return self._op(alts, c, (), nominal)

    def reduce_at(self, c: int, g: int, positions, preds=()) -> _Op:
        """Group ``g`` reduces chunk ``c`` to its member at one of ``positions`` (the one free first), after
        ``preds``."""
        def alts():
            ready = max((p.end for p in preds), default=0.0)
            return [(ready, [self._inside(g, self.mem[g][q], REDUCE)], q) for q in positions]
        return self._op(alts, c, preds, self._inside(g, self.mem[g][0], REDUCE)[1])

    def send(self, c: int, g: int, to: int, q: int, code: int, ready: Callable, preds) -> _Op:
        """Chunk ``c`` from ``g``'s member at position ``q`` to ``to``'s."""
        def alts():
            links, dur, route = self.rail[g, to, q]
            return [(ready(), [(links, dur, [(self.mem[g][q], self.mem[to][q], route, code)])], q)]
        return self._op(alts, c, preds, self.rail[g, to, q][1])

    def spread(self, c: int, g: int, q: Callable, ready: Callable, preds) -> _Op:
        """Group ``g`` multicasts chunk ``c`` from its member at position ``q()``."""
        def alts():
            pos = q()
            return [(ready(), [self._inside(g, self.mem[g][pos], COPY)], pos)]
        return self._op(alts, c, preds, self._inside(g, self.mem[g][0], COPY)[1])

    def fan_out(self, c: int, src: int, to: list[int], held: Callable, preds) -> None:
        """Groups ``to`` get chunk ``c``'s sum from group ``src``, whose member at position ``p`` holds it from
        ``held()[0]`` and every member from ``held()[1]``: each at the position that frees first, then multicast
        inside."""
        for y in to:
            def alts(y=y):
                (p, t_p), t_all = held()
                out = []
                for q in range(self.m):
                    links, dur, route = self.rail[src, y, q]
                    out.append((t_p if q == p else t_all,
                                [(links, dur, [(self.mem[src][q], self.mem[y][q], route, COPY)])], q))
                return out
            nominal = float(np.mean([self.rail[src, y, q][1] for q in range(self.m)]))
            land = self._op(alts, c, preds, nominal)
            self.spread(c, y, lambda land=land: land.info, lambda land=land: land.end, [land])

    # --- the plan -------------------------------------------------------------------------------------
    def schedule(self, priority: str) -> Schedule:
        C = self.problem.num_chunks
        healthy = [g for g in range(self.G) if g != self.slow]
        if self.slow is None:
            for c in range(C):
                self.star(c, healthy[c % len(healthy)])
        else:
            self.through_slow_group(C, healthy)
        _run(self.net, self.ops, priority)
        return self._rows()

    def star(self, c: int, A: int, pos: int | None = None) -> tuple[_Op, _Op] | None:
        """Chunk ``c`` reduced at root group ``A``; with the slow group, its part exported and the sum imported
        at position ``pos``: those two transfers, for the caller to order on the slow NIC."""
        S = self.slow
        ups = [self.reduce_send(c, g, A) for g in range(self.G) if g not in (A, S)]
        if pos is None:
            red = self.reduce_at(c, A, range(self.m), ups)
            have = [red]
        else:
            s_red = self.reduce_at(c, S, [pos])
            exp = self.send(c, S, A, pos, REDUCE, lambda: s_red.end, [s_red])
            red = self.reduce_at(c, A, [pos], ups)
            have = [red, exp]

        def at_p():
            return max(o.end for o in have)
        mc = self.spread(c, A, lambda: red.info, at_p, have)
        self.fan_out(c, A, [g for g in range(self.G) if g not in (A, S)], lambda: ((red.info, at_p()), mc.end), [mc])
        if pos is None:
            return None
        imp = self.send(c, A, S, pos, COPY, at_p, have)
        self.spread(c, S, lambda: pos, lambda: imp.end, [imp])
        exp.lane = imp.lane = True
        exp.first = s_red.first = self.exports_first
        return exp, imp

    def through(self, c: int, h: int, q: int) -> tuple[_Op, _Op]:
        """Chunk ``c`` combined at healthy group ``h``, sent to the slow group at position ``q``, completed there
        and sent back, then spread: the two transfers on the slow NIC (into it, out of it)."""
        S = self.slow
        ups = [self.reduce_send(c, g, h) for g in range(self.G) if g not in (h, S)]
        red = self.reduce_at(c, h, [q], ups)
        exp = self.send(c, h, S, q, REDUCE, lambda: red.end, [red])
        s_red = self.reduce_at(c, S, [q])
        whole = [exp, s_red]

        def at_q():
            return max(o.end for o in whole)
        self.spread(c, S, lambda: q, at_q, whole)
        back = self.send(c, S, h, q, COPY, at_q, whole)
        mc = self.spread(c, h, lambda: q, lambda: back.end, [back])
        self.fan_out(c, h, [g for g in range(self.G) if g not in (h, S)], lambda: ((q, back.end), mc.end), [mc])
        back.lane = exp.lane = True
        return exp, back

    def through_slow_group(self, C: int, healthy: list[int]) -> None:
        """Chunks to the slow group's positions by their speed; on each position the first half of its chunks
        as stars (export, later import) and the rest through the slow group (import, then export back). Out of
        the slow NIC: the stars' exports, then the others' returns; into it: the others' imports, then the
        stars' sums."""
        lanes: dict[int, tuple[list, list, list]] = {}
        for c, q, k, kind in self._plan(C):
            into, backs, exports = lanes.setdefault(q, ([], [], []))
            root = healthy[self._root(k, c, q) % len(healthy)]
            if kind == "through":
                exp, back = self.through(c, root, q)
                into.append(exp)
                backs.append(back)
            else:
                exp, imp = self.star(c, root, q)
                into.append(imp)
                exports.append(exp)
        for into, backs, exports in lanes.values():
            out_of = exports + backs
            for order in (into, out_of):
                for prev, op in zip(order, order[1:]):
                    op.follow(prev)

    def _plan(self, C: int) -> list[tuple[int, int, int, str]]:
        """``(chunk, position, k, kind)`` in plan order: chunks to the slow group's positions by their speed,
        on each the last half through the slow group, then the first half as stars."""
        S, m = self.slow, self.m
        per = np.maximum(self.out_us[S], self.in_us[S])
        count = np.zeros(m, dtype=np.int64)
        lane: list[list[int]] = [[] for _ in range(m)]
        for c in range(C):
            q = int(np.argmin((count + 1) * per))
            count[q] += 1
            lane[q].append(c)
        out = []
        for q, chunks in enumerate(lane):
            n_star = len(chunks) - len(chunks) // 2
            out += [(c, q, "through") for c in chunks[n_star:]] + [(c, q, "star") for c in chunks[:n_star]]
        return [(c, q, k, kind) for k, (c, q, kind) in enumerate(out)]

    def plan_roots(self, C: int) -> list[int]:
        """Per chunk, the rotation index its named rule gives (an index into the healthy groups)."""
        out = [0] * C
        for c, q, k, _ in self._plan(C):
            out[c] = self._root(k, c, q) % (self.G - 1)
        return out

    def _root(self, k: int, c: int, q: int) -> int:
        """The rotation index of the ``k``-th chunk of the plan, chunk ``c``, on the slow group's position ``q``."""
        if not isinstance(self.roots, str):
            return int(self.roots[c])
        return {"plan": k, "chunk": c, "shifted": k + q}[self.roots]

    def _rows(self) -> Schedule:
        rows = [(op.chunk, u, v, s, e, code, route) for op in self.ops for s, e, rs in op.placed
                for u, v, route, code in rs]
        c, a, b, s, e, code, r = zip(*rows)
        return Schedule(np.array(c), np.array(a), np.array(b), np.array(s), np.array(e),
                        np.array(code, dtype=np.int8), route=list(r)).sorted()
