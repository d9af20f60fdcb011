"""The fabric greedy resumed from a state (a fault's, :mod:`solvers.repair`) on a switched fabric.

The same runs as a fresh synthesis (:mod:`solvers.greedy.fabric_solver`: the seeds ``opts`` asks for; for
``greedy_plus`` its rules and the TACOS rule), each started from every copy the survivors hold or are
receiving (at its arrival time) with each link free from the state's ``link_free`` and the failed links
never; the fastest is kept. The fabric greedy honours those times itself, so its schedule needs no placing
after the fault beyond the shift by the fault's time.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.faults import Fault, state_at
>>> from tacos_bench.topology.fabrics import switched
>>> from tacos_bench.verify import verify
>>> from solvers import get_solver
>>> p = Problem(switched(4, mode="store_forward"), Collective("all_gather", 1, 1))
>>> healthy = get_solver("greedy").solve(p).schedule
>>> fault = Fault(healthy.makespan_us / 2, links=((0, 4),))     # NPU 0's up-link into the switch
>>> from solvers.repair import repair
>>> r = repair(p, healthy, fault, "greedy")
>>> verify(p, r.schedule, fault).valid
True
"""

from __future__ import annotations

import numpy as np

from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..base import StartState
from ..fabric_routes import surviving_hops
from .fabric import fabric_copy
from .fabric_solver import fabric_rules, seeds_of
from .options import GreedyOptions


def resume_fabric(problem: Problem, start: StartState, opts: GreedyOptions) -> tuple[Schedule, dict]:
    """The copy collective of ``problem`` completed from ``start`` (times from the fault; see the module
    docstring), and its statistics."""
    links = np.asarray(start.links, bool)
    # routes over the surviving links only (the healthy hops' shortest ways may cross a failed link)
    hops = surviving_hops(problem.topology, links, problem.chunk_bytes)
    hv, hc, ht = start.surviving_holds()
    free = np.zeros(problem.num_links) if start.link_free is None else np.asarray(start.link_free, np.float64)
    free = np.where(links, free, np.inf)
    seeds = seeds_of(problem, opts)
    # the fabric portfolio's rules and (tacos_candidate) TACOS's, seed by seed: the first on a tie
    variants = [("rules", *fabric_rules(opts))]
    if opts.tacos_candidate and variants[0][1:] != ("random", False):
        variants.append(("tacos", "random", False))
    best: Schedule | None = None
    chosen = None
    for seed in seeds:
        for name, order, local in variants:
            s = fabric_copy(problem, seed=seed, chunk_order=order, local_first=local, hops=hops, link_free=free,
                            holds=(hv, hc, ht), alive=start.alive)
            if best is None or s.makespan_us < best.makespan_us * (1 - 1e-12):
                best, chosen = s, (name, seed)
    return best, {"engine": "fabric", "resume_runs": len(seeds) * len(variants), "chosen": chosen[0],
                  "best_seed": chosen[1]}
