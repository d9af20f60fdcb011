"""The record schema (tacos_bench/runner/records.py): every field a run writes is declared, the README
documents the schema, and status/bounds/gap follow the evidence."""

import re

import pytest

from tacos_bench import Collective, Problem
from tacos_bench.topology.generators import mesh2d, ring, torus2d
from tacos_bench.runner import run_job, solve_and_verify
from tacos_bench.runner.records import FIELDS, is_declared, markdown_table


def cfg(**over):
    c = {"solver": {"name": "greedy"}, "topo": {"name": "t", "kind": "torus", "dims": [3, 3]},
         "collective": {"kind": "all_reduce", "chunks_per_npu": 1, "buffer_mib": 4.0}, "seed": 0}
    c.update(over)
    return c


@pytest.mark.parametrize("over", [{}, {"solver": {"name": "cpsat", "time_limit_s": 20}}, {"solver": {"name": "ring"}},
                                  {"solver": {"name": "nosuch"}}, {"topo": {"name": "x", "kind": "mesh", "dims": [0]}},
                                  {"solver": {"name": "greedy", "bogus": 1}}, {"export": "json"}])
def test_every_record_field_is_declared(tmp_path, over):
    rec = run_job(cfg(**over), tmp_path, choices={"solver": "x"}, extra={"job_num": 1, "job_name": "j",
                                                                         "override_dirname": ""})
    undeclared = sorted(k for k in rec if not is_declared(k))
    assert not undeclared, f"declare these in tacos_bench/runner/records.py: {undeclared}"


def test_readme_documents_the_record(root):
    readme = (root / "README.md").read_text()
    assert markdown_table() in readme, ("regenerate the README's record table: python -c 'from tacos_bench.runner.records import "
                                    "markdown_table; print(markdown_table())'")
    assert len({f.name for f in FIELDS}) == len(FIELDS)


def test_meeting_the_bound_is_optimal_whatever_the_backend():
    p = Problem(mesh2d(4, 4), Collective("all_gather", 1, 16))
    greedy, _ = solve_and_verify(p, "greedy", {"seed": 0})
    exact, _ = solve_and_verify(p, "cpsat", {"time_limit_s": 30})
    for rec in (greedy, exact):
        assert rec["status"] == "optimal" and rec["gap"] == pytest.approx(0.0)
    assert greedy["optimality_proof"] == "lower_bound" and greedy["solution_source"] == "heuristic"
    assert exact["optimality_proof"] in ("lower_bound", "solver")


def test_one_lower_bound_includes_the_solver_bound_and_one_gap():
    p = Problem(ring(4), Collective("all_reduce", 1, 4))
    rec, _ = solve_and_verify(p, "cpsat", {"time_limit_s": 30})
    assert rec["lower_bound_us"] >= (rec["best_bound_us"] or 0.0) - 1e-9
    assert rec["gap"] == pytest.approx(rec["collective_time_us"] / rec["lower_bound_us"] - 1)
    assert "solver_gap" not in rec


def test_time_limited_run_says_why_it_stopped():
    p = Problem(torus2d(6, 6), Collective("all_gather"))
    rec, _ = solve_and_verify(p, "cpsat", {"time_limit_s": 2, "warm_start": False})
    if rec["status"] != "optimal":
        assert rec["stop_reason"] == "time_limit"


def test_summary_line_names_what_decided_the_result():
    from tacos_bench.runner import summary_line

    p = Problem(torus2d(4, 4), Collective("all_gather"))
    rec, _ = solve_and_verify(p, "milp", {"time_limit_s": 60})
    rec.update(solver="milp", topology="torus4x4", collective="all_gather", num_npus=16, chunks_per_npu=1)
    line = summary_line(rec)
    assert "status optimal (" in line
    if rec["solution_source"] == "warm_start":
        assert "warm start" in line
    assert re.search(r"lower bound [\d.]+ µs \(\w+", line)
