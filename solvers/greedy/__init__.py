"""The greedy TACOS matcher: utilization-maximizing link-chunk matching on the time-expanded network.

All-Gather is synthesized by an event-driven greedy (Won et al., TACOS,
arXiv 2304.05301): at every event time each idle directed link ``u->v`` may
start one chunk that ``u`` holds (arrived by now) and ``v`` neither holds nor is
already receiving; a node may forward a chunk the instant it arrives. Per
destination, (chunk, destination) pairs are taken in the ``chunk_order`` and
each goes to one of the idle in-links that can carry it, chosen by
``link_tiebreak``. Transfers start at an event time, when the sender already
holds the chunk, so every schedule is causal by construction, also on
heterogeneous links (the C++ reference v1.3.0 relabels an in-flight copy as a
chunk the sender obtains only later, and its heterogeneous schedules fail replay).

Reduce-Scatter and All-Reduce come from :func:`solvers.compose.solve_collective`:
Reduce-Scatter is the All-Gather on the reversed topology with time reversed;
All-Reduce is Reduce-Scatter then All-Gather, overlapped per link and chunk or with a barrier
(``collective.overlap``).

The options are documented in ``docs/greedy.md``; the hot loops live in
:mod:`solvers.greedy._kernel_classic` and :mod:`solvers.greedy._kernel_scale` (shared pieces in
:mod:`solvers.greedy._kernel_common`).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import torus2d
>>> from solvers.greedy import GreedySolver
>>> p = Problem(torus2d(3, 3), Collective("all_gather"))
>>> res = GreedySolver().solve(p, seed=1)
>>> res.status, len(res.schedule)
('feasible', 72)

The family (one package, nothing private leaves it):

- :mod:`~solvers.greedy.options`: options and constants;
- :mod:`~solvers.greedy.engine`: one run on a kernel (classic, scale, tiered, unicast/routed) and
  :func:`greedy_all_gather`;
- :mod:`~solvers.greedy.hierarchy`, :mod:`~solvers.greedy.decomposition`: groups and rails, and the tier
  decomposition built on them;
- :mod:`~solvers.greedy.solver` (``greedy``, ``greedy_plus``) and :mod:`~solvers.greedy.hierarchical` (``hier``).
"""

from .engine import greedy_all_gather, kernel_for, pick_engine, warmup
from .options import (CHUNK_ORDERS, COMPACT_MIN_ROWS, IMPORTS, LINK_ORDERS, LINK_TIEBREAKS, MATCHINGS, GreedyOptions,
                      GreedyPlusOptions, restart_count, restart_seeds)
from .solver import GreedyPlusSolver, GreedySolver

__all__ = ["CHUNK_ORDERS", "COMPACT_MIN_ROWS", "IMPORTS", "LINK_ORDERS", "LINK_TIEBREAKS", "MATCHINGS", "GreedyOptions",
           "GreedyPlusOptions", "GreedyPlusSolver", "GreedySolver", "greedy_all_gather", "kernel_for", "pick_engine",
           "restart_count", "restart_seeds", "warmup"]
