"""The input fuzz of issue 34 at small size (experiments/fuzz_inputs.py runs it in full, through run.py): every
fixed case in process (run_job, a SIGALRM as the hang detector) and a few seeded mutations; 0 hangs, 0 tracebacks,
0 wrong accepts. The cases only the command line has (Hydra's unknown keys, a run directory that cannot be created)
run through run.py in tests/test_run.py and tests/test_sweep_salvage.py."""

from __future__ import annotations

import sys

from cli import ROOT

sys.path.insert(0, str(ROOT / "experiments"))
import fuzz_inputs as fz  # noqa: E402


def _check(outcomes):
    bad = [f"{o.name}: {o.kind} {o.problems} {o.stderr.strip()[:200]}" for o in outcomes if o.kind != "ok"]
    assert not bad, "\n".join(bad)
    assert fz.report(outcomes).split(" (")[0].endswith("hangs=0 tracebacks=0 wrong_accepts=0")


def test_every_fixed_case_in_process():
    cases = [c for c in fz.fixed_cases() if not c.cli_only and not c.slow]
    names = {c.name for c in cases}
    # the inputs the issue names are all there
    assert {"dev_zero", "fifo", "chunks_1e9", "lat_1e308_one", "lat_1e308_every", "json_nested", "bom_edge_list",
            "json_duplicate_key", "gather_root_fails", "unknown_solver_option"} <= names
    outcomes = fz.fuzz(cases, in_process=True, timeout=20, log=lambda _: None)
    _check(outcomes)
    assert sum(o.code == 2 for o in outcomes) >= 30 and sum(o.code == 0 for o in outcomes) >= 4


def test_seeded_mutations_in_process():
    cases = fz.mutation_cases(16, seed=3)
    assert [c.files for c in cases] == [c.files for c in fz.mutation_cases(16, seed=3)]   # from the seed
    _check(fz.fuzz(cases, in_process=True, timeout=20, log=lambda _: None))


def test_a_wrong_accept_is_caught(tmp_path):
    """The judge itself: a case that must be refused and exits 0 counts as a wrong accept, and so does a run
    whose schedule no longer replays."""
    ok = fz.Case("must_refuse_but_accepted", expect=fz.REFUSE)
    out = fz.fuzz([ok], in_process=True, timeout=20, log=lambda _: None)[0]
    assert out.kind == "wrong_accept"
    cfg, run_dir = fz._materialize(fz.Case("x"), tmp_path)
    from tacos_bench.runner.pipeline import run_job

    run_job(cfg, run_dir)
    csv = run_dir / "schedule.csv"
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join(lines[:-3]) + "\n")   # drop transfers: the postcondition fails
    assert fz._reverify(run_dir).startswith("the replay rejects it")
