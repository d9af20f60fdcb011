"""Probe: repair quality after link failures, against a fresh synthesis and against the repair bound.

    python experiments/probe_repair.py [--collectives gather broadcast all_gather scatter all_to_all]
                                       [--topologies torus8x8 mesh8x8 hetero64 random32d3s1]
                                       [--links 1 2 4 8] [--seeds 0 1 2] [--no-replan] [--forward-only]
                                       [--out results/probe_repair.csv]

The failure grid of ``experiments/study_collectives.py`` (``fault.at_fraction=0.5 fault.random_links=K``,
the greedy, 1 chunk per NPU, 64 MiB) run through the library in one process (about 20 s for every
collective): for each case the healthy schedule, the repair (:func:`solvers.repair.repair`, verified with
the fault), a fresh synthesis on the surviving links and :func:`tacos_bench.bounds.repair_bound_us`. Prints,
per collective, topology and failed-link count, the mean and worst of repaired / fresh, repaired / bound
and bound / fresh (where the bound exceeds the fresh time, no repair can match a fresh synthesis), and which
candidate each repair kept. ``--no-replan`` and ``--forward-only`` (no time-reversed Gather resume) ablate
the two repair candidates.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solvers import get_solver  # noqa: E402
from solvers.repair import repair  # noqa: E402
from tacos_bench import Collective, Problem  # noqa: E402
from tacos_bench.bounds import repair_bound_us  # noqa: E402
from tacos_bench.faults import fault_from_config  # noqa: E402
from tacos_bench.topology import named_topology  # noqa: E402
from tacos_bench.verify import verify  # noqa: E402

COLLECTIVES = ["gather", "broadcast", "all_gather", "scatter", "all_to_all"]
TOPOLOGIES = ["torus8x8", "mesh8x8", "hetero64", "random32d3s1"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collectives", nargs="+", default=COLLECTIVES)
    ap.add_argument("--topologies", nargs="+", default=TOPOLOGIES)
    ap.add_argument("--links", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--mib", type=float, default=64.0)
    ap.add_argument("--no-replan", action="store_true", help="the resume candidate only")
    ap.add_argument("--forward-only", action="store_true", help="no time-reversed Gather resume")
    ap.add_argument("--out", default=str(ROOT / "results" / "probe_repair.csv"))
    return ap.parse_args(argv)


def run_case(kind: str, topo_name: str, links: int, seed: int, args) -> dict:
    greedy = get_solver("greedy")
    topo = named_topology(topo_name)
    problem = Problem(topo, Collective(kind, 1, buffer_mib=args.mib))
    healthy = greedy.solve(problem, seed=seed).schedule
    fault = fault_from_config({"at_fraction": 0.5, "random_links": links}, topo, seed).at(healthy.makespan_us)
    opts = {"seed": seed, "reversed_gather_resume": not args.forward_only}
    rep = repair(problem, healthy, fault, "greedy", opts, replan=not args.no_replan)
    ver = verify(problem, rep.schedule, fault)
    if not ver.valid:
        raise SystemExit(f"{kind} {topo_name} {links} links seed {seed}: repaired schedule rejected: {ver.message}")
    fresh = greedy.solve(Problem(fault.scratch_topology(topo), problem.collective), seed=seed).schedule.makespan_us
    bound = repair_bound_us(problem, fault, rep.state)
    T = ver.collective_time_us
    return {"collective": kind, "topology": topo_name, "links": links, "seed": seed, "healthy_us": healthy.makespan_us,
            "repaired_us": T, "fresh_us": fresh, "bound_us": bound, "plan": rep.plan,
            "resume_us": rep.candidates_us.get("resume"), "replan_us": rep.candidates_us.get("replan"),
            "repaired_over_fresh": T / fresh, "repaired_over_bound": T / bound if bound else None,
            "bound_over_fresh": bound / fresh if bound else None}


def report(rows: list[dict]) -> str:
    lines = ["| collective | topology | links | runs | repaired/fresh mean | max | repaired/bound mean | max | "
             "bound/fresh max | replan kept |", "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["collective"], r["topology"], r["links"]) for r in rows},
                  key=lambda k: (COLLECTIVES.index(k[0]) if k[0] in COLLECTIVES else 99, k[1], k[2]))
    for key in keys:
        g = [r for r in rows if (r["collective"], r["topology"], r["links"]) == key]
        rf = np.array([r["repaired_over_fresh"] for r in g])
        rb = np.array([r["repaired_over_bound"] or np.nan for r in g])
        bf = np.array([r["bound_over_fresh"] or np.nan for r in g])
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {len(g)} | {rf.mean():.3f} | {rf.max():.3f} | "
                     f"{np.nanmean(rb):.3f} | {np.nanmax(rb):.3f} | {np.nanmax(bf):.3f} | "
                     f"{sum(r['plan'] == 'replan' for r in g)} |")
    lines.append("")
    for kind in dict.fromkeys(r["collective"] for r in rows):
        rf = np.array([r["repaired_over_fresh"] for r in rows if r["collective"] == kind])
        rb = np.array([r["repaired_over_bound"] or np.nan for r in rows if r["collective"] == kind])
        lines.append(f"{kind}: repaired/fresh mean {rf.mean():.3f}, worst {rf.max():.3f}; repaired/bound mean "
                     f"{np.nanmean(rb):.3f}, worst {np.nanmax(rb):.3f} ({rf.size} runs)")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = [run_case(kind, t, k, s, args) for kind in args.collectives for t in args.topologies
            for k in args.links for s in args.seeds]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(report(rows))
    print(f"\n{len(rows)} verified repairs; rows in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
