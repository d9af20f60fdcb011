"""The statistics of the exact family (``milp``, ``cpsat``): record fields ``s_<name>``.

A run reports what its copy-collective sub-solve did (:meth:`solvers.exact.common.ExactSolverBase._solve_copy`:
bounds, warm start, horizon, model size and status; :data:`COPY`), what the backend's own model solve adds
(:data:`CPSAT_RUN`, :data:`MILP_RUN`) and what the composition adds (:data:`RUN`). An All-Reduce reports each
phase's sub-solve under ``rs_`` / ``ag_``. ``cpsat``'s continuous-time model (:mod:`solvers.exact.continuous`)
and its fabric model (:mod:`solvers.exact.fabric`) report their own statistics, copied under ``continuous_`` and
``fabric_`` (:data:`CONTINUOUS_MODEL`, :data:`FABRIC_MODEL`; the ones without a value are left out).

Steps are the time-expanded network's (TEN, ``tau_us`` each), units the continuous models' exact time unit
(``time_unit_us`` each).

Examples
--------
>>> CPSAT_STATS.lookup("ag_continuous_intervals").doc
'continuous model: optional intervals of the model'
>>> MILP_STATS.lookup("cpsat_status") is None
True
"""

from __future__ import annotations

from ..stats import COMMON, Stat, StatsSchema
from .common import UNICAST_WARM_RULES, WARM_RULES, warm_rule_label, warm_stat_name

# the warm start's compilation; an exact run reports no transfer count
_JIT = StatsSchema(COMMON.stats["jit_warmup_s"])

# what the composition of the sub-solves adds (ExactSolverBase._solve, _merge_stats, _combine)
RUN = StatsSchema(
    Stat("subproblems", int, "", "copy-collective sub-solves the collective took (2 for an All-Reduce, its "
                                 "phases under rs_ and ag_; on a symmetric topology the same solve twice)"),
    Stat("ten_bound_us", float, "µs", "the largest sub-solve bound, valid for the model solved (the TEN with "
                                      "link times rounded up when ten_exact is false); null when one has none"),
    Stat("ten_note", str, "", "link times are not whole TEN steps: the optimum and bound hold for the TEN"),
    Stat("ten_optimal", bool, "", "the model proved its optimum on the TEN, not reported as the problem's "
                                  "optimum (ten_exact false)"),
    Stat("all_reduce_note", str, "", "All-Reduce: how the phases were composed, and when that is optimal"),
)

# one copy-collective sub-solve (ExactSolverBase._solve_copy, best_warm_start, _finish)
_WARM_RULES = tuple(
    Stat(warm_stat_name(warm_rule_label(name, opts)), int, "steps",
         f"TEN makespan of the warm start by {warm_rule_label(name, opts)}")
    for name, opts in WARM_RULES + UNICAST_WARM_RULES)
COPY = StatsSchema(
    Stat("model_vars", int, "", "variables of the model (0: none built)"),
    Stat("model_constraints", int, "", "constraints of the model (0: none built)"),
    Stat("model_status", str, "", "the model solve's outcome: on the TEN in the shared status vocabulary, for "
                                  "the continuous and fabric models CP-SAT's status name"),
    Stat("native_status", str, "", "the solver's own status name (or trivially infeasible, not started, "
                                   "exception)"),
    Stat("model_error", str, "", "the backend's error when it failed and the warm plan was returned"),
    Stat("objective_steps", int, "steps", "makespan of the returned TEN plan"),
    Stat("bound_steps", int, "steps", "proved lower bound on the TEN makespan"),
    Stat("source", str, "", "what produced this sub-solve's schedule: model, warm_start or trivial on the TEN; "
                            "model, list_schedule (its own cold start) or hint in continuous time"),
    Stat("proof", str, "", "how optimality was shown without a model solution (the warm start meets a lower "
                           "bound; the model below the warm start is infeasible)"),
    Stat("hinted", bool, "", "the model was handed the warm schedule as a hint"),
    Stat("lb_continuous_us", float, "µs", "the project's lower bound of the copy collective "
                                          "(tacos_bench.bounds)"),
    Stat("lb_continuous_source", str, "", "where lb_continuous_us comes from, or why it is missing"),
    Stat("tau_us", float, "µs", "the TEN step (time_step_us, default the fastest link's chunk time)"),
    Stat("ten_exact", bool, "", "every link time, and every late NPU's release, is a whole number of TEN steps "
                                "(the TEN optimum is the problem's)"),
    Stat("link_steps_max", int, "steps", "TEN steps of the slowest link"),
    Stat("lb_ten_steps", int, "steps", "the TEN's own lower bound (distance, ingress, egress, link count, load)"),
    Stat("lb_steps", int, "steps", "the model's lower end of the makespan: the larger of lb_ten_steps and "
                                   "lb_continuous_us in steps"),
    Stat("horizon_steps", int, "steps", "the model's horizon (one step below the warm start: the model looks "
                                        "only for a better plan; or horizon_steps)"),
    Stat("upper_bound_steps", int, "steps", "TEN makespan of the warm start (the TEN list schedule without "
                                            "warm_start)"),
    Stat("index_time_s", float, "s", "time to the model's index: bounds, warm start, indexing"),
    Stat("warm_greedy_time_s", float, "s", "time of the greedy warm-start runs"),
    Stat("warm_greedy_note", str, "", "each greedy warm rule's outcome (ok, or why it gave nothing)"),
    Stat("warm_source", str, "", "the warm start kept: ten_list (the TEN list schedule) or a greedy rule"),
    Stat("warm_steps", int, "steps", "TEN makespan of the warm start kept"),
    Stat("warm_list_steps", int, "steps", "TEN makespan of the TEN list schedule"),
    Stat("greedy_makespan_us", float, "µs", "makespan of the greedy schedule kept as the warm start"),
    *_WARM_RULES,
)

# a CP-SAT solve on the TEN (solvers.exact.cpsat.CpSatSolver._run_model, fabric_copy_result)
CPSAT_RUN = StatsSchema(
    Stat("cpsat_status", str, "", "CP-SAT's status name"),
    Stat("cpsat_model", str, "", "the formulation solved: time_indexed or interval on the TEN; fabric_interval "
                                 "or fabric_time_indexed on a switched fabric"),
    Stat("cpsat_build_time_s", float, "s", "time to build the CP-SAT model"),
    Stat("cpsat_conflicts", int, "", "CP-SAT's conflicts"),
    Stat("cpsat_branches", int, "", "CP-SAT's branches"),
    Stat("num_workers", int, "", "CP-SAT workers (num_workers, default max(8, threads))"),
    Stat("time_unit_us", float, "µs", "continuous and fabric models: the exact time unit"),
    Stat("exact_time", bool, "", "continuous and fabric models: every duration is a whole number of units "
                                 "(false: rounded up)"),
    Stat("continuous_note", str, "", "continuous model: optimal only for durations rounded up to the unit"),
    Stat("fabric_note", str, "", "fabric model: optimal only for its hops or for rounded-up durations"),
    Stat("all_reduce_barrier_us", float, "µs", "fabric All-Reduce with overlap: the makespan with a barrier, "
                                               "before the All-Gather was re-timed"),
)

# a PuLP solve with HiGHS or CBC (solvers.exact.milp)
MILP_RUN = StatsSchema(
    Stat("backend", str, "", "the MILP solver: highs or cbc"),
    Stat("pulp_build_time_s", float, "s", "time to build the PuLP model"),
    Stat("pulp_status", str, "", "PuLP's status name"),
    Stat("pulp_sol_status", int, "", "PuLP's solution status code"),
    Stat("highs_status", str, "", "HiGHS's model status name"),
    Stat("mip_nodes", int, "", "HiGHS: branch-and-bound nodes"),
    Stat("highs_run_s", float, "s", "HiGHS: time of its run"),
    Stat("highs_handover_s", float, "s", "HiGHS: PuLP's time around the run (passing the model and the "
                                         "solution)"),
    Stat("cbc_interrupted", str, "", "CBC: no, or how it was stopped at the deadline (sigint, killed)"),
)

# one CP-SAT search in continuous time (solvers.exact.continuous._search and _bound_met), both models
_SEARCH = StatsSchema(
    Stat("intervals", int, "", "optional intervals of the model"),
    Stat("variables", int, "", "CP-SAT variables"),
    Stat("constraints", int, "", "CP-SAT constraints"),
    Stat("workers", int, "", "CP-SAT workers (0: no search)"),
    Stat("branches", int, "", "CP-SAT's branches"),
    Stat("conflicts", int, "", "CP-SAT's conflicts"),
    Stat("model_objective_units", int, "units", "CP-SAT's objective (or the start's makespan when no search ran)"),
    Stat("model_bound_units", float, "units", "CP-SAT's bound, at least the cuts' floor"),
    Stat("gap_limit", bool, "", "CP-SAT stopped at the relative gap allowed (mip_gap)"),
    Stat("hinted", str, "", "the start handed to CP-SAT as a hint: list_schedule or hint"),
    Stat("hint_us", float, "µs", "makespan of the hint (the warm schedule)"),
    Stat("lower_bound_us", float, "µs", "the project's lower bound (tacos_bench.bounds.lower_bounds)"),
    Stat("lower_bound_source", str, "", "the bound family of lower_bound_us (off: not used)"),
    Stat("bound_cut_units", int, "units", "the cut T >= this on the makespan"),
    Stat("list_schedule_us", float, "µs", "makespan of the best list schedule (the cold start)"),
    Stat("list_schedule_runs", int, "", "list-schedule variants run"),
    Stat("list_schedule_time_s", float, "s", "time of the list-schedule variants"),
    Stat("list_schedule_note", str, "", "why there is no start: the list schedule did not finish within the time "
                                        "limit"),
    Stat("horizon_units", int, "units", "the model's horizon: the start's makespan"),
)

# solvers.exact.continuous.solve_continuous
CONTINUOUS_MODEL = StatsSchema(
    Stat("cuts", str, "", "the strengthening cuts of the model, comma-separated"),
    Stat("predicted_intervals", int, "", "optional intervals predicted before building (predict_size)"),
    Stat("drain_cut_units", int, "units", "the group import and drain bound (a cut on the makespan)"),
    Stat("drain_cut_us", float, "µs", "drain_cut_units in µs"),
    Stat("drain_time_s", float, "s", "time to compute the drain bound"),
    include=(_SEARCH,),
)

# solvers.exact.fabric.solve_fabric
FABRIC_MODEL = StatsSchema(
    Stat("hops", int, "", "hops (NPU-to-NPU paths through switches) of the model"),
    Stat("hops_complete", bool, "", "the hops are every simple path (false: the shortest ones only, and the "
                                    "model is exact over those)"),
    Stat("segments_max", int, "", "most segments (rows, split at store-and-forward switches) of a hop"),
    Stat("hint_units", int, "units", "makespan of the hint re-timed in the model's units"),
    Stat("bound_note", str, "", "the lower bound was not used: a verified schedule beats it"),
    Stat("formulation", str, "", "interval or time_indexed"),
    Stat("time_indexed_bools", int, "", "time_indexed: Booleans (chunk, hop, segment, start unit)"),
    Stat("time_indexed_occupancy", int, "", "time_indexed: (start, link, unit) entries"),
    Stat("model_infeasible_note", str, "", "CP-SAT found the model infeasible at the start's makespan (a wrong "
                                           "cut): the start was returned"),
    include=(_SEARCH,),
)

CPSAT_STATS = StatsSchema(include=(_JIT, RUN, COPY, CPSAT_RUN, CONTINUOUS_MODEL.renamed("continuous_",
                                                                                           "continuous model: "),
                                   FABRIC_MODEL.renamed("fabric_", "fabric model: ")),
                          phases=("rs", "ag"))
MILP_STATS = StatsSchema(include=(_JIT, RUN, COPY, MILP_RUN), phases=("rs", "ag"))
