"""Solver interface, status vocabulary and registry.

Every backend takes the one canonical :class:`~tacos_bench.problem.Problem` and
returns a :class:`SolveResult` holding the same :class:`~tacos_bench.schedule.Schedule`
type. Backends only solve: verification, bounds, timing of the whole run and
records happen outside (``tacos_bench.pipeline``).

Backends are registered by name and imported lazily, so importing ``solvers``
never pulls in OR-Tools, PuLP or numba.

Examples
--------
>>> from solvers import available_solvers
>>> "greedy" in available_solvers()
True
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

Status = Literal["optimal", "feasible", "infeasible", "no_solution", "error"]
STATUSES: tuple[str, ...] = ("optimal", "feasible", "infeasible", "no_solution", "error")

# Capability flags: what a backend can do, so callers never special-case names.
CAP_ALL_GATHER = "all_gather"
CAP_REDUCE_SCATTER = "reduce_scatter"
CAP_ALL_REDUCE = "all_reduce"
CAP_EXACT = "exact"            # can prove optimality on its model
CAP_TIME_LIMIT = "time_limit"  # honours time_limit_s
CAP_RANDOMIZED = "randomized"  # uses the seed
CAP_WARM_START = "warm_start"  # accepts an initial schedule
CAP_THREADS = "threads"        # honours threads


@dataclass(frozen=True)
class SolveResult:
    """What every backend returns.

    ``objective_us`` is what the backend optimized (for exact backends on a
    discretized network it may differ from the schedule's continuous makespan);
    ``best_bound_us`` is the proven lower bound when the backend has one.
    """

    status: Status
    schedule: Schedule | None
    objective_us: float | None = None
    best_bound_us: float | None = None
    build_time_s: float = 0.0
    solve_time_s: float = 0.0
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def gap(self) -> float | None:
        """Relative gap between objective and best bound, when both exist."""
        if self.objective_us is None or self.best_bound_us is None or self.objective_us <= 0:
            return None
        return max(0.0, (self.objective_us - self.best_bound_us) / self.objective_us)


class Solver(abc.ABC):
    """A synthesis backend.

    Subclasses set ``name`` and ``capabilities`` and implement :meth:`solve`.
    Unknown keyword options must raise :class:`~tacos_bench.errors.SolverError`.
    """

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[str]] = frozenset()

    @abc.abstractmethod
    def solve(self, problem: Problem, *, time_limit_s: float | None = None, seed: int = 0,
              threads: int = 1, **options) -> SolveResult:
        ...

    def supports(self, kind: str) -> bool:
        return kind in self.capabilities

    def check_supported(self, problem: Problem) -> None:
        if not self.supports(problem.kind):
            raise SolverError(f"solver {self.name!r} does not support {problem.kind}")

    def __repr__(self) -> str:
        return f"<solver {self.name}>"


def reject_unknown_options(solver: str, options: Mapping[str, Any], known) -> None:
    """Raise a one-line :class:`SolverError` for options the backend does not know."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise SolverError(f"solver {solver!r} has no option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


# name -> "module:Class"; imported on first use.
_REGISTRY: dict[str, str] = {
    "bfs": "solvers.trivial:BfsTreeSolver",
    "greedy": "solvers.greedy:GreedySolver",
    "milp": "solvers.milp:MilpSolver",
    "cpsat": "solvers.cpsat:CpSatSolver",
    "ring": "solvers.baselines:RingSolver",
    "direct": "solvers.baselines:DirectSolver",
    "rhd": "solvers.baselines:RecursiveHalvingDoublingSolver",
    "dbt": "solvers.baselines:DoubleBinaryTreeSolver",
}


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


def get_solver(name: str) -> Solver:
    """Instantiate a registered backend by name."""
    if name not in _REGISTRY:
        raise SolverError(f"unknown solver {name!r}; choose one of {', '.join(sorted(available_solvers()))}")
    mod_name, cls_name = _REGISTRY[name].split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name == mod_name:
            raise SolverError(f"solver {name!r} is not available in this installation") from e
        raise SolverError(f"solver {name!r} needs the missing package {e.name!r}") from e
    return getattr(mod, cls_name)()
