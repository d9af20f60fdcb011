"""Faults mid-collective: the state at the fault, the repair from it, the greedy's solve_from, retime_from and
the verifier with a fault (tacos_bench.faults, solvers.repair, solvers.compose.retime_from, tacos_bench.verify)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from solvers import available_solvers, get_solver
from solvers.base import CAP_FROM_STATE, StartState, solver_class
from solvers.compose import retime_from
from solvers.repair import repair
from tacos_bench import Collective, Problem, Schedule, Topology
from tacos_bench.bounds import lower_bounds
from tacos_bench.collective import COPY_KINDS, REDUCE_KINDS
from tacos_bench.errors import ConfigError, SolverError, TopologyError, VerificationError
from tacos_bench.faults import Fault, check_repairable, fault_from_config, state_at
from tacos_bench.topology.generators import fully_connected, hetero_cluster, mesh2d, ring, torus2d
from tacos_bench.topology.transforms import remove_links, remove_npus
from tacos_bench.verify import check, verify

REPAIRERS = ("greedy", "greedy_plus")


# ---------------------------------------------------------------------------- helpers
def random_asymmetric(seed: int, n: int = 7) -> Topology:
    """Strongly connected, asymmetric, heterogeneous: a random Hamiltonian cycle plus random one-way links."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    pairs = {(int(perm[i]), int(perm[(i + 1) % n])) for i in range(n)}
    while len(pairs) < 3 * n:
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b:
            pairs.add((a, b))
    pairs = sorted(pairs)
    bw = rng.choice([10.0, 25.0, 50.0, 100.0], len(pairs))
    lat = rng.choice([0.0, 0.5, 3.0], len(pairs))
    topo = Topology.from_edges(n, [(a, b, float(w), float(x)) for (a, b), w, x in zip(pairs, bw, lat)],
                               name=f"rand{n}")
    assert not topo.is_symmetric
    return topo


TOPOS = {
    "torus4x4": lambda: torus2d(4, 4),
    "mesh3x4": lambda: mesh2d(3, 4),
    "hetero2x1x4": lambda: hetero_cluster(2, 1, 4),
    "rand7": lambda: random_asymmetric(11),
}


def rows(s: Schedule) -> list[tuple]:
    return list(zip(s.chunk.tolist(), s.src.tolist(), s.dst.tolist(), s.start_us.tolist(), s.end_us.tolist(),
                    s.op.tolist()))


def same(a: Schedule, b: Schedule) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("chunk", "src", "dst", "start_us", "end_us",
                                                                       "op"))


def stays_connected(topo: Topology, links) -> bool:
    try:
        remove_links(topo, links).check_strongly_connected()
        return True
    except TopologyError:
        return False


def failing_links(topo: Topology, healthy: Schedule, two: bool) -> tuple:
    """The busiest link of ``healthy`` whose failure keeps the topology strongly connected; ``two``: with its
    reverse (or, without one, a second busy link)."""
    load = np.bincount(topo.link_ids(healthy.src, healthy.dst), minlength=topo.num_links)
    order = [int(x) for x in np.argsort(-load, kind="stable")]
    for i in order:
        first = (int(topo.src[i]), int(topo.dst[i]))
        if not stays_connected(topo, [first]):
            continue
        if not two:
            return (first,)
        if topo.has_link(first[1], first[0]) and stays_connected(topo, [first, first[::-1]]):
            return (first, first[::-1])
        for j in order:
            second = (int(topo.src[j]), int(topo.dst[j]))
            if second != first and stays_connected(topo, [first, second]):
                return (first, second)
    raise AssertionError("no link can fail without cutting the topology apart")


def fault_times(topo: Topology, healthy: Schedule, links) -> dict[str, float]:
    """0, the middle of a transfer on a failed link (the one nearest the middle of the schedule), the exact
    end of a transfer on a failed link, and after the healthy schedule."""
    ids = topo.link_ids(np.array([u for u, _ in links]), np.array([v for _, v in links]))
    on = np.flatnonzero(np.isin(topo.link_ids(healthy.src, healthy.dst), ids))
    assert on.size, "the failed links carry nothing"
    mids = (healthy.start_us[on] + healthy.end_us[on]) / 2
    i = on[np.argmin(np.abs(mids - healthy.makespan_us / 2))]
    return {"zero": 0.0, "mid": float((healthy.start_us[i] + healthy.end_us[i]) / 2),
            "boundary": float(healthy.end_us[on[0]]), "after": 1.5 * healthy.makespan_us}


def check_repair(p: Problem, healthy: Schedule, fault: Fault, solver: str, seed: int, lb: float):
    """Every property a repair promises; returns the repair."""
    topo = p.topology
    T = fault.at_us
    r = repair(p, healthy, fault, solver, {"seed": seed})
    s = r.schedule
    ver = verify(p, s, fault)  # raises when invalid
    assert ver.valid
    failed = ~fault.surviving_links(topo)
    # nothing on a failed link ends after the fault
    assert not np.any(failed[topo.link_ids(s.src, s.dst)] & (s.end_us > T))
    # the kept transfers, computed independently: ended by T, or in flight at T on a surviving link
    hl = topo.link_ids(healthy.src, healthy.dst)
    ended = healthy.end_us <= T
    flying = (healthy.start_us < T) & ~ended
    kept_mask = ended | (flying & ~failed[hl])
    kept = Counter(rows(healthy.take(np.flatnonzero(kept_mask))))
    got = Counter(rows(s))
    assert not kept - got, "a kept transfer was changed or dropped"
    new = got - kept
    assert all(row[3] >= T for row in new.elements()), "a new transfer starts before the fault"
    # nothing before the fault is altered: what starts before T is exactly the healthy transfers kept
    assert sorted(x for x in rows(s) if x[3] < T) == sorted(
        rows(healthy.take(np.flatnonzero(kept_mask & (healthy.start_us < T)))))
    # bookkeeping
    st = r.state
    assert len(st.executed) == int(kept_mask.sum())
    assert st.lost == int(np.sum(flying & failed[hl]))
    assert st.in_flight == int(np.sum(flying & ~failed[hl]))
    assert st.lost + st.dropped + len(st.executed) == len(healthy)
    f = r.fields()
    assert f["repair_kept_transfers"] == len(st.executed)
    assert f["repair_new_transfers"] == len(s) - len(st.executed) == sum(new.values())
    assert f["repair_synthesis_time_s"] >= 0
    if not fault.npus:
        # with links failing only, the executed schedule is a schedule of the healthy problem
        assert verify(p, s).collective_time_us == ver.collective_time_us
        assert ver.collective_time_us >= lb * (1 - 1e-9)
    if T >= healthy.makespan_us:
        assert sorted(rows(s)) == sorted(rows(healthy))
        assert f["repair_new_transfers"] == 0
    if T == 0 and not fault.npus:
        # nothing was executed: the repair is a from-scratch schedule on the surviving links
        assert len(st.executed) == 0
        dp = Problem(remove_links(topo, fault.links), p.collective)
        assert verify(dp, s).collective_time_us >= lower_bounds(dp)["best_us"] * (1 - 1e-9)
    # deterministic for a seed
    again = repair(p, healthy, fault, solver, {"seed": seed}).schedule
    assert same(again, s)
    return r


# ---------------------------------------------------------------------------- the repair matrix
@pytest.mark.parametrize("topo_name", list(TOPOS))
@pytest.mark.parametrize("solver", REPAIRERS)
@pytest.mark.parametrize("kind", COPY_KINDS)
def test_repair_after_link_faults(kind, solver, topo_name):
    topo = TOPOS[topo_name]()
    p = Problem(topo, Collective(kind, 2, 16, root=topo.num_npus - 2))
    seed = 5
    healthy = get_solver(solver).solve(p, seed=seed).schedule
    verify(p, healthy)
    lb = lower_bounds(p)["best_us"]
    lost_somewhere = False
    for two in (False, True):
        links = failing_links(topo, healthy, two)
        assert len(links) == 1 + two
        for when, T in fault_times(topo, healthy, links).items():
            r = check_repair(p, healthy, Fault(T, links=links), solver, seed, lb)
            if when == "mid":
                lost_somewhere |= r.state.lost > 0
            if when == "boundary":   # the transfer ending exactly at the fault is kept
                assert r.state.executed.end_us.max() >= T
    assert lost_somewhere


def test_repair_default_options_and_seeds_differ_only_after_the_fault():
    p = Problem(torus2d(4, 4), Collective("all_gather", 2, 16))
    healthy = get_solver("greedy").solve(p, seed=1).schedule
    fault = Fault(healthy.makespan_us / 3, links=((0, 1), (1, 0)))
    a = repair(p, healthy, fault).schedule          # solver defaults to greedy
    b = repair(p, healthy, fault, "greedy", {"seed": 0}).schedule
    assert same(a, b)
    for seed in range(3):
        s = repair(p, healthy, fault, "greedy", {"seed": seed}).schedule
        verify(p, s, fault)
        early = sorted(x for x in rows(s) if x[3] < fault.at_us)
        assert early == sorted(x for x in rows(a) if x[3] < fault.at_us)


# ---------------------------------------------------------------------------- hand-checked case
def test_ring4_fail_one_direction_at_zero_matches_the_degraded_optimum():
    """Bidirectional ring(4) All-Gather, 0->1 fails at 0. NPU 1 then has one in-link (2->1) for its 3 chunks,
    and chunk 0 needs 0->3->2->1: 3 link times at least; 3 are reachable (2->1 carries 2, 3, 0 in steps
    1..3; 3->2 carries 3 then 0; 0->3, 3->0, 1->0, 1->2, 2->3 fill in). The repair meets it."""
    p = Problem(ring(4), Collective("all_gather", 1, 64))
    t = float(p.link_time_us[0])
    dp = Problem(remove_links(ring(4), [(0, 1)]), p.collective)
    assert lower_bounds(dp)["best_us"] == pytest.approx(3 * t)
    fault = Fault(0.0, links=((0, 1),))
    for solver in REPAIRERS:
        for seed in range(3):
            healthy = get_solver(solver).solve(p, seed=seed).schedule
            assert healthy.makespan_us == pytest.approx(2 * t)
            r = repair(p, healthy, fault, solver, {"seed": seed})
            assert verify(p, r.schedule, fault).collective_time_us == pytest.approx(3 * t)
            assert verify(dp, r.schedule).valid
            assert r.state.dropped == len(healthy) and len(r.state.executed) == 0


def test_ring4_degraded_optimum_by_cpsat():
    """The exact backend agrees that 3 link times is the optimum on the degraded ring."""
    if "cpsat" not in available_solvers():
        pytest.skip("cpsat is not installed")
    dp = Problem(remove_links(ring(4), [(0, 1)]), Collective("all_gather", 1, 64))
    t = float(dp.link_time_us[0])
    try:
        res = get_solver("cpsat").solve(dp, time_limit_s=20)
    except SolverError as e:
        pytest.skip(f"cpsat: {e}")
    if res.status != "optimal":
        pytest.skip(f"cpsat did not prove optimality ({res.status})")
    assert verify(dp, res.schedule).collective_time_us == pytest.approx(3 * t)


# ---------------------------------------------------------------------------- failed NPUs
def _first_repairable_time(p: Problem, s: Schedule, fault_of) -> float | None:
    """The first end time of a transfer in ``s`` at which ``fault_of(T)`` leaves a repairable state."""
    for T in np.unique(s.end_us).tolist():
        f = fault_of(T)
        try:
            check_repairable(p, state_at(p, s, f), f)
        except TopologyError:
            continue
        return T
    return None


@pytest.mark.parametrize("kind", COPY_KINDS)
def test_failed_npu_own_needs_are_dropped(kind):
    topo = torus2d(4, 4)
    p = Problem(topo, Collective(kind, 1, 16, root=0))
    healthy = get_solver("greedy").solve(p, seed=2).schedule
    # an NPU whose own data has all left it before the schedule ends (in a tight all_to_all not every one has)
    for v in [5] + [u for u in range(1, 16) if u != 5]:
        T = _first_repairable_time(p, healthy, lambda T: Fault(T, npus=(v,)))
        if T is not None and T < healthy.makespan_us:
            break
    assert T is not None and T < healthy.makespan_us
    fault = Fault(T, npus=(v,))
    r = repair(p, healthy, fault, "greedy", {"seed": 2})
    s = r.schedule
    verify(p, s, fault)
    assert not r.state.alive[v] and r.state.alive.sum() == 15
    # every link of v fails: nothing into or out of v ends after the fault
    touching = (s.src == v) | (s.dst == v)
    assert not np.any(touching & (s.end_us > T))
    # the failed NPU holds nothing in the state the repair starts from
    assert not np.any(r.state.hold_npu == v)
    # nothing new goes to v: what v lacked at the fault it still lacks, and only v lacks anything
    need_v = (p.destinations < 0) | (p.destinations == v)
    held_v = set(healthy.chunk[(healthy.dst == v) & (healthy.end_us <= T)].tolist()) | set(
        np.flatnonzero(p.sources == v).tolist())
    missing = [c for c in np.flatnonzero(need_v).tolist() if c not in held_v]
    healthy_check = check(p, s)
    if missing:
        assert not healthy_check.valid and f"NPU {v}" in healthy_check.message
    else:
        assert healthy_check.valid
    if kind in ("all_gather", "broadcast", "all_to_all"):
        assert missing   # the case is meaningful: v really is left out


@pytest.mark.parametrize("kind,root,dead", [
    ("all_gather", 0, 5),        # chunk 5 is only at 5 at time 0
    ("broadcast", 5, 5),         # the root holds every chunk
    ("scatter", 5, 5),
    ("gather", 0, 5),            # the root still needs 5's chunk
    ("all_to_all", 0, 5),
])
def test_data_only_a_failed_npu_held_is_a_topology_error(kind, root, dead):
    p = Problem(torus2d(4, 4), Collective(kind, 1, 16, root=root))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(0.0, npus=(dead,))
    with pytest.raises(TopologyError, match="no copy left on a surviving NPU") as e:
        repair(p, healthy, fault)
    msg = str(e.value)
    assert "\n" not in msg and f"NPU(s) {dead}" in msg
    st = state_at(p, healthy, fault)
    with pytest.raises(TopologyError):
        check_repairable(p, st, fault)


def test_gather_whose_root_fails_is_an_error_like_a_broadcast_whose_data_is_lost():
    """Every chunk of a Gather is bound for its root, and what the root gathered dies with it: no surviving
    NPU is to receive anything, so there is no result to repair (issue 34: it used to pass as valid with
    nothing left to do, where a Broadcast losing its data is an error)."""
    p = Problem(mesh2d(3, 3), Collective("gather", 2, 16, root=4))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(healthy.makespan_us / 2, npus=(4,))
    with pytest.raises(TopologyError, match="NPU 4, the gather's root, fails, so no surviving NPU is to receive"):
        repair(p, healthy, fault)
    # a Broadcast from a root that fails once its data has left goes on from the surviving copies
    b = Problem(mesh2d(3, 3), Collective("broadcast", 1, 16, root=4))
    hb = get_solver("greedy").solve(b, seed=0).schedule
    fb = Fault(hb.makespan_us * 0.9, npus=(4,))
    assert verify(b, repair(b, hb, fb).schedule, fb).valid


@pytest.mark.parametrize("case", ["npus_isolate", "links_isolate", "links_split"])
def test_fault_cutting_survivors_apart_is_a_topology_error(case):
    if case == "npus_isolate":        # ring(5) without 0 and 2: NPU 1 is alone (its data has left)
        p = Problem(ring(5), Collective("all_gather", 1, 16))
        fault_kw = {"npus": (0, 2)}
    elif case == "links_isolate":     # mesh corner 0 loses both in-links before the broadcast reaches it
        p = Problem(mesh2d(3, 3), Collective("broadcast", 1, 16, root=8))
        topo = p.topology
        fault_kw = {"links": tuple((int(u), 0) for u in topo.src[topo.dst == 0])}
    else:                             # ring(4): 0-1 and 2-3 fail both ways, {1, 2} and {3, 0} split
        p = Problem(ring(4), Collective("all_to_all", 1, 16))
        fault_kw = {"links": ((0, 1), (1, 0), (2, 3), (3, 2))}
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    # after the first transfers end: every chunk has left its source (each link starts with its sender's chunk)
    fault = Fault(float(healthy.end_us.min()), **fault_kw)
    with pytest.raises(TopologyError, match="cut the surviving NPUs apart|can no longer (receive|reach)") as e:
        repair(p, healthy, fault)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------- what cannot be repaired
@pytest.mark.parametrize("kind", REDUCE_KINDS)
def test_reducing_collectives_are_repaired_after_links_fail_not_npus(kind):
    p = Problem(ring(4), Collective(kind, 1, 16, root=1))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(healthy.makespan_us / 2, links=((0, 1),))
    r = repair(p, healthy, fault)
    assert verify(p, r.schedule, fault).valid and r.plan in ("resume", "detour", "unaffected")
    with pytest.raises(ConfigError) as e:
        repair(p, healthy, Fault(healthy.makespan_us / 2, npus=(2,)))
    msg = str(e.value)
    assert "\n" not in msg and kind in msg and "not after NPUs fail" in msg
    # solve_from itself is for copy collectives: a reducing one resumes through solvers.resume_reducing
    start = StartState(np.ones(p.num_links, bool), p.sources.clip(0), np.arange(p.num_chunks), np.ones(4, bool))
    with pytest.raises(SolverError, match="copy collectives"):
        get_solver("greedy").solve_from(p, start)


def test_backends_without_from_state_give_one_line_errors():
    p = Problem(ring(4), Collective("all_gather", 1, 16))
    healthy = get_solver("greedy").solve(p, seed=0).schedule
    fault = Fault(healthy.makespan_us / 2, links=((0, 1),))
    start = StartState(np.ones(p.num_links, bool), p.sources, np.arange(p.num_chunks), np.ones(4, bool))
    names = [n for n in available_solvers()]
    without = [n for n in names if CAP_FROM_STATE not in solver_class(n).capabilities]
    assert {"milp", "ring"} <= set(without) and {"greedy", "greedy_plus"}.isdisjoint(without)
    assert {"greedy", "greedy_plus"} <= {n for n in names if CAP_FROM_STATE in solver_class(n).capabilities}
    for name in without:
        with pytest.raises(SolverError, match="cannot start from a given state") as e:
            get_solver(name).solve_from(p, start)
        assert "\n" not in str(e.value) and "greedy" in str(e.value)
    for name in ("milp", "ring"):
        with pytest.raises(SolverError, match=f"{name!r} cannot start from a given state") as e:
            repair(p, healthy, fault, name)
        assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------- the greedy's solve_from
@pytest.mark.parametrize("solver", REPAIRERS)
@pytest.mark.parametrize("kind", COPY_KINDS)
def test_solve_from_the_precondition_is_a_valid_schedule(kind, solver):
    p = Problem(random_asymmetric(3, 6), Collective(kind, 2, 8, root=2))
    start = StartState(np.ones(p.num_links, bool), np.asarray(p.sources), np.arange(p.num_chunks),
                       np.ones(p.num_npus, bool))
    res = get_solver(solver).solve_from(p, start, seed=4)
    assert res.status == "feasible"
    assert verify(p, res.schedule).collective_time_us >= lower_bounds(p)["best_us"] * (1 - 1e-9)
    again = get_solver(solver).solve_from(p, start, seed=4)
    assert same(res.schedule, again.schedule)


@pytest.mark.parametrize("kind", COPY_KINDS)
def test_solve_from_a_state_uses_only_allowed_links_and_completes_the_survivors(kind):
    """A hand-made state on torus2d(4,4): NPU 3 dead, links 0<->1 masked, every chunk also held at its
    source's right-hand neighbour. The residual schedule (from time 0) is causal from that state, never touches
    masked links or the dead NPU, and delivers what every survivor lacks."""
    topo = torus2d(4, 4)
    p = Problem(topo, Collective(kind, 1, 16, root=6))
    n, C = p.num_npus, p.num_chunks
    links = np.ones(p.num_links, bool)
    links[[topo.link_id(0, 1), topo.link_id(1, 0)]] = False
    alive = np.ones(n, bool)
    alive[3] = False
    links[(topo.src == 3) | (topo.dst == 3)] = False
    src = np.asarray(p.sources)
    right = (src // 4) * 4 + (src % 4 + 1) % 4
    hv = np.concatenate([src, right])
    hc = np.concatenate([np.arange(C), np.arange(C)])
    ok = alive[hv]
    hv, hc = hv[ok], hc[ok]
    res = get_solver("greedy").solve_from(p, StartState(links, hv, hc, alive), seed=0)
    s = res.schedule
    lk = topo.link_ids(s.src, s.dst)
    assert np.all(links[lk])
    assert not np.any((s.src == 3) | (s.dst == 3))
    # causal from the state: placing it with everything held at 0 and every link free gives finite times
    placed = retime_from(p, s, link_free=np.where(links, 0.0, np.inf), hold_npu=hv, hold_chunk=hc,
                         hold_time=np.zeros(hv.size))
    assert np.all(np.isfinite(placed.end_us))
    # completeness among the survivors
    have = set(zip(hv.tolist(), hc.tolist())) | set(zip(s.dst.tolist(), s.chunk.tolist()))
    dst = np.asarray(p.destinations)
    for c in range(C):
        for v in (range(n) if dst[c] < 0 else [int(dst[c])]):
            if alive[v]:
                assert (v, c) in have, (v, c)


def test_solve_from_rejects_farthest_for_multicast():
    p = Problem(torus2d(3, 3), Collective("all_gather", 1, 16))
    start = StartState(np.ones(p.num_links, bool), p.sources, np.arange(p.num_chunks), np.ones(9, bool))
    with pytest.raises(SolverError, match="farthest"):
        get_solver("greedy").solve_from(p, start, chunk_order="farthest")


# ---------------------------------------------------------------------------- retime_from
def test_retime_from_hand_values():
    topo = ring(3, bidirectional=False)       # 0->1, 1->2, 2->0
    p = Problem(topo, Collective("all_gather", 1, 3))
    t = float(p.link_time_us[0])
    l01, l12 = topo.link_id(0, 1), topo.link_id(1, 2)
    # chunk 0: 0->1 then 1->2; chunk 2: 0->1 after chunk 0 on the same link (0 holds 2 from time 9t)
    s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (0, 1, 2, t, 2 * t, "copy"), (2, 0, 1, t, 2 * t, "copy")])
    free = np.zeros(3)
    free[l01] = 5 * t                         # an in-flight transfer ends at 5t
    out = retime_from(p, s, link_free=free, hold_npu=np.array([0, 0]), hold_chunk=np.array([0, 2]),
                      hold_time=np.array([2 * t, 9 * t]))
    assert out.start_us.tolist() == pytest.approx([5 * t, 6 * t, 9 * t])
    assert out.end_us.tolist() == pytest.approx([6 * t, 7 * t, 10 * t])
    # the sender's hold time rules when the link is free earlier
    free[l01] = 0.0
    out = retime_from(p, s, link_free=free, hold_npu=np.array([0, 0, 1]), hold_chunk=np.array([0, 2, 0]),
                      hold_time=np.array([3 * t, 0.0, 0.5 * t]))
    # chunk 0 at 1 from 0.5t already (in flight): 1->2 starts then, not after the re-sent copy
    assert out.start_us.tolist() == pytest.approx([3 * t, 0.5 * t, 4 * t])
    # a failed link (free = inf) or a sender that never holds the chunk is an error
    free[l12] = np.inf
    with pytest.raises(SolverError):
        retime_from(p, s, link_free=free, hold_npu=np.array([0, 0]), hold_chunk=np.array([0, 2]),
                    hold_time=np.zeros(2))
    with pytest.raises(SolverError):
        retime_from(p, s, link_free=np.zeros(3), hold_npu=np.array([0]), hold_chunk=np.array([0]),
                    hold_time=np.zeros(1))
    assert len(retime_from(p, Schedule.empty(), link_free=np.zeros(3), hold_npu=np.zeros(0, int),
                           hold_chunk=np.zeros(0, int), hold_time=np.zeros(0))) == 0


# ---------------------------------------------------------------------------- state_at
def _ring4_rows(t):
    return [(0, 0, 1, 0.0, t, "copy"),          # a: ends at t
            (0, 1, 2, t, 2 * t, "copy"),        # b
            (1, 1, 0, 0.0, t, "copy"),          # c
            (1, 0, 3, t, 2 * t, "copy"),        # d
            (2, 2, 1, 2 * t, 3 * t, "copy")]    # e


def test_state_at_boundaries_and_counts():
    p = Problem(ring(4), Collective("all_gather", 1, 1))
    topo = p.topology
    t = float(p.link_time_us[0])
    s = Schedule.from_rows(_ring4_rows(t))
    # exactly at t: a and c ended (kept); b and d start at t, so they have not started (dropped)
    st = state_at(p, s, Fault(t, links=((1, 2),)))
    assert (len(st.executed), st.in_flight, st.lost, st.dropped) == (2, 0, 0, 3)
    # at 1.5t: b is in flight on the failed link (lost), d in flight on a surviving one (completes)
    st = state_at(p, s, Fault(1.5 * t, links=((1, 2),)))
    assert (len(st.executed), st.in_flight, st.lost, st.dropped) == (3, 1, 1, 1)
    held = dict(((v, c), h) for v, c, h in zip(st.hold_npu.tolist(), st.hold_chunk.tolist(), st.hold_time.tolist()))
    assert held[(1, 0)] == t and held[(3, 1)] == 2 * t and held[(2, 2)] == 0.0
    assert (2, 0) not in held and (1, 2) not in held
    assert len(held) == len(st.hold_npu)       # one entry per (NPU, chunk)
    assert st.link_free[topo.link_id(1, 2)] == np.inf
    assert st.link_free[topo.link_id(0, 3)] == 2 * t
    assert st.link_free[topo.link_id(0, 1)] == 1.5 * t
    assert st.alive.all()
    # a failed NPU holds nothing and its in-flight transfers are lost
    st = state_at(p, s, Fault(1.5 * t, npus=(3,)))
    assert 3 not in st.hold_npu.tolist() and st.lost == 1 and not st.alive[3]
    assert st.link_free[topo.link_id(0, 3)] == np.inf


# ---------------------------------------------------------------------------- Fault and its config
def test_fault_validation():
    for bad in (-1, -0.5, float("nan"), float("inf"), True, "3", None):
        with pytest.raises(ConfigError, match="at_us"):
            Fault(bad, links=((0, 1),))
    with pytest.raises(ConfigError, match="nothing fails"):
        Fault(3.0)
    f = Fault(np.int64(4), links=[(np.int64(0), 1)], npus=[3, 1, 3])
    assert f.at_us == 4.0 and isinstance(f.at_us, float)
    assert f.links == ((0, 1),) and f.npus == (1, 3)
    assert "NPU(s) 1, 3" in f.describe() and "1 link(s)" in f.describe()


def test_fault_links_npus_and_topologies():
    topo = ring(5)
    f = Fault(1.0, links=((0, 1),), npus=(3,))
    ids = f.failed_link_ids(topo)
    pairs = {(int(topo.src[i]), int(topo.dst[i])) for i in ids}
    assert pairs == {(0, 1), (2, 3), (3, 2), (3, 4), (4, 3)}
    assert f.surviving_links(topo).sum() == topo.num_links - 5
    sub = f.surviving_topology(topo)
    assert sub.num_npus == 5 and sub.num_links == 5 and not sub.has_link(0, 1) and sub.has_link(1, 0)
    scratch = f.scratch_topology(topo)
    assert scratch.num_npus == 4 and scratch.meta["original_ids"] == [0, 1, 2, 4]
    assert not scratch.has_link(0, 1) and scratch.has_link(1, 0)
    with pytest.raises(TopologyError, match="no link 0->2"):
        Fault(1.0, links=((0, 2),)).failed_link_ids(topo)


def test_fault_from_config():
    topo = mesh2d(2, 2)
    assert fault_from_config(None, topo) is None
    assert fault_from_config({}, topo) is None
    assert fault_from_config({"at_us": None, "links": [], "npus": []}, topo) is None
    f = fault_from_config({"at_us": 10, "links": [[0, 1, "both"]]}, topo)
    assert f.at_us == 10.0 and f.links == ((0, 1), (1, 0)) and f.npus == ()
    for cfg in ({"links": [[0, 1]]}, {"npus": [1]}, {"at_us": None, "links": [[0, 1]]}):
        with pytest.raises(ConfigError, match="need fault.at_us"):
            fault_from_config(cfg, topo)
    with pytest.raises(ConfigError, match="unknown fault setting"):
        fault_from_config({"at_us": 1, "when": 3}, topo)
    with pytest.raises(ConfigError, match="at_us"):
        fault_from_config({"at_us": -1, "links": [[0, 1]]}, topo)
    with pytest.raises(TopologyError, match="no link 0->3"):
        fault_from_config({"at_us": 1, "links": [[0, 3]]}, topo)
    with pytest.raises(TopologyError, match="NPU 7"):
        fault_from_config({"at_us": 1, "npus": [7]}, topo)
    with pytest.raises(TopologyError, match="every NPU"):
        fault_from_config({"at_us": 1, "npus": [0, 1, 2, 3]}, topo)
    with pytest.raises(ConfigError, match="not an integer"):
        fault_from_config({"at_us": 1, "npus": ["x"]}, topo)
    with pytest.raises(TopologyError):
        fault_from_config({"at_us": 1, "links": [[0, 1, "sideways"]]}, topo)


def test_fault_from_config_maps_configured_ids():
    """Ids are as configured: on a topology without NPU 2, configured NPU 5 is id 4 and NPU 2 is an error."""
    topo = remove_npus(mesh2d(3, 3), [2])
    f = fault_from_config({"at_us": 1, "npus": [5], "links": [[0, 1, "both"]]}, topo)
    assert f.npus == (4,) and f.links == ((0, 1), (1, 0))
    assert f.configured["npus"] == [5]
    f = fault_from_config({"at_us": 1, "links": [[4, 5]]}, topo)   # configured 4->5 is now 3->4
    assert f.links == ((3, 4),)
    with pytest.raises(TopologyError, match="NPU 2"):
        fault_from_config({"at_us": 1, "npus": [2]}, topo)


# ---------------------------------------------------------------------------- the verifier with a fault
def test_verifier_rejects_a_failed_link_used_after_the_fault():
    p = Problem(torus2d(4, 4), Collective("all_gather", 1, 16))
    s = get_solver("greedy").solve(p, seed=0).schedule
    links = failing_links(p.topology, s, two=False)
    T = fault_times(p.topology, s, links)["mid"]
    with pytest.raises(VerificationError, match="fails at"):
        verify(p, s, Fault(T, links=links))
    c = check(p, s, fault=Fault(T, links=links))
    assert not c.valid and "fails at" in c.message
    # the last use of the link ending exactly at the fault is fine
    lid = p.topology.link_id(*links[0])
    last = float(s.end_us[p.topology.link_ids(s.src, s.dst) == lid].max())
    assert verify(p, s, Fault(last, links=links)).valid
    with pytest.raises(VerificationError, match="fails at"):
        verify(p, s, Fault(last * (1 - 1e-6), links=links))


@pytest.mark.parametrize("kind", ["all_gather", "all_to_all"])
def test_verifier_accepts_a_failed_npu_missing_data(kind):
    """Direct sends on fully_connected(4): drop every transfer into NPU 2. Without the fault it is rejected;
    with NPU 2 failing at the end it is accepted; dropping one more transfer (to a survivor) is rejected."""
    p = Problem(fully_connected(4), Collective(kind, 1, 4))
    t = float(p.link_time_us[0])
    src, dst = p.sources, p.destinations
    rows_ = []
    free = {}
    for c in range(p.num_chunks):
        targets = [v for v in range(4) if v != src[c]] if dst[c] < 0 else ([int(dst[c])] if dst[c] != src[c] else [])
        for v in targets:
            k = (int(src[c]), v)
            s0 = free.get(k, 0.0)
            free[k] = s0 + t
            rows_.append((c, int(src[c]), v, s0, s0 + t, "copy"))
    full = Schedule.from_rows(rows_)
    verify(p, full)
    s = full.take(np.flatnonzero(full.dst != 2))
    with pytest.raises(VerificationError, match="NPU 2"):
        verify(p, s)
    fault = Fault(s.makespan_us, npus=(2,))
    assert verify(p, s, fault).valid
    # still needed by the survivors
    worse = s.take(np.flatnonzero(~((s.dst == 1) & (s.src == 0))))
    with pytest.raises(VerificationError, match="postcondition"):
        verify(p, worse, fault)
    # the failed NPU's own sends must have ended by the fault
    with pytest.raises(VerificationError, match="fails at"):
        verify(p, s, Fault(s.makespan_us / 2, npus=(2,)))


def test_slow_links_from_the_start_degrade_the_problem(tmp_path):
    """fault.slow_links / fault.slow_npus (issue 35, from the start): the run's topology has those links at the
    factor of their bandwidth, the bound and the verified time see it, and bad factors are refused in words."""
    from cli import run_in_process
    from tacos_bench.faults import slowed_topology
    from tacos_bench.errors import TacosError
    from tacos_bench.topology.named import named_topology

    t = named_topology("hetero_mesh4x4")
    slow = slowed_topology({"slow_links": [[0, 1, 0.5, "both"]], "slow_npus": [[5, 0.25]]}, t)
    lid = t.link_ids([0, 1], [1, 0])
    assert np.allclose(slow.bw_GiBps[lid], t.bw_GiBps[lid] * 0.5)
    five = (t.src == 5) | (t.dst == 5)
    assert np.allclose(slow.bw_GiBps[five], t.bw_GiBps[five] * 0.25)
    untouched = ~five
    untouched[lid] = False
    assert np.array_equal(slow.bw_GiBps[untouched], t.bw_GiBps[untouched])
    for bad, needle in (({"slow_links": [[0, 1, 0]]}, "(0, 1]"), ({"slow_links": [[0, 1, 2.0]]}, "(0, 1]"),
                        ({"slow_npus": [[99, 0.5]]}, "99"), ({"slow_npus": [[0, 0.5, "nic"]]}, "[npu, factor, nics]")):
        with pytest.raises(TacosError, match=re.escape(needle)):
            slowed_topology(bad, t)
    # with a fault time they slow down then: the run starts on the healthy network, the fault carries them
    from tacos_bench.faults import fault_from_config

    timed = {"slow_links": [[0, 1, 0.5]], "at_us": 5.0}
    assert slowed_topology(timed, t) is t
    assert fault_from_config(timed, t).slow == ((0, 1, 0.5),)
    for bad, needle in (({"slow_links": [[0, 1, -1]], "at_us": 5.0}, "(0, 1]"),
                        ({"slow_links": [[0, 9, 0.5]], "at_us": 5.0}, "no link 0->9")):
        with pytest.raises(TacosError, match=re.escape(needle)):
            fault_from_config(bad, t)


def test_a_run_on_slowed_links_is_verified_against_them(tmp_path):
    from tacos_bench.runner.pipeline import run_job
    from cli import conf

    cfg = {"solver": {"name": "greedy_plus"}, "topo": conf("topo", "hetero_mesh4x4"),
           "collective": conf("collective", "all_gather"), "fault": {"slow_npus": [[0, 0.5]]}, "seed": 0}
    rec = run_job(cfg, tmp_path / "slow")
    healthy = run_job({**cfg, "fault": {}}, tmp_path / "healthy")
    assert rec["valid"] and rec["fault_slow_links"] and healthy["valid"]
    assert rec["lower_bound_us"] > healthy["lower_bound_us"]
    assert rec["collective_time_us"] >= rec["lower_bound_us"] * (1 - 1e-9)
