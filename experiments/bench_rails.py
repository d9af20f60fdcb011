"""greedy_plus on rail-optimized clusters: before issue 36 (neither the list schedule nor the rail decomposition),
with the list schedule only, and as it is (both; docs/rails.md).

    PYTHONPATH=$PWD flock /tmp/bench.lock python experiments/bench_rails.py > /tmp/rails.md
    PYTHONPATH=$PWD flock /tmp/bench.lock python experiments/bench_rails.py --clusters dgx_h100x128 \
        --kinds all_gather --cpns 1

Every schedule is verified; ``bound`` is the project's lower bound (All-Reduce: the sum of its Reduce-Scatter and
All-Gather bounds, the phase-bound sum); the time is greedy_plus's synthesis (warm kernels), its candidates
included. ``rail<K>x<G> <nvlink>/<nic>`` is :func:`tacos_bench.topology.fabrics.rail_cluster` with those GiB/s.
"""

from __future__ import annotations

import argparse
import sys

from _study import timed_verified

CLUSTERS = ("dgx_h100x4", "dgx_a100x4", "dgx_h100x4_2to1", "dgx_h100x8", "rail3x4 400/50", "rail5x8 300/25",
            "dgx_h100x2", "dgx_h100x3", "dgx_a100x6", "rail6x4 150/100", "dgx_h100x16")
# the portfolio before issue 36, with its list-schedule candidate only, and as it is (the group trees, which came
# with issue 35, only in the last)
VARIANTS = (("before", {"list_candidate": False, "rails_candidate": False, "group_tree_candidate": False}),
            ("list", {"rails_candidate": False, "group_tree_candidate": False}), ("now", {}))
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
CPNS = (1, 2, 4)


def topology(name: str):
    from tacos_bench.topology.fabrics import rail_cluster
    from tacos_bench.topology.named import named_topology

    if name.startswith("rail"):
        shape, speeds = name[4:].split(" ")
        k, g = (int(x) for x in shape.split("x"))
        nv, nic = (float(x) for x in speeds.split("/"))
        return rail_cluster(k, g, nvlink_GiBps=nv, nic_GiBps=nic, name=name)
    return named_topology(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clusters", nargs="*", default=CLUSTERS)
    ap.add_argument("--buffer-mib", type=float, default=1024.0)
    ap.add_argument("--kinds", nargs="*", default=KINDS)
    ap.add_argument("--cpns", nargs="*", type=int, default=CPNS)
    a = ap.parse_args(argv)
    from solvers import get_solver
    from tacos_bench import Collective, Problem
    from tacos_bench.bounds import lower_bound_us

    plus = get_solver("greedy_plus")
    print("| cluster | collective | chunks/NPU | bound µs | before / bound | list only / bound | greedy_plus / bound | "
          "winner | rule | time s | time list only s | time before s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in a.clusters:
        t = topology(name)
        for kind in a.kinds:
            for cpn in a.cpns:
                p = Problem(t, Collective(kind, cpn, a.buffer_mib))
                if kind == "all_reduce":
                    bound = sum(lower_bound_us(Problem(t, Collective(k, cpn, a.buffer_mib)))
                                for k in ("reduce_scatter", "all_gather"))
                else:
                    bound = lower_bound_us(p)
                plus.warmup(p, None)
                out = {}
                for label, opts in VARIANTS:
                    r, dt, v = timed_verified(plus, p, opts)
                    if not v.valid:
                        print(f"{name} {kind} {cpn} ({label}): invalid schedule: {v.message}", file=sys.stderr)
                        return 1
                    out[label] = (v.collective_time_us / bound, dt, r.candidate, r.stats.get("list_rules", ""))
                (r0, dt0, _, _), (r1, dt1, _, _), (r2, dt2, cand, rule) = out["before"], out["list"], out["now"]
                print(f"| `{name}` | {kind} | {cpn} | {bound:,.1f} | {r0:.4f} | {r1:.4f} | {r2:.4f} | {cand} | "
                      f"{rule if cand == 'list' else ''} | {dt2:.2f} | {dt1:.2f} | {dt0:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
