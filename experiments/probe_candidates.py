"""What one of greedy_plus's candidates adds and costs: greedy_plus as it is against greedy_plus with the
candidate switched off, on every case of a grid, each schedule verified.

    PYTHONPATH=$PWD flock /tmp/bench.lock python experiments/probe_candidates.py --off list_candidate rails_candidate
    python experiments/probe_candidates.py --off rail_slot_candidate --grid fabrics

A row per (topology, collective, chunks per NPU, size): both makespans, both synthesis times, the winner of the
full portfolio; the summary counts where the candidate makes greedy_plus faster (by more than 1e-9 relative),
where it changes nothing, where it would make it slower (never: the portfolio keeps the fastest), and what it
costs in synthesis time (the median and the largest ratio). The grids take the topologies of the studies:
``collectives`` (docs/studies/collectives.md, point-to-point), ``exact`` (the exact-vs-greedy study's small
scale), ``fabrics`` (docs/studies/fabrics.md), ``rails`` (the rail clusters of docs/rails.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _study import timed_verified

GRIDS = {
    "collectives": (["mesh4x4", "torus4x4", "mesh8x8", "torus8x8", "torus4x4x4", "hetero64", "random16d3s0",
                     "random32d3s1"],
                    ["all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "gather", "scatter",
                     "all_to_all"], [1, 4], [1024.0]),
    "exact": (["hetero2x2x4", "hetero_mesh4x4", "random16d3s0", "mesh3x4", "ring5", "torus4x4"],
              ["all_gather", "reduce_scatter", "all_reduce", "broadcast", "all_to_all"], [1, 2], [1.0, 1024.0]),
    "fabrics": (["switched8", "switched8_nvls", "dgx_h100x4", "dgx_h100x4_2to1", "leafspine4x8",
                 "leafspine4x8_2to1"],
                ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"], [1, 4], [1.0, 1024.0]),
    "rails": (["dgx_h100x2", "dgx_h100x3", "dgx_h100x4", "dgx_a100x4", "dgx_h100x8", "dgx_a100x6"],
              ["all_gather", "reduce_scatter", "all_reduce"], [1, 2, 4], [64.0, 1024.0]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--off", nargs="+", required=True, help="the switch options to turn off (e.g. list_candidate)")
    ap.add_argument("--grid", nargs="+", default=["collectives", "exact", "fabrics"], choices=sorted(GRIDS))
    ap.add_argument("--rows", action="store_true", help="print every case, not only the summary")
    a = ap.parse_args(argv)
    from solvers import get_solver
    from tacos_bench import Collective, Problem
    from tacos_bench.topology.named import named_topology

    plus = get_solver("greedy_plus")
    off = {k: False for k in a.off}
    print(f"greedy_plus against greedy_plus with {', '.join(f'{k}=false' for k in a.off)}\n")
    print("| grid | cases | faster with it | the same | slower with it | median time ratio | largest time ratio | "
          "won by it |")
    print("|---|---|---|---|---|---|---|---|")
    for grid in a.grid:
        topos, kinds, cpns, sizes = GRIDS[grid]
        faster = same = slower = won = 0
        ratios, rows = [], []
        for name in topos:
            t = named_topology(name)
            for kind in kinds:
                for cpn in cpns:
                    for mib in sizes:
                        p = Problem(t, Collective(kind, cpn, mib, root=0))
                        plus.warmup(p, None)
                        res = []
                        for opts in ({}, off):
                            r, dt, v = timed_verified(plus, p, opts)
                            if not v.valid:
                                print(f"{name} {kind} {cpn} {mib}: invalid schedule: {v.message}", file=sys.stderr)
                                return 1
                            res.append((v.collective_time_us, dt, r.candidate))
                        (m1, t1, c1), (m0, t0_, _) = res
                        if m1 < m0 * (1 - 1e-9):
                            faster += 1
                        elif m1 > m0 * (1 + 1e-9):
                            slower += 1
                        else:
                            same += 1
                        won += any(c1 == k.replace("_candidate", "").replace("rail_slot", "rail_slots")
                                   for k in a.off)
                        ratios.append(t1 / max(t0_, 1e-6))
                        rows.append(f"| {name} | {kind} | {cpn} | {mib:g} | {m1:.3f} | {m0:.3f} | {m0 / m1:.4f} | "
                                    f"{t1:.3f} | {t0_:.3f} | {c1} |")
        print(f"| {grid} | {len(ratios)} | {faster} | {same} | {slower} | {statistics.median(ratios):.2f} | "
              f"{max(ratios):.2f} | {won} |", flush=True)
        if a.rows:
            print("\n| topology | collective | cpn | MiB | µs | µs without | without / with | s | s without | "
                  "winner |\n|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
