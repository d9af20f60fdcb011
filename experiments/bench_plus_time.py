"""Benchmark: ``greedy_plus``'s synthesis time on issue 22's collectives, for comparing two source trees.

    PYTHONPATH=<tree> python experiments/bench_plus_time.py [--repeats 3] [--cases rooted peer relabel]
                                                          [--out results/bench_plus_time.csv]
    python experiments/bench_plus_time.py --compare OLD.csv NEW.csv [--doc docs/greedy.md]

Issue 22 asks ``greedy_plus`` to stay within 2x of its synthesis time when the issue was filed (274ac38) on the
collectives whose quality it raised: Broadcast and Reduce (8 chunks, 64 MiB) from every root of torus4x4,
torus8x8 (roots 0-15), hetero_mesh4x4, hetero64 (roots 0-7) and two random asymmetric graphs; Scatter and
Gather (1 chunk per NPU) from roots 0-7 of hetero64; All-Gather on the peers' topologies (1 GiB, 1/4/16/64
chunks per NPU, ``data/topologies/peer``); All-Gather and All-to-All on torus8x8, hetero64, random32d3s0.

The script imports whatever ``tacos_bench`` and ``solvers`` come first on ``sys.path`` (so
``PYTHONPATH=<a git worktree of an older commit>`` times that commit) and uses only interfaces both have: a
named topology or an edge-list file, ``Problem``, ``Collective``, ``get_solver("greedy_plus").solve``.
Each case runs once to warm up (numba), then ``--repeats`` times; the row keeps the minimum wall time of
``solve`` (``SolveResult.solve_time_s``, the solver's own clock) and the schedule's time (µs). Run one tree
at a time on an otherwise idle machine. ``--compare`` joins two CSVs and writes the per-case ratio.
"""

from __future__ import annotations

import argparse
import csv
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK_START, MARK_END = "<!-- bench:plus-time:start -->", "<!-- bench:plus-time:end -->"


def _imports():
    from solvers import get_solver
    from tacos_bench import Collective, Problem
    try:
        from tacos_bench.topology import named_topology
        from tacos_bench.topology.io import load_topology
    except ImportError:       # before the topology package (274ac38)
        from tacos_bench.topologies import named_topology
        from tacos_bench.io import load_topology
    return get_solver, Collective, Problem, named_topology, load_topology


def cases(groups):
    """``(group, topology name, collective, chunks per NPU or chunks, MiB, roots)`` rows."""
    out = []
    if "rooted" in groups:
        for kind in ("broadcast", "reduce"):
            for topo, roots in (("torus4x4", range(16)), ("torus8x8", range(16)), ("hetero_mesh4x4", range(16)),
                                ("hetero64", range(8)), ("random16d3s0", range(8)), ("random32d3s1", range(8))):
                out += [("rooted", topo, kind, 8, 64, r) for r in roots]
        for kind in ("scatter", "gather"):
            out += [("rooted", "hetero64", kind, 1, 64, r) for r in range(8)]
    if "peer" in groups:
        for topo in ("mi250_forestcoll", "dgx1_sccl", "ndv2x2_teccl"):
            out += [("peer", topo, "all_gather", c, 1024, None) for c in (1, 4, 16, 64)]
    if "relabel" in groups:
        for topo in ("torus8x8", "hetero64", "random32d3s0"):
            out += [("relabel", topo, kind, 1, 64, None) for kind in ("all_gather", "all_to_all")]
    return out


def _problem(case, api):
    _, Collective, Problem, named_topology, load_topology = api
    group, name, kind, chunks, mib, root = case
    if group == "peer":
        topo = load_topology(ROOT / "data" / "topologies" / "peer" / f"{name}.txt")
    else:
        topo = named_topology(name)
    coll = Collective(kind, chunks, float(mib), root=root) if root is not None else Collective(kind, chunks, float(mib))
    return Problem(topo, coll)


def measure(groups, repeats: int):
    api = _imports()
    solver = api[0]("greedy_plus")
    rows = []
    for case in cases(groups):
        problem = _problem(case, api)
        res = solver.solve(problem)                      # warm-up: numba kernels, caches
        best = float("inf")
        for _ in range(repeats):
            res = solver.solve(problem)
            best = min(best, float(res.solve_time_s))
        group, name, kind, chunks, mib, root = case
        rows.append({"group": group, "topology": name, "collective": kind, "chunks": chunks, "mib": mib,
                     "root": "" if root is None else root, "time_us": f"{res.schedule.makespan_us:.6f}",
                     "synthesis_s": f"{best:.6f}", "status": res.status})
        print(f"{group:8s} {name:18s} {kind:10s} c={chunks:<3d} root={rows[-1]['root']!s:3s} "
              f"{best * 1e3:9.2f} ms  {res.schedule.makespan_us:12.3f} us", flush=True)
    return rows


def _key(r):
    return (r["group"], r["topology"], r["collective"], str(r["chunks"]), str(r["root"]))


def compare(old_path: Path, new_path: Path) -> list[str]:
    """The markdown table: per (topology, collective, chunks) the old and new time summed over roots."""
    old = {_key(r): r for r in csv.DictReader(old_path.open())}
    new = {_key(r): r for r in csv.DictReader(new_path.open())}
    groups: dict[tuple, list] = {}
    for k, r in new.items():
        if k in old:
            groups.setdefault(k[:4], []).append((old[k], r))
    lines = ["| case | runs | synthesis s, old (sum) | new (sum) | new / old | worst run new / old | "
             "schedule new / old (mean) |", "|---|---|---|---|---|---|---|"]
    for (g, topo, kind, c), pairs in groups.items():
        so = sum(float(o["synthesis_s"]) for o, _ in pairs)
        sn = sum(float(n["synthesis_s"]) for _, n in pairs)
        worst = max(float(n["synthesis_s"]) / float(o["synthesis_s"]) for o, n in pairs)
        q = sum(float(n["time_us"]) / float(o["time_us"]) for o, n in pairs) / len(pairs)
        lines.append(f"| {topo} {kind} {c} | {len(pairs)} | {so:.3f} | {sn:.3f} | {sn / so:.2f} | {worst:.2f} | "
                     f"{q:.4f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["rooted", "peer", "relabel"], choices=["rooted", "peer", "relabel"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench_plus_time.csv")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    ap.add_argument("--doc", type=Path, help="replace the plus-time section of this markdown file")
    a = ap.parse_args(argv)
    if a.compare:
        lines = compare(*a.compare)
        text = "\n".join(lines)
        print(text)
        if a.doc:
            doc = a.doc.read_text()
            i, j = doc.index(MARK_START), doc.index(MARK_END)
            cmd = (f"`python experiments/bench_plus_time.py --compare {a.compare[0]} {a.compare[1]}` "
                   f"(Python {platform.python_version()}, 2 cores, {time.strftime('%Y-%m-%d')})")
            a.doc.write_text(doc[:i + len(MARK_START)] + "\n" + cmd + "\n\n" + text + "\n" + doc[j:])
        return 0
    rows = measure(a.cases, a.repeats)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
