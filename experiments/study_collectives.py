"""Study: every collective (broadcast, reduce, gather, scatter, all_to_all) and synthesis through link failures.

    python experiments/study_collectives.py [--jobs 2] [--docs docs/studies]

Sweeps (every schedule verified; failures are kept as error rows):

* ``experiment=collectives`` (conf/experiment/collectives.yaml): All-to-All on meshes, tori, a two-tier cluster and
  random asymmetric graphs: greedy, greedy_plus, direct, pairwise, bruck;
* Broadcast and Reduce (8 chunks): greedy, greedy_plus, direct, binomial, chain; Gather and Scatter: greedy,
  greedy_plus, direct, binomial; same topologies;
* every collective on ``hetero512`` (512 NPUs; All-to-All = 262,144 chunks);
* the exact backends (CP-SAT, MILP/HiGHS) on the 16-NPU instances, 60 s each;
* failures: 1, 2, 4 and 8 random links (both directions) fail at half the healthy schedule's time; the greedy
  repairs from the state at the fault and is compared with a from-scratch synthesis on the degraded topology
  (``fault.at_fraction=0.5 fault.random_links=K``, seeds 0-2);
* failures on larger instances (torus16x16, hetero512), where synthesis time matters;
* **every root** of the rooted collectives (issue 22): Broadcast, Reduce, Gather and Scatter from each NPU of
  torus4x4 and hetero_mesh4x4 (greedy and greedy_plus) and of torus8x8 and hetero64 (greedy_plus), reported as
  min / median / max of time / bound over the roots, CP-SAT (warm, 20 s) on every root of the 16-NPU
  instances (Broadcast, Scatter; Reduce and Gather are their mirrors) and on every hetero64 Broadcast root to
  calibrate the bound, and greedy_plus without its rooted candidates (roots 0-15), and for Broadcast without
  one of them at a time (``relabel_tries=0``, ``broadcast_reserve_tries=0``), to show what each adds.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from _study import error_summary, load_part, ok_rows, parse_args, ratio_table, run_sweep, to_markdown, write_report

NAME = "collectives"
TOPOS = "mesh4x4,torus4x4,mesh8x8,torus8x8,torus4x4x4,hetero64,random16d3s0,random32d3s1"
SMALL = "mesh4x4,torus4x4,random16d3s0"
BASELINES = ("direct", "pairwise", "bruck", "binomial", "chain")
KINDS = ("broadcast", "reduce", "gather", "scatter", "all_to_all")
ROOTED_B = ["collective=broadcast,reduce", "solver=greedy,greedy_plus,direct,binomial,chain"]
ROOTED_G = ["collective=gather,scatter", "solver=greedy,greedy_plus,direct,binomial"]
FAULT = ["fault.at_fraction=0.5", "solver=greedy"]
ROOTED = "collective=broadcast,reduce,gather,scatter"
ROOTS16, ROOTS64 = "torus4x4,hetero_mesh4x4", "torus8x8,hetero64"
ROOT_PARTS = ("roots16", "roots64", "roots_exact", "roots_exact64", "roots_ablation", "roots_no_relabel",
              "roots_no_breserve")
# greedy_plus without its rooted candidates (relabelled copies, reservation routing): what they add
ABLATION_LABELS = {"roots_ablation": "greedy_plus, no relabel/reserve",
                   "roots_no_relabel": "greedy_plus, relabel_tries=0",
                   "roots_no_breserve": "greedy_plus, broadcast_reserve_tries=0"}
NO_ROOTED = ["solver=greedy_plus", "solver.relabel_tries=0", "solver.reserve_tries=0",
             "solver.broadcast_reserve_tries=0"]


def sweeps(quick: bool) -> list[tuple[str, list[str]]]:
    if quick:
        return [("a2a", ["topo.name=random16d3s0", "solver=greedy,direct"]),
                ("roots16", ["topo.name=mesh4x4", "collective=broadcast", "collective.root=range(0,2)",
                             "solver=greedy"]),
                ("failures", ["topo.name=mesh4x4", "collective=all_gather,all_to_all", "fault.random_links=1",
                              "seed=0", *FAULT])]
    return [
        ("a2a", []),
        ("bcast", [f"topo.name={TOPOS}", *ROOTED_B]),
        ("gather", [f"topo.name={TOPOS}", *ROOTED_G]),
        ("h512_a2a", ["topo.name=hetero512", "solver=greedy,greedy_plus,direct,pairwise,bruck"]),
        ("h512_bcast", ["topo.name=hetero512", *ROOTED_B]),
        ("h512_gather", ["topo.name=hetero512", *ROOTED_G]),
        ("exact", [f"topo.name={SMALL}", f"collective={','.join(KINDS)}", "solver=cpsat,milp",
                   "solver.time_limit_s=60"]),
        ("failures", ["topo.name=torus8x8,mesh8x8,hetero64,random32d3s1",
                      "collective=all_gather,broadcast,gather,scatter,all_to_all", "fault.random_links=1,2,4,8",
                      "seed=0,1,2", *FAULT]),
        ("failures_large", ["topo.name=torus16x16,hetero512", "collective=all_gather,all_to_all",
                            "fault.random_links=1", "seed=0,1", *FAULT]),
        ("roots16", [f"topo.name={ROOTS16}", ROOTED, "collective.root=range(0,16)", "solver=greedy,greedy_plus"]),
        ("roots64", [f"topo.name={ROOTS64}", ROOTED, "collective.root=range(0,64)", "solver=greedy_plus"]),
        ("roots_exact", [f"topo.name={ROOTS16}", "collective=broadcast,scatter", "collective.root=range(0,16)",
                         "solver=cpsat", "solver.time_limit_s=20"]),
        ("roots_ablation", [f"topo.name={ROOTS16},{ROOTS64}", ROOTED, "collective.root=range(0,16)", *NO_ROOTED]),
        # one rooted candidate off at a time (Broadcast; Reduce is its mirror): what each adds
        ("roots_no_relabel", [f"topo.name={ROOTS16},{ROOTS64}", "collective=broadcast", "collective.root=range(0,16)",
                              "solver=greedy_plus", "solver.relabel_tries=0"]),
        ("roots_no_breserve", [f"topo.name={ROOTS16},{ROOTS64}", "collective=broadcast",
                               "collective.root=range(0,16)", "solver=greedy_plus",
                               "solver.broadcast_reserve_tries=0"]),
        # hetero64 Broadcast sat 1.0526x above its distance bound on every root: CP-SAT proved that bound loose
        # (the first-hop pipeline bound, docs/bounds.md (g), now meets CP-SAT's optimum)
        ("roots_exact64", ["topo.name=hetero64", "collective=broadcast", "collective.root=range(0,64)",
                           "solver=cpsat", "solver.model=continuous", "solver.time_limit_s=20"]),
    ]


def summarize(good: pd.DataFrame) -> pd.DataFrame:
    good = good.copy()
    good["case"] = good["collective"] + " " + good["topology"]
    best, wide = ratio_table(good, ("greedy", "greedy_plus", "cpsat", "milp"), BASELINES)
    first = good.groupby("case")[["collective", "topology", "num_npus"]].first()
    wide = wide.assign(collective=first["collective"], topology=first["topology"], NPUs=first["num_npus"])
    base = [b for b in BASELINES if b in best]
    if "greedy" in best and base:
        wide["greedy_vs_best_baseline"] = best["greedy"] / best[base].min(axis=1)
    order = {k: i for i, k in enumerate(KINDS)}
    return wide.reset_index(drop=True).sort_values(["collective", "NPUs", "topology"],
                                                   key=lambda c: c.map(order) if c.name == "collective" else c)


def roots_table(good: pd.DataFrame) -> pd.DataFrame:
    """Per rooted collective, topology and solver: time / bound over every root (min, median, max), how many
    roots meet the bound, and on the instances CP-SAT ran, the ratio to its time on the same root (Reduce and
    Gather against the Broadcast and Scatter of the same root: the mirrored problem has the same optimum)."""
    r = good[good["part"].isin(ROOT_PARTS)].copy()
    if r.empty:
        return r
    r["ratio"] = r["collective_time_us"] / r["lower_bound_us"]
    for part, label in ABLATION_LABELS.items():
        r.loc[r["part"] == part, "solver"] = label
    mirror = {"reduce": "broadcast", "gather": "scatter"}
    exact = r[r["solver"] == "cpsat"].set_index(["topology", "collective", "root"])
    rows = []
    for (kind, topo, solver), g in r.groupby(["collective", "topology", "solver"], sort=False):
        row = {"collective": kind, "topology": topo, "solver": solver, "roots": g["root"].nunique(),
               "min": g["ratio"].min(), "median": g["ratio"].median(), "max": g["ratio"].max(),
               "at bound": int((g["ratio"] <= 1 + 1e-6).sum())}
        if not exact.empty and solver != "cpsat":
            base = mirror.get(kind, kind)
            ref = [(t, exact.loc[(topo, base, int(root))]) for root, t in zip(g["root"], g["collective_time_us"])
                   if (topo, base, int(root)) in exact.index]
            if ref:
                vs = [t / float(e["collective_time_us"]) for t, e in ref]
                row.update({"vs cpsat max": max(vs), "vs cpsat median": float(pd.Series(vs).median())})
        if solver == "cpsat":
            row["cpsat optimal"] = int((g["status"] == "optimal").sum())
        rows.append(row)
    order = {k: i for i, k in enumerate(KINDS)}
    out = pd.DataFrame(rows)
    if "cpsat optimal" in out:
        out["cpsat optimal"] = out["cpsat optimal"].astype("Int64")
    return out.sort_values(["collective", "topology", "solver"],
                                          key=lambda c: c.map(order) if c.name == "collective" else c)


def failure_table(good: pd.DataFrame) -> pd.DataFrame:
    f = good[good["fault_random_links"].notna()].copy() if "fault_random_links" in good else good.iloc[0:0]
    if f.empty:
        return f
    f["loss"] = f["repaired_time_us"] / f["scratch_time_us"] - 1.0
    f["healthy_over_scratch"] = f["healthy_time_us"] / f["scratch_time_us"]
    f["synth_ratio"] = f["repair_synthesis_time_s"] / f["scratch_synthesis_time_s"]
    f["bound_over_scratch"] = f["repair_bound_us"] / f["scratch_time_us"]
    f["replanned"] = f["repair_plan"] == "replan"
    g = f.groupby(["topology", "collective", "fault_random_links"])
    out = pd.DataFrame({
        "NPUs": g["num_npus"].first(), "runs": g.size(),
        "repaired/scratch mean": g["loss"].mean() + 1.0, "repaired/scratch max": g["loss"].max() + 1.0,
        "repaired/repair bound mean": g["repaired_over_bound"].mean(),
        "repair bound/scratch max": g["bound_over_scratch"].max(), "replan kept": g["replanned"].sum(),
        "lost transfers": g["repair_lost_transfers"].mean(),
        "repair s": g["repair_synthesis_time_s"].mean(), "scratch s": g["scratch_synthesis_time_s"].mean(),
        "repair/scratch synthesis": g["synth_ratio"].mean()})
    out = out.reset_index().rename(columns={"fault_random_links": "failed links"})
    out["failed links"] = out["failed links"].astype(int)
    return out


def failure_overall(good: pd.DataFrame) -> str:
    """One line per collective over the failure sweep of the 64-NPU-class instances (part ``failures``)."""
    f = good[(good["part"] == "failures") & good["fault_random_links"].notna()] if "part" in good else good.iloc[0:0]
    lines = []
    for kind, g in f.groupby("collective", sort=False):
        r = g["repaired_time_us"] / g["scratch_time_us"]
        rb = g["repaired_over_bound"]
        hopeless = int((g["repair_bound_us"] > g["scratch_time_us"] * 1.10).sum())
        lines.append(f"- {kind}: repaired / scratch mean {r.mean():.3f}, worst {r.max():.3f}; repaired / repair "
                     f"bound mean {rb.mean():.3f}, worst {rb.max():.3f}; {hopeless} of {len(g)} runs have a repair "
                     "bound above 1.10x the scratch time (no repair can be within 1.10x there)")
    return "\n".join(lines) + ("\n" if lines else "")


def main():
    args = parse_args(__doc__.splitlines()[0], NAME)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frames = []
    rerun = None if args.parts is None else set(args.parts.split(","))
    for part, over in sweeps(args.quick):
        sub = out / part
        keep = args.plot_only or (rerun is not None and part not in rerun)
        frames.append((load_part(sub, NAME, part) if keep else run_sweep(NAME, sub, over, args.jobs)).assign(part=part))
    df = pd.concat(frames, ignore_index=True)
    df.to_parquet(out / "results.parquet", index=False)
    good = ok_rows(df)
    healthy = good[good["fault_at_us"].isna()] if "fault_at_us" in good else good
    roots = roots_table(good)
    healthy = healthy[~healthy["part"].isin(ROOT_PARTS)]
    wide = summarize(healthy)
    fails = failure_table(good)
    from tacos_bench.plots import plot_bars

    h = healthy.copy()
    h["case"] = h["collective"] + " " + h["topology"]
    h["time / bound"] = h["collective_time_us"] / h["lower_bound_us"]
    h = h[h["solver"].isin(("greedy", "greedy_plus", *BASELINES))]
    figs = [plot_bars(h.sort_values(["collective", "num_npus"]), "case", "time / bound", "solver",
                      out / f"{NAME}.png", title="Verified time / best lower bound", ylabel="time / bound",
                      logy=True)]
    if not fails.empty:
        f = good[good["fault_random_links"].notna()].copy()
        f["repaired / from scratch"] = f["repaired_time_us"] / f["scratch_time_us"]
        f["links"] = f["fault_random_links"].astype(int).astype(str) + " link(s)"
        figs.append(plot_bars(f.sort_values("fault_random_links"), "collective", "repaired / from scratch", "links",
                              out / f"{NAME}_failures.png", spread=True, zoom=True,
                              title="Repair at half the healthy time vs a from-scratch synthesis on the degraded "
                                    "topology (greedy; mean, min-max over topologies and seeds)"))
    cols = [c for c in ("collective", "topology", "NPUs", "bound_us", "bound", "greedy", "greedy_plus", "cpsat",
                        "milp", "best_baseline", "which_baseline", "greedy_vs_best_baseline") if c in wide]
    body = ("## Healthy topologies\n\nVerified collective time divided by the best lower bound (`lower_bound_us`: "
            "ingress/egress, distance, pipeline, link load, cut or the drain bound of docs/bounds.md; 1.000 = "
            "optimal). Broadcast and Reduce move 8 chunks, the others 1 chunk per NPU (pair); 64 MiB. "
            "`best_baseline` is the best of direct, pairwise, bruck, binomial and chain that runs the collective; "
            "`greedy_vs_best_baseline` < 1 means the greedy is faster. The exact backends ran 60 s each "
            "(an empty cell: no schedule in time or not run).\n\n" + to_markdown(wide[cols], ".3f"))
    if not roots.empty:
        body += ("\n## Every root\n\nBroadcast and Reduce (8 chunks) and Gather and Scatter (1 chunk per NPU) from "
                 "every NPU as root, 64 MiB: time / the best lower bound over the roots (`at bound`: roots within "
                 "1e-6 of it). `vs cpsat`: the time over CP-SAT's on the same root (warm start, 20 s, its default "
                 "model on the 16-NPU instances and the continuous one on hetero64; Reduce and Gather against the "
                 "Broadcast and Scatter of that root, their mirrors); `cpsat optimal`: roots CP-SAT proved (the "
                 "schedule is then optimal, and another solver's ratio above 1.000 with `vs cpsat` 1.000 means the "
                 "bound is loose there; a CP-SAT row's own bound includes what it proved). `greedy_plus, no "
                 "relabel/reserve`: `solver.relabel_tries=0 solver.reserve_tries=0 solver.broadcast_reserve_tries=0` "
                 "(roots 0-15 only), what its rooted candidates add; `greedy_plus, relabel_tries=0` and `greedy_plus, "
                 "broadcast_reserve_tries=0` (Broadcast, roots 0-15): one of them off. A torus is "
                 "vertex-transitive, so a spread over its roots is the heuristic's dependence on node ids.\n\n"
                 + to_markdown(roots, ".4f"))
    if not fails.empty:
        body += ("\n## Failures and repair\n\nRandom links (both directions) fail at half the healthy schedule's "
                 "time; the greedy keeps what was executed and re-synthesizes the rest from the state at the fault "
                 "(solvers/repair.py); `repaired/scratch` compares the whole executed schedule with a from-scratch "
                 "greedy synthesis on the degraded topology (below 1: the repair is faster). Synthesis times are "
                 "wall seconds of the repair (state, re-synthesis, placement) and of the from-scratch run. "
                 "`repair bound` bounds any repair from the state at the fault (`tacos_bench.faults."
                 "repair_bound_us`: the executed prefix stays, each missing copy leaves a surviving holder at the "
                 "fault at the earliest, each survivor's in-links are free from the fault or their in-flight "
                 "transfer's end); `replan kept`: runs where the fresh schedule less what is held beat the resume "
                 "(docs/collectives.md).\n\n" + failure_overall(good) + "\n" + to_markdown(fails, ".3f"))
    cmd = "python experiments/study_collectives.py" + (" --quick" if args.quick else "") + (
        f" --jobs {args.jobs}" if args.jobs > 1 else "")
    write_report(out, NAME, "Study: every collective, and synthesis through link failures", cmd,
                 body + "\n" + error_summary(df), figs, args.docs)


if __name__ == "__main__":
    main()
