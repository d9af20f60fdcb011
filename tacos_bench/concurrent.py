"""Several collectives sharing one network (``collective=concurrent``): the parts and their one chunk table.

``collective.parts`` lists the parts, each a mapping with ``kind`` (any named collective, or ``all_to_allv`` with
its ``demand`` matrix), ``npus`` (the NPU group; omitted: every NPU; groups may overlap) and the part's own
``buffer_mib``, ``chunks_per_npu``, ``root`` (an NPU id of the network) or ``overlap``. Every chunk of the table has
one size (``collective.chunk_bytes``; default: the smallest part's own chunk size), so each part is cut into
``chunks_per_npu x ceil(its own chunk / chunk_bytes)`` chunks per NPU (the rounding is ``padding_bytes``). The
table lists part 0's chunks first, then part 1's, ... (:attr:`ConcurrentParts.offsets`).

``collective.mode`` says how the parts share the links (:mod:`solvers.concurrent` builds the schedule):
``joint`` (one schedule for all parts), ``sequential`` (one part after another) or ``priority`` (the first part
as if alone, the others only on what it leaves idle).

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> c = concurrent_collective([{"kind": "all_gather", "buffer_mib": 1}, {"kind": "broadcast", "npus": [0, 1, 2],
...                            "root": 2, "buffer_mib": 2}], ring(4))
>>> c.demand.meta["parts"].offsets, c.demand.chunk_bytes, [p.npus.tolist() for p in c.demand.meta["parts"].parts][1]
([0, 4, 12], 262144, [0, 1, 2])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from .collective import (ALL_TO_ALLV, CONCURRENT, DEMAND_KINDS, KINDS, Collective, canonical_kind)
from .cost import MIB
from .errors import CollectiveError

MODES = ("joint", "sequential", "priority")
PART_KEYS = ("kind", "npus", "buffer_mib", "chunks_per_npu", "root", "overlap", "demand")


@dataclass(frozen=True)
class Part:
    """One part: its collective on its group (``collective`` on ``len(npus)`` NPUs, NPU ``i`` of it being
    ``npus[i]`` of the network) and its chunk table on the whole network."""

    index: int
    npus: np.ndarray
    collective: Collective
    table: Any
    whole: bool            # the group is every NPU of the network, in id order

    @property
    def kind(self) -> str:
        return self.collective.kind


@dataclass(frozen=True)
class ConcurrentParts:
    """The parts of a concurrent collective and where each one's chunks start in the table."""

    parts: tuple
    offsets: list
    mode: str


def concurrent_collective(parts: list, topology, *, mode: str = "joint", chunk_bytes: int | None = None) -> Collective:
    """The :class:`~tacos_bench.collective.Collective` of ``parts`` on ``topology`` (module docstring).

    Raises
    ------
    CollectiveError
        One line naming the part and the setting at fault.
    """
    from .demand import union

    if mode not in MODES:
        raise CollectiveError(f"collective.mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(parts, (list, tuple)) or not parts:
        raise CollectiveError("collective=concurrent needs collective.parts: a list of {kind, npus, ...} parts")
    n = topology.num_npus
    specs = [_spec(i, p, n) for i, p in enumerate(parts)]
    if chunk_bytes is None:
        chunk_bytes = min(c.chunk_bytes(len(g)) for _, g, c in specs)
    if int(chunk_bytes) < 1:
        raise CollectiveError(f"collective.chunk_bytes must be a positive number of bytes, got {chunk_bytes}")
    built = []
    for i, g, c in specs:
        c2 = _rechunked(c, len(g), int(chunk_bytes))
        from .demand import of_collective

        t = c2.demand if c2.demand is not None else of_collective(c2, len(g))
        whole = len(g) == n and np.array_equal(g, np.arange(n))
        built.append(Part(i, g, c2, t if whole else t.with_npus(g, n), whole))
    table, _ = union([p.table for p in built])
    offsets = np.concatenate([[0], np.cumsum([p.table.num_chunks for p in built])]).astype(int).tolist()
    pad = sum(_padding(p.collective, len(p.npus)) for p in built)
    meta = {"parts": ConcurrentParts(tuple(built), offsets, mode)}
    return Collective(CONCURRENT, demand=replace(table, padding_bytes=pad, name=CONCURRENT, meta=meta))


def _spec(i: int, p: Mapping[str, Any], n: int):
    if not isinstance(p, Mapping):
        raise CollectiveError(f"collective.parts[{i}] must be a mapping {{kind, npus, ...}}, got {p!r}")
    unknown = sorted(set(p) - set(PART_KEYS))
    if unknown:
        raise CollectiveError(f"collective.parts[{i}]: unknown setting(s) {', '.join(unknown)}; valid: "
                              f"{', '.join(PART_KEYS)}")
    try:
        kind = canonical_kind(p.get("kind"))
    except CollectiveError:
        raise CollectiveError(f"collective.parts[{i}]: unknown kind {p.get('kind')!r}; a part is one of "
                              f"{', '.join(KINDS + (ALL_TO_ALLV,))}") from None
    if kind in DEMAND_KINDS and kind != ALL_TO_ALLV:
        raise CollectiveError(f"collective.parts[{i}]: a part is a named collective or all_to_allv, not {kind}")
    g = np.arange(n) if p.get("npus") is None else np.asarray(list(p["npus"]))
    if g.ndim != 1 or g.size < 2 or not np.issubdtype(g.dtype, np.integer):
        raise CollectiveError(f"collective.parts[{i}].npus must list at least 2 NPU ids, got {p.get('npus')!r}")
    if np.any((g < 0) | (g >= n)):
        raise CollectiveError(f"collective.parts[{i}].npus: NPU {int(g[(g < 0) | (g >= n)][0])} is not one of "
                              f"the network's NPUs 0..{n - 1}")
    if np.unique(g).size != g.size:
        raise CollectiveError(f"collective.parts[{i}].npus lists an NPU twice")
    g = g.astype(np.int64)
    if kind == ALL_TO_ALLV:
        from .demand import all_to_allv, read_matrix

        if p.get("demand") is None:
            raise CollectiveError(f"collective.parts[{i}]: all_to_allv needs its demand (a matrix file)")
        M = read_matrix(p["demand"])
        if M.shape[0] != g.size:
            raise CollectiveError(f"collective.parts[{i}]: its matrix is {M.shape[0]} x {M.shape[0]} for "
                                  f"{g.size} NPUs")
        return i, g, Collective(ALL_TO_ALLV, demand=all_to_allv(M, chunks_per_npu=int(p.get("chunks_per_npu", 1))))
    root = p.get("root", 0)
    if kind in ("broadcast", "reduce", "gather", "scatter"):
        where = np.flatnonzero(g == int(root))
        if not where.size:
            raise CollectiveError(f"collective.parts[{i}].root={root} is not in its npus")
        root = int(where[0])
    try:
        c = Collective(kind, int(p.get("chunks_per_npu", 1)), float(p.get("buffer_mib", 1024.0)),
                       bool(p.get("overlap", True)), int(root) if kind in ("broadcast", "reduce", "gather", "scatter")
                       else 0)
    except CollectiveError as e:
        raise CollectiveError(f"collective.parts[{i}]: {e}") from None
    return i, g, c


def _rechunked(c: Collective, m: int, cb: int) -> Collective:
    """``c`` on ``m`` NPUs with chunks of exactly ``cb`` bytes (more of them, the last round-up as padding)."""
    if c.demand is not None:
        if c.demand.chunk_bytes == cb:
            return c
        from .demand import all_to_allv

        return replace(c, demand=all_to_allv(c.demand.pair_bytes() - 0, chunk_bytes=cb))
    factor = max(1, math.ceil(c.chunk_bytes(m) / cb))
    k = c.chunks_per_npu * factor
    probe = replace(c, chunks_per_npu=k)
    per = m * k if c.kind == "all_to_all" else probe.num_chunks(m)
    return replace(probe, buffer_mib=cb * per / MIB)


def _padding(c: Collective, m: int) -> int:
    return int(c.demand.padding_bytes) if c.demand is not None else 0
