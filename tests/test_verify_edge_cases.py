"""The verifier on edge cases: tiny and irrational link times, padded makespans, cycles, races, duplicates,
row order, CSV round trips, and its fast All-Gather path against an independent replay."""

from __future__ import annotations

import numpy as np
import pytest

from replay_cases import (adversarial_all_gather, ag_ring_rows, fc3_all_reduce_rows, rand_topology,
                          reference_all_gather_valid, tiny_problem, uniring3)
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import VerificationError
from tacos_bench.topology.generators import fully_connected, ring
from tacos_bench.topology import Topology
from tacos_bench.verify import check, verify
from solvers.compose import solve_collective
from solvers.baselines.trivial import bfs_all_gather


# ============================================================================================= BUGS
def test_cycle_of_short_transfers_is_rejected():
    # Chunk 0 (owner 0) never leaves NPU 0: NPUs 1 and 2 'give' it to each other over [0, e], e ~ 2e-5 µs.
    # One slow (legal) transfer makes the makespan 1e5 µs, so tol = 1e-4 µs > e and each cyclic transfer
    # "holds" the chunk through the other's arrival. The docstring's no-cycle argument needs e > tol.
    p = tiny_problem(3, "all_gather")
    e = float(p.link_time_us[0])
    rows = [(0, 1, 2, 0.0, e, "copy"), (0, 2, 1, 0.0, e, "copy"),
            (1, 1, 0, 0.0, e, "copy"), (1, 1, 2, e, 2 * e, "copy"),
            (2, 2, 0, 0.0, 1e5, "copy"), (2, 2, 1, e, 2 * e, "copy")]
    v = check(p, Schedule.from_rows(rows))
    assert not v.valid and "non-causal" in v.message


def test_padding_the_makespan_does_not_loosen_the_checks():
    p = uniring3()
    t = float(p.link_time_us[0])  # 20.03 µs
    # Every transfer over [0, t]: the second wave forwards chunks nobody holds yet, on links already busy.
    rows = [(c, s, d, 0.0, t, "copy") for c, s, d, *_ in ag_ring_rows(t)]
    assert not check(p, Schedule.from_rows(rows)).valid  # rejected as it should be...
    # ...but stretching one transfer to 1e11 µs (tol becomes 100 µs) makes the same nonsense "valid".
    rows[-1] = (1, 2, 0, 0.0, 1e11, "copy")
    assert not check(p, Schedule.from_rows(rows)).valid


def test_short_duplicate_reduction_is_caught():
    p = tiny_problem(2, "reduce_scatter")
    e = float(p.link_time_us[0])
    rows = [(0, 1, 0, 0.0, 1.0, "reduce"),        # NPU 1's contribution to chunk 0 reaches the owner
            (0, 1, 0, 1.0, 1.0 + e, "reduce"),    # ...and again: counted twice
            (1, 0, 1, 0.0, 1e5, "reduce")]        # a slow legal transfer: makespan 1e5, tol 1e-4 > e
    with pytest.raises(VerificationError, match="twice"):
        verify(p, Schedule.from_rows(rows))


def test_verdict_does_not_depend_on_row_order(tmp_path):
    p = Problem(fully_connected(3), Collective("all_reduce", 1, 3))
    t = float(p.link_time_us[0])
    rows = fc3_all_reduce_rows(t)
    assert check(p, Schedule.from_rows(rows)).valid
    # NPU 2 still holds only its own contribution to chunk 0 at 2t; it reduces it into NPU 1 exactly
    # when NPU 0's copy of the full sum lands there (3t). reduce-then-copy gives the full sum,
    # copy-then-reduce counts NPU 2 twice: the outcome is a race the schedule does not resolve.
    race = (0, 2, 1, 2 * t, 3 * t, "reduce")
    before = Schedule.from_rows(rows[:-2] + [race] + rows[-2:])
    after = Schedule.from_rows(rows + [race])
    before.to_csv(tmp_path / "s.csv")
    verdicts = {check(p, before).valid, check(p, after).valid,
                check(p, Schedule.from_csv(tmp_path / "s.csv")).valid}
    assert len(verdicts) == 1


# ============================================================================================= PINS
@pytest.mark.parametrize("dense_limit", [None, 0], ids=["dense", "sparse"])
def test_fast_path_agrees_with_an_independent_replay(monkeypatch, dense_limit):
    # Random mutations of valid All-Gathers on heterogeneous, asymmetric topologies: whenever the
    # link-level checks pass, the vectorized path must agree with a sequential start-ordered replay.
    # DENSE_LIMIT=0 forces the sorted (sparse) variant used for huge problems, otherwise never tested.
    if dense_limit is not None:
        monkeypatch.setattr("tacos_bench.verify.replay.DENSE_LIMIT", dense_limit)
    compared = rejected = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        p = Problem(rand_topology(rng, int(rng.integers(3, 6))), Collective("all_gather", int(rng.integers(1, 3)), 4))
        s = adversarial_all_gather(p, rng)
        for _ in range(6):
            i = int(rng.integers(len(s)))
            what = int(rng.integers(3))
            start, end = s.start_us.copy(), s.end_us.copy()
            keep = np.ones(len(s), dtype=bool)
            if what == 0:  # move a transfer earlier (maybe before its sender has the chunk)
                d = min(start[i], float(rng.uniform(0, 2)) * float(p.link_time_us.max()))
                start[i] -= d
                end[i] -= d
            elif what == 1:  # drop a transfer
                keep[i] = False
            else:  # delay a transfer (may create overlaps, which are then skipped)
                start[i] += 3.0
                end[i] += 3.0
            m = Schedule(s.chunk, s.src, s.dst, start, end, s.op).take(np.flatnonzero(keep))
            v = check(p, m)
            if not v.valid and not ("non-causal" in v.message or "postcondition" in v.message):
                continue
            tol = 1e-9 * max(1.0, m.makespan_us)
            assert v.valid == reference_all_gather_valid(p, m, tol), (seed, v.message)
            compared += 1
            rejected += not v.valid
    assert compared > 100 and 0 < rejected < compared  # both outcomes exercised


def test_sender_holding_the_chunk_only_through_an_invalid_transfer_is_rejected():
    p = Problem(ring(3), Collective("all_gather", 1, 3))
    t = float(p.link_time_us[0])
    rows = [(0, 2, 1, 0, t, "copy"),       # NPU 2 does not hold chunk 0: invalid
            (0, 1, 0, t, 2 * t, "copy"),   # NPU 1 forwards what it got through the invalid transfer
            (0, 1, 2, t, 2 * t, "copy"),
            (1, 1, 0, 0, t, "copy"), (1, 1, 2, 0, t, "copy"),
            (2, 2, 0, 0, t, "copy")]
    with pytest.raises(VerificationError, match=r"row 0 .*non-causal: NPU 2 does not hold chunk 0"):
        verify(p, Schedule.from_rows(rows))


def test_duplicate_deliveries_and_deliveries_to_the_owner_are_harmless():
    p = uniring3()
    t = float(p.link_time_us[0])
    rows = ag_ring_rows(t) + [(1, 0, 1, 2 * t, 3 * t, "copy"),   # NPU 1 gets its own chunk back
                              (2, 0, 1, 3 * t, 4 * t, "copy")]   # NPU 1 gets chunk 2 a second time
    assert verify(p, Schedule.from_rows(rows)).collective_time_us == pytest.approx(4 * t)
    # the same deliveries in the All-Gather phase of an All-Reduce (general replay path)
    rs = Schedule.from_rows([(2, 0, 1, 0, t, "reduce"), (0, 1, 2, 0, t, "reduce"), (1, 2, 0, 0, t, "reduce"),
                             (2, 1, 2, t, 2 * t, "reduce"), (0, 2, 0, t, 2 * t, "reduce"),
                             (1, 0, 1, t, 2 * t, "reduce")])
    ar = Schedule.concat([rs, Schedule.from_rows(rows).shifted(2 * t)])
    assert verify(p.with_collective("all_reduce"), ar).valid


def test_reduce_onto_a_full_copy_double_counts():
    p = uniring3()
    t = float(p.link_time_us[0])
    rows = ag_ring_rows(t) + [(1, 0, 1, 2 * t, 3 * t, "reduce")]  # adds chunk 1 onto its owner's full copy
    # an All-Gather refuses any reduce first (tests/test_verify.py); the double count is caught in reductions
    with pytest.raises(VerificationError, match="twice|nothing to reduce"):
        verify(p, Schedule.from_rows(rows))


def test_zero_length_transfer_is_rejected():
    p = uniring3()
    t = float(p.link_time_us[0])
    rows = ag_ring_rows(t)
    rows[0] = (0, 0, 1, 0.0, 0.0, "copy")
    with pytest.raises(VerificationError, match="shorter than the link time"):
        verify(p, Schedule.from_rows(rows))


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_overlap_with_a_short_transfer_inside_a_long_one(order):
    p = uniring3()
    t = float(p.link_time_us[0])
    # extra (redundant) deliveries of chunk 0 on link 0->1 once the ring is done at 2t
    inside = [(0, 0, 1, 2 * t, 7 * t, "copy"),      # long
              (0, 0, 1, 3 * t, 4 * t, "copy"),      # short, inside the long one
              (0, 0, 1, 5 * t, 6 * t, "copy")]      # after the short one, still inside the long one
    with pytest.raises(VerificationError, match="overlaps"):
        verify(p, Schedule.from_rows(ag_ring_rows(t) + [inside[i] for i in order]))
    back_to_back = [(0, 0, 1, 2 * t, 5 * t, "copy"), (0, 0, 1, 5 * t, 6 * t, "copy"),
                    (0, 0, 1, 6 * t, 8 * t, "copy")]
    assert check(p, Schedule.from_rows(ag_ring_rows(t) + [back_to_back[i] for i in order])).valid


def test_negative_start_is_rejected():
    p = uniring3()
    t = float(p.link_time_us[0])
    s = Schedule.from_rows(ag_ring_rows(t)).shifted(-t / 2)
    with pytest.raises(VerificationError, match="start >= 0"):
        verify(p, s)


def test_all_reduce_postcondition_needs_every_npu_and_reduce_scatter_only_owners():
    p = Problem(fully_connected(3), Collective("all_reduce", 1, 3))
    t = float(p.link_time_us[0])
    rows = fc3_all_reduce_rows(t)
    assert verify(p, Schedule.from_rows(rows)).valid
    with pytest.raises(VerificationError, match="postcondition unmet: NPU 2, chunk 0"):
        verify(p, Schedule.from_rows(rows[:-1]))
    # Reduce-Scatter: what non-owners hold at the end is unconstrained (NPU 1's chunk 0 gets NPU 2's partial).
    rs = rows[:6] + [(0, 2, 1, t, 2 * t, "copy")]
    assert check(p.with_collective("reduce_scatter"), Schedule.from_rows(rs)).valid


def test_copy_semantics_overwrite():
    p = Problem(fully_connected(3), Collective("all_reduce", 1, 3))
    t = float(p.link_time_us[0])
    rows = fc3_all_reduce_rows(t)
    # At 2t NPU 2 holds only its own part of chunk 0 (the full sum reaches it at 3t).
    # Copying that partial over NPU 1's chunk 0 is harmless if the full sum lands there later...
    later_full = [(0, 0, 1, 3 * t, 4 * t, "copy") if r[:3] == (0, 0, 1) and r[5] == "copy" else r for r in rows]
    assert check(p, Schedule.from_rows(later_full + [(0, 2, 1, 2 * t, 3 * t, "copy")])).valid
    # ...and destroys the result if it lands after the full sum (read at 2t, applied at 3.5t).
    with pytest.raises(VerificationError, match="postcondition unmet: NPU 1, chunk 0"):
        verify(p, Schedule.from_rows(rows + [(0, 2, 1, 2 * t, 3.5 * t, "copy")]))


def test_forward_at_arrival_instant_survives_csv_on_irrational_times(tmp_path):
    topo = Topology.from_edges(3, [(0, 1, 50 / 3, 0.1), (1, 2, 70 / 3, 0.3), (2, 0, 10 / 7, 0.7),
                                   (1, 0, np.pi, 1 / 3)])
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        p = Problem(topo, Collective(kind, 2, 1 / 3))
        s = solve_collective(p, bfs_all_gather)
        s.to_csv(tmp_path / "s.csv")
        back = Schedule.from_csv(tmp_path / "s.csv")
        assert np.array_equal(back.start_us, s.sorted().start_us)
        assert np.array_equal(back.end_us, s.sorted().end_us)
        assert verify(p, back).collective_time_us == verify(p, s).collective_time_us


def test_time_reversal_is_valid_with_duplicates_owner_deliveries_and_heterogeneous_links(tmp_path):
    for seed in range(40):
        rng = np.random.default_rng(seed)
        p = Problem(rand_topology(rng, int(rng.integers(2, 7))),
                    Collective("all_gather", int(rng.integers(1, 3)), float(rng.uniform(0.01, 64))))
        ag_rng = np.random.default_rng(10_000 + seed)
        ag = lambda q: adversarial_all_gather(q, ag_rng)  # noqa: E731
        for kind in ("reduce_scatter", "all_reduce"):
            q = p.with_collective(kind)
            s = solve_collective(q, ag)
            s.to_csv(tmp_path / "s.csv")
            for x in (s, Schedule.from_csv(tmp_path / "s.csv")):
                v = check(q, x)
                assert v.valid, (seed, kind, v.message)
