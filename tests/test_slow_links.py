"""Links that slow down mid-collective (``fault.slow_links`` / ``fault.slow_npus`` with a fault time): the model of a
transfer in flight, the verifier's time-varying rule, the state at the fault, the repair plans and the run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import solvers
from solvers.repair import repair
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.bounds import repair_bounds
from tacos_bench.faults import Fault, least_end_us, row_link_pairs, state_at
from tacos_bench.topology.fabrics import switched
from tacos_bench.topology.generators import mesh2d, ring
from tacos_bench.verify import check

from cli import run_module_in_process, run_py_in_process


def one_row(p: Problem, start: float) -> Schedule:
    t = float(p.link_time_us[0])
    return Schedule.from_rows([(0, 0, 1, start, start + t, "copy")])


def test_a_transfer_in_flight_sends_what_is_left_at_the_new_rate():
    p = Problem(ring(4, bw=50.0, lat=0.5), Collective("all_gather", 1, 64))
    t = float(p.link_time_us[0])
    ser = t - 0.5
    f = Fault(0.5 * ser, slow=((0, 1, 0.5),))            # half the chunk sent when the link halves
    for start, want in ((0.0, 0.5 * ser + 0.5 * ser / 0.5 + 0.5),   # the rest at half speed, then the latency
                        (ser, ser + ser / 0.5 + 0.5),               # starts after: all of it at half speed
                        (-ser, -ser + t)):                           # sent before: only its latency is left
        s = one_row(p, start)
        slowed, end = least_end_us(p, f, s, *row_link_pairs(p.topology, s))
        assert slowed[0] and end[0] == pytest.approx(want)
    other = Schedule.from_rows([(1, 1, 2, 0.0, t, "copy")])
    slowed, end = least_end_us(p, f, other, *row_link_pairs(p.topology, other))
    assert not slowed[0]


def test_the_verifier_holds_a_schedule_to_the_slow_down():
    p = Problem(ring(4), Collective("all_gather", 1, 64))
    s = solvers.get_solver("greedy").solve(p).schedule.to_schedule()
    T = s.makespan_us
    lk = int(np.flatnonzero(s.start_us > 0)[0])
    u, v = int(s.src[lk]), int(s.dst[lk])
    f = Fault(0.5 * T, slow=((u, v, 0.5),))
    msg = check(p, s, fault=f).message
    assert f"runs at 0.5 of its bandwidth from {0.5 * T:.6f} µs" in msg
    # the repaired schedule obeys it, and a slow-down after the schedule ended changes nothing
    r = repair(p, s, f, "greedy")
    assert check(p, r.schedule, fault=f).valid
    assert check(p, s, fault=Fault(2 * T, slow=((u, v, 0.5),))).valid


def test_the_state_at_a_slow_down_stretches_the_transfers_in_flight():
    p = Problem(ring(4), Collective("all_gather", 1, 64))
    t = float(p.link_time_us[0])
    s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 2, 0.0, t, "copy")])
    f = Fault(0.5 * t, slow=((0, 1, 0.25),))
    st = state_at(p, s, f)
    ends = dict(zip(st.executed.chunk.tolist(), st.executed.end_us.tolist()))
    assert ends[1] == t and ends[0] > t
    assert st.link_free[p.topology.link_ids([0], [1])[0]] == pytest.approx(ends[0])
    assert st.lost == 0 and st.in_flight == 2


@pytest.mark.parametrize("topo", [mesh2d(4, 4), switched(8)], ids=["mesh4x4", "switched8"])
@pytest.mark.parametrize("kind", ["all_gather", "broadcast", "all_to_all"])
def test_repair_after_a_slow_down_is_valid_and_above_its_bound(topo, kind):
    p = Problem(topo, Collective(kind, 2, 64, root=3))
    g = solvers.get_solver("greedy_plus")
    s = g.solve(p).schedule.to_schedule()
    slow = tuple((int(topo.src[l]), int(topo.dst[l]), 0.5) for l in range(0, topo.num_links, 5))
    f = Fault(0.4 * s.makespan_us, slow=slow)
    r = repair(p, s, f, "greedy_plus")
    ver = check(p, r.schedule, fault=f)
    assert ver.valid, ver.message
    b = repair_bounds(f.slowed(p), f, r.state, None)["repair_bound_us"]
    assert b <= ver.collective_time_us * (1 + 1e-9)
    assert ver.collective_time_us >= s.makespan_us * (1 - 1e-9)   # slower links never make it faster


def test_keep_replays_the_healthy_order_on_the_slowed_links():
    p = Problem(mesh2d(4, 4), Collective("all_gather", 1, 64))
    s = solvers.get_solver("greedy").solve(p).schedule.to_schedule()
    f = Fault(0.5 * s.makespan_us, slow=((0, 1, 0.5), (1, 0, 0.5)))
    r = repair(p, s, f, "greedy")
    assert "keep" in r.candidates_us and r.candidates_us["keep"] >= r.schedule.makespan_us * (1 - 1e-9)


def test_run_py_slows_rails_mid_collective_and_the_record_replays(tmp_path):
    # a 16-GPU two-tier cluster, four rails (the NICs of GPUs 0-3 of each node) at half bandwidth from mid-way
    out = tmp_path / "run"
    nics = ",".join(f"[{g},0.5,nics]" for g in (0, 1, 2, 3, 8, 9, 10, 11))
    r = run_py_in_process("solver=greedy_plus", "topo=dgx_h100x4", "topo.dims=[2,8]",
                          "collective.chunks_per_npu=2", "fault.at_fraction=0.5", f"fault.slow_npus=[{nics}]",
                          f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "result.json").read_text())
    assert rec["valid"] and rec["repair_plan"] in ("resume", "keep", "replan")
    assert rec["repaired_over_bound"] <= 1.10          # measured 1.002
    slow = rec["fault_slow_links"]
    assert len(json.loads(slow) if isinstance(slow, str) else slow) == 16
    v = run_module_in_process("tacos_bench.verify", out)
    assert v.returncode == 0 and "valid" in v.stdout, v.stdout + v.stderr
