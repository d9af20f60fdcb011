"""The schedule object and its CSV form (the public contract: columns, order, parsing errors)."""

import pytest

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import ScheduleError
from tacos_bench.topology.generators import ring

from tacos_bench.verify import check

HEADER = "chunk,src,dst,start_us,end_us,op\n"


def _write(tmp_path, text, name="s.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_schedule_csv_exact_columns_and_round_trip(tmp_path):
    s = Schedule.from_rows([(1, 1, 0, 0.1, 0.30000000000000004, "reduce"), (0, 0, 1, 0.0, 1 / 3, "copy")])
    path = s.to_csv(tmp_path / "s.csv")
    assert path.read_text().splitlines()[0] == "chunk,src,dst,start_us,end_us,op"
    back = Schedule.from_csv(path)
    assert back.end_us.tolist() == s.sorted().end_us.tolist()  # bit-exact floats
    assert back.op.tolist() == [0, 1]


def test_schedule_csv_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("chunk,src,dst,start,end,op\n0,0,1,0,1,copy\n")
    with pytest.raises(ScheduleError, match="header must be exactly"):
        Schedule.from_csv(bad)
    bad.write_text("chunk,src,dst,start_us,end_us,op\n0,0,1,0,1,send\n")
    with pytest.raises(ScheduleError, match="op must be copy or reduce"):
        Schedule.from_csv(bad)
    with pytest.raises(ScheduleError, match="no such schedule file"):
        Schedule.from_csv(tmp_path / "none.csv")


def test_time_reversal_is_an_involution():
    s = Schedule.from_rows([(0, 0, 1, 0.0, 2.0, "copy"), (0, 1, 2, 2.0, 3.0, "copy")])
    back = s.time_reversed().time_reversed()
    assert back.sorted().start_us.tolist() == s.sorted().start_us.tolist()
    assert back.sorted().src.tolist() == s.sorted().src.tolist()


def test_from_csv_edge_cases(tmp_path):
    with pytest.raises(ScheduleError, match="no such schedule file"):
        Schedule.from_csv(tmp_path / "missing.csv")
    with pytest.raises(ScheduleError, match="cannot parse"):
        Schedule.from_csv(_write(tmp_path, ""))
    assert len(Schedule.from_csv(_write(tmp_path, HEADER))) == 0
    with pytest.raises(ScheduleError, match="header must be exactly"):
        Schedule.from_csv(_write(tmp_path, "chunk,src,dst,start_us,end_us,op,note\n0,0,1,0,1,copy,x\n"))
    with pytest.raises(ScheduleError, match="header must be exactly"):
        Schedule.from_csv(_write(tmp_path, "src,chunk,dst,start_us,end_us,op\n0,0,1,0,1,copy\n"))
    with pytest.raises(ScheduleError, match="op must be copy or reduce"):
        Schedule.from_csv(_write(tmp_path, HEADER + "0,0,1,0,1,move\n"))
    with pytest.raises(ScheduleError, match="non-numeric|integer"):
        Schedule.from_csv(_write(tmp_path, HEADER + "a,0,1,0,1,copy\n"))
    # ops are case/space tolerant
    s = Schedule.from_csv(_write(tmp_path, HEADER + "0,0,1,0,1, Reduce\n"))
    assert s.op.tolist() == [1]


@pytest.mark.parametrize("row", ["0,0,1,nan,20.03125,copy", "0,0,1,0,,copy", "0,0,1,0,inf,copy"])
def test_non_finite_times_are_rejected_by_the_verifier(tmp_path, row):
    p = Problem(ring(3, bidirectional=False), Collective("all_gather", 1, 3))
    v = check(p, Schedule.from_csv(_write(tmp_path, HEADER + row + "\n")))
    assert not v.valid and "times must be finite" in v.message


def test_from_csv_rejects_rows_longer_than_the_header(tmp_path):
    # read as chunk=0 src=1 dst=2 start=3 end=4 op=copy (the leading 9 vanishes)
    with pytest.raises(ScheduleError):
        Schedule.from_csv(_write(tmp_path, HEADER + "9,0,1,2,3,4,copy\n"))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's NaN->int cast warning, part of the bug
@pytest.mark.parametrize("rows,line", [
    ("0,0,1,0,1,copy\n,0,1,0,1,copy\n", 3),        # blank chunk
    ("1.5,0,1,0,1,copy\n", 2),                      # fractional chunk
    ("0,0,True,0,1,copy\n", 2),                     # boolean id
    ("99999999999999999999,0,1,0,1,copy\n", 2),     # beyond int64: OverflowError today
])
def test_from_csv_rejects_non_integer_ids(tmp_path, rows, line):
    # the message names the file line (the header is line 1)
    with pytest.raises(ScheduleError, match=rf"^line {line}: "):
        Schedule.from_csv(_write(tmp_path, HEADER + rows))
