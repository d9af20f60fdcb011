"""Figures people look at: a schedule's Gantt chart and link-utilization timeline, scaling plots.

Plots of studies read only the results table (a DataFrame of run records),
never solver objects. matplotlib is imported lazily with the Agg backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .problem import Problem
from .schedule import Schedule


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def utilization_timeline(problem: Problem, schedule: Schedule, bins: int = 200):
    """Fraction of links busy over time: ``(bin_edges_us, busy_fraction)``.

    Examples
    --------
    >>> from tacos_bench.generators import ring
    >>> from tacos_bench import Collective
    >>> p = Problem(ring(2), Collective("all_gather", 1, 4))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, t, 2 * t, "copy")])
    >>> edges, frac = utilization_timeline(p, s, bins=2)
    >>> frac.tolist()
    [0.5, 0.5]
    """
    T = max(schedule.makespan_us, 1e-12)
    edges = np.linspace(0.0, T, bins + 1)
    lo = np.sort(np.clip(schedule.start_us, 0, T))
    hi = np.sort(np.clip(schedule.end_us, 0, T))
    # Busy link-time inside [0, x] summed over transfers = sum_{lo<=x}(x-lo) - sum_{hi<=x}(x-hi),
    # evaluated at every bin edge with prefix sums: O((T + bins) log T), no per-transfer loop.
    cum_lo = np.concatenate([[0.0], np.cumsum(lo)])
    cum_hi = np.concatenate([[0.0], np.cumsum(hi)])
    k_lo = np.searchsorted(lo, edges, side="right")
    k_hi = np.searchsorted(hi, edges, side="right")
    covered = (k_lo * edges - cum_lo[k_lo]) - (k_hi * edges - cum_hi[k_hi])
    busy = np.diff(covered)
    frac = busy / (np.diff(edges) * max(problem.num_links, 1))
    return edges, np.clip(frac, 0.0, 1.0)


def plot_schedule(problem: Problem, schedule: Schedule, path, *, max_links: int = 64, title: str | None = None):
    """Gantt chart (one row per directed link, one bar per transfer, coloured by chunk) above the
    link-utilization timeline. Only the first ``max_links`` links are drawn on large topologies."""
    plt = _plt()
    topo = problem.topology
    link = topo.link_ids(schedule.src, schedule.dst)
    shown = link < max_links
    n_rows = min(topo.num_links, max_links)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 3 + 0.12 * n_rows), sharex=True,
                                  gridspec_kw={"height_ratios": [max(3, n_rows * 0.12), 1.2]})
    cmap = plt.get_cmap("tab20")
    C = max(problem.num_chunks, 1)
    for lid, s, e, c, op in zip(link[shown], schedule.start_us[shown], schedule.end_us[shown],
                                schedule.chunk[shown], schedule.op[shown]):
        ax.barh(int(lid), float(e - s), left=float(s), height=0.8, color=cmap(int(c) % 20),
                edgecolor="black" if op else "none", linewidth=0.4)
    ax.set_ylabel("directed link id")
    ax.set_ylim(-0.5, n_rows - 0.5)
    ax.invert_yaxis()
    if n_rows <= 32:
        ax.set_yticks(range(n_rows))
        ax.set_yticklabels([f"{u}->{v}" for u, v in zip(topo.src[:n_rows], topo.dst[:n_rows])], fontsize=6)
    extra = f" (first {n_rows} of {topo.num_links} links)" if topo.num_links > n_rows else ""
    ax.set_title(title or f"{problem.kind} on {topo.name}: {len(schedule)} transfers, {C} chunks{extra}")
    edges, frac = utilization_timeline(problem, schedule)
    ax2.fill_between(edges[:-1], frac, step="post", alpha=0.6)
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("links busy")
    ax2.set_xlabel("time (µs)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_lines(df, x: str, y: str, group: str, path, *, logx=False, logy=False, title="", xlabel=None,
               ylabel=None, err: str | None = None):
    """One line per value of ``group`` (mean of ``y`` per ``x``; error bars from ``err`` or the std)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, g in df.groupby(group, sort=True):
        agg = g.groupby(x)[y].agg(["mean", "std", "count"]).reset_index().sort_values(x)
        yerr = agg["std"].fillna(0) if err is None else None
        ax.errorbar(agg[x], agg["mean"], yerr=yerr, marker="o", capsize=3, label=str(name))
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_bars(df, category: str, value: str, group: str, path, *, title="", ylabel=None, logy=False,
              spread: bool = False, zoom: bool = False):
    """Grouped bars: one group of bars per ``category``, one bar per ``group`` value (mean of ``value``).

    ``spread`` adds min-max whiskers over repeated rows (e.g. seeds); ``zoom`` starts the y axis just below
    the smallest bar so that small relative differences stay visible.
    """
    plt = _plt()
    cats = list(dict.fromkeys(df[category]))
    groups = sorted(df[group].unique())
    width = 0.8 / max(len(groups), 1)
    fig, ax = plt.subplots(figsize=(min(16, max(7, 0.18 * len(cats) * max(1, len(groups)))), 5))
    x = np.arange(len(cats))
    lows = []
    for i, gname in enumerate(groups):
        g = df[df[group] == gname].groupby(category)[value].agg(["mean", "min", "max"])
        mean = np.array([g["mean"].get(c, np.nan) for c in cats])
        yerr = None
        if spread:
            lo = np.array([g["min"].get(c, np.nan) for c in cats])
            hi = np.array([g["max"].get(c, np.nan) for c in cats])
            yerr = np.clip(np.vstack([mean - lo, hi - mean]), 0.0, None)  # rounding: a mean a hair below its min
            lows.append(np.nanmin(lo))
        lows.append(np.nanmin(mean))
        ax.bar(x + i * width, mean, width, label=str(gname), yerr=yerr, capsize=2 if spread else 0)
    ax.set_xticks(x + width * (len(groups) - 1) / 2)
    ax.set_xticklabels(cats, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel or value)
    if logy:
        ax.set_yscale("log")
    elif zoom and lows:
        ax.set_ylim(bottom=0.98 * float(np.nanmin(lows)))
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_sweep(df, x: str, y: str, hue: str, path, *, logx: bool = False, logy: bool = False,
               title: str | None = None):
    """A sweep's figure from its results table: mean ``y`` against ``x``, one line per ``hue`` value.

    Only runs with a verified schedule are drawn (error rows and rejected schedules never make a point).

    Examples
    --------
    >>> import pandas as pd, tempfile, os
    >>> df = pd.DataFrame({"num_npus": [16, 64, 16, 64], "synthesis_time_s": [0.1, 0.4, 1.0, 9.0],
    ...                    "solver": ["greedy", "greedy", "cpsat", "cpsat"], "status": ["feasible"] * 4,
    ...                    "valid": [True] * 4})
    >>> out = plot_sweep(df, "num_npus", "synthesis_time_s", "solver", os.path.join(tempfile.mkdtemp(), "f.png"))
    >>> out.exists()
    True
    """
    from .errors import ConfigError

    missing = [c for c in (x, y, hue) if c not in df.columns]
    if missing:
        raise ConfigError(f"the results table has no column(s) {', '.join(missing)}; columns: "
                          f"{', '.join(sorted(map(str, df.columns)))}")
    ok = (df["status"] != "error") & df["valid"].astype("boolean").fillna(False) if "valid" in df else \
        df["status"] != "error"
    good = df[ok & df[y].notna() & df[x].notna()]
    if good.empty:
        raise ConfigError(f"no verified run has both {x} and {y}")
    return plot_lines(good, x, y, hue, path, logx=logx, logy=logy, title=title or f"{y} vs {x}")


def _sweep_main(argv) -> int:
    """``python -m tacos_bench.plots sweep SWEEP_DIR --x num_npus --y synthesis_time_s --hue solver [--logy]``"""
    import argparse
    import sys

    import pandas as pd

    from .errors import TacosError

    ap = argparse.ArgumentParser(prog="python -m tacos_bench.plots sweep",
                                 description="A sweep's figure from its results.parquet (nothing else is read).")
    ap.add_argument("sweep", help="a sweep directory holding results.parquet (or the parquet file itself)")
    ap.add_argument("--x", default="num_npus", help="column on the x axis (default num_npus)")
    ap.add_argument("--y", default="synthesis_time_s", help="column on the y axis, e.g. synthesis_time_s, gap, "
                                                            "collective_time_us (default synthesis_time_s)")
    ap.add_argument("--hue", default="solver", help="one line per value of this column (default solver)")
    ap.add_argument("--logx", action="store_true")
    ap.add_argument("--logy", action="store_true")
    ap.add_argument("-o", "--output", default=None, help="PNG to write (default SWEEP/<y>_vs_<x>.png)")
    args = ap.parse_args(argv)
    src = Path(args.sweep)
    table = src if src.suffix == ".parquet" else src / "results.parquet"
    if not table.is_file():
        print(f"plots: error: {table}: no results table (a sweep writes it when it ends; "
              f"python -m tacos_bench.collect {src} makes one)", file=sys.stderr)
        return 2
    out = Path(args.output) if args.output else table.parent / f"{args.y}_vs_{args.x}.png"
    try:
        plot_sweep(pd.read_parquet(table), args.x, args.y, args.hue, out, logx=args.logx, logy=args.logy)
    except TacosError as e:
        print(f"plots: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    """``python -m tacos_bench.plots RESULT_DIR [-o gantt.png]``: Gantt chart + utilization of a run;
    ``python -m tacos_bench.plots sweep SWEEP_DIR --x ... --y ... --hue ...``: a sweep's figure."""
    import argparse
    import sys

    from .errors import TacosError

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "sweep":
        return _sweep_main(argv[1:])
    if argv and argv[0] == "gantt":
        argv = argv[1:]
    ap = argparse.ArgumentParser(prog="python -m tacos_bench.plots", description=main.__doc__)
    ap.add_argument("result_dir", help="a run directory (result.json, schedule.csv, topology.txt)")
    ap.add_argument("-o", "--output", default=None, help="PNG to write (default: RESULT_DIR/gantt.png)")
    ap.add_argument("--max-links", type=int, default=64, help="draw at most this many links")
    args = ap.parse_args(argv)
    try:
        from .rundir import load_run

        problem, schedule, rec = load_run(args.result_dir)
        out = args.output or str(Path(args.result_dir) / "gantt.png")
        title = (f"{rec.get('solver')}: {problem.kind} on {problem.topology.name}, "
                 f"{schedule.makespan_us:.1f} µs, {len(schedule)} transfers")
        plot_schedule(problem, schedule, out, max_links=args.max_links, title=title)
    except TacosError as e:
        print(f"plots: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
