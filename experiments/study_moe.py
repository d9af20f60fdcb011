"""Mixture-of-experts traffic and concurrent collectives (issue 33 item 9): dispatch and combine of one MoE layer
against the baselines users compare with, and an All-Reduce beside an All-to-All in the three sharing modes.

Part ``moe``: ``moe_dispatch`` and ``moe_combine`` on ``dgx_h100x4`` (32 GPUs, NVSwitch + rails), its 2:1
leaf-spine variant ``dgx_h100x4_2to1`` and the heterogeneous point-to-point ``hetero64``, routing skew Gini
0.1 to 0.4, solved by greedy, greedy_plus, the FAST-like and the DeepEP-like baselines (direct takes only
unicast tables: it runs on the layer's per-pair matrix as All-to-Allv, row ``a2av``), each schedule verified,
against the best lower bound of its demand. The layer is DeepSeek-V3's shape (hidden 7,168 in bf16, top-8 of 64
experts) with ``--tokens`` tokens per GPU (default 16: a study of 141 runs in minutes; on fabrics greedy_plus's
``subset_trees`` candidate scans holdings word by word, and a full 4,096-token layer is past its budget:
bench_demand.py measures that).

Part ``concurrent``: an All-Reduce of ``--ar-mib`` and an All-to-All of ``--a2a-mib`` on every NPU of the same
three networks, ``mode=sequential,priority,joint``, greedy_plus; each part's own lower bound alone.

Every run is a row of ``results.parquet`` (a failed one an error row; the study goes on); the report
``moe.md`` and the figure ``moe.png`` read only that table.

    python experiments/study_moe.py [--quick] [--out docs/studies] [--plot-only]
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd

NAME = "moe"
TOPOS = ["dgx_h100x4", "dgx_h100x4_2to1", "hetero64"]
GINIS = [0.1, 0.2, 0.3, 0.4]
SOLVERS = ["greedy", "greedy_plus", "fast", "deepep"]
MODES = ["sequential", "priority", "joint"]


def moe_rows(topos, ginis, solvers, tokens, seed):
    from tacos_bench.collective import Collective
    from tacos_bench.demand import all_to_allv
    from tacos_bench.moe import combine_demand, dispatch_demand, moe_routing
    from tacos_bench.runner import synthesize
    from tacos_bench.topology.named import named_topology

    for name in topos:
        topo = named_topology(name)
        for g in ginis:
            r = moe_routing(topo.num_npus, tokens_per_npu=tokens, gini=g, seed=seed)
            d = dispatch_demand(r)
            cases = [("moe_dispatch", Collective("moe_dispatch", demand=d), solvers),
                     ("moe_combine", Collective("moe_combine", demand=combine_demand(r)), solvers),
                     ("a2av", Collective("all_to_allv", demand=all_to_allv(d.pair_bytes(), None, 1)),
                      ["direct", "fast", "greedy_plus"])]
            for kind, coll, names in cases:
                for solver in names:
                    yield _row(synthesize, topo, coll, solver, part="moe", topology=name, demand=kind,
                               gini=g, realized_gini=r.gini, tokens=tokens, seed=seed)


def concurrent_rows(topos, modes, ar_mib, a2a_mib, seed):
    from tacos_bench.concurrent import concurrent_collective
    from tacos_bench.runner import synthesize
    from tacos_bench.topology.named import named_topology

    for name in topos:
        topo = named_topology(name)
        parts = [{"kind": "all_reduce", "buffer_mib": ar_mib}, {"kind": "all_to_all", "buffer_mib": a2a_mib}]
        for mode in modes:
            try:
                coll = concurrent_collective(parts, topo, mode=mode)
            except Exception as e:   # noqa: BLE001 - an error row, the study goes on
                yield {"part": "concurrent", "topology": name, "mode": mode, "error": f"{type(e).__name__}: {e}"}
                continue
            yield _row(synthesize, topo, coll, "greedy_plus", part="concurrent", topology=name, demand="ar+a2a",
                       mode=mode, seed=seed)


def _row(synthesize, topo, coll, solver, **keys) -> dict:
    row = {**keys, "solver": solver, "error": None}
    t0 = time.perf_counter()
    try:
        out = synthesize(topo, coll, solver=solver, bounds=True, seed=keys.get("seed", 0))
        rec = out.record
        row.update(valid=out.valid, collective_time_us=rec.get("collective_time_us"),
                   lower_bound_us=rec.get("lower_bound_us"), bound_source=rec.get("lower_bound_source"),
                   synthesis_time_s=rec.get("synthesis_time_s"), candidate=rec.get("candidate"),
                   num_chunks=rec.get("num_chunks"), part_times_us=_json(rec.get("part_times_us")),
                   part_bounds_us=_json(rec.get("part_bounds_us")), error=rec.get("error"))
    except Exception as e:   # noqa: BLE001 - an error row, the study goes on
        row.update(valid=False, error=f"{type(e).__name__}: {e}")
        traceback.print_exc()
    row["wall_s"] = time.perf_counter() - t0
    print(" ".join(f"{k}={row.get(k)}" for k in ("part", "topology", "demand", "gini", "mode", "solver",
                                                   "collective_time_us", "wall_s", "error")), flush=True)
    return row


def _json(v) -> str:
    """A record's list field as JSON text (the record may already hold it as text)."""
    return v if isinstance(v, str) else json.dumps(v)


def report(df: pd.DataFrame, out: Path, cmd: str) -> None:
    ok = df[df["error"].isna() & df["valid"].fillna(False).astype(bool)].copy()
    ok["ratio"] = ok["collective_time_us"] / ok["lower_bound_us"]
    lines = [f"# MoE dispatch / combine and concurrent collectives\n\nCommand: `{cmd}` "
             f"({len(df)} runs, {int(df['error'].notna().sum())} errors; every schedule verified).\n"]
    moe = ok[ok["part"] == "moe"]
    if len(moe):
        lines.append("## MoE layer: time / best lower bound of the demand\n")
        wide = moe.pivot_table(index=["topology", "demand", "gini"], columns="solver", values="ratio")
        lines.append("| topology | demand | gini | " + " | ".join(wide.columns) + " |")
        lines.append("|---|---|---|" + "---|" * len(wide.columns))
        for (t, d, g), r in wide.iterrows():
            lines.append(f"| {t} | {d} | {g:.1f} | " + " | ".join("" if pd.isna(v) else f"{v:.3f}" for v in r) + " |")
        gp = moe.pivot_table(index=["topology", "demand", "gini"], columns="solver", values="collective_time_us")
        if "greedy_plus" in gp:
            others = gp.drop(columns="greedy_plus").min(axis=1)
            behind = int((gp["greedy_plus"] > others * (1 + 1e-9)).sum())
            lines.append(f"\ngreedy_plus behind the best other backend on {behind} of {len(gp)} cases; "
                         f"bound sources: {', '.join(sorted(moe['bound_source'].dropna().unique()))}.\n")
        syn = moe.groupby(["topology", "solver"])["synthesis_time_s"].median().unstack()
        lines.append("\nMedian synthesis time (s):\n")
        lines.append("| topology | " + " | ".join(syn.columns) + " |")
        lines.append("|---|" + "---|" * len(syn.columns))
        for t, r in syn.iterrows():
            lines.append(f"| {t} | " + " | ".join("" if pd.isna(v) else f"{v:.3f}" for v in r) + " |")
    conc = ok[ok["part"] == "concurrent"]
    if len(conc):
        lines.append("\n## All-Reduce + All-to-All on one network (greedy_plus)\n")
        lines.append("| topology | mode | time (µs) | parts' finish (µs) | parts' own bounds (µs) |")
        lines.append("|---|---|---|---|---|")
        for _, r in conc.iterrows():
            fin = json.loads(r["part_times_us"]) or []
            lb = json.loads(r["part_bounds_us"]) or []
            lines.append(f"| {r['topology']} | {r['mode']} | {r['collective_time_us']:.1f} | "
                         f"{', '.join(f'{x:.1f}' for x in fin)} | {', '.join(f'{x:.1f}' for x in lb)} |")
    errs = df[df["error"].notna()]
    if len(errs):
        lines.append("\n## Errors\n")
        for _, r in errs.iterrows():
            lines.append(f"- {r.get('topology')} {r.get('demand')} {r.get('solver')}: {r['error']}")
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    _figure(moe, out / f"{NAME}.png")


def _figure(moe: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    disp = moe[moe["demand"].isin(["moe_dispatch", "moe_combine"])]
    topos = sorted(disp["topology"].unique()) if len(disp) else []
    fig, axes = plt.subplots(1, max(1, len(topos)), figsize=(4.2 * max(1, len(topos)), 3.4), squeeze=False)
    marks = dict(zip(SOLVERS + ["direct"], "osD^v"))
    for ax, t in zip(axes[0], topos):
        sub = disp[(disp["topology"] == t) & (disp["demand"] == "moe_dispatch")]
        for s, g in sub.groupby("solver"):
            g = g.sort_values("gini")
            ax.plot(g["gini"], g["ratio"], marker=marks.get(s, "x"), label=s)
        ax.set_title(f"{t}: moe_dispatch")
        ax.set_xlabel("routing skew (Gini)")
        ax.set_ylabel("time / lower bound")
    if topos:
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small network, one Gini, two modes")
    ap.add_argument("--out", default="docs/studies")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--ar-mib", type=float, default=64.0)
    ap.add_argument("--a2a-mib", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot-only", action="store_true", help="redraw from OUT/moe.parquet")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python experiments/study_moe.py" + (" --quick" if args.quick else "") + (
        f" --tokens {args.tokens}" if args.tokens != 16 else "")
    table = out / f"{NAME}.parquet"
    if args.plot_only:
        df = pd.read_parquet(table)
    else:
        topos = ["hetero2x2x4"] if args.quick else TOPOS
        ginis = [0.3] if args.quick else GINIS
        rows = list(moe_rows(topos, ginis, SOLVERS, 4 if args.quick else args.tokens, args.seed))
        rows += list(concurrent_rows(topos, ["sequential", "joint"] if args.quick else MODES,
                                     1.0 if args.quick else args.ar_mib, 1.0 if args.quick else args.a2a_mib,
                                     args.seed))
        df = pd.DataFrame(rows)
        df.to_parquet(table, index=False)
    report(df, out, cmd)
    print(f"wrote {out / (NAME + '.md')}")


if __name__ == "__main__":
    main()
