"""`plots sweep`: rows of different problems never merge into one point, error bars are labelled and
respect the floor of their quantity, overlapping series stay apart, and every figure has its table beside it.

Synthetic results tables only (no solver runs); the whole file runs in a few seconds.
"""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tacos_bench.errors import ConfigError
from tacos_bench.plots import _draw_sweep, main, sweep_table

PNG = b"\x89PNG\r\n\x1a\n"


def _table(**vary):
    """The README's sweep in miniature: greedy on mesh4x4 and torus4x4 (both 16 NPUs), seeds 0 and 1,
    plus one error row that must never make a point. ``vary`` replaces columns."""
    rows = []
    for topo, links, t in (("mesh4x4", 48, 12.0), ("torus4x4", 64, 8.0)):
        for seed in (0, 1):
            rows.append({"solver": "greedy", "topology": topo, "topology_kind": topo[:-3], "num_npus": 16,
                         "num_links": links, "collective": "all_gather", "buffer_mib": 64.0, "chunks_per_npu": 1,
                         "seed": seed, "collective_time_us": t + seed, "lower_bound_us": 8.0,
                         "gap": (t + seed) / 8.0 - 1, "synthesis_time_s": 0.01, "status": "feasible",
                         "valid": True})
    rows.append({"solver": "greedy", "topology": "mesh4x4", "num_npus": 16, "seed": 2, "collective_time_us": 1e6,
                 "status": "error", "valid": None})
    df = pd.DataFrame(rows)
    for k, v in vary.items():
        df[k] = v
    return df


def _sweep(tmp_path, df, *args):
    d = tmp_path / "sweep"
    d.mkdir(exist_ok=True)
    df.to_parquet(d / "results.parquet")
    return d, main(["sweep", str(d), *args])


def test_two_topologies_at_one_x_are_two_series_in_the_side_csv(tmp_path, capsys):
    d, rc = _sweep(tmp_path, _table(), "--x", "num_npus", "--y", "collective_time_us", "--hue", "solver")
    assert rc == 0, capsys.readouterr().err
    png, csv = d / "collective_time_us_vs_num_npus.png", d / "collective_time_us_vs_num_npus.csv"
    assert png.read_bytes()[:8] == PNG
    pts = pd.read_csv(csv)
    assert len(pts) == 2 and sorted(pts["topology"]) == ["mesh4x4", "torus4x4"]
    # each point averages its own topology's two seeds (the error row at 1e6 counts nowhere)
    assert dict(zip(pts["topology"], pts["collective_time_us"])) == {"mesh4x4": 12.5, "torus4x4": 8.5}
    assert (pts["n_runs"] == 2).all() and pts["series"].nunique() == 2


@pytest.mark.parametrize("column, values", [("collective", ["all_gather", "all_reduce"]),
                                            ("buffer_mib", [1.0, 256.0]), ("chunks_per_npu", [1, 4]),
                                            ("p_solver_restarts", [1, 8])])
def test_any_problem_column_that_varies_at_one_x_separates_series(column, values):
    # one topology only: rows differ solely in `column` (and the seed), so only `column` may split them
    df = _table()
    df = df[df["topology"] == "mesh4x4"].copy()
    df[column] = [values[i % 2] for i in range(len(df))]
    pts, meta = sweep_table(df, "num_npus", "collective_time_us", "solver")
    assert meta["split"] == [column]
    assert len(pts) == 2 and sorted(pts[column].astype(str)) == sorted(map(str, values))


def test_repeats_over_seeds_are_averaged_not_split():
    df = _table()
    pts, meta = sweep_table(df[df["topology"] == "mesh4x4"], "num_npus", "collective_time_us", "solver")
    assert meta["split"] == [] and len(pts) == 1 and pts["n_runs"].iloc[0] == 2


def test_refusal_is_one_line_naming_the_column(tmp_path, capsys):
    d, rc = _sweep(tmp_path, _table(), "--x", "num_npus", "--y", "gap", "--split", "refuse")
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "topology" in err and "--facet topology" in err
    assert not list(d.glob("*.png")) and not list(d.glob("gap_vs_*.csv"))


def test_refusal_exits_non_zero_from_the_command_line(tmp_path):
    d = tmp_path / "sweep"
    d.mkdir()
    _table(buffer_mib=[1.0, 64.0, 1.0, 64.0, 1.0]).to_csv(d / "results.csv", index=False)  # csv-only sweep
    r = subprocess.run([sys.executable, "-m", "tacos_bench.plots", "sweep", str(d), "--hue", "solver,topology",
                        "--y", "gap", "--split", "refuse"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "buffer_mib" in r.stderr


def test_too_many_series_refuses_naming_a_column_to_facet_by(tmp_path, capsys):
    _, rc = _sweep(tmp_path, _table(), "--y", "gap", "--max-series", "1")
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--facet topology" in err


def test_side_csv_has_the_error_bar_ends_and_min_max_is_the_default(tmp_path, capsys):
    _, rc = _sweep(tmp_path, _table(), "--y", "collective_time_us", "-o", str(tmp_path / "fig.png"))
    assert rc == 0, capsys.readouterr().err
    pts = pd.read_csv(tmp_path / "fig.csv")
    for c in ("series", "solver", "topology", "num_npus", "x_drawn", "collective_time_us", "collective_time_us_lo",
              "collective_time_us_hi", "n_runs", "error_bar"):
        assert c in pts.columns, c
    pts = pts.set_index("topology")
    assert pts.loc["mesh4x4", "collective_time_us_lo"] == 12.0 and pts.loc["mesh4x4", "collective_time_us_hi"] == 13.0
    assert (pts["error_bar"] == "min–max").all()


@pytest.mark.parametrize("err", ["std", "minmax"])
def test_a_gap_is_never_drawn_below_zero(err):
    # three runs at the bound and one far off: mean - std < 0; a gap of -1e-16 (float noise) in every mode
    df = _table().iloc[:4].copy()
    df = pd.concat([df, df.iloc[[0]].assign(seed=5)], ignore_index=True)
    df["gap"] = [0.0, -1e-16, 0.0, 0.0, 0.9]
    fig, pts = _draw_sweep(df, "num_npus", "gap", "solver", logx=False, logy=False, title=None, facet=None,
                           split="series", err=err, dodge=0.1, max_series=12)
    try:
        assert (pts["gap_lo"] >= 0).all() and (pts["gap"] >= 0).all()
        if err == "std":
            assert (pts["gap_min"] - pts["gap_std"] < 0).any()  # the unclipped bar would cross 0
        # the drawn bars themselves, not just the table
        ends = [seg[:, 1].min() for coll in fig.axes[0].collections for seg in coll.get_segments()]
        assert ends and min(ends) >= 0
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_legend_says_what_the_bars_are_and_series_look_different():
    df = _table()
    exact = df[df["status"] != "error"].assign(solver="cpsat")  # the same times as milp: must stay visible
    df = pd.concat([df, exact, exact.assign(solver="milp")], ignore_index=True)
    fig, pts = _draw_sweep(df, "num_npus", "collective_time_us", "solver", logx=False, logy=False, title=None,
                           facet=None, split="series", err="minmax", dodge=0.1, max_series=12)
    try:
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert any("min–max over 2 runs" in t for t in texts), texts
        lines = [c.lines[0] for c in fig.axes[0].containers]  # each series' data line (not its error-bar caps)
        styles = {(ln.get_marker(), ln.get_linestyle()) for ln in lines}
        assert len(styles) == pts["series"].nunique() == 6
        assert all(ln.get_alpha() is not None and ln.get_alpha() < 1 for ln in lines)
        same = pts[pts["solver"].isin(["cpsat", "milp"]) & (pts["topology"] == "mesh4x4")]
        assert same["collective_time_us"].nunique() == 1 and same["x_drawn"].nunique() == 2
        assert np.allclose(pts["num_npus"], 16)  # the table keeps the true x; only x_drawn is nudged
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_the_readme_command_line_still_works(tmp_path, capsys):
    d, rc = _sweep(tmp_path, _table(), "--x", "num_npus", "--y", "synthesis_time_s", "--hue", "solver", "--logy")
    assert rc == 0, capsys.readouterr().err
    assert (d / "synthesis_time_s_vs_num_npus.png").read_bytes()[:8] == PNG
    assert (d / "synthesis_time_s_vs_num_npus.csv").is_file()


def test_facets_and_bad_columns(tmp_path, capsys):
    _, rc = _sweep(tmp_path, _table(), "--y", "gap", "--facet", "topology", "-o", str(tmp_path / "f.png"))
    assert rc == 0, capsys.readouterr().err
    pts = pd.read_csv(tmp_path / "f.csv")
    assert list(pts.columns[:2]) == ["topology", "solver"] and len(pts) == 2
    with pytest.raises(ConfigError, match="no_such"):
        sweep_table(_table(), "num_npus", "no_such", "solver")
    _, rc = _sweep(tmp_path, _table(), "--y", "gap", "-o", str(tmp_path / "f.csv"))
    assert rc == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


# ------------------------------------------------------------------ issue 34: a sweep figure a paper can use
def _figure(df, x="num_npus", y="collective_time_us", **kw):
    return _draw_sweep(df, x, y, "solver", logx=False, logy=False, title=None, facet=None, split="series",
                       err="minmax", dodge=0.1, max_series=12, **kw)


def _close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_axis_titles_are_words_with_units():
    fig, _ = _figure(_table())
    try:
        ax = fig.axes[0]
        assert ax.get_xlabel() == "NPUs" and ax.get_ylabel() == "collective time (µs)"
        assert "collective time (µs) vs NPUs" in fig._suptitle.get_text()
    finally:
        _close(fig)


def test_categories_on_x_are_not_joined_by_lines():
    df = _table().assign(topology_kind=None)
    fig, pts = _figure(df, x="topology")
    try:
        lines = [c.lines[0] for c in fig.axes[0].containers]
        assert lines and all(ln.get_linestyle() == "None" for ln in lines)
        assert all(ln.get_marker() not in (None, "None", "") for ln in lines)
    finally:
        _close(fig)
    fig, _ = _figure(_table())  # a numeric x keeps its lines
    try:
        assert all(c.lines[0].get_linestyle() != "None" for c in fig.axes[0].containers)
    finally:
        _close(fig)


def test_failed_runs_are_drawn_and_counted_not_dropped(tmp_path, capsys):
    df = _table()
    # cpsat failed everywhere it ran: two error rows and one schedule the verifier rejected
    fails = df.iloc[:3].assign(solver="cpsat", status=["error", "error", "feasible"], valid=[None, None, False])
    df = pd.concat([df, fails], ignore_index=True)
    fig, pts = _figure(df)
    try:
        cp = pts[pts["solver"] == "cpsat"]
        assert len(cp) == 2 and (cp["n_runs"] == 0).all() and cp["collective_time_us"].isna().all()
        assert sorted(cp["n_failed"]) == [1, 2]
        assert dict(zip(cp["topology"], cp["failed"])) == {"mesh4x4": "error x2",
                                                            "torus4x4": "rejected by the verifier"}
        # greedy's own error row (seed 2, mesh4x4) is counted at its point, which still averages two runs
        g = pts[(pts["solver"] == "greedy") & (pts["topology"] == "mesh4x4")]
        assert g["n_runs"].tolist() == [2] and g["n_failed"].tolist() == [1]
        crosses = [ln for ln in fig.axes[0].lines if ln.get_marker() == "x"]
        assert crosses and sum(len(ln.get_xdata()) for ln in crosses) == int((pts["n_failed"] > 0).sum())
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert any("without a verified schedule" in t for t in texts), texts
    finally:
        _close(fig)
    _, rc = _sweep(tmp_path, df, "--y", "collective_time_us", "-o", str(tmp_path / "f.png"))
    assert rc == 0, capsys.readouterr().err
    assert pd.read_csv(tmp_path / "f.csv")["n_failed"].sum() == 4


def test_the_legend_is_beside_the_panels_not_on_the_data():
    fig, _ = _figure(_table())
    try:
        fig.canvas.draw()
        leg = fig.legends[0].get_window_extent()
        ax = fig.axes[0].get_window_extent()
        assert leg.x0 >= ax.x1 and not fig.axes[0].get_legend()
    finally:
        _close(fig)
