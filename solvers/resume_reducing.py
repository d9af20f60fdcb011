"""Resume a reducing collective (Reduce-Scatter, All-Reduce, Reduce) from the state a fault leaves.

At the fault each chunk not yet whole at its collector (:func:`tacos_bench.faults.collector_of`) is held in
*pieces*: the partial sums of the NPUs that have not sent theirs on, disjoint and together every contribution
(:func:`tacos_bench.faults.reduce_pieces`; what was executed stays, partial sums stay where they are and nothing is
counted twice). The resume reduces each such chunk into its collector afresh, on the links that survive (slowed
ones at their new speed), as the backend's copy mirror time-reversed (:func:`solvers.compose.mirrored`: a tree per
chunk in which every NPU sends once, after all it waits for has arrived), and then prunes that tree to the pieces:

* an NPU that holds a piece sends it (with whatever reached it) as in the tree: a reduce at each receiver;
* an NPU that holds none has already sent its partial sum on before the fault: it sends only what reached it
  after the fault, so its first arrival *replaces* its stale partial sum (a copy) and later ones add to it (a
  reduce); one that receives nothing sends nothing (its row is dropped).

So nothing is counted twice and every piece reaches the collector. The pruned rows are placed after the fault as
one list schedule (each transfer once its links are free and its sender has received every partial sum the tree
sends it first). An All-Reduce then copies each whole chunk from its collector (and any NPU that already holds it
whole) to every NPU that lacks it, from the state the reduction leaves (the verifier replays the result).

The mirrored tree is planned for every NPU from time 0: it knows neither which NPUs still hold a piece of a chunk
nor which hold many, so a holder may have to send through an NPU that already sent its partial sum (a relay: one
more transfer), and a holder with many pieces may find them all on one of its links. The trees can instead be built
on the pieces (:func:`balanced_trees`, the repair tries both):

* every holder sends its piece once, to a neighbour nearer the chunk's collector by the surviving links' times (or,
  ``roam``, to any neighbour whose way up does not come back to it), a holder if one is there (it adds the piece to
  its own send) and else an NPU that relays it; holders farthest first, each on the step that would end soonest
  after the work its links were given so far, counting the way it adds and a relay's extra send, so that a holder's
  sends spread over its links;
* the sends are list-scheduled: the earliest possible start first (once the piece is ready, every arrival the tree
  brings it has landed and its links are free), ties to the send with the longer way left in its tree.

On a switched fabric a step is a hop between NPUs over surviving links (as the detours take them,
:mod:`solvers.detour_reducing`). The tree is then pruned and placed as the mirrored one is.
"""

from __future__ import annotations

import heapq

import numpy as np

from tacos_bench.collective import Collective
from tacos_bench.demand import table
from tacos_bench.errors import TacosError
from tacos_bench.faults import Fault, FaultState, collector_of, row_link_pairs
from tacos_bench.graph import shortest_path_tree
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule, route_column_of

from .compose import earliest_idle, fit_copies, link_last_use, mirrored
from .detour_reducing import _Steps
from .release import _solve_from


# the trees built on the pieces that the repair tries (each the options of balanced_trees): nearer NPUs only, each
# step counting its whole way and one more step for a relay; and any NPU, a step counting half the way it adds and
# two steps for a relay, which lets a holder whose nearer links are full send sideways (mesh4x4, its central link
# failed: 1.03-1.17x a fresh run against 1.17-1.33x)
BALANCED = ({"roam": False}, {"roam": True, "relay_cost": 2.0, "way_cost": 0.5})


def resume_reducing(backend, problem: Problem, fault: Fault, state: FaultState, opts, gaps: bool = False,
                    balanced: dict | None = None, fresh: bool = False) -> Schedule:
    """The transfers that complete ``problem`` (a reducing collective) from ``state``, in absolute time
    (``gaps``: a transfer may take a gap that the ones placed before it leave on its links; ``balanced``: the
    reduction trees are built on the pieces with these options of :func:`balanced_trees` instead of the backend's
    mirror; ``fresh``: an All-Reduce's copy phase is the backend's fresh All-Gather, :func:`_fresh_spread`)."""
    after = fault.slowed(problem)
    col = collector_of(problem)
    free = np.where(np.isfinite(state.link_free), np.maximum(state.link_free, fault.at_us), np.inf)
    parts = []
    whole_at = {}
    pieces = state.pieces or {}
    if pieces:
        if balanced is not None:
            tree = balanced_trees(problem, fault, state, **balanced)
        else:
            tree = _trees(backend, after, opts, fault, sorted(pieces), col)
        ready = {(v, c): t for c, own in pieces.items() for v, _, t in own}
        rows, relays = _pruned(problem, tree, pieces)
        red = _place_reduce(problem, rows, free, ready, fault.at_us, relays, gaps)
        parts.append(red)
        into = red.dst == col[red.chunk]
        for c, t in zip(red.chunk[into].tolist(), red.end_us[into].tolist()):
            whole_at[c] = max(whole_at.get(c, 0.0), t)
    if problem.destinations.min() < 0:   # every NPU needs every chunk whole (All-Reduce)
        # planned on the links as the fault leaves them, then fitted around the reduction's transfers: a link
        # carries copies of the chunks already whole while others are still being reduced
        spread = None if fresh else _spread(backend, after, opts, state, whole_at, free, fault)
        holds = {(int(v), int(c)): max(float(t), fault.at_us) for v, c, t in
                 zip(state.hold_npu.tolist(), state.hold_chunk.tolist(), state.hold_time.tolist())}
        for c, t in whole_at.items():
            holds[(int(col[c]), c)] = min(holds.get((int(col[c]), c), np.inf), t)
        if fresh:
            parts.append(_fresh_spread(backend, problem, opts, fault, holds, free, parts))
        else:
            parts.append(fit_copies(problem, parts[0] if parts else Schedule.empty(), spread, holds, free))
    return Schedule.concat(parts) if parts else Schedule.empty()


def _fresh_spread(backend, problem: Problem, opts, fault: Fault, holds: dict, free, parts) -> Schedule:
    """All-Reduce whose chunks are each whole at their owner alone once reduced (its copy phase is then an
    All-Gather from the start): the backend's fresh All-Gather on the surviving links at their new speed, started
    once every link is free and every chunk whole. A backend's solve from a state may not reach what its full
    synthesis does (greedy_plus's portfolio: ``dgx_h100x4`` with two nodes, four rails slowed at 0.5 T: the copy
    phase 2,322 µs against 2,990 from the state)."""
    ag = Problem(problem.topology, Collective("all_gather", problem.collective.chunks_per_npu,
                                              problem.collective.buffer_mib))
    if set(holds) != {(int(v), c) for c, v in enumerate(np.asarray(ag.sources, np.int64).tolist())}:
        raise TacosError("the copy phase does not start as an All-Gather (some chunk is whole at another NPU)")
    after = fault.slowed(problem)
    sub = Problem(fault.surviving_topology(after.topology), ag.collective)
    ends = list(holds.values()) + [float(x) for x in np.asarray(free)[np.isfinite(free)].tolist()]
    ends += [float(p.end_us.max()) for p in parts if len(p)]
    return backend.solve(sub, opts).schedule.to_schedule().shifted(max(ends + [fault.at_us]))


def _trees(backend, problem: Problem, opts, fault: Fault, chunks, col) -> Schedule:
    """A fresh reduction of ``chunks`` into their collectors over the surviving links (times from 0)."""
    n = problem.num_npus
    topo = problem.topology
    failed = {(int(u), int(v)) for u, v in zip(topo.src[~fault.surviving_links(topo)].tolist(),
                                               topo.dst[~fault.surviving_links(topo)].tolist())}
    sub = Problem(topo, Collective("custom", demand=table(
        n, problem.chunk_bytes, [[]] * len(chunks), [[int(col[c])] for c in chunks], ["reduce"] * len(chunks))))

    def copy_solve(mp: Problem) -> Schedule:
        t = mp.topology
        # a reversed link v->u is the real link u->v
        keep = np.array([(int(b), int(a)) not in failed for a, b in zip(t.src.tolist(), t.dst.tolist())], bool)
        return _solve_from(backend, mp, opts, np.asarray(mp.sources, np.int64), np.arange(mp.num_chunks),
                           np.zeros(mp.num_chunks), np.zeros(mp.num_links), links=keep)

    return mirrored(sub, copy_solve).with_chunks(chunks)


def _pruned(problem: Problem, tree: Schedule, pieces: dict) -> tuple[Schedule, set]:
    """The rows of ``tree`` that carry pieces, with their ops (the module docstring), and the (NPU, chunk) pairs
    whose stale partial sum the first arrival replaces (the placement keeps that arrival first)."""
    n = problem.num_npus
    holder = {(v, c) for c, own in pieces.items() for v, _, _ in own}
    got: set = set()          # (npu, chunk) that received something after the fault
    keep, ops = [], []
    relays = set()
    order = np.lexsort((tree.end_us, tree.start_us))
    for i in order.tolist():
        u, v, c = int(tree.src[i]), int(tree.dst[i]), int(tree.chunk[i])
        if u < n and (u, c) not in holder and (u, c) not in got:
            continue   # a stale partial sum only: nothing to send
        keep.append(i)
        if v < n and (v, c) not in holder and (v, c) not in got:
            ops.append(COPY)   # replaces the relay's stale partial sum
            relays.add((v, c))
        else:
            ops.append(REDUCE)
        if v < n:
            got.add((v, c))
    return tree.take(np.asarray(keep, np.int64)).with_op(ops), relays


def _place_reduce(problem: Problem, sched: Schedule, free, ready: dict, at_us: float, relays=frozenset(),
                  gaps: bool = False) -> Schedule:
    """``sched`` placed after the fault in the order of its planned starts: each reduction group (one chunk,
    receiver and planned time) as soon as its links are free and each sender has received every partial sum the
    plan sends it first, lasting as planned."""
    T = len(sched)
    if not T:
        return sched
    row, link = row_link_pairs(problem.topology, sched)
    per = [[] for _ in range(T)]
    for r_, l_ in zip(row.tolist(), link.tolist()):
        per[r_].append(l_)
    if sched.route is None:   # point-to-point: every row lands on its own
        inv = np.arange(T)
    else:   # a fabric: the rows of one reduction group share the links from where they merge
        key = np.stack([sched.chunk, sched.dst, np.round(sched.start_us, 9), np.round(sched.end_us, 9)], 1)
        _, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.ravel()
        # except into a relay: its first arrival replaces its stale sum alone, the others land after it one by one
        into_relay = np.array([(int(v), int(c)) in relays for v, c in zip(sched.dst.tolist(), sched.chunk.tolist())],
                              bool)
        inv = np.where(into_relay, inv.max() + 1 + np.arange(T), inv)
    members_of: dict = {}
    for i in np.argsort(sched.start_us, kind="stable").tolist():
        members_of.setdefault(int(inv[i]), []).append(i)
    members_of = {g: np.asarray(m, np.int64) for g, m in members_of.items()}
    order = sorted(members_of, key=lambda g: float(sched.start_us[members_of[g][0]]))
    free = np.asarray(free, np.float64).copy()
    first_free = free.copy()   # with gaps: a link is taken from here on only where a group holds it
    busy: dict = {}
    got = dict(ready)   # (npu, chunk) -> when it has every partial sum its plan sent it so far
    start = np.zeros(T)
    n = problem.num_npus
    op = sched.op.copy()
    margin = 1e-6 * max(1.0, at_us)
    landed: dict = {}   # (npu, chunk) -> end of its latest arrival, at a relay that replaces its stale sum
    for g in order:
        mem = members_of[g]
        links = sorted({l for i in mem.tolist() for l in per[i]})
        senders = [(int(sched.src[i]), int(sched.chunk[i])) for i in mem.tolist()]
        dur = float(sched.end_us[mem[0]] - sched.start_us[mem[0]])
        link_free = first_free if gaps else free
        t0 = max([at_us] + [link_free[l] for l in links] + [got.get(k, at_us) for k in senders if k[0] < n])
        rk = (int(sched.dst[mem[0]]), int(sched.chunk[mem[0]]))
        if rk in relays and rk in landed:
            # the relay's first arrival replaces its stale partial sum (a copy), the later ones add to it: they
            # must land strictly after it, or the replay could not tell their order
            t0 = max(t0, landed[rk] + margin - dur)
        if gaps:   # any gap the groups placed so far leave on its links
            t0 = earliest_idle(busy, links, t0, dur, 1e-9 * max(1.0, at_us))
            for l in links:
                busy.setdefault(l, []).append((t0, t0 + dur))
        if rk in relays:
            op[mem] = REDUCE if rk in landed else COPY
            landed[rk] = t0 + dur
        start[mem] = t0
        for l in links:
            free[l] = t0 + dur
        v, c = int(sched.dst[mem[0]]), int(sched.chunk[mem[0]])
        got[(v, c)] = max(got.get((v, c), at_us), t0 + dur)
    dur = sched.end_us - sched.start_us
    return Schedule(sched.chunk, sched.src, sched.dst, start, start + dur, op, route=sched.route)


def _spread(backend, problem: Problem, opts, state: FaultState, whole_at: dict, free, fault: Fault) -> Schedule:
    """All-Reduce: each whole chunk copied to every NPU that lacks it, from its collector once reduced and from
    every NPU that already held it whole at the fault."""
    C = problem.num_chunks
    col = collector_of(problem)
    hv = list(np.asarray(state.hold_npu, np.int64).tolist())
    hc = list(np.asarray(state.hold_chunk, np.int64).tolist())
    ht = [max(float(t), fault.at_us) for t in np.asarray(state.hold_time, np.float64).tolist()]
    for c, t in whole_at.items():
        hv.append(int(col[c])), hc.append(int(c)), ht.append(t)
    ag = Problem(problem.topology, Collective("all_gather", problem.collective.chunks_per_npu,
                                              problem.collective.buffer_mib))
    if ag.num_chunks != C:
        raise TacosError("the All-Gather phase has another chunk count")
    keep = fault.surviving_links(problem.topology)
    s = _solve_from(backend, ag, opts, hv, hc, ht, free, links=keep)
    return s


def balanced_trees(problem: Problem, fault: Fault, state: FaultState, roam: bool = False,
                   relay_cost: float = 1.0, way_cost: float = 1.0) -> Schedule:
    """A reduction of every chunk ``state`` holds in pieces into its collector, built on the pieces, after the fault
    (absolute times; rows ``reduce``, :func:`_pruned` sets the relays' ops; the module docstring)."""
    after = fault.slowed(problem)
    steps = _Steps(problem, after, ~fault.surviving_links(problem.topology), problem.topology.is_fabric)
    col = collector_of(problem)
    pieces = state.pieces or {}
    dist = _to_collectors(problem.num_npus, steps, sorted({int(col[c]) for c in pieces}))
    free = np.where(np.isfinite(state.link_free), np.maximum(state.link_free, fault.at_us), np.inf)
    parent = _parents(steps, pieces, col, dist, problem.topology.num_links, free, roam, relay_cost, way_cost)
    # of the sends that can start at once, the one with the longer way left in its tree first
    rows = _list_schedule(steps, parent, pieces, {k: -w for k, w in _ways(steps, parent).items()}, fault.at_us,
                          free)
    return _rows_schedule(rows, problem.topology.is_fabric)


def _to_collectors(n: int, steps: _Steps, roots: list) -> dict:
    """Per collector, every NPU's shortest time to it over the steps (a search on the reversed steps)."""
    o = np.argsort(steps.dst, kind="stable")
    ptr = np.searchsorted(steps.dst[o], np.arange(n + 1)).astype(np.int64)
    src, w = steps.src[o].astype(np.int64), steps.dur[o]
    return {r: shortest_path_tree(n, ptr, src, w, r)[0] for r in roots}


def _parents(steps: _Steps, pieces: dict, col, dist: dict, num_links: int, free, roam: bool = False,
             relay_cost: float = 1.0, way_cost: float = 1.0) -> dict:
    """``(npu, chunk) -> step`` of every send: holders farthest first, each on the step that would end soonest
    after the work its links were given so far, counting the way it adds and a relay's own send; to a nearer NPU,
    or with ``roam`` to any NPU whose way up does not come back (a relay then is given its own step in turn)."""
    load = np.append(np.where(np.isfinite(free), free, 0.0), 0.0)   # + the padding link of _Steps.link_pad
    holds = {(v, c) for c, own in pieces.items() for v, _, _ in own}
    heap = [(-float(dist[int(col[c])][v]), c, v) for c, own in pieces.items() for v, _, _ in own
            if v != int(col[c])]
    heapq.heapify(heap)
    parent: dict = {}
    while heap:
        _, c, u = heapq.heappop(heap)
        if (u, c) in parent:
            continue
        d = dist[int(col[c])]
        best = None
        for e in range(int(steps.out_ptr[u]), int(steps.out_ptr[u + 1])):
            v = int(steps.dst[e])
            if not np.isfinite(d[v]):
                continue
            if not (d[v] < d[u] * (1 - 1e-12) or roam):
                continue
            if roam and _comes_back(parent, steps, v, u, c):   # (nearer ones too: their way may roam)
                continue
            relay = (v, c) not in holds and v != int(col[c])
            dur = float(steps.dur[e])
            end = float(load[steps.link_pad[e]].max()) + dur
            key = (end + way_cost * (d[v] + dur - d[u]) + relay * relay_cost * dur, v)
            if best is None or key < best[0]:
                best = (key, e, relay)
        if best is None:
            raise TacosError(f"chunk {c}: NPU {u} has no surviving way to its collector")
        _, e, relay = best
        parent[(u, c)] = e
        load[steps.links[e]] = load[steps.link_pad[e]].max() + steps.dur[e]
        v = int(steps.dst[e])
        if relay:   # the relay sends what reaches it on, in its turn
            holds.add((v, c))
            heapq.heappush(heap, (-float(d[v]), c, v))
    return parent


def _comes_back(parent: dict, steps: _Steps, v: int, u: int, c: int) -> bool:
    """True when chunk ``c``'s way up from ``v``, as chosen so far, passes through ``u``."""
    while v != u:
        e = parent.get((v, c))
        if e is None:
            return False
        v = int(steps.dst[e])
    return True


def _ways(steps: _Steps, parent: dict) -> dict:
    """Per send, the time of its way to the collector in its tree (its step's and every step after it)."""
    way: dict = {}
    for k in parent:
        chain = []
        while k in parent and k not in way:
            chain.append(k)
            k = (int(steps.dst[parent[k]]), k[1])
        w = way.get(k, 0.0)
        for j in reversed(chain):
            w += float(steps.dur[parent[j]])
            way[j] = w
    return way


def _list_schedule(steps: _Steps, parent: dict, pieces: dict, urgency: dict, T: float, link_free) -> list:
    """The sends of ``parent`` placed earliest start first (ties: the lower ``urgency``, then chunk and sender),
    each after its piece is ready, every send into it has landed and its links are free; as rows
    ``(chunk, src, dst, start, end, route)`` in the order placed."""
    ready = {(v, c): max(float(t), T) for c, own in pieces.items() for v, _, t in own}
    waits = {k: 0 for k in parent}   # sends still to land at each sender
    for (u, c), e in parent.items():
        k = (int(steps.dst[e]), c)
        if k in waits:
            waits[k] += 1
    free = np.append(np.where(np.isfinite(link_free), np.maximum(link_free, T), np.inf), -np.inf)
    landed = dict(ready)   # (the padding link of _Steps.link_pad never holds anything back)

    def entry(k) -> tuple:
        u, c = k
        return (max(landed.get(k, T), float(free[steps.link_pad[parent[k]]].max())), urgency[k], c, u)

    heap = [entry(k) for k, w in waits.items() if w == 0]
    heapq.heapify(heap)
    rows = []
    while heap:
        t, _, c, u = heapq.heappop(heap)
        k = (u, c)
        now = entry(k)
        if now[0] > t + 1e-9 * max(1.0, T):   # a link it needs was taken since: back in line
            heapq.heappush(heap, now)
            continue
        e = parent[k]
        end = t + float(steps.dur[e])
        free[steps.links[e]] = end
        v = int(steps.dst[e])
        rows.append((c, u, v, t, end, steps.route[e]))
        landed[(v, c)] = max(landed.get((v, c), T), end)
        if (v, c) in waits:
            waits[(v, c)] -= 1
            if waits[(v, c)] == 0:
                heapq.heappush(heap, entry((v, c)))
    if len(rows) != len(parent):
        raise TacosError("the reduction trees wait on each other")
    return rows


def _rows_schedule(rows: list, fabric: bool) -> Schedule:
    """``(chunk, src, dst, start, end, route)`` rows as a schedule of reduces (routes on a fabric)."""
    if not rows:
        return Schedule.empty()
    c, u, v, a, b, r = (list(x) for x in zip(*rows))
    route = route_column_of(r) if fabric else None
    return Schedule(np.asarray(c), np.asarray(u), np.asarray(v), np.asarray(a, np.float64), np.asarray(b, np.float64),
                    np.full(len(rows), REDUCE, np.int8), route=route)
