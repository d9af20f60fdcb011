"""Stragglers: synthesis when some NPUs join late (``collective.release_us``).

A late NPU neither sends nor receives before it joins, and its data exists from then on (the verifier enforces it:
:func:`tacos_bench.verify.rules.check_release`). Every backend takes such a problem through :func:`solve_released`,
a portfolio of plans (:func:`solvers.portfolio.run_portfolio`) compared by the verified time:

``exact``
    backends that model late NPUs themselves (capability ``release``: ``milp`` and ``cpsat``, copy collectives;
    :meth:`solvers.exact.common.ExactSolverBase.release_refusal` says what they refuse): the problem with its
    release times solved by the backend's own model, first, within the time limit; it wins ties, and its status
    and proven bound are the run's (``optimal`` only when proved for the model with the release times, or when
    the schedule kept meets a valid bound). The plans after it get the time that is left;
``wait``
    the backend's schedule of the problem without stragglers, started when the last NPU joins (StragglAR's
    "wait, then run"; every backend);
``from_release``
    copy collectives: the backend completes the collective from the state at 0, each late NPU's chunks held from
    its release and its links free from then on (:meth:`solvers.base.Solver.solve_from`, backends with
    ``from_state``), so the others move what they have while the straggler is away;
``straggle``
    reducing collectives (Reduce-Scatter, All-Reduce, Reduce, reducing tables), backends with ``from_state``:
    StragglAR's idea in general form. Phase 1: the NPUs present reduce among themselves (and, where several
    NPUs need a chunk, share the partial sum), on links that avoid the late NPUs. Phase 2, once a late NPU joins:
    its contribution goes to every NPU that needs the chunk, and the partial sum of the others to the late NPU,
    scheduled by the backend from that state. Each phase-2 arrival adds a disjoint set of contributions (a
    reduce) or brings a superset of what the receiver holds (a copy); a relay that would do neither makes the
    plan skip (the verifier replays every plan before it may win). A third variant, for chunks every NPU needs
    with one late contributor (All-Reduce with one straggler), makes phase 2 one copy problem
    (:func:`_relay_phase2`): the late share relayed among the present NPUs as a broadcast, and their partial sum
    sent to the late NPU from any of them, which waits for nothing (on ``switched8`` with 4 chunks per NPU it
    finishes 0.61 T after a release at T, against 0.71 T for the others and 0.57 T for the bound).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> from tacos_bench.verify import verify
>>> import solvers
>>> p = Problem(ring(4), Collective("all_reduce", 1, 64, release=((0, 500.0),)))
>>> res = solve_released(solvers.get_solver("greedy"), p, {})
>>> verify(p, res.schedule.to_schedule()).valid, res.candidate in ("wait", "straggle")
(True, True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from tacos_bench.collective import Collective
from tacos_bench.demand import table
from tacos_bench.errors import SolverError, TacosError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule

from .base import CAP_FROM_STATE, CAP_RELEASE, SolveResult, StartState
from .compose import fit_copies, link_last_use, mirrored, retime_from
from .portfolio import Candidate, RunContext, Skip, run_portfolio


def solve_released(backend, problem: Problem, options: Mapping[str, Any] | Any = None) -> SolveResult:
    """``problem`` (with late NPUs) through the plans of the module docstring; the result names the winning plan
    as its ``candidate`` and lists every plan tried or skipped."""
    opts = options if hasattr(options, "specific") else backend.options(options)
    t0 = time.perf_counter()
    ctx = RunContext(opts=opts)
    ctx.start = _Releasing(backend, problem.without_release())
    plans = PLANS
    if CAP_RELEASE in backend.capabilities:
        # the model runs first within the time limit; the plans after it get what is left
        limit = getattr(opts, "time_limit_s", None)
        ctx.deadline = None if limit is None else t0 + float(limit)
    else:
        plans = tuple(p for p in PLANS if p.name != Exact.name)
    out = run_portfolio(plans, problem, ctx, prefer=("exact", "wait", "from_release", "straggle"))
    runs = [ctx.run_stats.get(n, {}).get("result") for n in ("exact", "wait")]
    stats = {"jit_warmup_s": sum(float(r.stats.get("jit_warmup_s", 0.0) or 0.0) for r in runs if r is not None)}
    dt = time.perf_counter() - t0 - stats["jit_warmup_s"]
    sched = out.schedule
    plan = dict(candidate=out.winner,
                candidates_tried=tuple({"name": t.name, "time_s": t.time_s, "makespan_us": t.makespan_us}
                                       for t in out.tried),
                candidates_skipped=tuple({"name": n, "reason": r} for n, r in out.skipped),
                message=f"late NPUs: plan {out.winner}")
    model = runs[0]
    if model is not None and out.winner == Exact.name:
        # the model's own outcome: its status, proof and bound hold for the problem with its release times
        return replace(model, schedule=sched, stats={**model.stats, **stats}, **plan)
    status, bound, proof = "feasible", None, None
    if model is not None and model.best_bound_us is not None:
        # the model's bound (proven for this problem) still holds when another plan's schedule is kept
        bound = model.best_bound_us
        if sched.makespan_us <= bound * (1 + 1e-9):
            status, proof = "optimal", "lower_bound"
    return SolveResult(status, sched, objective_us=sched.makespan_us, best_bound_us=bound, solve_time_s=dt,
                       stats=stats, stop_reason="finished", solution_source="heuristic", proof=proof, **plan)


@dataclass(frozen=True)
class _Releasing:
    backend: Any
    healthy: Problem


class Exact(Candidate):
    """Backends that model late NPUs (capability ``release``): the problem with its release times, solved by the
    backend's own model."""

    name = "exact"
    trusted = False

    def applies(self, problem, ctx):
        return ctx.start.backend.release_refusal(problem)

    def run(self, problem, ctx):
        try:
            res = ctx.start.backend.solve(problem, ctx.opts)
        except SolverError as e:   # e.g. a model too large to build: the plans after it still run
            raise Skip(str(e)) from None
        ctx.run_stats[self.name] = {"result": res}
        if res.schedule is None:
            raise Skip(f"the model found no schedule ({res.status}{': ' + res.message if res.message else ''})")
        return res.schedule.to_schedule()


class Wait(Candidate):
    """The schedule of the problem without stragglers, started when the last NPU joins."""

    name = "wait"
    stop_at_bound = False
    trusted = False

    def run(self, problem, ctx):
        r: _Releasing = ctx.start
        opts = ctx.opts
        if ctx.deadline is not None:   # after the exact plan: the time that is left
            opts = r.backend.options({**opts.as_dict(),
                                      "time_limit_s": max(0.01, ctx.deadline - time.perf_counter())})
        res = r.backend.solve(r.healthy, opts)
        ctx.run_stats[self.name] = {"result": res}
        if res.schedule is None:
            raise Skip(f"the backend found no schedule ({res.status})")
        return res.schedule.to_schedule().shifted(float(problem.release_us.max()))


class FromRelease(Candidate):
    """Copy collectives: completed from the state at 0, each late NPU's chunks and links from its release."""

    name = "from_release"
    trusted = False

    def applies(self, problem, ctx):
        return _stateless(ctx) or (None if problem.collective.copies else "copy collectives only")

    def run(self, problem, ctx):
        r: _Releasing = ctx.start
        hp = r.healthy
        src = np.asarray(hp.sources, np.int64)
        return _solve_from(r.backend, hp, ctx.opts, src, np.arange(hp.num_chunks), problem.release_us[src],
                           problem.link_release_us())


class Straggle(Candidate):
    """Reducing collectives: the NPUs present reduce among themselves, the late ones join in when they arrive."""

    name = "straggle"
    trusted = False

    def applies(self, problem, ctx):
        if _stateless(ctx):
            return _stateless(ctx)
        if not problem.collective.reduces:
            return "reducing collectives only"
        if np.all(problem.release_us > 0):
            return "every NPU is late"
        return None

    def run(self, problem, ctx):
        try:
            return _best(problem, [lambda share=share, relay=relay: _straggle(ctx.start.backend, problem, ctx.opts,
                                                                              share, relay)
                                   for share, relay in ((True, False), (False, False), (True, True))])
        except TacosError as e:
            raise Skip(str(e)) from None


PLANS: tuple[Candidate, ...] = (Exact(), Wait(), FromRelease(), Straggle())


# ---------------------------------------------------------------------------- helpers
def _stateless(ctx) -> str | None:
    """Why the backend cannot run a plan that starts from a state, or None."""
    return None if CAP_FROM_STATE in ctx.start.backend.capabilities else "the backend cannot start from a state"


def _solve_from(backend, problem: Problem, opts, hold_npu, hold_chunk, hold_time, link_free,
                links=None, alive=None) -> Schedule:
    """``problem`` (a copy collective) completed by ``backend`` from the holds given, placed in absolute time."""
    n = problem.num_npus
    d = problem.demand
    if problem.collective.general and not (d.unicast or d.multicast_all):
        # copies to subsets: one unicast chunk per (chunk, destination), as the fresh synthesis expands them
        ex, parent = d.expanded_unicast()
        sub = Problem(problem.topology, Collective("custom", demand=ex))
        by_chunk = {int(c): (int(u), float(t)) for u, c, t in zip(np.asarray(hold_npu).tolist(),
                                                                  np.asarray(hold_chunk).tolist(),
                                                                  np.asarray(hold_time).tolist())}
        hu = [by_chunk[int(c)][0] for c in parent]
        ht = [by_chunk[int(c)][1] for c in parent]
        s = _solve_from(backend, sub, opts, hu, np.arange(parent.size), ht, link_free, links, alive)
        return s.with_chunks(parent)
    links = np.ones(problem.num_links, bool) if links is None else links
    alive = np.ones(n, bool) if alive is None else alive
    free = np.where(links, link_free, np.inf)
    start = StartState(links, np.asarray(hold_npu, np.int64), np.asarray(hold_chunk, np.int64), alive,
                       hold_time=np.asarray(hold_time, np.float64), link_free=free)
    sched = backend.solve_from(problem, start, opts).schedule.to_schedule()
    if problem.topology.is_fabric:   # the fabric engine plans with the state's times itself
        return sched
    return retime_from(problem, sched, link_free=free, hold_npu=start.hold_npu, hold_chunk=start.hold_chunk,
                       hold_time=start.hold_time)


def _custom(problem: Problem, sources, destinations, op: str) -> Problem:
    d = table(problem.num_npus, problem.chunk_bytes, sources, destinations, [op] * len(sources))
    return Problem(problem.topology, Collective("custom", demand=d))


def _best(problem: Problem, plans) -> Schedule:
    """The soonest valid schedule of ``plans`` (callables); the first error when none is."""
    from tacos_bench.verify import check

    best, first_error = None, None
    for plan in plans:
        try:
            s = plan()
        except TacosError as e:
            first_error = first_error or e
            continue
        if not check(problem, s).valid:
            continue
        if best is None or s.makespan_us < best.makespan_us:
            best = s
    if best is None:
        raise first_error or TacosError("no variant of the plan gave a valid schedule")
    return best


def _straggle(backend, problem: Problem, opts, share: bool = True, relay: bool = False) -> Schedule:
    """The ``straggle`` plan (module docstring). ``share``: where several NPUs need a chunk, the present ones
    first share their partial sum (phase 1b) and the late NPU's contribution goes to one of them near it; without,
    it goes to the NPU the present ones reduced into (chosen near the late NPU), which then sends the whole chunk to
    everyone (no partial sum is copied twice: the better one when the straggler is not late by much)."""
    topo, n = problem.topology, problem.num_npus
    rel = problem.release_us
    late = rel > 0
    present = ~late
    d = problem.demand
    C = d.num_chunks
    every = np.arange(n)
    srcs = [d.sources_of(c) if d.src_ptr[c + 1] > d.src_ptr[c] else every for c in range(C)]
    dsts = [d.destinations_of(c) if d.dst_ptr[c + 1] > d.dst_ptr[c] else every for c in range(C)]
    nodes_late = np.concatenate([late, np.zeros(topo.num_nodes - n, bool)])
    keep = ~(nodes_late[topo.src] | nodes_late[topo.dst])
    # a late NPU's partner: the present NPUs it is linked to (through switches on a fabric), in turn per chunk
    near = {int(v): _partners(problem, int(v), present) for v in np.flatnonzero(late)}

    # phase 1: each chunk's present contributors reduce into one present NPU h(c)
    h = np.full(C, -1, np.int64)
    p1_src, p1_dst, p1_chunk = [], [], []
    for c in range(C):
        e_c = srcs[c][present[srcs[c]]]
        if not e_c.size:
            continue
        ds = dsts[c]
        here = ds[present[ds]]
        if ds.size == 1 and here.size:
            h[c] = int(here[0])
        else:
            v = int(ds[late[ds]][0]) if late[ds].any() else int(np.flatnonzero(late)[0])
            h[c] = int(near[v][c % near[v].size]) if ds.size == 1 or not share else int(here[c % here.size])
        if e_c.size == 1:
            h[c] = int(e_c[0])   # nothing to combine: the one contribution is the partial sum
            continue
        p1_src.append([] if e_c.size == present.sum() else e_c)   # [] every NPU: the late ones are not alive
        p1_dst.append([h[c]])
        p1_chunk.append(c)
    parts = []
    link_free = problem.link_release_us().copy()
    ready = {}   # (npu, chunk) -> when it holds the present NPUs' partial sum
    for c in range(C):
        if h[c] >= 0:
            ready[(int(h[c]), c)] = 0.0
    if p1_chunk:
        p1 = _custom(problem, p1_src, p1_dst, "reduce")
        alive = present.copy()

        def copy_solve(mp: Problem) -> Schedule:
            k = ~(nodes_late[mp.topology.src] | nodes_late[mp.topology.dst])
            srcs_m = np.asarray(mp.sources, np.int64)
            return _solve_from(backend, mp, opts, srcs_m, np.arange(mp.num_chunks), np.zeros(mp.num_chunks),
                               np.zeros(mp.num_links), links=k, alive=alive)

        s1 = mirrored(p1, copy_solve)
        s1 = s1.with_chunks(p1_chunk)
        parts.append(s1)
        at_h = s1.dst == h[s1.chunk]
        for c, t in zip(s1.chunk[at_h].tolist(), s1.end_us[at_h].tolist()):
            ready[(int(h[c]), c)] = max(ready[(int(h[c]), c)], t)
        link_free = np.maximum(link_free, link_last_use(problem, s1))

    # phase 1b: where several present NPUs need a chunk, h(c) shares the partial sum with them
    share = [(c, [int(x) for x in dsts[c][present[dsts[c]]] if x != h[c]]) for c in range(C)
             if h[c] >= 0 and share]
    share = [(c, ds) for c, ds in share if ds]
    if share:
        p1b = _custom(problem, [[int(h[c])] for c, _ in share],
                      [[] if len(ds) + 1 == present.sum() else ds for _, ds in share], "copy")
        s1b = _solve_from(backend, p1b, opts, [int(h[c]) for c, _ in share], np.arange(len(share)),
                          [ready[(int(h[c]), c)] for c, _ in share], link_free, links=keep, alive=present.copy())
        s1b = s1b.with_chunks([c for c, _ in share])
        parts.append(s1b)
        for c, v, t in zip(s1b.chunk.tolist(), s1b.dst.tolist(), s1b.end_us.tolist()):
            if v < n and present[v]:
                ready[(v, c)] = min(ready.get((v, c), np.inf), t)
        link_free = np.maximum(link_free, link_last_use(problem, s1b))

    if relay:
        parts.append(_relay_phase2(backend, problem, opts, srcs, dsts, late, ready, link_free))
        sched = Schedule.concat(parts)
        mask = np.zeros(len(sched), bool)
        mask[len(sched) - len(parts[-1]):] = True
        return with_ops(problem, sched, mask)

    # phase 2a: each late NPU's contribution to the chunk's one destination, or to a collector that holds the
    # present NPUs' partial sum (or is the first late contributor); the partial sum to a late destination
    atoms = []   # (source, target, chunk, hold time)
    collector = np.full(C, -1, np.int64)
    for c in range(C):
        ds, lv = dsts[c], srcs[c][late[srcs[c]]].tolist()
        if ds.size > 1:
            if h[c] >= 0 and lv:
                cands = [int(u) for u in near[lv[0]] if (int(u), c) in ready]
                collector[c] = cands[c % len(cands)] if cands else h[c]
            elif lv:
                collector[c] = lv[0]
            targets = [int(collector[c])] if lv else []
        else:
            targets = [int(ds[0])]
        for v in lv:
            if v not in targets:
                atoms.append((v, targets[0], c, rel[v]))
        if ds.size == 1 and late[ds[0]] and h[c] >= 0:
            atoms.append((int(h[c]), int(ds[0]), c, ready[(int(h[c]), c)]))
    rows = []
    if atoms:
        p2a = _custom(problem, [[a[0]] for a in atoms], [[a[1]] for a in atoms], "copy")
        s2a = _solve_from(backend, p2a, opts, [a[0] for a in atoms], np.arange(len(atoms)), [a[3] for a in atoms],
                          link_free)
        rows.append((s2a, [a[2] for a in atoms], [a[0] for a in atoms], [a[3] for a in atoms], None,
                     [a[1] for a in atoms]))
    # phase 2b: where several NPUs need a chunk, its collector sends the whole of it to all of them
    bcast = [c for c in range(C) if collector[c] >= 0]
    if bcast:
        done = {}
        if atoms:
            for (v, to, c, _), t in zip(atoms, _arrivals(rows[0][0], len(atoms))):
                done[c] = max(done.get(c, 0.0), t if to == collector[c] else 0.0)
        hold = [max(ready.get((int(collector[c]), c), 0.0 if late[collector[c]] else np.inf), done.get(c, 0.0),
                    rel[collector[c]]) for c in bcast]
        p2b = _custom(problem, [[int(collector[c])] for c in bcast],
                      [[] if dsts[c].size == n else [int(x) for x in dsts[c] if x != collector[c]] for c in bcast],
                      "copy")
        # a late NPU's up-links carry its own contributions (phase 2a): it does not relay whole chunks
        quiet = nodes_late.copy()
        quiet[collector[bcast]] = False
        s2b = _solve_from(backend, p2b, opts, [int(collector[c]) for c in bcast], np.arange(len(bcast)), hold,
                          link_free, links=~quiet[topo.src])
        # a collector sends once every contribution bound for it has arrived (phase 2a, as placed below)
        deps = {j: [k for k, a in enumerate(atoms) if a[2] == c and a[1] == collector[c]] for j, c in enumerate(bcast)}
        rows.append((s2b, bcast, [int(collector[c]) for c in bcast], hold, deps, None))
    if rows:
        parts.append(_phase2(problem, rows, link_free))
    fixed = sum(len(x) for x in parts[:-1]) if rows else sum(len(x) for x in parts)
    sched = Schedule.concat(parts)
    mask = np.zeros(len(sched), bool)
    mask[fixed:] = True
    return with_ops(problem, sched, mask)


def _relay_phase2(backend, problem: Problem, opts, srcs, dsts, late, ready, link_free) -> Schedule:
    """Phase 2 of chunks every NPU needs, as one copy problem for the backend from the state phase 1 leaves: the
    late contributor's share of each chunk goes to the present NPUs (the first arrival is a reduce into their
    partial sum, a relay after it a copy of the whole sum, so the present NPUs spread it among themselves), and
    the partial sum of the present NPUs goes to the late NPU from any of them (a reduce into its share, or a
    copy of the whole sum). The latter waits for no arrival, so it fills the links the relays leave idle early on.
    Both are copies to every NPU that lacks them (two chunks per chunk), so the backend relays them as such."""
    n, C = problem.num_npus, len(srcs)
    rel = problem.release_us
    present = np.flatnonzero(~late).tolist()
    sender = []   # each chunk's late contributor
    holds = []    # (npu, chunk of the copy problem, time): share c at its late NPU, partial sum C + c at the others
    for c in range(C):
        lc = srcs[c][late[srcs[c]]]
        if dsts[c].size != n or lc.size != 1 or any((x, c) not in ready for x in present):
            raise TacosError("the relay needs chunks every NPU needs, one late contributor each, and the partial "
                             "sum at every present NPU")
        sender.append(int(lc[0]))
        holds.append((sender[-1], c, float(rel[lc[0]])))
        holds += [(x, C + c, float(ready[(x, c)])) for x in present]
    p2 = _custom(problem, [[u] for u in sender] + [[present[0]]] * C, [[]] * (2 * C), "copy")
    hv, hc, ht = zip(*holds)
    return _solve_from(backend, p2, opts, hv, hc, ht, link_free).with_chunks(np.concatenate([np.arange(C)] * 2))


def _phase2(problem: Problem, rows, link_free) -> Schedule:
    """Phase 2 placed two ways, the sooner kept: both plans as one list schedule (:func:`_placed`), or phase 2a as
    planned with the copies of 2b fitted into the gaps it leaves (:func:`solvers.compose.fit_copies`)."""
    best = _placed(problem, rows, link_free)
    if len(rows) == 2:
        (s2a, a_chunk, *_), (s2b, b_chunk, b_src, b_hold, *_) = rows
        holds = {(int(u), j): float(t) for j, (u, t) in enumerate(zip(b_src, b_hold))}
        try:
            fitted = fit_copies(problem, s2a, s2b, holds, link_free)
        except TacosError:
            return best
        other = Schedule.concat([s2a.with_chunks(a_chunk), fitted.with_chunks(b_chunk)])
        if other.makespan_us < best.makespan_us:
            return other
    return best


# the list placement of phase 2 looks this many groups ahead in the plan's order for one that can start sooner
WINDOW = 64


def _arrivals(schedule: Schedule, count: int) -> list:
    """Per chunk of a unicast table schedule, when its one destination first receives it (its last row's end)."""
    out = [0.0] * count
    for j, t in zip(schedule.chunk.tolist(), schedule.end_us.tolist()):
        out[j] = max(out[j], t)
    return out


def _placed(problem: Problem, phases, link_free) -> Schedule:
    """The rows of phase 2a and 2b placed together as a list schedule: each multicast group (one chunk, sender
    and time in the plan) in the plan's order as soon as its links are free and its sender holds the chunk
    (a collector: once the contributions bound for it have arrived), lasting as planned. Placing the two plans
    together lets a link interleave them instead of carrying one after the other."""
    from tacos_bench.faults import row_link_pairs

    groups = []   # (planned start, phase, rows)
    for ph, (sched, *_) in enumerate(phases):
        key = np.stack([sched.chunk, sched.src, np.round(sched.start_us, 9), np.round(sched.end_us, 9)], 1)
        _, inv = np.unique(key, axis=0, return_inverse=True)
        for g in np.unique(inv.ravel()):
            members = np.flatnonzero(inv.ravel() == g)
            groups.append((float(sched.start_us[members[0]]), ph, members))
    row_links = []
    for sched, *_ in phases:
        row, link = row_link_pairs(problem.topology, sched)
        per = [[] for _ in range(len(sched))]
        for r_, l_ in zip(row.tolist(), link.tolist()):
            per[r_].append(l_)
        row_links.append(per)
    free = np.asarray(link_free, np.float64).copy()
    hold = [{} for _ in phases]
    for ph, (_, _, src, t, *_) in enumerate(phases):
        for j, (u, tt) in enumerate(zip(src, t)):
            hold[ph][(int(u), j)] = float(tt)
    start = [np.full(len(p[0]), np.nan) for p in phases]
    pending = sorted(groups, key=lambda g: (g[0], g[1]))
    arrived = [np.full(len(p[1]), -np.inf) for p in phases]
    while pending:
        # among the next WINDOW groups in the plan's order, the one that can start first (ties: plan order)
        best = None
        for gi, (_, ph, members) in enumerate(pending[:WINDOW]):
            sched, _, _, _, deps, _ = phases[ph]
            i0 = int(members[0])
            j, u = int(sched.chunk[i0]), int(sched.src[i0])
            ready = hold[ph].get((u, j), np.inf)
            if deps is not None:
                if any(not np.isfinite(arrived[0][k]) for k in deps[j]):
                    continue
                ready = max([ready] + [arrived[0][k] for k in deps[j]])
            if not np.isfinite(ready):
                continue
            t = max([ready] + [free[l] for i in members.tolist() for l in row_links[ph][i]])
            if best is None or t < best[0] - 1e-9:
                best = (t, gi)
        if best is None:
            raise TacosError("phase 2 of the straggler plan could not be placed")
        gi = best[1]
        _, ph, members = pending[gi]
        sched = phases[ph][0]
        i0 = int(members[0])
        j = int(sched.chunk[i0])
        ready = best[0]
        pending.pop(gi)
        links = sorted({l for i in members.tolist() for l in row_links[ph][i]})
        t0 = max([ready] + [free[l] for l in links])
        dur = float(sched.end_us[i0] - sched.start_us[i0])
        for i in members.tolist():
            start[ph][i] = t0
            v = int(sched.dst[i])
            if v < problem.num_npus:
                hold[ph][(v, j)] = min(hold[ph].get((v, j), np.inf), t0 + dur)
                targets = phases[ph][5]
                if targets is not None and v == targets[j]:
                    arrived[ph][j] = max(arrived[ph][j], t0 + dur)
        for l in links:
            free[l] = t0 + dur
    out = []
    for ph, (sched, chunk_of, *_) in enumerate(phases):
        cm = np.asarray(chunk_of, np.int64)
        out.append(Schedule(cm[sched.chunk], sched.src, sched.dst, start[ph], start[ph] + (sched.end_us - sched.start_us),
                            sched.op, route=sched.route))
    return Schedule.concat(out)


def _partners(problem: Problem, v: int, present: np.ndarray) -> np.ndarray:
    """The present NPUs nearest ``v`` in time (a chunk's shortest path, through switches on a fabric, within 1.5x of
    the nearest one's): a DGX-like node's NVSwitch peers before the NICs."""
    from tacos_bench.graph import shortest_path_tree

    topo = problem.topology
    d = shortest_path_tree(topo.num_nodes, np.asarray(topo.out_ptr, np.int64), np.asarray(topo.dst, np.int64),
                           np.asarray(problem.link_time_us, np.float64), int(v))[0][:problem.num_npus]
    cand = np.flatnonzero(present & np.isfinite(d))
    if not cand.size:
        return np.flatnonzero(present)
    return cand[d[cand] <= 1.5 * d[cand].min()]


def with_ops(problem: Problem, schedule: Schedule, mask=None) -> Schedule:
    """``schedule`` with the op of each NPU-to-NPU row that ``mask`` marks (default: every row) set by a replay of
    the contributions: a copy where the payload holds all the receiver has, else a reduce where it is disjoint
    from it (rows through a switch that ends there keep theirs); raises :class:`TacosError` for a row that would
    be neither."""
    n, C = problem.num_npus, problem.num_chunks
    T = len(schedule)
    if not T:
        return schedule
    d = problem.demand
    state: dict = {}
    for c in range(C):
        s = d.sources_of(c) if d.src_ptr[c + 1] > d.src_ptr[c] else range(n)
        for v in s:
            state[(int(v), c)] = 1 << int(v)
    order = schedule.event_order(1e-9 * max(1.0, schedule.makespan_us))
    op = schedule.op.copy()
    chosen = np.ones(T, bool) if mask is None else np.asarray(mask, bool)
    chunk, src, dst = schedule.chunk.tolist(), schedule.src.tolist(), schedule.dst.tolist()
    payload = [0] * T
    for e in order.tolist():
        if e >= T:
            i = e - T
            payload[i] = state.get((src[i], chunk[i]), 0)
            continue
        i = e
        if src[i] >= n or dst[i] >= n:
            continue
        key = (dst[i], chunk[i])
        cur, v = state.get(key, 0), payload[i]
        if not chosen[i]:
            state[key] = v if op[i] == COPY else cur | v
        elif v & cur == cur:
            op[i], state[key] = COPY, v
        elif cur & v == 0:
            op[i], state[key] = REDUCE, cur | v
        else:
            raise TacosError(f"a relay of chunk {chunk[i]} into NPU {dst[i]} would count a contribution twice")
    return schedule.with_op(op)
