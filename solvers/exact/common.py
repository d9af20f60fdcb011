"""Shared machinery of the exact backends (:mod:`solvers.exact.milp`, :mod:`solvers.exact.cpsat`).

Both backends solve the same model of a copy collective (all_gather, broadcast,
gather, scatter, all_to_all) on the discretized time-expanded network of
:mod:`solvers.exact.ten`; this module builds the index structure of that model once
(as numpy arrays), gets a warm start and a lower bound, runs the backend under
one wall-clock deadline, maps the plan back to a continuous schedule and turns
the reducing collectives (Reduce-Scatter, Reduce, All-Reduce) into copy
collectives through :func:`solvers.compose.solve_collective`.

Chunk ``c`` starts at its source ``s_c`` and is *needed* by its destination
``t_c`` (unicast: gather, scatter, all_to_all) or by every other NPU
(multicast: all_gather, broadcast). The model (binary ``x_i`` = candidate send
``i`` of :meth:`TimeExpandedNetwork.send_vars`, pruned to each chunk's
reachable window):

* **receipt** -- an NPU ``v`` that needs chunk ``c`` receives it exactly once,
  ``sum_{i in R(c,v)} x_i = 1``; a relay at most once;
* **hold** (multicast) -- ``h[c,u,k]`` (NPU ``u`` holds ``c`` at step ``k``) is
  at most ``h[c,u,k-1]`` plus the receipts arriving at ``k``; a send needs its
  hold: ``x_i <= h[c_i, src_i, step_i]`` (sources hold their chunks from step 0
  and need no variable). Holds are monotone; multicast (one hold feeding
  several out-links) is free;
* **flow** (unicast) -- a unicast chunk needs only the sends of one path in
  time from its source to its destination (dropping the others keeps a plan
  valid), so the sends of a chunk are a unit flow: ``sum out - sum in`` is 1 at
  the source and 0 at a relay. The MILP writes causality as the relay's
  inventory ``h[c,u,k] = h[c,u,k-1] + in_k - out_k`` in ``[0, 1]`` (no row per
  send, and the LP relaxation of a flow over time); CP-SAT keeps the hold
  clauses above, which propagate better;
* **load** (unicast) -- the links supply at most ``sum_l d_l floor(H/d_l)``
  link-steps and the chunks need at least their shortest paths; sends whose
  detour exceeds that slack are no variables (:meth:`TimeExpandedNetwork.send_vars`),
  and each link carries a minimum number of sends (redundant);
* **link** -- a link of ``d`` steps carries at most one chunk in any window of
  ``d`` consecutive start steps;
* **makespan** -- ``T >= sum_{i in R(c,v)} arrive_i x_i`` for every needed
  ``(c, v)``; minimize ``T`` (integer steps, ``lb <= T <= H``);
* **symmetry** -- chunks with the same source and destination(s) are
  interchangeable, so their arrival steps at one fixed NPU are ordered.

Late NPUs (``collective.release_us``) of a copy collective are part of the model: no send on a link of a late
NPU before it joins (:class:`TimeExpandedNetwork`, and the continuous and fabric models of ``cpsat``), the warm
start from the greedy's plans for late NPUs (:func:`solvers.release.solve_released`). A reducing collective is
refused with them (:meth:`ExactSolverBase.release_refusal`): its model is the time-reversed copy collective,
where a release becomes a deadline that moves with the makespan.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tacos_bench.collective import ALL_GATHER, ALL_REDUCE
from tacos_bench.errors import SolverError, TacosError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from ..base import CAP_RELEASE, Solver, SolveResult
from ..compose import solve_collective
from ..options import SolverOptions, option
from .ten import SendVars, TimeExpandedNetwork

_BOUND_EPS = 1e-6


# ---------------------------------------------------------------------------- options
@dataclass(frozen=True)
class ExactOptions(SolverOptions):
    """Options both exact backends share (the TEN, the warm start, the stopping rule)."""

    time_limit_s: float | None = option(600.0, positive=True, doc="wall-clock budget of solve() in s (null: none)")
    time_step_us: float | None = option(None, positive=True, doc="TEN step (null: the fastest link's chunk time)")
    horizon_steps: int | None = option(None, minimum=1, doc="fixed TEN horizon (null: from the warm start)")
    warm_start: bool = option(True, doc="start from the best greedy / TEN list schedule")
    mip_gap: float = option(0.0, minimum=0.0, doc="stop at this relative gap (0: prove optimality)")
    log: bool = option(False, doc="show the solver's log")

    def check(self) -> None:
        if not self.mip_gap < 1.0:
            raise SolverError(f"option mip_gap must be a number in [0, 1), got {self.mip_gap!r}")


def solver_time_limit(left_s: float, model_size: int) -> float:
    """Time limit to hand a solver that must be done ``left_s`` from now.

    HiGHS and CP-SAT check their limits only between phases: on models with a
    few hundred thousand rows plus columns both overshot by 2-4 s, and HiGHS's
    presolve (probing) ran 8 s past its limit on 540k rows plus columns. Keep
    3 % plus 2e-5 s per row/column in reserve, never more than 20 % of what is left.
    """
    margin = min(0.20 * left_s, 0.03 * left_s + 2e-5 * model_size)
    return max(0.01, left_s - margin)


# ---------------------------------------------------------------------------- model index
def _groups(keys: np.ndarray):
    """Sort ``keys``; return (order, unique keys, start offsets incl. end)."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    if len(k) == 0:
        return order, k, np.zeros(1, np.int64)
    brk = np.flatnonzero(k[1:] != k[:-1]) + 1
    starts = np.concatenate([[0], brk, [len(k)]]).astype(np.int64)
    return order, k[starts[:-1]], starts


# the largest time-expanded model built (its send variables): random32d3s0 All-to-All at 1 chunk per pair has 4.8 M
# and solves within the time limit; at 4 chunks per pair 91 M, and the process was killed at 24 GB
MAX_TEN_SENDS = 10_000_000


@dataclass
class AgModel:
    """Index structure of the TEN model of one copy collective, independent of the backend.

    Lists of index arrays into the send variables; backends turn them into
    constraints. Receipt group ``g`` lists the candidate sends of chunk ``c`` to
    NPU ``v`` (``receipt_key[g] = c * N + v``); ``receipt_required[g]`` says
    whether ``v`` needs ``c`` (exactly one receipt, counted in the makespan) or
    may relay it (at most one). ``hold_*`` describe the hold variables: hold
    ``j`` is ``(hold_chunk[j], hold_npu[j], hold_step[j])``; ``hold_prev[j]`` is
    the hold one step earlier (``-1`` at its first step), ``hold_in[j]`` the
    sends arriving exactly then and ``hold_out[j]`` the sends leaving then.

    A hold may be encoded as "received by step k": monotone, ``h[j] <= h[prev]
    + sum(in)``, and a send needs the hold of its sender, ``send_hold[i]``
    (``-1`` at the chunk's source); multicast chunks always are. For unicast
    chunks (``unicast`` true) a backend may instead make the hold the relay's
    inventory, ``h[j] = h[prev] + sum(in) - sum(out)``, whose being
    non-negative is the causality (no constraint per send). Unicast chunks
    also conserve flow per (chunk, NPU) other than the destination:
    ``sum(flow_out[f]) - sum(flow_in[f]) = flow_supply[f]`` (1 at the source, 0
    at a relay), and a link carries at least ``link_min`` of its sends
    (redundant, see :func:`build_ag_model`).
    """

    ten: TimeExpandedNetwork
    sv: SendVars
    receipt: list[np.ndarray]
    receipt_key: np.ndarray          # (chunk, npu) per receipt group, as chunk*N + npu
    receipt_required: np.ndarray     # bool per receipt group
    capacity: list[np.ndarray]
    hold_chunk: np.ndarray
    hold_npu: np.ndarray
    hold_step: np.ndarray
    hold_prev: np.ndarray
    hold_in: list[np.ndarray]
    hold_out: list[np.ndarray]
    send_hold: np.ndarray
    flow_in: list[np.ndarray]
    flow_out: list[np.ndarray]
    flow_supply: np.ndarray
    symmetry: list[tuple[np.ndarray, np.ndarray]]   # (receipts of c1, receipts of c2) at one NPU
    symmetry_pairs: list[tuple[int, int, int]]      # the same as (c1, c2, NPU)
    link_min: list[tuple[np.ndarray, int]]          # (sends on a link, fewest of them a plan can use)
    lb_steps: int
    ub_steps: int
    unicast: bool = False

    @property
    def num_sends(self) -> int:
        return len(self.sv)

    @property
    def num_holds(self) -> int:
        return int(self.hold_chunk.shape[0])


def build_ag_model(ten: TimeExpandedNetwork, lb_steps: int) -> AgModel:
    """Index the model of ``ten``'s copy collective on its horizon ``ten.horizon``.

    Parameters
    ----------
    ten : TimeExpandedNetwork
        The discretized problem, horizon included.
    lb_steps : int
        Proven lower bound on the makespan (the lower end of ``T``).

    Returns
    -------
    AgModel
    """
    sv = ten.send_vars()
    n, H = ten.num_npus, ten.horizon
    source = ten.source
    unicast = ten.unicast
    # receipt groups
    rkey = sv.chunk * n + sv.dst
    order, ukeys, starts = _groups(rkey)
    receipt = [order[starts[g]:starts[g + 1]] for g in range(len(ukeys))]
    rc, rv = np.divmod(ukeys, n)
    required = ten.need[rc, rv] if len(ukeys) else np.zeros(0, dtype=bool)
    # link capacity: at most one chunk per window of d consecutive start steps. Windows
    # starting where the link has no candidate are dominated by the next one, so one
    # window per (link, candidate step) suffices.
    capacity = []
    d_all = ten.link_steps
    lorder, lkeys, lstarts = _groups(sv.link * (H + 1) + sv.step)
    g_link, g_step = np.divmod(lkeys, H + 1)
    for g0 in range(len(lkeys)):
        li, k = int(g_link[g0]), int(g_step[g0])
        d = int(d_all[li])
        g1 = g0
        while g1 + 1 < len(lkeys) and g_link[g1 + 1] == li and g_step[g1 + 1] < k + d:
            g1 += 1
        members = lorder[lstarts[g0]:lstarts[g1 + 1]]
        if len(members) > 1:
            capacity.append(members)
    # holds: (c, u) with u != source, for steps from the first possible arrival to the last send step
    need = sv.src != source[sv.chunk]
    send_hold = np.full(len(sv), -1, dtype=np.int64)
    hold_c, hold_u, hold_k, hold_prev, hold_in, hold_out = [], [], [], [], [], []
    empty = np.zeros(0, np.int64)
    if np.any(need):
        nkey = sv.chunk[need] * n + sv.src[need]
        # last step at which (c, u) must be known to hold
        last = {}
        for key, k in zip(nkey.tolist(), sv.step[need].tolist()):
            if k > last.get(key, -1):
                last[key] = k
        akey = sv.chunk * n + sv.dst
        aorder, aukeys, astarts = _groups(akey * (H + 1) + sv.arrive)
        arr_at = {int(k): aorder[astarts[g]:astarts[g + 1]] for g, k in enumerate(aukeys)}
        dep_at = {}
        if unicast:
            dorder, dukeys, dstarts = _groups((sv.chunk * n + sv.src) * (H + 1) + sv.step)
            dep_at = {int(k): dorder[dstarts[g]:dstarts[g + 1]] for g, k in enumerate(dukeys)}
        earliest = ten.earliest_step()
        hold_index = {}
        for key in sorted(last):
            c, u = divmod(key, n)
            k0 = int(earliest[c, u])
            prev = -1
            for k in range(k0, last[key] + 1):
                j = len(hold_c)
                hold_c.append(c)
                hold_u.append(u)
                hold_k.append(k)
                hold_prev.append(prev)
                hold_in.append(arr_at.get(key * (H + 1) + k, empty))
                hold_out.append(dep_at.get(key * (H + 1) + k, empty))
                hold_index[key * (H + 1) + k] = j
                prev = j
        idx_need = np.flatnonzero(need)
        send_hold[idx_need] = [hold_index[(c * n + u) * (H + 1) + k] for c, u, k in
                               zip(sv.chunk[idx_need].tolist(), sv.src[idx_need].tolist(),
                                   sv.step[idx_need].tolist())]
    # flow conservation (unicast): a chunk's sends form one path from its source to its destination
    flow_in, flow_out, flow_supply = [], [], []
    if unicast and len(sv):
        oorder, okeys, ostarts = _groups(sv.chunk * n + sv.src)
        out_of = {int(k): oorder[ostarts[g]:ostarts[g + 1]] for g, k in enumerate(okeys)}
        in_of = {int(k): receipt[g] for g, k in enumerate(ukeys.tolist()) if not required[g]}
        for key in sorted(set(out_of) | set(in_of)):
            c, u = divmod(key, n)
            flow_in.append(in_of.get(key, empty))
            flow_out.append(out_of.get(key, empty))
            flow_supply.append(1 if u == source[c] else 0)
    # symmetry: chunks with the same source and destination are interchangeable, so their
    # arrivals at one NPU (the destination; for multicast chunks the source's successor) are ordered
    symmetry, symmetry_pairs = [], []
    dest = ten.destination
    active = np.flatnonzero(ten.need.any(axis=1))
    if n > 1 and active.size > 1:
        gidx = {int(k): g for g, k in enumerate(ukeys.tolist())}
        cls = np.lexsort((active, dest[active], source[active]))
        ch = active[cls]
        for c1, c2 in zip(ch[:-1].tolist(), ch[1:].tolist()):
            if source[c1] != source[c2] or dest[c1] != dest[c2]:
                continue
            v = int(dest[c1]) if dest[c1] >= 0 else (int(source[c1]) + 1) % n
            g1, g2 = gidx.get(c1 * n + v), gidx.get(c2 * n + v)
            if g1 is not None and g2 is not None:
                symmetry.append((receipt[g1], receipt[g2]))
                symmetry_pairs.append((c1, c2, v))
    # Unicast load: all links together must supply the shortest-path link-steps of every chunk, and no
    # link more than d floor(H/d), so each link is idle for at most the load slack. Redundant, but with
    # little slack (a horizon at the load bound) it tells the solver that the links must be kept busy.
    link_min = []
    slack = ten.load_slack_steps()
    if unicast and slack is not None and len(sv):
        lorder2, lkeys2, lstarts2 = _groups(sv.link)
        for g, li in enumerate(lkeys2.tolist()):
            d = int(d_all[li])
            least = -(-(d * (H // d) - slack) // d)
            if least > 0:
                link_min.append((lorder2[lstarts2[g]:lstarts2[g + 1]], int(least)))
    return AgModel(ten, sv, receipt, ukeys, np.asarray(required, dtype=bool), capacity,
                   np.asarray(hold_c, np.int64), np.asarray(hold_u, np.int64), np.asarray(hold_k, np.int64),
                   np.asarray(hold_prev, np.int64), hold_in, hold_out, send_hold, flow_in, flow_out,
                   np.asarray(flow_supply, np.int64), symmetry, symmetry_pairs, link_min, int(lb_steps), int(H),
                   unicast=unicast)


def model_is_trivially_infeasible(model: AgModel) -> bool:
    """True when some NPU that needs a chunk has no candidate receipt of it within the horizon."""
    return int(np.count_nonzero(model.receipt_required)) != int(model.ten.need.sum())


def hint_vector(model: AgModel, plan) -> np.ndarray | None:
    """0/1 value per send variable for a TEN plan, or ``None`` if the plan does not fit the model."""
    c, l, k = plan
    sv = model.sv
    L, H = model.ten.problem.num_links, model.ten.horizon
    key_sv = (sv.chunk * L + sv.link) * (H + 2) + sv.step
    key_p = (c * L + l) * (H + 2) + np.minimum(k, H + 1)
    pos = np.searchsorted(key_sv, key_p)  # send_vars are sorted by (chunk, link, step)
    pos_c = np.minimum(pos, max(len(sv) - 1, 0))
    if len(sv) == 0 or np.any(key_sv[pos_c] != key_p):
        return None
    x = np.zeros(len(sv), dtype=np.int8)
    x[pos_c] = 1
    return x


def hold_values(model: AgModel, x: np.ndarray, inventory: bool = False) -> np.ndarray:
    """Hold values implied by send values ``x`` (for hints).

    Parameters
    ----------
    model : AgModel
    x : ndarray
        0/1 per send variable.
    inventory : bool
        ``False``: the chunk has arrived by the step; ``True`` (the MILP's unicast relays): it has arrived
        and not been sent on by the step.
    """
    n = model.ten.num_npus
    sv = model.sv
    big = np.iinfo(np.int64).max
    key = model.hold_chunk * n + model.hold_npu
    sel = np.flatnonzero(x > 0.5)
    arrive_at = np.full(model.ten.num_chunks * n, big)
    np.minimum.at(arrive_at, sv.chunk[sel] * n + sv.dst[sel], sv.arrive[sel])
    held = arrive_at[key] <= model.hold_step
    if inventory:
        leave_at = np.full(model.ten.num_chunks * n, big)
        np.minimum.at(leave_at, sv.chunk[sel] * n + sv.src[sel], sv.step[sel])
        held &= ~(leave_at[key] <= model.hold_step)
    return held.astype(np.int8)


# ---------------------------------------------------------------------------- warm start and bounds
def continuous_lower_bound_us(problem: Problem) -> tuple[float | None, str]:
    """Best continuous lower bound from :mod:`tacos_bench.bounds`, if that module is available."""
    try:
        from tacos_bench import bounds
    except ImportError:
        return None, "unavailable"
    try:
        if hasattr(bounds, "lower_bound_us"):
            return float(bounds.lower_bound_us(problem)), "bounds.lower_bound_us"
        if hasattr(bounds, "lower_bounds"):
            v = bounds.lower_bounds(problem).get("best_us")
            return (None if v is None else float(v)), "bounds.lower_bounds"
    except Exception as e:  # an optional helper must not take the exact solve down with it
        return None, f"failed ({type(e).__name__}: {e})"
    return None, "unavailable"


# The greedy rules tried for the warm start, best first on the studied topologies: the topology-aware rules
# (greedy_plus), the tight homogeneous rule (optimal on tori and meshes) and the TACOS rule.
WARM_RULES = (("greedy_plus", {}), ("greedy", {"chunk_order": "rarest", "matching": "maximum"}), ("greedy", {}))
# Unicast data (gather, scatter, all_to_all) runs the greedy's routing engine, which takes chunk_order random
# or farthest only: longest remaining path first, then the random order (best of a few restarts, which cost
# little next to the model).
UNICAST_WARM_RULES = (("greedy", {"chunk_order": "farthest"}), ("greedy", {"restarts": 4}))
# stats key of a warm rule's TEN makespan where the All-Gather naming (warm_steps_<solver>[_tight]) clashes
_WARM_STAT = {"greedy(chunk_order=farthest)": "warm_steps_greedy_farthest",
              "greedy(restarts=4)": "warm_steps_greedy_random"}


def warm_rule_label(name: str, opts: dict) -> str:
    """How a warm rule is named in the notes: ``greedy(chunk_order=farthest)``."""
    return name + ("" if not opts else "(" + ",".join(f"{k}={v}" for k, v in opts.items()) + ")")


def warm_stat_name(label: str) -> str:
    """The statistic holding the TEN makespan of warm rule ``label`` (``warm_steps_<solver>[_tight]``, or the
    unicast rules' own names).

    >>> warm_stat_name("greedy_plus"), warm_stat_name(warm_rule_label("greedy", {"chunk_order": "rarest"}))
    ('warm_steps_greedy_plus', 'warm_steps_greedy_tight')
    >>> warm_stat_name("greedy(restarts=4)")
    'warm_steps_greedy_random'
    """
    return _WARM_STAT.get(label, f"warm_steps_{label.split('(')[0]}" + ("_tight" if "(" in label else ""))


def warm_rules(problem: Problem) -> tuple[tuple[str, dict], ...]:
    """The greedy rules worth trying as warm starts for ``problem`` (a copy collective, or a reducing one
    whose copy phases decide)."""
    copy = problem
    if not problem.collective.copies:
        copy = problem.with_collective(ALL_GATHER) if problem.kind == ALL_REDUCE else problem.mirror()
    return UNICAST_WARM_RULES if copy.collective.unicast else WARM_RULES


def greedy_schedules(problem: Problem, seed: int, time_limit_s: float | None):
    """``(label, schedule or None, note)`` for each rule of :func:`warm_rules` (``time_limit_s`` shared)."""
    from ..base import get_solver

    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    for name, opts in warm_rules(problem):
        label = warm_rule_label(name, opts)
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            yield label, None, "no time left"
            continue
        try:
            if problem.has_release:   # the greedy's plans for late NPUs (solvers.release), best first
                from ..release import solve_released

                greedy = get_solver(name)
                res = solve_released(greedy, problem, greedy.options({**opts, "seed": seed, "time_limit_s": left}))
            else:
                res = get_solver(name).solve(problem, {**opts, "seed": seed, "time_limit_s": left})
        except SolverError as e:
            yield label, None, f"unavailable ({e})"
            continue
        except Exception as e:  # the warm start is optional: fall back to the TEN list schedule
            yield label, None, f"failed ({type(e).__name__}: {e})"
            continue
        if res.schedule is None or res.status not in ("optimal", "feasible"):
            yield label, None, f"returned {res.status}"
        else:
            yield label, res.schedule, "ok"


@dataclass
class WarmStart:
    plan: tuple[np.ndarray, np.ndarray, np.ndarray]
    steps: int
    source: str
    note: str = ""


def best_warm_start(ten: TimeExpandedNetwork, seed: int, use_greedy: bool,
                    greedy_time_s: float | None, greedy: list | None = None) -> tuple[WarmStart, dict[str, Any]]:
    """Best of the TEN list schedule and (if wanted) the greedy's rules (:func:`warm_rules`), snapped to the TEN.

    ``greedy``: the ``(label, schedule, note)`` of :func:`greedy_schedules` when the caller already has them."""
    info: dict[str, Any] = {}
    plan = ten.list_schedule()
    best = WarmStart(plan, ten.plan_makespan_steps(plan[1], plan[2]), "ten_list")
    info["warm_list_steps"] = best.steps
    if use_greedy:
        t0 = time.perf_counter()
        notes = []
        found = greedy if greedy is not None else greedy_schedules(ten.problem, seed, greedy_time_s)
        for label, sched, note in found:
            notes.append(f"{label}: {note}")
            if sched is None:
                continue
            try:
                gp = ten.from_schedule(sched)
            except SolverError as e:
                notes[-1] = f"{label}: schedule not usable on the TEN ({e})"
                continue
            gsteps = ten.plan_makespan_steps(gp[1], gp[2])
            info[warm_stat_name(label)] = gsteps
            if gsteps < best.steps or (gsteps == best.steps and best.source == "ten_list"):
                best = WarmStart(gp, gsteps, label)
                info["greedy_makespan_us"] = sched.makespan_us
        if greedy is None:  # handed in: the caller timed them
            info["warm_greedy_time_s"] = time.perf_counter() - t0
        info["warm_greedy_note"] = "; ".join(notes)
    info["warm_source"] = best.source
    info["warm_steps"] = best.steps
    return best, info


# ---------------------------------------------------------------------------- backend protocol
@dataclass
class ModelOutcome:
    """What a backend reports about one model solve.

    ``status`` is already in the shared vocabulary (the backend's ``STATUS_MAP``
    applied); ``native`` is the solver's own status name and ``limit`` says
    whether a time or gap limit ended the search.
    """

    status: str                     # optimal | feasible | infeasible | no_solution | error
    x: np.ndarray | None = None     # 0/1 per send variable when a solution exists
    objective_steps: int | None = None
    bound_steps: float | None = None
    num_vars: int = 0
    num_constraints: int = 0
    build_time_s: float = 0.0
    solve_time_s: float = 0.0
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    native: str = ""
    limit: str | None = None        # "time_limit" | "gap_limit" | None
    # (perf_counter time, incumbent steps or None, bound steps or None) as the search went, where the solver
    # reports it (CP-SAT's solution callback); branches or nodes explored, where it reports them
    trace: list = field(default_factory=list)
    branches: int | None = None


def shared_status(status_map, native: str, has_solution: bool) -> str:
    """The shared status of a native outcome: the table's entry, ``feasible`` degraded to ``no_solution``
    when the solver returned no solution (a limit hit before the first incumbent)."""
    st = status_map.get(native, "error")
    if st in ("optimal", "feasible") and not has_solution:
        return "no_solution"
    return st


@dataclass
class AgResult:
    """Outcome of one copy-collective sub-solve (in µs and steps)."""

    status: str
    schedule: Schedule | None
    objective_us: float | None
    bound_us: float | None          # valid for the continuous problem only when ten_exact
    build_time_s: float
    solve_time_s: float
    stats: dict[str, Any]
    message: str = ""
    source: str | None = None       # model | warm_start | trivial
    proof: str | None = None        # solver | lower_bound
    stop_reason: str = "proved"
    ten_exact: bool = True
    # (perf_counter time, incumbent µs or None, bound µs or None); the grid and the search's own effort
    trace: list = field(default_factory=list)
    resolution_us: float | None = None
    branches: int | None = None
    scope: str | None = None        # continuous | ten; None: decided from ten_exact


class _NoSchedule(Exception):
    def __init__(self, result: AgResult):
        super().__init__(result.message)
        self.result = result


def _topology_key(problem: Problem):
    t = problem.topology
    return (t.num_npus, t.src.tobytes(), t.dst.tobytes(), t.bw_GiBps.tobytes(), t.lat_us.tobytes(),
            problem.collective)


class ExactSolverBase(Solver):
    """Driver shared by the exact backends; subclasses implement :meth:`_run_model`."""

    Options = ExactOptions

    # -------------------------------------------------------------- subclass hooks
    def _run_model(self, model: AgModel, hint: np.ndarray | None, deadline: float | None,
                   opts: ExactOptions) -> ModelOutcome:
        """Build and solve the backend model; stop by ``deadline`` (``time.perf_counter()`` clock)."""
        raise NotImplementedError

    def warmup(self, problem: Problem | None = None, opts: ExactOptions | None = None) -> float:
        if opts is not None and not opts.warm_start:
            return 0.0
        from ..base import get_solver

        # the greedy's one-off numba compiles are not the exact solver's time
        total = 0.0
        rules = WARM_RULES + UNICAST_WARM_RULES if problem is None else warm_rules(problem)
        for name, rule in rules:
            try:
                s = get_solver(name)
            except SolverError:  # the warm start then falls back to the TEN list schedule
                continue
            total += s.warmup(problem, None if problem is None else s.options(rule))
        return total

    def release_refusal(self, problem: Problem) -> str | None:
        """Why the models cannot take ``problem``'s late NPUs (``collective.release_us``; one line), or None.

        Copy collectives model them directly. A reducing collective's model is its time-reversed copy
        collective (:func:`solvers.compose.solve_collective`), where a late NPU's contribution, available from
        its release ``r``, becomes a deadline ``T - r`` that moves with the makespan ``T`` being minimized, and
        the re-timing of the reversed plan does not keep it: not modelled (:mod:`solvers.release` waits)."""
        if CAP_RELEASE not in self.capabilities:
            return f"solver {self.name!r} does not model late NPUs"
        if problem.kind == "concurrent" or not problem.collective.copies:
            return (f"{self.name} models late NPUs (collective.release_us) of copy collectives only, not of "
                    f"{problem.kind}: its model of a reducing collective is the time-reversed copy, where a "
                    "release is a deadline that moves with the makespan")
        return None

    # -------------------------------------------------------------- driver
    def _solve(self, problem: Problem, opts: ExactOptions) -> SolveResult:
        if problem.has_release:
            why = self.release_refusal(problem)
            if why is not None:
                raise SolverError(why)
        jit_s = self.warmup(problem, opts)
        t_start = time.perf_counter()
        deadline = None if opts.time_limit_s is None else t_start + opts.time_limit_s
        parts: list[AgResult] = []
        cache: dict[Any, AgResult] = {}
        # All-Reduce solves two All-Gathers (reversed and forward topology); on a
        # symmetric topology they are the same problem and are solved once.
        n_sub = 1
        if problem.kind == ALL_REDUCE:
            n_sub = 1 if problem.topology.is_symmetric else 2

        def copy_solve(agp: Problem) -> Schedule:
            key = _topology_key(agp)
            if key in cache:
                parts.append(cache[key])
                return cache[key].schedule
            sub_deadline = deadline
            remaining_subs = n_sub - len(cache)
            if deadline is not None and remaining_subs > 1:
                sub_deadline = time.perf_counter() + (deadline - time.perf_counter()) / remaining_subs
            r = self._solve_copy(agp, sub_deadline, opts)
            cache[key] = r
            parts.append(r)
            if r.schedule is None:
                raise _NoSchedule(r)
            return r.schedule

        try:
            schedule = solve_collective(problem, copy_solve)
        except _NoSchedule as e:
            r = e.result
            res = SolveResult(r.status, None, None, r.bound_us if r.ten_exact else None, r.build_time_s,
                              r.solve_time_s, stats=self._merge_stats(parts, problem), message=r.message,
                              stop_reason=r.stop_reason, solution_source=None)
        else:
            res = self._combine(problem, schedule, parts)
        res.stats["jit_warmup_s"] = jit_s
        return self._with_search_facts(res, parts, t_start, problem)

    @staticmethod
    def _with_search_facts(res: SolveResult, parts: list[AgResult], t_start: float,
                           problem: Problem | None = None) -> SolveResult:
        """The result with what every exact record says: scope, resolution, search time and effort, trace.

        The trace holds the asked problem's points only, each ``(time_s, incumbent_us, bound_us,
        bound_scope)`` (:mod:`tacos_bench.anytime`): a copy collective or a mirrored Reduce-Scatter / Reduce is
        its one phase (the same schedule times), so its points are kept, each bound marked ``ten`` where it
        holds only for the model's time grid; an All-Reduce's phases are not the All-Reduce (an incumbent of
        one phase is half a schedule), so it keeps its end point only. The end point's bound is the backend's
        where it holds for the problem, else the problem's own lower bound.
        """
        uniq = list({id(p): p for p in parts}.values())
        scopes = {p.scope or ("continuous" if p.ten_exact else "ten") for p in uniq}
        scope = "ten" if "ten" in scopes else ("continuous" if scopes else None)
        res_us = [p.resolution_us for p in uniq if p.resolution_us is not None]
        branches = [p.branches for p in uniq if p.branches is not None]
        composed = problem is not None and problem.kind == ALL_REDUCE
        trace = []
        if len(uniq) == 1 and not composed:
            p = uniq[0]
            p_scope = p.scope or ("continuous" if p.ten_exact else "ten")
            trace = [(max(0.0, t - t_start), inc, b, None if b is None else p_scope) for t, inc, b in p.trace]
        if res.schedule is not None:
            t_end = time.perf_counter() - t_start
            bound, b_scope = res.best_bound_us, scope
            if problem is not None and (composed or bound is None):
                # the phase bounds are the phases' (and a TEN's bound its grid's): the problem's own lower bound
                # is the one a reader compares the end point with
                bound, _ = continuous_lower_bound_us(problem)
                b_scope = "continuous"
            trace.append((t_end, res.schedule.makespan_us, bound, None if bound is None else b_scope))
        return replace(res, optimality_scope=scope, time_resolution_us=min(res_us) if res_us else None,
                       search_time_s=sum(p.solve_time_s for p in uniq), search_branches=sum(branches) if branches
                       else None, trace=tuple(trace))

    def _merge_stats(self, parts: list[AgResult], problem: Problem) -> dict[str, Any]:
        stats: dict[str, Any] = {"subproblems": len(parts)}
        if len(parts) == 1:
            stats.update(parts[0].stats)
        else:
            names = ("rs", "ag") if problem.kind == ALL_REDUCE else tuple(f"p{i}" for i in range(len(parts)))
            for nm, p in zip(names, parts):
                for k, v in p.stats.items():
                    stats[f"{nm}_{k}"] = v
        return stats

    def _combine(self, problem: Problem, schedule: Schedule, parts: list[AgResult]) -> SolveResult:
        stats = self._merge_stats(parts, problem)
        uniq = list({id(p): p for p in parts}.values())
        build = sum(p.build_time_s for p in uniq)
        solve_t = sum(p.solve_time_s for p in uniq)
        msgs = "; ".join(p.message for p in uniq if p.message)
        stop = next((p.stop_reason for p in uniq if p.stop_reason != "proved"), "proved")
        exact = all(p.ten_exact for p in parts)
        sources = {p.source for p in parts}
        source = sources.pop() if len(sources) == 1 else "model"
        if not exact:
            stats["ten_note"] = ("link times are not whole TEN steps: the model optimizes rounded-up link times, "
                                 "so its optimum and bound hold for the TEN, not for the continuous problem")
        ten_bounds = [p.bound_us for p in parts if p.bound_us is not None]
        stats["ten_bound_us"] = max(ten_bounds) if len(ten_bounds) == len(parts) else None
        if problem.kind != ALL_REDUCE:
            # A copy collective is its one sub-solve. Reduce-Scatter / Reduce schedules are exactly the
            # time-reversed All-Gathers / Broadcasts of the reversed topology (each NPU sends its partial
            # sum of a chunk once, so the transfers of a chunk form an in-tree), so the sub-status carries over.
            p = parts[0]
            status = p.status if exact or p.status != "optimal" else "feasible"
            if p.status == "optimal" and not exact:
                stats["ten_optimal"] = True
            return SolveResult(status, schedule, p.objective_us, p.bound_us if exact else None, build, solve_t,
                               stats, msgs, stop_reason=stop, solution_source=source,
                               proof=p.proof if status == "optimal" else None)
        # All-Reduce: RS and AG composed (solvers.compose). Each half alone is a valid lower bound
        # (an All-Reduce schedule is a Reduce-Scatter schedule, and its owners' contributions flow
        # like an All-Gather), but the composition of two optima is optimal only when it meets that bound.
        rs, ag = parts
        obj = schedule.makespan_us
        bounds = [b for b in (rs.bound_us, ag.bound_us) if b is not None]
        bound = max(bounds) if bounds and exact else None
        if any(p.status == "error" for p in parts):
            status = "error"
        elif bound is not None and obj <= bound * (1 + 1e-9):
            status = "optimal"
        else:
            status = "feasible"
        stats["all_reduce_note"] = ("Reduce-Scatter and All-Gather each solved on its own, then composed "
                                    "(collective.overlap); optimal only when it meets the better phase bound")
        # what stopped the phases is not what a user asked about: a phase proved (or met its own bound) proves
        # nothing of the composed All-Reduce, so "proved" never stands for it and "bound_met" only when the
        # composition itself meets the bound with no search run
        limit = next((p.stop_reason for p in uniq if p.stop_reason in ("time_limit", "gap_limit", "error")), None)
        if limit is not None:
            stop = limit
        elif status == "optimal" and all(p.stop_reason == "bound_met" for p in uniq):
            stop = "bound_met"
        else:
            stop = "finished"
        return SolveResult(status, schedule, obj, bound, build, solve_t, stats, msgs, stop_reason=stop,
                           solution_source=source, proof="lower_bound" if status == "optimal" else None)

    def _solve_copy(self, problem: Problem, deadline: float | None, opts: ExactOptions) -> AgResult:
        """Solve one copy collective on the TEN by ``deadline`` (warm start, bounds, model, status)."""
        t0 = time.perf_counter()
        stats: dict[str, Any] = {}
        if problem.num_npus == 1:  # nothing to move
            stats.update(model_vars=0, model_constraints=0, objective_steps=0, bound_steps=0, source="trivial")
            return AgResult("optimal", Schedule.empty(), 0.0, 0.0, time.perf_counter() - t0, 0.0, stats,
                            source="trivial", proof="lower_bound")
        lb_us, lb_src = continuous_lower_bound_us(problem)
        greedy = None
        if opts.warm_start and opts.horizon_steps is None:
            # the warm start first, against the continuous bound: when it meets it, no model is built (a fixed
            # horizon asks for the model itself)
            remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
            tg = time.perf_counter()
            greedy = list(greedy_schedules(problem, opts.seed, None if remaining is None else 0.2 * remaining))
            done_at = time.perf_counter()
            stats["warm_greedy_time_s"] = done_at - tg
            met = [(s.makespan_us, label, s) for label, s, _ in greedy
                   if s is not None and lb_us is not None and s.makespan_us <= lb_us * (1 + 1e-9)]
            stats["warm_greedy_note"] = "; ".join(f"{label}: {note}" for label, _, note in greedy)
            if met:
                T, label, sched = min(met, key=lambda m: m[0])
                # the TEN this run would have built: its step, and the warm plan's length on it
                step = float(opts.time_step_us or np.min(problem.link_time_us))
                stats.update(model_vars=0, model_constraints=0, warm_source=label, lb_continuous_us=lb_us,
                             lb_continuous_source=lb_src, source="warm_start", tau_us=step,
                             warm_steps=int(math.ceil(T / step - 1e-9)),
                             proof="the warm start meets the continuous lower bound: no search ran")
                return AgResult("optimal", sched, T, lb_us, time.perf_counter() - t0, 0.0, stats,
                                source="warm_start", proof="lower_bound", stop_reason="bound_met",
                                trace=[(done_at, T, lb_us)], scope="continuous")
        if getattr(opts, "model", None) == "continuous":
            hint = min((s for _, s, _ in greedy or () if s is not None), key=lambda s: s.makespan_us, default=None)
            return self._solve_copy_continuous(problem, deadline, opts, t0, stats, hint)
        ten = TimeExpandedNetwork.build(problem, opts.time_step_us, horizon_steps=1)
        tau = ten.tau_us
        stats.update(tau_us=tau, ten_exact=ten.exact, link_steps_max=int(ten.link_steps.max()))
        # --- lower bound (steps) -------------------------------------------------
        lb_ten = ten.lower_bound_steps()
        lb_cont = 0 if lb_us is None else int(math.ceil(lb_us / tau - 1e-9))
        lb = max(lb_ten, lb_cont)
        stats.update(lb_ten_steps=lb_ten, lb_continuous_us=lb_us, lb_continuous_source=lb_src, lb_steps=lb)
        # --- warm start / horizon ------------------------------------------------
        remaining = None if deadline is None else max(0.0, deadline - time.perf_counter())
        greedy_budget = None if remaining is None else 0.2 * remaining
        warm, winfo = best_warm_start(ten, opts.seed, opts.warm_start, greedy_budget, greedy)
        stats.update(winfo)
        U = warm.steps
        if opts.horizon_steps is not None:
            H = opts.horizon_steps
            use_warm = opts.warm_start and U <= H
            hint_model = use_warm
        elif opts.warm_start:
            # The warm plan is already known; ask the model only for something strictly
            # better (a smaller model). Infeasible then means the warm plan is optimal.
            H = U - 1
            use_warm = True
            hint_model = False
        else:
            H = U
            use_warm = False
            hint_model = False
        stats.update(horizon_steps=H, upper_bound_steps=U)
        warm_sched = ten.to_schedule(*warm.plan) if use_warm else None
        done = dict(ten_exact=ten.exact)
        if H < lb:
            # Nothing better than the warm plan can exist: it meets the lower bound.
            stats.update(model_vars=0, model_constraints=0, proof="warm start meets the lower bound")
            if use_warm:
                stats.update(objective_steps=U, bound_steps=U, source="warm_start")
            build = time.perf_counter() - t0
            if use_warm:
                return AgResult("optimal", warm_sched, U * tau, U * tau, build, 0.0, stats, source="warm_start",
                                proof="lower_bound", stop_reason="bound_met", resolution_us=tau,
                                trace=[(time.perf_counter(), U * tau, U * tau)], **done)
            return AgResult("infeasible", None, None, lb * tau, build, 0.0, stats,
                            f"horizon_steps={H} is below the lower bound of {lb} steps", **done)
        ten_h = ten.with_horizon(H)
        sends = ten_h.send_var_count()
        if sends > MAX_TEN_SENDS:
            # random32d3s0 All-to-All at 4 chunks per pair: 91 M sends, and the run was killed at 24 GB
            raise SolverError(f"{self.name}: the time-expanded model of {problem.describe()} would have {sends:,} "
                              f"send variables ({H} steps of {tau:.6g} µs), more than the {MAX_TEN_SENDS:,} that fit "
                              "in memory here; use greedy_plus, a coarser solver.time_step_us, or fewer chunks")
        model = build_ag_model(ten_h, lb)
        hint = hint_vector(model, warm.plan) if hint_model else None
        stats["hinted"] = hint is not None
        stats["index_time_s"] = time.perf_counter() - t0
        if model_is_trivially_infeasible(model):
            out = ModelOutcome("infeasible", message="some chunk cannot reach some NPU within the horizon",
                               native="trivially infeasible")
        elif deadline is not None and time.perf_counter() >= deadline:
            out = ModelOutcome("no_solution", message="time limit reached while indexing the model",
                               native="not started", limit="time_limit")
        else:
            try:
                out = self._run_model(model, hint, deadline, opts)
            except TacosError:
                raise
            except Exception as e:  # a backend crash must not lose the warm schedule
                out = ModelOutcome("error", message=f"{type(e).__name__}: {e}", native="exception")
        stats.update(model_vars=out.num_vars, model_constraints=out.num_constraints, model_status=out.status,
                     native_status=out.native)
        stats.update(out.stats)
        build = (time.perf_counter() - t0) - out.solve_time_s
        r = self._finish(model, out, warm_sched, U if use_warm else None, lb, stats, build)
        warm_point = [(t0 + stats.get("index_time_s", 0.0), U * tau, None)] if use_warm else []
        return replace(r, resolution_us=tau, branches=out.branches,
                       trace=warm_point + [(t, None if inc is None else inc * tau, None if b is None else b * tau)
                                           for t, inc, b in out.trace])

    def _solve_copy_continuous(self, problem: Problem, deadline: float | None, opts, t0: float,
                               stats: dict[str, Any], hint: Schedule | None) -> AgResult:
        """One copy collective with the continuous-time model (:mod:`solvers.exact.continuous`): warm from
        ``hint`` (the best greedy schedule) or cold (the model's own list schedule, nothing from elsewhere)."""
        from .continuous import solve_continuous

        left = None if deadline is None else max(0.01, deadline - time.perf_counter())
        workers = opts.num_workers or max(8, opts.num_threads)
        call = time.perf_counter()
        out = solve_continuous(problem, time_limit_s=left, num_workers=workers, seed=opts.seed, hint=hint,
                               log=opts.log)
        native = out.native_status
        stats.update({f"continuous_{k}": v for k, v in out.stats.items() if isinstance(v, (int, float, str, bool))})
        stats.update(model_status=native, native_status=native, time_unit_us=out.time_unit_us,
                     exact_time=out.exact_time, source=out.solution_source, hinted=hint is not None)
        exact = out.exact_time
        proved = out.proved_optimal
        if out.schedule is None:
            status = {"INFEASIBLE": "infeasible", "MODEL_INVALID": "error"}.get(native, "no_solution")
        else:
            status = "optimal" if proved else "feasible"
            if native in ("OPTIMAL", "BOUND_MET") and not exact:
                stats["continuous_note"] = (f"optimal only for link times rounded up to {out.time_unit_us:g} µs; "
                                            "not reported as the problem's optimum")
        stop = {"OPTIMAL": "proved", "BOUND_MET": "bound_met", "TRIVIAL": "bound_met", "INFEASIBLE": "proved",
                "MODEL_INVALID": "error"}.get(native, "time_limit")
        if native == "OPTIMAL" and not proved:
            stop = "proved"   # proved for the rounded grid: scope says which
        source = {"model": "model", "list_schedule": "list_schedule", "hint": "warm_start"}.get(
            out.solution_source or "", None if out.schedule is None else "model")
        proof = None
        if status == "optimal":
            proof = "solver" if native == "OPTIMAL" else "lower_bound"
        trace = [(call + t, inc, b) for t, inc, b in out.trace]
        return AgResult(status, out.schedule, out.objective_us, out.best_bound_us if exact else None,
                        time.perf_counter() - t0 - out.search_time_s, out.search_time_s, stats,
                        source=source, proof=proof, stop_reason=stop, ten_exact=exact, trace=trace,
                        resolution_us=out.time_unit_us, branches=out.stats.get("branches"),
                        scope="continuous" if exact else "ten")

    def _finish(self, model: AgModel, out: ModelOutcome, warm_sched, warm_steps, lb, stats, build) -> AgResult:
        ten = model.ten
        tau = ten.tau_us
        H = ten.horizon
        done = dict(ten_exact=ten.exact)
        stop = out.limit or ("error" if out.status == "error" else "proved")
        bound = lb if out.bound_steps is None else max(lb, int(math.ceil(out.bound_steps - _BOUND_EPS)))
        if out.x is not None and out.status in ("optimal", "feasible"):
            sel = np.flatnonzero(out.x > 0.5)
            sv = model.sv
            plan = (sv.chunk[sel], sv.link[sel], sv.step[sel])
            steps = ten.plan_makespan_steps(plan[1], plan[2])
            sched = ten.to_schedule(*plan)
            status = "optimal" if bound >= steps else "feasible"
            stats.update(objective_steps=steps, bound_steps=bound, source="model")
            proof = ("solver" if out.status == "optimal" else "lower_bound") if status == "optimal" else None
            return AgResult(status, sched, steps * tau, bound * tau, build, out.solve_time_s, stats, out.message,
                            source="model", proof=proof, stop_reason="proved" if status == "optimal" else stop,
                            **done)
        if out.status == "infeasible":
            # Nothing within H = (warm - 1) steps: the warm plan is optimal (or, without one, the horizon is too short).
            if warm_sched is not None and warm_steps == H + 1:
                stats.update(objective_steps=warm_steps, bound_steps=warm_steps, source="warm_start",
                             proof="model with horizon warm-1 is infeasible")
                return AgResult("optimal", warm_sched, warm_steps * tau, warm_steps * tau, build,
                                out.solve_time_s, stats, out.message, source="warm_start", proof="solver", **done)
            if warm_sched is not None:
                stats.update(objective_steps=warm_steps, bound_steps=warm_steps, source="warm_start")
                opt = warm_steps <= H + 1
                return AgResult("optimal" if opt else "feasible", warm_sched, warm_steps * tau,
                                (H + 1) * tau, build, out.solve_time_s, stats, out.message, source="warm_start",
                                proof="solver" if opt else None, **done)
            return AgResult("infeasible", None, None, (H + 1) * tau, build, out.solve_time_s, stats,
                            out.message or f"no {ten.problem.kind} plan within {H} steps", source=None, **done)
        # no_solution / error: fall back to the warm plan if there is one
        if warm_sched is not None:
            stats.update(objective_steps=warm_steps, bound_steps=bound, source="warm_start")
            status = "optimal" if bound >= warm_steps else "feasible"
            if out.status == "error":
                stats["model_error"] = out.message
            return AgResult(status, warm_sched, warm_steps * tau, bound * tau, build, out.solve_time_s, stats,
                            out.message, source="warm_start", proof="lower_bound" if status == "optimal" else None,
                            stop_reason="proved" if status == "optimal" else stop, **done)
        status = "error" if out.status == "error" else "no_solution"
        return AgResult(status, None, None, bound * tau, build, out.solve_time_s, stats, out.message, source=None,
                        stop_reason=stop, **done)
