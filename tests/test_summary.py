"""The summary line and the record fields behind it let a user judge a run without reading the docs
(issue 19, item 6): an All-Reduce shows its phase bounds beside the All-Reduce bound, float noise in a gap is 0,
a repair that beats the healthy schedule says why, and the backends' own defaults (time limits included) are
shown by ``solvers.describe`` and ``run.py --help``."""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from cli import run_py_help, run_module, run_py
from solvers.base import available_solvers, solver_class
from solvers.describe import describe, summary_paragraph
from tacos_bench import Collective, Problem
from tacos_bench.runner import conf, run_job, solve_and_verify, summary_line
from tacos_bench.runner.records import FIELD, is_declared
from tacos_bench.runner.stages import OPTIMAL_REL_TOL, gap_fields
from tacos_bench.runner.summary import phases_note, repair_note
from tacos_bench.topology.generators import mesh2d, ring, torus2d

PHASE_FIELDS = ("rs_lower_bound_us", "rs_lower_bound_source", "ag_lower_bound_us", "ag_lower_bound_source",
                "phases_bound_sum_us")


def _named(rec, **names):
    rec.update({"solver": "greedy", "topology": "t", "num_npus": 16, "chunks_per_npu": 1, "collective": "x"}, **names)
    return rec


# --- All-Reduce: the phase bounds beside the All-Reduce bound ----------------------------------------------------

def test_all_reduce_records_its_phase_bounds_and_their_sum(tmp_path):
    # ring(4): each phase needs 3 link times of 52.4 µs (157.25 µs); the All-Reduce bound (gossip) is 4.5 of them,
    # below the sum: the sum is no All-Reduce bound (docs/bounds.md), the greedy's RS then AG reaches it exactly.
    rec = run_job({"solver": {"name": "greedy"}, "topo": {"name": "ring4", "kind": "ring", "dims": [4]},
                   "collective": {"kind": "all_reduce", "buffer_mib": 16, "overlap": False}, "seed": 0}, tmp_path)
    assert rec["rs_lower_bound_us"] == pytest.approx(157.25) and rec["ag_lower_bound_us"] == pytest.approx(157.25)
    assert rec["phases_bound_sum_us"] == pytest.approx(rec["rs_lower_bound_us"] + rec["ag_lower_bound_us"])
    assert rec["lower_bound_us"] == pytest.approx(235.875) and rec["lower_bound_us"] < rec["phases_bound_sum_us"]
    assert rec["collective_time_us"] == pytest.approx(rec["phases_bound_sum_us"])
    assert all(is_declared(k) for k in PHASE_FIELDS) and set(PHASE_FIELDS) <= set(rec)
    line = summary_line(rec)
    assert "lower bound 235.875 µs (ingress, x1.333; the bound to read the time against)" in line
    # with a barrier, T = T_RS + T_AG at the sum of the phase bounds puts each phase at its bound
    assert "phase bounds RS 157.250 + AG 157.250 = 314.500 µs (x1.000: each phase at its bound;" in line
    assert "the sum is no All-Reduce bound" in line


@pytest.mark.parametrize("topo", [mesh2d(4, 4), torus2d(4, 4)])
def test_each_phase_bound_is_at_most_the_all_reduce_bound(topo):
    # docs/bounds.md: best_us >= max(RS bound, AG bound) for All-Reduce; a phase bound above it would be wrong
    rec, _ = solve_and_verify(Problem(topo, Collective("all_reduce", 1, 16)), "bfs", {})
    assert max(rec["rs_lower_bound_us"], rec["ag_lower_bound_us"]) <= rec["lower_bound_us"] * (1 + 1e-12)
    # overlapped phases: "each phase at its bound" would be an inference the time cannot support
    assert "each phase at its bound" not in summary_line(_named(rec, collective="all_reduce"))


def test_other_collectives_have_no_phase_bounds():
    rec, _ = solve_and_verify(Problem(ring(4), Collective("all_gather", 1, 16)), "greedy", {"seed": 0})
    assert not set(PHASE_FIELDS) & set(rec)
    assert "phase bounds" not in summary_line(_named(rec))


def test_failing_phase_bounds_are_recorded_and_the_run_goes_on(monkeypatch):
    import tacos_bench.bounds as bounds

    real = bounds.lower_bounds

    def fail_on_phases(problem, **kw):
        if problem.kind != "all_reduce":
            raise RuntimeError("phase boom")
        return real(problem, **kw)

    monkeypatch.setattr(bounds, "lower_bounds", fail_on_phases)
    rec, _ = solve_and_verify(Problem(ring(4), Collective("all_reduce", 1, 16)), "greedy", {"seed": 0})
    assert rec["valid"] and rec["lower_bound_us"] == pytest.approx(235.875)
    assert "phase boom" in rec["bounds_error"] and rec["phases_bound_sum_us"] is None
    assert "phase bounds" not in summary_line(_named(rec, collective="all_reduce"))


@pytest.mark.parametrize("T, overlap, expect", [
    (200.0, True, "(x1.000; the sum is no All-Reduce bound, but no Reduce-Scatter then All-Gather after a barrier"),
    (200.0 * (1 + 1e-12), False, "(x1.000: each phase at its bound;"),
    (250.0, False, "(x1.250; the sum is no All-Reduce bound"),
    (150.0, True, "(x0.750: below the sum, as phases that overlap can be; the sum is no All-Reduce bound)"),
])
def test_phases_note_reads_the_time_against_the_sum(T, overlap, expect):
    note = phases_note({"collective_time_us": T, "overlap": overlap, "rs_lower_bound_us": 120.0,
                        "ag_lower_bound_us": 80.0, "phases_bound_sum_us": 200.0})
    assert note.startswith("phase bounds RS 120.000 + AG 80.000 = 200.000 µs ") and expect in note


# --- gaps within float noise are 0 -------------------------------------------------------------------------------

@pytest.mark.parametrize("T, lb", [(1.0 - 2.22e-16, 1.0), (1335.083333333333, 1335.0833332586335),
                                   (1.0 + 0.5 * OPTIMAL_REL_TOL, 1.0), (1.0 - 0.5 * OPTIMAL_REL_TOL, 1.0)])
def test_gap_within_float_noise_is_zero(T, lb):
    f = gap_fields(T, lb)
    # exactly zero, not a signed noise that prints as -2.22e-16 (or 5.6e-11, as the drain bound gave)
    assert f["gap"] == f["gap_to_bound"] == 0.0 and str(f["gap"]) == "0.0" and f["ratio_to_bound"] == 1.0


@pytest.mark.parametrize("T, lb", [(1.5, 1.0), (1.0 + 10 * OPTIMAL_REL_TOL, 1.0), (0.9, 1.0)])
def test_gap_beyond_float_noise_is_kept(T, lb):
    # a real gap stays, and so does a clearly negative one: it means a wrong bound and must stay visible
    f = gap_fields(T, lb)
    assert f["gap"] == f["gap_to_bound"] == T / lb - 1 and f["ratio_to_bound"] == T / lb


def test_a_run_at_its_bound_records_gap_zero_not_noise(monkeypatch):
    # a bound that sums the link times in another order than the verifier, a rounding above the verified time
    import tacos_bench.bounds as bounds

    real = bounds.lower_bounds

    def nudged(problem, **kw):
        b = real(problem, **kw)
        b["best_us"] *= 1 + 2.22e-16
        return b

    monkeypatch.setattr(bounds, "lower_bounds", nudged)
    rec, _ = solve_and_verify(Problem(mesh2d(4, 4), Collective("all_gather", 1, 16)), "greedy", {"seed": 0})
    assert rec["collective_time_us"] < rec["lower_bound_us"]  # the noise is there ...
    assert rec["gap"] == 0.0 and rec["ratio_to_bound"] == 1.0 and rec["status"] == "optimal"  # ... not in the record
    assert "x1.000" in summary_line(_named(rec))


# --- a repair that beats the healthy schedule says why ------------------------------------------------------------

HETERO_128 = {"name": "hetero2x8x8", "kind": "hetero", "dims": [2, 8, 8],
              "params": {"intra_bw": 150.0, "intra_lat": 0.25, "inter_bw": 25.0, "inter_lat": 2.0}}


def test_repair_faster_than_healthy_says_why(tmp_path):
    rec = run_job({"solver": {"name": "greedy"}, "topo": HETERO_128, "collective": {"kind": "all_gather"},
                   "seed": 0, "fault": {"at_fraction": 0.5, "random_links": 2}}, tmp_path)
    assert rec["valid"], rec["error"]
    # the case this test is about (3145.0 vs 3197.3 µs when written); if the greedy changed, pick another seed
    assert rec["repaired_time_us"] < rec["healthy_time_us"], (rec["repaired_time_us"], rec["healthy_time_us"])
    line = summary_line(rec)
    note = rec.get("repair_note") or repair_note(rec)
    assert note and note in line
    ratio = rec["healthy_time_us"] / rec["lower_bound_us"]
    assert re.search(r"faster than the healthy schedule \(x0\.\d{3}\) because that schedule, "
                     rf"x{ratio:.3f} its lower bound, was not optimal: the repair re-planned the whole remainder", line)
    assert f"from scratch {rec['scratch_time_us']:.3f} µs in {rec['scratch_synthesis_time_s']:.3f} s" in line


@pytest.mark.parametrize("rec, expect", [
    ({"repaired_time_us": 10.0, "healthy_time_us": 10.0}, None),
    ({"repaired_time_us": 10.0 * (1 - 1e-12), "healthy_time_us": 10.0}, None),  # float noise is no speed-up
    ({"repaired_time_us": 12.0, "healthy_time_us": 10.0, "lower_bound_us": 8.0}, None),
    ({"repaired_time_us": 9.0, "healthy_time_us": 10.0, "lower_bound_us": 8.0, "scratch_time_us": 9.5},
     "faster than the healthy schedule (x0.900) because that schedule, x1.250 its lower bound, was not optimal: the "
     "repair re-planned the whole remainder from the state at the fault, and that plan beat the healthy schedule's "
     "own remainder (from scratch on the surviving links is faster too)"),
    ({"repaired_time_us": 9.0, "healthy_time_us": 10.0, "scratch_time_us": 11.0},
     "faster than the healthy schedule (x0.900) because that schedule was not optimal: the repair re-planned the "
     "whole remainder from the state at the fault, and that plan beat the healthy schedule's own remainder"),
    # failed NPUs need nothing: a healthy schedule at its bound can be beaten without being suboptimal
    ({"repaired_time_us": 9.0, "healthy_time_us": 10.0, "lower_bound_us": 10.0, "fault_npus": [3]},
     "faster than the healthy schedule (x0.900) because the failed NPUs need nothing after the fault, so less data "
     "has to move"),
    ({"repaired_time_us": 9.0, "healthy_time_us": 10.0, "fault_npus": [3]},
     "faster than the healthy schedule (x0.900) because the failed NPUs need nothing after the fault, so less data "
     "has to move; and the repair re-planned the whole remainder from the state at the fault, and that plan may have "
     "beaten the healthy schedule's own remainder"),
])
def test_repair_note_gives_only_the_reasons_that_hold(rec, expect):
    assert repair_note(rec) == expect


def test_repair_note_is_a_declared_fault_field():
    assert FIELD["repair_note"].stage == "fault"


# --- every backend's own defaults: solvers.describe and run.py --help --------------------------------------------

@pytest.mark.parametrize("name", available_solvers())
def test_describe_opens_with_whole_sentences(name):
    para = summary_paragraph(name)
    assert para.endswith((".", ")")), para  # milp's used to end on "the reducing ones by"
    assert ":class:" not in para and ":func:" not in para and "``" not in para and ">>>" not in para
    first = describe(name).split("\n\n")[1]
    assert first == para


def test_describe_milp_is_not_cut_and_shows_its_time_limit():
    r = run_module("solvers.describe", "milp")
    assert r.returncode == 0, r.stderr
    assert "the reducing ones by reversal) as a time-indexed MILP on the TEN." in r.stdout
    assert "Time limit: 600 s by default" in r.stdout and "| `time_limit_s` | float or null | 600.0 |" in r.stdout


@pytest.mark.parametrize("name", available_solvers())
def test_help_lists_each_backends_own_time_limit(name):
    text = conf.backend_defaults_help()
    entry = re.search(rf"^  {name} +(.*(?:\n {{6,}}.*)*)", text, re.M)
    assert entry, text
    body = " ".join(entry.group(1).split())
    default = solver_class(name).Options().time_limit_s
    assert body.startswith(f"time_limit_s: {'null' if default is None else default} (")
    if " except " not in body:  # no parent backend: every own option is listed with its default
        for f in dataclasses.fields(solver_class(name).Options):
            if f.name not in ("seed", "time_limit_s", "threads"):
                assert f"{f.name}: " in body, (f.name, body)
    assert all(len(ln) <= 110 for ln in text.splitlines())
    assert "$" not in text  # Hydra and OmegaConf would substitute it inside the help template


def test_help_lists_what_sets_greedy_plus_apart_from_greedy():
    text = " ".join(conf.backend_defaults_help().split())
    entry = text.split("greedy_plus ", 1)[1].split(" milp ")[0]
    assert "as greedy except" in entry
    plus, plain = solver_class("greedy_plus").Options(), solver_class("greedy").Options()
    # an option greedy does not have (relabel_tries) differs too
    differ = [f.name for f in dataclasses.fields(plus) if getattr(plus, f.name) != getattr(plain, f.name, None)]
    listed = set(re.findall(r"(?<![\w])(\w+): ", entry))
    assert differ and listed == set(differ) | {"time_limit_s"}, (listed, differ)


def test_run_help_shows_every_backends_defaults(root):
    r = run_py_help()
    assert r.returncode == 0, r.stderr
    assert "== Solver backends: their own defaults ==" in r.stdout
    for name in available_solvers():
        assert re.search(rf"^  {name} +time_limit_s: ", r.stdout, re.M), name
    assert re.search(r"^  milp +time_limit_s: 600\.0 \(honoured\)", r.stdout, re.M)
    assert re.search(r"^  cpsat +time_limit_s: 600\.0 \(honoured\)", r.stdout, re.M)
    assert "solver:" in r.stdout and "time_limit_s: null" in r.stdout  # Hydra's own sections are still there


def test_conf_names_only_modules_that_exist():
    # conf.py named a tacos_bench.repair module that never existed (the repair is solvers.repair)
    text = open(conf.__file__).read()
    named = set(re.findall(r"\b((?:tacos_bench|solvers)(?:\.\w+)+)", text))
    assert "solvers.repair" in named
    for dotted in sorted(named):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):  # a module, or a name inside one
            try:
                mod = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            obj = mod
            for attr in parts[i:]:
                obj = getattr(obj, attr, None)
            assert obj is not None, f"conf.py names {dotted}, which does not exist"
            break
        else:
            pytest.fail(f"conf.py names {dotted}, which does not exist")
