"""Anytime traces: an exact backend's (or a restarting heuristic's) incumbent and bound over time.

A trace is a sequence of ``(time_s, incumbent_us, bound_us)`` rows in time order, ``time_s`` counted from the
start of ``solve()``, ``None`` where a value is not known yet (no incumbent, or a backend that reports no
bound). :func:`summarize` turns it into the record's summary columns, measured against the best known time
(the verified time of the returned schedule unless a better one is given); :func:`write_trace` writes
``anytime.csv`` in the run directory, which ``python -m tacos_bench.plots anytime SWEEP_DIR`` draws.

The primal integral (Berthold 2013) is the integral over the run of the primal gap
``p(t) = |incumbent(t) - best| / max(incumbent(t), best)`` (1 before the first incumbent), in seconds: it
rewards finding good schedules early, which a final gap alone cannot show.

Examples
--------
>>> tr = [(0.5, 12.0, 8.0), (2.0, 10.0, 10.0)]
>>> s = summarize(tr, best_us=10.0, total_s=3.0)
>>> s["time_to_final_incumbent_s"], s["time_to_1pct_s"], round(s["primal_integral"], 4)
(2.0, 2.0, 0.75)
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable, Sequence

ANYTIME_FILE = "anytime.csv"
COLUMNS = ("time_s", "incumbent_us", "bound_us")
WITHIN = 0.01


def _clean(trace: Iterable[Sequence]) -> list[tuple[float, float | None, float | None]]:
    out = []
    for t, inc, b in trace:
        inc = None if inc is None or not math.isfinite(float(inc)) else float(inc)
        b = None if b is None or not math.isfinite(float(b)) else float(b)
        out.append((max(0.0, float(t)), inc, b))
    out.sort(key=lambda r: r[0])
    return out


def summarize(trace: Iterable[Sequence], best_us: float | None, total_s: float | None = None) -> dict:
    """``time_to_final_incumbent_s``, ``time_to_1pct_s`` and ``primal_integral`` of ``trace`` against
    ``best_us`` (``total_s``: the run's length, for the integral's last piece; default the last row's time).
    Values are ``None`` where the trace never reaches them."""
    rows = _clean(trace)
    out = {"time_to_final_incumbent_s": None, "time_to_1pct_s": None, "primal_integral": None}
    if best_us is None or best_us <= 0 or not rows:
        return out
    end = max(total_s or 0.0, rows[-1][0])
    best_inc = math.inf
    integral, t_prev, gap_prev = 0.0, 0.0, 1.0
    for t, inc, _ in rows:
        integral += gap_prev * (t - t_prev)
        t_prev = t
        if inc is None:
            continue
        best_inc = min(best_inc, inc)
        gap_prev = abs(best_inc - best_us) / max(best_inc, best_us)
        if out["time_to_1pct_s"] is None and best_inc <= best_us * (1 + WITHIN):
            out["time_to_1pct_s"] = t
        if out["time_to_final_incumbent_s"] is None and best_inc <= best_us * (1 + 1e-9):
            out["time_to_final_incumbent_s"] = t
    integral += gap_prev * (end - t_prev)
    out["primal_integral"] = integral
    return out


def write_trace(trace: Iterable[Sequence], directory) -> Path:
    """``anytime.csv`` (columns :data:`COLUMNS`, empty cells for unknown values) in ``directory``."""
    path = Path(directory) / ANYTIME_FILE
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for t, inc, b in _clean(trace):
            w.writerow([f"{t:.6f}", "" if inc is None else repr(inc), "" if b is None else repr(b)])
    return path
