"""Every registered backend through the same checker (as networkx runs every max-flow algorithm
through one validator): same small instances, same verifier, same lower bounds."""

import pytest

from solvers import available_solvers, get_solver
from solvers.base import CAP_EXACT, STATUSES, SolveResult
from tacos_bench.errors import SolverError
from tacos_bench.topology.generators import torus2d
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bound_us
from tacos_bench.topology.generators import grid, hetero_cluster, hypercube, ring, three_tier
from tacos_bench.topology import Topology
from tacos_bench.verify import verify

ASYM = Topology.from_edges(4, [(0, 1, 50, 0.5), (1, 2, 25, 1.0), (2, 3, 50, 0.5), (3, 0, 10, 2.0),
                               (1, 0, 100, 0.1), (2, 0, 40, 0.7)], name="asym4")
INSTANCES = {
    "uniring4": ring(4, bidirectional=False),
    "mesh2x2": grid([2, 2], wrap=False),
    "hetero_mesh2x3": grid([2, 3], wrap=False, bw=[50, 100]),
    "hypercube4": hypercube(4),
    "asym4": ASYM,
    "hetero2x1x2": hetero_cluster(2, 1, 2),      # two tiers: groups and rails (hier, greedy_plus)
    "three_tier2x2x2": three_tier(2, 2, 2),      # three tiers
}
KINDS = ["all_gather", "reduce_scatter", "all_reduce"]
EXACT_OPTIONS = {"time_limit_s": 60}


def _cases():
    for name in available_solvers():
        for topo in INSTANCES:
            for kind in KINDS:
                yield pytest.param(name, topo, kind, id=f"{name}-{topo}-{kind}")


@pytest.mark.parametrize("solver_name,topo,kind", list(_cases()))
def test_backend_schedule_verifies(solver_name, topo, kind):
    solver = get_solver(solver_name)
    if not solver.supports(kind):
        pytest.skip(f"{solver_name} does not support {kind}")
    p = Problem(INSTANCES[topo], Collective(kind, chunks_per_npu=1, buffer_mib=4))
    opts = EXACT_OPTIONS if CAP_EXACT in solver.capabilities else {}
    try:
        r = solver.solve(p, seed=0, **opts)
    except Exception as e:  # a backend may refuse a topology it does not fit, but only with a domain error
        from tacos_bench.errors import TacosError

        assert isinstance(e, TacosError), f"{solver_name} raised {type(e).__name__}: {e}"
        pytest.skip(f"{solver_name} refuses {topo}: {e}")
    assert r.status in STATUSES
    assert r.status in ("optimal", "feasible"), r.message
    v = verify(p, r.schedule)
    assert v.collective_time_us >= lower_bound_us(p) * (1 - 1e-9)


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
