"""Study (d): All-Reduce collective time vs message size (latency- vs bandwidth-bound regime).

    python experiments/study_message_size.py [--jobs 2] [--docs docs/studies]
"""

from __future__ import annotations


from _study import Study, to_markdown

NAME = "message_size"
QUICK = ["topo.name=torus4x4", "solver=greedy,ring",
         "collective.buffer_mib=0.0009765625,64"]


def main():
    st = Study(__file__, __doc__, NAME, QUICK)
    out, good = st.out, st.good
    good["buffer_bytes"] = (good["buffer_mib"] * 2**20).round().astype("int64")
    from tacos_bench.plots import plot_lines

    figs = []
    for topo, g in good.groupby("topology"):
        figs.append(plot_lines(g, "buffer_bytes", "collective_time_us", "solver", out / f"{NAME}_{topo}_time.png",
                               logx=True, logy=True, title=f"All-Reduce on {topo}", xlabel="collective size (bytes)",
                               ylabel="collective time (µs)"))
        figs.append(plot_lines(g, "buffer_bytes", "algbw_GBps", "solver", out / f"{NAME}_{topo}_algbw.png",
                               logx=True, title=f"All-Reduce algorithmic bandwidth on {topo}",
                               xlabel="collective size (bytes)", ylabel="algbw (GB/s)"))
    wide = good.pivot_table(index=["topology", "buffer_bytes"], columns="solver", values="collective_time_us",
                            aggfunc="min").reset_index()
    body = "Collective time (µs) per collective size:\n\n" + to_markdown(wide, ".2f")
    st.report("Study (d): collective time vs message size", body, figs)


if __name__ == "__main__":
    main()
