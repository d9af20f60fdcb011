"""The portfolio (solvers.portfolio): candidates as data, one runner, plug-ins by import path, the one validator
every candidate goes through, and the record fields that name the winner."""

import json
import sys
import textwrap

import numpy as np
import pytest

from solvers import get_solver
from solvers.greedy.candidates import COPY_CANDIDATES
from solvers.greedy.fabric_solver import fabric_candidates
from solvers.portfolio import (SKIP_AT_BOUND, SKIP_TIME_LIMIT, Candidate, RunContext, Skip, run_portfolio, select,
                               validate)
from tacos_bench import Collective, Problem
from tacos_bench.bounds import lower_bounds
from tacos_bench.errors import SolverError
from tacos_bench.schedule import Schedule
from tacos_bench.topology.generators import ring, torus2d
from tacos_bench.topology.named import named_topology

from candidates import skipped, tried


class Fixed(Candidate):
    """A candidate that returns a given schedule (or raises Skip with a reason)."""

    def __init__(self, name, sched=None, skip=None, slow_s=0.0):
        self.name, self.sched, self.skip, self.slow_s = name, sched, skip, slow_s

    def run(self, problem, ctx):
        if self.skip:
            raise Skip(self.skip)
        if self.slow_s:
            import time
            time.sleep(self.slow_s)
        return self.sched


def _schedules(p):
    fast = get_solver("greedy").solve(p, seed=0).schedule
    slow = fast.shifted(1.0)
    return fast, slow


def test_the_runner_keeps_the_fastest_and_says_why_others_did_not_run():
    p = Problem(torus2d(3, 3), Collective("all_gather", 1, 4))
    fast, slow = _schedules(p)
    out = run_portfolio([Fixed("slow", slow), Fixed("gone", skip="not today"), Fixed("fast", fast)], p, RunContext())
    assert out.winner == "fast" and [t.name for t in out.tried] == ["slow", "fast"]
    assert out.skipped == (("gone", "not today"),) and out.makespans["slow"] > out.makespans["fast"]


def test_ties_go_to_the_preferred_and_the_bound_stops_the_rest():
    p = Problem(torus2d(3, 3), Collective("all_gather", 1, 4))
    fast, _ = _schedules(p)
    out = run_portfolio([Fixed("a", fast), Fixed("b", fast)], p, RunContext(), prefer=("b", "a"))
    assert out.winner == "b"
    at = run_portfolio([Fixed("a", fast), Fixed("b", fast)], p, RunContext(bound=lambda: fast.makespan_us))
    assert at.winner == "a" and at.skipped == (("b", SKIP_AT_BOUND),) and at.stop_bound_us == fast.makespan_us


def test_the_first_candidate_always_runs_and_no_other_starts_after_the_deadline():
    import time

    p = Problem(torus2d(3, 3), Collective("all_gather", 1, 4))
    fast, slow = _schedules(p)
    out = run_portfolio([Fixed("a", slow, slow_s=0.05), Fixed("b", fast)], p,
                        RunContext(deadline=time.perf_counter() + 0.01))
    assert out.winner == "a" and out.skipped == (("b", SKIP_TIME_LIMIT),)


def test_no_schedule_at_all_names_every_reason():
    p = Problem(ring(3), Collective("all_gather", 1, 1))
    with pytest.raises(SolverError, match="no candidate produced a schedule.*x: nope"):
        run_portfolio([Fixed("x", skip="nope")], p, RunContext())


def test_a_plugin_schedule_that_the_verifier_rejects_never_wins(tmp_path, monkeypatch):
    (tmp_path / "bad_cand.py").write_text(textwrap.dedent('''
        from tacos_bench.schedule import Schedule
        class Cheat:
            name = "cheat"
            def run(self, problem, ctx):
                return Schedule.from_rows([(0, 0, 1, 0.0, 1e-6, "copy")])
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    p = Problem(torus2d(3, 3), Collective("all_gather", 1, 4))
    r = get_solver("greedy").solve(p, candidates=["rules", "bad_cand:Cheat"])
    assert r.candidate == "rules" and "rejected by the verifier" in skipped(r)["cheat"]


def test_candidates_option_selects_by_name_and_rejects_unknown_ones():
    p = Problem(torus2d(3, 3), Collective("all_gather", 2, 4))
    r = get_solver("greedy_plus").solve(p, candidates=["rarest"])
    assert set(tried(r)) == {"rarest"} and r.candidate == "rarest"
    # a fabric's candidate names are accepted on a point-to-point problem (a sweep over both) and left out
    r2 = get_solver("greedy_plus").solve(p, candidates="[rules,baseline:rhd]")
    assert set(tried(r2)) == {"rules"}
    with pytest.raises(SolverError, match="unknown candidate.*bogus"):
        get_solver("greedy_plus").solve(p, candidates=["bogus"])
    assert [c.name for c in select(COPY_CANDIDATES, None)] == [c.name for c in COPY_CANDIDATES]


def test_solver_greedy_with_greedy_plus_options_is_greedy_plus_on_fabrics_too():
    from dataclasses import fields

    from solvers.greedy import GreedyOptions, GreedyPlusOptions

    a, b = GreedyOptions(), GreedyPlusOptions()
    plus_opts = {f.name: getattr(b, f.name) for f in fields(b) if getattr(a, f.name) != getattr(b, f.name)}
    for topo in ("switched8_nvls", "torus4x4"):
        p = Problem(named_topology(topo), Collective("all_reduce", 1, 16))
        g = get_solver("greedy").solve(p, **plus_opts)
        gp = get_solver("greedy_plus").solve(p)
        assert g.candidate == gp.candidate
        assert g.schedule.sorted().to_frame().equals(gp.schedule.sorted().to_frame())


@pytest.mark.parametrize("topo,kind,cpn", [("hetero2x2x4", "all_gather", 2), ("torus4x4", "broadcast", 4),
                                           ("hetero2x2x4", "scatter", 1), ("random12d3s1", "broadcast", 2),
                                           ("mesh3x4", "all_gather", 1)])
def test_every_point_to_point_candidate_passes_the_validator(topo, kind, cpn):
    p = Problem(named_topology(topo), Collective(kind, cpn, 16.0, root=1))
    opts = get_solver("greedy_plus").options({})
    bound = lower_bounds(p)["best_us"]
    ran = 0
    for cand in COPY_CANDIDATES:
        if cand.switched_on(opts) is None and cand.applies(p, RunContext(opts=opts)) is None:
            ran += validate(cand, p, opts, bound_us=bound) is not None
    assert ran >= 2


@pytest.mark.parametrize("topo,kind", [("switched8_nvls", "all_reduce"), ("leafspine2x4_2to1", "all_gather"),
                                       ("switched8", "gather")])
def test_every_fabric_candidate_passes_the_validator(topo, kind):
    from solvers.fabric_routes import shared_hops

    p = Problem(named_topology(topo), Collective(kind, 1, 16.0, root=1))
    opts = get_solver("greedy_plus").options({})
    bound = lower_bounds(p)["best_us"]
    ran = 0
    with shared_hops():
        for cand in fabric_candidates():
            if cand.switched_on(opts) is None and cand.applies(p, RunContext(opts=opts)) is None:
                ran += validate(cand, p, opts, bound_us=bound) is not None
    assert ran >= 2


def test_a_users_chunk_score_runs_in_the_kernel_as_the_built_in_order_would(tmp_path, monkeypatch):
    (tmp_path / "my_scores.py").write_text(textwrap.dedent('''
        def rarest(chunk, receiver, sender, holders, owner, now_us):
            return float(holders)
        def lowest_id(chunk, receiver, sender, holders, owner, now_us):
            return float(chunk)
        def broken(chunk, receiver):
            return 0.0
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    g = get_solver("greedy")
    for topo in ("torus4x4", "hetero2x2x4", "random12d3s1"):
        p = Problem(named_topology(topo), Collective("all_gather", 2, 16.0))
        built_in = g.solve(p, chunk_order="rarest", seed=3).schedule
        mine = g.solve(p, chunk_order="my_scores:rarest", seed=3)
        assert mine.schedule.sorted().to_frame().equals(built_in.sorted().to_frame()), topo
    p = Problem(named_topology("torus4x4"), Collective("broadcast", 4, 16.0, root=2))
    r = g.solve(p, chunk_order="my_scores:lowest_id", matching="maximum")
    from tacos_bench.verify import check

    assert check(p, r.schedule).valid
    with pytest.raises(SolverError, match="numba cannot compile it"):
        g.solve(p, chunk_order="my_scores:broken")
    with pytest.raises(SolverError, match="has no 'nope'"):
        g.solve(p, chunk_order="my_scores:nope")
    with pytest.raises(SolverError, match="runs on the TACOS matcher"):
        g.solve(p, chunk_order="my_scores:rarest", imports="near")


def test_the_record_names_the_winner_and_the_summary_line_too(tmp_path):
    from tacos_bench.runner.stages import problem_fields, solve_and_verify
    from tacos_bench.runner.summary import summary_line

    p = Problem(named_topology("hetero_mesh4x4"), Collective("all_gather", 4, 16.0))
    rec, _ = solve_and_verify(p, "greedy_plus", {"seed": 0})
    assert rec["candidate"] == "tacos"
    assert {t["name"] for t in json.loads(rec["candidates_tried"])} == {"tacos"}
    assert {s["name"] for s in json.loads(rec["candidates_skipped"])} >= {"rules", "decomposition", "trees"}
    assert "candidate tacos" in summary_line({**problem_fields(p), **rec, "solver": "greedy_plus"})
    ar, _ = solve_and_verify(Problem(named_topology("torus4x4"), Collective("all_reduce", 1, 16.0)), "greedy_plus")
    assert ar["candidate"].startswith("rs:") and " ag:" in ar["candidate"]
    cp, _ = solve_and_verify(Problem(ring(4), Collective("all_gather", 1, 4.0)), "ring")
    assert cp["candidate"] is None


def test_a_candidate_from_outside_the_repo_through_run_py(tmp_path):
    """The README's example, copied outside the repository, by import path from the command line."""
    import shutil
    import subprocess

    from cli import ROOT as REPO

    shutil.copy(REPO / "examples" / "my_candidate.py", tmp_path / "my_candidate.py")
    shutil.copy(REPO / "examples" / "my_priority.py", tmp_path / "my_priority.py")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(REPO / "run.py"), "solver=greedy", "topo=named",
                           "topo.name=random12d3s1", "solver.candidates=[rules,my_candidate:ManySeeds]",
                           "solver.chunk_order=my_priority:rarest_then_lowest_id",
                           f"hydra.run.dir={out}"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((out / "result.json").read_text())
    names = {t["name"] for t in json.loads(rec["candidates_tried"])}
    assert rec["valid"] and "rules" in names and names <= {"rules", "many_seeds"} and rec["candidate"] in names
    assert rec["p_solver_chunk_order"] == "my_priority:rarest_then_lowest_id"
