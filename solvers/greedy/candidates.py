"""The candidates of the greedy family on point-to-point topologies: one class per algorithm.

Every copy problem the greedy solves (an All-Gather, a Broadcast, ... and each copy phase of a reducing
collective) goes through one portfolio (:func:`solvers.portfolio.run_portfolio`) over :data:`COPY_CANDIDATES`,
in this order:

``decomposition``
    All-Gather: the tier decomposition (:mod:`solvers.greedy.decomposition`), where the topology has one.
``tacos``
    All-Gather with topology-aware rules: the TACOS rule, one run (at the bound on meshes in a fraction of the
    rules' time); beyond ``tiered_max_pairs`` it stands in for the rules when there is no decomposition.
``rules``
    The greedy with the options' own rules (TACOS's for ``greedy``; the topology-aware ones for
    ``greedy_plus``): every copy problem's first schedule but an All-Gather's.
``rarest``
    All-Gather with topology-aware rules: TACOS with the globally rarest chunk first, more seeds on small
    problems (``rarest_work``).
``trees``
    All-Gather: spanning trees packed by link load, then a greedy along them (:mod:`solvers.greedy.trees`).
``reserve_scatter``
    Scatter (so Gather, time-reversed): chunks routed one at a time by reservation
    (:func:`solvers.greedy.reserve.reserve_schedule`).
``relabel``
    Broadcast and Scatter: the greedy on relabelled copies of the problem (:func:`relabelling`).
``reserve_broadcast``
    Broadcast (so Reduce): (chunk, NPU) requests routed by reservation in squeaky-wheel rounds
    (:func:`solvers.greedy.reserve.reserve_broadcast`).
``flow``
    Gather, Scatter, All-to-All: routes from the multicommodity-flow LP, list-scheduled.
``list``
    All-Gather and Broadcast: the list schedule over the links (:mod:`solvers.list_schedule`).

The stop bound is :func:`tacos_bench.bounds.cheap_bound_us` for an All-Gather and
:func:`tacos_bench.bounds.root_pipeline_bound_us` for a Broadcast or Scatter. On equal makespans the order
:data:`PREFER` decides (the greedy's own schedules first).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from tacos_bench.collective import ALL_GATHER, BROADCAST, SCATTER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem

from ..portfolio import Candidate, RunContext, Skip
from .options import AUTO_RESTARTS_MAX, COMPACT_MIN_ROWS, RELABEL_RESTARTS, GreedyOptions, restart_count

# the options that select the topology-aware rules, at their TACOS values (GreedyOptions' defaults)
TACOS_RULES = {k: getattr(GreedyOptions(), k) for k in ("imports", "import_gate", "chunk_order", "link_order",
                                                        "group_matching")}
# ties: the greedy's own schedules first, then the other All-Gather candidates, then the rooted ones in run order
PREFER = ("rules", "tacos", "rarest", "decomposition", "trees", "reserve_scatter", "relabel", "reserve_broadcast")


def greedy_run(problem: Problem, opts: GreedyOptions, ctx: RunContext, stats: dict | None = None):
    """One call of :func:`solvers.greedy.engine.greedy_all_gather` with the context's deadline, output and
    threads (its restarts included)."""
    from .engine import greedy_all_gather

    st: dict = {} if stats is None else stats
    sched = greedy_all_gather(problem, seed=opts.seed, deadline=ctx.deadline, opts=opts, stats=st,
                              output=ctx.output, threads=ctx.threads, start=ctx.start)
    # each restart's end is an anytime point, not a statistic
    ctx.points.extend(zip(st.pop("restart_ends", ()), st.get("makespans_us", ())))
    return sched


def _pairs(problem: Problem) -> int:
    return problem.num_npus * problem.num_chunks


def _all_gather_only(problem: Problem) -> str | None:
    if problem.kind != ALL_GATHER:
        return f"All-Gather only (this is {problem.kind})"
    if problem.num_npus < 2:
        return "one NPU: nothing to gather"
    return None


def _tiered_too_big(problem: Problem, opts: GreedyOptions) -> bool:
    """Beyond ``tiered_max_pairs`` the tiered kernel does not run an All-Gather."""
    return opts.tiered and _pairs(problem) >= opts.tiered_max_pairs


def _rooted(problem: Problem, kinds: tuple[str, ...]) -> str | None:
    if problem.kind not in kinds or not problem.collective.rooted:
        return f"{' and '.join(kinds)} only (this is {problem.kind})"
    if problem.num_npus < 3:
        return "fewer than 3 NPUs: one way to send"
    return None


class Decomposition(Candidate):
    """All-Gather as a tier decomposition: each rail's All-Gather by the greedy, then one hop to every group
    peer (groups must be complete)."""

    name = "decomposition"
    switch = "decompose"

    def applies(self, problem, ctx):
        why = _all_gather_only(problem)
        if why is None and np.ptp(np.asarray(problem.link_time_us)) == 0:
            why = "one link speed tier: no groups of faster links"
        return why

    def run(self, problem, ctx):
        from .decomposition import hier_compact_all_gather

        compact = ctx.output != "table" and (problem.num_npus - 1) * problem.num_chunks > COMPACT_MIN_ROWS
        t0 = time.perf_counter()
        try:
            dec = hier_compact_all_gather(problem, seed=ctx.opts.seed, threads=ctx.threads, in_memory=not compact)
        except SolverError as e:
            raise Skip(str(e)) from None
        finally:
            ctx.notes["decomposition_s"] = time.perf_counter() - t0
        ctx.run_stats[self.name] = {"engine": "tiers", "output": "compact" if dec.path is not None else "table",
                                    "restarts": 1, "restarts_run": 1, "best_restart": 0, "best_seed": ctx.opts.seed,
                                    "makespans_us": [dec.makespan_us], "transfers": len(dec)}
        return dec

    def finish(self, sched):
        # kept in memory unless it had to stream to disk: the caller wants a table then
        return sched.to_schedule() if sched.path is None else sched

    def warmup(self, problem, opts):
        from .decomposition import warmup

        return warmup()


class Tacos(Candidate):
    """The TACOS rule (random chunk order, earliest-finish link), one run, beside topology-aware rules."""

    name = "tacos"
    switch = "tacos_candidate"

    def applies(self, problem, ctx):
        why = _all_gather_only(problem)
        if why is None and not ctx.opts.tiered:
            why = "the options' own rules are TACOS's (candidate rules)"
        if why is None and not (ctx.opts.tacos_candidate or _tiered_too_big(problem, ctx.opts)):
            why = "tacos_candidate=false"
        return why

    def switched_on(self, opts):
        return None   # beyond tiered_max_pairs it stands in for the rules (applies decides)

    def run(self, problem, ctx):
        if _tiered_too_big(problem, ctx.opts) and ctx.best is not None:
            raise Skip(f"beyond tiered_max_pairs ({ctx.opts.tiered_max_pairs}) the decomposition stands in for "
                       "the rules")
        st: dict = {}
        sched = greedy_run(problem, replace(ctx.opts, **TACOS_RULES, restarts=1, restart_work=0), ctx, st)
        ctx.run_stats[self.name] = st
        return sched

    def warmup(self, problem, opts):
        from .engine import kernel_for, warmup

        return warmup((kernel_for(problem, replace(opts, **TACOS_RULES, restarts=1, restart_work=0)),))


class Rules(Candidate):
    """The greedy with the options' own matching rules (every restart they ask for)."""

    name = "rules"

    def applies(self, problem, ctx):
        if problem.kind == ALL_GATHER and _tiered_too_big(problem, ctx.opts):
            return (f"{problem.num_npus} NPUs x {problem.num_chunks} chunks >= tiered_max_pairs "
                    f"({ctx.opts.tiered_max_pairs}): the tiered kernel does not run at this size")
        return None

    def run(self, problem, ctx):
        st: dict = {}
        sched = greedy_run(problem, ctx.opts, ctx, st)
        ctx.run_stats[self.name] = st
        return sched

    def warmup(self, problem, opts):
        from .engine import kernel_for, warmup

        return warmup((kernel_for(problem, opts, resume=False),))


class Rarest(Candidate):
    """TACOS with the globally rarest chunk first (``chunk_order=rarest``), with more seeds on small problems
    (up to 4 while NPUs x chunks x seeds stays within ``rarest_work``)."""

    name = "rarest"
    switch = "rarest_candidate"
    budget = ("rarest_work",)

    def applies(self, problem, ctx):
        why = _all_gather_only(problem)
        if why is None and not ctx.opts.tiered:
            why = "the options' own rules are TACOS's"
        if why is None and _tiered_too_big(problem, ctx.opts):
            why = f"NPUs x chunks >= tiered_max_pairs ({ctx.opts.tiered_max_pairs})"
        return why

    def _opts(self, problem, opts):
        seeds = int(np.clip(opts.rarest_work // max(_pairs(problem), 1), 1, AUTO_RESTARTS_MAX))
        return replace(opts, **{**TACOS_RULES, "chunk_order": "rarest"}, restarts=seeds, restart_work=0)

    def run(self, problem, ctx):
        st: dict = {}
        sched = greedy_run(problem, self._opts(problem, ctx.opts), ctx, st)
        ctx.run_stats[self.name] = st
        return sched

    def warmup(self, problem, opts):
        from .engine import kernel_for, warmup

        return warmup((kernel_for(problem, self._opts(problem, opts)),))


class Trees(Candidate):
    """Spanning trees packed by link load (best of 4 packings), then a greedy that sends each chunk along its
    tree first (up to ``tree_max_pairs`` NPUs x chunks)."""

    name = "trees"
    switch = "tree_candidate"
    budget = ("tree_max_pairs",)

    def applies(self, problem, ctx):
        why = _all_gather_only(problem)
        if why is None and _pairs(problem) > ctx.opts.tree_max_pairs:
            why = f"{problem.num_npus} NPUs x {problem.num_chunks} chunks > tree_max_pairs ({ctx.opts.tree_max_pairs})"
        return why

    def run(self, problem, ctx):
        from .trees import tree_all_gather

        sched = tree_all_gather(problem, seed=ctx.opts.seed, max_pairs=ctx.opts.tree_max_pairs)
        if sched is not None:
            ctx.run_stats[self.name] = {"engine": "trees", "output": "table", "restarts": 1, "restarts_run": 1,
                                        "best_restart": 0, "best_seed": ctx.opts.seed,
                                        "makespans_us": [sched.makespan_us], "transfers": len(sched)}
        return sched

    def warmup(self, problem, opts):
        from .trees import warmup

        return _once("trees", warmup)


class ReserveScatter(Candidate):
    """Scatter: the chunks routed one at a time, farthest first, each on its earliest-arrival path through the
    links already reserved, late chunks moved ahead in squeaky-wheel rounds (``reserve_tries`` runs)."""

    name = "reserve_scatter"
    switch = "reserve_tries"
    budget = ("reserve_work",)

    def applies(self, problem, ctx):
        return _rooted(problem, (SCATTER,))

    def run(self, problem, ctx):
        from .reserve import reserve_schedule

        rst: dict = {}
        sched = reserve_schedule(problem, seed=ctx.opts.seed, tries=int(ctx.opts.reserve_tries),
                                 bound_us=ctx.stop_bound(), deadline=ctx.deadline, stats=rst,
                                 work=ctx.opts.reserve_work)
        ctx.notes.update(rst)
        return sched

    def warmup(self, problem, opts):
        from .reserve import warmup

        return _once("reserve", warmup)


class Relabel(Candidate):
    """The greedy (at most 2 seeds) on up to ``relabel_tries`` relabelled copies of a rooted problem (NPUs
    numbered by hops from the root, then from its neighbours spread apart; later tries rotate them, then
    random labels), each schedule mapped back; more than one copy only on small problems with one link speed
    (``relabel_work``)."""

    name = "relabel"
    switch = "relabel_tries"
    budget = ("relabel_work",)

    def applies(self, problem, ctx):
        return _rooted(problem, (BROADCAST, SCATTER))

    def run(self, problem, ctx):
        from tacos_bench.topology.relabel import relabel_problem, relabel_schedule

        from .relabelling import attempt_seed, relabelling

        opts = ctx.opts
        tries = int(opts.relabel_tries)
        # more than one copy only with one link speed: there the links are interchangeable and the labels are
        # all that differs (torus8x8: seeds 7, 11, 14, 18, 19 need the third copy); with several speeds the
        # copies beyond the first never helped (hetero_mesh4x4, hetero64 Broadcast) and cost a run each
        if np.ptp(np.asarray(problem.link_time_us)) > 0:
            tries = min(tries, 1)
        tries = min(tries, max(1, opts.relabel_work // max(_pairs(problem), 1)))
        runs = min(RELABEL_RESTARTS, restart_count(problem, opts))
        best, chosen, times = None, None, []
        for attempt in range(tries):
            so_far = [s.makespan_us for s in (ctx.best, best) if s is not None]
            if so_far and ctx.at_bound(min(so_far)):
                break
            if ctx.past_deadline():
                ctx.notes["relabel_stopped"] = "time limit"
                break
            perm = relabelling(problem, attempt, opts.seed)
            copy = relabel_problem(problem, perm)
            cand = greedy_run(copy, replace(opts, seed=attempt_seed(opts.seed, attempt), restarts=runs,
                                            restart_work=0), replace(ctx, start=None), {})
            times.append(cand.makespan_us)
            ctx.point(cand.makespan_us)
            if best is None or cand.makespan_us < best.makespan_us * (1 - 1e-12):
                inv = np.empty_like(perm)
                inv[perm] = np.arange(perm.size)
                best, chosen = relabel_schedule(cand, copy, inv), attempt
        ctx.notes.update({"relabel_us": times, "relabel_attempt": chosen})
        return best

    def warmup(self, problem, opts):
        return Rules().warmup(problem, opts)


class ReserveBroadcast(Candidate):
    """Broadcast: (chunk, NPU) requests routed by reservation, reordered by squeaky-wheel rounds, up to
    ``broadcast_reserve_tries`` runs (fewer on large problems: ``broadcast_reserve_work``)."""

    name = "reserve_broadcast"
    switch = "broadcast_reserve_tries"
    budget = ("broadcast_reserve_work",)

    def applies(self, problem, ctx):
        return _rooted(problem, (BROADCAST,))

    def run(self, problem, ctx):
        from .reserve import reserve_broadcast

        rst: dict = {}
        sched = reserve_broadcast(problem, seed=ctx.opts.seed, tries=int(ctx.opts.broadcast_reserve_tries),
                                  deadline=ctx.deadline, stats=rst, work=ctx.opts.broadcast_reserve_work,
                                  beat_us=None if ctx.best is None else ctx.best.makespan_us)
        ctx.notes.update(rst)
        return sched

    def warmup(self, problem, opts):
        from .reserve import warmup

        return _once("reserve", warmup)


COPY_CANDIDATES: tuple[Candidate, ...] = (Decomposition(), Tacos(), Rules(), Rarest(), Trees(), ReserveScatter(),
                                          Relabel(), ReserveBroadcast())

_LOADED: dict[str, float] = {}


def _once(key: str, load) -> float:
    """Load a kernel family once per process; the seconds of the first load, 0 afterwards."""
    if key in _LOADED:
        return 0.0
    t0 = time.perf_counter()
    load()
    _LOADED[key] = time.perf_counter() - t0
    return _LOADED[key]


def stop_bound(problem: Problem):
    """The stop bound of a copy portfolio on ``problem`` (a callable, evaluated when first needed)."""
    from tacos_bench import bounds

    if problem.kind == ALL_GATHER:
        return lambda: bounds.cheap_bound_us(problem)
    if problem.kind in (BROADCAST, SCATTER) and problem.collective.rooted:
        return lambda: bounds.root_pipeline_bound_us(problem)
    return None


class FlowRouted(Candidate):
    """Unicast (All-to-All, Scatter; Gather time-reversed): each (source, destination) pair's chunks routed along
    the multicommodity-flow LP's paths, rounded to whole chunks by a small MILP, then list-scheduled with
    forward-backward improvement (:mod:`solvers.greedy.flow_routing`); point-to-point, up to
    ``flow_max_columns`` commodity x link pairs of the LP."""

    name = "flow"
    switch = "flow_candidate"
    budget = ("flow_max_columns",)

    def applies(self, problem, ctx):
        from tacos_bench.collective import UNICAST_KINDS

        if problem.kind not in UNICAST_KINDS:
            return f"Gather, Scatter, All-to-All only (this is {problem.kind})"
        sources = np.unique(np.asarray(problem.sources)).size
        if sources * problem.num_links > ctx.opts.flow_max_columns:
            return (f"its LP has {sources} x {problem.num_links} commodity-link pairs > flow_max_columns "
                    f"({ctx.opts.flow_max_columns})")
        return None

    def run(self, problem, ctx):
        from tacos_bench.bounds.flow import flow_solution, path_decomposition

        try:
            sol = flow_solution(problem, max_lp_columns=ctx.opts.flow_max_columns)
        except SolverError as e:
            raise Skip(str(e)) from None
        ctx.notes["flow_lp_us"] = sol.T_us
        if ctx.best is not None and ctx.best.makespan_us <= sol.T_us * (1 + 1e-9):
            raise Skip("the schedule so far meets the flow bound (optimal)")
        from .flow_routing import round_routes, schedule_routes

        return schedule_routes(problem, round_routes(problem, path_decomposition(problem, sol)), ctx.opts.seed)

    def warmup(self, problem, opts):
        return Rules().warmup(problem, opts)


class ListSchedule(Candidate):
    """All-Gather and Broadcast (and the copy phases of their mirrors): the list schedule over the links
    (:mod:`solvers.list_schedule`: the transfer that completes first, the rarest chunk on ties), its tie rules
    in turn while above the stop bound, within ``list_max_work`` receipts x links in all (one run at least)."""

    name = "list"
    switch = "list_candidate"
    budget = ("list_max_work",)

    def applies(self, problem, ctx):
        from ..list_schedule import applies

        why = applies(problem) or (None if problem.collective.copies else f"copy collectives ({problem.kind})")
        if why is None and _list_work(problem) > ctx.opts.list_max_work:
            why = f"{_list_work(problem)} receipts x links > list_max_work ({ctx.opts.list_max_work})"
        return why

    def run(self, problem, ctx):
        from ..fabric_routes import build_hops
        from ..list_schedule import RULES, list_copy

        hops = build_hops(problem.topology, problem.chunk_bytes)
        work = _list_work(problem)
        best, spans, kept = None, [], None
        for i, rule in enumerate(RULES):
            if i and ((i + 1) * work > ctx.opts.list_max_work or ctx.past_deadline()
                      or ctx.at_bound(best.makespan_us)):
                break
            s = list_copy(problem, hops=hops, rule=rule)
            spans.append(s.makespan_us)
            if best is None or s.makespan_us < best.makespan_us * (1 - 1e-12):
                best, kept = s, rule
        ctx.run_stats[self.name] = {"engine": "list_schedule", "restarts_run": len(spans), "makespans_us": spans,
                                    "transfers": len(best), "list_rules": kept}
        return best

    def warmup(self, problem, opts):
        from ..list_schedule import warmup

        return _once("list", warmup)


def _list_work(problem: Problem) -> int:
    """Receipts x links: on point-to-point links the hops are the links (no hops built to count them)."""
    return int(problem.num_chunks) * max(problem.num_npus - 1, 1) * max(problem.num_links, 1)


COPY_CANDIDATES = COPY_CANDIDATES + (FlowRouted(), ListSchedule())
PREFER = PREFER + ("flow", "list")
