"""Study (c): ablation of the greedy's heuristics (chunk order x link tie-break x matching x restarts) over seeds,
and of the topology-aware rules of greedy_plus (each added to the TACOS rule, each removed from greedy_plus).

    python experiments/study_ablation.py [--jobs 2] [--docs docs/studies]

Reports mean, std, min and max of collective time / lower bound over seeds for each
combination, per topology (All-Gather, 1 GiB, 1 chunk per NPU).
"""

from __future__ import annotations


import pandas as pd

from _study import Study, ok_rows, run_sweep, to_markdown

NAME = "ablation"
QUICK = ["topo.name=torus4x4,hetero_mesh4x4", "seed=0",
         "solver.restarts=1", "solver.chunk_order=random,rarest",
         "solver.link_tiebreak=earliest_finish,random", "solver.matching=greedy"]
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
    topos = "hetero64,torus4x4" if quick else RULE_TOPOS
    seeds = "0" if quick else "0,1,2"
    names = ["TACOS rule (greedy)", "greedy_plus rules"] if quick else list(RULES)
    out = []
    for name in names:
        over = {**TACOS, **RULES[name]}
        out.append((name, [f"topo.name={topos}", f"seed={seeds}", "solver.restarts=1", "solver.matching=greedy",
                           "solver.link_tiebreak=earliest_finish", *[f"solver.{k}={v}" for k, v in over.items()]]))
    return out


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
    good = ok_rows(df)
    good["ratio"] = good["collective_time_us"] / good["lower_bound_us"]
    wide = good.groupby(["rules", "topology"])["ratio"].mean().unstack()
    wide = wide.reindex([n for n in RULES if n in wide.index])
    from tacos_bench.plots import plot_bars

    fig = plot_bars(good, "topology", "ratio", "rules", st.out / f"{NAME}_rules.png", spread=True,
                    title="Topology-aware rules: time / lower bound (mean, min-max over seeds)",
                    ylabel="time / lower bound")
    errs = df[(df["status"] == "error") | ~(df["valid"].astype("boolean").fillna(False))]
    body = ("\n## Topology-aware rules (greedy_plus)\n\nAll-Gather, 1 GiB, 1 chunk per NPU, mean of time / lower "
            "bound over seeds; each `+` row adds one rule to the TACOS rule, each `-` row removes one from "
            "greedy_plus's rules; the last row is `solver=greedy_plus` (the fastest of its rules, one TACOS run and "
            "the tier decomposition; docs/greedy.md).\n\n" + to_markdown(wide.reset_index(), ".4f")
            + (f"\n{len(errs)} rule run(s) failed.\n" if len(errs) else ""))
    return body, [fig]


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
    st.report("Study (c): greedy heuristic ablation", body + more, figs + rule_figs)


if __name__ == "__main__":
    main()
