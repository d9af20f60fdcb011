"""Adversarial review of the verifier (tacos_bench/verify.py) and of solvers/compose.py.

Tests named ``test_bug_*`` or described as a bug pin a real defect found in review (now fixed); they
fail if it comes back.
The other tests pin behaviour that was correct but not covered yet.
"""

from __future__ import annotations

import numpy as np
import pytest

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import VerificationError
from tacos_bench.generators import fully_connected, ring
from tacos_bench.topology import Topology
from tacos_bench.verify import check, verify
from solvers.compose import first_arrivals, solve_collective
from solvers.trivial import bfs_all_gather


# --------------------------------------------------------------------------------------------- helpers
def tiny_problem(n: int, kind: str) -> Problem:
    """Fully connected, zero latency, 1-byte chunks: every link time is ~1.9e-5 µs."""
    topo = Topology.from_edges(n, [(u, v, 50.0, 0.0) for u in range(n) for v in range(n) if u != v])
    p = Problem(topo, Collective(kind, 1, n / 2**20))
    assert p.chunk_bytes == 1
    return p


def uniring3(kind: str = "all_gather") -> Problem:
    return Problem(ring(3, bidirectional=False), Collective(kind, 1, 3))


def ag_ring_rows(t: float):
    return [(0, 0, 1, 0, t, "copy"), (1, 1, 2, 0, t, "copy"), (2, 2, 0, 0, t, "copy"),
            (2, 0, 1, t, 2 * t, "copy"), (0, 1, 2, t, 2 * t, "copy"), (1, 2, 0, t, 2 * t, "copy")]


def fc3_all_reduce_rows(t: float):
    """A valid All-Reduce on fc3: everyone reduces into the owner, then the owner copies back."""
    rows = [(c, u, c, 0.0, t, "reduce") for c in range(3) for u in range(3) if u != c]
    rows += [(1, 1, 0, t, 2 * t, "copy"), (1, 1, 2, t, 2 * t, "copy"), (2, 2, 0, t, 2 * t, "copy"),
             (2, 2, 1, t, 2 * t, "copy"), (0, 0, 1, 2 * t, 3 * t, "copy"), (0, 0, 2, 2 * t, 3 * t, "copy")]
    return rows


def rand_topology(rng, n: int) -> Topology:
    """Strongly connected, asymmetric, heterogeneous digraph with irrational-looking link times."""
    perm = rng.permutation(n)
    edges = {(int(perm[i]), int(perm[(i + 1) % n])) for i in range(n)}
    for _ in range(int(rng.integers(0, 2 * n))):
        u, v = (int(x) for x in rng.integers(0, n, 2))
        if u != v:
            edges.add((u, v))
    edges = sorted(edges)
    bw = rng.uniform(1, 200, len(edges)) * np.pi
    lat = rng.uniform(0, 3, len(edges)) / 7
    return Topology.from_edges(n, [(u, v, float(b), float(l)) for (u, v), b, l in zip(edges, bw, lat)])


def adversarial_all_gather(problem: Problem, rng) -> Schedule:
    """A valid All-Gather full of what solvers may emit: duplicate deliveries, deliveries back to the owner,
    forwarding at the exact arrival instant, transfers in random order."""
    n, C = problem.num_npus, problem.num_chunks
    topo, lt = problem.topology, problem.link_time_us
    free = np.zeros(topo.num_links)
    hold = np.full((n, C), np.inf)
    hold[np.arange(C) % n, np.arange(C)] = 0.0
    rows = []
    while np.isinf(hold).any():
        c = int(rng.integers(C))
        u = int(rng.choice(np.flatnonzero(np.isfinite(hold[:, c]))))
        lid = int(rng.integers(topo.out_ptr[u], topo.out_ptr[u + 1]))
        v = int(topo.dst[lid])
        if np.isfinite(hold[v, c]) and rng.random() < 0.7:
            continue  # 30% of the time deliver anyway: a duplicate or a delivery to the owner
        t0 = max(hold[u, c], free[lid])
        t1 = t0 + lt[lid]
        free[lid] = t1
        hold[v, c] = min(hold[v, c], t1)
        rows.append((c, u, v, t0, t1, "copy"))
    s = Schedule.from_rows(rows)
    return s.take(rng.permutation(len(s)))


def reference_all_gather_valid(problem: Problem, s: Schedule, tol: float) -> bool:
    """Independent causality + postcondition check for copy-only All-Gather (links assumed checked).

    Transfers are taken in start order; a sender holds a chunk once an already *accepted* transfer
    delivered it. Every transfer here lasts much longer than ``tol``, so a supporter always starts
    strictly earlier than the transfer it supports.
    """
    n, C = problem.num_npus, problem.num_chunks
    hold = np.full((n, C), np.inf)
    hold[np.arange(C) % n, np.arange(C)] = 0.0
    for i in np.argsort(s.start_us, kind="stable"):
        c, u, v = int(s.chunk[i]), int(s.src[i]), int(s.dst[i])
        if hold[u, c] > s.start_us[i] + tol:
            return False
        hold[v, c] = min(hold[v, c], s.end_us[i])
    return bool(np.isfinite(hold).all())


# ============================================================================================= BUGS
def test_bug_cycle_of_short_transfers_is_rejected():
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


def test_bug_padding_the_makespan_does_not_loosen_the_checks():
    p = uniring3()
    t = float(p.link_time_us[0])  # 20.03 µs
    # Every transfer over [0, t]: the second wave forwards chunks nobody holds yet, on links already busy.
    rows = [(c, s, d, 0.0, t, "copy") for c, s, d, *_ in ag_ring_rows(t)]
    assert not check(p, Schedule.from_rows(rows)).valid  # rejected as it should be...
    # ...but stretching one transfer to 1e11 µs (tol becomes 100 µs) makes the same nonsense "valid".
    rows[-1] = (1, 2, 0, 0.0, 1e11, "copy")
    assert not check(p, Schedule.from_rows(rows)).valid


def test_bug_short_duplicate_reduction_is_caught():
    p = tiny_problem(2, "reduce_scatter")
    e = float(p.link_time_us[0])
    rows = [(0, 1, 0, 0.0, 1.0, "reduce"),        # NPU 1's contribution to chunk 0 reaches the owner
            (0, 1, 0, 1.0, 1.0 + e, "reduce"),    # ...and again: counted twice
            (1, 0, 1, 0.0, 1e5, "reduce")]        # a slow legal transfer: makespan 1e5, tol 1e-4 > e
    with pytest.raises(VerificationError, match="twice"):
        verify(p, Schedule.from_rows(rows))


def test_bug_verdict_does_not_depend_on_row_order(tmp_path):
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
        monkeypatch.setattr("tacos_bench.verify.DENSE_LIMIT", dense_limit)
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
    with pytest.raises(VerificationError, match="twice"):
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


def test_first_arrivals_keeps_one_earliest_delivery_per_non_owner():
    rng = np.random.default_rng(3)
    p = Problem(rand_topology(rng, 5), Collective("all_gather", 2, 8))
    s = adversarial_all_gather(p, rng)
    f = first_arrivals(p, s)
    n, C = p.num_npus, p.num_chunks
    assert len(f) == n * C - C  # exactly one delivery per (non-owner NPU, chunk)
    assert not np.any(f.dst == f.chunk % n)
    key = f.dst * C + f.chunk
    assert len(np.unique(key)) == len(f)
    earliest = np.full(n * C, np.inf)
    np.minimum.at(earliest, s.dst * C + s.chunk, s.end_us)
    assert np.array_equal(f.end_us, earliest[key])
    assert verify(p, f).valid


def test_all_reduce_phases_back_to_back_without_link_overlap():
    p = Problem(ring(5), Collective("all_reduce", 2, 3))
    s = solve_collective(p, bfs_all_gather)
    red = s.op == 1
    assert red.any() and (~red).any()
    # every reduction ends no later than the first copy starts
    assert s.end_us[red].max() <= s.start_us[~red].min()
    assert verify(p, s).valid
