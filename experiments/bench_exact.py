"""Benchmark: greedy vs MILP (HiGHS, CBC) vs CP-SAT on the discretized time-expanded network.

    python experiments/bench_exact.py --suite targets [--time-limit 120] [--doc docs/exact.md]
    python experiments/bench_exact.py --suite sweep [--time-limit 60] [--families ring mesh torus hetero]
    python experiments/bench_exact.py --suite warm [--time-limit 120]

``--suite targets``: All-Gather, 1 chunk per NPU, on the 16-NPU targets (4x4 mesh, 4x4 torus, 16-node
hypercube, 4x4 heterogeneous mesh with 50/100 GiB/s per dimension) and the 36-NPU targets (6x6 mesh and
torus), every exact backend and formulation, each with the warm start (the default) and cold
(``warm_start=False``: the model alone has to find and prove the optimum).

``--suite sweep``: scalability. For each family (bidirectional ring, 2-D mesh, 2-D torus, heterogeneous
2-D mesh) and growing N: greedy, MILP/HiGHS, MILP/CBC and CP-SAT, warm and cold. A (family, solver, mode)
stops growing after its first run that does not prove optimality within the time limit. Writes a PNG.

``--suite warm``: how to use the warm start. Default = model with horizon ``U-1`` (``U`` = warm plan's
steps) and no hint (infeasible -> warm plan optimal); ``hint`` = horizon ``U`` with the warm plan as
MIP start / CP-SAT hint (``horizon_steps=U``).

Every schedule is checked by ``tacos_bench.verify``. Each suite writes ``<out>_<suite>.csv``,
``.parquet`` and ``.md``; with ``--doc`` it also replaces the section between
``<!-- bench:exact-<suite>:start -->`` and ``<!-- bench:exact-<suite>:end -->`` in that file.
Timings are wall-clock on whatever machine runs this (recorded in the markdown header).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from tacos_bench import Collective, Problem  # noqa: E402
from tacos_bench.bounds import lower_bound_us  # noqa: E402
from tacos_bench.topology.generators import grid, hypercube, ring  # noqa: E402
from tacos_bench.runner import solve_and_verify  # noqa: E402
from solvers import get_solver  # noqa: E402

EXACT = {
    "milp-highs": ("milp", {"backend": "highs"}),
    "milp-cbc": ("milp", {"backend": "cbc"}),
    "cpsat": ("cpsat", {"model": "time_indexed"}),
    "cpsat-interval": ("cpsat", {"model": "interval"}),
}
FAMILY_SIZES = {
    "ring": [4, 6, 8, 12, 16, 24, 32, 48, 64],
    "mesh": [2, 3, 4, 5, 6, 7, 8],
    "torus": [3, 4, 5, 6, 7, 8],
    "hetero": [2, 3, 4, 5, 6, 7, 8],
}


def make_topology(family: str, size: int):
    if family == "ring":
        return ring(size)
    if family == "mesh":
        return grid([size, size], wrap=False)
    if family == "torus":
        return grid([size, size], wrap=True)
    if family == "hetero":
        return grid([size, size], wrap=False, bw=[50.0, 100.0], name=f"hetero_mesh{size}x{size}")
    if family == "hypercube":
        return hypercube(size)
    raise SystemExit(f"unknown family {family!r}")


def run_one(problem: Problem, label: str, mode: str, time_limit: float, seed: int, lb: float,
            extra: dict | None = None) -> dict:
    """One run through the pipeline's path (``tacos_bench.runner.solve_and_verify``): its record, plus the
    TEN statistics this benchmark tabulates under short names."""
    topo = problem.topology
    if label == "greedy":
        name, opts = "greedy", {}
    else:
        name, opts = EXACT[label]
        opts = dict(opts, warm_start=(mode != "cold"), **(extra or {}))
    rec, _ = solve_and_verify(problem, name, {**opts, "time_limit_s": time_limit, "seed": seed}, bounds=False,
                              fields={"lower_bound_us": lb, "lower_bound_source": "bounds"})
    rec.update(topology=topo.name, num_npus=problem.num_npus, num_links=problem.num_links, solver=label, mode=mode,
               model_vars=rec.get("s_model_vars"), model_constraints=rec.get("s_model_constraints"),
               source=rec.get("s_source"), tau_us=rec.get("s_tau_us"), ten_exact=rec.get("s_ten_exact"),
               steps=rec.get("s_objective_steps"), bound_steps=rec.get("s_bound_steps"), lb_steps=rec.get("s_lb_steps"),
               warm_steps=rec.get("s_warm_steps"), warm_source=rec.get("s_warm_source"),
               horizon_steps=rec.get("s_horizon_steps"), proof=rec.get("s_proof"),
               ten_optimal=rec["status"] == "optimal" or bool(rec.get("s_ten_optimal")),
               message=(rec.get("solver_message") or rec.get("error") or "")[:160])
    T = rec.get("collective_time_us")
    print(f"  {topo.name:>16} {label:>14} {mode:>4}: {rec['status']:>11} {rec['synthesis_time_s']:8.2f} s"
          f"  T={T or float('nan'):10.1f} µs  x{rec.get('ratio_to_bound') or float('nan'):.3f} of LB"
          f"  vars={rec['model_vars']} src={rec['source']}", flush=True)
    return rec


def machine_note() -> str:
    return (f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs visible, Python {platform.python_version()}; "
            "shared with other jobs while measuring, so timings are noisy (single runs, seed 0).")


# ---------------------------------------------------------------------------- suites
def suite_targets(args) -> pd.DataFrame:
    topos = [grid([4, 4], wrap=False), grid([4, 4], wrap=True), hypercube(16),
             grid([4, 4], wrap=False, bw=[50.0, 100.0], name="hetero_mesh4x4"),
             grid([6, 6], wrap=False), grid([6, 6], wrap=True)]
    rows = []
    for topo in topos:
        p = Problem(topo, Collective("all_gather"))
        lb = lower_bound_us(p)
        rows.append(run_one(p, "greedy", "-", args.time_limit, args.seed, lb))
        for label in args.solvers:
            for mode in ("warm", "cold"):
                rows.append(run_one(p, label, mode, args.time_limit, args.seed, lb))
    return pd.DataFrame(rows)


def suite_sweep(args) -> pd.DataFrame:
    rows = []
    for family in args.families:
        stopped: set[tuple[str, str]] = set()
        for size in FAMILY_SIZES[family]:
            topo = make_topology(family, size)
            if topo.num_npus > args.max_npus:
                break
            p = Problem(topo, Collective("all_gather"))
            lb = lower_bound_us(p)
            r = run_one(p, "greedy", "-", args.time_limit, args.seed, lb)
            r["family"] = family
            rows.append(r)
            for label in args.solvers:
                for mode in ("warm", "cold"):
                    if (label, mode) in stopped:
                        continue
                    r = run_one(p, label, mode, args.time_limit, args.seed, lb)
                    r["family"] = family
                    rows.append(r)
                    if not r["ten_optimal"]:
                        stopped.add((label, mode))
            if all((s, m) in stopped for s in args.solvers for m in ("warm", "cold")):
                break
    return pd.DataFrame(rows)


def suite_warm(args) -> pd.DataFrame:
    topos = [grid([4, 4], wrap=True), hypercube(16), grid([4, 4], wrap=False, bw=[50.0, 100.0],
                                                          name="hetero_mesh4x4"),
             grid([5, 5], wrap=True), grid([6, 6], wrap=True), grid([5, 5], wrap=False, bw=[50.0, 100.0],
                                                                   name="hetero_mesh5x5")]
    rows = []
    for topo in topos:
        p = Problem(topo, Collective("all_gather"))
        lb = lower_bound_us(p)
        for label in args.solvers:
            first = run_one(p, label, "warm", args.time_limit, args.seed, lb)
            first["strategy"] = "below_warm (default)"
            rows.append(first)
            U = first["warm_steps"]
            if U is None or first.get("model_vars") in (None, 0):
                continue
            r = run_one(p, label, "warm", args.time_limit, args.seed, lb, extra={"horizon_steps": int(U)})
            r["strategy"] = "hint (horizon=U)"
            rows.append(r)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- reporting
def _fmt(v, f=".2f"):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    if isinstance(v, (float, np.floating)):
        return format(float(v), f)
    return str(v)


def table(df: pd.DataFrame, cols: list[str], fmts: dict[str, str] | None = None) -> str:
    fmts = fmts or {}
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r.get(c), fmts.get(c, ".2f")) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def sweep_summary(df: pd.DataFrame) -> str:
    """One row per topology: greedy quality and each exact configuration's time and outcome."""
    marks = {"optimal": "opt", "feasible": "feas", "no_solution": "none", "infeasible": "infeas", "error": "ERR"}
    runs = [(s, m) for s, m in df[["solver", "mode"]].drop_duplicates().itertuples(index=False) if s != "greedy"]
    cols = ["family", "topology", "N", "greedy x LB", "best exact x LB"] + [f"{s} {m}" for s, m in runs]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for (fam, topo), g in df.groupby(["family", "topology"], sort=False):
        gr = g[g["solver"] == "greedy"]
        ex = g[(g["solver"] != "greedy") & g["ratio_to_bound"].notna()]
        cells = [fam, topo, str(int(g["num_npus"].iloc[0])),
                 _fmt(gr["ratio_to_bound"].iloc[0], ".3f") if len(gr) else "",
                 _fmt(ex["ratio_to_bound"].min(), ".3f") if len(ex) else ""]
        for s, m in runs:
            r = g[(g["solver"] == s) & (g["mode"] == m)]
            if r.empty:
                cells.append("—")
            else:
                r = r.iloc[0]
                cells.append(f"{r['synthesis_time_s']:.2f} {marks.get(r['status'], r['status'])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown(suite: str, df: pd.DataFrame, command: str, figure: str | None) -> str:
    d = df.copy()
    d["time_steps"] = d["collective_time_us"] / d["tau_us"].where(d["tau_us"].notna(), np.nan)
    cols = ["topology", "num_npus", "solver", "mode", "status", "synthesis_time_s", "collective_time_us",
            "ratio_to_bound", "steps", "bound_steps", "lb_steps", "warm_steps", "model_vars", "model_constraints",
            "build_time_s", "solve_time_s", "source"]
    if suite == "sweep":
        cols = ["family"] + cols
    if suite == "warm":
        cols = ["topology", "solver", "strategy", "status", "synthesis_time_s", "steps", "bound_steps",
                "warm_steps", "horizon_steps", "model_vars", "solve_time_s", "source"]
    fmts = {"ratio_to_bound": ".3f", "collective_time_us": ".1f", "synthesis_time_s": ".2f"}
    fmts.update({c: ".0f" for c in ("num_npus", "steps", "bound_steps", "lb_steps", "warm_steps", "horizon_steps",
                                    "model_vars", "model_constraints")})
    text = f"Produced by `{command}`. {machine_note()}\n\n"
    if suite == "sweep":
        text += ("Cells: synthesis time in seconds (wall, whole `solve` call) and outcome (opt = proven "
                 "optimal on the TEN, feas = schedule without proof, none = no schedule); — = not run "
                 "because a smaller instance of the family already hit the limit. `x LB` = verified "
                 "collective time / `tacos_bench.bounds.lower_bound_us`. The per-run table (model sizes, "
                 "bounds, build/solve split) is in `results/bench_exact_sweep.{csv,parquet,md}`.\n\n")
        text += sweep_summary(d)
        full = table(d, cols, fmts)
        return text, full
    text += table(d, cols, fmts)
    bad = d[(d["valid"] == False) | (d["status"] == "error")]  # noqa: E712
    text += "\n" + ("All returned schedules verified.\n" if bad.empty else
                    f"{len(bad)} run(s) failed verification or errored: "
                    + "; ".join(f"{r.solver} on {r.topology}: {r.message}" for r in bad.itertuples()) + "\n")
    return text, None


def plot_sweep(df: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = [f for f in FAMILY_SIZES if f in set(df["family"])]
    fig, axes = plt.subplots(2, len(fams), figsize=(4.2 * len(fams), 7.0), squeeze=False)
    styles = {("greedy", "-"): ("k", "o", "-"), ("milp-highs", "warm"): ("C0", "s", "-"),
              ("milp-highs", "cold"): ("C0", "s", "--"), ("milp-cbc", "warm"): ("C2", "^", "-"),
              ("milp-cbc", "cold"): ("C2", "^", "--"), ("cpsat", "warm"): ("C3", "D", "-"),
              ("cpsat", "cold"): ("C3", "D", "--"), ("cpsat-interval", "warm"): ("C4", "v", "-"),
              ("cpsat-interval", "cold"): ("C4", "v", "--")}
    for j, fam in enumerate(fams):
        sub = df[df["family"] == fam]
        for (solver, mode), g in sub.groupby(["solver", "mode"], sort=False):
            color, marker, ls = styles.get((solver, mode), ("C5", "x", ":"))
            g = g.sort_values("num_npus")
            label = solver if mode == "-" else f"{solver} ({mode})"
            axes[0, j].plot(g["num_npus"], g["synthesis_time_s"], ls=ls, color=color, marker=marker, label=label, ms=4)
            opt = g["ten_optimal"] | (solver == "greedy")  # the greedy never claims a proof
            axes[0, j].scatter(g.loc[~opt, "num_npus"], g.loc[~opt, "synthesis_time_s"], s=70, facecolors="none",
                               edgecolors="r", zorder=5)
            gg = g[g["collective_time_us"].notna()]
            axes[1, j].plot(gg["num_npus"], gg["ratio_to_bound"], ls=ls, color=color, marker=marker, label=label, ms=4)
        axes[0, j].set_yscale("log")
        axes[0, j].set_title(fam)
        axes[0, j].set_xlabel("NPUs")
        axes[1, j].set_xlabel("NPUs")
        axes[0, j].grid(alpha=0.3)
        axes[1, j].grid(alpha=0.3)
    axes[0, 0].set_ylabel("synthesis time (s)")
    axes[1, 0].set_ylabel("collective time / lower bound")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
    fig.suptitle("All-Gather (1 chunk/NPU, 1 GiB): greedy vs exact backends on the TEN "
                 "(red ring: exact run not proven optimal within the limit; a line ends after its first one)")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replace_section(doc: Path, key: str, text: str) -> None:
    start, end = f"<!-- bench:exact-{key}:start -->", f"<!-- bench:exact-{key}:end -->"
    body = doc.read_text() if doc.exists() else ""
    if start in body and end in body:
        a, b = body.index(start), body.index(end)
        body = body[:a] + start + "\n" + text + end + body[b + len(end):]
    else:
        body += f"\n{start}\n{text}{end}\n"
    doc.write_text(body)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("targets", "sweep", "warm"), default="targets")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per run (default 120 / 60 for sweep)")
    ap.add_argument("--solvers", nargs="+", default=None, choices=list(EXACT), help="exact configurations")
    ap.add_argument("--families", nargs="+", default=list(FAMILY_SIZES), choices=list(FAMILY_SIZES))
    ap.add_argument("--max-npus", type=int, default=64, help="sweep: largest N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_exact"), help="output path prefix")
    ap.add_argument("--doc", default=None, help="markdown file whose bench section is replaced")
    ap.add_argument("--figure", default=None, help="sweep: also copy the PNG here (e.g. docs/exact_scalability.png)")
    ap.add_argument("--plot-only", action="store_true", help="redo the PNG and markdown from the saved parquet")
    args = ap.parse_args(argv)
    if args.time_limit is None:
        args.time_limit = 60.0 if args.suite == "sweep" else 120.0
    if args.solvers is None:
        args.solvers = {"targets": list(EXACT), "sweep": ["milp-highs", "milp-cbc", "cpsat"],
                        "warm": ["milp-highs", "cpsat"]}[args.suite]
    out = Path(f"{args.out}_{args.suite}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        df = pd.read_parquet(out.with_suffix(".parquet"))
        command = df.attrs.get("command") or (out.with_suffix(".cmd").read_text().strip()
                                               if out.with_suffix(".cmd").exists() else "(see results)")
    else:
        get_solver("greedy").solve(Problem(ring(4), Collective("all_gather")))  # JIT warm-up outside the timings
        command = "python experiments/bench_exact.py " + " ".join(argv if argv is not None else sys.argv[1:])
        t0 = time.perf_counter()
        df = {"targets": suite_targets, "sweep": suite_sweep, "warm": suite_warm}[args.suite](args)
        print(f"suite {args.suite} done in {time.perf_counter() - t0:.0f} s")
        df.to_parquet(out.with_suffix(".parquet"), index=False)
        df.to_csv(out.with_suffix(".csv"), index=False)
        out.with_suffix(".cmd").write_text(command + "\n")
    text, full = markdown(args.suite, df, command, None)
    if args.suite == "sweep":
        png = out.with_suffix(".png")
        plot_sweep(df, png)
        fig_ref = png.name
        if args.figure:
            Path(args.figure).write_bytes(png.read_bytes())
            fig_ref = Path(args.figure).name
        text += f"\n![scalability]({fig_ref})\n"
    out.with_suffix(".md").write_text(text + ("\n" + full if full else ""))
    print(text)
    if args.doc:
        replace_section(Path(args.doc), args.suite, text)


if __name__ == "__main__":
    main()
