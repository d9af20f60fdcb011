"""The one line a user reads after a run (``run.py`` prints it; the record holds the same facts).

The line has to let a user judge the time without reading the docs: against which bound it is read, what
decided the status, and, where a number looks wrong at first sight, why it is not. Two cases need words:

* an All-Reduce is usually built as a Reduce-Scatter then an All-Gather, but its lower bound is not the
  sum of those phases' bounds (docs/bounds.md), so a schedule whose phases are each at their bound still
  shows a large ratio to the All-Reduce bound: :func:`phases_note` puts the phase bounds beside it;
* a repaired run can finish before the healthy schedule it repaired: :func:`repair_note` says why.

Examples
--------
>>> rec = {"solver": "greedy", "collective": "all_reduce", "topology": "ring4", "num_npus": 4,
...        "chunks_per_npu": 1, "collective_time_us": 314.5, "lower_bound_us": 235.875,
...        "lower_bound_source": "ingress", "status": "feasible", "valid": True, "synthesis_time_s": 0.01,
...        "overlap": False, "rs_lower_bound_us": 157.25, "ag_lower_bound_us": 157.25,
...        "phases_bound_sum_us": 314.5}
>>> print(summary_line(rec))  # doctest: +NORMALIZE_WHITESPACE
greedy all_reduce on ring4 (4 NPUs, cpn 1): 314.500 µs, lower bound 235.875 µs (ingress, x1.333; the bound
to read the time against), phase bounds RS 157.250 + AG 157.250 = 314.500 µs (x1.000: each phase at its
bound; the sum is no All-Reduce bound, but no Reduce-Scatter then All-Gather after a barrier beats it),
status feasible, verified, synthesis 0.010 s
"""

from __future__ import annotations

from typing import Any, Mapping

# Ratios are printed with three decimals; within this of 1 a time is "at" a yardstick. It is the tolerance
# under which a time meets its bound (stages.OPTIMAL_REL_TOL): the drain bound, for one, comes out a few
# 1e-11 below the link-time sums it equals.
AT_REL_TOL = 1e-9


def _why(rec: Mapping[str, Any]) -> list[str]:
    """What decided the status, in words: who found the schedule and what the search proved.

    >>> _why({"status": "optimal", "optimality_proof": "lower_bound", "solution_source": "warm_start",
    ...       "stop_reason": "bound_met"})
    ['it meets the lower bound', "the schedule is the warm start's (the heuristic): no search ran"]
    >>> _why({"status": "feasible", "solution_source": "model", "stop_reason": "time_limit",
    ...       "optimality_scope": "continuous", "search_time_s": 60.2, "search_branches": 12345})
    ['found by the search', 'stopped at the time limit after 60.2 s of search, 12345 branches']
    """
    why = []
    if rec.get("status") == "optimal":
        why.append("the solver proved it" if rec.get("optimality_proof") == "solver" else "it meets the lower bound")
        if rec.get("optimality_scope") == "ten":  # never happens by construction; said if it ever did
            why.append("on the TEN's rounded link times only")
    source, stop = rec.get("solution_source"), rec.get("stop_reason")
    # an All-Reduce composed of its phases: a phase whose start met its own bound ran no search either
    no_search = stop == "bound_met" or rec.get("search_time_s") == 0
    phases = " (each phase's met its phase bound)" if no_search and stop != "bound_met" else ""
    if source == "warm_start":
        why.append("the schedule is the warm start's (the heuristic)"
                   + (f"{phases}: no search ran" if no_search else ": the search found nothing better"))
    elif source == "model":
        why.append("found by the search")
    elif source == "list_schedule":
        why.append("the exact model's own list schedule" + (" met the bound: no search ran" if stop == "bound_met"
                                                            else f"{phases}: no search ran" if no_search
                                                            else ", which the search did not improve"))
    effort = ""
    if rec.get("search_time_s") and stop != "bound_met":
        effort = f" after {rec['search_time_s']:.1f} s of search" + (
            f", {rec['search_branches']} branches" if rec.get("search_branches") else "")
    if stop in ("time_limit", "gap_limit"):
        why.append(f"stopped at the {stop.replace('_', ' ')}{effort}")
    elif stop == "proved" and effort:
        why.append("proved" + effort)
    if rec.get("optimality_scope") == "ten" and rec.get("status") != "optimal":
        why.append("the model rounds link times up to TEN steps of "
                   f"{rec.get('time_resolution_us') or 0:.4g} µs: its bound holds for those only")
    return why


def summary_line(rec: Mapping[str, Any]) -> str:
    """The one line a user reads after a run: time, bound, status and what decided it.

    Parameters
    ----------
    rec : mapping
        A run record (:mod:`tacos_bench.runner.records`).

    Returns
    -------
    str
        For a failed run the solver, topology, status and error; otherwise the verified time, the lower
        bound and the ratio to it, an All-Reduce's phase bounds (:func:`phases_note`), the status and what
        decided it, the synthesis time, and after a fault the repair with :func:`repair_note` when it beat
        the healthy schedule.
    """
    if rec.get("status") == "error" or not rec.get("valid"):
        return f"{rec.get('solver')} on {rec.get('topology')}: {rec.get('status')}: {rec.get('error')}"
    T = rec["collective_time_us"]
    lb = rec.get("lower_bound_us")
    phases = phases_note(rec)
    if lb:
        # the record's ratio is the one with float noise cleared (stages.gap_fields)
        ratio = rec.get("ratio_to_bound") or T / lb
        against = "; the bound to read the time against" if phases else ""
        bound = f"lower bound {lb:.3f} µs ({rec.get('lower_bound_source')}, x{ratio:.3f}{against})"
    else:
        bound = "no lower bound"
    if phases:
        bound += f", {phases}"
    why = _why(rec)
    status = rec["status"] + (f" ({'; '.join(why)})" if why else "")
    jit = rec.get("jit_warmup_s") or 0.0
    compile_note = f"; one-off JIT compile {jit:.1f} s before it" if jit >= 0.5 else ""
    fault = ""
    if rec.get("repaired_time_us") is not None:
        scratch = rec.get("scratch_time_us")
        scratch_s = rec.get("scratch_synthesis_time_s")
        fault = (f"; repaired after the fault at {rec['fault_at_us']:.3f} µs in {rec['repair_synthesis_time_s']:.3f} s"
                 f" (healthy {rec['healthy_time_us']:.3f} µs"
                 + (f", from scratch {scratch:.3f} µs" if scratch else "")
                 + (f" in {scratch_s:.3f} s" if scratch and scratch_s else "") + ")")
        note = rec.get("repair_note") or repair_note(rec)
        if note:
            fault += f"; {note}"
    winner = f", candidate {rec['candidate']}" if rec.get("candidate") else ""
    size = (f"cpn {rec['chunks_per_npu']}" if rec.get("chunks_per_npu") is not None
            else f"{rec.get('num_chunks')} chunks of {rec.get('chunk_bytes')} B")
    return (f"{rec['solver']} {rec['collective']} on {rec['topology']} ({rec['num_npus']} NPUs, {size}): "
            f"{T:.3f} µs, {bound}, status {status}{winner}, "
            f"verified, synthesis {rec['synthesis_time_s']:.3f} s{compile_note}{fault}")


def phases_note(rec: Mapping[str, Any]) -> str | None:
    """An All-Reduce's phase bounds and the time against their sum, or None (no phase bounds recorded).

    The sum of the Reduce-Scatter and All-Gather bounds is not a lower bound on the All-Reduce
    (docs/bounds.md), so the note never calls it one. It does bound a Reduce-Scatter followed by an
    All-Gather after a barrier (each phase takes at least its bound), which is what tells a user whether a
    time far above the All-Reduce bound is the phases' fault or the composition's.

    Parameters
    ----------
    rec : mapping
        A run record with ``collective_time_us`` and the ``rs_``/``ag_lower_bound_us`` fields.

    Returns
    -------
    str or None

    Examples
    --------
    >>> phases_note({"collective_time_us": 300.0, "rs_lower_bound_us": 100.0, "ag_lower_bound_us": 100.0,
    ...              "phases_bound_sum_us": 200.0})
    'phase bounds RS 100.000 + AG 100.000 = 200.000 µs (x1.500; the sum is no All-Reduce bound, but no Reduce-Scatter then All-Gather after a barrier beats it)'
    >>> phases_note({"collective_time_us": 150.0, "rs_lower_bound_us": 100.0, "ag_lower_bound_us": 100.0,
    ...              "phases_bound_sum_us": 200.0})
    'phase bounds RS 100.000 + AG 100.000 = 200.000 µs (x0.750: below the sum, as phases that overlap can be; the sum is no All-Reduce bound)'
    >>> phases_note({"collective_time_us": 10.0}) is None
    True
    """
    rs, ag, total = rec.get("rs_lower_bound_us"), rec.get("ag_lower_bound_us"), rec.get("phases_bound_sum_us")
    T = rec.get("collective_time_us")
    if not (rs and ag and total and T):
        return None
    ratio = T / total
    head = f"phase bounds RS {rs:.3f} + AG {ag:.3f} = {total:.3f} µs"
    if ratio < 1.0 - AT_REL_TOL:
        return f"{head} (x{ratio:.3f}: below the sum, as phases that overlap can be; the sum is no All-Reduce bound)"
    yardstick = "the sum is no All-Reduce bound, but no Reduce-Scatter then All-Gather after a barrier beats it"
    if ratio <= 1.0 + AT_REL_TOL:
        # With a barrier T = T_RS + T_AG and each term is at least its bound, so T at the sum puts both at their
        # bounds; overlapped phases end sooner than their sum, so there T at the sum says nothing per phase.
        at = ": each phase at its bound" if rec.get("overlap") is False else ""
        return f"{head} (x1.000{at}; {yardstick})"
    return f"{head} (x{ratio:.3f}; {yardstick})"


def repair_note(rec: Mapping[str, Any]) -> str | None:
    """Why a repaired run finished before the healthy schedule it repaired, or None when it did not.

    Losing links cannot make the collective easier, so a repair that beats the healthy schedule needs a
    reason. There are two. The repair keeps what ran before the fault and re-plans the whole remainder from
    the state at the fault on the surviving links (:mod:`solvers.repair`). The healthy schedule comes from a
    heuristic (the backends that can repair are the greedy's), so a fresh plan of the remainder can beat the
    healthy schedule's own remainder; with links lost only, the repaired schedule is also a schedule of the
    healthy problem, so it then proves the healthy one was not optimal (a from-scratch run on the surviving
    links often beats it too). And failed NPUs need nothing after the fault, so less data has to move.

    Parameters
    ----------
    rec : mapping
        A record of a run with a fault (``repaired_time_us``, ``healthy_time_us``; ``lower_bound_us``,
        ``scratch_time_us`` and ``fault_npus`` when known).

    Returns
    -------
    str or None

    Examples
    --------
    >>> print(repair_note({"repaired_time_us": 1695.896, "healthy_time_us": 1709.167,
    ...                    "lower_bound_us": 1321.812, "scratch_time_us": 1695.896}))  # doctest: +NORMALIZE_WHITESPACE
    faster than the healthy schedule (x0.992) because that schedule, x1.293 its lower bound, was not optimal:
    the repair re-planned the whole remainder from the state at the fault, and that plan beat the healthy
    schedule's own remainder (from scratch on the surviving links is faster too)
    >>> repair_note({"repaired_time_us": 12.0, "healthy_time_us": 10.0}) is None
    True
    """
    R, H = rec.get("repaired_time_us"), rec.get("healthy_time_us")
    if R is None or H is None or not R < H * (1 - AT_REL_TOL):
        return None
    lb, S = rec.get("lower_bound_us"), rec.get("scratch_time_us")
    scratch = " (from scratch on the surviving links is faster too)" if S and S < H * (1 - AT_REL_TOL) else ""

    def replan(verb: str) -> str:
        return (f"the repair re-planned the whole remainder from the state at the fault, and that plan {verb} the "
                f"healthy schedule's own remainder{scratch}")

    if not rec.get("fault_npus"):
        # Links lost only: the executed schedule is also a schedule of the healthy problem, and a faster one,
        # which proves the healthy schedule was not optimal (whatever its ratio to the bound suggests).
        ratio = f", x{H / lb:.3f} its lower bound," if lb else ""
        return f"faster than the healthy schedule (x{R / H:.3f}) because that schedule{ratio} was not optimal: {replan('beat')}"
    why = ["the failed NPUs need nothing after the fault, so less data has to move"]
    if not (lb and H <= lb * (1 + AT_REL_TOL)):
        why.append(replan("may have beaten"))
    return f"faster than the healthy schedule (x{R / H:.3f}) because " + "; and ".join(why)
