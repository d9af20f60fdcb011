"""The ``detour`` repair of a reducing collective: the healthy schedule goes on, and only what a fault cut is sent
again, around it.

After a link fails (or slows down) mid-reduction, every transfer of the healthy schedule that does not cross a
failed link still does what it did: each NPU still sends its partial sum once, to the same parent, so every
contribution that was not on a lost transfer still reaches its collector. A transfer that is lost (in flight on a
failed link) or still to start on one carried a partial sum (or, in an All-Reduce's copy phase, a whole chunk);
it is sent again on the shortest surviving path, to the first NPU on the way that still has its own send of that
chunk ahead of it (it adds the partial sum to what it sends on) or to the collector; a stale NPU on the way (one
that already sent its partial sum) relays it, its first arrival replacing its stale sum (a copy). A whole chunk is
copied on the shortest path to its receiver. Every transfer then waits for all the arrivals its plan had before it
(and an NPU's send for the detours bound for it), placed in that order as early as its links allow.

On a switched fabric a step of a detour is a hop between NPUs over surviving links (a route through switches;
a lost NIC's traffic goes through the node's switch to another GPU's NIC), and the kept rows of one in-network
multicast or reduction are placed together. With ``spread`` a path's length also counts the work its links
still carry after the fault, so that the detours share the ways around the fault.

This keeps the work already done on the healthy trees, which a fresh reduction from the pieces
(:mod:`solvers.resume_reducing`) throws away; the repair keeps the faster of the two.
"""

from __future__ import annotations

import heapq

import numpy as np

from tacos_bench.errors import TacosError
from tacos_bench.faults import Fault, FaultState, collector_of, row_link_pairs
from tacos_bench.graph import shortest_path_tree
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule, route_column_of

from .compose import earliest_idle


def detour_reducing(problem: Problem, healthy: Schedule, fault: Fault, state: FaultState,
                    spread: bool = False) -> Schedule:
    """The transfers after the fault (absolute times) that complete ``problem`` from ``state`` by the healthy
    schedule plus detours (see the module docstring). On a switched fabric a step of a detour is a hop (a route
    through switches between two NPUs over surviving links), and the rows of one in-network multicast or
    reduction move together. A kept transfer on a link that slows down takes as long as the slowed link makes it.

    ``spread``: a detour's length counts, besides each step's time, the work its links still carry after the
    fault (the healthy transfers kept, the detours chosen before it), so the detours spread over the ways out
    instead of queueing on the nearest one (a node's other NICs when one fails)."""
    topo, n = problem.topology, problem.num_npus
    fabric = healthy.route is not None and bool(np.any(healthy.route.astype(bool)))
    if fabric and len(healthy) and (healthy.src.max() >= n or healthy.dst.max() >= n):
        raise TacosError("detours on a fabric need rows between NPUs (store-and-forward hops are rows of their own)")
    after = fault.slowed(problem)
    T = float(fault.at_us)
    tol = 1e-9 * max(1.0, healthy.makespan_us)
    failed = ~fault.surviving_links(topo)
    row_of, link_of = row_link_pairs(topo, healthy)
    links = [[] for _ in range(len(healthy))]
    for r_, l_ in zip(row_of.tolist(), link_of.tolist()):
        links[r_].append(l_)
    on_failed = np.zeros(len(healthy), bool)
    on_failed[row_of[failed[link_of]]] = True
    slowed = fault.slow_factors(topo) < 1.0
    on_slow = np.zeros(len(healthy), bool)
    on_slow[row_of[slowed[link_of]]] = True
    steps = _Steps(problem, after, failed, fabric)
    if fabric:
        dur = healthy.end_us - healthy.start_us
        if on_slow.any():   # a route over a slowed link: the slowed hop's time
            hop_dur = {tuple(r.split(">")): d for r, d in zip(steps.route, steps.dur.tolist())}
            for i in np.flatnonzero(on_slow).tolist():
                key = tuple(healthy.route[i].split(">"))
                if key not in hop_dur:
                    raise TacosError(f"row {i}: its route {healthy.route[i]} is no hop of the slowed fabric")
                dur[i] = hop_dur[key]
    else:
        dur = np.asarray(after.link_time_us, np.float64)[topo.link_ids(healthy.src, healthy.dst)]
    started = healthy.start_us < T - tol
    ended = healthy.end_us <= T + tol
    lost = (started & ~ended & on_failed) | (~started & on_failed)
    rest = ~started & ~on_failed
    # a sender still to send chunk c (in the rows kept) absorbs a detour bound for it
    pending = {(int(u), int(c)) for u, c, o in zip(healthy.src[rest].tolist(), healthy.chunk[rest].tolist(),
                                                 healthy.op[rest].tolist()) if o == REDUCE}
    col = collector_of(problem)
    trees: dict = {}
    load = np.zeros(topo.num_links + 1)   # spread: the work each link carries after the fault (+ a padding link)

    def tree(u: int) -> tuple:
        """``(dist, pred)`` of the shortest surviving paths from ``u`` (one search per sender, or per detour
        when they spread)."""
        if spread:
            return shortest_path_tree(n, steps.out_ptr, steps.dst, steps.dur + load[steps.link_pad].max(axis=1), u)
        if u not in trees:
            trees[u] = shortest_path_tree(n, steps.out_ptr, steps.dst, steps.dur, u)
        return trees[u]

    # each chunk's tree of the healthy schedule: who each NPU sends its partial sum to
    parent = {}
    for u, v, c, o in zip(healthy.src.tolist(), healthy.dst.tolist(), healthy.chunk.tolist(), healthy.op.tolist()):
        if o == REDUCE:
            parent[(u, c)] = v

    # the rows to place: kept healthy ones and detours; (chunk, src, dst, planned start, duration, op, deps)
    rows = []
    kept = np.flatnonzero(rest)
    routes = healthy.route.tolist() if fabric else None
    for i in kept.tolist():
        rows.append([int(healthy.chunk[i]), int(healthy.src[i]), int(healthy.dst[i]), float(healthy.start_us[i]),
                     float(dur[i]), int(healthy.op[i]), [], False, links[i], routes[i] if fabric else "",
                     float(healthy.end_us[i])])
    for i in kept.tolist():
        np.add.at(load, links[i], float(dur[i]))
    # (npu, chunk, op) -> the detour rows that must land there before it sends the chunk with that op (a partial
    # sum after the partial sums bound for it, the whole chunk after the copy that brings it)
    extra_deps: dict = {}
    for i in np.flatnonzero(lost).tolist():
        c, u, v, op = int(healthy.chunk[i]), int(healthy.src[i]), int(healthy.dst[i]), int(healthy.op[i])
        if op == REDUCE:
            # the partial sum goes to the nearest NPU that still sends c on a way up that avoids NPU u (it adds the
            # sum to its own send), or to the collector, never through an NPU whose way up comes back to u
            # (it leaves once everything u waited for has arrived, as its own send would have: u's subtree has
            # sent by then, so it relays like any NPU that already sent)
            below = _below(parent, c, u)
            hops = _nearest(tree(u), steps, u, {a for a, cc in pending if cc == c} - below | {int(col[c])})
        else:
            hops = _nearest(tree(u), steps, u, {v})
        if hops is None:
            raise TacosError(f"chunk {c}: NPU {u} has no surviving path to an NPU that can take its partial sum")
        prev = None
        for e in hops:
            a, b = int(steps.src[e]), int(steps.dst[e])
            idx = len(rows)
            rows.append([c, a, b, T, float(steps.dur[e]), op, ["first"] if prev is None else [prev], True,
                         steps.links[e], steps.route[e], T + float(steps.dur[e])])
            np.add.at(load, steps.links[e], float(steps.dur[e]))
            prev = idx
        if prev is not None:
            extra_deps.setdefault((int(steps.dst[hops[-1]]), c, op), []).append(prev)
    # the kept rows of one in-network multicast or reduction (one chunk, op, sender or receiver and time) move
    # together
    unit = np.arange(len(rows))
    if fabric and kept.size:
        h = healthy.take(kept)
        anchor = np.where(h.op == COPY, h.src, h.dst)
        key = np.stack([h.chunk, h.op, anchor, np.round(h.start_us, 9), np.round(h.end_us, 9)], 1)
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        unit[:kept.size] = first[inv.ravel()]   # each kept row's unit: its group's first row
    return _place(problem, rows, state, extra_deps, T, unit, fabric)


class _Steps:
    """The steps a detour takes, as a graph on the NPUs sorted by sender (``out_ptr``, ``src``, ``dst``, ``dur``;
    ``links`` and ``route`` per step): the surviving links on point-to-point topologies (their slowed times),
    the hops over surviving links on a fabric."""

    def __init__(self, problem: Problem, after: Problem, failed: np.ndarray, fabric: bool):
        topo = problem.topology
        if fabric:
            from .fabric_routes import surviving_hops

            h = surviving_hops(after.topology, ~failed, problem.chunk_bytes)   # slowed links at their new speed
            keep = np.array([len(s) == 1 for s in h.segments], bool)   # a hop through a store-and-forward switch
            ids = np.flatnonzero(keep)                                  # would be several rows
            src, dst, dur = h.src[ids], h.dst[ids], np.asarray(h.dur, np.float64)[ids]
            links = [list(np.asarray(h.links[k]).tolist()) for k in ids]
            route = [">".join(map(str, h.nodes[k])) for k in ids]
        else:
            ids = np.flatnonzero(~failed)
            src, dst = topo.src[ids], topo.dst[ids]
            dur = np.asarray(after.link_time_us, np.float64)[ids]
            links = [[int(k)] for k in ids]
            route = [""] * ids.size
        o = np.argsort(np.asarray(src), kind="stable")   # the topology's own order within a sender
        self.src, self.dst, self.dur = np.asarray(src, np.int64)[o], np.asarray(dst, np.int64)[o], dur[o]
        self.links = [links[k] for k in o.tolist()]
        self.route = [route[k] for k in o.tolist()]
        self.out_ptr = np.searchsorted(self.src, np.arange(problem.num_npus + 1)).astype(np.int64)
        # the links of each step padded with the id num_links (a link that carries nothing)
        self.link_pad = np.full((len(self.links), max([len(x) for x in self.links], default=1)), topo.num_links,
                                np.int64)
        for k, x in enumerate(self.links):
            self.link_pad[k, :len(x)] = x


def _below(parent: dict, c: int, u: int) -> set:
    """The NPUs whose way up chunk ``c``'s tree passes through ``u`` (u's subtree, u excluded)."""
    out = set()
    for (a, cc), _ in parent.items():
        if cc != c or a == u:
            continue
        x, seen = a, set()
        while (x, c) in parent and x not in seen:
            seen.add(x)
            x = parent[(x, c)]
            if x == u:
                out.add(a)
                break
    return out


def _nearest(tree: tuple, steps: _Steps, u: int, targets: set) -> list | None:
    """The steps of the shortest path in ``tree`` (``(dist, pred)`` from ``u``) to the nearest of ``targets``."""
    dist, pred = tree
    cand = [t for t in targets if t != u and np.isfinite(dist[t])]
    if not cand:
        return None
    return _hops(pred, steps, u, min(cand, key=lambda t: (dist[t], t)))


def _hops(pred, steps: _Steps, u: int, v: int) -> list:
    """The steps from ``u`` to ``v`` in a shortest-path tree (``pred``: each node's step from its parent)."""
    hops = []
    while v != u:
        e = int(pred[v])
        hops.append(e)
        v = int(steps.src[e])
    return hops[::-1]


def _place(problem: Problem, rows: list, state: FaultState, extra_deps: dict, T: float, unit=None,
           fabric: bool = False) -> Schedule:
    """``rows`` in dependency order (ties: planned start), each as early as its links are idle and every arrival it
    waits for has landed; ops set so that a stale relay's first arrival replaces its partial sum. The rows of one
    ``unit`` (an in-network multicast or reduction) are placed together."""
    R = len(rows)
    if not R:
        return Schedule.empty()
    unit = np.arange(R) if unit is None else np.asarray(unit, np.int64)
    by_dst: dict = {}
    for k, r in enumerate(rows):
        by_dst.setdefault((r[2], r[0]), []).append(k)
    # a kept row waits for every kept row its plan landed at its sender before it started, and for the detours
    # bound for that sender
    for k, r in enumerate(rows):
        c, u, start = r[0], r[1], r[3]
        if r[7]:
            if r[6] == ["first"]:   # a detour leaves once all its sender's kept arrivals have landed (of a
                # partial sum, those of the reduction: an All-Reduce's copies of the whole chunk come after it)
                r[6] = [j for j in by_dst.get((u, c), ())
                        if not rows[j][7] and (r[5] != REDUCE or rows[j][5] == REDUCE)]
                # and the whole chunk once the detours that bring it (or, at the collector, add to it) have
                r[6] += [j for j in extra_deps.get((u, c, COPY), []) + extra_deps.get((u, c, REDUCE), [])
                         if r[5] == COPY]
            continue
        tol = 1e-9 * max(1.0, start)
        # (by the healthy schedule's times: a slowed row lasts longer now, but landed before all the same)
        r[6] = [j for j in by_dst.get((u, c), ()) if not rows[j][7] and rows[j][10] <= start + tol]
        # a partial sum waits for the partial sums detoured to it; the whole chunk for those too (at the
        # collector they are part of it) and for the copy detoured to it
        r[6] += extra_deps.get((u, c, REDUCE), []) + (extra_deps.get((u, c, COPY), []) if r[5] == COPY else [])
    members: dict = {}
    for k in range(R):
        members.setdefault(int(unit[k]), []).append(k)
    deps = {g: {int(unit[j]) for k in m for j in rows[k][6]} - {g} for g, m in members.items()}
    indeg = {g: len(d) for g, d in deps.items()}
    succ: dict = {g: [] for g in members}
    for g, d in deps.items():
        for h in d:
            succ[h].append(g)
    ready0 = {}
    for v, c, t in zip(state.hold_npu.tolist(), state.hold_chunk.tolist(), state.hold_time.tolist()):
        ready0[(v, c)] = t
    for c, own in (state.pieces or {}).items():
        for v, _, t in own:
            ready0[(v, c)] = t
    busy: dict = {}
    free0 = np.asarray(state.link_free, np.float64)
    heap = [(rows[g][3], g) for g in members if indeg[g] == 0]
    heapq.heapify(heap)
    start = np.zeros(R)
    end = np.zeros(R)
    done = 0
    margin = 1e-6 * max(1.0, T)
    landed: dict = {}
    while heap:
        _, g = heapq.heappop(heap)
        m = members[g]
        lks = sorted({l for k in m for l in rows[k][8]})
        dur = rows[g][4]
        t = max([T] + [float(free0[l]) for l in lks] + [ready0.get((rows[k][1], rows[k][0]), T) for k in m]
                + [end[j] for k in m for j in rows[k][6] if int(unit[j]) != g])
        for k in m:
            if (rows[k][2], rows[k][0]) in landed:
                t = max(t, landed[(rows[k][2], rows[k][0])] + margin - dur)   # arrivals at one NPU land in turn
        t = earliest_idle(busy, lks, t, dur, 1e-12)
        for k in m:
            start[k], end[k] = t, t + dur
        for l in lks:
            busy.setdefault(l, []).append((t, t + dur))
        for k in m:
            key = (rows[k][2], rows[k][0])
            landed[key] = max(landed.get(key, 0.0), t + dur)
        done += 1
        for s in succ[g]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (rows[s][3], s))
    if done != len(members):
        raise TacosError("the detours wait on each other in a cycle")
    route = route_column_of([r[9] for r in rows]) if fabric else None
    sched = Schedule(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
                     start, end, np.array([r[5] for r in rows], np.int8), route=route)
    return _ops(problem, sched, state)


def _ops(problem: Problem, sched: Schedule, state: FaultState) -> Schedule:
    """A reduce row's op by the contributions: into an NPU that has not sent the chunk on yet when it lands (its
    own send comes later, or it sends none: the collector, or where a plan's reduction ends) a reduce; into one
    that has, its first arrival a copy (it replaces the stale partial sum) and the later ones a reduce."""
    col = collector_of(problem)
    sends: dict = {}
    for u, c, t, o in zip(sched.src.tolist(), sched.chunk.tolist(), sched.start_us.tolist(), sched.op.tolist()):
        if o == REDUCE:
            sends[(u, c)] = min(sends.get((u, c), np.inf), t)
    live = {(v, c) for c, own in (state.pieces or {}).items() for v, _, _ in own}
    op = sched.op.copy()
    seen: set = set()
    for i in np.lexsort((sched.start_us, sched.end_us)).tolist():
        if op[i] != REDUCE:
            continue
        v, c = int(sched.dst[i]), int(sched.chunk[i])
        # where the reduction completes (the collector, or wherever the healthy plan ends it) sends none on
        still = (v, c) in live and (v == int(col[c]) or sends.get((v, c), np.inf) >= float(sched.end_us[i]))
        if not still:
            if (v, c) not in seen:   # the first arrival since it sent its own: it replaces the stale sum
                op[i] = COPY
            seen.add((v, c))
    return sched.with_op(op)
