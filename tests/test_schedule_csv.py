"""``schedule.csv`` is a public contract: the standard-library writer of small schedules and pandas' writer of
large ones must write the same bytes, and what they write reads back to the same schedule."""

from __future__ import annotations

import numpy as np
import pytest

from tacos_bench.schedule import Schedule

VALUES = [0.0, 0.5, 1.0, 1e-05, 1.0000000000000002, 10004.000000000002, 12345678.9, 1e16, 3.0e-320, 2.5e300,
          0.1 + 0.2, 5.0e-324]


def _schedule(n: int, seed: int, routes: bool) -> Schedule:
    rng = np.random.default_rng(seed)
    start = rng.choice(VALUES, n) + rng.random(n) * rng.choice([0, 1, 1e-9, 1e6], n)
    end = start + rng.choice(VALUES, n)
    route = None
    if routes:
        route = np.array(["" if rng.random() < 0.3 else f"{rng.integers(9)}>{8 + rng.integers(3)}>{rng.integers(9)}"
                          for _ in range(n)], dtype=object)
    return Schedule(rng.integers(0, 2**40, n), rng.integers(0, 9, n), rng.integers(0, 9, n), start, end,
                    rng.integers(0, 2, n), route=route)


@pytest.mark.parametrize("routes", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plain_writer_writes_pandas_bytes(tmp_path, seed, routes):
    s = _schedule(500, seed, routes)
    plain = s.to_csv(tmp_path / "plain.csv").read_bytes()
    s.sorted().to_frame().to_csv(tmp_path / "pandas.csv", index=False)
    assert plain == (tmp_path / "pandas.csv").read_bytes()
    back = Schedule.from_csv(tmp_path / "plain.csv")
    t = s.sorted()
    assert np.array_equal(back.start_us, t.start_us) and np.array_equal(back.end_us, t.end_us)
    assert np.array_equal(back.chunk, t.chunk) and np.array_equal(back.op, t.op)
    assert (back.route is None) == (not routes)


def test_empty_schedule_writes_the_header(tmp_path):
    s = Schedule.empty()
    s.to_csv(tmp_path / "e.csv")
    s.to_frame().to_csv(tmp_path / "p.csv", index=False)
    assert (tmp_path / "e.csv").read_bytes() == (tmp_path / "p.csv").read_bytes()
