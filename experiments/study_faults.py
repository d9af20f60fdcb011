"""Faults as they happen (issue 35): degraded NICs, links that slow down mid-collective, repair of the reducing
collectives, and stragglers, each run through ``run.py``'s pipeline (:func:`tacos_bench.runner.pipeline.run_job`:
the same record, every schedule verified with the fault's own rules).

Part ``degraded`` (from the start, OptCC's framing): ``dgx_h100x4`` with one GPU's NIC lost (its NIC links failed),
one GPU's NIC at 50 %, and a whole node's NICs at 50 % (``fault.slow_npus=[[g, 0.5, nics], ...]``); the 2:1
``leafspine4x8_2to1`` with one port at 50 % and a leaf's 8 NPUs at 50 %. All-Reduce and All-Gather of 1 GiB,
greedy and greedy_plus, against the degraded problem's bound (and, for All-Reduce, its phase-bound sum) and against
the fault-free time.

Part ``slow`` (mid-collective): links slow to 50 % at half the healthy time: the 16-GPU two-tier cluster
(``dgx_h100x4`` with ``dims=[2,8]``) with four rails (the NICs of GPUs 0-3 of each node), and the heterogeneous
``hetero64`` (a ``hetero512``-like cluster at 64 NPUs) with four NPUs' links; All-Gather, Reduce-Scatter and
All-Reduce, repaired by greedy_plus, against the repair bound and a fresh synthesis on the slowed network.

Part ``repair`` (reducing collectives after a link fails): Reduce-Scatter and All-Reduce on ``torus4x4``,
``mesh4x4`` and ``dgx_h100x4`` (one GPU's NIC fails), the fault at 0.3, 0.5 and 0.7 of the healthy time.

Part ``straggler`` (StragglAR's framing): NPU 0 joins at T x {0.5, 1.0}, T the healthy time, on ``switched8`` (4
chunks per NPU) and ``dgx_h100x4``: All-Reduce and All-Gather, greedy and greedy_plus; the finish after the
release in units of T against waiting then running (1.0 T after the release).

Every run is a row of ``faults.parquet`` (a failed one an error row; the study goes on); ``faults.md`` and
``faults.png`` read only that table.

    python experiments/study_faults.py [--quick] [--out docs/studies] [--plot-only]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

NAME = "faults"
ROOT = Path(__file__).resolve().parent.parent
KEEP = ("valid", "error", "collective_time_us", "lower_bound_us", "lower_bound_source", "phases_bound_sum_us",
        "synthesis_time_s", "healthy_time_us", "repaired_time_us", "repair_bound_us", "repaired_over_bound",
        "scratch_time_us", "repair_loss", "repair_plan", "release_plan", "candidate", "num_npus")


def conf(group: str, name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def topo_cfg(name: str, **more) -> dict:
    path = ROOT / "conf" / "topo" / f"{name}.yaml"
    cfg = conf("topo", name) if path.exists() else {**conf("topo", "named"), "name": name}
    cfg.update(more)
    return cfg


def run(topo: dict, kind: str, solver: str, *, cpn: int = 1, fault: dict | None = None, release=None,
        **keys) -> dict:
    from tacos_bench.runner.pipeline import run_job

    coll = {**conf("collective", kind), "chunks_per_npu": cpn}
    if release is not None:
        coll["release_us"] = release
    cfg = {"solver": {"name": solver}, "topo": topo, "collective": coll, "seed": 0}
    if fault:
        cfg["fault"] = fault
    row = {**keys, "collective": kind, "solver": solver, "chunks_per_npu": cpn}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        rec = run_job(cfg, d)
    row.update({k: rec.get(k) for k in KEEP})
    row["valid"] = bool(row.get("valid"))
    row["wall_s"] = time.perf_counter() - t0
    print(" ".join(f"{k}={row.get(k)}" for k in ("part", "topology", "case", "collective", "solver",
                                                   "collective_time_us", "wall_s", "error")), flush=True)
    return row


def nic_links(name: str, npu: int, **more) -> list:
    """The scale-out links of ``npu`` (slower than its fastest), both directions, as ``[[u, v], ...]``."""
    from tacos_bench.topology.named import build_topology

    t = build_topology(topo_cfg(name, **more))
    mine = (t.src == npu) | (t.dst == npu)
    slow = mine & (t.bw_GiBps < t.bw_GiBps[mine].max() * (1 - 1e-12))
    return [[int(u), int(v)] for u, v in zip(t.src[slow].tolist(), t.dst[slow].tolist())]


def degraded_rows(quick: bool):
    cases = [("dgx_h100x4", "healthy", {}), ("dgx_h100x4", "1 NIC of 8 lost", {"topo": {"failed_links":
                                                                                          nic_links("dgx_h100x4", 0)}}),
             ("dgx_h100x4", "1 NIC at 50%", {"fault": {"slow_npus": [[0, 0.5, "nics"]]}}),
             ("dgx_h100x4", "node 0's NICs at 50%", {"fault": {"slow_npus": [[g, 0.5, "nics"] for g in range(8)]}}),
             ("leafspine4x8_2to1", "healthy", {}),
             ("leafspine4x8_2to1", "1 port at 50%", {"fault": {"slow_npus": [[0, 0.5]]}}),
             ("leafspine4x8_2to1", "a leaf's 8 NPUs at 50%", {"fault": {"slow_npus": [[g, 0.5] for g in range(8)]}})]
    if quick:
        cases = [c for c in cases if c[0] == "dgx_h100x4"][:2]
    for name, case, how in cases:
        for kind in ("all_reduce",) if quick else ("all_reduce", "all_gather"):
            for solver in ("greedy_plus",) if quick else ("greedy", "greedy_plus"):
                yield run(topo_cfg(name, **how.get("topo", {})), kind, solver, fault=how.get("fault"),
                          part="degraded", topology=name, case=case)


def slow_rows(quick: bool):
    rails = [[g, 0.5, "nics"] for g in (0, 1, 2, 3, 8, 9, 10, 11)]
    cases = [("dgx_h100x4", {"dims": [2, 8]}, "4 rails at 50% mid-way", {"slow_npus": rails}, 2),
             ("hetero64", {}, "4 NPUs' links at 50% mid-way", {"slow_npus": [[v, 0.5] for v in range(4)]}, 1)]
    if quick:
        cases = cases[:1]
    for name, more, case, slow, cpn in cases:
        for kind in ("all_gather",) if quick else ("all_gather", "reduce_scatter", "all_reduce"):
            yield run(topo_cfg(name, **more), kind, "greedy_plus", cpn=cpn, fault={"at_fraction": 0.5, **slow},
                      part="slow", topology=name + ("-2x8" if more else ""), case=case)


def repair_rows(quick: bool):
    cases = [("torus4x4", [[0, 1, "both"]]), ("mesh4x4", [[5, 6, "both"]]),
             ("dgx_h100x4", nic_links("dgx_h100x4", 0))]
    if quick:
        cases = cases[:1]
    for name, links in cases:
        for kind in ("all_reduce",) if quick else ("reduce_scatter", "all_reduce"):
            for frac in (0.5,) if quick else (0.3, 0.5, 0.7):
                yield run(topo_cfg(name), kind, "greedy_plus", cpn=2,
                          fault={"at_fraction": frac, "links": links}, part="repair", topology=name,
                          case=f"link fails at {frac:g} T")


def straggler_rows(quick: bool):
    cases = [("switched8", 4), ("dgx_h100x4", 1)]
    if quick:
        cases = cases[:1]
    for name, cpn in cases:
        for kind in ("all_reduce",) if quick else ("all_reduce", "all_gather"):
            healthy = run(topo_cfg(name), kind, "greedy_plus", cpn=cpn, part="straggler", topology=name,
                          case="healthy")
            yield healthy
            T = healthy["collective_time_us"]
            if not T:
                continue
            for late in (1.0,) if quick else (0.5, 1.0):
                for solver in ("greedy_plus",) if quick else ("greedy", "greedy_plus"):
                    row = run(topo_cfg(name), kind, solver, cpn=cpn, release=[[0, late * T]], part="straggler",
                              topology=name, case=f"NPU 0 joins at {late:g} T")
                    row.update(release_at_us=late * T, fault_free_us=T)
                    yield row


def report(df: pd.DataFrame, out: Path, cmd: str) -> None:
    ok = df[df["error"].isna() & df["valid"]].copy()
    lines = [f"# Faults as they happen: degraded NICs, slow-downs, reducing repairs, stragglers\n\nCommand: `{cmd}` "
             f"({len(df)} runs, {int(df['error'].notna().sum())} errors; every schedule verified, with the fault's "
             "time-varying rules where there is one).\n"]
    deg = ok[ok["part"] == "degraded"]
    if len(deg):
        free = deg[deg["case"] == "healthy"].set_index(["topology", "collective", "solver"])["collective_time_us"]
        lines += ["## Degraded from the start (OptCC's framing)\n",
                  "| topology | case | collective | solver | time (µs) | / degraded bound | / phase-bound sum | "
                  "/ fault-free |", "|---|---|---|---|---|---|---|---|"]
        for _, r in deg.iterrows():
            f = free.get((r["topology"], r["collective"], r["solver"]))
            ps = r.get("phases_bound_sum_us")
            lines.append(f"| {r['topology']} | {r['case']} | {r['collective']} | {r['solver']} | "
                         f"{r['collective_time_us']:.1f} | {r['collective_time_us'] / r['lower_bound_us']:.3f} | "
                         f"{'' if pd.isna(ps) or not ps else f'{r.collective_time_us / ps:.3f}'} | "
                         f"{'' if f is None else f'{r.collective_time_us / f:.3f}'} |")
    for part, title in (("slow", "Links slowing down mid-collective (repaired by greedy_plus)"),
                        ("repair", "Reducing collectives repaired after a link fails (greedy_plus)")):
        sub = ok[ok["part"] == part]
        if not len(sub):
            continue
        lines += [f"\n## {title}\n", "| topology | case | collective | healthy (µs) | repaired (µs) | plan | "
                  "/ repair bound | from scratch (µs) | repaired / scratch |", "|---|---|---|---|---|---|---|---|---|"]
        for _, r in sub.iterrows():
            sc = r.get("scratch_time_us")
            lines.append(f"| {r['topology']} | {r['case']} | {r['collective']} | {r['healthy_time_us']:.1f} | "
                         f"{r['repaired_time_us']:.1f} | {r['repair_plan']} | {r['repaired_over_bound']:.3f} | "
                         f"{'' if pd.isna(sc) else f'{sc:.1f}'} | "
                         f"{'' if pd.isna(sc) else f'{r.repaired_time_us / sc:.3f}'} |")
        if part == "repair":
            ratio = (sub["repaired_time_us"] / sub["scratch_time_us"]).mean()
            lines.append(f"\nRepaired / from scratch, mean over these cases: {ratio:.3f} (the fresh run starts at 0 "
                         "on the degraded network; the repaired one keeps what ran before the fault).\n")
    st = ok[(ok["part"] == "straggler") & (ok["case"] != "healthy")]
    if len(st):
        lines += ["\n## Stragglers (StragglAR's framing)\n",
                  "| topology | collective | case | solver | time (µs) | plan | / bound | after the release, in T "
                  "| waiting then running |", "|---|---|---|---|---|---|---|---|---|"]
        for _, r in st.iterrows():
            after = (r["collective_time_us"] - r["release_at_us"]) / r["fault_free_us"]
            lines.append(f"| {r['topology']} | {r['collective']} | {r['case']} | {r['solver']} | "
                         f"{r['collective_time_us']:.1f} | {r['release_plan']} | "
                         f"{r['collective_time_us'] / r['lower_bound_us']:.3f} | {after:.3f} | 1.000 |")
    errs = df[df["error"].notna()]
    if len(errs):
        lines.append("\n## Errors\n")
        for _, r in errs.iterrows():
            lines.append(f"- {r.get('part')} {r.get('topology')} {r.get('case')} {r.get('collective')} "
                         f"{r.get('solver')}: {r['error']}")
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    _figure(ok, out / f"{NAME}.png")


def _figure(ok: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    rep = ok[ok["part"].isin(["slow", "repair"])]
    if len(rep):
        labels = [f"{r.topology}\n{r.collective} {r.case.split(' ')[-2] if 'fails' in r.case else 'slow'}"
                  for r in rep.itertuples()]
        axes[0].bar(range(len(rep)), rep["repaired_time_us"] / rep["scratch_time_us"], color="tab:blue")
        axes[0].axhline(1.0, color="k", lw=0.8)
        axes[0].set_xticks(range(len(rep)), labels, rotation=90, fontsize=6)
        axes[0].set_ylabel("repaired / from scratch")
        axes[0].set_title("repairs")
    st = ok[(ok["part"] == "straggler") & (ok["case"] != "healthy")]
    if len(st):
        after = (st["collective_time_us"] - st["release_at_us"]) / st["fault_free_us"]
        labels = [f"{r.topology} {r.collective}\n{r.case.split('at ')[-1]} {r.solver}" for r in st.itertuples()]
        axes[1].bar(range(len(st)), after, color="tab:orange", label="plan kept")
        axes[1].axhline(1.0, color="k", lw=0.8, ls="--", label="wait, then run")
        axes[1].set_xticks(range(len(st)), labels, rotation=90, fontsize=6)
        axes[1].set_ylabel("finish after the release (x healthy time)")
        axes[1].set_title("stragglers")
        axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one case of each part")
    ap.add_argument("--out", default="docs/studies")
    ap.add_argument("--plot-only", action="store_true", help="redraw from OUT/faults.parquet")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python experiments/study_faults.py" + (" --quick" if args.quick else "")
    table = out / f"{NAME}.parquet"
    if args.plot_only:
        df = pd.read_parquet(table)
    else:
        rows = []
        for part in (degraded_rows, slow_rows, repair_rows, straggler_rows):
            try:
                rows += list(part(args.quick))
            except Exception as e:   # noqa: BLE001 - an error row, the study goes on
                rows.append({"part": part.__name__, "error": f"{type(e).__name__}: {e}", "valid": False})
        df = pd.DataFrame(rows)
        for col in ("phases_bound_sum_us", "scratch_time_us", "release_at_us", "fault_free_us"):
            if col not in df:
                df[col] = None
        df.to_parquet(table, index=False)
    report(df, out, cmd)
    print(f"wrote {out / (NAME + '.md')}")


if __name__ == "__main__":
    main()
