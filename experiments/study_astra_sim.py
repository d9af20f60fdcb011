"""Study: ASTRA-sim re-times the All-Reduce-vs-baselines schedules on the single-speed topologies.

    python experiments/study_astra_sim.py [--quick] [--max-npus N] [--astra-sim PATH] [--jobs 2]

Runs the sweep of ``conf/experiment/allreduce_vs_baselines.yaml`` (every solver of that study) on its
single-speed topologies (all but ``hetero*``: mixed link speeds have no exact ASTRA-sim network), exports
every verified schedule with ``tacos_bench.export.astra_sim`` and runs the bundle's ``run.sh`` with the
prebuilt ASTRA-sim (default ``../shared/tools/astra-sim/bin/AstraSim_Analytical_Congestion_Aware``, or
``$ASTRA_SIM``). The table puts ASTRA-sim's collective time next to our verifier's ``collective_time_us``,
with the difference in ns and the exporter's rounding bound (``causal_depth``: ASTRA-sim truncates each hop
to whole ns and charges 1 ns per reduction). The full run writes ``docs/studies/astra_sim.md`` and
``docs/studies/astra_sim.csv``; ``--quick`` (two 16-NPU topologies, three solvers) writes only under
``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXPERIMENT = "allreduce_vs_baselines"
NAME = "astra_sim"
QUICK_TOPOS = ["mesh4x4", "torus4x4"]
QUICK_SOLVERS = ["greedy", "ring", "direct"]


def study_grid() -> tuple[list[str], list[str]]:
    """(solvers, single-speed topologies) of the All-Reduce-vs-baselines study config."""
    import yaml

    cfg = yaml.safe_load((ROOT / "conf" / "experiment" / f"{EXPERIMENT}.yaml").read_text())
    params = cfg["hydra"]["sweeper"]["params"]
    solvers = [s.strip() for s in str(params["solver"]).split(",")]
    topos = [t.strip() for t in str(params["topo.name"]).split(",") if not t.strip().startswith("hetero")]
    return solvers, topos


def num_npus(name: str) -> int:
    """NPU count of a named topology (without building it when the name says it)."""
    from tacos_bench.topology.named import named_topology

    return int(named_topology(name).num_npus)


def sweep(out: Path, solvers: list[str], topos: list[str], jobs: int) -> list[Path]:
    """``run.py -m experiment=allreduce_vs_baselines`` restricted to ``topos``; returns the run directories."""
    sweep_dir = out / "sweep"
    if sweep_dir.exists():
        import shutil

        shutil.rmtree(sweep_dir)
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", f"experiment={EXPERIMENT}", f"hydra.sweep.dir={sweep_dir}",
           f"solver={','.join(solvers)}", f"topo.name={','.join(topos)}",
           "collective.overlap=true"]  # one composition: ASTRA-sim replays every schedule as dataflow anyway
    if jobs > 1:
        cmd += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
    print("$", " ".join(cmd[1:]), flush=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        raise SystemExit(f"the sweep failed (exit {r.returncode})")
    return sorted((p.parent for p in sweep_dir.glob("*/result.json")), key=lambda p: int(p.name)
                  if p.name.isdigit() else 0)


def retime(run_dir: Path, bundle: Path, binary: Path, timeout: float) -> dict:
    """One row: our record next to ASTRA-sim's time for its exported bundle (errors become a message)."""
    from tacos_bench.export import load_run
    from tacos_bench.export.astra_sim import export_astra_sim, run_bundle

    rec = json.loads((run_dir / "result.json").read_text())
    row = {"topology": rec.get("topology"), "num_npus": rec.get("num_npus"), "solver": rec.get("solver"),
           "transfers": None, "ours_us": rec.get("collective_time_us"), "astra_sim_us": None, "diff_ns": None,
           "bound_ns": None, "network": None, "export_s": None, "simulate_s": None,
           "git_commit": rec.get("git_commit"), "error": None}
    if rec.get("status") == "error" or rec.get("valid") is not True:
        row["error"] = f"run: {rec.get('error')}"
        return row
    try:
        t0 = time.perf_counter()
        problem, schedule, record = load_run(run_dir)
        export_astra_sim(problem, schedule, bundle, record=record)
        row["export_s"] = time.perf_counter() - t0
        manifest = json.loads((bundle / "bundle.json").read_text())
        row["transfers"] = manifest["num_transfers"]
        row["bound_ns"] = float(manifest["causal_depth"])
        row["network"] = f"{manifest['network']['topology']}({manifest['network']['npus_count']})"
        t0 = time.perf_counter()
        sim = run_bundle(bundle, binary, timeout=timeout)
        row["simulate_s"] = time.perf_counter() - t0
        row["astra_sim_us"] = sim.time_us
        row["diff_ns"] = (sim.time_us - float(rec["collective_time_us"])) * 1000.0
    except Exception as e:  # noqa: BLE001 - one bad run must not lose the table
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    return row


def fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def short(commit: str) -> str:
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def markdown(df: pd.DataFrame, meta: dict) -> str:
    cmd, note, elapsed_s = meta["command"], meta.get("note", ""), float(meta["elapsed_s"])
    good = df[df["error"].isna()]
    lines = [
        "# ASTRA-sim re-timing of the All-Reduce-vs-baselines schedules",
        "",
        "Produced by:",
        "",
        "```bash",
        cmd,
        "```",
        "",
        "Every verified schedule of the All-Reduce study (`conf/experiment/allreduce_vs_baselines.yaml`: 1 GiB "
        "All-Reduce, 1 chunk per NPU, 50 GiB/s and 0.5 µs links) on its single-speed topologies (all but `hetero*`, "
        "which mix link speeds and have no exact ASTRA-sim network) is exported with "
        "`python -m tacos_bench.export astra-sim` and run by the bundle's `run.sh` in ASTRA-sim's analytical, "
        "congestion-aware backend (`../shared/tools/astra-sim`). `ours` is our verifier's `collective_time_us`, "
        "`ASTRA-sim` the largest per-NPU finish time it reports, `diff` = ASTRA-sim - ours in ns, and `bound` the "
        "exporter's rounding bound (`causal_depth`: transfers and reductions on the longest dependency chain; "
        "ASTRA-sim truncates every hop to whole ns and charges 1 ns per reduction). A `diff` below `-bound` means "
        "the schedule idles: ASTRA-sim replays each transfer as soon as its data and its link's previous transfer "
        "allow, so a schedule that waits for something other than data finishes earlier there: the RHD baseline's "
        "`phase_sync` (a pair starts phase j+1 only when both directions of phase j have arrived) is not a data "
        "dependency, so ASTRA-sim runs RHD as dataflow (close to `solver.phase_sync=false`; see docs/export.md).",
        "",
    ]
    if note:
        lines += [note, ""]
    lines += ["| topology | NPUs | solver | network | transfers | ours (µs) | ASTRA-sim (µs) | diff (ns) | "
              "bound (ns) | within bound |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        within = "" if pd.isna(r["diff_ns"]) else ("yes" if abs(r["diff_ns"]) <= r["bound_ns"] + 1e-6 else "no")
        lines.append(f"| {r['topology']} | {fmt(r['num_npus'], 'd')} | {r['solver']} | {fmt(r['network'], '')} | "
                     f"{fmt(r['transfers'], 'd')} | {fmt(r['ours_us'], '.3f')} | {fmt(r['astra_sim_us'], '.3f')} | "
                     f"{fmt(r['diff_ns'], '+.3f')} | {fmt(r['bound_ns'], '.0f')} | {within} |")
    lines.append("")
    if not good.empty:
        ok = (good["diff_ns"].abs() <= good["bound_ns"] + 1e-6)
        lines += ["| solver | runs | within bound | diff range (ns) | largest ASTRA-sim speed-up |",
                  "|---|---|---|---|---|"]
        for s, g in good.groupby("solver", sort=False):
            okg = ok[g.index]
            fast = max(0.0, -g["diff_ns"].min())
            fast_s = f"{fast / 1000:.3f} µs ({(fast / 1000) / g.loc[g['diff_ns'].idxmin(), 'ours_us']:.1%})" \
                if fast > g["bound_ns"].max() else "none beyond rounding"
            lines.append(f"| {s} | {len(g)} | {int(okg.sum())} | {g['diff_ns'].min():+.3f} .. "
                         f"{g['diff_ns'].max():+.3f} | {fast_s} |")
        lines.append("")
    bad = df[df["error"].notna()]
    if bad.empty:
        lines.append("Every run was verified, exported and finished in ASTRA-sim.")
    else:
        lines.append(f"{len(bad)} run(s) have no ASTRA-sim time:")
        lines.append("")
        lines += [f"- {r['solver']} on {r['topology']}: {r['error']}" for _, r in bad.iterrows()]
    commits = sorted({str(c) for c in df["git_commit"].dropna()})
    lines += ["", f"Measured on {meta.get('host')} ({meta.get('cores')} cores), {meta.get('date')}, "
              f"git commit {', '.join(short(c) for c in commits) or 'unknown'}; "
              f"{elapsed_s / 60:.1f} min for the whole command (sweep, exports and simulations). "
              f"Data: `{NAME}.csv` (re-render with `--report-only`).", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two 16-NPU topologies and three solvers")
    ap.add_argument("--out", default=str(ROOT / "results" / NAME), help="sweep, bundles, table")
    ap.add_argument("--docs", default=None,
                    help="also write the markdown and CSV here (default: docs/studies for a full run)")
    ap.add_argument("--astra-sim", default=None,
                    help="ASTRA-sim's AstraSim_Analytical_Congestion_Aware binary (default: $ASTRA_SIM, else the "
                         "workspace's prebuilt one in ../shared/tools/astra-sim/bin)")
    ap.add_argument("--max-npus", type=int, default=None, help="leave out topologies with more NPUs")
    ap.add_argument("--jobs", type=int, default=1, help="parallel run.py jobs (joblib launcher when > 1)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per ASTRA-sim run")
    ap.add_argument("--report-only", action="store_true",
                    help="re-render the markdown from OUT/astra_sim.csv without running anything")
    args = ap.parse_args()
    out = Path(args.out)
    docs = Path(args.docs) if args.docs else (None if args.quick else ROOT / "docs" / "studies")
    if args.report_only:
        df = pd.read_csv(out / f"{NAME}.csv")
        meta = json.loads((out / f"{NAME}.json").read_text())
        write(df, meta, out, docs)
        return

    from tacos_bench.export.astra_sim import binary_problem, resolve_binary

    why = binary_problem(args.astra_sim)
    if why is not None:
        raise SystemExit(f"{why} (or pass --astra-sim PATH)")
    binary = resolve_binary(args.astra_sim)
    solvers, topos = study_grid()
    if args.quick:
        solvers = [s for s in solvers if s in QUICK_SOLVERS]
        topos = [t for t in topos if t in QUICK_TOPOS]
    dropped = []
    if args.max_npus is not None:
        dropped = [t for t in topos if num_npus(t) > args.max_npus]
        topos = [t for t in topos if t not in dropped]
    out.mkdir(parents=True, exist_ok=True)

    t_start = time.perf_counter()
    run_dirs = sweep(out, solvers, topos, args.jobs)
    print(f"sweep: {len(run_dirs)} runs in {time.perf_counter() - t_start:.1f} s", flush=True)
    rows = []
    for d in run_dirs:
        rec = json.loads((d / "result.json").read_text())
        bundle = out / "bundles" / f"{rec.get('topology')}-{rec.get('solver')}"
        row = retime(d, bundle, binary, args.timeout)
        print(f"  {row['topology']:>14} {row['solver']:>7}: ours {fmt(row['ours_us'], '.3f')} us, "
              f"ASTRA-sim {fmt(row['astra_sim_us'], '.3f')} us, diff {fmt(row['diff_ns'], '+.3f')} ns"
              + (f"  [{row['error']}]" if row["error"] else ""), flush=True)
        rows.append(row)
    df = pd.DataFrame(rows)
    order = {s: i for i, s in enumerate(solvers)}
    df = df.assign(_s=df["solver"].map(order), _t=df["topology"].map({t: i for i, t in enumerate(topos)}))
    df = df.sort_values(["num_npus", "_t", "_s"]).drop(columns=["_s", "_t"]).reset_index(drop=True)
    elapsed = time.perf_counter() - t_start

    cmd = "python experiments/study_astra_sim.py" + (" --quick" if args.quick else "") + (
        f" --max-npus {args.max_npus}" if args.max_npus is not None else "")
    note = ""
    if dropped:
        note = (f"Restricted to at most {args.max_npus} NPUs: left out {', '.join(dropped)}.")
    meta = {"command": cmd, "note": note, "elapsed_s": elapsed, "host": platform.node(), "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d")}
    (out / f"{NAME}.json").write_text(json.dumps(meta, indent=2) + "\n")
    df.to_csv(out / f"{NAME}.csv", index=False)
    write(df, meta, out, docs)


def write(df: pd.DataFrame, meta: dict, out: Path, docs: Path | None) -> None:
    text = markdown(df, meta)
    (out / f"{NAME}.md").write_text(text)
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        (docs / f"{NAME}.md").write_text(text)
        df.to_csv(docs / f"{NAME}.csv", index=False)
        (docs / f"{NAME}.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"wrote {docs / (NAME + '.md')}")
    print(f"wrote {out / (NAME + '.md')} ({meta['elapsed_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
