"""Probe: the multicommodity-flow bound of unicast collectives against the project's bounds and greedy_plus.

    python experiments/probe_flow_bound.py [--cases random32d3s0:1 random64d3s0:4 hetero512:1 ...]
                                           [--collective all_to_all] [--mib 1024] [--greedy-plus]
                                           [--solvers greedy greedy_plus flow cpsat] [--time-limit 60]
                                           [--out results/probe_flow_bound.csv]

Per case (``topology:chunks_per_pair``): :func:`tacos_bench.bounds.flow.lb_flow_us` (its source, value and time,
after one warm call so that numba's cache and highspy's import are not counted), the bandwidth-only fluid
bound (``latency=False``), ``lower_bounds(p)["best_us"]`` and, with ``--greedy-plus``, greedy_plus's verified
makespan (hetero512: ~30-70 s); ``--solvers`` runs each named backend instead (``flow``: greedy_plus with only the
flow-routed candidate, ``solver.candidates=[flow]``; ``cpsat``: cold, ``--time-limit`` seconds, its status too),
each verified: ``<solver>_us`` and ``<solver>_over_flow`` (the flow candidate's: ``flow_routed_*``). docs/flow_bound.md has the tables.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tacos_bench import Collective, Problem  # noqa: E402
from tacos_bench.bounds import lower_bounds  # noqa: E402
from tacos_bench.bounds.flow import lb_flow_us  # noqa: E402
from tacos_bench.topology import named_topology  # noqa: E402

CASES = ["random16d3s0:1", "random32d3s0:1", "random32d3s0:4", "random64d3s0:1", "random64d3s0:4",
         "leafspine4x8_2to1:1", "hetero512:1"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=CASES, help="topology:chunks_per_npu")
    ap.add_argument("--collective", default="all_to_all")
    ap.add_argument("--mib", type=float, default=1024.0)
    ap.add_argument("--greedy-plus", action="store_true", help="also run greedy_plus once per case")
    ap.add_argument("--solvers", nargs="+", default=None,
                    help="backends to run per case: greedy, greedy_plus, flow (the flow candidate alone), cpsat, ...")
    ap.add_argument("--time-limit", type=float, default=60.0, help="cpsat's time limit (s)")
    ap.add_argument("--out", type=Path, default=None)
    return ap.parse_args(argv)


# what --solvers runs: a backend and its options
RUNS = {"flow": ("greedy_plus", {"candidates": ["flow"]}), "cpsat": ("cpsat", {"warm_start": False})}


def run_solvers(p: Problem, names, time_limit: float, flow_us: float) -> dict:
    """Each backend of ``names`` on ``p``, verified: its time, seconds, time / flow bound (and cpsat's status)."""
    from tacos_bench.runner.stages import solve_and_verify

    row = {}
    for arg in names:
        solver, opts = RUNS.get(arg, (arg, {}))
        name = "flow_routed" if arg == "flow" else arg   # flow_us is the bound's column
        if solver == "cpsat":
            opts = {**opts, "time_limit_s": time_limit}
        try:
            rec, _ = solve_and_verify(p, solver, opts, bounds=False)
            ok = rec.get("valid")
            row[f"{name}_us"] = rec.get("collective_time_us") if ok else None
            row[f"{name}_s"] = round(rec.get("synthesis_time_s") or 0.0, 2)
            if solver == "cpsat":
                row["cpsat_status"] = rec.get("status") if ok else (rec.get("error") or rec.get("status"))
        except Exception as e:   # noqa: BLE001 - a refusal is a row, the probe goes on
            row[f"{name}_us"] = None
            row[f"{name}_s"] = None
            if solver == "cpsat":
                row["cpsat_status"] = f"{type(e).__name__}: {e}"[:120]
        t = row[f"{name}_us"]
        row[f"{name}_over_flow"] = round(t / flow_us, 4) if t and flow_us else None
    return row


def probe(name: str, cpn: int, kind: str, mib: float, greedy_plus: bool, solvers=None, time_limit: float = 60.0
          ) -> dict:
    p = Problem(named_topology(name), Collective(kind, cpn, mib))
    t = time.perf_counter()
    flow = lb_flow_us(p)
    row = {"topology": name, "chunks_per_npu": cpn, "flow_us": flow["flow_us"], "flow_source": flow["flow_source"],
           "flow_s": round(time.perf_counter() - t, 3), "fluid_us": lb_flow_us(p, latency=False)["flow_us"]}
    t = time.perf_counter()
    lb = lower_bounds(p)
    row.update(best_us=lb["best_us"], best_source=lb["best_source"], bounds_s=round(time.perf_counter() - t, 3))
    if greedy_plus:
        from solvers import get_solver
        from tacos_bench.verify import check

        t = time.perf_counter()
        res = get_solver("greedy_plus").solve(p)
        v = check(p, res.schedule)
        row.update(greedy_plus_us=v.collective_time_us if v.valid else None,
                   greedy_plus_s=round(time.perf_counter() - t, 1))
        row["greedy_plus_over_flow"] = round(row["greedy_plus_us"] / row["flow_us"], 4)
    if solvers:
        row.update(run_solvers(p, solvers, time_limit, row["flow_us"]))
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    lb_flow_us(Problem(named_topology("ring4"), Collective(args.collective, 1, 1.0)))   # warm: cache, imports
    rows = []
    for case in args.cases:
        name, _, cpn = case.partition(":")
        rows.append(probe(name, int(cpn or 1), args.collective, args.mib, args.greedy_plus, args.solvers,
                          args.time_limit))
        print(", ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
