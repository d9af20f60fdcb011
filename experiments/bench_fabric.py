"""Synthesis speed of the fabric greedy on rail-optimized DGX-H100-like clusters (docs/fabrics.md).

    python experiments/bench_fabric.py                       # dgx_h100x4 .. dgx_h100x128 (1,024 GPUs)
    python experiments/bench_fabric.py --sizes dgx_h100x4 --solver greedy_plus -o /tmp/b.csv

Times ``solve()`` alone (the kernel is compiled before the clock starts), then verifies the schedule and
computes the fabric bound; one flat row per run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from solvers import get_solver  # noqa: E402
from tacos_bench import Collective, Problem  # noqa: E402
from tacos_bench.bounds import lower_bounds  # noqa: E402
from tacos_bench.topology import named_topology  # noqa: E402
from tacos_bench.verify import check  # noqa: E402

SIZES = ("dgx_h100x4", "dgx_h100x16", "dgx_h100x32", "dgx_h100x128")


def run(name: str, solver: str, kind: str, cpn: int, mib: float, seed: int) -> dict:
    topo = named_topology(name)
    problem = Problem(topo, Collective(kind, cpn, mib))
    s = get_solver(solver)
    jit = s.warmup(problem, s.options(seed=seed))
    t0 = time.perf_counter()
    res = s.solve(problem, seed=seed)
    synth = time.perf_counter() - t0
    t1 = time.perf_counter()
    ver = check(problem, res.schedule)
    verify_s = time.perf_counter() - t1
    bound = lower_bounds(problem)
    return {"topology": name, "npus": topo.num_npus, "switches": topo.num_switches, "links": topo.num_links,
            "collective": kind, "chunks_per_npu": cpn, "buffer_mib": mib, "solver": solver, "seed": seed,
            "synthesis_s": round(synth, 3), "jit_s": round(jit, 3), "verify_s": round(verify_s, 3),
            "verified": ver.valid, "time_us": ver.collective_time_us, "bound_us": bound["best_us"],
            "bound_source": bound["best_source"],
            "ratio": ver.collective_time_us / bound["best_us"] if ver.valid else None,
            "transfers": len(res.schedule), "chosen": res.candidate}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES))
    ap.add_argument("--solver", default="greedy_plus")
    ap.add_argument("--collective", default="all_gather")
    ap.add_argument("--chunks-per-npu", type=int, default=1)
    ap.add_argument("--buffer-mib", type=float, default=1024.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", default=None, help="CSV of the rows (default: print only)")
    a = ap.parse_args(argv)
    rows = []
    for name in a.sizes:
        rows.append(run(name, a.solver, a.collective, a.chunks_per_npu, a.buffer_mib, a.seed))
        print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    print(df[["topology", "npus", "synthesis_s", "verify_s", "time_us", "bound_us", "ratio", "verified"]]
          .to_string(index=False))
    if a.output:
        df.to_csv(a.output, index=False)
    return 0 if df["verified"].all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
