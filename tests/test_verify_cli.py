"""``python -m tacos_bench.verify RUN_DIR [--schedule CSV]``: a run's schedule (or an edited one) re-checked
against the problem rebuilt from the run directory; one line and exit 2 for an invalid one."""

from __future__ import annotations

from cli import run_in_process, run_module
from tacos_bench.schedule import Schedule
from tacos_bench.verify.__main__ import main


def test_run_schedule_verifies_and_edited_ones_are_one_line_errors(tmp_path, capsys):
    rec = run_in_process(tmp_path / "run", solver="greedy", topo="switched8", collective="all_gather")
    run = tmp_path / "run"
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("valid:") and repr(rec["collective_time_us"]) in out
    s = Schedule.from_csv(run / "schedule.csv")
    # a route through a link the fabric does not have (NPU 0 -> NPU 3 directly, no switch)
    routes = s.route.copy()
    routes[0] = f"{int(s.src[0])}>{int(s.dst[0])}"
    bad = Schedule(s.chunk, s.src, s.dst, s.start_us, s.end_us, s.op, route=list(routes))
    bad.to_csv(tmp_path / "bad.csv")
    assert main([str(run), "--schedule", str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "bad.csv" in err[0]
    # a transfer started before its sender holds the chunk
    late = Schedule(s.chunk, s.src, s.dst, s.start_us - s.start_us.max(), s.end_us - s.start_us.max(), s.op,
                    route=list(s.route))
    late.to_csv(tmp_path / "early.csv")
    assert main([str(run), "--schedule", str(tmp_path / "early.csv")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_fault_run_is_replayed_with_its_failed_links(tmp_path, capsys):
    from tacos_bench.runner.pipeline import run_job

    cfg = {"solver": {"name": "greedy"}, "topo": {"name": "mesh4x4", "kind": "named"}, "seed": 0,
           "collective": {"kind": "all_gather", "chunks_per_npu": 1, "buffer_mib": 1},
           "fault": {"at_fraction": 0.5, "links": [[5, 6, "both"]]}}
    rec = run_job(cfg, tmp_path)
    assert rec["valid"] and rec["fault_failed_links"] == [[5, 6], [6, 5]]
    assert main([str(tmp_path)]) == 0
    assert repr(rec["collective_time_us"]) in capsys.readouterr().out


def test_cli_exit_code_and_one_line(tmp_path):
    r = run_module("tacos_bench.verify", tmp_path / "missing")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1



def test_messages_name_the_file_line_of_a_schedule_read_from_a_file(tmp_path, capsys):
    # row k of a CSV is on line k + 2 (the header is line 1), and a blank line moves the rows after it down; a
    # schedule built in memory is still named by its row index
    from tacos_bench.rundir import load_run_problem
    from tacos_bench.verify import check

    run_in_process(tmp_path / "run", solver="greedy", topo="mesh4x4", collective="all_gather")
    run = tmp_path / "run"
    lines = (run / "schedule.csv").read_text().splitlines()
    k = 40
    fields = lines[k + 1].split(",")
    fields[2] = fields[1]                      # row 40 now sends from an NPU to itself: no such link
    lines[k + 1] = ",".join(fields)
    (tmp_path / "edited.csv").write_text("\n".join(lines) + "\n")
    assert main([str(run), "--schedule", str(tmp_path / "edited.csv")]) == 2
    err = capsys.readouterr().err
    assert f"edited.csv: line {k + 2} (chunk {fields[0]}, {fields[1]}->{fields[1]}, " in err, err
    assert f"unknown link {fields[1]}->{fields[1]}" in err and "row" not in err.split("edited.csv: ")[1], err
    blank = lines[:5] + [""] + lines[5:]
    (tmp_path / "blank.csv").write_text("\n".join(blank) + "\n")
    assert main([str(run), "--schedule", str(tmp_path / "blank.csv")]) == 2
    assert f"blank.csv: line {k + 3} (chunk {fields[0]}," in capsys.readouterr().err
    s = Schedule.from_csv(tmp_path / "edited.csv")
    in_memory = Schedule(s.chunk, s.src, s.dst, s.start_us, s.end_us, s.op)
    assert check(load_run_problem(run)[0], in_memory).message.startswith(f"row {k} (chunk {fields[0]},")
