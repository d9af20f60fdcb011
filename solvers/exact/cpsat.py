"""CP-SAT (OR-Tools) in continuous time or on the discretized time-expanded network.

``model="continuous"`` solves the problem the verifier checks, with no grid beyond an exact time unit
(:mod:`solvers.exact.continuous`). Two formulations of the same copy-collective problem on the same TEN
(:mod:`solvers.exact.ten`, model notes in :mod:`solvers.exact.common`; reducing
collectives by reversal):

``model="time_indexed"`` (what ``auto``, the default, uses for all_gather and broadcast)
    Boolean ``x[c, link, step]`` and hold literals ``h[c, npu, step]``:
    ``ExactlyOne`` receipt per (chunk, NPU), ``AtMostOne`` per link window,
    clauses ``x -> h`` and ``h[k] -> h[k-1] or (arrivals at k)``; integer
    makespan ``T >= sum(arrive * x)`` per needed (chunk, NPU), minimized.
    Unicast chunks: ``AtMostOne`` receipt per relay and flow conservation
    (holds stay "received by step k", as clauses).
``model="interval"`` (what ``auto`` uses for gather, scatter and all_to_all)
    Per (chunk, link) an optional fixed-size interval (presence ``p``, start
    ``s``) with ``NoOverlap`` per link, ``ExactlyOne`` incoming link per
    (chunk, NPU), an arrival variable ``a[c, v] = s + d`` when present, sends
    start after the sender's arrival, ``T >= a``. Horizon-independent size.
    Unicast chunks: ``AtMostOne`` incoming link per relay and flow
    conservation over the presences.

docs/exact.md compares the two: the time-indexed one wins on the All-Gather
benchmark instances, the interval one on unicast data (gather, scatter,
all_to_all); the default ``model="auto"`` picks accordingly.

CP-SAT's portfolio needs several workers to prove optimality on these models
(it never did with 2 workers in our measurements, even on 2 cores), so the
number of workers defaults to ``max(8, threads)``; pass ``num_workers`` to
override.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> p = Problem(ring(4), Collective("all_gather"))
>>> r = CpSatSolver().solve(p, time_limit_s=30, warm_start=False)
>>> r.status, round(r.objective_us / float(p.link_time_us[0]))
('optimal', 2)
"""

from __future__ import annotations

import time

import numpy as np

from dataclasses import dataclass

from tacos_bench.errors import SolverError
from tacos_bench.topology.model import FABRIC, POINT_TO_POINT

from .common import (AgModel, ExactOptions, ExactSolverBase, ModelOutcome, _groups, hold_values, shared_status,
                            solver_time_limit)
from ..base import (CAP_DEMAND_UNICAST, CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_ALL_TO_ALL, CAP_BROADCAST, CAP_EXACT, CAP_FABRIC, CAP_GATHER,
                   CAP_OVERLAP, CAP_RANDOMIZED, CAP_REDUCE, CAP_REDUCE_SCATTER, CAP_RELEASE, CAP_SCATTER, CAP_THREADS,
                   CAP_TIME_LIMIT, CAP_WARM_START)
from ..options import option
from .stats import CPSAT_STATS

MODELS = ("auto", "time_indexed", "interval", "continuous")
DEFAULT_WORKERS = 8
# CP-SAT status name -> shared status (with a solution; without one "feasible" becomes "no_solution")
CPSAT_STATUS = {"OPTIMAL": "optimal", "FEASIBLE": "feasible", "INFEASIBLE": "infeasible",
                "MODEL_INVALID": "error", "UNKNOWN": "no_solution"}


@dataclass(frozen=True)
class CpSatOptions(ExactOptions):
    model: str = option("auto", choices=MODELS, doc="formulation: continuous (exact in time, no TEN: "
                                                    "solvers.exact.continuous), or on the TEN time_indexed, "
                                                    "interval, or auto (interval for gather, scatter and "
                                                    "all_to_all, time_indexed otherwise)")
    num_workers: int | None = option(None, minimum=1, doc="CP-SAT workers (null: max(8, threads); fewer than 8 "
                                                          "rarely prove optimality, even on 2 cores)")


def resolve_model(name: str, model: AgModel) -> str:
    """The formulation ``auto`` stands for: ``interval`` for unicast data, where it settled the 8-step
    All-to-All on the 4x4 torus in 0.6-1.0 s against 2.2-6.7 s (time-indexed; seeds 0-2, 8 workers on
    2 cores), and ``time_indexed`` for multicast data, where it wins (docs/exact.md)."""
    if name != "auto":
        return name
    return "interval" if model.unicast else "time_indexed"


def _build_time_indexed(model: AgModel, hint):
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    sv = model.sv
    x = [m.new_bool_var(f"x{i}") for i in range(len(sv))]
    h = [m.new_bool_var(f"h{j}") for j in range(model.num_holds)]
    T = m.new_int_var(model.lb_steps, model.ub_steps, "T")
    arrive = sv.arrive.tolist()
    required = model.receipt_required.tolist()
    for g, idx in enumerate(model.receipt):
        il = idx.tolist()
        if not required[g]:  # a relay: at most one receipt, no deadline of its own
            m.add_at_most_one([x[i] for i in il])
            continue
        m.add_exactly_one([x[i] for i in il])
        m.add(cp_model.LinearExpr.weighted_sum([x[i] for i in il], [arrive[i] for i in il]) <= T)
    for idx in model.capacity:
        m.add_at_most_one([x[i] for i in idx.tolist()])
    prev = model.hold_prev.tolist()
    # Holds are "received by step k" for unicast chunks too (not the MILP's inventory): these clauses
    # propagated better than the inventory's linear equalities (2.4-5.5 s against 3.8-15.7 s to settle the
    # 8-step All-to-All on the 4x4 torus, seeds 0-2), and the flow constraints already keep a relay from
    # sending twice.
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
    for fin, fout, supply in zip(model.flow_in, model.flow_out, model.flow_supply.tolist()):
        m.add(sum(x[i] for i in fout.tolist()) - sum(x[i] for i in fin.tolist()) == supply)
    for idx, least in model.link_min:
        m.add(sum(x[i] for i in idx.tolist()) >= least)
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
    source = ten.source
    earliest = ten.earliest_step()
    latest = ten.latest_step()
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
    # arrival of chunk c at NPU v, for every (c, v) with a candidate receipt (needed, or a relay)
    a = {}
    required = {}
    for key, req in zip(model.receipt_key.tolist(), model.receipt_required.tolist()):
        c, v = divmod(key, n)
        a[c, v] = m.new_int_var(int(earliest[c, v]), int(min(H, latest[c, v])), f"a{c}_{v}")
        required[c, v] = req
        if req:
            m.add(T >= a[c, v])
    topo = ten.problem.topology
    src, dst = topo.src[pl], topo.dst[pl]
    by_link: dict[int, list] = {}
    by_recv: dict[tuple[int, int], list[int]] = {}
    by_send: dict[tuple[int, int], list[int]] = {}
    for g in range(P):
        c, li = int(pc[g]), int(pl[g])
        u, v = int(src[g]), int(dst[g])
        by_link.setdefault(li, []).append(iv[g])
        by_recv.setdefault((c, v), []).append(g)
        by_send.setdefault((c, u), []).append(g)
        m.add(a[c, v] == s[g] + int(d_all[li])).only_enforce_if(p[g])
        if u != source[c]:
            if (c, u) in a:
                m.add(s[g] >= a[c, u]).only_enforce_if(p[g])
            else:  # u can never receive c in time
                m.add(p[g] == 0)
    for ivs in by_link.values():
        if len(ivs) > 1:
            m.add_no_overlap(ivs)
    for cv, gs in by_recv.items():
        if required[cv]:
            m.add_exactly_one([p[g] for g in gs])
        else:
            m.add_at_most_one([p[g] for g in gs])
    if model.unicast:  # one path per chunk (solvers.exact.common)
        for c, u in sorted(set(by_send) | {cv for cv in by_recv if not required[cv]}):
            m.add(sum(p[g] for g in by_send.get((c, u), [])) - sum(p[g] for g in by_recv.get((c, u), []))
                  == int(u == source[c]))
    if model.link_min:
        group_of = {(int(c), int(li)): g for g, (c, li) in enumerate(zip(pc.tolist(), pl.tolist()))}
        for idx, least in model.link_min:
            gs = sorted({group_of[int(sv.chunk[i]), int(sv.link[i])] for i in idx.tolist()})
            m.add(sum(p[g] for g in gs) >= least)
    for c1, c2, v in model.symmetry_pairs:  # interchangeable chunks: order their arrival at one NPU
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
    """Exact copy collectives (the reducing ones by reversal) with OR-Tools CP-SAT, on the TEN or, with
    ``model="continuous"``, in continuous time (:mod:`solvers.exact.continuous`). On a switched fabric, always
    the continuous-time fabric model (:mod:`solvers.exact.fabric`), cold.

    Options: :class:`CpSatOptions` (``mip_gap`` maps to ``relative_gap_limit``).
    """

    name = "cpsat"
    # chunk tables of unicast chunks: the models read each chunk's source and destination as for All-to-All
    # (copies to subsets and reductions from subsets are not modelled: they would be scheduled as every NPU's)
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_BROADCAST, CAP_REDUCE,
                              CAP_GATHER, CAP_SCATTER, CAP_ALL_TO_ALL, CAP_EXACT, CAP_TIME_LIMIT, CAP_WARM_START,
                              CAP_THREADS, CAP_RANDOMIZED, CAP_OVERLAP, CAP_FABRIC,
                              CAP_DEMAND_UNICAST, CAP_RELEASE})
    Options = CpSatOptions
    STATUS_MAP = CPSAT_STATUS
    Stats = CPSAT_STATS

    # ------------------------------------------------------------------ the model of each network kind (_NETWORK_MODELS)
    def refusal(self, problem) -> str | None:
        return super().refusal(problem) or _NETWORK_MODELS[problem.topology.network_kind].refusal(problem) or None

    def _solve(self, problem, opts: CpSatOptions):
        return _NETWORK_MODELS[problem.topology.network_kind].solve(self, problem, opts)

    def _fabric_all_reduce_overlapped(self, problem, opts: CpSatOptions):
        """All-Reduce on a fabric with ``collective.overlap``: the phases solved and composed with a barrier, then
        the All-Gather re-timed per link and chunk on the routes (solvers.exact.fabric.overlap_all_reduce; the
        composition of solvers.compose re-times over single links only)."""
        from dataclasses import replace

        from .fabric import overlap_all_reduce

        res = super()._solve(replace(problem, collective=replace(problem.collective, overlap=False)), opts)
        if res.schedule is None:
            return res
        sched = overlap_all_reduce(problem, res.schedule)
        t = sched.makespan_us
        status = res.status
        if status != "error":
            status = "optimal" if res.best_bound_us is not None and t <= res.best_bound_us * (1 + 1e-9) else "feasible"
        stats = dict(res.stats, all_reduce_barrier_us=res.schedule.makespan_us,
                     all_reduce_note="Reduce-Scatter and All-Gather each solved on its own, then the All-Gather "
                                     "re-timed after it per link and chunk on the fabric's routes; optimal only "
                                     "when it meets the better phase bound")
        # the barrier schedule's end point is replaced by the overlapped one's (the same problem bound)
        end = res.trace[-1] if res.trace else (0.0, None, None, None)
        trace = tuple(res.trace[:-1]) + ((end[0], t, end[2], end[3]),)
        return replace(res, schedule=sched, objective_us=t, status=status, stats=stats, trace=trace,
                       proof="lower_bound" if status == "optimal" else None)

    def warmup(self, problem=None, opts=None) -> float:
        # without a problem: everything the point-to-point models need (the fabric model needs nothing)
        return _NETWORK_MODELS[POINT_TO_POINT if problem is None else problem.topology.network_kind].warmup(self, problem, opts)

    def _solve_copy(self, problem, deadline, opts):
        return _NETWORK_MODELS[problem.topology.network_kind].solve_copy(self, problem, deadline, opts)

    def _run_model(self, model: AgModel, hint, deadline, opts: CpSatOptions) -> ModelOutcome:
        from ortools.sat.python import cp_model

        t0 = time.perf_counter()
        formulation = resolve_model(opts.model, model)
        build_fn = _build_time_indexed if formulation == "time_indexed" else _build_interval
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
                                    stats={"cpsat_model": formulation, "cpsat_build_time_s": build},
                                    native="not started", limit="time_limit")
            prm.max_time_in_seconds = solver_time_limit(left, nv + nc)
        prm.num_workers = workers
        prm.random_seed = int(opts.seed) % 2147483647
        prm.relative_gap_limit = float(opts.mip_gap)
        prm.log_search_progress = bool(opts.log)
        trace: list = []

        class _Trace(cp_model.CpSolverSolutionCallback):
            """Incumbent and bound at each improving solution (the anytime view)."""

            def on_solution_callback(self):
                trace.append((time.perf_counter(), float(self.objective_value), float(self.best_objective_bound)))

        t1 = time.perf_counter()
        code = solver.solve(m, _Trace())
        solve_s = time.perf_counter() - t1
        name = solver.status_name(code)
        stats = {"cpsat_status": name, "cpsat_model": formulation, "num_workers": workers,
                 "cpsat_conflicts": int(solver.num_conflicts), "cpsat_branches": int(solver.num_branches),
                 "cpsat_build_time_s": build}
        has_sol = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        final_bound = float(solver.best_objective_bound)
        if np.isfinite(final_bound):
            trace.append((time.perf_counter(), float(solver.objective_value) if has_sol else None, final_bound))
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
                                native=name, limit=limit, trace=trace, branches=int(solver.num_branches))
        obj = int(round(solver.objective_value))
        if st == "optimal" and opts.mip_gap > 0:
            st, limit = "feasible", "gap_limit"  # optimal only up to the gap the user allowed
        if st == "optimal":
            bound = float(obj)
        return ModelOutcome(st, extract(solver), obj, bound, nv, nc, build, solve_s, stats=stats, native=name,
                            limit=limit, trace=trace, branches=int(solver.num_branches))


class _PointToPointModels:
    """cpsat on a point-to-point topology: the models of :class:`ExactSolverBase` (the TEN, or continuous time)."""

    @staticmethod
    def refusal(problem) -> str:
        return ""

    @staticmethod
    def solve(solver: CpSatSolver, problem, opts: CpSatOptions):
        return super(CpSatSolver, solver)._solve(problem, opts)

    @staticmethod
    def warmup(solver: CpSatSolver, problem, opts) -> float:
        return super(CpSatSolver, solver).warmup(problem, opts)

    @staticmethod
    def solve_copy(solver: CpSatSolver, problem, deadline, opts):
        return super(CpSatSolver, solver)._solve_copy(problem, deadline, opts)


class _FabricModel:
    """cpsat on a switched fabric: always the continuous-time fabric model (solvers/exact/fabric.py), cold."""

    @staticmethod
    def refusal(problem) -> str:
        from .fabric import fabric_refusal

        return fabric_refusal(problem)

    @staticmethod
    def solve(solver: CpSatSolver, problem, opts: CpSatOptions):
        ten = [k for k in ("time_step_us", "horizon_steps") if getattr(opts, k) is not None]
        if ten:
            raise SolverError(f"on a switched fabric cpsat runs its continuous-time fabric model "
                              f"(solvers/exact/fabric.py), which has no TEN: drop {', '.join(ten)}")
        if problem.kind == "all_reduce" and problem.collective.overlap:
            return solver._fabric_all_reduce_overlapped(problem, opts)
        return super(CpSatSolver, solver)._solve(problem, opts)

    @staticmethod
    def warmup(solver: CpSatSolver, problem, opts) -> float:
        return 0.0   # the fabric model starts cold: no greedy to compile

    @staticmethod
    def solve_copy(solver: CpSatSolver, problem, deadline, opts):
        from .fabric import fabric_copy_result

        return fabric_copy_result(problem, deadline, opts)


# the model of each network kind (tacos_bench.topology.network_kind of the problem's topology)
_NETWORK_MODELS = {POINT_TO_POINT: _PointToPointModels, FABRIC: _FabricModel}
