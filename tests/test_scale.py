"""Tests of the large-scale path: the greedy's scale engine, compact schedules and the compact verifier.

Every compact schedule is checked twice: by the one-pass compact verifier and, after reading it back and
materializing it, by the independent table verifier (tacos_bench.verify).
"""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import solvers.greedy.engine as greedy_mod
import solvers.greedy.candidates as greedy_candidates_mod
from solvers.greedy import GreedyOptions, GreedySolver, greedy_all_gather, pick_engine
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.bounds import lower_bounds
from tacos_bench.compact import CompactSchedule, CompactWriter, read_compact
from tacos_bench.errors import ScheduleError, SolverError, VerificationError
from tacos_bench.topology.generators import fully_connected, hetero_cluster, mesh2d, ring, torus2d, torus3d
from tacos_bench.topology import Topology
from tacos_bench.verify import check, verify
from tacos_bench.verify.compact import check_compact, verify_compact


def ag(topo, cpn=1, mib=1024.0):
    return Problem(topo, Collective("all_gather", cpn, mib))


def both_verifiers(problem, compact):
    """The compact verifier and the table verifier (on the materialized schedule) must agree."""
    vc = verify_compact(problem, compact)
    table = compact.to_schedule()
    vt = verify(problem, table)
    assert vc.collective_time_us == vt.collective_time_us == compact.makespan_us
    assert vc.num_transfers == vt.num_transfers == len(compact)
    assert vc.link_busy_us == pytest.approx(vt.link_busy_us, rel=1e-12)
    return vc, table


# ---------------------------------------------------------------------------- the whole compact path
def test_compact_output_roundtrip_and_both_verifiers(tmp_path):
    # the code path of the 40,000-NPU run at a small size: scale engine -> compact files on disk ->
    # compact verifier -> reader -> Schedule / CSV -> table verifier
    p = ag(mesh2d(12, 12), cpn=2)
    st_: dict = {}
    c = greedy_all_gather(p, seed=3, engine="scale", output="compact", spool=tmp_path / "c", stats=st_)
    assert st_["engine"] == "scale" and st_["output"] == "compact"
    assert len(c) == (p.num_npus - 1) * p.num_chunks == st_["transfers"]
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["format"] == "tacos-compact-v1" and meta["num_rows"] == len(c)
    back = read_compact(tmp_path / "c")
    vc, table = both_verifiers(p, back)
    assert vc.collective_time_us == c.makespan_us
    # the default rule reaches the per-NPU ingress bound on meshes (as the classic kernel does)
    assert vc.collective_time_us == pytest.approx(lower_bounds(p)["best_us"], rel=1e-9)
    # 2 + 1 + 1 bytes per row here (uint16 chunk, uint16 link, uint8 lag) plus small headers
    seg_bytes = sum(f.stat().st_size for f in (tmp_path / "c").glob("seg_*.npz"))
    assert seg_bytes < 5 * len(c) + 2048 * meta["num_segments"]
    csv = back.to_csv(tmp_path / "schedule.csv")
    again = Schedule.from_csv(csv)
    assert verify(p, again).collective_time_us == vc.collective_time_us
    assert csv.read_bytes() == table.to_csv(tmp_path / "t.csv").read_bytes()


def test_table_and_compact_outputs_hold_the_same_transfers():
    p = ag(torus2d(6, 5), cpn=3)
    t = greedy_all_gather(p, seed=7, engine="scale", output="table")
    c = greedy_all_gather(p, seed=7, engine="scale", output="compact")
    a, b = t.sorted(), c.to_schedule().sorted()
    for col in ("chunk", "src", "dst", "start_us", "end_us", "op"):
        assert np.array_equal(getattr(a, col), getattr(b, col))


def test_same_seed_same_compact_files(tmp_path):
    p = ag(mesh2d(7, 9), cpn=2)
    for name in ("a", "b"):
        greedy_all_gather(p, seed=11, engine="scale", output="compact", spool=tmp_path / name)
    files = sorted(f.name for f in (tmp_path / "a").iterdir())
    assert files == sorted(f.name for f in (tmp_path / "b").iterdir())
    for f in files:
        if f.endswith(".npz"):
            za, zb = np.load(tmp_path / "a" / f), np.load(tmp_path / "b" / f)
            assert all(np.array_equal(za[k], zb[k]) for k in za.files)
    other = greedy_all_gather(p, seed=12, engine="scale", output="table").sorted()
    first = read_compact(tmp_path / "a").to_schedule().sorted()
    assert not (np.array_equal(other.chunk, first.chunk) and np.array_equal(other.src, first.src))


def test_small_flushes_and_event_blocks_stream_in_order(monkeypatch, tmp_path):
    # force many segments and event blocks: the streamed file must still verify and round-trip
    monkeypatch.setattr(greedy_mod, "OUT_BUFFER_ROWS", 64)
    monkeypatch.setattr(greedy_mod, "EVENT_BUFFER", 8)
    p = ag(hetero_cluster(2, 2, 4), cpn=2, mib=64)  # two link classes: events of both kinds interleave
    c = greedy_all_gather(p, seed=2, engine="scale", output="compact", spool=tmp_path / "c")
    assert c.num_segments > 3 and c.num_events > 8
    both_verifiers(p, read_compact(tmp_path / "c"))


# ---------------------------------------------------------------------------- the scale engine
@pytest.mark.parametrize("topo, cpn", [(mesh2d(16, 16), 1), (mesh2d(8, 8), 2), (torus3d(4, 4, 4), 1),
                                       (mesh2d(5, 5), 1)], ids=lambda x: getattr(x, "name", str(x)))
def test_scale_engine_reaches_the_ingress_bound_on_meshes(topo, cpn):
    p = ag(topo, cpn)
    s = greedy_all_gather(p, seed=0, engine="scale")
    assert verify(p, s).collective_time_us == pytest.approx(lower_bounds(p)["best_us"], rel=1e-9)


@pytest.mark.parametrize("tie", ["earliest_finish", "random", "lowest_id"])
def test_scale_engine_heterogeneous_links_and_tiebreaks(tie):
    p = ag(hetero_cluster(2, 2, 4), cpn=2, mib=64)
    c = greedy_all_gather(p, seed=1, engine="scale", output="compact", opts=GreedyOptions(link_tiebreak=tie))
    vc, _ = both_verifiers(p, c)
    assert vc.collective_time_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)



def test_in_link_groups_partition_each_destinations_links_by_speed():
    from solvers.greedy.engine import ScaleInstance

    mesh = ScaleInstance(ag(mesh2d(4, 4)), GreedyOptions())
    assert mesh.G == 1  # one link speed: one candidate set per destination, as before
    het = ScaleInstance(ag(hetero_cluster(2, 2, 4)), GreedyOptions())
    assert het.G == 2
    fast = het.jtime[het.jgrp == 0]
    assert fast.max() < het.jtime[het.jgrp == 1].min()  # group 0 = the faster (intra-server) links
    rnd = Topology.from_edges(3, [(a, b, bw, 0.5) for (a, b), bw in zip(
        [(1, 0), (2, 0), (0, 1), (0, 2), (1, 2), (2, 1)], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])])
    for inst in (mesh, het, ScaleInstance(ag(fully_connected(7)), GreedyOptions()),
                 ScaleInstance(ag(rnd), GreedyOptions())):
        for v in range(inst.N):
            lo, hi = inst.in_ptr[v], inst.in_ptr[v + 1]
            masks = inst.vgmask[v * inst.G:(v + 1) * inst.G]
            assert int(np.bitwise_or.reduce(masks)) == (1 << (hi - lo)) - 1  # every in-link in a group ...
            assert sum(bin(int(m)).count("1") for m in masks) == hi - lo    # ... and in one only
            for j in range(lo, hi):
                assert int(inst.jgmask[j]) == int(masks[inst.jgrp[j]])
                assert (int(masks[inst.jgrp[j]]) >> (j - lo)) & 1


def test_groups_are_capped_and_merge_the_slowest_links():
    from solvers.greedy._kernel_scale import SCALE_MAX_GROUPS
    from solvers.greedy.engine import ScaleInstance

    n = SCALE_MAX_GROUPS + 3
    edges = [(u, 0, float(u), 0.5) for u in range(1, n)] + [(0, u, 1.0, 0.5) for u in range(1, n)]
    inst = ScaleInstance(ag(Topology.from_edges(n, edges)), GreedyOptions())
    assert inst.G == SCALE_MAX_GROUPS
    j = np.arange(inst.in_ptr[0], inst.in_ptr[1])
    assert sorted(inst.jgrp[j]) == list(range(SCALE_MAX_GROUPS - 1)) + [SCALE_MAX_GROUPS - 1] * 3
    p = ag(Topology.from_edges(n, edges), mib=1.0)
    both_verifiers(p, greedy_all_gather(p, seed=2, engine="scale", output="compact"))


def test_two_speed_links_draw_from_the_idle_links_group():
    """On a two-speed cluster most events free only the fast links; drawing from their own candidate set
    keeps the draws per transfer near one (one shared set needed ~5, most rejected: docs/scale.md)."""
    p = ag(hetero_cluster(4, 4, 8))
    stats = {}
    s = greedy_all_gather(p, seed=0, engine="scale", stats=stats)
    check(p, s)
    assert stats["candidate_groups"] == 2
    assert stats["stale_candidates"] > 0  # entries left behind in the slow links' sets were dropped
    assert stats["draws"] < 2.5 * stats["transfers"]
    assert stats["scanned"] < 0.5 * stats["transfers"]


def test_scale_and_classic_engines_sample_the_same_rule_on_two_speed_links():
    p = ag(hetero_cluster(2, 2, 4), cpn=2, mib=64)
    scale = [greedy_all_gather(p, seed=k, engine="scale").makespan_us for k in range(40)]
    classic = [greedy_all_gather(p, seed=k, engine="classic").makespan_us for k in range(40)]
    assert np.mean(scale) == pytest.approx(np.mean(classic), rel=0.02)

def test_more_than_65536_chunks_use_32_bit_ids():
    p = ag(ring(3), cpn=22_000, mib=64)  # 66,000 chunks
    c = greedy_all_gather(p, seed=0, engine="scale", output="compact")
    seg = next(c.iter_segments())
    assert seg["chunk"].dtype == np.uint32
    both_verifiers(p, c)


@st.composite
def random_problems(draw):
    n = draw(st.integers(2, 9))
    perm = draw(st.permutations(range(n)))
    pairs = {(perm[i], perm[(i + 1) % n]) for i in range(n)}  # a Hamiltonian cycle: strongly connected
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    pairs = sorted(pairs | {(a, b) for a, b in extra if a != b})
    bws = draw(st.lists(st.sampled_from([12.5, 50.0, 150.0]), min_size=len(pairs), max_size=len(pairs)))
    lats = draw(st.lists(st.sampled_from([0.0, 0.5, 2.0]), min_size=len(pairs), max_size=len(pairs)))
    topo = Topology.from_edges(n, [(a, b, w, l) for (a, b), w, l in zip(pairs, bws, lats)], name="random")
    return (ag(topo, draw(st.integers(1, 3)), draw(st.sampled_from([0.001, 1.0, 1024.0]))),
            draw(st.sampled_from(["earliest_finish", "random", "lowest_id"])), draw(st.integers(0, 2**32)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_problems())
def test_scale_engine_random_graphs_verify(case):
    p, tie, seed = case
    c = greedy_all_gather(p, seed=seed, engine="scale", output="compact", opts=GreedyOptions(link_tiebreak=tie))
    vc, _ = both_verifiers(p, c)
    assert vc.collective_time_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)


def test_engine_and_output_choice():
    p = ag(mesh2d(4, 4))
    assert pick_engine(p, GreedyOptions()) == "classic"  # small: the classic kernel, results as documented
    assert pick_engine(p, GreedyOptions(), "scale") == "scale"
    with pytest.raises(SolverError, match="default rule"):
        pick_engine(p, GreedyOptions(chunk_order="rarest"), "scale")
    with pytest.raises(SolverError, match="default rule"):
        pick_engine(ag(fully_connected(70)), GreedyOptions(), "scale")  # 69 in-links > 62 state bits
    with pytest.raises(SolverError, match="engine"):
        pick_engine(p, GreedyOptions(), "fast")
    with pytest.raises(SolverError, match="scale engine"):
        greedy_all_gather(p, engine="classic", output="compact")
    with pytest.raises(SolverError, match="output"):
        greedy_all_gather(p, output="parquet")


def test_solver_returns_compact_above_the_threshold(monkeypatch):
    monkeypatch.setattr(greedy_mod, "SCALE_MIN_PAIRS", 1)
    monkeypatch.setattr(greedy_mod, "COMPACT_MIN_ROWS", 100)
    monkeypatch.setattr(greedy_candidates_mod, "COMPACT_MIN_ROWS", 100)
    p = ag(mesh2d(6, 6))
    res = GreedySolver().solve(p, seed=0, restarts=3)
    c = res.schedule
    assert c.is_compact and res.stats["engine"] == "scale" and res.stats["output"] == "compact"
    assert res.objective_us == c.makespan_us == min(res.stats["makespans_us"])
    both_verifiers(p, c)
    path = c.path
    assert path.exists() and len(list(path.parent.glob("tacos-compact-*"))) >= 1
    del c, res
    gc.collect()
    assert not path.exists()  # a temporary spool goes away with its object
    # Reduce-Scatter / All-Reduce are composed from tables, whatever the size
    rs = GreedySolver().solve(ag(mesh2d(6, 6)).with_collective("reduce_scatter"), seed=0)
    assert isinstance(rs.schedule, Schedule)


def test_save_moves_a_temporary_spool(tmp_path):
    p = ag(mesh2d(5, 5))
    c = greedy_all_gather(p, seed=0, engine="scale", output="compact")
    old = c.path
    saved = c.save(tmp_path / "run" / "schedule_compact")
    assert saved is c and not old.exists() and (tmp_path / "run" / "schedule_compact" / "meta.json").exists()
    del c, saved
    gc.collect()
    assert (tmp_path / "run" / "schedule_compact" / "meta.json").exists()  # saved: no longer temporary
    mem = CompactSchedule.from_schedule(p, greedy_all_gather(p, seed=0))
    disk = mem.save(tmp_path / "mem")
    both_verifiers(p, read_compact(tmp_path / "mem"))
    assert len(disk) == len(mem)


# ---------------------------------------------------------------------------- the compact verifier rejects
P5 = ag(mesh2d(5, 5), cpn=1, mib=64)
GOOD = greedy_all_gather(P5, seed=0)


def _mutate(**cols):
    base = {k: getattr(GOOD, k).copy() for k in ("chunk", "src", "dst", "start_us", "end_us", "op")}
    base.update(cols)
    return Schedule(**base)


def _row_with_forwarded_chunk():
    """A transfer whose sender is not the chunk's owner (so it depends on an earlier arrival)."""
    i = int(np.flatnonzero(GOOD.src != GOOD.chunk % P5.num_npus)[0])
    return i


def _both_reject(sched, phrase):
    t = check(P5, sched)
    c = check_compact(P5, CompactSchedule.from_schedule(P5, sched))
    assert not t.valid and not c.valid
    assert phrase in c.message, c.message
    return c.message


def test_compact_verifier_rejects_what_the_table_verifier_rejects():
    lt = float(P5.link_time_us[0])
    i = _row_with_forwarded_chunk()
    # a missing delivery: postcondition or a later sender without the chunk
    keep = np.ones(len(GOOD), bool)
    keep[int(np.argmax(GOOD.end_us))] = False
    assert "postcondition unmet" in _both_reject(GOOD.take(np.flatnonzero(keep)), "postcondition unmet")
    # too short
    end = GOOD.end_us.copy()
    end[i] -= lt / 2
    _both_reject(_mutate(end_us=end), "shorter than the link time")
    # non-causal: a forwarded chunk sent before its sender has it
    start, end = GOOD.start_us.copy(), GOOD.end_us.copy()
    start[i] = 0.0
    end[i] = lt
    msg = check_compact(P5, CompactSchedule.from_schedule(P5, _mutate(start_us=start, end_us=end))).message
    assert not check(P5, _mutate(start_us=start, end_us=end)).valid
    assert "non-causal" in msg or "overlaps" in msg
    # overlap on a link: two transfers on one link at the same time
    j = int(np.flatnonzero((GOOD.src == GOOD.src[i]) & (GOOD.dst == GOOD.dst[i]) & (np.arange(len(GOOD)) != i))[0])
    start, end = GOOD.start_us.copy(), GOOD.end_us.copy()
    start[j], end[j] = start[i] + lt / 3, end[i] + lt / 3
    assert not check(P5, _mutate(start_us=start, end_us=end)).valid
    assert not check_compact(P5, CompactSchedule.from_schedule(P5, _mutate(start_us=start, end_us=end))).valid


def _segments(rows, links, events):
    """An in-memory compact schedule built row by row (no writer checks)."""
    chunk, link, lag, end = (np.array(x) for x in zip(*rows))
    first = int(end.min())
    count = np.zeros(int(end.max()) - first + 1, np.uint32)
    # rows in the given order; end_count must describe them in order, so only sorted ends can be encoded:
    # unsorted input is encoded as several segments
    segs = []
    k = 0
    while k < len(rows):
        m = k + 1
        while m < len(rows) and end[m] >= end[m - 1]:
            m += 1
        e = end[k:m]
        segs.append({"chunk": chunk[k:m].astype(np.uint16), "link": link[k:m].astype(np.uint16),
                     "lag": lag[k:m].astype(np.uint8), "end_first": np.int64(e[0]),
                     "end_count": np.bincount(e - e[0]).astype(np.uint32)})
        k = m
    del count, first
    meta = {"format": "tacos-compact-v1", "kind": "all_gather", "op": "copy", "num_npus": 2, "num_chunks": 2,
            "num_links": len(links), "num_rows": len(rows), "num_events": len(events), "num_segments": len(segs),
            "makespan_us": float(events[int(end.max())])}
    return CompactSchedule(None, meta, np.array(links, np.int32), np.array(events, float), segs)


def test_compact_verifier_checks_the_format_itself():
    p = ag(ring(2), mib=1)
    t = float(p.link_time_us[0])
    ok = _segments([(0, 0, 1, 1), (1, 1, 1, 1)], [(0, 1), (1, 0)], [0.0, t])
    assert verify_compact(p, ok).collective_time_us == t
    cases = [
        (_segments([(0, 0, 1, 1), (1, 1, 1, 1)], [(0, 1), (0, 0)], [0.0, t]), "unknown link 0->0"),
        (_segments([(0, 0, 1, 1), (1, 5, 1, 1)], [(0, 1), (1, 0)], [0.0, t]), "link index 5"),
        (_segments([(0, 0, 1, 1), (2, 1, 1, 1)], [(0, 1), (1, 0)], [0.0, t]), "chunk id out of range"),
        (_segments([(0, 0, 1, 2), (1, 1, 2, 1)], [(0, 1), (1, 0)], [0.0, t, 2 * t]), "not in non-decreasing"),
        (_segments([(0, 0, 3, 2), (1, 1, 1, 1)], [(0, 1), (1, 0)], [0.0, t, 2 * t]), "out of range"),
        (_segments([(0, 0, 1, 1), (1, 1, 1, 1)], [(0, 1), (1, 0)], [0.0, t / 2]), "shorter than the link time"),
        (_segments([(0, 0, 1, 1)], [(0, 1), (1, 0)], [0.0, t]), "postcondition unmet: NPU 0 never receives chunk 1"),
        (_segments([(0, 0, 1, 1), (1, 1, 1, 1)], [(0, 1), (1, 0)], [t, 0.0]), "strictly increasing"),
    ]
    for sched, phrase in cases:
        res = check_compact(p, sched)
        assert not res.valid and phrase in res.message, (phrase, res.message)
        with pytest.raises(VerificationError):
            verify_compact(p, sched)
    with pytest.raises(VerificationError, match="compact schedule is for"):
        verify_compact(ag(ring(3), mib=1), ok)


def test_writer_and_reader_errors(tmp_path):
    p = ag(ring(3), mib=1)
    w = CompactWriter(tmp_path / "w", 3, 3, p.topology.src, p.topology.dst)
    w.append([0], [0], [0], [2])
    with pytest.raises(ScheduleError, match="end-event order"):
        w.append([1], [1], [0], [1])
    w.abort()
    assert not (tmp_path / "w").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ScheduleError, match="not empty"):
        CompactWriter(tmp_path / "full", 3, 3, p.topology.src, p.topology.dst)
    with pytest.raises(ScheduleError, match="no meta.json"):
        read_compact(tmp_path / "full")
    with pytest.raises(ScheduleError, match="copy transfers only"):
        CompactSchedule.from_schedule(p, Schedule.from_rows([(0, 0, 1, 0.0, 9.0, "reduce")]))
    c = CompactSchedule.from_schedule(p, greedy_all_gather(p))
    with pytest.raises(ScheduleError, match="more than 2 to materialize"):
        c.to_schedule(max_rows=2)


def test_more_than_65536_links_use_32_bit_link_ids():
    p = ag(fully_connected(257), mib=16)  # 65,792 links
    c = CompactSchedule.from_schedule(p, greedy_all_gather(p, seed=0))
    assert next(c.iter_segments())["link"].dtype == np.uint32
    both_verifiers(p, c)


def test_docstring_examples():
    import doctest

    import tacos_bench.compact
    import tacos_bench.verify.compact

    assert doctest.testmod(tacos_bench.compact).failed == 0
    assert doctest.testmod(tacos_bench.verify.compact).failed == 0


# ---------------------------------------------------------------------------- the run pipeline
def test_run_job_saves_and_verifies_a_compact_schedule(monkeypatch, tmp_path):
    from tacos_bench.compact import COMPACT_DIR
    from tacos_bench.runner.pipeline import run_job

    monkeypatch.setattr(greedy_mod, "SCALE_MIN_PAIRS", 1)
    monkeypatch.setattr(greedy_mod, "COMPACT_MIN_ROWS", 100)
    monkeypatch.setattr(greedy_candidates_mod, "COMPACT_MIN_ROWS", 100)
    cfg = {"solver": {"name": "greedy"}, "topo": {"name": "mesh6x6", "kind": "mesh", "dims": [6, 6]},
           "collective": {"kind": "all_gather", "chunks_per_npu": 1, "buffer_mib": 64.0}, "seed": 0,
           "schedule_csv_max_rows": 10_000}
    rec = run_job(cfg, tmp_path / "run")
    assert rec["valid"] and rec["error"] is None and rec["s_output"] == "compact"
    assert rec["num_transfers"] == 36 * 35 and rec["schedule_file"] == "schedule.csv"
    c = read_compact(tmp_path / "run" / COMPACT_DIR)
    p = ag(mesh2d(6, 6), mib=64.0)
    assert verify(p, Schedule.from_csv(tmp_path / "run" / "schedule.csv")).collective_time_us == \
        rec["collective_time_us"] == verify_compact(p, c).collective_time_us
    # above schedule_csv_max_rows: no CSV, still verified from the compact files
    rec = run_job({**cfg, "schedule_csv_max_rows": 10}, tmp_path / "run2")
    assert rec["valid"] and rec["schedule_file"] is None and (tmp_path / "run2" / COMPACT_DIR / "meta.json").exists()


# ---------------------------------------------------------------------------- threads change speed, not results
def test_compact_verifier_finds_the_same_first_violation_with_any_number_of_threads():
    rng = np.random.default_rng(7)
    lt = float(P5.link_time_us[0])
    cases = [GOOD]
    for _ in range(12):  # random corruptions: shifted starts, swapped chunks, moved links
        k = rng.integers(3)
        cols = {c: getattr(GOOD, c).copy() for c in ("chunk", "src", "dst", "start_us", "end_us")}
        rows = rng.choice(len(GOOD), size=3, replace=False)
        if k == 0:
            cols["start_us"][rows] = np.maximum(0.0, cols["start_us"][rows] - lt)
            cols["end_us"][rows] = cols["start_us"][rows] + lt
        elif k == 1:
            cols["chunk"][rows] = cols["chunk"][rows[::-1]]
        else:
            cols["src"][rows], cols["dst"][rows] = cols["src"][rows[::-1]], cols["dst"][rows[::-1]]
        cases.append(Schedule(**cols, op=GOOD.op))
    invalid = 0
    for sched in cases:
        c = CompactSchedule.from_schedule(P5, sched)
        seen = set()
        for threads in (1, 2, 3):
            try:
                v = verify_compact(P5, c, threads=threads)
                seen.add(("ok", v.collective_time_us, v.num_transfers, round(v.link_busy_us, 6)))
            except VerificationError as e:
                seen.add(("error", str(e)))
        assert len(seen) == 1, seen
        invalid += next(iter(seen))[0] == "error"
    assert invalid >= 8


def test_scale_engine_threads_do_not_change_the_schedule():
    p = ag(hetero_cluster(2, 2, 4), cpn=2, mib=64)
    one = greedy_all_gather(p, seed=5, engine="scale", threads=1).sorted().to_frame()
    two = greedy_all_gather(p, seed=5, engine="scale", threads=2).sorted().to_frame()
    assert one.equals(two)
    with pytest.raises(SolverError, match="threads"):
        GreedySolver().solve(p, threads=-1)
    assert GreedySolver().solve(p, threads=0).schedule is not None  # 0 = one per usable core
