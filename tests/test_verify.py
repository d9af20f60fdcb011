"""The verifier: hand-made good schedules, and one bad schedule per rejection reason."""

import numpy as np
import pytest

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import VerificationError
from tacos_bench.topology.generators import ring
from tacos_bench.verify import check, verify


@pytest.fixture
def uniring3():
    # 0 -> 1 -> 2 -> 0; 3 chunks of 1 MiB; link time = 0.5 + 2^20 / (50 * 2^30 / 1e6) = 20.03125 µs
    return Problem(ring(3, bidirectional=False), Collective("all_gather", 1, 3))


def t_link(p):
    return float(p.link_time_us[0])


def ag_ring_rows(p):
    t = t_link(p)
    # step 1: every NPU forwards its own chunk; step 2: forwards what it received.
    return [
        (0, 0, 1, 0, t, "copy"), (1, 1, 2, 0, t, "copy"), (2, 2, 0, 0, t, "copy"),
        (2, 0, 1, t, 2 * t, "copy"), (0, 1, 2, t, 2 * t, "copy"), (1, 2, 0, t, 2 * t, "copy"),
    ]


def rs_ring_rows(p):
    t = t_link(p)
    # chunk c ends at NPU c: it starts at c+1, is reduced into c+2, then into c.
    return [
        (2, 0, 1, 0, t, "reduce"), (0, 1, 2, 0, t, "reduce"), (1, 2, 0, 0, t, "reduce"),
        (2, 1, 2, t, 2 * t, "reduce"), (0, 2, 0, t, 2 * t, "reduce"), (1, 0, 1, t, 2 * t, "reduce"),
    ]


def test_good_all_gather(uniring3):
    v = verify(uniring3, Schedule.from_rows(ag_ring_rows(uniring3)))
    assert v.valid
    assert v.collective_time_us == pytest.approx(2 * t_link(uniring3))
    assert v.link_utilization == pytest.approx(1.0)


def test_good_reduce_scatter_and_all_reduce(uniring3):
    rs = Schedule.from_rows(rs_ring_rows(uniring3))
    assert verify(uniring3.with_collective("reduce_scatter"), rs).valid
    ag = Schedule.from_rows(ag_ring_rows(uniring3)).shifted(rs.makespan_us)
    ar = Schedule.concat([rs, ag])
    assert verify(uniring3.with_collective("all_reduce"), ar).collective_time_us == pytest.approx(4 * t_link(uniring3))


def test_forward_at_arrival_instant_is_causal(uniring3):
    # a node may forward a chunk the very instant it arrives (exact float equality)
    rows = ag_ring_rows(uniring3)
    assert check(uniring3, Schedule.from_rows(rows)).valid


def test_csv_round_trip_keeps_validity(uniring3, tmp_path):
    s = Schedule.from_rows(ag_ring_rows(uniring3))
    s.to_csv(tmp_path / "s.csv")
    assert verify(uniring3, Schedule.from_csv(tmp_path / "s.csv")).valid


def _reject(problem, rows, pattern):
    with pytest.raises(VerificationError, match=pattern):
        verify(problem, Schedule.from_rows(rows))


def test_rejects_unknown_link(uniring3):
    rows = ag_ring_rows(uniring3)
    rows[0] = (0, 1, 0, 0, t_link(uniring3), "copy")  # 1->0 does not exist on a unidirectional ring
    _reject(uniring3, rows, "unknown link 1->0")


def test_rejects_unknown_npu_and_chunk(uniring3):
    rows = ag_ring_rows(uniring3)
    rows[0] = (7, 0, 1, 0, t_link(uniring3), "copy")
    _reject(uniring3, rows, "chunk id out of range")
    rows[0] = (0, 0, 9, 0, t_link(uniring3), "copy")
    _reject(uniring3, rows, "dst id out of range")


def test_rejects_too_short_transfer(uniring3):
    rows = ag_ring_rows(uniring3)
    rows[0] = (0, 0, 1, 0, t_link(uniring3) / 2, "copy")
    _reject(uniring3, rows, "shorter than the link time")


def test_rejects_overlap_on_link(uniring3):
    t = t_link(uniring3)
    rows = ag_ring_rows(uniring3)
    rows[3] = (2, 0, 1, t / 2, t / 2 + t, "copy")  # link 0->1 is still busy with chunk 0
    _reject(uniring3, rows, "overlaps")


def test_rejects_non_causal_copy(uniring3):
    t = t_link(uniring3)
    rows = ag_ring_rows(uniring3)
    rows[3] = (1, 0, 1, t, 2 * t, "copy")  # NPU 0 never holds chunk 1 by then
    _reject(uniring3, rows, "non-causal")


def test_copy_of_partial_sum_breaks_postcondition(uniring3):
    # After the reduce-scatter NPU 0 holds only a partial sum of chunk 1 (from NPUs 2 and 0); copying
    # it over NPU 1's full chunk 1 is causal, but the postcondition catches the lost contribution.
    t = t_link(uniring3)
    p = uniring3.with_collective("reduce_scatter")
    rows = rs_ring_rows(p) + [(1, 0, 1, 2 * t, 3 * t, "copy")]
    with pytest.raises(VerificationError, match="postcondition unmet: NPU 1, chunk 1 lacks the contribution"):
        verify(p, Schedule.from_rows(rows))


def test_rejects_double_counted_reduction(uniring3):
    t = t_link(uniring3)
    p = uniring3.with_collective("reduce_scatter")
    rows = rs_ring_rows(p)
    rows.append((0, 1, 2, 2 * t, 3 * t, "reduce"))  # NPU 1's contribution to chunk 0 arrives again at NPU 2
    _reject(p, rows, "twice")


def test_rejects_unmet_postcondition(uniring3):
    rows = ag_ring_rows(uniring3)[:-1]
    _reject(uniring3, rows, "postcondition unmet: NPU 0 never receives chunk 1")


def test_rejects_unmet_reduce_postcondition(uniring3):
    p = uniring3.with_collective("reduce_scatter")
    rows = rs_ring_rows(p)[:3]
    _reject(p, rows, "postcondition unmet")


def test_non_causal_reduce_from_empty_state():
    # in an All-Gather nothing but the owner holds a chunk: a reduce from an empty NPU is non-causal; any reduce
    # in a copy collective is refused first (there is nothing to reduce)
    p = Problem(ring(3, bidirectional=False), Collective("all_gather", 1, 3))
    t = t_link(p)
    rows = ag_ring_rows(p)
    rows[3] = (1, 0, 1, t, 2 * t, "reduce")
    _reject(p, rows, "nothing to reduce")


def test_a_reduce_in_a_copy_collective_is_refused_even_when_it_would_replay():
    # a reduce into an empty receiver adds the full chunk, which a replay alone would accept
    p = Problem(ring(3, bidirectional=False), Collective("all_gather", 1, 3))
    rows = ag_ring_rows(p)
    rows[0] = rows[0][:5] + ("reduce",)
    _reject(p, rows, r"a reduce in all_gather, a copy collective")


def test_cycle_of_invalid_copies_is_rejected():
    # two NPUs "give" each other a chunk neither owns: each transfer justifies the other
    p = Problem(ring(3), Collective("all_gather", 1, 3))
    t = t_link(p)
    rows = [(2, 0, 1, 0, t, "copy"), (2, 1, 0, 0, t, "copy"), (2, 2, 0, 0, t, "copy"), (2, 2, 1, 0, t, "copy")]
    _reject(p, rows, "non-causal")


def test_check_returns_message_instead_of_raising(uniring3):
    v = check(uniring3, Schedule.from_rows(ag_ring_rows(uniring3)[:-1]))
    assert not v.valid and "postcondition" in v.message


def test_empty_schedule_only_valid_for_single_npu():
    from tacos_bench.topology import Topology

    p1 = Problem(Topology.from_edges(1, []), Collective("all_reduce", 1, 1))
    assert verify(p1, Schedule.empty()).collective_time_us == 0.0
    p = Problem(ring(3), Collective("all_gather", 1, 3))
    with pytest.raises(VerificationError):
        verify(p, Schedule.empty())


def test_float_tolerance_after_rounding(uniring3):
    s = Schedule.from_rows(ag_ring_rows(uniring3))
    jitter = Schedule(s.chunk, s.src, s.dst, s.start_us, s.end_us - 1e-12, s.op)
    assert check(uniring3, jitter).valid


def test_random_schedules_fail_gracefully():
    rng = np.random.default_rng(0)
    p = Problem(ring(4), Collective("all_reduce", 1, 4))
    for _ in range(50):
        k = int(rng.integers(0, 20))
        s = Schedule(rng.integers(0, 4, k), rng.integers(0, 4, k), rng.integers(0, 4, k),
                     rng.uniform(0, 100, k), rng.uniform(100, 200, k), rng.integers(0, 2, k))
        v = check(p, s)
        assert not v.valid and v.message
