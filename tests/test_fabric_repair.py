"""Faults mid-collective on switched fabrics (a failed switch port is a failed link): the state at the fault
(routes hold every link they cross; a copy buffered in a switch is lost with it), the greedy resumed from it
(solvers/greedy/fabric_resume.py), the repair verified with the fault, and run.py's fault settings naming
switch ports."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import get_solver
from solvers.repair import repair
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import TopologyError
from tacos_bench.faults import Fault, fault_from_config, repair_bound_us, state_at
from tacos_bench.topology import Switch, Topology
from tacos_bench.topology.fabrics import leaf_spine, switched
from tacos_bench.verify import verify

COPIES = ("all_gather", "broadcast", "scatter", "gather", "all_to_all")


def two_leaves(mode: str) -> Topology:
    """6 NPUs on 2 leaves, 2 spines: every leaf pair has two ways (switches 6, 7 leaves; 8, 9 spines)."""
    return leaf_spine(2, 3, spines=2, oversubscription=1.0, mode=mode)


@pytest.mark.parametrize("mode", ["cut_through", "store_forward"])
@pytest.mark.parametrize("kind", COPIES)
@pytest.mark.parametrize("solver", ["greedy", "greedy_plus"])
def test_repair_after_a_spine_port_fails_is_verified(mode, kind, solver):
    p = Problem(two_leaves(mode), Collective(kind, 2, 1))
    healthy = get_solver(solver).solve(p, seed=1).schedule
    fault = Fault(healthy.makespan_us * 0.4, links=((6, 8), (8, 6)))   # leaf 6 <-> spine 8, both ways
    r = repair(p, healthy, fault, solver, {"seed": 1})
    ver = verify(p, r.schedule, fault)
    assert ver.valid, ver.message
    assert ver.collective_time_us >= repair_bound_us(p, fault, r.state) * (1 - 1e-9)
    # nothing after the fault crosses the failed port
    late = r.schedule.end_us > fault.at_us + 1e-9
    for row in np.flatnonzero(late):
        path = r.schedule.route[row] if r.schedule.route is not None and r.schedule.route[row] else \
            f"{r.schedule.src[row]}>{r.schedule.dst[row]}"
        assert "6>8" not in path and "8>6" not in path


def test_state_at_a_fault_on_a_fabric():
    # cut-through switch 2 between NPUs 0 and 1; a row 0>2>1 holds both links for its whole duration
    e = [(0, 2, 50, 0.5), (2, 0, 50, 0.5), (1, 2, 50, 0.5), (2, 1, 50, 0.5)]
    p = Problem(Topology.from_edges(2, e, switches=[Switch()]), Collective("all_gather", 1, 1))
    s = get_solver("greedy").solve(p).schedule
    T = s.makespan_us
    # the up-link 0 -> 2 fails halfway: the row of chunk 0 through it is lost, the other one completes
    st = state_at(p, s, Fault(T / 2, links=((0, 2),)))
    assert st.lost == 1 and st.in_flight == 1 and len(st.executed) == 1
    link = p.topology.link_ids([1, 2], [2, 0])
    assert np.all(st.link_free[link] == pytest.approx(T))           # every link of the surviving route
    assert np.isinf(st.link_free[p.topology.link_id(0, 2)])
    # store-and-forward: a copy that reached the switch and was not sent on is lost with the switch's buffer
    sf = Problem(switched(2, mode="store_forward"), Collective("broadcast", 1, 1))
    t = float(sf.link_time_us[0])
    sched = Schedule.from_rows([(0, 0, 2, 0.0, t, "copy"), (0, 2, 1, t, 2 * t, "copy")])
    st = state_at(sf, sched, Fault(t * 1.0000001, links=((2, 1),)))
    assert st.dropped == 0 and st.lost == 1
    assert sorted(zip(st.hold_npu.tolist(), st.hold_chunk.tolist())) == [(0, 0)]   # not the switch 2


def test_fabric_fault_settings_name_switch_ports():
    topo = two_leaves("cut_through")
    f = fault_from_config({"at_fraction": 0.5, "links": [[6, 8, "both"]]}, topo)
    assert sorted(f.links) == [(6, 8), (8, 6)]
    with pytest.raises(TopologyError, match="unknown node id 12|not a node"):
        fault_from_config({"at_fraction": 0.5, "links": [[0, 12]]}, topo).failed_link_ids(topo)
    f = fault_from_config({"at_fraction": 0.5, "random_links": 1}, topo, seed=3)
    assert len(f.links) in (1, 2)
    scratch = f.scratch_topology(topo)
    assert scratch.is_fabric and scratch.num_links == topo.num_links - len(f.links)


def test_a_port_whose_loss_cuts_an_npu_off_is_one_line():
    p = Problem(switched(4, mode="store_forward"), Collective("all_gather", 1, 1))
    healthy = get_solver("greedy").solve(p).schedule
    with pytest.raises(TopologyError, match="NPU 3 can no longer receive") as e:
        repair(p, healthy, Fault(healthy.makespan_us / 2, links=((4, 3),)), "greedy")
    assert "\n" not in str(e.value)


def test_fault_run_on_a_fabric(tmp_path):
    # what run.py topo=named topo.name=leafspine2x3 ... fault.at_fraction=0.5 fault.links=[[6,8,both]] records
    from tacos_bench.runner.pipeline import run_job

    cfg = {"solver": {"name": "greedy_plus"}, "topo": {"name": "leafspine2x3", "kind": "named"}, "seed": 0,
           "collective": {"kind": "all_gather", "chunks_per_npu": 2, "buffer_mib": 1},
           "fault": {"at_fraction": 0.5, "links": [[6, 8, "both"]]}}
    rec = run_job(cfg, tmp_path)
    assert rec["valid"] and rec["repair_plan"] == "resume", rec.get("error")
    assert rec["collective_time_us"] >= rec["repair_bound_us"] * (1 - 1e-9)
    assert rec["scratch_valid"] and rec["scratch_time_us"] > 0
    assert (tmp_path / "schedule.csv").exists()


def test_a_failed_npu_on_a_fabric():
    # an NPU fails: its switch ports fail with it, it needs nothing; the scratch topology keeps the switches
    p = Problem(two_leaves("cut_through"), Collective("all_gather", 1, 1))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(healthy.makespan_us / 2, npus=(4,))
    r = repair(p, healthy, fault, "greedy")
    assert verify(p, r.schedule, fault).valid
    scratch = fault.scratch_topology(p.topology)
    assert scratch.is_fabric and scratch.num_npus == 5 and scratch.num_switches == p.topology.num_switches
