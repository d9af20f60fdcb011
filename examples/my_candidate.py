"""A candidate of your own for greedy_plus's portfolio, loaded by import path.

    PYTHONPATH=examples python run.py solver=greedy_plus topo=torus4x4 'solver.candidates=[rules,my_candidate:ManySeeds]'

Copy this file anywhere on your ``PYTHONPATH`` (your own package): the portfolio imports ``module:Name``, runs
it after the built-in candidates it was given, replays its schedule with the verifier before it may win, and
records its time and makespan in ``candidates_tried`` (the winner in ``candidate``).

A candidate needs a ``name`` and ``run(problem, ctx)`` returning a schedule (``tacos_bench.Schedule``) or
``None``; ``applies(problem, ctx)`` may return why it does not apply. ``ctx.opts`` holds the backend's options,
``ctx.deadline`` the time limit (a ``time.perf_counter()`` value or None), ``ctx.best`` the best schedule so far,
``ctx.stop_bound()`` a lower bound at which the portfolio stops.
"""

import time

from solvers import get_solver
from solvers.portfolio import Candidate


class ManySeeds(Candidate):
    """The TACOS greedy with 16 seeds, the fastest kept (stopping at the deadline or the bound)."""

    name = "many_seeds"

    def applies(self, problem, ctx):
        # the plain greedy takes every collective; a rule of your own might say "All-Gather only" here
        return None

    def run(self, problem, ctx):
        greedy = get_solver("greedy")
        best = None
        for seed in range(16):
            if best is not None and (ctx.at_bound(best.makespan_us)
                                     or ctx.deadline is not None and time.perf_counter() > ctx.deadline):
                break
            sched = greedy.solve(problem, seed=ctx.seed * 1000 + seed).schedule.to_schedule()
            if best is None or sched.makespan_us < best.makespan_us:
                best = sched
        return best
