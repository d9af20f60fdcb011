"""The earliest arrival per (node, chunk): the lookup both replays of copy schedules use."""

from __future__ import annotations

import numpy as np


def earliest_arrivals(key_in: np.ndarray, end: np.ndarray, key_hold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct arrival keys (sorted) and, for each of ``key_hold``, the earliest ``end`` among the arrivals
    with that key (``inf`` for none). Keys are ``node * C + chunk``; ``key_in`` is not empty."""
    order = np.argsort(key_in, kind="stable")
    k_sorted = key_in[order]
    first = np.ones(len(k_sorted), dtype=bool)
    first[1:] = k_sorted[1:] != k_sorted[:-1]
    uniq = k_sorted[first]
    earliest = np.minimum.reduceat(end[order], np.flatnonzero(first))
    pos = np.minimum(np.searchsorted(uniq, key_hold), len(uniq) - 1)
    return uniq, np.where(uniq[pos] == key_hold, earliest[pos], np.inf)
