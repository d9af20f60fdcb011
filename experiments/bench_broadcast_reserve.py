"""Benchmark: what ``greedy_plus``'s Broadcast reservation candidate (``broadcast_reserve_tries``) adds, per root.

    python experiments/bench_broadcast_reserve.py [--seeds 0] [--out results/bench_broadcast_reserve.csv]
                                                  [--doc docs/greedy.md]

For each problem of the table in docs/greedy.md (*broadcast_reserve_tries*; Broadcast, 64 MiB) and each of
its roots, ``greedy_plus`` runs with ``broadcast_reserve_tries=0`` and with its default; every schedule is
verified, and its ratio is the collective time over ``lower_bounds(problem)["best_us"]``. The table has, per
problem: the roots at the bound (within 1e-9) without → with, the min / median / max ratio without → with, and
the summed synthesis time of the roots (``SolveResult.solve_time_s``, warm: one untimed run first). With
``--seeds 0 1 2`` each seed is a row (claims over seeds). ``--doc`` replaces the section between
``<!-- bench:broadcast-reserve:start -->`` and ``<!-- bench:broadcast-reserve:end -->``.
"""

from __future__ import annotations

import argparse
import csv
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solvers import get_solver  # noqa: E402
from tacos_bench import Collective, Problem  # noqa: E402
from tacos_bench.bounds import lower_bounds  # noqa: E402
from tacos_bench.topology import named_topology  # noqa: E402
from tacos_bench.verify import verify  # noqa: E402

# (topology, chunks, roots)
PROBLEMS = [("hetero_mesh4x4", 8, range(16)), ("hetero_mesh4x4", 16, range(16)), ("hetero_mesh4x4", 32, range(16)),
            ("hetero2x2x4", 8, range(16)), ("three_tier2x2x2", 8, range(8)), ("random16d3s0", 8, range(16)),
            ("hetero64", 8, range(0, 64, 8)), ("torus8x8", 8, range(64)), ("hetero512", 8, (0, 100))]
MARK_START, MARK_END = "<!-- bench:broadcast-reserve:start -->", "<!-- bench:broadcast-reserve:end -->"
REL = 1e-9


def measure(problems, seeds):
    gp = get_solver("greedy_plus")
    rows = []
    for topo_name, chunks, roots in problems:
        topo = named_topology(topo_name)
        for seed in seeds:
            for root in roots:
                p = Problem(topo, Collective("broadcast", chunks, 64.0, root=root))
                bound = float(lower_bounds(p)["best_us"])
                row = {"topology": topo_name, "chunks": chunks, "seed": seed, "root": root, "bound_us": bound}
                for tag, opts in (("off", {"broadcast_reserve_tries": 0}), ("on", {})):
                    gp.solve(p, seed=seed, **opts)                       # warm: kernels, caches
                    res = gp.solve(p, seed=seed, **opts)
                    t = verify(p, res.schedule).collective_time_us
                    row[f"{tag}_us"], row[f"{tag}_s"] = t, float(res.solve_time_s)
                rows.append(row)
            print(f"{topo_name} {chunks} chunks seed {seed}: done", flush=True)
    return rows


def table(rows) -> list[str]:
    lines = ["| problem | seed | roots | at the bound | ratio min/median/max | time of the roots (s) |",
             "|---|---|---|---|---|---|"]
    keys = sorted({(r["topology"], r["chunks"], r["seed"]) for r in rows},
                  key=lambda k: ([p[:2] for p in PROBLEMS].index(k[:2]) if k[:2] in [p[:2] for p in PROBLEMS]
                                 else 99, k[2]))
    for key in keys:
        sel = [r for r in rows if (r["topology"], r["chunks"], r["seed"]) == key]
        cells = []
        for tag in ("off", "on"):
            q = np.array([r[f"{tag}_us"] / r["bound_us"] for r in sel])
            cells.append((int((q <= 1 + REL).sum()), f"{q.min():.4f}/{np.median(q):.4f}/{q.max():.4f}",
                          sum(r[f"{tag}_s"] for r in sel)))
        (a0, r0, s0), (a1, r1, s1) = cells
        lines.append(f"| `{key[0]}` Broadcast, {key[1]} chunks | {key[2]} | {len(sel)} | {a0} → **{a1}** | "
                     f"{r0} → **{r1}** | {s0:.2f} → {s1:.2f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--topologies", nargs="+", help="only these topologies of the table")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench_broadcast_reserve.csv")
    ap.add_argument("--doc", type=Path)
    a = ap.parse_args(argv)
    problems = [p for p in PROBLEMS if not a.topologies or p[0] in a.topologies]
    rows = measure(problems, a.seeds)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = table(rows)
    print("\n".join(lines))
    if a.doc:
        doc = a.doc.read_text()
        i, j = doc.index(MARK_START), doc.index(MARK_END)
        cmd = (f"`python experiments/bench_broadcast_reserve.py --seeds {' '.join(map(str, a.seeds))}` "
               f"(Python {platform.python_version()}, 2 cores, {time.strftime('%Y-%m-%d')}; `broadcast_reserve_tries=0`"
               " → default)")
        a.doc.write_text(doc[:i + len(MARK_START)] + "\n" + cmd + "\n\n" + "\n".join(lines) + "\n" + doc[j:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
