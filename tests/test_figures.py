"""Figures a paper can use (issue 34): the Gantt chart of a switched fabric draws every link of a cut-through
route, and its "links busy" panel reads 1.0 for a schedule that keeps every link busy.

Hand-built schedules checked by the verifier (no solver runs); each test takes well under a second.
"""

import numpy as np
import pytest

from tacos_bench import Collective
from tacos_bench.plots import gantt_bars, link_occupancy, main, utilization_timeline
from tacos_bench.problem import Problem
from tacos_bench.rundir import save_schedule, write_record
from tacos_bench.schedule import Schedule
from tacos_bench.topology.fabrics import switched
from tacos_bench.topology.generators import ring
from tacos_bench.verify import check

PNG = b"\x89PNG\r\n\x1a\n"


def _ring_through_the_switch(n=4):
    """All-Gather on switched<n>: at step k every NPU u forwards chunk (u - k) mod n to u + 1 through the
    switch, so every port link (u -> switch, switch -> u) is busy from 0 to the end."""
    p = Problem(switched(n), Collective("all_gather", 1, 1))
    sw = n
    t = 2 * float(p.link_time_us.max())  # at least both latencies plus the chunk at the slower port
    rows = []
    for k in range(n - 1):
        for u in range(n):
            v = (u + 1) % n
            rows.append(((u - k) % n, u, v, k * t, (k + 1) * t, "copy", f"{u}>{sw}>{v}"))
    return p, Schedule.from_rows(rows)


def test_a_cut_through_route_occupies_each_of_its_links():
    p, s = _ring_through_the_switch()
    assert check(p, s).valid
    link, row = link_occupancy(p.topology, s)
    assert len(link) == 2 * len(s)  # u -> switch and switch -> v for every row
    topo = p.topology
    for r in (0, 5):
        u, v = int(s.src[r]), int(s.dst[r])
        want = {int(topo.link_id(u, 4)), int(topo.link_id(4, v))}
        assert set(link[row == r].tolist()) == want


def test_the_gantt_of_a_switched_run_has_bars_on_every_route_link():
    p, s = _ring_through_the_switch()
    link, start, end, _, _ = gantt_bars(p, s)
    # every one of the 2n port links has a bar per step (the old lookup by (src, dst) found none)
    assert sorted(set(link.tolist())) == list(range(p.topology.num_links))
    assert all((link == k).sum() == p.num_npus - 1 for k in range(p.topology.num_links))
    assert (end > start).all()


def test_links_busy_is_one_for_a_fully_busy_fabric_schedule():
    p, s = _ring_through_the_switch()
    _, frac = utilization_timeline(p, s, bins=10)
    assert np.allclose(frac, 1.0)


def test_multicast_rows_share_their_common_link_once():
    # a multicast group 0 > 3 > {1, 2}: the shared link 0 -> switch counts once, so 3 of 6 links are busy
    p = Problem(switched(3, multicast=True), Collective("broadcast", 1, 1, root=0))
    t = 2 * float(p.link_time_us.max())
    s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy", "0>3>1"), (0, 0, 2, 0.0, t, "copy", "0>3>2")])
    assert check(p, s).valid
    _, frac = utilization_timeline(p, s, bins=4)
    assert np.allclose(frac, 3 / p.topology.num_links)


def test_point_to_point_schedules_are_unchanged():
    p = Problem(ring(2), Collective("all_gather", 1, 4))
    t = float(p.link_time_us[0])
    s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, t, 2 * t, "copy")])
    link, _, _, _, _ = gantt_bars(p, s)
    assert link.tolist() == [p.topology.link_id(0, 1), p.topology.link_id(1, 0)]
    assert utilization_timeline(p, s, bins=2)[1].tolist() == [0.5, 0.5]


def test_the_gantt_command_on_a_switched_run_directory(tmp_path, capsys):
    p, s = _ring_through_the_switch()
    d = tmp_path / "run"
    d.mkdir()
    _, fields = save_schedule(d, p, s)
    write_record(d, {"solver": "hand", "status": "feasible", "valid": True, "collective": "all_gather",
                     "chunks_per_npu": 1, "buffer_mib": 1.0, "topology": p.topology.name,
                     "num_npus": p.num_npus, "num_links": p.topology.num_links, **fields})
    rc = main([str(d)])
    assert rc == 0, capsys.readouterr().err
    assert (d / "gantt.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize("route", ["", "0>1"])
def test_a_route_of_one_link_is_that_link(route):
    p = Problem(ring(3), Collective("all_gather", 1, 3))
    t = float(p.link_time_us.max())
    s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy", route)])
    link, row = link_occupancy(p.topology, s)
    assert link.tolist() == [p.topology.link_id(0, 1)] and row.tolist() == [0]


# ------------------------------------------------------------------ the ablation figure: one cell per configuration
def test_the_heatmap_writes_every_value_and_keeps_the_colour_bar_beside_it(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from tacos_bench.plots import plot_heatmap

    t = pd.DataFrame({"hetero64": [1.0, 1.05, 1.6316], "torus8x8": [1.0625, 1.0, float("nan")]},
                     index=["+ decomposition", "greedy_plus - gate", "TACOS rule"])
    figs = []
    real = plt.Figure.savefig
    plt.Figure.savefig = lambda fig, *a, **k: (figs.append(fig), real(fig, *a, **k))[1]
    try:
        out = plot_heatmap(t, tmp_path / "h.png", value_label="time / lower bound", fmt="{:.4f}", floor=1.0)
    finally:
        plt.Figure.savefig = real
    assert out.read_bytes()[:8] == PNG
    ax, cbar = figs[0].axes
    texts = {tx.get_text(): tx for tx in ax.texts}
    for v in ("1.0000", "1.0500", "1.6316", "1.0625", "n/a"):
        assert v in texts, v
    assert texts["1.0500"].get_fontweight() == "normal" and texts["1.6316"].get_fontweight() == "normal"
    figs[0].canvas.draw()
    assert cbar.get_window_extent().x0 >= ax.get_window_extent().x1  # the scale is beside the cells
    lo, hi = cbar.get_ylim()
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.6316)  # the axis where the data is, not from 0
    assert pd.read_csv(tmp_path / "h.csv", index_col=0).shape == (3, 2)


def test_the_ablation_rules_figure_redraws_from_the_stored_report(tmp_path, monkeypatch):
    import importlib
    import shutil
    import sys
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "experiments"))
    sys.modules.pop("study_ablation", None)
    study = importlib.import_module("study_ablation")
    shutil.copy(root / "docs" / "studies" / "ablation.md", tmp_path / "ablation.md")
    out = study.redraw_rules(tmp_path)
    assert out.read_bytes()[:8] == PNG
    cells = pd.read_csv(tmp_path / "ablation_rules.csv", index_col=0)
    assert cells.shape == (15, 6) and cells.notna().all().all() and (cells >= 1.0).all().all()
    assert cells.index[0] == "TACOS rule (greedy)" and list(cells.columns[:2]) == ["hetero64", "hetero512"]
    with pytest.raises(SystemExit, match="nothing to redraw from"):
        study.redraw_rules(tmp_path / "none")
