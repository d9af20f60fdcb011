"""The in-network All-Reduce baselines (:mod:`solvers.in_switch`): ``nvls``, NVLS-like inside one switch that
multicasts and reduces, and ``sharp``, SHARP-like through a two-level tree of such switches."""

from __future__ import annotations

from tacos_bench.collective import ALL_REDUCE
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem

from ..base import CAP_ALL_REDUCE, CAP_FABRIC_ONLY
from ..in_switch import nvls_all_reduce, sharp_all_reduce
from .common import BaselineSolver
from .stats import IN_SWITCH_STATS


class NvlsSolver(BaselineSolver):
    """Every chunk reduced inside the switch on its way to its owner, then multicast back from it, pipelined
    owner by owner (a fabric with a cut-through switch that has ``multicast`` and ``reduce`` and a port to
    every NPU: NVSwitch's NVLS, as NCCL's NVLS algorithm uses it)."""

    name = "nvls"
    capabilities = frozenset({CAP_ALL_REDUCE, CAP_FABRIC_ONLY})
    Stats = IN_SWITCH_STATS
    native_fabric = True   # schedules the fabric itself, not through the logical topology

    def _build(self, problem: Problem, opts, clock):
        if problem.kind != ALL_REDUCE:  # pragma: no cover - check_supported refuses it first
            raise SolverError(f"nvls schedules all_reduce only, not {problem.kind}")
        return nvls_all_reduce(problem), {"algorithm": "in-switch reduce + multicast pipeline"}


class SharpSolver(BaselineSolver):
    """Every chunk reduced inside the switches on its way to its owner (leaf, spine, leaf), then multicast back
    the same way, pipelined owner by owner, each chunk through one spine in turn: InfiniBand SHARP's aggregation
    tree, as NCCL's CollNet uses it (a fabric whose NPUs each sit on a cut-through leaf that multicasts and
    reduces, the leaves on a common spine that does too: ``leafspine<L>x<P>_sharp``; one such switch is the
    ``nvls`` case)."""

    name = "sharp"
    capabilities = frozenset({CAP_ALL_REDUCE, CAP_FABRIC_ONLY})
    Stats = IN_SWITCH_STATS
    native_fabric = True

    def _build(self, problem: Problem, opts, clock):
        if problem.kind != ALL_REDUCE:  # pragma: no cover - check_supported refuses it first
            raise SolverError(f"sharp schedules all_reduce only, not {problem.kind}")
        return sharp_all_reduce(problem), {"algorithm": "in-network reduce + multicast tree pipeline"}
