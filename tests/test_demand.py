"""Any traffic pattern (tacos_bench.demand, moe, concurrent): chunk tables, their files, the collectives built from
them through run.py, every backend that claims them, the verifier against the table, and bad input."""

import json

import numpy as np
import pytest

from solvers import get_solver
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bounds
from tacos_bench.concurrent import concurrent_collective
from tacos_bench.demand import (Demand, all_to_allv, gini, of_collective, read_chunks_csv, read_matrix, table,
                                write_chunks_csv)
from tacos_bench.errors import CollectiveError
from tacos_bench.moe import combine_demand, dispatch_demand, moe_routing
from tacos_bench.schedule import Schedule
from tacos_bench.topology.named import named_topology
from tacos_bench.verify import check

from cli import run_py_in_process

REL = 1e-9


def skewed(n, seed=0):
    rng = np.random.default_rng(seed)
    M = np.round(rng.pareto(1.5, (n, n)) * 2**20)
    M[rng.random((n, n)) < 0.2] = 0
    return M


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
                                  "all_to_all", "all_reduce"])
def test_named_collectives_are_constructors_of_the_table(kind, tmp_path):
    c = Collective(kind, 2, 8, root=1)
    d = of_collective(c, 4)
    assert d.num_chunks == c.num_chunks(4) and d.chunk_bytes == c.chunk_bytes(4)
    assert d.source.tolist() == c.sources(4).tolist() and d.destination.tolist() == c.destinations(4).tolist()
    back = read_chunks_csv(write_chunks_csv(d, tmp_path / "chunks.csv"), 4, d.chunk_bytes)
    for k in ("src_ptr", "src_ids", "dst_ptr", "dst_ids", "op"):
        assert np.array_equal(getattr(back, k), getattr(d, k)), k


def test_all_to_allv_chunks_pairs_in_row_major_order_and_records_the_padding():
    d = all_to_allv([[0, 10, 0], [25, 0, 5], [0, 0, 7]], chunk_bytes=10)
    assert d.source.tolist() == [0, 1, 1, 1, 1] and d.destination.tolist() == [1, 0, 0, 0, 2]
    assert d.padding_bytes == 50 - 40 and d.pair_bytes()[1, 0] == 30
    assert all_to_allv([[0, 8], [4, 0]], chunks_per_npu=2).chunk_bytes == 4


@pytest.mark.parametrize("topo", ["hetero2x2x4", "switched8", "random12d3s1"])
@pytest.mark.parametrize("solver", ["greedy", "greedy_plus", "direct", "pairwise"])
def test_all_to_allv_on_every_backend_that_claims_it(topo, solver):
    t = named_topology(topo)
    p = Problem(t, Collective("all_to_allv", demand=all_to_allv(skewed(t.num_npus), chunks_per_npu=2)))
    s = get_solver(solver)
    if not s.supports("demand_unicast"):
        pytest.skip(f"{solver} does not claim unicast chunk tables")
    res = s.solve(p)
    v = check(p, res.schedule)
    assert v.valid, v.message
    assert v.collective_time_us >= lower_bounds(p)["best_us"] * (1 - REL)


def test_greedy_plus_on_a_skewed_matrix_is_near_the_flow_bound_and_never_behind_direct():
    t = named_topology("hetero2x2x4")
    p = Problem(t, Collective("all_to_allv", demand=all_to_allv(skewed(16, 3))))
    b = lower_bounds(p)
    plus = check(p, get_solver("greedy_plus").solve(p).schedule).collective_time_us
    direct = check(p, get_solver("direct").solve(p).schedule).collective_time_us
    assert plus <= direct * (1 + REL) and plus <= 1.10 * b["best_us"]


@pytest.mark.parametrize("topo", ["dgx_h100x2", "hetero2x2x4"])
def test_moe_dispatch_and_combine_verified_against_their_tables(topo):
    t = named_topology(topo)
    # the fabric greedy on a table is a Python loop: 8 tokens per NPU keep this case about a second
    r = moe_routing(t.num_npus, tokens_per_npu=8, hidden=256, experts=t.num_npus, top_k=4, gini=0.3, seed=2)
    assert abs(r.gini - 0.3) < 0.05
    for d in (dispatch_demand(r), combine_demand(r)):
        p = Problem(t, Collective(d.name, demand=d))
        for solver in ("greedy", "greedy_plus"):
            v = check(p, get_solver(solver).solve(p).schedule)
            assert v.valid, (d.name, solver, v.message)
            assert v.collective_time_us >= lower_bounds(p)["best_us"] * (1 - REL)


def test_the_verifier_checks_a_subset_demand_both_ways():
    t = named_topology("ring5")
    d = table(5, 1024, [[0], [2, 3]], [[1, 2], [4]], ["copy", "reduce"])
    p = Problem(t, Collective("custom", demand=d))
    tt = float(p.link_time_us[0])
    ok = Schedule.from_rows([(0, 0, 1, 0, tt, "copy"), (0, 1, 2, tt, 2 * tt, "copy"),
                             (1, 2, 3, 0, tt, "reduce"), (1, 3, 4, tt, 2 * tt, "reduce")])
    assert check(p, ok).valid
    short = Schedule.from_rows([(0, 0, 1, 0, tt, "copy"), (1, 2, 3, 0, tt, "reduce"), (1, 3, 4, tt, 2 * tt, "reduce")])
    msg = check(p, short).message
    assert "NPU 2" in msg and "chunk 0" in msg
    twice = Schedule.from_rows([(0, 0, 1, 0, tt, "copy"), (0, 1, 2, tt, 2 * tt, "copy"), (1, 2, 3, 0, tt, "reduce"),
                                (1, 3, 4, tt, 2 * tt, "reduce"), (1, 3, 4, 2 * tt, 3 * tt, "reduce")])
    assert "twice" in check(p, twice).message


@pytest.mark.parametrize("mode", ["joint", "sequential", "priority"])
def test_concurrent_parts_share_the_network_and_joint_is_never_slower(mode):
    t = named_topology("hetero2x2x4")
    parts = [{"kind": "all_reduce", "buffer_mib": 16}, {"kind": "all_to_all", "npus": list(range(0, 16, 2)),
                                                         "buffer_mib": 4}]
    c = concurrent_collective(parts, t, mode=mode)
    p = Problem(t, c)
    res = get_solver("greedy_plus").solve(p)
    v = check(p, res.schedule)
    assert v.valid, v.message
    times = res.stats["part_times_us"]
    assert len(times) == 2 and max(times) == pytest.approx(v.collective_time_us)
    seq = get_solver("greedy_plus").solve(Problem(t, concurrent_collective(parts, t, mode="sequential")))
    if mode == "joint":
        assert v.collective_time_us <= seq.schedule.makespan_us * (1 + REL)


def test_gini_and_bad_tables_are_one_line_errors(tmp_path):
    assert gini([1, 1]) == 0.0 and gini([0, 0, 0, 4]) == pytest.approx(0.75)
    for bad, needle in (([[0, 1], [1]], "non-numeric|shape"), ([[0, -1], [1, 0]], "negative"), ([[0, np.nan], [1, 0]], "finite"),
                        ([[0, 0], [0, 0]], "empty"), ([[0, 1, 2], [1, 0, 2]], "square")):
        with pytest.raises(CollectiveError, match=needle):
            all_to_allv(bad)
    (tmp_path / "m.csv").write_text("0,1\nx,0\n")
    with pytest.raises(CollectiveError, match="line 2: non-numeric"):
        read_matrix(tmp_path / "m.csv")
    for rows, needle in (("0,0,9,copy", "NPU 9"), ("0,1 2,3,reduce\n1,0,1,reduce", "reduce with one source"),
                         ("0,0,1,move", "not copy or reduce"), ("3,0,1,copy", "run 0, 1, 2")):
        (tmp_path / "c.csv").write_text("chunk,sources,destinations,op\n" + rows + "\n")
        with pytest.raises(CollectiveError, match=needle):
            read_chunks_csv(tmp_path / "c.csv", 4, 64)
    with pytest.raises(CollectiveError, match="unknown kind"):
        concurrent_collective([{"kind": "all_sideways"}], named_topology("ring4"))


def test_run_py_writes_the_table_and_the_matrix(tmp_path):
    np.savetxt(tmp_path / "m.csv", skewed(16), delimiter=",", fmt="%d")
    out = tmp_path / "run"
    proc = run_py_in_process("collective=all_to_allv", f"collective.demand={tmp_path / 'm.csv'}", "topo=named",
                             "topo.name=hetero2x2x4", "solver=greedy_plus", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((out / "result.json").read_text())
    assert rec["valid"] and rec["collective"] == "all_to_allv" and rec["chunks_file"] == "chunks.csv"
    p = Problem(named_topology("hetero2x2x4"),
                Collective("custom", demand=read_chunks_csv(out / "chunks.csv", 16, rec["chunk_bytes"])))
    assert check(p, Schedule.from_csv(out / "schedule.csv")).valid     # anyone can check it from the files
    assert np.allclose(np.loadtxt(out / "demand.csv", delimiter=","), skewed(16), atol=rec["chunk_bytes"])
    bad = run_py_in_process("collective=all_to_allv", f"collective.demand={tmp_path / 'nope.csv'}",
                            f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "no such file" in bad.stderr
    assert json.loads((tmp_path / "bad" / "result.json").read_text())["status"] == "error"
