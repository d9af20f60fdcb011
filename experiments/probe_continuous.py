"""Probe the continuous-time CP-SAT model (solvers/exact/continuous.py) on the targets of issue 20, cold.

Cold: no schedule from another backend; the model starts from its own list schedule. Per case one
table row: the model's status, objective and bound, build and search seconds, the project's lower bound
(``tacos_bench.bounds``) and ``greedy_plus``'s verified time for comparison (it is not handed to the model).
Every schedule is checked with ``tacos_bench.verify.check``.

Usage::

    python experiments/probe_continuous.py                 # every case, 60 s each (most take far less)
    python experiments/probe_continuous.py --search        # run CP-SAT even when the cold start meets the bound
    python experiments/probe_continuous.py --cases two1,two4 --time-limit 20 --cuts bound,linkload
    python experiments/probe_continuous.py --restarts 0    # only the deterministic cold start (the model works harder)
    python experiments/probe_continuous.py --ablation --time-limit 20   # what each cut does, where CP-SAT searches

Cases: ``two1``/``two4`` (two servers of 4 GPUs, 150 GiB/s 1 µs inside, one 25 GiB/s 5 µs NIC link per GPU
both ways to the same-index GPU of the other server; All-Gather 1 GiB, 1 / 4 chunks per NPU), ``<topology>-<k>``
for ``hetero2x2x4``, ``hetero_mesh4x4``, ``random16d3s0`` (All-Gather 1 MiB, k chunks per NPU) and ``a2a``
(``random16d3s0`` All-to-All 1 GiB).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solvers import get_solver
from solvers.exact.continuous import CUTS, solve_continuous
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bounds
from tacos_bench.generators import hetero_cluster
from tacos_bench.topologies import named_topology
from tacos_bench.verify import check


def two_servers():
    """Two servers of 4 GPUs; a 2 x 1 server torus gives each GPU one rail to the other server, both ways."""
    return hetero_cluster(2, 1, 4, intra_bw=150.0, intra_lat=1.0, inter_bw=25.0, inter_lat=5.0,
                          name="two_servers4")


def cases() -> dict[str, Problem]:
    out = {"two1": Problem(two_servers(), Collective("all_gather", 1, 1024)),
           "two4": Problem(two_servers(), Collective("all_gather", 4, 1024))}
    for name in ("hetero2x2x4", "hetero_mesh4x4", "random16d3s0"):
        for k in (1, 2):
            out[f"{name}-{k}"] = Problem(named_topology(name), Collective("all_gather", k, 1))
    out["a2a"] = Problem(named_topology("random16d3s0"), Collective("all_to_all", 1, 1024))
    return out


# Instances where CP-SAT has to search (the cold start misses the optimum or the bound is below it), for
# measuring what each cut does: (name, topology, collective, chunks per NPU, MiB)
ABLATION_CASES = (
    ("hetero2x2x4-2", "hetero2x2x4", "all_gather", 2, 1.0),
    ("torus3x3-2", "torus3x3", "all_gather", 2, 1.0),
    ("rnd8-bcast4", "random8d2s5", "broadcast", 4, 1.0),
    ("rnd10-gather2", "random10d2s1", "gather", 2, 1.0),
    ("rnd10-a2a", "random10d2s1", "all_to_all", 1, 1.0),
    ("rnd8-a2a2", "random8d2s2", "all_to_all", 2, 1.0),
    ("rnd12-a2a", "random12d3s1", "all_to_all", 1, 1024.0),
)
ABLATION_CONFIGS = (
    ("none", []),
    ("bound", ["bound"]),
    ("bound+drain", ["bound", "drain"]),
    ("default", None),
    ("default-linkload", ["bound", "drain", "symmetry", "tail"]),
    ("default-symmetry", ["bound", "drain", "linkload", "tail"]),
    ("default-tail", ["bound", "drain", "linkload", "symmetry"]),
    ("default+ingress", ["bound", "drain", "linkload", "symmetry", "tail", "ingress"]),
)


def ablation(args) -> int:
    """Each cut configuration on :data:`ABLATION_CASES`, CP-SAT always searching (``--search``)."""
    wanted = [c for c in (args.cases or "").split(",") if c]
    configs = [c for c in ABLATION_CONFIGS if not args.configs or c[0] in args.configs.split(",")]
    head = ("case", "cuts", "status", "proved", "objective_us", "bound_us", "gap_%", "time_to_proof_s",
            "time_to_final_s", "search_s", "intervals")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for name, topo, kind, k, mib in ABLATION_CASES:
        if wanted and name not in wanted:
            continue
        p = Problem(named_topology(topo), Collective(kind, k, mib))
        for label, cuts in configs:
            o = solve_continuous(p, time_limit_s=args.time_limit, num_workers=args.workers, seed=args.seed,
                                 cuts=cuts, cold_restarts=args.restarts, skip_search_at_bound=False)
            gap = None
            if o.objective_us is not None and o.best_bound_us:
                gap = 100.0 * (o.objective_us / o.best_bound_us - 1.0)
            final = next((t for t, inc, _ in o.trace if inc is not None and o.objective_us is not None
                          and inc <= o.objective_us * (1 + 1e-9)), None)
            proof = o.trace[-1][0] if o.proved_optimal else None
            row = (name, label, o.native_status, o.proved_optimal, _f(o.objective_us), _f(o.best_bound_us), _f(gap, 2),
                   _f(proof, 2), _f(final, 2), _f(o.search_time_s, 2), o.stats.get("intervals"))
            print(" | ".join(str(x) for x in row), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT seconds per case (default 60)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cuts", default=None, help=f"comma-separated cuts from {','.join(CUTS)}; 'none' for none")
    ap.add_argument("--restarts", type=int, default=None, help="list-schedule restarts of the cold start")
    ap.add_argument("--search", action="store_true", help="search even when the cold start meets the bound")
    ap.add_argument("--no-greedy", action="store_true", help="skip the greedy_plus column")
    ap.add_argument("--ablation", action="store_true", help="cut ablation on instances where CP-SAT must search")
    ap.add_argument("--configs", default="", help="ablation: comma-separated configuration labels (default: all)")
    args = ap.parse_args(argv)
    if args.ablation:
        return ablation(args)
    all_cases = cases()
    names = [c for c in args.cases.split(",") if c] or list(all_cases)
    unknown = [c for c in names if c not in all_cases]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(all_cases)}")
    cuts = None if args.cuts is None else ([] if args.cuts == "none" else args.cuts.split(","))
    head = ("case", "N", "status", "proved", "objective_us", "bound_us", "gap_%", "project_lb_us", "greedy_plus_us",
            "build_s", "search_s", "unit_us", "exact", "intervals", "source", "valid")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for name in names:
        p = all_cases[name]
        lb = lower_bounds(p)["best_us"]
        gp = None
        if not args.no_greedy:
            gp = get_solver("greedy_plus").solve(p, seed=args.seed).schedule.makespan_us
        t0 = time.perf_counter()
        o = solve_continuous(p, time_limit_s=args.time_limit, num_workers=args.workers, seed=args.seed,
                             cuts=cuts, cold_restarts=args.restarts, skip_search_at_bound=not args.search)
        wall = time.perf_counter() - t0
        valid = o.schedule is not None and check(p, o.schedule).valid
        gap = None
        if o.objective_us is not None and o.best_bound_us:
            gap = 100.0 * (o.objective_us / o.best_bound_us - 1.0)
        row = (name, p.num_npus, o.native_status, o.proved_optimal, _f(o.objective_us), _f(o.best_bound_us),
               _f(gap, 2), _f(lb), _f(gp), _f(o.build_time_s, 2), _f(o.search_time_s, 2), f"{o.time_unit_us:.6g}",
               o.exact_time, o.stats.get("intervals"), o.solution_source, valid)
        print(" | ".join(str(x) for x in row), flush=True)
        if wall > args.time_limit + 30:
            print(f"  (case {name} took {wall:.1f} s in all)", flush=True)
    return 0


def _f(x, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


if __name__ == "__main__":
    raise SystemExit(main())
