"""The one line a user reads after a run (``run.py`` prints it; the record holds the same facts)."""

from __future__ import annotations

from typing import Any, Mapping


def summary_line(rec: Mapping[str, Any]) -> str:
    """The one line a user reads after a run: time, bound, status and what decided it."""
    if rec.get("status") == "error" or not rec.get("valid"):
        return f"{rec.get('solver')} on {rec.get('topology')}: {rec.get('status')}: {rec.get('error')}"
    lb = rec.get("lower_bound_us")
    bound = (f"lower bound {lb:.3f} µs ({rec.get('lower_bound_source')}, x{rec['collective_time_us'] / lb:.3f})"
             if lb else "no lower bound")
    why = []
    if rec.get("status") == "optimal":
        why.append("the solver proved it" if rec.get("optimality_proof") == "solver" else "it meets the lower bound")
    if rec.get("solution_source") == "warm_start":
        why.append("schedule from the warm start")
    if rec.get("stop_reason") in ("time_limit", "gap_limit"):
        why.append(f"stopped at the {rec['stop_reason'].replace('_', ' ')}")
    status = rec["status"] + (f" ({'; '.join(why)})" if why else "")
    jit = rec.get("jit_warmup_s") or 0.0
    compile_note = f"; one-off JIT compile {jit:.1f} s before it" if jit >= 0.5 else ""
    fault = ""
    if rec.get("repaired_time_us") is not None:
        scratch = rec.get("scratch_time_us")
        fault = (f"; repaired after the fault at {rec['fault_at_us']:.3f} µs in {rec['repair_synthesis_time_s']:.3f} s"
                 f" (healthy {rec['healthy_time_us']:.3f} µs" + (f", from scratch {scratch:.3f} µs" if scratch else "")
                 + ")")
    return (f"{rec['solver']} {rec['collective']} on {rec['topology']} ({rec['num_npus']} NPUs, cpn "
            f"{rec['chunks_per_npu']}): {rec['collective_time_us']:.3f} µs, {bound}, status {status}, "
            f"verified, synthesis {rec['synthesis_time_s']:.3f} s{compile_note}{fault}")
