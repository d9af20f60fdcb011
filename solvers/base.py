"""Solver interface, status vocabulary and registry.

Every backend takes the one canonical :class:`~tacos_bench.problem.Problem` and
returns a :class:`SolveResult` holding a schedule of one protocol,
:class:`~tacos_bench.schedule.ScheduleLike` (a table, or a compact schedule on disk for very
large All-Gathers). Backends only solve: verification, bounds, timing of the whole run and
records happen outside (:mod:`tacos_bench.runner`).

A backend declares

* ``name`` and ``capabilities`` (flags below, so callers never special-case names);
* ``Options``: its frozen options dataclass (:mod:`solvers.options`);
* ``STATUS_MAP``: how its native outcomes map onto the shared vocabulary
  :data:`STATUSES` (documented per backend in ``docs/solvers.md``);
* ``_solve(problem, opts)``, and optionally ``warmup()`` for one-off
  compilation that must stay out of any timed region.

Backends are registered by name and imported lazily, so importing ``solvers``
never pulls in OR-Tools, PuLP or numba.

Examples
--------
>>> from solvers import available_solvers, get_solver
>>> "greedy" in available_solvers()
True
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> res = get_solver("bfs").solve(Problem(ring(4), Collective("all_gather")))
>>> res.status, res.stop_reason, len(res.schedule)
('feasible', 'finished', 12)
"""

from __future__ import annotations

import numpy as np

import abc
import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import ScheduleLike
from tacos_bench.topology.model import FABRIC, POINT_TO_POINT

from .options import SolverOptions

Status = Literal["optimal", "feasible", "infeasible", "no_solution", "error"]
STATUSES: tuple[str, ...] = ("optimal", "feasible", "infeasible", "no_solution", "error")

# Why a run stopped (SolveResult.stop_reason).
# bound_met: no search ran because the warm start already met the lower bound (not a proof by search)
STOP_REASONS = ("finished", "proved", "bound_met", "time_limit", "gap_limit", "error")
# What produced the returned schedule (SolveResult.solution_source).
# list_schedule: an exact backend's own constructive start (no other backend's schedule), which its search
# could not improve
SOURCES = ("heuristic", "model", "list_schedule", "warm_start", "trivial")

# Capability flags: what a backend can do, so callers never special-case names.
CAP_ALL_GATHER = "all_gather"
CAP_REDUCE_SCATTER = "reduce_scatter"
CAP_ALL_REDUCE = "all_reduce"
CAP_BROADCAST = "broadcast"
CAP_REDUCE = "reduce"
CAP_GATHER = "gather"
CAP_SCATTER = "scatter"
CAP_ALL_TO_ALL = "all_to_all"
CAP_EXACT = "exact"            # can prove optimality on its model
CAP_TIME_LIMIT = "time_limit"  # honours time_limit_s
CAP_RANDOMIZED = "randomized"  # uses the seed
CAP_WARM_START = "warm_start"  # accepts an initial schedule
CAP_THREADS = "threads"        # honours threads
CAP_OVERLAP = "overlap"        # All-Reduce follows collective.overlap (composed RS + AG)
CAP_FROM_STATE = "from_state"  # can start a copy collective from a given state (solve_from; solvers.repair)
CAP_RELEASE = "release"        # models late NPUs (collective.release_us) itself: the plan exact of solvers.release
CAP_FABRIC = "fabric"          # schedules switched fabrics (switches as nodes, docs/fabrics.md)
CAP_FABRIC_ONLY = "fabric_only"  # needs a switched fabric (an in-switch algorithm)
# chunk tables (tacos_bench.demand: all_to_allv, moe_*, custom, concurrent), by what their chunks are
CAP_DEMAND_UNICAST = "demand_unicast"  # every chunk one source, one destination
CAP_DEMAND_COPY = "demand_copy"        # copies to any destinations (subsets, every NPU)
CAP_DEMAND_REDUCE = "demand_reduce"    # reductions from any sources into one destination each
DEMAND_CAPS = (CAP_DEMAND_UNICAST, CAP_DEMAND_COPY, CAP_DEMAND_REDUCE)


def capability_of(problem: Problem) -> str:
    """The capability a backend needs for ``problem``'s collective: its kind, or for a chunk table its class
    (a table mixing copies and reductions, or reducing into several destinations, needs ``demand_mixed``)."""
    coll = problem.collective
    if coll.demand is None:
        return problem.kind
    if coll.unicast:
        return CAP_DEMAND_UNICAST
    if coll.copies:
        return CAP_DEMAND_COPY
    if coll.reduces and coll.demand.one_destination:
        return CAP_DEMAND_REDUCE
    return "demand_mixed"


@dataclass(frozen=True)
class SolveResult:
    """What every backend returns.

    ``objective_us`` is what the backend optimized (for exact backends on a
    discretized network it may differ from the schedule's continuous makespan);
    ``best_bound_us`` is a lower bound the backend *proved for this problem*
    (not for a rounded model of it), or ``None``. ``stop_reason`` says why the
    run ended (:data:`STOP_REASONS`), ``solution_source`` what produced the
    schedule (:data:`SOURCES`), ``proof`` how optimality was established when
    ``status == "optimal"`` (e.g. ``"solver"``, ``"lower_bound"``). Exact backends also say what their
    optimum holds for (``optimality_scope``: ``"continuous"``, the problem the verifier checks, or ``"ten"``,
    link times rounded up to the time-expanded network's steps), their model's ``time_resolution_us``, the
    ``search_time_s`` and ``search_branches`` of the search alone, and an anytime ``trace`` of incumbent and
    bound over time.
    """

    status: Status
    schedule: ScheduleLike | None
    objective_us: float | None = None
    best_bound_us: float | None = None
    build_time_s: float = 0.0
    solve_time_s: float = 0.0
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    stop_reason: str = "finished"
    solution_source: str | None = "heuristic"
    proof: str | None = None
    # exact backends: what "optimal" and best_bound_us hold for ("continuous" or "ten"), the model's time grid,
    # how long the search itself ran and how far it went (branches or nodes)
    optimality_scope: str | None = None
    time_resolution_us: float | None = None
    search_time_s: float | None = None
    search_branches: int | None = None
    # anytime trace: (seconds since solve() started, incumbent µs or None, bound µs or None), in time order
    trace: tuple = ()
    # a portfolio backend (solvers.portfolio): the candidate whose schedule this is, every candidate that ran
    # ({name, time_s, makespan_us}) and every one skipped ({name, reason}); a composed collective's phases
    # carry a "phase" key and the winner reads "rs:<name> ag:<name>"
    candidate: str | None = None
    candidates_tried: tuple = ()
    candidates_skipped: tuple = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(f"stop_reason must be one of {STOP_REASONS}, got {self.stop_reason!r}")
        if self.solution_source is not None and self.solution_source not in SOURCES:
            raise ValueError(f"solution_source must be one of {SOURCES}, got {self.solution_source!r}")
        if self.optimality_scope not in (None, "continuous", "ten"):
            raise ValueError(f"optimality_scope must be continuous, ten or None, got {self.optimality_scope!r}")


@dataclass(frozen=True)
class StartState:
    """Where a copy collective resumes instead of its precondition (the state a fault leaves,
    :mod:`solvers.repair`).

    ``links`` masks the links of ``problem.topology`` that may be used; NPU ``hold_npu[i]`` holds chunk
    ``hold_chunk[i]``; NPUs with ``alive`` false need nothing and hold nothing. The schedule starts at 0 and
    :func:`solvers.compose.retime_from` places it; ``hold_time[i]`` (when the copy is there) and ``link_free``
    (per link of the topology, when it is free: after an in-flight transfer), both relative to that 0, are
    optional hints an engine may plan with (the routed unicast engine does).
    """

    links: Any
    hold_npu: Any
    hold_chunk: Any
    alive: Any
    hold_time: Any = None
    link_free: Any = None

    def surviving_holds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(npu, chunk, time)`` of every copy an alive NPU holds (time 0 without ``hold_time``)."""
        hv, hc = np.asarray(self.hold_npu, np.int64), np.asarray(self.hold_chunk, np.int64)
        ht = np.zeros(hv.size) if self.hold_time is None else np.asarray(self.hold_time, np.float64)
        ok = np.asarray(self.alive, bool)[hv]
        return hv[ok], hc[ok], ht[ok]


class Solver(abc.ABC):
    """A synthesis backend (see the module docstring)."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = frozenset()
    Options: ClassVar[type[SolverOptions]] = SolverOptions
    # native outcome -> shared status; a backend without native statuses documents its one outcome
    STATUS_MAP: ClassVar[Mapping[str, str]] = {"schedule built": "feasible"}
    # the statistics it may report (solvers.stats); None: not declared yet, not checked
    Stats: ClassVar[Any] = None

    def options(self, values: Mapping[str, Any] | SolverOptions | None = None, **more) -> SolverOptions:
        """Validated options from a mapping and/or keywords (unknown names are rejected)."""
        if isinstance(values, SolverOptions):
            if type(values) is self.Options and not more:
                return values
            values = values.as_dict()
        return self.Options.parse(values, self.name, **more)

    def solve(self, problem: Problem, options: Mapping[str, Any] | SolverOptions | None = None,
              **more) -> SolveResult:
        """Solve ``problem``; options as an ``Options`` object, a mapping or keywords.

        >>> from tacos_bench import Collective, Problem
        >>> from tacos_bench.topology.generators import ring
        >>> get_solver("ring").solve(Problem(ring(4), Collective("all_gather")), seed=3).status
        'feasible'
        """
        opts = self.options(options, **more)
        if problem.kind == "concurrent":   # several collectives at once: each part by this backend, combined
            from .concurrent import solve_concurrent

            return self._checked(solve_concurrent(self, problem, opts, SolveResult))
        self.check_supported(problem)
        return self._checked(self._solve(problem, opts))

    def _checked(self, result: SolveResult) -> SolveResult:
        """``result`` once its statistics are checked against :attr:`Stats` (solvers.stats)."""
        if self.Stats is not None:
            self.Stats.check(result.stats, self.name)
        return result

    @abc.abstractmethod
    def _solve(self, problem: Problem, opts) -> SolveResult:
        ...

    def solve_from(self, problem: Problem, start: StartState,
                   options: Mapping[str, Any] | SolverOptions | None = None, **more) -> SolveResult:
        """Complete the copy collective of ``problem`` from ``start`` (backends with ``from_state``)."""
        if CAP_FROM_STATE not in self.capabilities:
            can = [n for n in available_solvers() if CAP_FROM_STATE in solver_class(n).capabilities]
            raise SolverError(f"solver {self.name!r} cannot start from a given state, so it cannot repair a "
                              f"schedule after a fault (solvers that can: {', '.join(can)})")
        if not problem.collective.copies:
            raise SolverError(f"only copy collectives resume from a state, not {problem.kind}")
        opts = self.options(options, **more)
        self.check_supported(problem)
        return self._checked(self._solve_from(problem, start, opts))

    def _solve_from(self, problem: Problem, start: StartState, opts) -> SolveResult:
        raise NotImplementedError

    def warmup(self, problem: Problem | None = None, opts: SolverOptions | None = None) -> float:
        """Load or compile what :meth:`solve` needs for ``problem`` and ``opts`` (or everything); returns the
        seconds spent.

        The runner calls it before starting the clock, so JIT compilation never
        falls inside a timed region. A second call returns 0.
        """
        return 0.0

    def supports(self, kind: str) -> bool:
        return kind in self.capabilities

    @classmethod
    def supported_kinds(cls) -> list[str]:
        from tacos_bench.collective import KINDS

        return [k for k in KINDS if k in cls.capabilities]

    def check_supported(self, problem: Problem) -> None:
        """Raise :class:`SolverError` when this backend refuses ``problem``: its network kind or its collective.

        The message names the backends that accept this very problem (network and collective), never one that
        would refuse it in turn.
        """
        why = self.refusal(problem)
        if why is not None:
            can = accepting_solvers(problem)
            raise SolverError(why + (f" (solvers that take it: {', '.join(can)})" if can else ""))

    def refusal(self, problem: Problem) -> str | None:
        """Why this backend refuses ``problem`` (one line, no suggestions), or None when it takes it."""
        why = _NETWORK_CHECKS[problem.topology.network_kind](self, problem.topology)
        if why is not None:
            return why
        if problem.kind == "concurrent":   # each part must be the backend's
            from tacos_bench.bounds import part_problem

            for part in problem.collective.demand.meta["parts"].parts:
                why = self.refusal(part_problem(problem, part))
                if why is not None:
                    return why
            return None
        need = capability_of(problem)
        if not self.supports(need):
            what = problem.kind if need == problem.kind else f"{problem.kind} ({need.replace('_', ' ')})"
            return f"solver {self.name!r} does not support {what}"
        return None

    def __repr__(self) -> str:
        return f"<solver {self.name}>"


def _refuse_if_fabric_only(solver: Solver, topology) -> str | None:
    """A point-to-point topology: refused by the solvers that run inside switches."""
    if CAP_FABRIC_ONLY in solver.capabilities:
        return (f"solver {solver.name!r} runs inside switches, and {topology.name!r} has none "
                "(try topo=switched8_nvls or topo=leafspine4x8_sharp)")
    return None


def _refuse_unless_fabric(solver: Solver, topology) -> str | None:
    """A switched fabric: refused by the solvers that do not model switches."""
    if CAP_FABRIC not in solver.capabilities:
        return f"solver {solver.name!r} does not model switches, and {topology.name!r} is a switched fabric"
    return None


def accepting_solvers(problem: Problem) -> list[str]:
    """The registered backends that take ``problem`` (its network kind and its collective), in registry order."""
    out = []
    for name in available_solvers():
        try:
            if get_solver(name).refusal(problem) is None:
                out.append(name)
        except SolverError:   # a backend whose package is missing takes nothing
            continue
    return out


# what a solver needs to run on each network kind (Solver.check_supported)
_NETWORK_CHECKS = {POINT_TO_POINT: _refuse_if_fabric_only, FABRIC: _refuse_unless_fabric}

# name -> "module:Class"; imported on first use.
_REGISTRY: dict[str, str] = {
    "bfs": "solvers.baselines.trivial:BfsTreeSolver",
    "greedy": "solvers.greedy.solver:GreedySolver",
    "greedy_plus": "solvers.greedy.solver:GreedyPlusSolver",
    "milp": "solvers.exact.milp:MilpSolver",
    "cpsat": "solvers.exact.cpsat:CpSatSolver",
    "ring": "solvers.baselines.classic:RingSolver",
    "direct": "solvers.baselines.classic:DirectSolver",
    "rhd": "solvers.baselines.classic:RecursiveHalvingDoublingSolver",
    "dbt": "solvers.baselines.classic:DoubleBinaryTreeSolver",
    "pairwise": "solvers.baselines.collectives:PairwiseSolver",
    "bruck": "solvers.baselines.collectives:BruckSolver",
    "binomial": "solvers.baselines.collectives:BinomialSolver",
    "chain": "solvers.baselines.collectives:ChainSolver",
    "fast": "solvers.baselines.fast:FastSolver",
    "deepep": "solvers.baselines.deepep:DeepEpSolver",
    "hier": "solvers.greedy.hierarchical:HierarchicalSolver",
    "nvls": "solvers.baselines.nvls:NvlsSolver",
    "sharp": "solvers.baselines.nvls:SharpSolver",
}


# the solver families: the packages solvers/<family>/ (a backend registered from elsewhere is in none)
FAMILIES = ("greedy", "exact", "baselines")


def solver_family(name: str) -> str | None:
    """The family of a registered backend, read from where it is registered (``solvers.<family>....``), without
    importing it; ``None`` for a backend outside the families.

    >>> solver_family("rhd"), solver_family("greedy_plus"), solver_family("cpsat")
    ('baselines', 'greedy', 'exact')
    """
    if name not in _REGISTRY:
        raise SolverError(f"unknown solver {name!r}; choose one of {', '.join(sorted(available_solvers()))}")
    parts = _REGISTRY[name].split(":")[0].split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "solvers" and parts[1] in FAMILIES else None


def register_solver(name: str, target: str) -> None:
    """Register a backend as ``"module:Class"`` (imported lazily)."""
    _REGISTRY[name] = target


def available_solvers() -> list[str]:
    """Registered names whose module can be found (without importing heavy deps)."""
    import importlib.util

    out = []
    for name, target in _REGISTRY.items():
        mod = target.split(":")[0]
        if importlib.util.find_spec(mod) is not None:
            out.append(name)
    return out


def solver_class(name: str) -> type[Solver]:
    """The backend class registered as ``name`` (imports its module)."""
    if name not in _REGISTRY:
        raise SolverError(f"unknown solver {name!r}; choose one of {', '.join(sorted(available_solvers()))}")
    mod_name, cls_name = _REGISTRY[name].split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name == mod_name:
            raise SolverError(f"solver {name!r} is not available in this installation") from e
        raise SolverError(f"solver {name!r} needs the missing package {e.name!r}") from e
    return getattr(mod, cls_name)


def get_solver(name: str) -> Solver:
    """Instantiate a registered backend by name."""
    return solver_class(name)()
