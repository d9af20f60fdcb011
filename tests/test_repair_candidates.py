"""Repair after a fault: the timed resume of the routed engine, the replan and reversed-gather candidates,
and the repair bound (tacos_bench.bounds.repair_bound_us, also importable from tacos_bench.faults) against
every repaired schedule."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from solvers import get_solver
from solvers.base import StartState
from solvers.repair import repair
from tacos_bench import Collective, Problem
from tacos_bench.faults import Fault, fault_from_config, repair_bound_us, state_at
from tacos_bench.topology import named_topology
from tacos_bench.topology.generators import ring
from tacos_bench.verify import verify

from candidates import skipped, tried

ROOT = Path(__file__).resolve().parent.parent


def _case(kind: str, topo_name: str, links: int, seed: int):
    topo = named_topology(topo_name)
    p = Problem(topo, Collective(kind, 1, buffer_mib=64))
    healthy = get_solver("greedy").solve(p, seed=seed).schedule
    fault = fault_from_config({"at_fraction": 0.5, "random_links": links}, topo, seed).at(healthy.makespan_us)
    return p, healthy, fault


def test_routed_resume_waits_for_busy_links_and_copies_in_flight():
    p = Problem(ring(6), Collective("gather", 1, 64))
    busy = np.zeros(p.num_links)
    into_root = np.flatnonzero(p.topology.dst == 0)
    busy[into_root[0]] = 500.0                      # an in-flight transfer holds this link until 500
    ready = np.zeros(p.num_chunks)
    ready[3] = 700.0                                  # chunk 3 lands at its holder at 700
    start = StartState(np.ones(p.num_links, bool), np.asarray(p.sources), np.arange(p.num_chunks),
                       np.ones(6, bool), hold_time=ready, link_free=busy)
    s = get_solver("greedy").solve_from(p, start, seed=0).schedule
    link = p.topology.link_ids(s.src, s.dst)
    assert s.start_us[link == into_root[0]].min() >= 500.0
    assert s.start_us[s.chunk == 3].min() >= 700.0
    # without the hints the same resume starts at 0 everywhere
    plain = StartState(start.links, start.hold_npu, start.hold_chunk, start.alive)
    assert get_solver("greedy").solve_from(p, plain, seed=0).schedule.start_us.min() == 0.0


@pytest.mark.parametrize("kind", ["gather", "broadcast", "scatter", "all_gather", "all_to_all"])
@pytest.mark.parametrize("topo_name,links", [("torus4x4", 1), ("mesh4x4", 2), ("random16d3s0", 1)])
def test_repair_bound_holds_for_every_repair(kind, topo_name, links):
    for seed in (0,):
        p, healthy, fault = _case(kind, topo_name, links, seed)
        rep = repair(p, healthy, fault, "greedy", {"seed": seed})
        ver = verify(p, rep.schedule, fault)
        assert ver.valid, ver.message
        bound = repair_bound_us(p, fault, rep.state)
        assert fault.at_us <= bound <= ver.collective_time_us * (1 + 1e-9)
        assert rep.plan in ("resume", "replan", "unaffected")
        assert rep.candidates_us[rep.plan] == pytest.approx(min(rep.candidates_us.values()))
        assert ver.collective_time_us <= min(rep.candidates_us.values()) * (1 + 1e-9)


def test_replan_wins_where_the_fresh_schedule_is_better_and_can_be_turned_off():
    # random32d3s1 Broadcast, 1 failed link: resume 7505 µs, replan 5007.5 µs (experiments/probe_repair.py)
    p, healthy, fault = _case("broadcast", "random32d3s1", 1, 0)
    rep = repair(p, healthy, fault, "greedy", {"seed": 0})
    assert rep.candidates_us["replan"] < rep.candidates_us["resume"]
    assert rep.plan in ("replan", "unaffected")
    assert rep.candidates_us[rep.plan] == pytest.approx(min(rep.candidates_us.values()))
    assert verify(p, rep.schedule, fault).valid
    off = repair(p, healthy, fault, "greedy", {"seed": 0}, replan=False)
    assert off.plan in ("resume", "unaffected") and "replan" not in off.candidates_us
    assert off.candidates_us["resume"] == pytest.approx(rep.candidates_us["resume"])
    assert off.schedule.makespan_us == pytest.approx(min(off.candidates_us.values()))


def test_failed_npus_skip_the_replan():
    p = Problem(named_topology("mesh4x4"), Collective("broadcast", 1, 64))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(healthy.makespan_us / 2, npus=(15,))
    rep = repair(p, healthy, fault, "greedy", {"seed": 0})
    assert rep.plan == "resume" and "replan" not in rep.candidates_us
    assert verify(p, rep.schedule, fault).valid


def test_reversed_gather_resume_is_an_option():
    p, healthy, fault = _case("gather", "hetero64", 2, 1)
    both = repair(p, healthy, fault, "greedy", {"seed": 1}, replan=False)
    fwd = repair(p, healthy, fault, "greedy", {"seed": 1, "reversed_gather_resume": False}, replan=False)
    assert "reversed_gather" in tried(both.residual) and "reversed_gather" not in tried(fwd.residual)
    assert skipped(fwd.residual)["reversed_gather"] == "reversed_gather_resume=false"
    assert both.schedule.makespan_us <= fwd.schedule.makespan_us * (1 + 1e-9)
    for r in (both, fwd):
        assert verify(p, r.schedule, fault).valid


def test_repair_bound_counts_the_executed_prefix():
    p = Problem(ring(4), Collective("broadcast", 1, 1))
    t = float(p.link_time_us[0])
    from tacos_bench.schedule import Schedule

    s = Schedule.from_rows([(0, 0, 1, 0, t, "copy"), (0, 0, 3, 0, t, "copy"), (0, 1, 2, t, 2 * t, "copy")])
    late = Fault(1.5 * t, links=((0, 3), (3, 0)))   # nothing is lost: the bound is the schedule's own end
    assert repair_bound_us(p, late, state_at(p, s, late)) == pytest.approx(2 * t)


@pytest.mark.parametrize("name,kind,cpn,frac,link", [
    ("hetero2x2x4", "all_gather", 2, 0.2, (0, 1)),          # the state: 9.75 µs; the healthy drain bound: 10.57
    ("leafspine2x4_2to1", "all_to_all", 1, 0.2, (8, 10)),   # a fabric (leaf-spine link): 23.09 and 35.53 µs
])
def test_the_repair_bound_is_never_below_the_healthy_bound(name, kind, cpn, frac, link):
    # issue 34: the bound from the state at an early fault came out below the run's own healthy lower bound
    # (1319.06 vs 1321.81 µs). With links failing the executed schedule is also a schedule of the
    # healthy problem, so its bound holds for any repair; with a failed NPU (less to deliver) it need not.
    from tacos_bench.bounds import lower_bounds, repair_bounds

    p = Problem(named_topology(name), Collective(kind, cpn, 1.0))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(frac * healthy.makespan_us, links=(link,))
    state = state_at(p, healthy, fault)
    lb = lower_bounds(p)["best_us"]
    alone = repair_bounds(p, fault, state)
    assert alone["repair_bound_source"] == "state" and alone["repair_bound_us"] < lb * (1 - 0.05)
    assert repair_bounds(p, fault, state, lb) == {"repair_bound_us": lb, "repair_bound_source": "healthy"}
    assert repair_bound_us(p, fault, state) == lb               # the old import path computes the healthy bound
    dead = Fault(fault.at_us, npus=(3,))
    assert repair_bounds(p, dead, state_at(p, healthy, dead), lb)["repair_bound_source"] == "state"
    rep = repair(p, healthy, fault, "greedy", {"seed": 0})
    assert verify(p, rep.schedule, fault).collective_time_us >= lb * (1 - 1e-9)


def test_a_fault_run_records_which_repair_bound_won(tmp_path):
    from tacos_bench.runner.pipeline import run_job

    rec = run_job({"solver": {"name": "greedy"}, "topo": {"kind": "named", "name": "hetero2x2x4"}, "seed": 0,
                   "collective": {"kind": "all_gather", "chunks_per_npu": 2, "buffer_mib": 1},
                   "fault": {"at_fraction": 0.2, "links": [[0, 1, "both"]]}}, tmp_path)
    assert rec["valid"], rec.get("error")
    assert rec["repair_bound_source"] == "healthy" and rec["repair_bound_us"] == rec["lower_bound_us"]
    assert rec["repaired_over_bound"] == rec["collective_time_us"] / rec["lower_bound_us"]


def test_probe_repair_runs_tiny(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "experiments"))
    import probe_repair

    assert probe_repair.main(["--collectives", "gather", "--topologies", "torus4x4", "--links", "1", "--seeds", "0",
                              "--out", str(tmp_path / "r.csv")]) == 0
    assert "gather: repaired/fresh mean" in capsys.readouterr().out
    assert (tmp_path / "r.csv").read_text().count("\n") == 2


def test_reservation_resume_plans_around_in_flight_transfers():
    # random32d3s1 All-to-All, 2 failed link pairs at mid-collective: the remainder routed by reservation from
    # the state (each chunk from any holder once its copy is there) ends 3243.9 us against the resume's 3490.3
    p, healthy, fault = _case("all_to_all", "random32d3s1", 2, 0)
    on = repair(p, healthy, fault, "greedy", {"seed": 0})
    off = repair(p, healthy, fault, "greedy", {"seed": 0, "reserve_resume": False})
    assert on.residual.candidate == "reserve_resume" and "reserve_resume" not in tried(off.residual)
    assert on.schedule.makespan_us < 0.95 * off.schedule.makespan_us
    for r in (on, off):
        assert verify(p, r.schedule, fault).valid
