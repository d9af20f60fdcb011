"""Time-indexed MILP on the discretized time-expanded network (PuLP; HiGHS or CBC).

The model is the one described in :mod:`solvers.exact.common` (binary send
variables ``x[c, link, step]``, continuous hold variables ``h[c, npu, step]``
-- monotone holds for multicast chunks, relay inventories with flow
conservation for unicast ones --, exactly-once receipt where a chunk is needed,
one chunk per link per window of its duration, integer makespan ``T``
minimized), built with PuLP 3.3's ``add_variable`` API and
solved by HiGHS (``backend="highs"``, default, through ``highspy``) or CBC
(``backend="cbc"``, PuLP's bundled binary).

Status is read from PuLP's ``sol_status`` (a time-limited run is reported by
PuLP as ``Optimal`` with ``sol_status == IntegerFeasible``); the best bound
comes from HiGHS's ``mip_dual_bound`` or CBC's log.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> r = MilpSolver().solve(Problem(ring(4), Collective("all_gather")), time_limit_s=30)
>>> r.status, r.objective_us == 2 * float(Problem(ring(4), Collective("all_gather")).link_time_us[0])
('optimal', True)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import sys
import time
import warnings
from contextlib import contextmanager
from typing import Any

import numpy as np

from dataclasses import dataclass

from .common import (AgModel, ExactOptions, ExactSolverBase, ModelOutcome, hold_values, shared_status,
                            solver_time_limit)
from ..base import (CAP_DEMAND_UNICAST, CAP_ALL_GATHER, CAP_ALL_REDUCE, CAP_ALL_TO_ALL, CAP_BROADCAST, CAP_EXACT, CAP_GATHER, CAP_OVERLAP,
                   CAP_RANDOMIZED, CAP_REDUCE, CAP_REDUCE_SCATTER, CAP_RELEASE, CAP_SCATTER, CAP_THREADS,
                   CAP_TIME_LIMIT, CAP_WARM_START)
from ..options import option
from .stats import MILP_STATS

BACKENDS = ("highs", "cbc")

# HiGHS model status (HighsModelStatus member names) -> shared status, when an incumbent exists;
# without one, "feasible" becomes "no_solution" (solvers.exact.common.shared_status).
HIGHS_STATUS = {
    "kOptimal": "optimal", "kInfeasible": "infeasible", "kUnboundedOrInfeasible": "infeasible",
    "kTimeLimit": "feasible", "kInterrupt": "feasible", "kIterationLimit": "feasible",
    "kSolutionLimit": "feasible", "kObjectiveBound": "feasible", "kObjectiveTarget": "feasible",
    "kNotset": "error", "kLoadError": "error", "kModelError": "error", "kPresolveError": "error",
    "kSolveError": "error", "kPostsolveError": "error", "kModelEmpty": "error", "kUnbounded": "error",
    "kMemoryLimit": "error", "kUnknown": "no_solution",
}
HIGHS_LIMITS = {"kTimeLimit": "time_limit", "kInterrupt": "time_limit", "kIterationLimit": "time_limit",
                "kSolutionLimit": "time_limit", "kObjectiveBound": "gap_limit", "kObjectiveTarget": "gap_limit"}
# CBC through PuLP: the solution status (read sol_status, never status: a time-limited run is "Optimal")
CBC_STATUS = {"LpSolutionOptimal": "optimal", "LpSolutionIntegerFeasible": "feasible",
              "LpSolutionInfeasible": "infeasible", "LpSolutionNoSolutionFound": "no_solution",
              "LpSolutionUnbounded": "error"}


@dataclass(frozen=True)
class MilpOptions(ExactOptions):
    backend: str = option("highs", choices=BACKENDS, doc="MILP solver: highs (via highspy) or cbc (PuLP's)")


class _BuildTimeout(Exception):
    """The deadline passed while PuLP was still building the model."""

    def __init__(self, prob):
        super().__init__("time limit reached while building the MILP")
        self.prob = prob


# constraints added between two looks at the clock while building (PuLP adds ~100k rows per second)
_BUILD_CHECK_EVERY = 4096


def _build_pulp(model: AgModel, hint: np.ndarray | None, deadline: float | None = None):
    """The PuLP problem plus its variable lists.

    Building is pure Python (seconds for the 100k-row All-to-All models), so it
    looks at ``deadline`` every few thousand rows and raises :class:`_BuildTimeout` past it.
    """
    import pulp

    sv = model.sv
    prob = pulp.LpProblem(f"tacos_ten_{model.ten.problem.kind}", pulp.LpMinimize)
    x = [prob.add_variable(f"x{i}", 0, 1, pulp.LpBinary) for i in range(len(sv))]
    h = [prob.add_variable(f"h{j}", 0, 1, pulp.LpContinuous) for j in range(model.num_holds)]
    T = prob.add_variable("T", model.lb_steps, model.ub_steps, pulp.LpInteger)
    prob.setObjective(pulp.LpAffineExpression([(T, 1.0)]))
    LE, EQ = pulp.LpConstraintLE, pulp.LpConstraintEQ
    E = pulp.LpAffineExpression
    added = [0]

    def add(constraint, name):
        prob.addConstraint(constraint, name)
        added[0] += 1
        if deadline is not None and added[0] % _BUILD_CHECK_EVERY == 0 and time.perf_counter() >= deadline:
            raise _BuildTimeout(prob)
    arrive = sv.arrive.tolist()
    required = model.receipt_required.tolist()
    for g, idx in enumerate(model.receipt):
        il = idx.tolist()
        if not required[g]:  # a relay: at most one receipt, no deadline of its own
            add(pulp.LpConstraint(E([(x[i], 1.0) for i in il]), LE, rhs=1), f"relay{g}")
            continue
        add(pulp.LpConstraint(E([(x[i], 1.0) for i in il]), EQ, rhs=1), f"recv{g}")
        add(pulp.LpConstraint(E([(x[i], float(arrive[i])) for i in il] + [(T, -1.0)]), LE, rhs=0), f"span{g}")
    for g, idx in enumerate(model.capacity):
        add(pulp.LpConstraint(E([(x[i], 1.0) for i in idx.tolist()]), LE, rhs=1), f"link{g}")
    prev = model.hold_prev.tolist()
    for j in range(model.num_holds):
        terms = [(h[j], 1.0)] + [(x[i], -1.0) for i in model.hold_in[j].tolist()]
        if prev[j] >= 0:
            terms.append((h[prev[j]], -1.0))
        if model.unicast:  # inventory: what arrived and has not left yet
            terms += [(x[i], 1.0) for i in model.hold_out[j].tolist()]
            add(pulp.LpConstraint(E(terms), EQ, rhs=0), f"hold{j}")
        else:
            add(pulp.LpConstraint(E(terms), LE, rhs=0), f"hold{j}")
    for i, j in enumerate(model.send_hold.tolist()):
        if j >= 0 and not model.unicast:  # unicast: the inventory being >= 0 is the causality
            add(pulp.LpConstraint(E([(x[i], 1.0), (h[j], -1.0)]), LE, rhs=0), f"cause{i}")
    for f, (fin, fout) in enumerate(zip(model.flow_in, model.flow_out)):
        terms = [(x[i], 1.0) for i in fout.tolist()] + [(x[i], -1.0) for i in fin.tolist()]
        add(pulp.LpConstraint(E(terms), EQ, rhs=int(model.flow_supply[f])), f"flow{f}")
    for g, (idx, least) in enumerate(model.link_min):
        add(pulp.LpConstraint(E([(x[i], 1.0) for i in idx.tolist()]), pulp.LpConstraintGE, rhs=least), f"busy{g}")
    for g, (a, b) in enumerate(model.symmetry):
        terms = [(x[i], float(arrive[i])) for i in a.tolist()] + [(x[i], -float(arrive[i])) for i in b.tolist()]
        add(pulp.LpConstraint(E(terms), LE, rhs=0), f"sym{g}")
    if hint is not None:
        for var, val in zip(x, hint.tolist()):
            var.setInitialValue(val)
        for var, val in zip(h, hold_values(model, hint, inventory=model.unicast).tolist()):
            var.setInitialValue(val)
        T.setInitialValue(int(np.max(sv.arrive[hint > 0])))
    return prob, x, T


def _highs_solver_class():
    import highspy
    import pulp

    S = highspy.HighsModelStatus

    class _HighsWarm(pulp.HiGHS):
        """PuLP's HiGHS interface plus a MIP start, a deadline and a lean read-back.

        PuLP 3.3's ``HiGHS`` has no ``warmStart``: the initial values are passed to
        ``highspy`` just before the run. The time limit is set from the absolute
        deadline after PuLP has handed the model over (that takes a while on
        large models). Reading back only the column values (no duals, slacks or
        re-sorting of variables) keeps the time after the limit short; the status
        mapping is PuLP's own (a stopped run with an incumbent is
        ``sol_status == LpSolutionIntegerFeasible``).
        """

        def __init__(self, warm: bool, seed: int, deadline: float | None, **kw):
            super().__init__(**kw)
            self._warm = warm
            self._seed = seed
            self._deadline = deadline
            self.run_time_s = 0.0
            self.col_value = None

        def callSolver(self, lp):
            lp.solverModel.setOptionValue("random_seed", int(self._seed) % 2147483647)
            if self._deadline is not None:
                left = self._deadline - time.perf_counter()
                size = lp.solverModel.getNumCol() + lp.solverModel.getNumRow()
                lp.solverModel.setOptionValue("time_limit", solver_time_limit(left, size))
                # HiGHS checks its time limit only now and then (3.6 s late on a 240k-variable
                # model); its interrupt callbacks fire often, so they enforce the real deadline.
                deadline = self._deadline

                def stop_at_deadline(event):
                    if time.perf_counter() >= deadline:
                        event.interrupt()

                for cbk in (lp.solverModel.cbSimplexInterrupt, lp.solverModel.cbIpmInterrupt,
                            lp.solverModel.cbMipInterrupt):
                    cbk.subscribe(stop_at_deadline)
            if self._warm:
                # PuLP's setInitialValue stores the start in varValue (what warmStart=True reads for CBC).
                start = [(v.index, float(v.varValue)) for v in lp.variables() if v.varValue is not None]
                idx = np.array([i for i, _ in start], dtype=np.int32)
                val = np.array([x for _, x in start], dtype=np.float64)
                if len(idx):
                    lp.solverModel.setSolution(len(idx), idx, val)
            t0 = time.perf_counter()
            lp.solverModel.run()
            self.run_time_s = time.perf_counter() - t0

        def actualSolve(self, lp, callback=None):
            self.createAndConfigureSolver(lp)
            self.buildSolverModel(lp)
            self.callSolver(lp)
            hs = lp.solverModel
            has_sol = hs.getInfo().primal_solution_status == 2
            shared = shared_status(HIGHS_STATUS, S(hs.getModelStatus()).name, has_sol)
            status, sol_status = {
                "optimal": (pulp.LpStatusOptimal, pulp.LpSolutionOptimal),
                "infeasible": (pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible),
                "feasible": (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible),
            }.get(shared, (pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound))
            if has_sol:
                self.col_value = np.asarray(hs.getSolution().col_value, dtype=np.float64)
            lp.assignStatus(status, sol_status)
            return status

    return _HighsWarm


@contextmanager
def _native_stdout_silenced(enabled: bool):
    """Send what native code writes to file descriptor 1 to /dev/null (highspy prints a banner there
    for every solver object and PuLP has no switch for it); Python's own output is flushed first."""
    if not enabled:
        yield
        return
    import ctypes

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        libc.fflush(None)  # what the C library still buffers goes to /dev/null too
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _solve_highs(prob, cols, hint, deadline, opts: MilpOptions):
    """Run HiGHS; return (shared status, native status, bound, run seconds, stats, column values of ``cols``)."""
    import highspy
    import pulp

    cls = _highs_solver_class()
    kw: dict[str, Any] = dict(msg=opts.log, threads=opts.num_threads, gapRel=opts.mip_gap, gapAbs=0.0)
    solver = cls(hint is not None, opts.seed, deadline, **kw)
    t0 = time.perf_counter()
    with _native_stdout_silenced(not opts.log):
        prob.solve(solver)
    total = time.perf_counter() - t0
    hs = prob.solverModel
    info = hs.getInfo()
    native = highspy.HighsModelStatus(hs.getModelStatus()).name
    bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else None
    stats = {"highs_status": native, "mip_nodes": int(info.mip_node_count),
             "highs_run_s": solver.run_time_s, "highs_handover_s": total - solver.run_time_s,
             "pulp_status": pulp.LpStatus[prob.status], "pulp_sol_status": int(prob.sol_status)}
    vals = None
    if solver.col_value is not None:
        vals = solver.col_value[np.array([v.index for v in cols], dtype=np.int64)]
    status = shared_status(HIGHS_STATUS, native, vals is not None)
    limit = HIGHS_LIMITS.get(native)
    if native == "kOptimal" and opts.mip_gap > 0:
        limit = "gap_limit"
    return status, native, limit, bound, solver.run_time_s, stats, (vals if status in ("optimal", "feasible") else None)


_CBC_BOUND = re.compile(r"(?:lower bound|best possible)\s*:?\s*(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)", re.IGNORECASE)
# CBC does not check its time limit everywhere (we saw it sit in root processing for
# minutes past "-sec 2"), so the process gets SIGINT shortly before the deadline and
# is killed at the deadline if it has not stopped.
_CBC_SIGINT_GRACE_S = 0.5


def _cbc_solver_class():
    import pulp

    class _CbcHardLimit(pulp.PULP_CBC_CMD):
        """PuLP's bundled CBC with a hard wall-clock deadline (same files, options and parsing)."""

        def __init__(self, deadline: float | None, log_path: str, **kw):
            super().__init__(**kw)
            self._deadline = deadline
            self._log_path = log_path
            self.run_time_s = 0.0
            self.interrupted = ""

        def solve_CBC(self, lp, use_mps=True):
            tmp_lp, tmp_mps, tmp_sol, tmp_mst = self.create_tmp_files(lp.name, "lp", "mps", "sol", "mst")
            vs, vnames, cnames, _ = lp.writeMPS(tmp_mps, rename=1)
            args = [self.path, tmp_mps]
            if self.optionsDict.get("warmStart", False):
                self.writesol(tmp_mst, lp, vs, vnames, cnames)
                args += ["-mips", tmp_mst]
            if self._deadline is not None:
                left = self._deadline - time.perf_counter()
                args += ["-sec", f"{max(0.01, 0.97 * left):.3f}"]
            for o in self.options + self.getOptions():
                args += ("-" + o).split()
            args += ["-solve", "-printingOptions", "all", "-solution", tmp_sol]
            t0 = time.perf_counter()
            with open(self._log_path, "w") as pipe:
                proc = subprocess.Popen(args, stdout=pipe, stderr=pipe, stdin=subprocess.DEVNULL)
                left = None if self._deadline is None else max(0.0, self._deadline - time.perf_counter())
                grace = 0.0 if left is None else min(_CBC_SIGINT_GRACE_S, 0.03 * left)
                try:
                    proc.wait(timeout=None if left is None else left - grace)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGINT)
                    self.interrupted = "sigint"
                    try:
                        proc.wait(timeout=max(0.05, grace))
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                        self.interrupted = "killed"
            self.run_time_s = time.perf_counter() - t0
            status, sol_status = pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
            try:
                if os.path.exists(tmp_sol) and os.path.getsize(tmp_sol) > 0:
                    status, values, _, _, _, sol_status = self.readsol_MPS(tmp_sol, lp, vs, vnames, cnames)
                    lp.assignVarsVals(values)
            except (ValueError, IndexError, OSError):  # a solution file cut short by the kill
                status, sol_status = pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
            finally:
                self.delete_tmp_files(tmp_mps, tmp_lp, tmp_sol, tmp_mst)
            if self.interrupted == "killed":
                status, sol_status = pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
            lp.assignStatus(status, sol_status)
            return status

    return _CbcHardLimit


def _solve_cbc(prob, cols, hint, deadline, opts: MilpOptions):
    """Run CBC; return (shared status, native status, bound, run seconds, stats, column values of ``cols``)."""
    import pulp

    fd, log_path = tempfile.mkstemp(prefix="tacos_cbc_", suffix=".log")
    os.close(fd)
    try:
        cls = _cbc_solver_class()
        with warnings.catch_warnings():
            # PULP_CBC_CMD is deprecated for PuLP 4 only; pyproject pins pulp < 4.
            warnings.simplefilter("ignore", DeprecationWarning)
            seed = int(opts.seed) % 2147483646 + 1
            solver = cls(deadline, log_path, msg=False, threads=opts.num_threads, gapRel=opts.mip_gap,
                         warmStart=hint is not None, options=[f"randomCbcSeed {seed}", f"randomSeed {seed}"])
        prob.solve(solver)
        with open(log_path, errors="replace") as f:
            log = f.read()
    finally:
        try:
            os.unlink(log_path)
        except OSError:
            pass
    if opts.log:
        print(log)
    bound = None
    for m in _CBC_BOUND.finditer(log):
        try:
            bound = float(m.group(1))
        except ValueError:
            pass
    stats = {"pulp_status": pulp.LpStatus[prob.status], "pulp_sol_status": int(prob.sol_status),
             "cbc_interrupted": solver.interrupted or "no"}
    native = {v: k for k, v in vars(pulp).items() if k.startswith("LpSolution") and isinstance(v, int)}.get(
        prob.sol_status, "unknown")
    vals = None
    if native in ("LpSolutionOptimal", "LpSolutionIntegerFeasible"):
        vals = np.array([v.varValue if v.varValue is not None else 0.0 for v in cols])
    status = shared_status(CBC_STATUS, native, vals is not None)
    limit = "time_limit" if status == "feasible" or solver.interrupted else None
    if status == "optimal" and opts.mip_gap > 0:
        limit = "gap_limit"
    return status, native, limit, bound, solver.run_time_s, stats, vals


class MilpSolver(ExactSolverBase):
    """Exact copy collectives (all_gather, broadcast, gather, scatter, all_to_all; the reducing ones by
    reversal) as a time-indexed MILP on the TEN. Options: :class:`MilpOptions`."""

    name = "milp"
    # chunk tables of unicast chunks: the models read each chunk's source and destination as for All-to-All
    # (copies to subsets and reductions from subsets are not modelled: they would be scheduled as every NPU's)
    capabilities = frozenset({CAP_ALL_GATHER, CAP_REDUCE_SCATTER, CAP_ALL_REDUCE, CAP_BROADCAST, CAP_REDUCE,
                              CAP_GATHER, CAP_SCATTER, CAP_ALL_TO_ALL, CAP_EXACT, CAP_TIME_LIMIT, CAP_WARM_START,
                              CAP_THREADS, CAP_RANDOMIZED, CAP_OVERLAP,
                              CAP_DEMAND_UNICAST, CAP_RELEASE})
    Options = MilpOptions
    STATUS_MAP = {**{f"highs:{k}": v for k, v in HIGHS_STATUS.items()},
                  **{f"cbc:{k}": v for k, v in CBC_STATUS.items()}}
    Stats = MILP_STATS

    def _run_model(self, model: AgModel, hint, deadline, opts: MilpOptions) -> ModelOutcome:
        t0 = time.perf_counter()
        try:
            prob, x, T = _build_pulp(model, hint, deadline)
        except _BuildTimeout as e:
            prob = e.prob
        nv, nc = prob.numVariables(), prob.numConstraints()
        build = time.perf_counter() - t0
        if deadline is not None and time.perf_counter() >= deadline:
            return ModelOutcome("no_solution", None, None, None, nv, nc, build, 0.0,
                                message="time limit reached while building the MILP",
                                stats={"backend": opts.backend, "pulp_build_time_s": build},
                                native="not started", limit="time_limit")
        cols = x + [T]
        run = _solve_highs if opts.backend == "highs" else _solve_cbc
        st, native, limit, bound, solve_s, stats, vals = run(prob, cols, hint, deadline, opts)
        stats.update(backend=opts.backend, pulp_build_time_s=build)
        xv = None
        obj = None
        if vals is not None:
            xv = (vals[:-1] > 0.5).astype(np.int8)
            obj = int(round(vals[-1]))
            if st == "optimal" and opts.mip_gap == 0.0:
                bound = float(obj)  # proven at zero gap; the solver's bound may carry tolerance noise
            elif st == "optimal":
                st = "feasible"  # optimal only up to the gap the user allowed
        # neither HiGHS nor CBC reports incumbents to PuLP while it runs: the trace is the end state only
        trace = [(time.perf_counter(), None if obj is None else float(obj), bound)]
        return ModelOutcome(st, xv, obj, bound, nv, nc, build, solve_s, stats=stats,
                            native=f"{opts.backend}:{native}", limit=limit, trace=trace,
                            branches=stats.get("mip_nodes"))
