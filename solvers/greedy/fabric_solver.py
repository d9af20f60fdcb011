"""``greedy`` and ``greedy_plus`` on a switched fabric (docs/fabrics.md): every collective from
:func:`solvers.greedy.fabric.fabric_copy`, as a portfolio of candidates (:mod:`solvers.portfolio`).

``rails``
    (``rails_candidate``) All-Gather and its mirrors on a rail-optimized fabric: the rail decomposition
    (:mod:`solvers.greedy.rails`), first, from ``rails_min_pairs`` NPUs x chunks on;
``rail_slots``
    (``rail_slot_candidate``) a chunk table on a rail-optimized fabric: crossings in NIC slots from a matching
    decomposition, spreads over each node's switch (:mod:`solvers.greedy.rail_tables`), first;
``rules``
    the greedy with the options' rules: TACOS's random chunk order, or (``chunk_order`` other than ``random``)
    the rarest chunk first; with ``imports`` other than ``all`` or a non-random order, NPUs import from their
    own switch first (``local_first``); the best of the seeds ``restarts`` / ``restart_work`` ask for;
``in_switch_interleaved`` / ``in_switch_pipeline``
    (``in_switch_candidate``) an All-Reduce on a switch that multicasts and reduces: the in-network pipeline
    (:func:`solvers.in_switch.interleaved_all_reduce` on one switch, :func:`solvers.in_switch.sharp_all_reduce`
    on a tree of such switches);
``tacos``
    (``tacos_candidate``) the TACOS rule, up to ``tacos_max_pairs`` NPUs x chunks;
``baseline:<name>``
    (``baseline_candidates``) every registered backend of the baselines family that takes the collective on the
    fabric, reached through the registry (the solver families stay independent), up to
    ``baseline_max_deliveries`` (NPU, chunk) deliveries.

They run in that order, which is also the tie order (the greedy's own schedule first), and stop once a schedule
meets the fabric's lower bound (:func:`tacos_bench.bounds.cheap_bound_us`).

Reduce-Scatter and Reduce are the copy mirrors on the reversed fabric (multicast becomes in-network reduction);
All-Reduce is that Reduce-Scatter, then the All-Gather synthesized forward from its end state (each link free
after its last Reduce-Scatter transfer, each chunk at its owner once reduced), or after a barrier with
``collective.overlap=false``.
"""

from __future__ import annotations

import time

import numpy as np

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..compose import chunk_done_at_owner, link_last_use, mirrored, needs_expansion, per_destination
from ..fabric_routes import build_hops, shared_hops
from ..portfolio import BOUND_REL, Candidate, RunContext, Skip, run_portfolio
from .fabric import fabric_copy
from .options import GreedyOptions, restart_count, restart_seeds

# their names in the record: this prefix and the registered name
BASELINE_PREFIX = "baseline:"

# options of the point-to-point rules that a fabric run does not read (named in the run's statistics)
_POINT_TO_POINT = ("import_gate", "link_order", "group_matching", "matching", "engine", "routing", "decompose",
                   "rarest_candidate", "tree_candidate", "relabel_tries", "reserve_tries", "broadcast_reserve_tries")


def fabric_rules(opts: GreedyOptions) -> tuple[str, bool]:
    """``(chunk_order, local_first)`` of the fabric kernel for the options' rules: the rarest chunk first unless
    the order is TACOS's random one; imports from the own switch first with any topology-aware rule."""
    if ":" in opts.chunk_order:
        raise SolverError(f"chunk_order={opts.chunk_order} (a user's score) runs on point-to-point topologies; the "
                          "fabric kernel orders chunks random or rarest")
    order = "random" if opts.chunk_order == "random" else "rarest"
    return order, order != "random" or opts.imports != "all"


def seeds_of(problem: Problem, opts: GreedyOptions) -> list[int]:
    """The seeds of the runs (the first is the seed itself, so ``greedy_plus``'s TACOS candidate is
    ``greedy``'s own run)."""
    runs = restart_count(problem, opts)
    return [opts.seed] + [int(s % (2**63)) for s in restart_seeds(opts.seed, runs)[1:]]


def _collective(problem: Problem, seed: int, order: str, local_first: bool, subset_trees: bool = False) -> Schedule:
    """One run of the fabric kernel, composed into ``problem``'s collective (``subset_trees``: a table's
    multicast to subsets as trees, else one unicast chunk per destination)."""
    def copy(p, **start):
        if needs_expansion(p) and not subset_trees:
            return per_destination(p, lambda q: copy(q, **start))
        # built once per fabric and chunk size inside solve_fabric's shared_hops block (also the reversed copy
        # that each mirrored phase builds anew)
        return fabric_copy(p, seed=seed, chunk_order=order, hops=build_hops(p.topology, p.chunk_bytes),
                           local_first=local_first, subset_trees=needs_expansion(p), **start)

    return _composed(problem, copy)


def _composed(problem: Problem, copy) -> Schedule:
    """``problem``'s collective from ``copy`` (a copy problem, ``link_free`` and ``chunk_ready`` keywords for
    All-Reduce's All-Gather phase): the copy itself, its mirror, or the two phases of an All-Reduce."""
    if problem.collective.copies:
        return copy(problem)
    if problem.kind != ALL_REDUCE:
        return mirrored(problem, copy)
    rs = mirrored(problem, copy)
    ag_problem = problem.with_collective(ALL_GATHER)
    if not problem.collective.overlap:
        return Schedule.concat([rs, copy(ag_problem).shifted(rs.makespan_us)])
    free = link_last_use(problem, rs)
    ready = chunk_done_at_owner(problem, rs)
    return Schedule.concat([rs, copy(ag_problem, link_free=free, chunk_ready=ready)])


class _Seeded(Candidate):
    """The best of the seeds' runs of one rule (``_rule``)."""

    subset_trees = False

    def _rule(self, opts) -> tuple[str, bool]:
        raise NotImplementedError

    def run(self, problem, ctx):
        order, local = self._rule(ctx.opts)
        seeds = seeds_of(problem, ctx.opts)
        best, spans, best_seed = None, [], None
        for i, seed in enumerate(seeds):
            if i and ctx.past_deadline():
                break
            s = _collective(problem, seed, order, local, self.subset_trees)
            spans.append(s.makespan_us)
            ctx.point(s.makespan_us)
            if best is None or s.makespan_us < best.makespan_us * (1 - 1e-12):
                best, best_seed = s, seed
        ctx.run_stats[self.name] = {"engine": "fabric", "chunk_order_used": order, "restarts": len(seeds),
                                    "restarts_run": len(spans), "makespans_us": spans, "best_seed": best_seed,
                                    "transfers": len(best)}
        return best

    def warmup(self, problem, opts):
        from .fabric import warmup_fabric

        return _once("fabric", warmup_fabric)


class FabricRules(_Seeded):
    """The fabric greedy with the options' rules, the best of the seeds' runs. On a chunk table that multicasts
    to subsets it sends one unicast copy per destination, and there, past ``per_destination_max_deliveries``
    copies, it leaves the table to candidate ``subset_trees`` when that runs (the copies cost minutes: the
    64-GPU MoE dispatch's 2.06 M took more than 7 minutes)."""

    name = "rules"
    budget = ("per_destination_max_deliveries",)

    def applies(self, problem, ctx):
        return expansion_too_big(problem, ctx)

    def _rule(self, opts):
        return fabric_rules(opts)


def expansion_too_big(problem: Problem, ctx: RunContext) -> str | None:
    """Why a chunk table is not expanded into one unicast copy per destination: more than
    ``per_destination_max_deliveries`` copies while candidate ``subset_trees`` takes the table; else None."""
    limit = getattr(ctx.opts, "per_destination_max_deliveries", None)
    if limit is None or not problem.collective.general:
        return None
    trees = SubsetTrees()
    chosen = getattr(ctx.opts, "candidates", None)
    if (chosen is not None and trees.name not in chosen) or trees.switched_on(ctx.opts) is not None \
            or trees.applies(problem, ctx) is not None:
        return None
    d = deliveries(problem)
    if d > limit:
        return (f"{d} per-destination copies > per_destination_max_deliveries ({limit}); candidate "
                f"subset_trees multicasts the table")
    return None


class SubsetTrees(_Seeded):
    """A chunk table that multicasts to subsets of the NPUs (MoE dispatch; combine through its mirror) as
    multicast trees on the fabric kernel with the options' rules: only a chunk's destinations receive it, so a
    token for several GPUs of one node crosses the NIC once and spreads over the NVSwitch (candidate ``rules``
    sends one unicast copy per destination). On point-to-point links the kernel's hops are the links, and a
    token for several NPUs of a server crosses between servers once as well."""

    name = "subset_trees"
    switch = "subset_tree_candidate"
    budget = ("subset_tree_max_pairs",)
    subset_trees = True

    def applies(self, problem, ctx):
        c = problem.collective
        if not c.general:
            return f"chunk tables only (this is {problem.kind})"
        if problem.num_npus * problem.num_chunks > ctx.opts.subset_tree_max_pairs:
            return (f"{problem.num_npus} NPUs x {problem.num_chunks} chunks > subset_tree_max_pairs "
                    f"({ctx.opts.subset_tree_max_pairs})")
        if c.copies:
            return None if needs_expansion(problem) else "no chunk goes to a subset of several NPUs"
        if c.demand.reduces and c.demand.one_destination:
            return None if np.any(np.diff(c.demand.src_ptr) > 1) else "no chunk reduces a subset of several NPUs"
        return "a table mixing copies and reductions"

    def _rule(self, opts):
        return fabric_rules(opts)


class FabricTacos(_Seeded):
    """The fabric greedy with the TACOS rule (random chunk, no local-first imports), up to ``tacos_max_pairs``
    NPUs x chunks."""

    name = "tacos"
    switch = "tacos_candidate"
    budget = ("tacos_max_pairs",)

    def applies(self, problem, ctx):
        if fabric_rules(ctx.opts) == ("random", False):
            return "the options' own rules are TACOS's (candidate rules)"
        if problem.num_npus * problem.num_chunks > ctx.opts.tacos_max_pairs:
            return (f"{problem.num_npus} NPUs x {problem.num_chunks} chunks > tacos_max_pairs "
                    f"({ctx.opts.tacos_max_pairs})")
        return None

    def _rule(self, opts):
        return "random", False


def _decomposed(problem: Problem, ctx: RunContext, name: str, solve) -> Schedule:
    """``solve`` (a copy problem, its hops, the options' rules and a start state -> a schedule) composed into
    ``problem``'s collective; its :class:`SolverError` (no rail layout, a mirror without one, a start state it
    does not take) is a skip."""
    order, local = fabric_rules(ctx.opts)

    def copy(p, **start):
        return solve(p, hops=build_hops(p.topology, p.chunk_bytes), seed=ctx.opts.seed, chunk_order=order,
                     local_first=local, **start)

    try:
        s = _composed(problem, copy)
    except SolverError as e:
        raise Skip(str(e)) from None
    ctx.run_stats[name] = {"engine": name, "chunk_order_used": order, "transfers": len(s)}
    return s


class RailsCandidate(Candidate):
    """All-Gather, Reduce-Scatter and All-Reduce on a rail-optimized fabric: the rail decomposition
    (:mod:`solvers.greedy.rails`: each rail's All-Gather with the options' rules, each node spreading what lands
    over its own switch), from ``rails_min_pairs`` NPUs x chunks on."""

    name = "rails"
    switch = "rails_candidate"
    budget = ("rails_min_pairs",)

    def applies(self, problem, ctx):
        if problem.collective.general or problem.kind not in (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE):
            return f"All-Gather, Reduce-Scatter and All-Reduce only (this is {problem.kind})"
        pairs = problem.num_npus * problem.num_chunks
        if pairs < ctx.opts.rails_min_pairs:
            return f"{problem.num_npus} NPUs x {problem.num_chunks} chunks < rails_min_pairs ({ctx.opts.rails_min_pairs})"
        return None

    def run(self, problem, ctx):
        from .rails import rail_layout, rails_all_gather

        # the layout needs the hops, which only the timed run builds (not the warm-up before it)
        lay = rail_layout(build_hops(problem.topology, problem.chunk_bytes), problem.num_npus,
                          problem.topology.num_links)
        if isinstance(lay, str):
            raise Skip(lay)
        return _decomposed(problem, ctx, self.name, rails_all_gather)

    def warmup(self, problem, opts):
        from .fabric import warmup_fabric
        from ..list_schedule import warmup

        return _once("fabric", warmup_fabric) + _once("list", warmup)


class RailSlots(Candidate):
    """A chunk table (MoE dispatch; combine through its mirror; All-to-Allv) on a rail-optimized fabric: each
    chunk crosses to another node once, on its source's rail, in NIC slots from a matching decomposition of
    each rail's node x node crossings, and spreads over the node's switch as it lands
    (:mod:`solvers.greedy.rail_tables`)."""

    name = "rail_slots"
    switch = "rail_slot_candidate"

    def applies(self, problem, ctx):
        c = problem.collective
        if not c.general:
            return f"chunk tables only (this is {problem.kind})"
        if not (c.copies or (c.demand.reduces and c.demand.one_destination)):
            return "a table mixing copies and reductions"
        return None

    def run(self, problem, ctx):
        from .rail_tables import rail_slots_table

        return _decomposed(problem, ctx, self.name, rail_slots_table)

    def warmup(self, problem, opts):
        from .rail_tables import warmup

        return _once("rail_slots", warmup)


class ListCandidate(Candidate):
    """The list schedule over hops (:mod:`solvers.list_schedule`: the transfer that completes first, the rarest
    chunk on ties), its tie rules in turn while a phase is above its bound, within ``list_max_work`` receipts x
    hops in all (one run at least); copies to every NPU, their mirrors and All-Reduce."""

    name = "list"
    switch = "list_candidate"
    budget = ("list_max_work",)

    def applies(self, problem, ctx):
        from ..list_schedule import applies

        why = applies(problem)
        if why is not None:
            return why
        # every NPU has a hop out at least: past the budget with one hop per NPU, no hops are built to count them
        # (building them costs seconds on dgx_h100x128, where this candidate never runs)
        phases = 2 if problem.kind == ALL_REDUCE else 1
        least = phases * int(problem.num_chunks) * max(problem.num_npus - 1, 1) * problem.num_npus
        if least > ctx.opts.list_max_work:
            return f"at least {least} receipts x hops > list_max_work ({ctx.opts.list_max_work})"
        work = _list_work(problem)
        if work > ctx.opts.list_max_work:
            return f"{work} receipts x hops > list_max_work ({ctx.opts.list_max_work})"
        return None

    def run(self, problem, ctx):
        from tacos_bench.bounds import cheap_bound_us

        from ..list_schedule import RULES, list_copy

        runs, used = [], []
        phase_work = _list_work(problem) // (2 if problem.kind == ALL_REDUCE else 1)
        # the phases share the budget: each gets its part of it
        budget = ctx.opts.list_max_work // (2 if problem.kind == ALL_REDUCE else 1)

        def copy(p, **start):
            hops = build_hops(p.topology, p.chunk_bytes)
            bound = cheap_bound_us(p)
            rules = RULES
            if start:
                # All-Reduce's All-Gather after its Reduce-Scatter: the rule that won that phase first, and no
                # more once it ends a bound's length after the last Reduce-Scatter transfer (the phase-bound sum,
                # a target here, not a bound)
                bound += float(np.max(start["link_free"], initial=0.0))
                rules = tuple(dict.fromkeys(used + list(RULES)))
            best, best_rule = None, None
            for i, rule in enumerate(rules):
                if i and ((i + 1) * phase_work > budget or ctx.past_deadline()):
                    break
                if best is not None and bound is not None and best.makespan_us <= bound * (1 + BOUND_REL):
                    break
                s = list_copy(p, hops=hops, rule=rule, **start)
                runs.append(s.makespan_us)
                if best is None or s.makespan_us < best.makespan_us * (1 - 1e-12):
                    best, best_rule = s, rule
            used.append(best_rule)
            return best

        s = _composed(problem, copy)
        ctx.run_stats[self.name] = {"engine": "list_schedule", "transfers": len(s), "restarts_run": len(runs),
                                    "makespans_us": runs, "list_rules": " ".join(used)}
        return s

    def warmup(self, problem, opts):
        from ..list_schedule import warmup

        return _once("list", warmup)


def _list_work(problem: Problem) -> int:
    """The list schedule's work on ``problem``: receipts x hops per phase, both phases of an All-Reduce."""
    from ..list_schedule import list_work

    hops = build_hops(problem.topology, problem.chunk_bytes)
    return list_work(problem, hops) * (2 if problem.kind == ALL_REDUCE else 1)


class InSwitchInterleaved(Candidate):
    """All-Reduce on one switch that multicasts and reduces: owner changes interleaved (N K + 3 slots; the
    owner-by-owner pipeline takes N K + N)."""

    name = "in_switch_interleaved"
    switch = "in_switch_candidate"

    def applies(self, problem, ctx):
        from ..in_switch import nvls_switch

        if problem.kind != ALL_REDUCE:
            return f"All-Reduce only (this is {problem.kind})"
        return None if nvls_switch(problem.topology) is not None else "no switch that multicasts and reduces " \
                                                                      "reaches every NPU"

    def run(self, problem, ctx):
        from ..in_switch import interleaved_all_reduce

        return interleaved_all_reduce(problem)


class InSwitchPipeline(Candidate):
    """All-Reduce on a tree of switches that multicast and reduce (SHARP-like): the in-network pipeline."""

    name = "in_switch_pipeline"
    switch = "in_switch_candidate"

    def applies(self, problem, ctx):
        from ..in_switch import nvls_switch, reduction_tree

        if problem.kind != ALL_REDUCE:
            return f"All-Reduce only (this is {problem.kind})"
        if nvls_switch(problem.topology) is not None:
            return "one switch reaches every NPU (candidate in_switch_interleaved)"
        return None if reduction_tree(problem.topology) is not None else "no tree of switches that multicast " \
                                                                          "and reduce"

    def run(self, problem, ctx):
        from ..in_switch import sharp_all_reduce

        return sharp_all_reduce(problem)


class GroupTreesCandidate(Candidate):
    """All-Reduce on a fabric of switch groups whose switches reduce and multicast (DGX-like nodes): each chunk
    reduced in every group, combined between groups on the positions that free first, and spread again
    (:mod:`solvers.greedy.group_trees`; with one group slower than the others each of its 6 variants, the
    fastest kept, then its roots searched for up to ``group_tree_search_work`` chunks x groups placed), up
    to ``group_tree_max_pairs`` chunks x groups; not on three or more groups whose links out
    all run at one speed (the rail decomposition's phase-bound sum was ahead there)."""

    name = "group_trees"
    switch = "group_tree_candidate"
    budget = ("group_tree_max_pairs", "group_tree_search_work")

    def applies(self, problem, ctx):
        from .group_trees import group_layout, variants_for

        if problem.kind != ALL_REDUCE or problem.collective.general:
            return f"All-Reduce only (this is {problem.kind})"
        found = group_layout(problem.topology)
        if isinstance(found, str):
            return found
        pairs = problem.num_chunks * len(found[0])
        if pairs > ctx.opts.group_tree_max_pairs:
            return f"{problem.num_chunks} chunks x {len(found[0])} groups > group_tree_max_pairs " \
                   f"({ctx.opts.group_tree_max_pairs})"
        why = variants_for(problem)
        return why if isinstance(why, str) else None

    def run(self, problem, ctx):
        from .group_trees import group_layout, group_trees_all_reduce, search_roots, variants_for

        best = kept = None
        for variant in variants_for(problem):
            s = group_trees_all_reduce(problem, **variant)
            ctx.point(s.makespan_us)
            if best is None or s.makespan_us < best.makespan_us:
                best, kept = s, variant
        ctx.notes["group_trees_variant"] = ", ".join(f"{k} {v}" for k, v in kept.items())
        pairs = problem.num_chunks * len(group_layout(problem.topology)[0])
        evaluations = ctx.opts.group_tree_search_work // pairs
        if "roots" in kept and evaluations > 1:
            found, _ = search_roots(problem, kept, evaluations)
            if found.makespan_us < best.makespan_us:
                best = found
                ctx.notes["group_trees_variant"] += ", roots searched"
                ctx.point(found.makespan_us)
        return best


def deliveries(problem: Problem) -> int:
    """The (NPU, chunk) pairs ``problem`` delivers per phase: NPUs x chunks, chunks for a unicast collective, the
    required (destination, chunk) pairs of a chunk table."""
    if problem.collective.general:
        return int(problem.demand.required_pairs()[0].size)
    return problem.num_chunks * (1 if problem.collective.unicast else problem.num_npus)


class Baseline(Candidate):
    """A registered baseline that takes the collective on the fabric, run through the registry."""

    switch = "baseline_candidates"
    budget = ("baseline_max_deliveries", "table_baseline_max_deliveries")

    def __init__(self, backend: str):
        self.backend = backend
        self.name = BASELINE_PREFIX + backend

    def _solver(self):
        from ..base import get_solver

        return get_solver(self.backend)

    def applies(self, problem, ctx):
        from ..base import CAP_FABRIC, capability_of

        budget = "table_baseline_max_deliveries" if problem.collective.general else "baseline_max_deliveries"
        if deliveries(problem) > getattr(ctx.opts, budget):
            return f"{deliveries(problem)} (NPU, chunk) deliveries > {budget} ({getattr(ctx.opts, budget)})"
        try:
            solver = self._solver()
        except SolverError as e:   # its optional dependency is missing
            return f"unavailable ({e})"
        if problem.topology.is_fabric and CAP_FABRIC not in solver.capabilities:
            return "it does not model switches"
        need = capability_of(problem)   # a chunk table needs its class (demand_copy, ...), not its kind
        return None if solver.supports(need) else f"it does not support {problem.kind} ({need})"

    def run(self, problem, ctx):
        try:
            res = self._solver().solve(problem, {"seed": ctx.opts.seed})
        except SolverError as e:   # e.g. nvls on a switch that does not reduce
            raise Skip(str(e)) from None
        except Exception as e:  # noqa: BLE001 - a candidate is optional: the greedy's own schedule remains
            raise Skip(f"failed ({type(e).__name__}: {e})") from None
        if res.schedule is None or res.status not in ("optimal", "feasible"):
            raise Skip(f"returned {res.status} without a schedule")
        return res.schedule.to_schedule()

    def warmup(self, problem, opts):
        return self._solver().warmup(problem, None)


def baseline_candidates() -> tuple[Baseline, ...]:
    """One candidate per registered backend of the baselines family (the registry's metadata, no import): on a
    fabric, and beside the greedy on a chunk table of either network kind."""
    from ..base import _REGISTRY, solver_family

    return tuple(Baseline(n) for n in _REGISTRY if solver_family(n) == "baselines")


def fabric_candidates() -> tuple[Candidate, ...]:
    """The fabric portfolio, in run (and tie) order."""
    return (RailsCandidate(), RailSlots(), FabricRules(), SubsetTrees(), ListCandidate(), InSwitchInterleaved(),
            InSwitchPipeline(), GroupTreesCandidate(), FabricTacos()) + baseline_candidates()


_LOADED: dict[str, float] = {}


def _once(key: str, load) -> float:
    if key in _LOADED:
        return 0.0
    t0 = time.perf_counter()
    load()
    _LOADED[key] = time.perf_counter() - t0
    return _LOADED[key]


def solve_fabric(problem: Problem, candidates, ctx: RunContext):
    """The portfolio's result on ``problem`` (:class:`solvers.portfolio.PortfolioResult`)."""
    from tacos_bench.bounds import cheap_bound_us

    ctx.bound = lambda: cheap_bound_us(problem)
    with shared_hops():   # every run, mirrored phase and baseline candidate builds the fabric's hops once
        t0 = time.perf_counter()
        out = run_portfolio(candidates, problem, ctx)
    out.notes.update({"fabric_ignores": ",".join(_POINT_TO_POINT), "fabric_time_s": time.perf_counter() - t0})
    return out
