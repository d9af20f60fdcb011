"""Study (d): All-Reduce collective time vs message size (latency- vs bandwidth-bound regime).

    python experiments/study_message_size.py [--jobs 2] [--docs docs/studies]
"""

from __future__ import annotations

from pathlib import Path

from _study import error_summary, load, ok_rows, parse_args, run_sweep, to_markdown, write_report

NAME = "message_size"
QUICK = ["topo.name=torus4x4", "solver=greedy,ring",
         "collective.buffer_mib=0.0009765625,1,64"]


def main():
    args = parse_args(__doc__.splitlines()[0], NAME)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = load(out) if args.plot_only else run_sweep(NAME, out, QUICK if args.quick else [], args.jobs)
    good = ok_rows(df)
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
    body = "Collective time (µs) per collective size:\n\n" + to_markdown(wide, ".2f") + "\n" + error_summary(df)
    cmd = "python experiments/study_message_size.py" + (" --quick" if args.quick else "") + (
        f" --jobs {args.jobs}" if args.jobs > 1 else "")
    write_report(out, NAME, "Study (d): collective time vs message size", cmd, body, figs, args.docs)


if __name__ == "__main__":
    main()
