"""Declared statistics (solvers/stats.py): every backend's run reports only what its ``Stats`` declares.

The conftest sets ``TACOS_STRICT_STATS=1``, so ``Solver.solve`` raises on an undeclared statistic or a wrong type:
the sweep below only has to make every backend report what it can (every collective it claims, a switched fabric
where it has one, the exact models cold and warm) on problems small enough to stay within a few seconds.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from solvers import available_solvers, get_solver
from solvers.base import CAP_EXACT, CAP_FABRIC, CAP_FABRIC_ONLY, Solver, SolveResult
from solvers.stats import STRICT_ENV, Stat, StatsSchema, family_markdown
from tacos_bench import Collective, Problem
from tacos_bench.errors import SolverError
from tacos_bench.topology import Topology
from tacos_bench.topology.fabrics import leaf_spine, switched
from tacos_bench.topology.generators import hetero_cluster, ring

P2P = hetero_cluster(2, 1, 2)       # 4 NPUs, two link tiers (hier needs them)
ONE = Topology.from_edges(1, [], name="one")
FABRIC = {"nvls": switched(4, multicast=True, reduce=True),
          "sharp": leaf_spine(2, 2, leaf_multicast=True, leaf_reduce=True, spine_multicast=True, spine_reduce=True)}
EXACT = {"time_limit_s": 5}
# the exact runs beyond the default that reach other code: no warm start (the model is built and searched), the
# continuous-time model, a fixed horizon below the optimum, and MILP's CBC
EXACT_VARIANTS = {"cpsat": ({"warm_start": False}, {"warm_start": False, "model": "continuous"},
                            {"model": "continuous"}, {"warm_start": False, "model": "interval"},
                            {"horizon_steps": 1, "warm_start": False}),
                  "milp": ({"warm_start": False}, {"warm_start": False, "backend": "cbc"})}
EXACT_VARIANT_KINDS = ("all_gather", "all_reduce", "all_to_all")


def _cases():
    for name in available_solvers():
        cls = get_solver(name)
        if CAP_FABRIC_ONLY in cls.capabilities:
            yield pytest.param(name, "fabric", None, {}, id=f"{name}-fabric")
            continue
        for kind in cls.supported_kinds():
            yield pytest.param(name, "p2p", kind, {}, id=f"{name}-{kind}")
            if kind in EXACT_VARIANT_KINDS:
                for i, opts in enumerate(EXACT_VARIANTS.get(name, ())):
                    yield pytest.param(name, "p2p", kind, opts, id=f"{name}-{kind}-{i}")
        if CAP_FABRIC in cls.capabilities:
            yield pytest.param(name, "fabric", None, {}, id=f"{name}-fabric")
        yield pytest.param(name, "one", None, {}, id=f"{name}-one-npu")


@pytest.mark.parametrize("name,where,kind,opts", list(_cases()))
def test_every_reported_statistic_is_declared(name, where, kind, opts):
    solver = get_solver(name)
    assert solver.Stats is not None, f"{name} declares no statistics (Stats = None)"
    kind = kind or ("all_reduce" if solver.supports("all_reduce") else solver.supported_kinds()[0])
    if where == "fabric" and name not in FABRIC:
        kind = next(k for k in ("all_gather", "broadcast", "all_reduce", "all_to_all") if solver.supports(k))
    topo = {"p2p": P2P, "one": ONE}.get(where) or FABRIC.get(name, switched(4))
    p = Problem(topo, Collective(kind, chunks_per_npu=1, buffer_mib=1))
    more = {**EXACT, **opts} if CAP_EXACT in solver.capabilities else {}
    res = solver.solve(p, seed=0, **more)       # strict: raises on an undeclared statistic
    assert not solver.Stats.undeclared(res.stats)
    assert res.stats or name == "bfs" and where == "one"


def test_the_continuous_models_declare_what_cpsat_copies():
    # cpsat copies these under continuous_ / fabric_; a hint and a forced search reach what its runs rarely do
    # (the greedy warm start mostly meets the bound first)
    from solvers.exact.continuous import solve_continuous
    from solvers.exact.fabric import solve_fabric
    from solvers.exact.stats import CONTINUOUS_MODEL, FABRIC_MODEL

    p = Problem(ring(4), Collective("all_gather", 1, 1))
    out = solve_continuous(p, time_limit_s=5, num_workers=2, hint=get_solver("greedy").solve(p).schedule,
                           skip_search_at_bound=False)
    assert not CONTINUOUS_MODEL.undeclared(out.stats) and {"hint_us", "drain_cut_units"} <= set(out.stats)
    f = Problem(switched(4), Collective("all_gather", 1, 1))
    out = solve_fabric(f, time_limit_s=5, num_workers=2, hint=get_solver("greedy").solve(f).schedule,
                       skip_search_at_bound=False, formulation="time_indexed")
    assert not FABRIC_MODEL.undeclared(out.stats)
    assert {"hint_us", "hint_units", "time_indexed_bools", "branches"} <= set(out.stats)


# ------------------------------------------------------------------------------------------------- the schema
SCHEMA = StatsSchema(Stat("events", int, "", "events processed"), Stat("share", float, "", "a fraction"),
                     Stat("engine", str, "", "the kernel"), Stat("ok", bool, "", "a flag"),
                     Stat("makespans_us", list, "µs", "every run's makespan"),
                     patterns=(Stat("warm_steps_*", int, "steps", "a warm rule's makespan"),), phases=("rs", "ag"))


def test_undeclared_names_are_reported():
    assert SCHEMA.undeclared({"events": 1, "draws": 2, "rs_draws": 3}) == ["draws", "rs_draws"]
    assert SCHEMA.undeclared({}) == []


def test_types_are_checked_numpy_scalars_and_null_accepted():
    ok = {"events": np.int64(3), "share": 1, "engine": "scale", "ok": np.bool_(True), "makespans_us": [1.0, 2.0],
          "warm_steps_greedy": 4}
    assert SCHEMA.undeclared(ok) == []
    assert SCHEMA.undeclared({k: None for k in ok}) == []
    assert SCHEMA.undeclared({"share": np.float32(0.5), "events": np.int32(1)}) == []
    bad = SCHEMA.undeclared({"events": "three", "ok": 1, "engine": 2, "share": "x", "warm_steps_x": 1.5})
    assert bad == ["events: str, declared int", "ok: int, declared bool", "engine: int, declared str",
                   "share: str, declared float", "warm_steps_x: float, declared int"]
    # a bool is not an int, and a float is not an int
    assert SCHEMA.undeclared({"events": True, "share": False}) == ["events: bool, declared int",
                                                                  "share: bool, declared float"]
    assert SCHEMA.undeclared({"events": 2.0}) == ["events: float, declared int"]


def test_phase_prefixes_and_patterns():
    assert SCHEMA.lookup("rs_events") is SCHEMA.lookup("ag_events") is SCHEMA.stats["events"]
    assert SCHEMA.lookup("p0_events") is None         # not a declared phase
    assert SCHEMA.lookup("rs_ag_events") is None      # one phase prefix only
    assert SCHEMA.lookup("ag_warm_steps_greedy").name == "warm_steps_*"
    assert SCHEMA.undeclared({"ag_events": "x"}) == ["ag_events: str, declared int"]
    assert StatsSchema(Stat("events", int, "", "")).lookup("rs_events") is None   # no phases declared


def test_include_and_renamed():
    inner = StatsSchema(Stat("intervals", int, "", "optional intervals"))
    outer = StatsSchema(Stat("events", int, "", "events"), include=(SCHEMA, inner.renamed("continuous_", "model: ")))
    assert outer.lookup("continuous_intervals").doc == "model: optional intervals"
    assert outer.lookup("intervals") is None and outer.lookup("warm_steps_x") is not None
    assert outer.phases == ()


def test_strict_raises_otherwise_warns_once(monkeypatch, caplog):
    with pytest.raises(SolverError, match=r"solver 'x' reported undeclared statistics: draws \(declare them"):
        SCHEMA.check({"draws": 1}, "x")
    monkeypatch.delenv(STRICT_ENV)
    with caplog.at_level(logging.WARNING, logger="solvers.stats"):
        SCHEMA.check({"draws_once": 1}, "x")
        SCHEMA.check({"draws_once": 2}, "x")
    assert [r.getMessage() for r in caplog.records].count(
        "solver 'x' reported undeclared statistics: draws_once (declare them in its Stats)") == 1


def test_solve_checks_the_backend_statistics():
    class Noisy(Solver):
        name = "noisy"
        capabilities = frozenset({"all_gather"})
        Stats = StatsSchema(Stat("events", int, "", ""))

        def _solve(self, problem, opts):
            return SolveResult("feasible", None, stats={"events": 1, "stray": 2})

    with pytest.raises(SolverError, match="'noisy' reported undeclared statistics: stray"):
        Noisy().solve(Problem(ring(3), Collective("all_gather")))


def test_markdown_tables():
    text = SCHEMA.markdown()
    assert text.splitlines()[:2] == ["| record field | type | unit | meaning |", "|---|---|---|---|"]
    assert "| `s_events` | int |  | events processed |" in text and "| `s_warm_steps_*` | int | steps |" in text
    assert text.splitlines()[-1].startswith("| `s_<phase>_<stat>` |") and "(rs, ag)" in text
    fam = family_markdown({"a": SCHEMA, "b": StatsSchema(Stat("events", int, "", "events processed"))})
    assert "| `s_events` | int |  | all | events processed |" in fam
    assert "| `s_engine` | str |  | a | the kernel |" in fam
