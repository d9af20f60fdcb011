"""Study (c): ablation of the greedy's heuristics (chunk order x link tie-break x matching x restarts) over seeds.

    python experiments/study_ablation.py [--jobs 2] [--docs docs/studies]

Reports mean, std, min and max of collective time / lower bound over seeds for each
combination, per topology (All-Gather, 1 GiB, 1 chunk per NPU).
"""

from __future__ import annotations


from _study import Study, to_markdown

NAME = "ablation"
QUICK = ["topo.name=torus4x4,hetero_mesh4x4", "seed=0,1",
         "solver.restarts=1,2", "solver.chunk_order=random,rarest",
         "solver.link_tiebreak=earliest_finish,random", "solver.matching=greedy"]
KEYS = ["p_solver_chunk_order", "p_solver_link_tiebreak", "p_solver_matching", "p_solver_restarts"]


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
    st.report("Study (c): greedy heuristic ablation", body, figs)


if __name__ == "__main__":
    main()
