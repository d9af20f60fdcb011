"""Anytime traces: an exact backend's (or a restarting heuristic's) incumbent and bound over time.

A trace is a sequence of ``(time_s, incumbent_us, bound_us[, bound_scope])`` rows in time order, ``time_s``
counted from the start of ``solve()``, ``None`` where a value is not known yet (no incumbent, or a backend that
reports no bound). Every row is about the problem the user asked for: an incumbent is the time of a schedule of
that problem (never of one phase of a composed All-Reduce), so incumbents never rise; ``bound_scope`` says what a
bound holds for: ``continuous`` (the problem itself: a proof when the incumbent meets it) or ``ten`` (only the
model's time grid, link times rounded up to whole steps: no bound on the problem, and no proof). A row without a
scope whose bound is known is read as ``continuous``. :func:`summarize` turns it into the record's summary columns, measured against the best known time
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
COLUMNS = ("time_s", "incumbent_us", "bound_us", "bound_scope")
SCOPES = ("continuous", "ten")
WITHIN = 0.01


def _clean(trace: Iterable[Sequence]) -> list[tuple[float, float | None, float | None, str | None]]:
    """Rows as ``(time_s, incumbent_us, bound_us, bound_scope)`` in time order (non-finite values unknown).

    Examples
    --------
    >>> _clean([(2.0, 5.0, float("nan")), (1.0, None, 3.0, "ten"), (0.5, 6.0, 4.0)])
    [(0.5, 6.0, 4.0, 'continuous'), (1.0, None, 3.0, 'ten'), (2.0, 5.0, None, None)]
    """
    out = []
    for row in trace:
        t, inc, b = row[:3]
        scope = row[3] if len(row) > 3 else None
        inc = None if inc is None or not math.isfinite(float(inc)) else float(inc)
        b = None if b is None or not math.isfinite(float(b)) else float(b)
        if b is None:
            scope = None
        elif scope not in SCOPES:
            scope = "continuous"
        out.append((max(0.0, float(t)), inc, b, scope))
    out.sort(key=lambda r: r[0])
    return out


def is_problem_trace(trace: Iterable[Sequence]) -> bool:
    """Whether ``trace`` reads as one problem's: incumbents never rise, and no incumbent is below a bound
    that holds for the problem (``continuous``). A ``ten`` bound may exceed an incumbent: it bounds the grid.

    Examples
    --------
    >>> is_problem_trace([(0.1, 6252.5, 5002.0), (0.2, 5002.0, 5002.0), (0.3, 10004.0, 5002.0)])
    False
    >>> is_problem_trace([(0.1, 12.0, 11.1, "ten"), (0.2, 10.3, None)])
    True
    """
    rows = _clean(trace)
    incs = [inc for _, inc, _, _ in rows if inc is not None]
    if any(b > a * (1 + 1e-9) for a, b in zip(incs, incs[1:])):
        return False
    best_bound = max((b for _, _, b, sc in rows if sc == "continuous"), default=-math.inf)
    return not incs or min(incs) >= best_bound * (1 - 1e-9)


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
    for t, inc, _, _ in rows:
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
    """``anytime.csv`` (columns :data:`COLUMNS`, empty cells for unknown values) in ``directory``.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> print(write_trace([(0.5, 12.0, 11.1, "ten"), (1.0, 10.0, 10.0)], d).read_text(), end="")
    time_s,incumbent_us,bound_us,bound_scope
    0.500000,12.0,11.1,ten
    1.000000,10.0,10.0,continuous
    """
    path = Path(directory) / ANYTIME_FILE
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for t, inc, b, scope in _clean(trace):
            w.writerow([f"{t:.6f}", "" if inc is None else repr(inc), "" if b is None else repr(b), scope or ""])
    return path
