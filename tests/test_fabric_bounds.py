"""The last-import-wave term of the fabric cut bound (tacos_bench/bounds/fabric.py, docs/fabrics.md): below every
verified schedule of every fabric backend on small rail clusters, reached by an exact schedule, and its value
on dgx_h100x4 as docs/fabrics.md derives it by hand."""

from __future__ import annotations

import pytest

from solvers import available_solvers, get_solver
from solvers.base import CAP_EXACT, CAP_FABRIC, solver_class
from solvers.exact.fabric import solve_fabric
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bounds
from tacos_bench.errors import SolverError
from tacos_bench.topology import named_topology
from tacos_bench.topology.fabrics import rail_cluster
from tacos_bench.verify import verify

RAILS = {"2x2_nic10_mc": lambda: rail_cluster(2, 2, spines=0, nic_GiBps=10.0, nvswitch_multicast=True),
         "3x2_nic20": lambda: rail_cluster(3, 2, spines=0, nic_GiBps=20.0)}


@pytest.mark.parametrize("rail", sorted(RAILS))
@pytest.mark.parametrize("kind,cpn", [("all_gather", 1), ("all_gather", 2), ("broadcast", 2)])
def test_no_verified_schedule_beats_the_wave_bound(rail, kind, cpn):
    p = Problem(RAILS[rail](), Collective(kind, cpn, 16.0))
    lb = lower_bounds(p)
    assert lb["cut_method"] == "switch groups, last import wave" and lb["best_source"] == "cut"
    ran = 0
    for name in available_solvers():
        s = solver_class(name)
        if CAP_FABRIC not in s.capabilities or not get_solver(name).supports(kind):
            continue
        if CAP_EXACT in s.capabilities and rail != "2x2_nic10_mc":   # the exact search: on the smaller one only
            continue
        try:
            res = get_solver(name).solve(p, {"time_limit_s": 2.0} if CAP_EXACT in s.capabilities else {})
        except SolverError:
            continue
        v = verify(p, res.schedule)
        assert v.valid, (name, v.message)
        assert v.collective_time_us >= lb["best_us"] * (1 - 1e-9), (name, v.collective_time_us, lb["best_us"])
        ran += 1
    assert ran >= 3


def test_an_exact_all_gather_meets_the_wave_bound():
    p = Problem(RAILS["2x2_nic10_mc"](), Collective("all_gather", 1, 16.0))
    out = solve_fabric(p, time_limit_s=20, use_bound=False, skip_search_at_bound=False)
    assert verify(p, out.schedule).collective_time_us == pytest.approx(lower_bounds(p)["best_us"], rel=1e-9)


def test_dgx_h100x4_value():
    # 3 NIC imports of 673.8 µs, then 7 chunks of 75.2 µs over the NVSwitch down-link (docs/fabrics.md)
    p = Problem(named_topology("dgx_h100x4"), Collective("all_gather", 1, 1024.0))
    t = named_topology("dgx_h100x4")
    nic = 1.35 + 1.35 + p.chunk_bytes / (float(t.bw_GiBps[t.link_id(36, 0)]) * 2**30) * 1e6
    nvl = 0.3 + 0.3 + p.chunk_bytes / (float(t.bw_GiBps[t.link_id(32, 0)]) * 2**30) * 1e6
    assert lower_bounds(p)["best_us"] == pytest.approx(3 * nic + 7 * nvl, rel=1e-9)


# ------------------------------------------------------------------ All-Reduce over groups (Patarasuk-Yuan, groups)
@pytest.mark.parametrize("topo", ["dgx_h100x2", "dgx_h100x4", "dgx_a100x4", "leafspine2x4", "leafspine2x4_2to1"])
@pytest.mark.parametrize("cpn", [1, 4])
def test_no_all_reduce_beats_the_group_count(topo, cpn):
    """Each chunk enters groups 2 (G-1) times when nothing outside them reduces: never above a verified
    All-Reduce of any backend that takes the fabric."""
    t = named_topology(topo)
    p = Problem(t, Collective("all_reduce", cpn, 64.0))
    bound = lower_bounds(p)["best_us"]
    for name in ("greedy_plus", "ring", "rhd"):
        r = get_solver(name).solve(p)
        v = verify(p, r.schedule)
        assert v.valid and v.collective_time_us >= bound * (1 - 1e-9), name


def test_the_group_count_on_four_dgx_nodes():
    """4 nodes: 6 transfers per chunk into the nodes over their 32 NICs, 128 chunks of 8 MiB: 24 NIC times
    each; the NVSwitch reduces, but inside the groups. A switch outside that reduces (SHARP leaves) voids it."""
    from tacos_bench.bounds.fabric import _group_gossip_us, occupancy_us

    t = named_topology("dgx_h100x4")
    p = Problem(t, Collective("all_reduce", 4, 1024.0))
    occ = occupancy_us(t, p.chunk_bytes)
    nic = float(occ[t.link_id(36, 0)])        # leaf 0 -> GPU 0
    assert _group_gossip_us(t, occ, p.num_chunks, None) == pytest.approx(24 * nic, rel=1e-12)
    sharp = named_topology("leafspine4x8_sharp")
    assert _group_gossip_us(sharp, occupancy_us(sharp, 1 << 20), 32, None) == 0.0


# ------------------------------------------------------------------ All-Reduce: rows into a group before others meet
def _slowed_rails(nodes, gpus):
    from tacos_bench.topology.transforms import slow_links

    return slow_links(rail_cluster(nodes, gpus, spines=0, nic_GiBps=20.0), [],
                      npus=[[v, 0.5, "nics"] for v in range(gpus)])


@pytest.mark.parametrize("nodes,slow", [(3, True), (3, False), (4, True)])
@pytest.mark.parametrize("cpn", [1, 2])
def test_no_all_reduce_beats_the_late_import_bound(nodes, slow, cpn):
    """A row into a group that starts before two other groups' contributions can have met carries one group's:
    never above a verified All-Reduce of any backend that takes the fabric (cpsat's included)."""
    from tacos_bench.bounds.fabric import _late_import_us, lead_lag_us, occupancy_us

    t = _slowed_rails(nodes, 2) if slow else rail_cluster(nodes, 2, spines=0, nic_GiBps=20.0)
    p = Problem(t, Collective("all_reduce", cpn, 16.0))
    occ = occupancy_us(t, p.chunk_bytes)
    late = _late_import_us(t, occ, p.num_chunks, lead_lag_us(t, occ)[0])
    b = lower_bounds(p)
    assert late > 0 and b["best_us"] >= late
    if slow:   # the cut's best term: the late imports, or the export ramp above them
        assert b["cut_us"] >= late and b["best_source"] == "cut"
    for name in ("greedy_plus", "ring", "rhd", "cpsat"):
        if name == "cpsat" and nodes != 3:
            continue
        r = get_solver(name).solve(p, {"time_limit_s": 5.0} if name == "cpsat" else {})
        v = verify(p, r.schedule)
        assert v.valid and v.collective_time_us >= b["best_us"] * (1 - 1e-9), (name, v.collective_time_us)


def test_the_late_import_bound_on_a_degraded_dgx_node():
    """dgx_h100x4, node 0's NICs at 50 %, 1 chunk per NPU: no two nodes' contributions meet before a healthy NIC
    row (673.8 µs) ends, so each slowed NIC fits only 3 rows that carry three nodes' after it and one before:
    3 1/3 per NIC < 4; 4 after it: 673.8 + 4 x 1344.9 µs (the cut alone: 4 x 1344.9). A reducing switch
    outside the groups (SHARP leaves) voids it."""
    from tacos_bench.bounds.fabric import _late_import_us, lead_lag_us, occupancy_us
    from tacos_bench.topology.transforms import slow_links

    t = slow_links(named_topology("dgx_h100x4"), [], npus=[[g, 0.5, "nics"] for g in range(8)])
    p = Problem(t, Collective("all_reduce", 1, 1024.0))
    occ = occupancy_us(t, p.chunk_bytes)
    slow, fast = float(occ[t.link_id(36, 0)]), float(occ[t.link_id(36, 8)])     # leaf 0 -> GPU 0, -> GPU 8
    assert slow == pytest.approx(2 * fast - 2.7, rel=1e-3)
    assert _late_import_us(t, occ, 32, lead_lag_us(t, occ)[0]) == pytest.approx(fast + 4 * slow, rel=1e-9)
    # the export ramp is higher still (below)
    assert lower_bounds(p)["cut_method"] == "switch groups, export ramp"
    sharp = named_topology("leafspine4x8_sharp")
    so = occupancy_us(sharp, 1 << 20)
    assert _late_import_us(sharp, so, 32, lead_lag_us(sharp, so)[0]) == 0.0


# ------------------------------------------------------------------ All-Reduce: a group's exports after its switch
def test_the_export_ramp_on_a_degraded_dgx_node():
    """dgx_h100x4, node 0's eight NICs at 50 %, 1 chunk per NPU: each chunk leaves node 0 once (or one NIC
    carries five: 5 x 1,344.9 µs), after its NVSwitch gathered the eight contributions, so the eighth NIC starts
    after 7 NVLink rows, ends its four exports 4 x 1,344.9 µs later, and a third node waits one healthy NIC row
    for the last chunk: 6,579.5 µs (the late imports gave 6,053.3)."""
    from tacos_bench.bounds.fabric import _export_ramp_us, occupancy_us
    from tacos_bench.topology.transforms import slow_links

    t = slow_links(named_topology("dgx_h100x4"), [], npus=[[g, 0.5, "nics"] for g in range(8)])
    p = Problem(t, Collective("all_reduce", 1, 1024.0))
    occ = occupancy_us(t, p.chunk_bytes)
    nvlink, slow, fast = (float(occ[t.link_id(*e)]) for e in ((0, 32), (0, 36), (36, 8)))
    b = lower_bounds(p)
    assert b["best_us"] == pytest.approx(7 * nvlink + 4 * slow + fast, rel=1e-9) == _export_ramp_us(t, occ, 32)
    assert b["best_us"] == pytest.approx(6579.5, abs=0.1) and b["cut_method"] == "switch groups, export ramp"
    # a reducing or multicasting switch outside the groups voids it
    sharp = named_topology("leafspine4x8_sharp")
    assert _export_ramp_us(sharp, occupancy_us(sharp, 1 << 20), 32) == 0.0


@pytest.mark.parametrize("nodes,gpus,slow,cpn", [(2, 2, "node", 1), (2, 3, "none", 2), (3, 2, "node", 2),
                                                 (3, 3, "rails", 1), (4, 2, "node", 3), (4, 4, "none", 1)])
def test_no_all_reduce_beats_the_export_ramp(nodes, gpus, slow, cpn):
    """Never above a verified All-Reduce of any backend that takes the fabric (cpsat's on the smallest)."""
    from tacos_bench.bounds.fabric import _export_ramp_us, occupancy_us
    from tacos_bench.topology.transforms import slow_links

    t = rail_cluster(nodes, gpus, spines=0, nic_GiBps=20.0, nvlink_GiBps=100.0, nvswitch_multicast=True,
                     nvswitch_reduce=True)
    if slow != "none":
        who = range(gpus) if slow == "node" else range(0, nodes * gpus, gpus)
        t = slow_links(t, [], npus=[[v, 0.5, "nics"] for v in who])
    p = Problem(t, Collective("all_reduce", cpn, 16.0))
    ramp = _export_ramp_us(t, occupancy_us(t, p.chunk_bytes), p.num_chunks)
    assert ramp > 0 and lower_bounds(p)["best_us"] >= ramp
    for name in ("greedy_plus", "ring", "rhd") + (("cpsat",) if nodes * gpus <= 6 and cpn == 1 else ()):
        r = get_solver(name).solve(p, {"time_limit_s": 5.0} if name == "cpsat" else {})
        v = verify(p, r.schedule)
        assert v.valid and v.collective_time_us >= ramp * (1 - 1e-9), (name, v.collective_time_us, ramp)
