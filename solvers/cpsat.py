"""CP-SAT (OR-Tools) on the discretized time-expanded network.

Two formulations of the same All-Gather problem on the same TEN
(:mod:`solvers.ten`, model notes in :mod:`solvers._exact_common`):

``model="time_indexed"`` (default)
    Boolean ``x[c, link, step]`` and hold literals ``h[c, npu, step]``:
    ``ExactlyOne`` receipt per (chunk, NPU), ``AtMostOne`` per link window,
    clauses ``x -> h`` and ``h[k] -> h[k-1] or (arrivals at k)``; integer
    makespan ``T >= sum(arrive * x)`` per (chunk, NPU), minimized.
``model="interval"``
    Per (chunk, link) an optional fixed-size interval (presence ``p``, start
    ``s``) with ``NoOverlap`` per link, ``ExactlyOne`` incoming link per
    (chunk, NPU), an arrival variable ``a[c, v] = s + d`` when present, sends
    start after the sender's arrival, ``T >= a``. Horizon-independent size.

docs/exact.md compares the two (the time-indexed one wins on the benchmark
instances, hence the default).

CP-SAT's portfolio needs several workers to prove optimality on these models
(it never did with 2 workers in our measurements, even on 2 cores), so the
number of workers defaults to ``max(8, threads)``; pass ``num_workers`` to
override.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.generators import ring
>>> p = Problem(ring(4), Collective("all_gather"))
>>> r = CpSatSolver().solve(p, time_limit_s=30, warm_start=False)
>>> r.status, round(r.objective_us / float(p.link_time_us[0]))
('optimal', 2)
"""

from __future__ import annotations

import time

import numpy as np

from dataclasses import dataclass

from ._exact_common import (AgModel, ExactOptions, ExactSolverBase, ModelOutcome, _groups, hold_values, shared_status,
                            solver_time_limit)
from .base import (CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_EXACT, CAP_OVERLAP, CAP_RANDOMIZED, CAP_REDUCE_SCATTER,
                   CAP_THREADS, CAP_TIME_LIMIT, CAP_WARM_START)
from .options import option

MODELS = ("time_indexed", "interval")
DEFAULT_WORKERS = 8
# CP-SAT status name -> shared status (with a solution; without one "feasible" becomes "no_solution")
CPSAT_STATUS = {"OPTIMAL": "optimal", "FEASIBLE": "feasible", "INFEASIBLE": "infeasible",
                "MODEL_INVALID": "error", "UNKNOWN": "no_solution"}


@dataclass(frozen=True)
class CpSatOptions(ExactOptions):
    model: str = option("time_indexed", choices=MODELS, doc="formulation: time_indexed or interval")
    num_workers: int | None = option(None, minimum=1, doc="CP-SAT workers (null: max(8, threads); fewer than 8 "
                                                          "rarely prove optimality, even on 2 cores)")


def _build_time_indexed(model: AgModel, hint):
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    sv = model.sv
    x = [m.new_bool_var(f"x{i}") for i in range(len(sv))]
    h = [m.new_bool_var(f"h{j}") for j in range(model.num_holds)]
    T = m.new_int_var(model.lb_steps, model.ub_steps, "T")
    arrive = sv.arrive.tolist()
    for idx in model.receipt:
        il = idx.tolist()
        m.add_exactly_one([x[i] for i in il])
        m.add(cp_model.LinearExpr.weighted_sum([x[i] for i in il], [arrive[i] for i in il]) <= T)
    for idx in model.capacity:
        m.add_at_most_one([x[i] for i in idx.tolist()])
    prev = model.hold_prev.tolist()
    for j in range(model.num_holds):
        ins = [x[i] for i in model.hold_in[j].tolist()]
        support = ins + ([h[prev[j]]] if prev[j] >= 0 else [])
        if support:
            m.add_bool_or(support).only_enforce_if(h[j])
        else:
            m.add(h[j] == 0)
        for lit in support:  # true holds are monotone; lets propagation run forward too
            m.add_implication(lit, h[j])
    for i, j in enumerate(model.send_hold.tolist()):
        if j >= 0:
            m.add_implication(x[i], h[j])
    for a, b in model.symmetry:
        wa = cp_model.LinearExpr.weighted_sum([x[i] for i in a.tolist()], [arrive[i] for i in a.tolist()])
        wb = cp_model.LinearExpr.weighted_sum([x[i] for i in b.tolist()], [arrive[i] for i in b.tolist()])
        m.add(wa <= wb)
    m.minimize(T)
    if hint is not None:
        for var, val in zip(x, hint.tolist()):
            m.add_hint(var, int(val))
        for var, val in zip(h, hold_values(model, hint).tolist()):
            m.add_hint(var, int(val))
        m.add_hint(T, int(np.max(sv.arrive[hint > 0])))

    def extract(solver):
        return np.array([solver.boolean_value(v) for v in x], dtype=np.int8)

    return m, T, extract


def _build_interval(model: AgModel, hint):
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    sv = model.sv
    ten = model.ten
    n = ten.num_npus
    d_all = ten.link_steps
    owner = ten.owner
    earliest = ten.earliest_step()
    H = ten.horizon
    # one optional interval per (chunk, link) that has any candidate step
    order, keys, starts = _groups(sv.chunk * ten.problem.num_links + sv.link)
    pc, pl = np.divmod(keys, ten.problem.num_links)
    kmin = sv.step[order[starts[:-1]]]
    kmax = sv.step[order[starts[1:] - 1]]
    P = len(keys)
    p = [m.new_bool_var(f"p{g}") for g in range(P)]
    s = [m.new_int_var(int(kmin[g]), int(kmax[g]), f"s{g}") for g in range(P)]
    iv = [m.new_optional_fixed_size_interval_var(s[g], int(d_all[pl[g]]), p[g], f"iv{g}") for g in range(P)]
    T = m.new_int_var(model.lb_steps, model.ub_steps, "T")
    a = {}
    for c in range(ten.num_chunks):
        for v in range(n):
            if v != owner[c]:
                a[c, v] = m.new_int_var(int(earliest[c, v]), H, f"a{c}_{v}")
                m.add(T >= a[c, v])
    topo = ten.problem.topology
    src, dst = topo.src[pl], topo.dst[pl]
    by_link: dict[int, list] = {}
    by_recv: dict[tuple[int, int], list[int]] = {}
    for g in range(P):
        c, li = int(pc[g]), int(pl[g])
        u, v = int(src[g]), int(dst[g])
        by_link.setdefault(li, []).append(iv[g])
        by_recv.setdefault((c, v), []).append(g)
        m.add(a[c, v] == s[g] + int(d_all[li])).only_enforce_if(p[g])
        if u != owner[c]:
            m.add(s[g] >= a[c, u]).only_enforce_if(p[g])
    for ivs in by_link.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    for gs in by_recv.values():
        m.add_exactly_one([p[g] for g in gs])
    cpn = ten.problem.collective.chunks_per_npu
    for o in range(n):  # interchangeable chunks of one owner: order their arrival at one NPU
        v = (o + 1) % n
        for j in range(cpn - 1):
            c1, c2 = o + j * n, o + (j + 1) * n
            if v != o:
                m.add(a[c1, v] <= a[c2, v])
    m.minimize(T)
    if hint is not None:
        chosen = np.flatnonzero(hint > 0)
        hint_key = {(int(sv.chunk[i]), int(sv.link[i])): int(sv.step[i]) for i in chosen}
        for g in range(P):
            k = hint_key.get((int(pc[g]), int(pl[g])))
            m.add_hint(p[g], k is not None)
            m.add_hint(s[g], int(kmin[g]) if k is None else k)
        for (c, li), k in hint_key.items():
            m.add_hint(a[c, int(topo.dst[li])], k + int(d_all[li]))
        m.add_hint(T, int(np.max(sv.arrive[chosen])))
    # map (chunk, link, step) back to send-variable indices
    L = ten.problem.num_links
    key_sv = (sv.chunk * L + sv.link) * (H + 2) + sv.step

    def extract(solver):
        x = np.zeros(len(sv), dtype=np.int8)
        sel = [g for g in range(P) if solver.boolean_value(p[g])]
        if sel:
            kp = (pc[sel] * L + pl[sel]) * (H + 2) + np.array([solver.value(s[g]) for g in sel])
            x[np.searchsorted(key_sv, kp)] = 1
        return x

    return m, T, extract


class CpSatSolver(ExactSolverBase):
    """Exact All-Gather (and RS/AR by reversal) with OR-Tools CP-SAT on the TEN.

    Options: :class:`CpSatOptions` (``mip_gap`` maps to ``relative_gap_limit``).
    """

    name = "cpsat"
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_EXACT, CAP_TIME_LIMIT,
                              CAP_WARM_START, CAP_THREADS, CAP_RANDOMIZED, CAP_OVERLAP})
    Options = CpSatOptions
    STATUS_MAP = CPSAT_STATUS

    def _run_model(self, model: AgModel, hint, deadline, opts: CpSatOptions) -> ModelOutcome:
        from ortools.sat.python import cp_model

        t0 = time.perf_counter()
        build_fn = _build_time_indexed if opts.model == "time_indexed" else _build_interval
        m, T, extract = build_fn(model, hint)
        proto = m.proto
        nv, nc = len(proto.variables), len(proto.constraints)
        build = time.perf_counter() - t0
        workers = opts.num_workers or max(DEFAULT_WORKERS, opts.num_threads)
        solver = cp_model.CpSolver()
        prm = solver.parameters
        if deadline is not None:
            left = deadline - time.perf_counter()
            if left <= 0:
                return ModelOutcome("no_solution", None, None, None, nv, nc, build, 0.0,
                                    message="time limit reached while building the CP-SAT model",
                                    stats={"cpsat_model": opts.model, "cpsat_build_time_s": build},
                                    native="not started", limit="time_limit")
            prm.max_time_in_seconds = solver_time_limit(left, nv + nc)
        prm.num_workers = workers
        prm.random_seed = int(opts.seed) % 2147483647
        prm.relative_gap_limit = float(opts.mip_gap)
        prm.log_search_progress = bool(opts.log)
        t1 = time.perf_counter()
        code = solver.solve(m)
        solve_s = time.perf_counter() - t1
        name = solver.status_name(code)
        stats = {"cpsat_status": name, "cpsat_model": opts.model, "num_workers": workers,
                 "cpsat_conflicts": int(solver.num_conflicts), "cpsat_branches": int(solver.num_branches),
                 "cpsat_build_time_s": build}
        has_sol = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        st = shared_status(CPSAT_STATUS, name, has_sol)
        # CP-SAT stops early only at its time limit or at the gap the user allowed
        limit = "time_limit" if name in ("FEASIBLE", "UNKNOWN") else None
        bound = None
        if name in ("OPTIMAL", "FEASIBLE", "UNKNOWN"):
            b = float(solver.best_objective_bound)
            bound = b if np.isfinite(b) else None
        if not has_sol:
            msg = f"CP-SAT model invalid: {m.validate()}" if name == "MODEL_INVALID" else ""
            return ModelOutcome(st, None, None, bound, nv, nc, build, solve_s, message=msg, stats=stats,
                                native=name, limit=limit)
        obj = int(round(solver.objective_value))
        if st == "optimal" and opts.mip_gap > 0:
            st, limit = "feasible", "gap_limit"  # optimal only up to the gap the user allowed
        if st == "optimal":
            bound = float(obj)
        return ModelOutcome(st, extract(solver), obj, bound, nv, nc, build, solve_s, stats=stats, native=name,
                            limit=limit)
