"""The in-process API: one call from a topology and a demand to a verified schedule (``tacos_bench.runner.synthesize``).

For per-iteration use (a mixture-of-experts layer's traffic changes every step): the backend's kernels are
compiled once per process (the first call pays it, outside ``synthesis_time_s``), and each later call costs
the synthesis itself plus, with ``verify=True`` (the default), the independent replay.

Examples
--------
>>> import numpy as np
>>> from tacos_bench.runner import synthesize
>>> M = np.full((4, 4), 2**20) - np.diag([2**20] * 4)          # 1 MiB between every two of 4 NPUs
>>> out = synthesize("ring4", M, solver="greedy")
>>> out.valid, out.record["collective"], out.record["num_chunks"]
(True, 'all_to_allv', 12)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..collective import DEMAND_KINDS, Collective
from ..errors import CollectiveError
from ..problem import Problem


@dataclass
class Synthesis:
    """What :func:`synthesize` returns: the schedule, whether the verifier accepted it, its time, the flat
    record (the fields of ``result.json``) and the problem it solved."""

    schedule: Any
    valid: bool
    collective_time_us: float | None
    status: str
    record: dict
    problem: Problem


def synthesize(topology, demand, solver: str = "greedy", *, verify: bool = True, bounds: bool = False,
               chunk_bytes: int | None = None, chunks_per_npu: int = 1, **options) -> Synthesis:
    """Synthesize (and verify) a schedule of ``demand`` on ``topology`` with backend ``solver``.

    Parameters
    ----------
    topology : Topology or str
        A :class:`~tacos_bench.topology.Topology`, or a name (:func:`tacos_bench.topology.named.named_topology`).
    demand : Collective, Demand, array or str
        A named collective (or its kind), a chunk table (:class:`tacos_bench.demand.Demand`), or an N x N byte
        matrix (row = sender; All-to-Allv, chunked by ``chunk_bytes`` / ``chunks_per_npu``).
    solver : str
        A registered backend; ``options`` are its options (``seed``, ``time_limit_s``, ...).
    verify : bool
        Replay the schedule with the verifier (``valid``); off, ``valid`` is None and the time is the
        schedule's own makespan.
    bounds : bool
        Also compute the lower bounds (``record["lower_bound_us"]``); they may cost more than the synthesis.
    """
    from ..demand import Demand, all_to_allv
    from ..topology.named import named_topology
    from .stages import problem_fields, solve_and_verify

    topo = named_topology(topology) if isinstance(topology, str) else topology
    if isinstance(demand, Collective):
        coll = demand
    elif isinstance(demand, Demand):
        coll = Collective(demand.name if demand.name in DEMAND_KINDS else "custom", demand=demand)
    elif isinstance(demand, str):
        coll = Collective(demand, chunks_per_npu)
    else:
        try:
            matrix = np.asarray(demand, dtype=np.float64)
        except (TypeError, ValueError):
            raise CollectiveError(f"demand must be a Collective, a Demand, a kind or an N x N byte matrix, got "
                                  f"{type(demand).__name__}") from None
        coll = Collective("all_to_allv", demand=all_to_allv(matrix, chunk_bytes, chunks_per_npu))
    problem = Problem(topo, coll)
    fields = problem_fields(problem)
    if verify:
        rec, sched = solve_and_verify(problem, solver, options, bounds=bounds, fields=fields)
        return Synthesis(sched, bool(rec.get("valid")), rec.get("collective_time_us"), rec.get("status"), rec,
                         problem)
    import solvers

    backend = solvers.get_solver(solver)
    opts = backend.options(options)
    backend.warmup(problem, opts)
    t0 = time.perf_counter()
    res = backend.solve(problem, opts)
    took = time.perf_counter() - t0
    ms = None if res.schedule is None else float(res.schedule.makespan_us)
    fields.update(status=res.status, candidate=res.candidate, solver=solver, synthesis_time_s=took,
                  collective_time_us=ms)
    return Synthesis(res.schedule, None, ms, res.status, fields, problem)

