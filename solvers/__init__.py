"""Synthesis backends behind one interface (see :mod:`solvers.base`)."""

from .base import (STATUSES, SolveResult, Solver, available_solvers, get_solver,
                   register_solver)

__all__ = ["STATUSES", "SolveResult", "Solver", "available_solvers", "get_solver", "register_solver"]
