"""Core model: topology object, collectives, cost model, problem, schedule, solver registry."""

import numpy as np
import pytest

from solvers import available_solvers, get_solver
from solvers.base import SolveResult
from tacos_bench import Collective, Problem, Schedule, Topology
from tacos_bench.collective import canonical_kind
from tacos_bench.cost import link_time_us
from tacos_bench.errors import CollectiveError, ScheduleError, SolverError, TopologyError
from tacos_bench.generators import mesh2d, ring, torus2d
from tacos_bench.verify import verify


def test_topology_sorted_and_csr():
    t = Topology.from_edges(3, [(2, 0, 10, 1), (0, 1, 50, 0.5), (1, 2, 25, 0)])
    assert t.src.tolist() == [0, 1, 2] and t.dst.tolist() == [1, 2, 0]
    assert t.out_ptr.tolist() == [0, 1, 2, 3]
    assert t.in_neighbors(0).tolist() == [2]
    assert t.link_ids([0, 1, 0], [1, 2, 2]).tolist() == [0, 1, -1]
    assert not t.is_homogeneous and not t.is_symmetric
    with pytest.raises(TopologyError, match="no link 0->2"):
        t.link_id(0, 2)


@pytest.mark.parametrize("edges,msg", [
    ([(0, 5, 1, 1)], "out of range"),
    ([(1, 1, 1, 1)], "self-loop"),
    ([(0, 1, 0, 1)], "bandwidth must be > 0"),
    ([(0, 1, 1, -1)], "latency must be >= 0"),
    ([(0, 1, 1, 1), (0, 1, 2, 2)], "duplicate link 0->1"),
])
def test_topology_rejects_bad_links(edges, msg):
    with pytest.raises(TopologyError, match=msg):
        Topology.from_edges(3, edges)


def test_disconnected_topology_names_cut_off_npus():
    t = Topology.from_edges(4, [(0, 1, 1, 1), (1, 0, 1, 1), (2, 3, 1, 1), (3, 2, 1, 1)], name="split")
    with pytest.raises(TopologyError, match=r"NPU\(s\) 2, 3 cannot be reached from NPU 0"):
        Problem(t, Collective())
    one_way = Topology.from_edges(2, [(0, 1, 1, 1)])
    with pytest.raises(TopologyError, match=r"NPU\(s\) 1 cannot reach NPU 0"):
        Problem(one_way, Collective())


def test_networkx_round_trip():
    t = torus2d(3, 4, bw=[50, 100], lat=[0.5, 1.0])
    back = Topology.from_networkx(t.to_networkx())
    for a in ("src", "dst", "bw_GiBps", "lat_us"):
        assert np.array_equal(getattr(t, a), getattr(back, a))


def test_reversed_swaps_directions():
    t = ring(4, bidirectional=False)
    r = t.reversed()
    assert sorted(zip(r.src.tolist(), r.dst.tolist())) == sorted(zip(t.dst.tolist(), t.src.tolist()))


def test_collective_sizes_and_aliases():
    c = Collective("AllReduce", chunks_per_npu=3, buffer_mib=1)
    assert c.kind == "all_reduce" and c.num_chunks(4) == 12 and c.chunk_bytes(4) == 2**20 // 12
    assert canonical_kind("rs") == "reduce_scatter"
    with pytest.raises(CollectiveError, match="unknown collective 'broadcastx'"):
        Collective("broadcastx")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(CollectiveError, match="chunks_per_npu"):
            Collective(chunks_per_npu=bad)
    for bad in (0, -2, float("nan"), "big"):
        with pytest.raises(CollectiveError, match="buffer_mib"):
            Collective(buffer_mib=bad)


def test_pre_and_postconditions():
    c = Collective("reduce_scatter")
    assert c.initial_state(2, 5, 4) == 0b0100
    assert c.required_state(1, 5, 4) == 0b1111 and c.required_state(2, 5, 4) is None
    ag = Collective("all_gather")
    assert ag.initial_state(1, 5, 4) == 0b1111 and ag.initial_state(2, 5, 4) == 0


def test_cost_model_matches_reference():
    # ../shared/reference: mesh2d 8x8, 1 GiB, cpn 1 -> 313.0 µs per link; 1 MiB (16 KiB chunks) -> 0.8052 µs
    assert float(link_time_us(50, 0.5, 2**30 // 64)) == pytest.approx(313.0)
    p = Problem(mesh2d(8, 8), Collective("all_gather", 1, 1))
    assert p.chunk_bytes == 16384 and float(p.link_time_us[0]) == pytest.approx(0.8052, abs=1e-4)


def test_problem_rejects_zero_byte_chunks():
    with pytest.raises(CollectiveError, match="too small"):
        Problem(mesh2d(4, 4), Collective("all_gather", 1, 1e-6))


def test_schedule_csv_exact_columns_and_round_trip(tmp_path):
    s = Schedule.from_rows([(1, 1, 0, 0.1, 0.30000000000000004, "reduce"), (0, 0, 1, 0.0, 1 / 3, "copy")])
    path = s.to_csv(tmp_path / "s.csv")
    assert path.read_text().splitlines()[0] == "chunk,src,dst,start_us,end_us,op"
    back = Schedule.from_csv(path)
    assert back.end_us.tolist() == s.sorted().end_us.tolist()  # bit-exact floats
    assert back.op.tolist() == [0, 1]


def test_schedule_csv_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("chunk,src,dst,start,end,op\n0,0,1,0,1,copy\n")
    with pytest.raises(ScheduleError, match="header must be exactly"):
        Schedule.from_csv(bad)
    bad.write_text("chunk,src,dst,start_us,end_us,op\n0,0,1,0,1,send\n")
    with pytest.raises(ScheduleError, match="op must be copy or reduce"):
        Schedule.from_csv(bad)
    with pytest.raises(ScheduleError, match="no such schedule file"):
        Schedule.from_csv(tmp_path / "none.csv")


def test_time_reversal_is_an_involution():
    s = Schedule.from_rows([(0, 0, 1, 0.0, 2.0, "copy"), (0, 1, 2, 2.0, 3.0, "copy")])
    back = s.time_reversed().time_reversed()
    assert back.sorted().start_us.tolist() == s.sorted().start_us.tolist()
    assert back.sorted().src.tolist() == s.sorted().src.tolist()


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
