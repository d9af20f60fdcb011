"""Words a paper can use (issue 34, Words): a status and stop reason only for the collective asked for, the time
limit named when it ended a search, refusals that point only to backends that take the problem, the time limit
warning only where it applies, and a record whose fields say what the README says."""

from __future__ import annotations

import logging

import pytest

from tacos_bench import Collective, Problem
from tacos_bench.errors import SolverError
from tacos_bench.runner.stages import solve_and_verify
from tacos_bench.topology.generators import ring
from tacos_bench.topology.named import named_topology


def test_a_composed_all_reduce_is_never_proved_by_its_phases():
    # ring(4): each phase's optimum composes to x1.333 the All-Reduce bound; the phases' searches proved their
    # own optima, which says nothing of the whole
    p = Problem(ring(4), Collective("all_reduce", 1, 64))
    rec, _ = solve_and_verify(p, "cpsat", {"warm_start": False, "time_limit_s": 20, "seed": 0})
    assert rec["valid"] and rec["ratio_to_bound"] > 1.3
    assert rec["status"] == "feasible" and rec["optimality_proof"] is None
    assert rec["stop_reason"] == "finished", rec["stop_reason"]
    from tacos_bench.runner.summary import summary_line

    line = summary_line({**rec, "solver": "cpsat", "topology": "ring4", "num_npus": 4, "collective": "all_reduce",
                         "chunks_per_npu": 1})
    assert "proved" not in line and "status feasible" in line, line


def test_a_copy_collective_keeps_its_proof():
    rec, _ = solve_and_verify(Problem(ring(4), Collective("all_gather", 1, 64)), "cpsat",
                              {"warm_start": False, "time_limit_s": 20, "seed": 0})
    assert rec["status"] == "optimal" and rec["stop_reason"] in ("proved", "bound_met")


def test_no_solution_names_the_time_limit():
    p = Problem(ring(8), Collective("all_gather", 2, 64))
    rec, sched = solve_and_verify(p, "milp", {"warm_start": False, "time_limit_s": 1e-6, "seed": 0})
    assert sched is None and rec["status"] == "no_solution" and rec["stop_reason"] == "time_limit"
    assert rec["error"].startswith("no schedule: the time limit (solver.time_limit_s=1e-06) ended the search "
                                   "before it found one"), rec["error"]
    assert "set solver.warm_start=true" in rec["error"] and "no_solution" not in rec["error"]


def test_refusals_name_only_backends_that_take_the_problem():
    import solvers

    p = Problem(named_topology("switched8_nvls"), Collective("all_gather", 1, 64))
    for name in ("nvls", "sharp", "milp", "bfs"):
        with pytest.raises(SolverError) as e:
            solvers.get_solver(name).check_supported(p)
        named = str(e.value).split("(solvers that take it: ")[1].rstrip(")").split(", ")
        assert named and not {"milp", "hier", "bfs", "nvls", "sharp"} & set(named), str(e.value)
        for other in named:   # every backend named takes it
            assert solvers.get_solver(other).refusal(p) is None
    # hier on a topology of one link tier refuses before it runs, and is then not suggested either
    mesh = Problem(named_topology("torus4x4"), Collective("all_gather", 1, 64))
    assert "one link speed tier" in solvers.get_solver("hier").refusal(mesh)
    with pytest.raises(SolverError) as e:
        solvers.get_solver("nvls").check_supported(mesh)
    assert "hier" not in str(e.value).split("solvers that take it")[1]


@pytest.mark.parametrize("options,collective,warned", [
    ({}, "all_gather", False),                         # no limit set: nothing to honour
    ({"time_limit_s": 5}, "all_to_all", False),        # refused: the run does not go ahead
    ({"time_limit_s": 5}, "all_gather", True),
])
def test_the_time_limit_warning_only_where_it_applies(caplog, options, collective, warned):
    p = Problem(ring(4), Collective(collective, 1, 64))
    with caplog.at_level(logging.WARNING):
        try:
            solve_and_verify(p, "ring", dict(options, seed=0))
        except SolverError:
            assert collective == "all_to_all"
    assert ("does not honour time_limit_s" in caplog.text) is warned


def test_solver_message_is_always_a_field(tmp_path):
    from tacos_bench.runner.pipeline import run_job
    from tacos_bench.runner.records import FIELDS

    rec = run_job({"solver": {"name": "ring"}, "topo": {"kind": "ring", "dims": [4]},
                   "collective": {"kind": "all_gather"}}, tmp_path)
    import json

    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert "solver_message" in on_disk and on_disk["solver_message"] is None and rec["valid"]
    assert any(f.name == "solver_message" for f in FIELDS)


def test_a_gather_whose_root_fails_is_an_error_in_the_record(tmp_path):
    from tacos_bench.runner.pipeline import run_job

    rec = run_job({"solver": {"name": "greedy"}, "topo": {"kind": "mesh", "dims": [3, 3]}, "seed": 0,
                   "collective": {"kind": "gather", "root": 0, "chunks_per_npu": 2, "buffer_mib": 1},
                   "fault": {"at_fraction": 0.5, "npus": [0]}}, tmp_path)
    assert rec["status"] == "error" and rec["valid"] is False
    assert "NPU 0, the gather's root, fails" in rec["error"]


def test_a_repair_bound_is_at_least_the_healthy_bound_on_a_fabric(tmp_path):
    from tacos_bench.runner.pipeline import run_job

    rec = run_job({"solver": {"name": "greedy"}, "topo": {"kind": "named", "name": "switched8"}, "seed": 0,
                   "collective": {"kind": "all_gather", "chunks_per_npu": 1, "buffer_mib": 1},
                   "fault": {"at_fraction": 0.5, "links": [[0, 8]]}}, tmp_path)
    assert rec["valid"], rec.get("error")
    assert rec["repair_bound_us"] >= rec["lower_bound_us"] * (1 - 1e-12)
    assert rec["collective_time_us"] >= rec["repair_bound_us"] * (1 - 1e-9)
