"""Every registered backend through the same checker (as networkx runs every max-flow algorithm
through one validator): every collective it claims (its capability flags), on small point-to-point
topologies and, where it has ``CAP_FABRIC``, small switched fabrics; rooted collectives with root 1; every
schedule through the one verifier (:func:`tacos_bench.verify.check`) and never below the best lower bound
(:func:`tacos_bench.bounds.lower_bounds`)."""

import pytest

from solvers import available_solvers, get_solver
from solvers.base import CAP_FABRIC, CAP_FABRIC_ONLY, CAP_TIME_LIMIT, STATUSES, SolveResult
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bounds
from tacos_bench.collective import KINDS, ROOTED_KINDS
from tacos_bench.errors import SolverError, TacosError
from tacos_bench.topology import Topology
from tacos_bench.topology.generators import grid, hetero_cluster, hypercube, ring, three_tier, torus2d
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import check, verify

ASYM = Topology.from_edges(4, [(0, 1, 50, 0.5), (1, 2, 25, 1.0), (2, 3, 50, 0.5), (3, 0, 10, 2.0),
                               (1, 0, 100, 0.1), (2, 0, 40, 0.7)], name="asym4")
POINT_TO_POINT = {
    "uniring4": ring(4, bidirectional=False),
    "mesh2x2": grid([2, 2], wrap=False),
    "hetero_mesh2x3": grid([2, 3], wrap=False, bw=[50, 100]),
    "hypercube4": hypercube(4),
    "asym4": ASYM,
    "hetero2x1x2": hetero_cluster(2, 1, 2),      # two tiers: groups and rails (hier, greedy_plus)
    "three_tier2x2x2": three_tier(2, 2, 2),      # three tiers
}
# the collectives with one source or one destination per chunk run on fewer topologies (one asymmetric)
ROOTED_OR_UNICAST_ON = ("asym4", "hetero2x1x2")
FABRICS = {name: named_topology(name) for name in ("switched8", "leafspine2x4_2to1")}
IN_SWITCH_FABRICS = {name: named_topology(name) for name in ("switched8_nvls", "leafspine2x4_sharp")}
# the topologies a backend that claims a network kind may still refuse, with a one-line reason: hier needs
# tiers of links, nvls one multicast-and-reduce switch joined to every NPU
MAY_REFUSE = {("hier", "uniring4"), ("hier", "mesh2x2"), ("hier", "hypercube4"), ("hier", "asym4"),
              ("nvls", "leafspine2x4_sharp")}
TIME_LIMIT = {"time_limit_s": 0.25}   # the exact backends on a fabric stop there with their best schedule
PLAIN_KINDS = ("all_gather", "reduce_scatter", "all_reduce")


def _topologies(caps):
    if CAP_FABRIC_ONLY in caps:
        return IN_SWITCH_FABRICS
    return {**POINT_TO_POINT, **(FABRICS if CAP_FABRIC in caps else {})}


def _cases():
    for name in available_solvers():
        caps = get_solver(name).capabilities
        for topo in _topologies(caps):
            for kind in KINDS:
                if kind not in caps or (kind not in PLAIN_KINDS and topo in POINT_TO_POINT
                                        and topo not in ROOTED_OR_UNICAST_ON):
                    continue
                yield pytest.param(name, topo, kind, id=f"{name}-{topo}-{kind}")


def test_every_backend_has_cases_on_every_network_kind_it_claims():
    cases = {(c.values[0], c.values[1]) for c in _cases()}
    for name in available_solvers():
        caps = get_solver(name).capabilities
        tops = {t for s, t in cases if s == name}
        assert bool(tops & set(POINT_TO_POINT)) == (CAP_FABRIC_ONLY not in caps), name
        assert bool(tops & (set(FABRICS) | set(IN_SWITCH_FABRICS))) == (CAP_FABRIC in caps), name


@pytest.mark.parametrize("solver_name,topo,kind", list(_cases()))
def test_backend_schedule_verifies(solver_name, topo, kind):
    solver = get_solver(solver_name)
    topology = {**POINT_TO_POINT, **FABRICS, **IN_SWITCH_FABRICS}[topo]
    p = Problem(topology, Collective(kind, chunks_per_npu=1, buffer_mib=4, root=1 if kind in ROOTED_KINDS else 0))
    opts = TIME_LIMIT if CAP_TIME_LIMIT in solver.capabilities else {}
    try:
        r = solver.solve(p, seed=0, **opts)
    except TacosError as e:  # only the refusals listed, and only with a domain error
        assert (solver_name, topo) in MAY_REFUSE, f"{solver_name} refuses {topo} {kind}: {e}"
        pytest.skip(f"{solver_name} refuses {topo}: {e}")
    assert (solver_name, topo) not in MAY_REFUSE, f"{solver_name} ran on {topo}: drop it from MAY_REFUSE"
    assert r.status in STATUSES
    assert r.status in ("optimal", "feasible"), r.message
    v = check(p, r.schedule)
    assert v.valid, v.message
    assert v.collective_time_us == pytest.approx(r.objective_us)
    assert v.collective_time_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)


def test_registry_and_unknown_solver():
    assert {"bfs", "greedy"} <= set(available_solvers())
    with pytest.raises(SolverError, match="unknown solver 'nope'"):
        get_solver("nope")
    with pytest.raises(ValueError):
        SolveResult("done", None)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_reduce"])
def test_bfs_backend_verifies(kind):
    p = Problem(torus2d(3, 3, bw=[50, 10]), Collective(kind, 2, 4))
    r = get_solver("bfs").solve(p)
    assert r.status == "feasible"
    assert verify(p, r.schedule).collective_time_us == pytest.approx(r.objective_us)
    with pytest.raises(SolverError, match="no option"):
        get_solver("bfs").solve(p, chunk_order="random")
