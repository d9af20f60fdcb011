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


def link_occupancy(topology, schedule):
    """Every (link, transfer) pair a schedule occupies: ``(link_ids, rows)``, one entry per link of a row's route.

    A row through ``cut_through`` switches (a ``route`` such as ``0>8>3``) holds every link of its route for
    its whole duration (docs/fabrics.md), so it is one entry per route link; a row without a route holds the
    link ``src -> dst``. Rows whose link does not exist (a foreign schedule) are left out. Routes are looked
    up once per distinct route, so a schedule of many rows on few routes stays cheap.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> from tacos_bench.schedule import Schedule
    >>> topo = ring(3)
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, 1.0, "copy"), (0, 0, 2, 0.0, 2.0, "copy", "0>1>2")])
    >>> links, rows = link_occupancy(topo, s)
    >>> rows.tolist(), [f"{topo.src[k]}->{topo.dst[k]}" for k in links]
    ([0, 1, 1], ['0->1', '0->1', '1->2'])
    """
    n = len(schedule)
    direct = topology.link_ids(schedule.src, schedule.dst)
    routes = getattr(schedule, "route", None)
    has = np.zeros(n, dtype=bool) if routes is None else np.fromiter((bool(r) for r in routes), bool, n)
    keep = np.flatnonzero(~has & (direct >= 0))
    links, rows = [direct[keep]], [keep]
    if has.any():
        idx = np.flatnonzero(has)
        uniq, inv = np.unique(np.asarray(routes, dtype=object)[idx].astype(str), return_inverse=True)
        per = []
        for r in uniq:
            nodes = [int(v) for v in r.split(">")]
            ids = topology.link_ids(nodes[:-1], nodes[1:])
            per.append(ids[ids >= 0])
        length = np.array([len(x) for x in per], dtype=np.int64)
        offset = np.concatenate([[0], np.cumsum(length)[:-1]])
        flat = np.concatenate(per) if per else np.zeros(0, np.int64)
        lens = length[inv]
        # entry j of row i: flat[offset[route of i] + j], built without a per-row loop
        first = np.repeat(np.cumsum(lens) - lens, lens)
        pos = np.repeat(offset[inv], lens) + (np.arange(int(lens.sum())) - first)
        links.append(flat[pos])
        rows.append(np.repeat(idx, lens))
    link = np.concatenate(links).astype(np.int64)
    row = np.concatenate(rows).astype(np.int64)
    order = np.lexsort((link, row))
    return link[order], row[order]


def utilization_timeline(problem: Problem, schedule: Schedule, bins: int = 200):
    """Fraction of links busy over time: ``(bin_edges_us, busy_fraction)``.

    A transfer counts on every link it occupies (each link of a cut-through route, :func:`link_occupancy`);
    the rows of one multicast or reduction group share their common links, which count once.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
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
    link, row = link_occupancy(problem.topology, schedule)
    occ = np.unique(np.column_stack([link.astype(np.float64), np.asarray(schedule.start_us)[row],
                                     np.asarray(schedule.end_us)[row]]), axis=0) if len(link) else \
        np.zeros((0, 3))
    lo = np.sort(np.clip(occ[:, 1], 0, T))
    hi = np.sort(np.clip(occ[:, 2], 0, T))
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


def _node_name(topo, v: int) -> str:
    return f"sw{v}" if v >= topo.num_npus else str(v)


def gantt_bars(problem: Problem, schedule: Schedule, max_links: int = 64):
    """The bars of :func:`plot_schedule`: ``(link, start_us, end_us, chunk, op)`` arrays, one bar per link a
    transfer occupies (every link of a cut-through route), links ``>= max_links`` left out."""
    link, row = link_occupancy(problem.topology, schedule)
    keep = link < max_links
    link, row = link[keep], row[keep]
    return (link, np.asarray(schedule.start_us)[row], np.asarray(schedule.end_us)[row],
            np.asarray(schedule.chunk)[row], np.asarray(schedule.op)[row])


def plot_schedule(problem: Problem, schedule: Schedule, path, *, max_links: int = 64, title: str | None = None):
    """Gantt chart (one row per directed link, one bar per transfer on each link it occupies, coloured by
    chunk) above the link-utilization timeline. Only the first ``max_links`` links are drawn on large
    topologies. A transfer through cut-through switches is drawn on every link of its route."""
    plt = _plt()
    topo = problem.topology
    n_rows = min(topo.num_links, max_links)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 3 + 0.12 * n_rows), sharex=True,
                                  gridspec_kw={"height_ratios": [max(3, n_rows * 0.12), 1.2]})
    cmap = plt.get_cmap("tab20")
    C = max(problem.num_chunks, 1)
    link, s, e, c, op = gantt_bars(problem, schedule, max_links)
    if len(link):
        # one call for all bars: a per-bar barh is minutes on a schedule of 10^5 rows
        ax.barh(link, e - s, left=s, height=0.8, color=[cmap(int(k) % 20) for k in c],
                edgecolor=["black" if o else "none" for o in op], linewidth=0.4)
    ax.set_ylabel("directed link")
    ax.set_ylim(-0.5, n_rows - 0.5)
    ax.invert_yaxis()
    if n_rows <= 32:
        ax.set_yticks(range(n_rows))
        ax.set_yticklabels([f"{_node_name(topo, int(u))}->{_node_name(topo, int(v))}"
                            for u, v in zip(topo.src[:n_rows], topo.dst[:n_rows])], fontsize=6)
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
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the data
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
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
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the bars
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_heatmap(table, path, *, title: str = "", value_label: str = "", fmt: str = "{:.3f}", best: str = "min",
                 floor: float | None = None, gamma: float = 0.5, row_breaks=(), spread=None) -> Path:
    """A configuration x case table as a heatmap with its value written in every cell, written with the table
    beside it (``.csv``).

    One row per configuration (``table.index``), one column per case (``table.columns``): every configuration
    has a cell of its own, so none shares a colour with another as bars of a 10-colour palette would. The
    colour scale starts at ``floor`` (default the smallest value) and is stretched near it (power ``gamma``),
    so 1.00 and 1.05 differ visibly; the best cell of each column (``best``: ``min`` or ``max``) is bold; a
    missing value (a failed run) is hatched and reads ``n/a``. The colour bar sits beside the table.

    Parameters
    ----------
    table : pandas.DataFrame
        The values (rows: configurations, columns: cases).
    path : str or Path
        The image to write; the table goes beside it as ``.csv``.
    title, value_label : str
        Figure title; the colour bar's label (the quantity and its unit).
    fmt : str
        Format of a cell's value.
    best : {"min", "max", "none"}
        Which value of a column is the best one (bold).
    floor : float, optional
        The value the colour scale starts at (e.g. 1.0 for time / lower bound).
    gamma : float
        Power of the colour scale (< 1 stretches the values near ``floor``).
    row_breaks : iterable of int
        Draw a separating line above these row positions (groups of configurations).
    spread : pandas.DataFrame, optional
        Text written under each value (e.g. the min-max over seeds), same shape as ``table``.

    Returns
    -------
    Path
        The image written.

    Examples
    --------
    >>> import pandas as pd, tempfile, os
    >>> t = pd.DataFrame({"torus": [1.0, 1.06], "mesh": [1.2, float("nan")]}, index=["a", "b"])
    >>> out = plot_heatmap(t, os.path.join(tempfile.mkdtemp(), "h.png"), value_label="time / bound", floor=1.0)
    >>> out.exists(), out.with_suffix(".csv").exists()
    (True, True)
    """
    from matplotlib.colors import PowerNorm

    plt = _plt()
    path = Path(path)
    vals = table.to_numpy(dtype=float)
    nr, nc = vals.shape
    finite = vals[np.isfinite(vals)]
    lo = float(finite.min()) if floor is None and finite.size else float(floor if floor is not None else 0.0)
    hi = float(finite.max()) if finite.size else lo + 1.0
    hi = hi if hi > lo else lo + 1e-9
    fig, ax = plt.subplots(figsize=(1.5 + 1.25 * nc + 0.06 * max(len(str(r)) for r in table.index), 1.2 + 0.42 * nr))
    cmap = plt.get_cmap("YlOrRd").with_extremes(bad="0.85")
    im = ax.imshow(np.ma.masked_invalid(vals), cmap=cmap, norm=PowerNorm(gamma, vmin=lo, vmax=hi), aspect="auto")
    best_of = {}
    if best in ("min", "max") and finite.size:
        for j in range(nc):
            col = vals[:, j]
            if np.isfinite(col).any():
                target = np.nanmin(col) if best == "min" else np.nanmax(col)
                best_of[j] = np.flatnonzero(np.isclose(col, target, rtol=1e-9, atol=0.0))
    for i in range(nr):
        for j in range(nc):
            v = vals[i, j]
            if not np.isfinite(v):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="0.5",
                                           linewidth=0))
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=8, color="0.2")
                continue
            dark = (v - lo) / (hi - lo) > 0.6 if hi > lo else False
            text = fmt.format(v)
            if spread is not None:
                extra = spread.iloc[i, j]
                if isinstance(extra, str) and extra:
                    text += "\n" + extra
            ax.text(j, i, text, ha="center", va="center", fontsize=8 if spread is None else 7,
                    color="white" if dark else "black",
                    fontweight="bold" if i in best_of.get(j, ()) else "normal")
    ax.set_xticks(range(nc))
    ax.set_xticklabels([str(c) for c in table.columns], rotation=25, ha="right", fontsize=8)
    ax.set_yticks(range(nr))
    ax.set_yticklabels([str(r) for r in table.index], fontsize=8)
    ax.tick_params(length=0)
    for b in row_breaks:
        ax.axhline(b - 0.5, color="black", linewidth=1.2)
    cbar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cbar.set_label(value_label, fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    if best in ("min", "max"):
        title = (title + "\n" if title else "") + f"bold: the best ({'lowest' if best == 'min' else 'highest'}) " \
            "of each column"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    table.to_csv(path.with_suffix(".csv"))
    return path


# Columns that say which experiment a row is (problem, fault, solver set-up): rows that differ in one of them at
# the same x are different experiments, never repeats to average. Kept here, not imported from
# tacos_bench.runner.records, because the core may not import the runner (pyproject's import-linter contract).
# Order matters: a column is added to a series key only when the ones before it do not already separate the
# rows, so the more telling column wins the legend (topology_kind before topology keeps mesh4x4 -> mesh8x8 one
# line when x is num_npus; topology before num_links, which it determines).
_DEFINING = ("solver", "collective", "topology_kind", "topology", "buffer_mib", "chunks_per_npu", "num_npus",
             "overlap", "root", "failed_links", "fault_at_fraction", "fault_at_us", "fault_links",
             "fault_random_links", "fault_npus", "time_limit_s", "threads", "topology_header_name", "num_links",
             "homogeneous", "symmetric", "num_chunks", "chunk_bytes", "min_link_time_us", "experiment")
_DEFINING_PREFIXES = ("p_solver_", "choice_")
# Shown in the figure's title when one value covers the whole table, so a reader knows what was held fixed.
_CONTEXT = ("collective", "topology", "buffer_mib", "chunks_per_npu")

ERROR_BARS = {"minmax": "min–max", "std": "mean ± 1 std", "none": None}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
_LINESTYLES = ("-", "--", "-.", ":")


def _floor(y: str) -> float | None:
    """The least value ``y`` can take by definition (None: no such bound).

    A gap or a ratio to the lower bound is >= 0 (>= 1, but 0 is the bound that survives a wrong lower bound),
    and so is a measured duration; an error bar below it would show an impossible value.

    Examples
    --------
    >>> _floor("gap"), _floor("ratio_to_bound"), _floor("synthesis_time_s"), _floor("repair_loss")
    (0.0, 0.0, 0.0, None)
    """
    name = y.lower()
    if "gap" in name or "ratio" in name or name.endswith(("_s", "_us")):
        return 0.0
    return None


def _fmt(v) -> str:
    """A key value as a legend shows it (``16`` not ``16.0``, ``n/a`` for a missing value)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "n/a"
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def _columns(spec) -> list[str]:
    """``"solver,topology"`` / a list / None as a list of column names (``""`` and ``"none"``: no column)."""
    if spec is None:
        return []
    if isinstance(spec, str):
        spec = spec.split(",")
    return [c.strip() for c in spec if c and c.strip() and c.strip().lower() != "none"]


def _sortable(s):
    # object columns may mix None with numbers or strings; compare them as text rather than fail
    return s.astype(str) if s.dtype == object else s


def sweep_split_columns(df, x: str, keys) -> list[str]:
    """The problem-defining columns that still vary among rows sharing ``x`` and ``keys``.

    These are what a sweep figure must separate (or refuse to draw): averaging over them would merge
    different problems into one point. A column is added only when the columns before it do not already
    separate the rows, so derived columns (``num_links`` of a ``topology``) never lengthen a key.

    Parameters
    ----------
    df : pandas.DataFrame
        The results table (rows to be drawn).
    x : str
        The column on the x axis.
    keys : list of str
        Columns already separating series (hue and facets).

    Returns
    -------
    list of str
        The columns to add to the series key, most telling first.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"solver": ["greedy"] * 4, "topology": ["mesh4x4", "torus4x4", "mesh4x4", "mesh8x8"],
    ...                    "num_links": [48, 64, 48, 224], "num_npus": [16, 16, 16, 64], "seed": [0, 0, 1, 0]})
    >>> sweep_split_columns(df, "num_npus", ["solver"])
    ['topology']
    >>> sweep_split_columns(df[df.topology != "torus4x4"], "num_npus", ["solver"])
    []
    >>> df["topology_kind"] = df.topology.str[:-3]  # mesh, torus: mesh4x4 and mesh8x8 make one line
    >>> sweep_split_columns(df, "num_npus", ["solver"]), sweep_split_columns(df[:3], "num_npus", ["solver"])
    (['topology_kind'], ['topology'])
    """
    taken = {x, *keys}
    cands = [c for c in _DEFINING if c in df.columns and c not in taken]
    cands += sorted(c for c in df.columns if c.startswith(_DEFINING_PREFIXES) and c not in taken)
    added: list[str] = []
    for c in cands:
        varies = df.groupby([*keys, *added, x], dropna=False, sort=False)[c].nunique(dropna=False)
        if (varies > 1).any():
            added.append(c)
    # a family (topology_kind) is added before the name only to join e.g. mesh4x4 and mesh8x8 into one line;
    # when each family holds a single topology the two split alike, and the name is what a reader looks for
    if "topology_kind" in added and "topology" in df.columns and "topology" not in taken:
        i = added.index("topology_kind")
        per_kind = df.groupby([*keys, *added[:i + 1]], dropna=False, sort=False)["topology"].nunique(dropna=False)
        if (per_kind <= 1).all():
            added[i] = "topology"
    return added


def sweep_table(df, x: str, y: str, hue="solver", *, facet=None, split: str = "series", err: str = "minmax",
                max_series: int = 12):
    """The points of a sweep figure: one row per (panel, series, x) with ``y``'s mean and error-bar ends.

    Only runs with a verified schedule count (error rows and rejected schedules never make a point). Rows
    that share ``x`` are averaged only when they are repeats of one experiment (they differ in the seed or
    in nothing recorded); rows that differ in a problem-defining column (topology, collective, buffer size,
    chunks per NPU, solver options, ...) go to separate series (``split="series"``) or make it refuse
    (``split="refuse"``).

    Parameters
    ----------
    df : pandas.DataFrame
        The results table of a sweep (``results.parquet``).
    x, y : str
        Columns on the axes.
    hue : str or list of str or None
        Columns whose values make one series each (``"a,b"`` for two).
    facet : str or list of str or None
        Columns whose values make one panel each.
    split : {"series", "refuse"}
        What to do with problem-defining columns that vary at one x within a series.
    err : {"minmax", "std", "none"}
        Error bars: min–max over the runs of a point, mean ± 1 std, or none.
    max_series : int
        Refuse (naming a column to facet by) beyond this many series in one panel.

    Returns
    -------
    points : pandas.DataFrame
        Facet, hue and split columns, ``series`` (its legend label), ``x``, ``y`` (mean, drawn),
        ``<y>_lo`` / ``<y>_hi`` (the drawn error-bar ends), ``n_runs``, ``<y>_min`` / ``<y>_max`` /
        ``<y>_std`` (raw, unclipped) and ``error_bar`` (what the bars are).
    meta : dict
        ``facet``, ``hue``, ``split`` (the added columns), ``series`` (labels in drawing order), ``floor``,
        ``bar_label`` (the legend's description of the bars), ``context`` (columns held fixed),
        ``clipped`` (runs below ``floor`` before clipping).

    Raises
    ------
    ConfigError
        A column is missing, no verified run has ``x`` and ``y``, ``split="refuse"`` and rows at one x
        differ in a problem-defining column, or there are more than ``max_series`` series; the one-line
        message names the column to split by.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"solver": ["greedy"] * 4, "topology": ["mesh4x4", "mesh4x4", "torus4x4", "torus4x4"],
    ...                    "num_npus": [16] * 4, "seed": [0, 1, 0, 1], "gap": [0.2, 0.4, 0.0, 0.0],
    ...                    "status": ["feasible"] * 4, "valid": [True] * 4})
    >>> pts, meta = sweep_table(df, "num_npus", "gap", "solver")
    >>> print(pts[["series", "num_npus", "gap", "gap_lo", "gap_hi", "n_runs"]].to_string(index=False))
              series  num_npus  gap  gap_lo  gap_hi  n_runs
     greedy, mesh4x4        16  0.3     0.2     0.4       2
    greedy, torus4x4        16  0.0     0.0     0.0       2
    >>> meta["split"], meta["bar_label"]
    (['topology'], 'point: mean; bar: min–max over 2 runs')
    """
    import pandas as pd

    from .errors import ConfigError

    hue_cols, facet_cols = _columns(hue), _columns(facet)
    if err not in ERROR_BARS:
        raise ConfigError(f"unknown error bars {err!r}; one of {', '.join(ERROR_BARS)}")
    if split not in ("series", "refuse"):
        raise ConfigError(f"unknown split {split!r}; one of series, refuse")
    missing = [c for c in dict.fromkeys([x, y, *hue_cols, *facet_cols]) if c not in df.columns]
    if missing:
        raise ConfigError(f"the results table has no column(s) {', '.join(missing)}; columns: "
                          f"{', '.join(sorted(map(str, df.columns)))}")
    clash = sorted({x, y} & {*hue_cols, *facet_cols}) + sorted(set(hue_cols) & set(facet_cols))
    if clash:
        raise ConfigError(f"{clash[0]} is both an axis/hue and a facet column; use it in one place")
    ok = df["status"] != "error" if "status" in df else True
    if "valid" in df:
        ok = ok & df["valid"].astype("boolean").fillna(False)
    ok = pd.Series(ok, index=df.index) if not isinstance(ok, pd.Series) else ok
    good = df[ok & df[y].notna() & df[x].notna()]
    bad = df[~ok]
    if good.empty:
        why = ""
        if len(bad):
            why = f" ({len(bad)} run(s) failed: {_failure_summary(bad)})"
        raise ConfigError(f"no verified run has both {x} and {y}{why}")

    added = sweep_split_columns(good, x, [*facet_cols, *hue_cols])
    if added and split == "refuse":
        c = added[0]
        grp = good.groupby([*facet_cols, *hue_cols, x], dropna=False, sort=False)[c]
        at = grp.nunique(dropna=False).gt(1).idxmax()
        at = at if isinstance(at, tuple) else (at,)
        where = ", ".join(f"{k}={_fmt(v)}" for k, v in zip([*facet_cols, *hue_cols, x], at))
        mask = np.ones(len(good), dtype=bool)
        for k, v in zip([*facet_cols, *hue_cols, x], at):
            mask &= (good[k] == v).to_numpy() | (good[k].isna().to_numpy() & bool(pd.isna(v)))
        vals = ", ".join(_fmt(v) for v in good.loc[mask, c].drop_duplicates().head(4))
        raise ConfigError(f"rows at {where} differ in {c} ({vals}): different problems, not repeats to average; "
                          f"split by {c}: --hue {','.join([*hue_cols, c])} or --facet {c}")
    keys = [*hue_cols, *added]
    n_series = good.groupby(keys, dropna=False).ngroups if keys else 1
    if n_series > max_series:
        c = max(added or hue_cols, key=lambda k: good[k].nunique(dropna=False))
        raise ConfigError(f"{n_series} series ({' x '.join(keys)}) are too many to read in one panel "
                          f"(max {max_series}); split by {c}: --facet {','.join([*facet_cols, c])}")

    agg = (good.groupby([*facet_cols, *keys, x], dropna=False, sort=False)[y]
           .agg(["mean", "min", "max", "std", "count"]).reset_index())
    agg = agg.sort_values([*facet_cols, *keys, x], key=_sortable, na_position="last", kind="stable")
    mean, std = agg["mean"].to_numpy(float), agg["std"].fillna(0.0).to_numpy(float)
    if err == "minmax":
        lo, hi = agg["min"].to_numpy(float), agg["max"].to_numpy(float)
    elif err == "std":
        lo, hi = mean - std, mean + std
    else:
        lo, hi = mean.copy(), mean.copy()
    floor = _floor(y)
    # a value below the floor is float noise (gap = -1e-16) or a wrong bound; it is drawn at the floor
    # and kept raw in <y>_min, so the table still shows it
    tol = 1e-9 * max(1.0, float(np.nanmax(np.abs(agg["max"].to_numpy(float)))))
    clipped = int((agg["min"].to_numpy(float) < floor - tol).sum()) if floor is not None else 0
    below = floor is not None and bool((lo < floor - tol).any())  # worth saying in the legend, noise is not
    if floor is not None:
        mean, lo, hi = (np.maximum(a, floor) for a in (mean, lo, hi))
    # the mean can sit a rounding error outside [min, max]; bars never point the wrong way
    lo, hi = np.minimum(lo, mean), np.maximum(hi, mean)

    labels = agg[keys].apply(lambda r: ", ".join(_fmt(v) for v in r), axis=1) if keys else \
        pd.Series([y] * len(agg), index=agg.index)
    n = agg["count"].to_numpy(int)
    desc = ERROR_BARS[err]
    nr = f"{n.min()}" if n.min() == n.max() else f"{n.min()}–{n.max()}"
    bars = desc is not None and n.max() > 1
    if not bars:
        bar_label = f"point: mean over {nr} run{'s' if n.max() > 1 else ''} (no bars)"
        desc = None
    else:
        bar_label = f"point: mean; bar: {desc} over {nr} runs" + (f", clipped at {_fmt(floor)}" if below else "")
    points = agg[[*facet_cols, *keys, x]].copy()
    points.insert(len(facet_cols) + len(keys), "series", labels.to_numpy())
    points[y] = mean
    points[f"{y}_lo"], points[f"{y}_hi"] = lo, hi
    points["n_runs"] = n
    points[f"{y}_min"], points[f"{y}_max"] = agg["min"].to_numpy(float), agg["max"].to_numpy(float)
    points[f"{y}_std"] = agg["std"].to_numpy(float)
    points["error_bar"] = desc or "none"
    points = _with_failures(points.reset_index(drop=True), bad, [*facet_cols, *keys], x, y)
    unplaced = int(bad[x].isna().sum()) if x in bad.columns else len(bad)
    context = [f"{c}={_fmt(good[c].iloc[0])}" for c in _CONTEXT
               if c in good.columns and c not in (x, *facet_cols, *keys) and good[c].nunique(dropna=False) == 1]
    meta = {"facet": facet_cols, "hue": hue_cols, "split": added, "keys": keys,
            "series": list(dict.fromkeys(points["series"])), "floor": floor, "bar_label": bar_label,
            "context": context, "clipped": clipped, "bars": bars, "x": x, "y": y, "err": err,
            "failed": int(points["n_failed"].sum()), "failed_unplaced": unplaced}
    return points, meta


def _failed_mask(df):
    """Rows without a verified schedule (an error, no solution, a schedule the verifier rejected)."""
    import pandas as pd

    ok = df["status"] != "error" if "status" in df else pd.Series(True, index=df.index)
    if "valid" in df:
        ok = ok & df["valid"].astype("boolean").fillna(False)
    return ~ok


# the quantities a sweep is drawn against, as a reader names them (units in brackets)
AXIS_LABELS = {
    "num_npus": "NPUs", "num_links": "directed links", "num_chunks": "chunks", "chunks_per_npu": "chunks per NPU",
    "buffer_mib": "buffer (MiB)", "buffer_bytes": "buffer (bytes)", "chunk_bytes": "chunk (bytes)",
    "collective_time_us": "collective time (µs)", "lower_bound_us": "lower bound (µs)",
    "synthesis_time_s": "synthesis time (s)", "search_time_s": "search time (s)", "time_limit_s": "time limit (s)",
    "gap": "gap to the lower bound (time / bound − 1)", "ratio_to_bound": "time / lower bound",
    "algbw_GBps": "algorithm bandwidth (GB/s)", "busbw_GBps": "bus bandwidth (GB/s)",
    "topology": "topology", "collective": "collective", "solver": "solver", "seed": "seed",
    "primal_integral": "primal integral (s)", "time_to_1pct_s": "time to within 1 % (s)",
    "peak_memory_mib": "peak memory (MiB)", "fault_at_fraction": "fault time (fraction of the makespan)",
}
_UNITS = (("_us", "µs"), ("_s", "s"), ("_mib", "MiB"), ("_gib", "GiB"), ("_bytes", "bytes"), ("_GBps", "GB/s"),
          ("_GiBps", "GiB/s"))


def axis_label(column: str) -> str:
    """A results column as an axis title: words, and the unit its suffix names.

    Examples
    --------
    >>> axis_label("synthesis_time_s"), axis_label("num_npus"), axis_label("repair_bound_us")
    ('synthesis time (s)', 'NPUs', 'repair bound (µs)')
    >>> axis_label("p_solver_restarts")
    'solver restarts'
    """
    if column in AXIS_LABELS:
        return AXIS_LABELS[column]
    name = column[2:] if column.startswith("p_") else column
    for suffix, unit in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{name[:-len(suffix)].replace('_', ' ')} ({unit})"
    return name.replace("_", " ")


def _failure(row) -> str:
    """What a run without a verified schedule ended in: its status, or the verifier's rejection."""
    st = row.get("status")
    if isinstance(st, str) and st not in ("optimal", "feasible"):
        return st
    return "rejected by the verifier"


def _failure_summary(bad) -> str:
    """``error x2, no_solution`` for the failed rows ``bad``."""
    counts = bad.apply(_failure, axis=1).value_counts() if len(bad) else {}
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items())


def _with_failures(points, bad, keys: list[str], x: str, y: str):
    """``points`` with ``n_failed`` and ``failed`` (what they ended in) per point: the runs at that point's x
    and series that have no verified schedule (an error, no solution, a rejected schedule). Failures where no
    run succeeded become points of their own with no ``y`` (``n_runs`` 0), so a figure can mark them."""
    import pandas as pd

    points = points.copy()
    points["n_failed"] = 0
    points["failed"] = ""
    bad = bad[bad[x].notna()] if x in bad.columns else bad.iloc[0:0]
    if bad.empty:
        return points
    bad = bad.assign(**{c: None for c in [*keys, x] if c not in bad.columns})

    def ident(vals):
        return tuple(_fmt(v) for v in vals)

    where = {ident(r): i for i, r in enumerate(points[[*keys, x]].itertuples(index=False))}
    extra = []
    for k, g in bad.groupby([*keys, x], dropna=False, sort=False):
        k = k if isinstance(k, tuple) else (k,)
        i = where.get(ident(k))
        if i is not None:
            points.loc[i, "n_failed"] = len(g)
            points.loc[i, "failed"] = _failure_summary(g)
            continue
        row = dict(zip([*keys, x], k))
        row.update(series=", ".join(_fmt(v) for v in k[:len(keys)]) if keys else y, n_runs=0,
                   n_failed=len(g), failed=_failure_summary(g), error_bar="none")
        extra.append(row)
    if extra:
        points = pd.concat([points, pd.DataFrame(extra)], ignore_index=True)
    return points


def _x_positions(points, x: str, logx: bool, dodge: float, meta):
    """Where each point is drawn: its x, nudged sideways per series so coincident points stay visible.

    Numbers stay on a numeric axis (nudged by a fraction of the smallest spacing between x values, in
    log space on a log axis); anything else becomes categories 0, 1, ... Returns ``(x_drawn, ticks)``,
    ``ticks`` being ``(positions, labels)`` at the true x values when there are few (so the nudge never
    reads as data), else None.
    """
    import pandas as pd

    vals = points[x]
    series = meta["series"]
    k = len(series)
    rank = points["series"].map({s: i for i, s in enumerate(series)}).to_numpy(float)
    offset = (rank - (k - 1) / 2) / max(k - 1, 1) if k > 1 else np.zeros(len(points))
    numeric = pd.api.types.is_numeric_dtype(vals) and not pd.api.types.is_bool_dtype(vals)
    if not numeric:
        cats = sorted(vals.drop_duplicates(), key=str)
        pos = vals.map({c: i for i, c in enumerate(cats)}).to_numpy(float)
        return pos + dodge * offset, (list(range(len(cats))), [_fmt(c) for c in cats])
    v = vals.to_numpy(float)
    u = np.unique(v)
    ticks = (u.tolist(), [_fmt(t) for t in u]) if len(u) <= 12 else None
    if logx and (v > 0).all():
        lu = np.log10(u)
        step = float(np.diff(lu).min()) if len(u) > 1 else 1.0
        return 10 ** (np.log10(v) + dodge * step * offset), ticks
    step = float(np.diff(u).min()) if len(u) > 1 else max(abs(float(u[0])), 1.0)
    return v + dodge * step * offset, ticks


def plot_sweep(df, x: str, y: str, hue="solver", path="sweep.png", *, logx: bool = False, logy: bool = False,
               title: str | None = None, facet=None, split: str = "series", err: str = "minmax",
               dodge: float = 0.1, max_series: int = 12):
    """A sweep's figure from its results table, written with the table it draws beside it.

    Mean ``y`` against ``x``, one series per ``hue`` value and per problem-defining column that varies at
    one x (:func:`sweep_split_columns`), one panel per ``facet`` value. Error bars are labelled in the legend;
    a quantity >= 0 by definition (a gap, a ratio, a duration) is never drawn below 0. Series have distinct
    colours, markers and line styles, are half transparent and nudged sideways by ``dodge`` (a fraction of
    the smallest spacing between x values) so that coinciding series (two exact solvers) stay visible.
    The points are written to ``path`` with suffix ``.csv`` (columns: :func:`sweep_table`, plus
    ``x_drawn``).

    Parameters
    ----------
    df : pandas.DataFrame
        The results table of a sweep.
    x, y, hue : str
        Axis columns and the series column(s) (``"solver,collective"`` for two).
    path : str or Path
        The image to write; the table goes beside it as ``.csv``.
    logx, logy : bool
        Log axes.
    title : str, optional
        Figure title (default ``"<y> vs <x>"`` and the columns held fixed).
    facet, split, err, max_series
        As in :func:`sweep_table`.
    dodge : float
        Sideways spread of the series (0: none).

    Returns
    -------
    Path
        The image written.

    Examples
    --------
    >>> import pandas as pd, tempfile, os
    >>> df = pd.DataFrame({"num_npus": [16, 64, 16, 64], "synthesis_time_s": [0.1, 0.4, 1.0, 9.0],
    ...                    "solver": ["greedy", "greedy", "cpsat", "cpsat"], "status": ["feasible"] * 4,
    ...                    "valid": [True] * 4})
    >>> out = plot_sweep(df, "num_npus", "synthesis_time_s", "solver", os.path.join(tempfile.mkdtemp(), "f.png"))
    >>> out.exists(), out.with_suffix(".csv").exists()
    (True, True)
    """
    fig, points = _draw_sweep(df, x, y, hue, logx=logx, logy=logy, title=title, facet=facet, split=split,
                              err=err, dodge=dodge, max_series=max_series)
    path = Path(path)
    table = path.with_suffix(".csv")
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    finally:
        _plt().close(fig)
    points.to_csv(table, index=False)
    return path


def _draw_sweep(df, x, y, hue, *, logx, logy, title, facet, split, err, dodge, max_series):
    """The figure of :func:`plot_sweep` (not saved) and its points, ``x_drawn`` included."""
    import warnings

    import pandas as pd
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    points, meta = sweep_table(df, x, y, hue, facet=facet, split=split, err=err, max_series=max_series)
    if meta["clipped"]:
        warnings.warn(f"{meta['clipped']} point(s) of {y} have runs below {_fmt(meta['floor'])} (raw in "
                      f"{y}_min); drawn at {_fmt(meta['floor'])}: check lower_bound_us and the times", stacklevel=3)
    x_drawn, ticks = _x_positions(points, x, logx, dodge, meta)
    points.insert(points.columns.get_loc(x) + 1, "x_drawn", x_drawn)
    facets = meta["facet"]
    panels = list(points.groupby(facets, dropna=False, sort=False)) if facets else [((), points)]
    plt = _plt()
    ncol = min(3, len(panels))
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 4.3 * nrow), sharex=True, sharey=True,
                             squeeze=False)
    cmap = plt.get_cmap("tab10")
    style = {s: {"color": cmap(i % 10), "marker": _MARKERS[i % len(_MARKERS)],
                 "linestyle": _LINESTYLES[i % len(_LINESTYLES)],
                 # every other marker hollow: a filled one below it still shows through
                 "markerfacecolor": cmap(i % 10) if i % 2 == 0 else "none"}
             for i, s in enumerate(meta["series"])}
    bars = meta["bars"]
    numeric_x = pd.api.types.is_numeric_dtype(points[x]) and not pd.api.types.is_bool_dtype(points[x])
    if not numeric_x:
        # categories (topologies, collectives) have no order in between: no line joins them
        for st in style.values():
            st["linestyle"] = "none"
    for ax, (pkey, pts) in zip(axes.flat, panels):
        for s, g in pts.groupby("series", sort=False):
            fail = g[g["n_failed"] > 0]
            g = g[g["n_runs"] > 0]
            if len(g):
                yv = g[y].to_numpy(float)
                yerr = np.vstack([yv - g[f"{y}_lo"].to_numpy(float), g[f"{y}_hi"].to_numpy(float) - yv]) \
                    if bars else None
                ax.errorbar(g["x_drawn"], yv, yerr=yerr, capsize=3, markersize=6, linewidth=1.4, alpha=0.75,
                            elinewidth=1.0, **style[s])
            if len(fail):
                # a failed run has no y: a cross at the panel's top edge, at its x, with the count
                tr = ax.get_xaxis_transform()
                ax.plot(fail["x_drawn"], np.full(len(fail), 0.97), ls="none", marker="x", ms=7, mew=1.6,
                        color=style[s]["color"], transform=tr, clip_on=False)
                for xd, n in zip(fail["x_drawn"], fail["n_failed"]):
                    ax.annotate(str(int(n)), (xd, 0.97), xycoords=tr, xytext=(4, -3), textcoords="offset points",
                                fontsize=7, color=style[s]["color"])
        if facets:
            pkey = pkey if isinstance(pkey, tuple) else (pkey,)
            ax.set_title(", ".join(f"{c}={_fmt(v)}" for c, v in zip(facets, pkey)), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    if logx and numeric_x:
        axes[0, 0].set_xscale("log")
    if logy:
        axes[0, 0].set_yscale("log")
    if (points["n_failed"] > 0).any():
        # headroom for the crosses of failed runs, so they never sit on a point
        lo, hi = axes[0, 0].get_ylim()
        axes[0, 0].set_ylim(lo, hi * (hi / lo) ** 0.1 if logy and lo > 0 else hi + 0.1 * (hi - lo))
    for ax in axes[-1]:
        ax.set_xlabel(axis_label(x))
        if ticks is not None:
            ax.xaxis.set_minor_locator(NullLocator())  # a log axis's minor labels would sit beside the true x
            ax.set_xticks(ticks[0])
            wide = not numeric_x and len(ticks[0]) > 4
            ax.set_xticklabels(ticks[1], rotation=30 if wide else 0, ha="right" if wide else "center")
    for ax in axes[:, 0]:
        ax.set_ylabel(axis_label(y))
    handles = [Line2D([], [], alpha=0.75, **style[s]) for s in meta["series"]]
    labels = list(meta["series"])
    handles.append(Line2D([], [], color="0.3", marker="|" if bars else "", markersize=12, linestyle="none"))
    labels.append(meta["bar_label"])
    if meta["failed"] or meta["failed_unplaced"]:
        fails = points[points["n_failed"] > 0]
        what = _failure_summary(df.loc[_failed_mask(df)]) if len(df) else ""
        label = f"x at the top: runs without a verified schedule, with their count ({what})"
        if meta["failed_unplaced"]:
            label += f"; {meta['failed_unplaced']} without {x}, not drawn"
        handles.append(Line2D([], [], color="0.3", marker="x", markersize=7, mew=1.6, linestyle="none"))
        labels.append(label if len(fails) else label.replace("x at the top: ", ""))
    fig.legend(handles, labels, title=", ".join(meta["keys"]) or None, loc="upper left",
               bbox_to_anchor=(1.0, 0.95), fontsize=8, title_fontsize=8, frameon=False)
    fig.suptitle(title or " — ".join([f"{axis_label(y)} vs {axis_label(x)}", *([", ".join(meta["context"])] if meta["context"] else [])]),
                 fontsize=10)
    fig.tight_layout()
    return fig, points


def _read_table(src: Path):
    """The results table of a sweep directory (``results.parquet``, else ``results.csv``) or of a file."""
    import pandas as pd

    from .errors import ConfigError

    if src.is_dir():
        table = next((src / n for n in ("results.parquet", "results.csv") if (src / n).is_file()),
                     src / "results.parquet")
    else:
        table = src
    if not table.is_file():
        raise ConfigError(f"{table}: no results table (a sweep writes it when it ends; "
                          f"python -m tacos_bench.collect {src} makes one)")
    return table, (pd.read_csv(table) if table.suffix == ".csv" else pd.read_parquet(table))


def _sweep_main(argv) -> int:
    """``python -m tacos_bench.plots sweep SWEEP_DIR --x num_npus --y synthesis_time_s --hue solver [--logy]``"""
    import argparse
    import sys
    import warnings

    from .errors import ConfigError, TacosError

    ap = argparse.ArgumentParser(
        prog="python -m tacos_bench.plots sweep",
        description="A sweep's figure from its results table (nothing else is read), with the points it draws "
                    "written beside it (same name, .csv). Rows sharing an x are averaged only over repeats "
                    "(seeds): rows of different problems (topology, collective, buffer, chunks, solver "
                    "options, ...) become separate series, or the command refuses (--split refuse).")
    ap.add_argument("sweep", help="a sweep directory holding results.parquet or results.csv (or the file itself)")
    ap.add_argument("--x", default="num_npus", help="column on the x axis (default num_npus)")
    ap.add_argument("--y", default="synthesis_time_s", help="column on the y axis, e.g. synthesis_time_s, gap, "
                                                            "collective_time_us (default synthesis_time_s)")
    ap.add_argument("--hue", default="solver", help="one line per value of this column, or of several: a,b "
                                                    "(default solver)")
    ap.add_argument("--facet", default=None, help="one panel per value of this column (or a,b), e.g. topology")
    ap.add_argument("--split", choices=("series", "refuse"), default="series",
                    help="rows at one x that differ in a problem column (topology, collective, ...): separate "
                         "series (default), or refuse naming the column")
    ap.add_argument("--err", choices=tuple(ERROR_BARS), default="minmax",
                    help="error bars over the runs of a point: min-max (default), mean +- 1 std, none")
    ap.add_argument("--dodge", type=float, default=0.1,
                    help="sideways spread of the series, as a fraction of the x spacing (0: none; default 0.1)")
    ap.add_argument("--max-series", type=int, default=12, help="refuse beyond this many series per panel")
    ap.add_argument("--logx", action="store_true")
    ap.add_argument("--logy", action="store_true")
    ap.add_argument("-o", "--output", default=None, help="image to write (default SWEEP/<y>_vs_<x>.png); "
                                                         "its points go beside it as .csv")
    args = ap.parse_args(argv)
    try:
        table, df = _read_table(Path(args.sweep))
        out = Path(args.output) if args.output else table.parent / f"{args.y}_vs_{args.x}.png"
        if out.suffix.lower() == ".csv":
            raise ConfigError(f"{out}: the figure's points are written as .csv beside it; give an image name")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plot_sweep(df, args.x, args.y, args.hue, out, logx=args.logx, logy=args.logy, facet=args.facet,
                       split=args.split, err=args.err, dodge=args.dodge, max_series=args.max_series)
    except (TacosError, OSError, ValueError) as e:
        msg = " ".join(str(e).split())
        print(f"plots: error: {msg}", file=sys.stderr)
        return 2
    for w in caught:
        print(f"plots: warning: {w.message}", file=sys.stderr)
    print(f"wrote {out} and {out.with_suffix('.csv')}")
    return 0


# ------------------------------------------------------------------------------------------ anytime
ANYTIME_CASE = ("topology", "collective", "chunks_per_npu", "buffer_mib", "root")


def anytime_table(df, base: Path | None = None):
    """Every run's anytime trace as one long table: the run's case and solver columns, its ``status`` and
    ``valid``, then ``time_s``, ``incumbent_us``, ``bound_us``, ``bound_scope`` (:mod:`tacos_bench.anytime`;
    a trace written before ``bound_scope`` existed reads as ``continuous`` where it has a bound); runs without a
    trace are left out.

    ``base``: where relative ``output_dir`` values are resolved (the sweep directory).
    """
    import pandas as pd

    parts = []
    for _, row in df.iterrows():
        name = row.get("anytime_file")
        out_dir = row.get("output_dir")
        if not isinstance(name, str) or not isinstance(out_dir, str):
            continue
        path = Path(out_dir) / name
        if not path.is_file() and base is not None:
            path = base / Path(out_dir).name / name
        if not path.is_file():
            continue
        tr = pd.read_csv(path)
        if "bound_scope" not in tr.columns:
            tr["bound_scope"] = None
        tr["bound_scope"] = tr["bound_scope"].astype(object).where(tr["bound_scope"].notna(), None)
        tr.loc[tr["bound_us"].notna() & tr["bound_scope"].isna(), "bound_scope"] = "continuous"
        for k in ("solver", "options_not_applied", "p_solver_warm_start", "p_solver_model", "seed", "status",
                  "valid", *ANYTIME_CASE):
            tr[k] = row.get(k)
        parts.append(tr)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


_SOUND = ("optimal", "feasible")


def _failed(g) -> str | None:
    """Why a run's trace is no result (its status, or a schedule the verifier rejected); None for a result."""
    st = g["status"].iloc[0] if "status" in g.columns else None
    if isinstance(st, str) and st not in _SOUND:
        return st
    if "valid" in g.columns and g["valid"].iloc[0] is False:
        return "rejected by the verifier"
    return None


def plot_anytime(df, path, *, logx: bool = False) -> Path:
    """Incumbent (solid steps) and bound (dashed steps) against time, one panel per case, one colour per
    backend (and warm/cold, model where the runs differ in them); the drawn points are written beside the
    figure as ``<name>.csv``.

    Only bounds on the problem (``bound_scope`` ``continuous``) are drawn as bounds: a ``ten`` bound holds for
    the model's rounded time grid only, so it is drawn as grey crosses ("TEN bound, not the problem's"), and an
    incumbent that meets it proves nothing. A run that ended without a result (an error, no solution, a
    rejected schedule) is drawn hollow and dotted and says so in the legend. The legend sits outside the
    panels.
    """
    import pandas as pd
    from matplotlib.lines import Line2D

    from .anytime import is_problem_trace

    plt = _plt()
    path = Path(path)
    if "bound_scope" not in df.columns:
        df = df.assign(bound_scope=np.where(df["bound_us"].notna(), "continuous", None))
    case_cols = [c for c in ANYTIME_CASE if c in df.columns and df[c].nunique(dropna=False) > 1] or ["topology"]
    series_cols = ["solver"] + [c for c in ("p_solver_warm_start", "p_solver_model", "seed")
                                if c in df.columns and df[c].nunique(dropna=True) > 1]
    cases = list(df.groupby(case_cols, dropna=False, sort=True))
    ncol = min(3, len(cases))
    nrow = -(-len(cases) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.6 * nrow), squeeze=False)
    keys = sorted({tuple(str(v) for v in k) for k, _ in df.groupby(series_cols, dropna=False)})
    cmap = plt.get_cmap("tab10" if len(keys) <= 10 else "tab20")
    colour = {k: cmap(i % cmap.N) for i, k in enumerate(keys)}
    marker = {k: _MARKERS[i % len(_MARKERS)] for i, k in enumerate(keys)}
    handles: dict[str, Line2D] = {}
    drawn = []
    for ax, (case, g) in zip(axes.flat, cases):
        case = case if isinstance(case, tuple) else (case,)
        for key, s in g.groupby(series_cols, dropna=False):
            key = tuple(str(v) for v in (key if isinstance(key, tuple) else (key,)))
            label = ", ".join(f"{c.replace('p_solver_', '')}={v}" if c != "solver" else v
                              for c, v in zip(series_cols, key) if v not in ("nan", "None"))
            s = s.sort_values("time_s", kind="stable")
            why = _failed(s)
            if not why and not is_problem_trace(s[["time_s", "incumbent_us", "bound_us", "bound_scope"]]
                                                .astype(object).where(s.notna(), None).itertuples(index=False)):
                # a trace written before traces held the problem's points only (a composed All-Reduce's phases)
                why = "trace mixes phases: incumbents rise or sit below the bound"
            col = colour[key]
            inc = s.dropna(subset=["incumbent_us"])
            sound = s[s["bound_us"].notna() & (s["bound_scope"] == "continuous")]
            grid = s[s["bound_us"].notna() & (s["bound_scope"] != "continuous")]
            name = f"{label} ({why})" if why else label
            style = dict(color=col, marker=marker[key], ms=4, markerfacecolor="none" if why else col)
            if len(inc):
                ax.step(inc["time_s"], inc["incumbent_us"], where="post", ls=":" if why else "-", **style)
                handles.setdefault(f"{name}: incumbent", Line2D([], [], ls=":" if why else "-", **style))
            if len(sound):
                # a marker too: a bound known at one instant only (a composed All-Reduce's end) is no step
                ax.step(sound["time_s"], sound["bound_us"], where="post", color=col, ls="--", alpha=0.8,
                        marker="_", ms=10)
                handles.setdefault(f"{name}: bound", Line2D([], [], color=col, ls="--", alpha=0.8, marker="_",
                                                            ms=10))
            if len(grid):
                ax.plot(grid["time_s"], grid["bound_us"], ls="none", marker="x", ms=4, color=col, alpha=0.5)
                handles.setdefault(f"{name}: TEN bound (its time grid only, no proof)",
                                   Line2D([], [], ls="none", marker="x", color=col, alpha=0.5))
            drawn.append(s.assign(note=why or ""))
        ax.set_title(", ".join(f"{c}={v}" for c, v in zip(case_cols, case)), fontsize=9)
        ax.set_xlabel("time since solve() started (s)")
        ax.set_ylabel("collective time (µs)")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(cases):]:
        ax.set_visible(False)
    fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.97), fontsize=7,
               frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    cols = case_cols + series_cols + ["status", "note", "time_s", "incumbent_us", "bound_us", "bound_scope"]
    table = pd.concat(drawn, ignore_index=True) if drawn else df
    table[[c for c in cols if c in table.columns]].to_csv(path.with_suffix(".csv"), index=False)
    return path


def _anytime_main(argv) -> int:
    """``python -m tacos_bench.plots anytime SWEEP_DIR [-o anytime.png] [--logx]``"""
    import argparse
    import sys

    from .errors import TacosError

    ap = argparse.ArgumentParser(prog="python -m tacos_bench.plots anytime", description=_anytime_main.__doc__)
    ap.add_argument("sweep_dir", help="a sweep directory (results.parquet / results.csv and the runs' anytime.csv)")
    ap.add_argument("-o", "--output", default=None, help="PNG to write (default: SWEEP_DIR/anytime.png)")
    ap.add_argument("--logx", action="store_true")
    a = ap.parse_args(argv)
    try:
        src = Path(a.sweep_dir)
        _, df = _read_table(src)
        long = anytime_table(df, src if src.is_dir() else src.parent)
        if long.empty:
            print(f"plots: error: no run in {src} has an anytime trace (exact backends and greedy restarts "
                  "write anytime.csv)", file=sys.stderr)
            return 2
        out = plot_anytime(long, a.output or (src if src.is_dir() else src.parent) / "anytime.png", logx=a.logx)
    except TacosError as e:
        print(f"plots: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} and {out.with_suffix('.csv')}")
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
    if argv and argv[0] == "anytime":
        return _anytime_main(argv[1:])
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
