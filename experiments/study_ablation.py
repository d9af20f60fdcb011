"""Study (c): ablation of the greedy's heuristics (chunk order x link tie-break x matching x restarts) over seeds,
and of the topology-aware rules of greedy_plus (each added to the TACOS rule, each removed from greedy_plus).

    python experiments/study_ablation.py [--jobs 2] [--docs docs/studies]
    python experiments/study_ablation.py redraw-rules docs/studies   # the rules figure from its stored table

Reports mean, std, min and max of collective time / lower bound over seeds for each
combination, per topology (All-Gather, 1 GiB, 1 chunk per NPU). The rule ablation's figure is a heatmap of
configuration x topology with the ratio written in each cell (``ablation_rules.png``); its runs are stored as
``ablation_rules.parquet`` beside the report, from which ``redraw-rules`` redraws it without running anything
(a report written before that table existed: from the report's markdown table of means).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from _study import Study, ok_rows, run_sweep, to_markdown

NAME = "ablation"
QUICK = ["topo.name=torus4x4,hetero_mesh4x4", "seed=0",
         "solver.restarts=1", "solver.chunk_order=random,rarest",
         "solver.link_tiebreak=earliest_finish", "solver.matching=greedy"]
KEYS = ["p_solver_chunk_order", "p_solver_link_tiebreak", "p_solver_matching", "p_solver_restarts"]
# the topology-aware rules (docs/greedy.md): greedy_plus = all of them; each variant adds one rule to the TACOS rule
# (solver=greedy) or removes one from greedy_plus
PLUS = {"imports": "near", "import_gate": 0.5, "chunk_order": "local_rarest", "link_order": "fewest_first",
        "group_matching": "true"}
TACOS = {"imports": "all", "import_gate": 0.0, "chunk_order": "random", "link_order": "chunk_first",
         "group_matching": "false", "decompose": "false", "tacos_candidate": "false"}
RULES = {
    "TACOS rule (greedy)": {},
    "+ near imports, gate 0.5": {"imports": "near", "import_gate": 0.5},
    "+ near imports, no gate": {"imports": "near"},
    "+ group imports": {"imports": "group"},
    "+ local_rarest": {"chunk_order": "local_rarest"},
    "+ fewest_first links": {"link_order": "fewest_first"},
    "+ group matching": {"group_matching": "true"},
    "+ decomposition": {"decompose": "true"},
    "greedy_plus rules": dict(PLUS),
    "greedy_plus - near imports": {**PLUS, "imports": "all", "import_gate": 0.0},
    "greedy_plus - gate": {**PLUS, "import_gate": 0.0},
    "greedy_plus - local_rarest": {**PLUS, "chunk_order": "random"},
    "greedy_plus - fewest_first": {**PLUS, "link_order": "chunk_first"},
    "greedy_plus - group matching": {**PLUS, "group_matching": "false"},
    "greedy_plus (rules, TACOS rule, decomposition: fastest)": {**PLUS, "decompose": "true",
                                                                 "tacos_candidate": "true"},
}
RULE_TOPOS = "hetero64,hetero512,three_tier4x4x8,unequal4-8-6-2-4-8-6-2,hetero_mesh8x8,torus8x8"


def rule_sweeps(quick: bool) -> list[tuple[str, list[str]]]:
    topos = "hetero_mesh4x4,torus4x4" if quick else RULE_TOPOS
    seeds = "0" if quick else "0,1,2"
    names = ["greedy_plus rules"] if quick else list(RULES)
    out = []
    for name in names:
        over = {**TACOS, **RULES[name]}
        out.append((name, [f"topo.name={topos}", f"seed={seeds}", "solver.restarts=1", "solver.matching=greedy",
                           "solver.link_tiebreak=earliest_finish", *[f"solver.{k}={v}" for k, v in over.items()]]))
    return out


RULES_TITLE = "Topology-aware rules of greedy_plus: time / lower bound (All-Gather, 1 GiB, 1 chunk per NPU)"
RULES_TABLE = f"{NAME}_rules.parquet"
# separators of the heatmap: the TACOS rule | one rule added | greedy_plus's rules | one rule removed | greedy_plus
RULE_BREAKS = (1, 8, 9, 14)


def rules_wide(good: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean time / lower bound per configuration x topology (rows in :data:`RULES` order, columns in
    :data:`RULE_TOPOS` order), and the min-max over seeds as text where the seeds differ."""
    agg = good.groupby(["rules", "topology"])["ratio"].agg(["mean", "min", "max"])
    wide = agg["mean"].unstack()
    rows = [n for n in RULES if n in wide.index] + [n for n in wide.index if n not in RULES]
    topos = RULE_TOPOS.split(",")
    cols = [t for t in topos if t in wide.columns] + [t for t in wide.columns if t not in topos]
    spread = (agg.apply(lambda r: f"{r['min']:.3f}–{r['max']:.3f}" if r["max"] - r["min"] > 5e-4 else "", axis=1)
              .unstack().reindex(index=rows, columns=cols).fillna(""))
    return wide.reindex(index=rows, columns=cols), spread


def plot_rules(wide: pd.DataFrame, path: Path, spread: pd.DataFrame | None = None) -> Path:
    """The rule ablation's figure: one cell per configuration and topology, the ratio written in it."""
    from tacos_bench.plots import plot_heatmap

    breaks = RULE_BREAKS if list(wide.index) == list(RULES) else ()
    seeds = "; under it the min–max over seeds where they differ" if spread is not None else ""
    return plot_heatmap(wide, path, title=f"{RULES_TITLE}\ncell: mean over seeds{seeds}",
                        value_label="time / lower bound (1 = provably optimal)", fmt="{:.4f}", floor=1.0,
                        row_breaks=breaks, spread=spread)


def rules_report(st: Study) -> tuple[str, list]:
    """The rule ablation: sweeps of its own, one table and one figure."""
    frames = []
    for i, (name, over) in enumerate(rule_sweeps(st.args.quick)):
        sub = st.out / "rules" / f"v{i:02d}"
        df = (pd.read_parquet(sub / "sweep" / "results.parquet") if st.args.plot_only
              else run_sweep(NAME, sub, over, st.args.jobs))
        df["rules"] = name
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    keep = [c for c in ("rules", "topology", "seed", "solver", "status", "valid", "collective_time_us",
                        "lower_bound_us", "error") if c in df.columns]
    df[keep].to_parquet(st.out / RULES_TABLE, index=False)
    if st.args.docs:
        Path(st.args.docs).mkdir(parents=True, exist_ok=True)
        df[keep].to_parquet(Path(st.args.docs) / RULES_TABLE, index=False)
    good = ok_rows(df)
    good["ratio"] = good["collective_time_us"] / good["lower_bound_us"]
    wide, spread = rules_wide(good)
    fig = plot_rules(wide, st.out / f"{NAME}_rules.png", spread)
    errs = df[(df["status"] == "error") | ~(df["valid"].astype("boolean").fillna(False))]
    body = ("\n## Topology-aware rules (greedy_plus)\n\nAll-Gather, 1 GiB, 1 chunk per NPU, mean of time / lower "
            "bound over seeds; each `+` row adds one rule to the TACOS rule, each `-` row removes one from "
            "greedy_plus's rules; the last row is `solver=greedy_plus` (the fastest of its rules, one TACOS run and "
            "the tier decomposition; docs/greedy.md).\n\n" + to_markdown(wide.reset_index(), ".4f")
            + (f"\n{len(errs)} rule run(s) failed.\n" if len(errs) else ""))
    return body, [fig]


# greedy_plus's All-Gather candidates one at a time, all of them, and a user's chunk priority loaded by import path
# (examples/my_priority.py) in the greedy: the same route (solver.candidates=, solver.chunk_order=module:function)
# a user's own ablation takes
PORTFOLIO_CANDIDATES = ("decomposition", "tacos", "rules", "rarest", "trees", "list")
USER_PRIORITY = "examples.my_priority:rarest_then_lowest_id"
PORTFOLIO_TOPOS = "hetero64,three_tier4x4x8,hetero_mesh8x8,torus8x8"


def portfolio_sweeps(quick: bool) -> list[tuple[str, list[str]]]:
    topos = "hetero_mesh4x4" if quick else PORTFOLIO_TOPOS
    names = ("rules", "tacos") if quick else PORTFOLIO_CANDIDATES
    lists = ",".join(f"[{n}]" for n in names) + ",null"
    out = [("portfolio", [f"topo.name={topos}", "seed=0", "solver=greedy_plus", f"solver.candidates={lists}"])]
    if not quick:
        out.append(("user priority", [f"topo.name={topos}", "seed=0", "solver=greedy", "solver.restarts=1",
                                      f"solver.chunk_order=random,rarest,{USER_PRIORITY}"]))
    return out


def portfolio_report(st: Study) -> str:
    """Each candidate of greedy_plus alone against the whole portfolio, and a user's chunk priority beside the
    built-in orders: time / lower bound and synthesis time, per topology."""
    frames = []
    for i, (name, over) in enumerate(portfolio_sweeps(st.args.quick)):
        sub = st.out / "portfolio" / f"p{i}"
        frames.append(pd.read_parquet(sub / "sweep" / "results.parquet") if st.args.plot_only
                      else run_sweep(f"{NAME}_portfolio", sub, over, st.args.jobs))
    good = ok_rows(pd.concat(frames, ignore_index=True))
    good["ratio"] = good["collective_time_us"] / good["lower_bound_us"]
    cand = good["p_solver_candidates"] if "p_solver_candidates" in good else pd.Series(None, index=good.index)
    good["configuration"] = [
        (f"greedy_plus candidates={c}" if isinstance(c, str) and c not in ("", "null", "None")
         else "greedy_plus (every candidate)") if s == "greedy_plus" else f"greedy chunk_order={o}"
        for s, c, o in zip(good["solver"], cand, good.get("p_solver_chunk_order", pd.Series("", index=good.index)))]
    wide = good.pivot_table(index="configuration", columns="topology", values="ratio", aggfunc="mean")
    times = good.pivot_table(index="configuration", columns="topology", values="synthesis_time_s", aggfunc="mean")
    return ("\n## The portfolio, one candidate at a time, and a user's chunk priority\n\nAll-Gather, 1 GiB, 1 chunk "
            "per NPU, seed 0: `solver=greedy_plus solver.candidates=[X]` runs candidate X alone (`null`: the whole "
            f"portfolio, the fastest kept); `solver=greedy solver.chunk_order={USER_PRIORITY}` is a user's score "
            "compiled into the matching kernel (examples/my_priority.py). Time / lower bound:\n\n"
            + to_markdown(wide.reset_index(), ".4f") + "\nSynthesis time (s):\n\n"
            + to_markdown(times.reset_index(), ".3f"))


def _markdown_rules(md: Path) -> pd.DataFrame:
    """The means table of the report's rules section (``| rules | <topology> ... |``)."""
    if not md.is_file():
        raise SystemExit(f"{md}: no such report, and no {RULES_TABLE} beside it: nothing to redraw from")
    text = md.read_text()
    if "## Topology-aware rules" not in text:
        raise SystemExit(f"{md}: no rules section to redraw from")
    section = text[text.index("## Topology-aware rules"):]
    nxt = section.find("\n## ", 1)   # the section ends at the next heading (the portfolio's tables follow it)
    lines = [ln for ln in (section if nxt < 0 else section[:nxt]).splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    wide = pd.DataFrame(rows, columns=head).set_index("rules")
    return wide.apply(pd.to_numeric, errors="coerce")


def redraw_rules(docs: Path) -> Path:
    """``ablation_rules.png`` in ``docs`` from the stored rule runs (``ablation_rules.parquet``), else from the
    report's table of means; nothing is run."""
    table = docs / RULES_TABLE
    if table.is_file():
        good = ok_rows(pd.read_parquet(table))
        good["ratio"] = good["collective_time_us"] / good["lower_bound_us"]
        wide, spread = rules_wide(good)
    else:
        wide, spread = _markdown_rules(docs / f"{NAME}.md"), None
        rows = [n for n in RULES if n in wide.index] + [n for n in wide.index if n not in RULES]
        topos = RULE_TOPOS.split(",")
        cols = [t for t in topos if t in wide.columns] + [t for t in wide.columns if t not in topos]
        wide = wide.reindex(index=rows, columns=cols)
    out = plot_rules(wide, docs / f"{NAME}_rules.png", spread)
    print(f"wrote {out} and {out.with_suffix('.csv')} ({'runs' if table.is_file() else 'markdown means'})")
    return out


def main():
    st = Study(__file__, __doc__, NAME, QUICK)
    out, good = st.out, st.good
    good["ratio"] = good["collective_time_us"] / good["lower_bound_us"]
    good["order/tiebreak"] = good["p_solver_chunk_order"] + "/" + good["p_solver_link_tiebreak"]
    good["matching/restarts"] = good["p_solver_matching"] + "/k=" + good["p_solver_restarts"].astype(str)
    table = (good.groupby(["topology"] + KEYS)["ratio"].agg(["mean", "std", "min", "max", "count"])
             .reset_index().sort_values(["topology", "mean"]))
    table = table.rename(columns={k: k.replace("p_solver_", "") for k in KEYS})
    from tacos_bench.plots import plot_bars

    figs = []
    for topo, g in good.groupby("topology"):
        figs.append(plot_bars(g, "order/tiebreak", "ratio", "matching/restarts", out / f"{NAME}_{topo}.png",
                              title=f"greedy ablation on {topo}: time / lower bound (mean, min-max over seeds)",
                              ylabel="time / lower bound", spread=True, zoom=True))
    best = table.groupby("topology").head(3)
    body = ("Collective time divided by the lower bound (1.0 = provably optimal), over seeds. "
            "Best three variants per topology:\n\n" + to_markdown(best, ".4f")
            + "\nAll variants:\n\n" + to_markdown(table, ".4f"))
    more, rule_figs = rules_report(st)
    more += portfolio_report(st)
    st.report("Study (c): greedy heuristic ablation", body + more, figs + rule_figs)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "redraw-rules":
        redraw_rules(Path(sys.argv[2] if len(sys.argv) > 2 else "docs/studies"))
    else:
        main()
