"""Anytime traces hold the asked problem's points only (issue 34): a composed All-Reduce never shows its
phases' incumbents or bounds as its own, incumbents never rise, a bound of the TEN's rounded grid is marked
``ten`` and never drawn as a proof, and a run without a result is marked in the figure.

Tiny problems (4 NPUs) through the real cpsat backend, cold; synthetic traces for the figure.
"""

import csv

import pandas as pd
import pytest

from solvers import get_solver
from tacos_bench import Collective, Problem
from tacos_bench.anytime import COLUMNS, is_problem_trace, write_trace
from tacos_bench.bounds import lower_bound_us
from tacos_bench.plots import anytime_table, plot_anytime
from tacos_bench.topology.fabrics import switched
from tacos_bench.topology.generators import ring, torus2d
from tacos_bench.topology.named import named_topology


def _cold(problem):
    return get_solver("cpsat").solve(problem, time_limit_s=30, warm_start=False)


@pytest.mark.parametrize("topo", [torus2d(2, 2), ring(4, bidirectional=False), switched(4)],
                         ids=["symmetric", "asymmetric", "fabric"])
def test_an_all_reduce_trace_is_the_all_reduce_s(topo):
    p = Problem(topo, Collective("all_reduce", 1, 1))
    r = _cold(p)
    assert r.schedule is not None and r.trace
    assert is_problem_trace(r.trace)
    incs = [row[1] for row in r.trace if row[1] is not None]
    # every incumbent is an All-Reduce time (no phase's, which is about half of it)
    assert min(incs) == pytest.approx(r.schedule.makespan_us)
    lb = lower_bound_us(p)
    for row in r.trace:
        if row[2] is not None:
            assert row[3] == "continuous" and row[2] == pytest.approx(lb)  # the problem's bound, not a phase's
    phase = _cold(Problem(topo, Collective("all_gather", 1, 1)))
    assert all(row[1] is None or row[1] > 1.5 * phase.schedule.makespan_us for row in r.trace)


def test_a_copy_collective_keeps_its_search_points_non_increasing():
    r = _cold(Problem(ring(4), Collective("all_gather", 1, 1)))
    assert is_problem_trace(r.trace) and r.trace[-1][1] == pytest.approx(r.schedule.makespan_us)


def test_a_ten_bound_is_marked_ten_and_never_continuous():
    # x links 50 GiB/s, y links 100 GiB/s: link times are no whole TEN steps, so the TEN's bound is the grid's
    p = Problem(named_topology("hetero_mesh2x2"), Collective("all_gather", 1, 1))
    r = get_solver("cpsat").solve(p, time_limit_s=30, warm_start=False, model="auto")
    assert r.optimality_scope == "ten"
    *search, end = r.trace
    bounded = [row for row in search if row[2] is not None]
    assert bounded and all(row[3] == "ten" for row in bounded)
    # here the grid's bound is above the problem's optimum: read as the problem's it would be a false proof
    assert max(row[2] for row in bounded) > r.schedule.makespan_us
    # the end point is held against the problem's own lower bound, marked as such
    assert end[3] == "continuous" and end[2] == pytest.approx(lower_bound_us(p)) and is_problem_trace(r.trace)


def test_anytime_csv_has_the_scope_column(tmp_path):
    write_trace([(0.1, 12.0, 11.1, "ten"), (0.2, 10.3, None)], tmp_path)
    rows = list(csv.DictReader((tmp_path / "anytime.csv").open()))
    assert tuple(rows[0]) == COLUMNS and rows[0]["bound_scope"] == "ten" and rows[1]["bound_scope"] == ""


def _sweep(tmp_path, runs):
    recs = []
    for i, (solver, status, trace) in enumerate(runs):
        d = tmp_path / str(i)
        d.mkdir()
        write_trace(trace, d)
        recs.append({"solver": solver, "status": status, "valid": status != "error", "topology": "t",
                     "anytime_file": "anytime.csv", "output_dir": str(d)})
    return anytime_table(pd.DataFrame(recs))


def test_the_figure_marks_ten_bounds_failed_runs_and_mixed_traces(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    long = _sweep(tmp_path, [
        ("ten_model", "feasible", [(0.1, 13.0, 11.1, "ten"), (0.2, 11.1, 11.1, "ten")]),
        ("timed_out", "no_solution", [(0.1, None, 9.0, "continuous")]),
        ("old_all_reduce", "optimal", [(0.1, 6252.5, 5002.0), (0.2, 5002.0, 5002.0), (0.3, 10004.0, 5002.0)]),
        ("good", "optimal", [(0.1, 10.0, 10.0, "continuous")]),
    ])
    captured = {}
    real = plt.Figure.savefig

    def keep(fig, *a, **k):
        captured["fig"] = fig
        return real(fig, *a, **k)

    plt.Figure.savefig = keep
    try:
        plot_anytime(long, tmp_path / "any.png")
    finally:
        plt.Figure.savefig = real
    fig = captured["fig"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "ten_model: TEN bound (its time grid only, no proof)" in labels
    assert not any(lb.startswith("ten_model") and lb.endswith(": bound") for lb in labels)
    assert "timed_out (no_solution): bound" in labels
    assert any(lb.startswith("old_all_reduce (trace mixes phases") for lb in labels)
    assert "good: incumbent" in labels and "good: bound" in labels
    ax = fig.axes[0]
    assert ax.get_legend() is None  # the legend is the figure's, beside the panels, not over the data
    pts = pd.read_csv(tmp_path / "any.csv")
    assert set(pts.loc[pts["solver"] == "timed_out", "note"]) == {"no_solution"}
    assert set(pts.loc[pts["solver"] == "ten_model", "bound_scope"]) == {"ten"}
