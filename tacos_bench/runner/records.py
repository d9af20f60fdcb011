"""The run record: one flat dict per run (``result.json``), its schema declared here.

A record is flat (scalars only) so that many of them become one tidy table
(:mod:`tacos_bench.collect`). :data:`FIELDS` lists every field with its unit and
the stage of a run that fills it; :data:`FAMILIES` the prefixed families
(``p_solver_*``, ``s_*``, ...). The README's record table is generated from it
(:func:`markdown_table`) and a test checks that every record
the pipeline writes uses only declared names. Field names are a public
contract: add, never rename.

Examples
--------
>>> FIELD["collective_time_us"].unit
'µs'
>>> is_declared("s_restarts_run"), is_declared("no_such_field")
(True, False)
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import platform
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

# what fills a field, in run order (Field.stage names one); "fault" is a run with fault.at_us or at_fraction
STAGES = ("run", "config", "problem", "bounds", "solve", "save", "verify", "fault", "export", "env")


@dataclass(frozen=True)
class Field:
    """One record field: its name, unit (``""`` when unitless), the stage that fills it, and what it means."""

    name: str
    unit: str
    stage: str
    doc: str


FIELDS: tuple[Field, ...] = (
    # run identity
    Field("run_id", "", "run", "random 12-hex id of the run"),
    Field("timestamp_utc", "", "run", "start of the run, ISO 8601 UTC"),
    Field("git_commit", "", "run", "HEAD of the checkout (`-dirty` with uncommitted changes)"),
    Field("experiment", "", "run", "experiment name (`experiment=`)"),
    Field("job_num", "", "run", "job number within a sweep (null for a single run)"),
    Field("job_name", "", "run", "Hydra job name"),
    Field("override_dirname", "", "run", "the command-line overrides of a Hydra job"),
    Field("output_dir", "", "run", "the run directory"),
    Field("record_path", "", "run", "the result.json a row of an aggregated table came from"),
    # configuration
    Field("solver", "", "config", "backend name (`solver=`)"),
    Field("seed", "", "config", "master seed (`seed=`)"),
    Field("time_limit_s", "s", "config", "wall-clock budget of the solve (null: none)"),
    Field("threads", "", "config", "threads the backend may use (0: one per usable core)"),
    Field("uses_seed", "", "config", "the backend uses the seed (false: deterministic, seed ignored)"),
    Field("honours_time_limit", "", "config", "the backend stops at time_limit_s (false: runs to completion)"),
    Field("uses_threads", "", "config", "the backend uses more than one thread when asked"),
    Field("export", "", "config", "export format asked for (none, msccl, json, chakra, astra-sim)"),
    Field("options_not_applied", "", "config", "options of the sweep that this backend does not have (k=v,...), "
                                               "given to the backends that do; null when all applied"),
    # problem
    Field("topology", "", "problem", "topology name (a file's stem for `topo=file`)"),
    Field("topology_header_name", "", "problem", "the name a topology file declares, when it differs"),
    Field("topology_kind", "", "problem", "generator family, `file`, `induced` (failed NPUs, subset) or "
                                          "`degraded` (failed links)"),
    Field("num_npus", "", "problem", "NPUs"),
    Field("num_links", "", "problem", "directed links"),
    Field("homogeneous", "", "problem", "every link has the same bandwidth and latency"),
    Field("symmetric", "", "problem", "every link has a reverse with the same bandwidth and latency"),
    Field("collective", "", "problem", "all_gather, reduce_scatter, all_reduce, broadcast, reduce, gather, scatter, "
                                       "all_to_all; or a chunk table: all_to_allv, moe_dispatch, moe_combine, "
                                       "custom, concurrent"),
    Field("chunks_per_npu", "", "problem", "K: chunks per NPU (broadcast/reduce: chunks; all_to_all: per pair; null "
                                           "for a chunk table)"),
    Field("buffer_mib", "MiB", "problem", "collective size"),
    Field("overlap", "", "problem", "All-Reduce composition: phases overlapped per link and chunk (false: barrier)"),
    Field("root", "", "problem", "root of broadcast/reduce/gather/scatter, as configured (null for the others)"),
    Field("failed_links", "", "problem", "number of directed links removed before synthesis (topo.failed_links)"),
    Field("num_chunks", "", "problem", "N x K (broadcast/reduce: K; all_to_all: N x N x K; a chunk table: its rows)"),
    Field("chunk_bytes", "B", "problem", "floor(buffer / num_chunks); a chunk table's one chunk size"),
    Field("min_link_time_us", "µs", "problem", "fastest link's chunk time"),
    Field("release_us", "", "problem", "late NPUs (collective.release_us) as JSON [[npu, t_us], ...]: each neither "
                                       "sends nor receives before t; null without any"),
    Field("release_plan", "", "solver", "with late NPUs: the plan kept (solvers.release): wait (the schedule without "
                                        "them, started when the last joins), from_release, straggle, exact (milp, "
                                        "cpsat: the release times in the backend's own model)"),
    Field("demand_bytes", "B", "problem", "a chunk-table collective (all_to_allv, moe_*, custom, concurrent): the bytes "
                                          "its sources send its destinations, summed over pairs (chunks.csv has the "
                                          "table)"),
    Field("padding_bytes", "B", "problem", "a chunk-table collective: bytes added by rounding each pair (or token "
                                           "group) up to whole chunks"),
    Field("demand_gini", "", "problem", "moe_dispatch / moe_combine: the realized Gini coefficient of the tokens each "
                                        "expert receives (collective.gini asks for it)"),
    # bounds
    Field("lower_bound_us", "µs", "bounds", "best valid lower bound: the bounds module's, or the solver's proven "
                                            "bound when higher"),
    Field("lower_bound_source", "", "bounds", "which bound gave lower_bound_us (ingress, distance, cut, solver)"),
    Field("bounds_time_s", "s", "bounds", "time to compute the bounds"),
    Field("bounds_error", "", "bounds", "why the bounds failed (the run goes on)"),
    Field("part_bounds_us", "µs", "bounds", "collective=concurrent: each part's best lower bound alone (JSON list)"),
    Field("rs_lower_bound_us", "µs", "bounds", "All-Reduce only: best lower bound of its Reduce-Scatter phase alone "
                                               "(the All-Gather bounds on the reversed topology)"),
    Field("rs_lower_bound_source", "", "bounds", "which bound gave rs_lower_bound_us"),
    Field("ag_lower_bound_us", "µs", "bounds", "All-Reduce only: best lower bound of its All-Gather phase alone"),
    Field("ag_lower_bound_source", "", "bounds", "which bound gave ag_lower_bound_us"),
    Field("phases_bound_sum_us", "µs", "bounds", "rs_lower_bound_us + ag_lower_bound_us: NOT a lower bound on the "
                                                 "All-Reduce (its phases may overlap; docs/bounds.md), but no "
                                                 "Reduce-Scatter then All-Gather after a barrier beats it"),
    # solve
    Field("status", "", "solve", "optimal | feasible | infeasible | no_solution | error; optimal whenever the "
                                 "verified time meets lower_bound_us"),
    Field("optimality_proof", "", "solve", "why status is optimal: solver (its search proved it) or lower_bound "
                                           "(the verified time meets lower_bound_us)"),
    Field("stop_reason", "", "solve", "finished (heuristic ran to completion; an exact All-Reduce composed of its "
                                      "phases: their searches ended, which proves nothing of the whole), proved "
                                      "(the search proved the collective asked for), bound_met (no search ran: the "
                                      "warm start met the collective's lower bound), time_limit, gap_limit, error"),
    Field("solution_source", "", "solve", "who found the schedule: heuristic, model (the exact search), "
                                          "list_schedule (an exact backend's own constructive start, with "
                                          "warm_start=false), warm_start (the greedy's schedule an exact backend "
                                          "started from), trivial"),
    Field("optimality_scope", "", "solve", "what an exact backend's optimum and bound hold for: continuous (the "
                                           "problem the verifier checks) or ten (link times rounded up to TEN "
                                           "steps); null for heuristics"),
    Field("time_resolution_us", "µs", "solve", "the time grid of an exact backend's model (TEN step, or the "
                                               "continuous model's unit); null for heuristics"),
    Field("search_time_s", "s", "solve", "seconds an exact backend's search ran (0: no search, the warm start met "
                                         "the bound)"),
    Field("search_branches", "", "solve", "branches (CP-SAT) or nodes (MILP, where the interface reports them) "
                                          "the search explored"),
    Field("anytime_file", "", "solve", "incumbent and bound over time (anytime.csv in the run directory)"),
    Field("time_to_final_incumbent_s", "s", "solve", "when the returned schedule's time was first reached"),
    Field("time_to_1pct_s", "s", "solve", "when an incumbent first came within 1 % of the final one"),
    Field("primal_integral", "", "solve", "integral over the run of the relative gap of the incumbent to the final "
                                          "time (1 before the first incumbent), in seconds"),
    Field("objective_us", "µs", "solve", "what the backend optimized (exact: the TEN makespan)"),
    Field("best_bound_us", "µs", "solve", "the backend's own proven bound for this problem (already folded into "
                                          "lower_bound_us); null when it has none"),
    Field("jit_warmup_s", "s", "solve", "one-off JIT compilation before the clock started (not in synthesis_time_s)"),
    Field("synthesis_time_s", "s", "solve", "wall time of solve(), measured outside the backend"),
    Field("build_time_s", "s", "solve", "model building, as the backend reports it"),
    Field("solve_time_s", "s", "solve", "search, as the backend reports it"),
    Field("candidate", "", "solve", "a portfolio backend (greedy, greedy_plus): the candidate whose schedule won "
                                    "(docs/greedy.md, Candidates); a composed collective's phases as "
                                    "\"rs:<name> ag:<name>\"; null for other backends"),
    Field("candidates_tried", "", "solve", "every candidate that ran: JSON list of {name, time_s, makespan_us} "
                                           "(makespan before verification; a phase key in composed collectives)"),
    Field("candidates_skipped", "", "solve", "every candidate that did not run: JSON list of {name, reason}"),
    Field("part_times_us", "µs", "solve", "collective=concurrent: each part's finish in the schedule (JSON list)"),
    Field("solver_message", "", "solve", "the backend's note (e.g. why it stopped early); null when it has none"),
    # saving
    Field("num_transfers", "", "save", "transfers in the schedule"),
    Field("schedule_file", "", "save", "schedule.csv when written (null: too large, see schedule_csv)"),
    Field("chunks_file", "", "save", "chunks.csv: the chunk table (chunk,sources,destinations,op; * for every NPU) "
                                     "the schedule is checked against"),
    Field("demand_file", "", "save", "demand.csv: a chunk-table collective's per-pair byte matrix (row = sender)"),
    Field("topology_file", "", "save", "the topology's edge list in the run directory"),
    Field("schedule_compact_dir", "", "save", "compact schedule directory (very large All-Gathers)"),
    Field("schedule_compact_bytes", "B", "save", "its size on disk"),
    # verification
    Field("valid", "", "verify", "the independent verifier accepted the schedule"),
    Field("verify_time_s", "s", "verify", "time of the replay"),
    Field("collective_time_us", "µs", "verify", "verified last arrival"),
    Field("gap", "", "verify", "collective_time_us / lower_bound_us - 1 (0 = at the bound)"),
    Field("ratio_to_bound", "", "verify", "collective_time_us / lower_bound_us"),
    Field("gap_to_bound", "", "verify", "deprecated alias of gap (kept for old scripts)"),
    Field("algbw_GBps", "GB/s", "verify", "collective bytes / time (10^9 B/s, as nccl-tests)"),
    Field("link_utilization", "", "verify", "busy link time / (links x collective time)"),
    # fault (fault.at_us set: tacos_bench.runner.faulted)
    Field("fault_at_us", "µs", "fault", "when the links/NPUs of the fault fail"),
    Field("fault_at_fraction", "", "fault", "fault.at_fraction: the fault time as a fraction of healthy_time_us"),
    Field("fault_links", "", "fault", "directed links that fail (fault.links and fault.random_links)"),
    Field("fault_slow_links", "", "fault", "links slowed (fault.slow_links, fault.slow_npus) from the start, or from "
                                           "the fault time with fault.at_us / at_fraction: [[u, v, factor], ...], "
                                           "bandwidth times factor"),
    Field("fault_failed_links", "", "fault", "those links, [[u, v], ...] (random ones as drawn; python -m "
                                            "tacos_bench.verify replays the run with them)"),
    Field("fault_random_links", "", "fault", "fault.random_links: random links (with their reverse) drawn from "
                                             "the seed"),
    Field("fault_npus", "", "fault", "NPUs listed in fault.npus, as configured"),
    Field("healthy_time_us", "µs", "fault", "verified time of the schedule without the fault"),
    Field("healthy_synthesis_time_s", "s", "fault", "synthesis time of that schedule"),
    Field("repaired_time_us", "µs", "fault", "verified time of the executed schedule (= collective_time_us)"),
    Field("repair_synthesis_time_s", "s", "fault", "time to re-synthesize and place the rest after the fault"),
    Field("repair_kept_transfers", "", "fault", "transfers ended or in flight on surviving links at the fault"),
    Field("repair_in_flight_transfers", "", "fault", "of those, in flight at the fault (they complete)"),
    Field("repair_lost_transfers", "", "fault", "transfers in flight on failed links at the fault (lost)"),
    Field("repair_dropped_transfers", "", "fault", "transfers of the healthy schedule not started by the fault"),
    Field("repair_new_transfers", "", "fault", "transfers the repair added"),
    Field("repair_plan", "", "fault", "the repair kept: resume (from the state at the fault), replan (a fresh "
                                      "schedule on the surviving links less what is held, placed after the fault), "
                                      "keep (links slow down: the healthy schedule's remaining transfers in their "
                                      "order on the slowed links), detour (a reducing collective, either network "
                                      "kind: the healthy schedule goes on, on slowed links at their new speed, and "
                                      "what the fault cut goes around it) or unaffected (no "
                                      "transfer still to end crosses a failed link: the healthy schedule runs on)"),
    Field("repair_resume_us", "µs", "fault", "executed time with the resume candidate"),
    Field("repair_replan_us", "µs", "fault", "executed time with the replan candidate (null: not tried)"),
    Field("repair_bound_us", "µs", "fault", "lower bound on any repair: from the state at the fault (executed "
                                            "prefix kept; null on very large instances) or, with links failing "
                                            "and no NPU, the healthy lower_bound_us where larger"),
    Field("repair_bound_source", "", "fault", "which gave repair_bound_us: state (the state at the fault) or "
                                              "healthy (the healthy problem's lower bound)"),
    Field("repaired_over_bound", "", "fault", "repaired_time_us / repair_bound_us"),
    Field("scratch_time_us", "µs", "fault", "verified time of a from-scratch synthesis on the topology after the "
                                           "fault (same backend and options)"),
    Field("scratch_synthesis_time_s", "s", "fault", "its synthesis time"),
    Field("scratch_valid", "", "fault", "the verifier accepted the from-scratch schedule"),
    Field("scratch_error", "", "fault", "why there is no from-scratch comparison"),
    Field("repair_loss", "", "fault", "repaired_time_us / scratch_time_us - 1 (negative: the repair is faster)"),
    Field("repair_speedup", "", "fault", "scratch_synthesis_time_s / repair_synthesis_time_s"),
    Field("repair_note", "", "fault", "why the repaired run beat the healthy schedule (null when it did not)"),
    # export
    Field("export_file", "", "export", "what the export wrote, in the run directory"),
    # outcome
    Field("error", "", "run", "why the run failed (null when it did not); the first line a user sees"),
    # environment
    Field("host", "", "env", "host name"),
    Field("python", "", "env", "Python version"),
    Field("platform", "", "env", "OS and architecture"),
)

FAMILIES: tuple[Field, ...] = (
    Field("choice_<group>", "", "run", "Hydra's runtime choice of each config group"),
    Field("p_solver_<option>", "", "config", "every backend-specific option (solvers.options)"),
    Field("lb_<part>", "µs", "bounds", "every component of tacos_bench.bounds.lower_bounds (docs/bounds.md)"),
    Field("s_<stat>", "", "solve", "every statistic the backend declares (type, unit, meaning: docs/solvers.md, "
                                   "`python -m solvers.describe NAME`; a list as a JSON string)"),
    Field("v_<package>", "", "env", "versions of the packages that decide results"),
)

FIELD = {f.name: f for f in FIELDS}
_PREFIXES = tuple(f.name.split("<")[0] for f in FAMILIES)

_VERSIONED = ("numpy", "pandas", "networkx", "numba", "pulp", "highspy", "ortools", "hydra-core", "omegaconf")


def is_declared(name: str) -> bool:
    """Whether ``name`` is a declared field or belongs to a declared family."""
    return name in FIELD or name.startswith(_PREFIXES)


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """HEAD of the checkout this package runs from (None outside git)."""
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    commit = out.stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=5)
    return commit + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """Package versions and host, as flat ``v_*`` fields plus ``host``/``python``/``platform``."""
    from importlib.metadata import PackageNotFoundError, version

    env: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version(),
                           "platform": platform.platform(terse=True)}
    for pkg in _VERSIONED:
        try:
            env[f"v_{pkg.replace('-', '_')}"] = version(pkg)
        except PackageNotFoundError:
            env[f"v_{pkg.replace('-', '_')}"] = None
    return env


def new_record(**fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "run_id": uuid.uuid4().hex[:12],
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
    }
    rec.update(fields)
    return rec


def flatten(prefix: str, mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a": 1, "b": {"c": 2}}`` -> ``{prefix+"a": 1, prefix+"b_c": 2}``; lists become JSON strings.

    >>> flatten("s_", {"a": 1, "b": {"c": [1, 2]}})
    {'s_a': 1, 's_b_c': '[1, 2]'}
    """
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(key + "_", v))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(list(v), default=_json_default)
        else:
            out[key] = v
    return out


def _json_default(v: Any) -> Any:
    """numpy scalars/arrays inside lists: their Python value; anything else: its string."""
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()
    return str(v)


def markdown_table() -> str:
    """The record schema as a markdown table (the README's)."""
    rows = ["| field | unit | stage | meaning |", "|---|---|---|---|"]
    for f in FIELDS + FAMILIES:
        rows.append(f"| `{f.name}` | {f.unit} | {f.stage} | {f.doc} |")
    return "\n".join(rows) + "\n"
