"""The topologies converted from peers' repositories (data/topologies/peer/, experiments/convert_peer_topologies.py):
the files load, their links and bandwidths are the sources' definitions, and the fluid cut bound is each source's
own optimum. A missing data file skips its tests."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "topologies" / "peer"
NAMES = ["mi250_forestcoll", "dgx1_sccl", "ndv2x2_teccl"]
# (NPUs, directed links, {GB/s of a link: how many links}) counted from the sources' matrices
EXPECTED = {
    "mi250_forestcoll": (16, 56, {50: 32, 100: 8, 200: 16}),   # 16 single, 4 double, 8 quad xGMI pairs
    "dgx1_sccl": (8, 32, {25: 16, 50: 16}),                     # 8 single, 8 double NVLink pairs
    "ndv2x2_teccl": (16, 66, {12.5: 2, 25: 32, 50: 32}),        # two DGX-1-like nodes + 0->9, 8->1
}


def _converter():
    spec = importlib.util.spec_from_file_location("convert_peer_topologies",
                                                  ROOT / "experiments" / "convert_peer_topologies.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(name):
    from tacos_bench.topology.io import load_topology

    path = DATA / f"{name}.txt"
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} absent: python experiments/convert_peer_topologies.py")
    return load_topology(path)


def _gbps(topo):
    return np.round(np.asarray(topo.bw_GiBps, float) * 2**30 / 1e9, 9)


@pytest.mark.parametrize("name", NAMES)
def test_file_loads_with_the_sources_link_counts(name):
    t = _load(name)
    n, links, per_bw = EXPECTED[name]
    assert (t.num_npus, t.num_links) == (n, links)
    t.check_strongly_connected()
    vals, counts = np.unique(_gbps(t), return_counts=True)
    assert dict(zip(vals.tolist(), counts.tolist())) == per_bw
    assert t.name == name


@pytest.mark.parametrize("name", NAMES)
def test_links_are_the_source_definition(name):
    """Every link is the source's multiplicity x unit (GB/s) times 10^9 / 2^30, with the source's latency."""
    t = _load(name)
    conv = _converter()
    want = {(s, d): (g * 10**9 / 2**30, lat) for s, d, g, lat, _ in conv.TOPOLOGIES[name]["links_fn"]()}
    got = {(int(s), int(d)): (float(b), float(lat)) for s, d, b, lat in zip(t.src, t.dst, t.bw_GiBps, t.lat_us)}
    assert got == want
    # the file is what the converter writes today (no hand edits, no stale copy)
    assert (DATA / f"{name}.txt").read_text(encoding="utf-8") == conv.edge_list_text(name, conv.TOPOLOGIES[name])


def test_source_matrices_as_the_sources_state_them():
    conv = _converter()
    mi = np.array(conv.MI250_ADJ_MAT)
    assert (mi == mi.T).all() and (mi.sum(1) == 7).all() and conv.XGMI_GBPS == 50     # 7 xGMI per GCD
    d = np.array(conv.DGX1_LINKS)
    assert (d == d.T).all() and (d.sum(1) == 6).all() and conv.NVLINK_GBPS == 25      # 6 NVLinks per V100
    codes = np.array(conv.NDV2X2_CODES)
    cross = [(s, dst) for dst in range(16) for s in range(16) if codes[dst][s] and (s < 8) != (dst < 8)]
    assert cross == [(8, 1), (0, 9)] and codes[1][8] == codes[9][0] == 107              # [dst][src]: 8->1, 0->9
    assert conv.GB_TO_GIB == 0.931322574615478515625


def test_ndv2x2_latencies_and_inter_node_links():
    t = _load("ndv2x2_teccl")
    ib = [(int(s), int(d)) for s, d, lat in zip(t.src, t.dst, t.lat_us) if lat == 1.3]
    assert sorted(ib) == [(0, 9), (8, 1)]
    assert set(np.unique(t.lat_us).tolist()) == {0.7, 1.3}
    assert set(np.unique(_load("mi250_forestcoll").lat_us).tolist()) == {0.0}


def test_sources_json_names_each_source_and_its_figure():
    path = DATA / "sources.json"
    if not path.exists():
        pytest.skip("data/topologies/peer/sources.json absent")
    rec = json.loads(path.read_text(encoding="utf-8"))
    assert set(rec["topologies"]) == set(NAMES)
    for name, t in rec["topologies"].items():
        src = t["source"]
        assert src["repo"] and len(src["commit"]) == 40 and src["file"] and src["function"], name
        assert t["links"] == EXPECTED[name][1] and t["published"], name
        assert all(p["us_1gib"] > 0 for p in t["published"]), name


@pytest.mark.parametrize("name", ["mi250_forestcoll", "dgx1_sccl"])
def test_fluid_cut_bound_is_the_sources_optimum(name):
    """ForestColl's optimum (MI250) and SCCL's 7/6 beta bound (DGX-1) are the fluid cut bound of the file."""
    from tacos_bench import Collective, Problem
    from tacos_bench.bounds import lower_bounds

    t = _load(name)
    pub = _converter().TOPOLOGIES[name]["published"][0]["us_1gib"]
    lb = lower_bounds(Problem(t, Collective("all_gather", 1, 1024.0)))
    assert lb["cut_bw_us"] == pytest.approx(pub, rel=1e-9)


@pytest.mark.parametrize("cpn", [4, 16])
def test_greedy_plus_is_not_behind_the_rarest_order_on_mi250(cpn):
    # issue 22: on ForestColl's MI250 node the tiered rules trailed plain `chunk_order=rarest` by 6-8 %;
    # greedy_plus now runs that order as a candidate (rarest_candidate) and keeps the faster
    from solvers import get_solver
    from tacos_bench import Collective, Problem
    from tacos_bench.verify import verify

    p = Problem(_load("mi250_forestcoll"), Collective("all_gather", cpn, 1024))
    plus = get_solver("greedy_plus").solve(p)
    rarest = get_solver("greedy").solve(p, chunk_order="rarest")
    # the list schedule (docs/rails.md) is off too: it alone is ahead at 4 chunks (3,523 µs)
    off = get_solver("greedy_plus").solve(p, rarest_candidate=False, tree_candidate=False, list_candidate=False)
    assert verify(p, plus.schedule).valid
    assert plus.schedule.makespan_us <= rarest.schedule.makespan_us * (1 + 1e-9)
    assert plus.schedule.makespan_us < off.schedule.makespan_us * 0.97


def test_greedy_plus_within_2_percent_of_forestcoll_at_64_chunks():
    # issue 22's target: <= 1.02x ForestColl's throughput optimum at 64 chunks per NPU (1.026x with the greedy's
    # own candidates; the tree candidate, solvers/greedy/trees.py, packs the links' load to the cut)
    from solvers import get_solver
    from tacos_bench import Collective, Problem
    from tacos_bench.verify import verify

    from tacos_bench.topology.relabel import random_permutation, relabel_problem

    p = Problem(_load("mi250_forestcoll"), Collective("all_gather", 64, 1024))
    pub = _converter().TOPOLOGIES["mi250_forestcoll"]["published"][0]["us_1gib"]
    plus = get_solver("greedy_plus").solve(p)
    off = get_solver("greedy_plus").solve(p, tree_candidate=False, list_candidate=False)   # list: 1.016x
    assert verify(p, plus.schedule).collective_time_us <= 1.02 * pub
    assert plus.candidate == "trees" and off.schedule.makespan_us > 1.02 * pub
    for seed in (0, 3, 7):      # not a lucky labelling (over 10: 1.011-1.018x)
        q = relabel_problem(p, random_permutation(p.num_npus, seed))
        assert verify(q, get_solver("greedy_plus").solve(q).schedule).collective_time_us <= 1.02 * pub, seed
