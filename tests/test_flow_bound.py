"""The multicommodity-flow bound of the unicast collectives (tacos_bench/bounds/flow.py, docs/flow_bound.md):
never above a verified schedule of any backend, equal to hand-computed values, the reference values of issue 32,
and every reduction (orbits, Garg-Koenemann) at or below the plain LP."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import available_solvers, get_solver
from solvers.base import CAP_EXACT, CAP_FABRIC, solver_class
from tacos_bench import Collective, Problem
from tacos_bench.errors import SolverError
from tacos_bench.bounds.flow import (certificate_us, flow_solution, lb_flow_us, path_decomposition,
                                    unicast_demand)
from tacos_bench.topology import Topology
from tacos_bench.topology.fabrics import leaf_spine, switched
from tacos_bench.topology.generators import hetero_cluster, ring
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import check

from test_bounds import random_topology

UNICAST = ("all_to_all", "scatter", "gather")


def verified_makespans(p: Problem, exact_time_s: float = 1.0) -> dict[str, float]:
    """Every backend that takes ``p`` (the exact ones only on tiny cases), verified."""
    out = {}
    for name in available_solvers():
        cls = solver_class(name)
        if p.kind not in cls.capabilities or (p.topology.is_fabric and CAP_FABRIC not in cls.capabilities):
            continue
        exact = CAP_EXACT in cls.capabilities
        if exact and (name != "cpsat" or p.num_chunks > 12):
            continue
        try:
            res = get_solver(name).solve(p, {"time_limit_s": exact_time_s} if exact else {})
        except SolverError:
            continue
        if res.schedule is None:
            continue
        v = check(p, res.schedule)
        assert v.valid, (name, v.message)
        out[name] = v.collective_time_us
    return out


@pytest.mark.parametrize("seed", range(6))
def test_never_above_a_verified_schedule(seed):
    rng = np.random.default_rng(3200 + seed)
    n = int(rng.integers(3, 6))
    topo = random_topology(rng, n, int(rng.integers(0, 2 * n)), bidirectional=bool(seed % 2))
    for kind in UNICAST:
        p = Problem(topo, Collective(kind, int(rng.integers(1, 3)), float(rng.choice([1.0, 16.0])),
                                     root=int(rng.integers(n))))
        lb = lb_flow_us(p)["flow_us"]
        spans = verified_makespans(p)
        assert {"greedy", "greedy_plus"} <= spans.keys()
        for name, span in spans.items():
            assert lb <= span * (1 + 1e-9), (kind, name, span, lb)


@pytest.mark.parametrize("topo", [switched(4, 10.0, 0.5), switched(3, 10.0, 2.0, "store_forward"),
                                  leaf_spine(2, 2, oversubscription=2, bw_GiBps=10.0, lat_us=1.0)],
                         ids=["cut_through", "store_forward", "leafspine_2to1"])
def test_never_above_a_verified_schedule_on_fabrics(topo):
    for kind in UNICAST:
        p = Problem(topo, Collective(kind, 1, 16.0, root=1))
        lb = lb_flow_us(p)["flow_us"]
        spans = verified_makespans(p)
        assert "greedy_plus" in spans
        for name, span in spans.items():
            assert lb <= span * (1 + 1e-9), (kind, name, span, lb)


def test_an_exact_schedule_meets_it():
    # a one-way ring of 3: per source 1 + 2 link crossings, 9 over 3 links: 3 link times, which CP-SAT reaches
    topo = ring(3, bidirectional=False, bw=4.0, lat=0.5)
    p = Problem(topo, Collective("all_to_all", 1, 1.0))
    assert lb_flow_us(p)["flow_us"] == pytest.approx(3 * float(p.link_time_us[0]), rel=1e-9)
    assert verified_makespans(p, exact_time_s=5.0)["cpsat"] == pytest.approx(lb_flow_us(p)["flow_us"], rel=1e-9)


def test_hand_values():
    # bidirectional ring of 4: per source 1 + 1 + 2 link crossings, 16 over 8 links: 2 link times
    p = Problem(ring(4), Collective("all_to_all", 1, 4.0))
    assert lb_flow_us(p)["flow_us"] == pytest.approx(2 * float(p.link_time_us[0]), rel=1e-9)
    # one switch: (N - 1) K chunks through each NPU's port, each holding it both latencies (cut-through) or one
    for mode, lats in (("cut_through", 2), ("store_forward", 1)):
        q = Problem(switched(5, 20.0, 1.5, mode), Collective("all_to_all", 2, 8.0))
        occ = lats * 1.5 + q.chunk_bytes / (20.0 * 2**30) * 1e6
        assert lb_flow_us(q)["flow_us"] == pytest.approx(4 * 2 * occ, rel=1e-9), mode


def test_a_split_flow_by_hand():
    # Scatter from 0, 2 chunks per NPU: NPU 1's go half over the direct link 0->1 (t a chunk), half over the
    # detour 0->2->1 (0->2 four times faster): max(1 t, 1 t, (2 + 1) t / 4) = t (a schedule: 1.25 t, the
    # detour's second hop waits for its first)
    topo = Topology.from_edges(3, [(0, 1, 1.0, 0.0), (0, 2, 4.0, 0.0), (2, 1, 1.0, 0.0), (1, 0, 1.0, 0.0),
                                   (2, 0, 1.0, 0.0)])
    p = Problem(topo, Collective("scatter", 2, 6.0))
    t = p.chunk_bytes / 2**30 * 1e6
    b = lb_flow_us(p)
    assert b["flow_source"] == "lp" and b["flow_us"] == pytest.approx(t, rel=1e-9)
    paths = path_decomposition(p)
    assert sorted(paths[(0, 1)]) == [((0,), pytest.approx(0.5)), ((1, 4), pytest.approx(0.5))]
    assert paths[(0, 2)] == [((1,), 1.0)]


@pytest.mark.parametrize("name,fluid", [("random16d3s0", 37500.0), ("random32d3s0", 31406.25)])
def test_issue_reference_values(name, fluid):
    p = Problem(named_topology(name), Collective("all_to_all", 1, 1024.0))
    assert lb_flow_us(p, latency=False)["flow_us"] == pytest.approx(fluid, rel=1e-8)
    # each chunk also pays the latency of every link it crosses: never lower
    assert lb_flow_us(p)["flow_us"] >= fluid * (1 - 1e-9)
    if name == "random16d3s0":   # CP-SAT proves greedy_plus's 37,507.5 optimal there: the bound meets it
        assert lb_flow_us(p)["flow_us"] == pytest.approx(37507.5, rel=1e-9)


@pytest.mark.parametrize("topo", [hetero_cluster(2, 2, 4), named_topology("mesh3x4"), named_topology("dragonfly4x4"),
                                  leaf_spine(2, 4, oversubscription=2)], ids=["hetero", "mesh", "dragonfly", "fabric"])
def test_orbits_equal_the_plain_lp(topo):
    for kind in UNICAST:
        p = Problem(topo, Collective(kind, 1, 64.0, root=1))
        orb, lp = lb_flow_us(p, method="lp_orbits"), lb_flow_us(p, method="lp")
        assert orb["flow_us"] == pytest.approx(lp["flow_us"], rel=1e-7)
    assert lb_flow_us(Problem(topo, Collective("all_to_all", 1, 64.0)))["flow_source"] == "lp_orbits"


def test_garg_koenemann_is_a_certified_approximation():
    p = Problem(named_topology("random32d3s0"), Collective("all_to_all", 1, 1024.0))
    lp = lb_flow_us(p, method="lp")
    gk = lb_flow_us(p, method="garg_koenemann")   # ends when the certificate stalls: ~1 s
    assert gk["flow_source"] == "garg_koenemann" and gk["flow_lp_status"].startswith("phases=")
    assert 0.99 * lp["flow_us"] <= gk["flow_us"] <= lp["flow_us"] * (1 + 1e-9) <= gk["flow_lp_us"] * (1 + 1e-9)
    # past max_lp_columns without symmetry, auto runs the phases
    assert lb_flow_us(p, max_lp_columns=100, time_budget_s=1.0)["flow_source"] == "garg_koenemann"


def test_any_lengths_certify_a_bound():
    p = Problem(named_topology("random16d3s0"), Collective("all_to_all", 1, 1024.0))
    best = lb_flow_us(p)["flow_us"]
    rng = np.random.default_rng(7)
    for _ in range(5):
        assert certificate_us(p, rng.random(p.num_links)) <= best * (1 + 1e-9)
    with pytest.raises(SolverError, match="lengths"):
        certificate_us(p, -np.ones(p.num_links))


def test_gather_is_scatter_on_the_reversed_links():
    topo = random_topology(np.random.default_rng(5), 6, 6)
    g = Problem(topo, Collective("gather", 2, 16.0, root=2))
    s = Problem(topo.reversed(), Collective("scatter", 2, 16.0, root=2))
    assert lb_flow_us(g)["flow_us"] == pytest.approx(lb_flow_us(s)["flow_us"], rel=1e-9)
    assert unicast_demand(g).T.tolist() == unicast_demand(s).tolist()


def test_paths_carry_the_lp_flow():
    p = Problem(named_topology("random16d3s0"), Collective("all_to_all", 2, 1024.0))
    sol = flow_solution(p)
    paths = path_decomposition(p, sol)
    D = unicast_demand(p)
    assert sorted(paths) == [(int(s), int(d)) for s, d in zip(*np.nonzero(D))]
    load = np.zeros(p.num_links)
    topo = p.topology
    for (s, d), routes in paths.items():
        assert sum(f for _, f in routes) == pytest.approx(1.0)
        for links, f in routes:
            assert topo.src[links[0]] == s and topo.dst[links[-1]] == d
            assert all(topo.dst[a] == topo.src[b] for a, b in zip(links, links[1:]))
            load[list(links)] += f * D[s, d]
    assert float((load * p.link_time_us).max()) == pytest.approx(sol.T_us, rel=1e-6)
    with pytest.raises(SolverError, match="max_lp_columns"):
        flow_solution(p, max_lp_columns=10)


def test_other_collectives_have_none():
    p = Problem(ring(4), Collective("all_gather", 1, 4.0))
    assert lb_flow_us(p)["flow_us"] is None
    with pytest.raises(SolverError, match="unicast"):
        unicast_demand(p)


def test_probe_script_row(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "experiments" / "probe_flow_bound.py"
    spec = importlib.util.spec_from_file_location("probe_flow_bound", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "flow.csv"
    assert mod.main(["--cases", "ring4:1", "--mib", "4", "--out", str(out)]) == 0
    row = out.read_text().splitlines()
    assert row[0].startswith("topology,chunks_per_npu,flow_us,flow_source") and row[1].startswith("ring4,1,")
    # every backend the table compares, verified, against the flow bound (a time-limited cold cpsat included)
    assert mod.main(["--cases", "ring4:1", "--mib", "4", "--solvers", "greedy", "flow", "cpsat", "--time-limit", "5",
                     "--out", str(out)]) == 0
    import csv

    rec = next(csv.DictReader(out.open()))
    for name in ("greedy", "flow_routed", "cpsat"):
        assert float(rec[f"{name}_over_flow"]) >= 1 - 1e-9
    assert float(rec["flow_us"]) >= float(rec["fluid_us"]) * (1 - 1e-9)   # the bound with latencies, not a time
    assert rec["cpsat_status"] in ("optimal", "feasible")
