"""Collectives as pre/postconditions over (NPU, chunk).

There are ``C = N * chunks_per_npu`` chunks; chunk ``c`` is owned by NPU
``c mod N`` (so chunk ``c = k*N + owner``). The state of NPU ``v`` for chunk
``c`` is the set of NPUs whose contribution it holds:

========================  ===================================  ====================================
collective                precondition                         postcondition
========================  ===================================  ====================================
``all_gather``            owner holds the whole chunk          every NPU holds the whole chunk
``reduce_scatter``        every NPU holds its own contribution the owner holds the full reduction
``all_reduce``            every NPU holds its own contribution every NPU holds the full reduction
========================  ===================================  ====================================

For All-Gather the owner's chunk counts as "complete" (all contributions), so
the same replay rules serve every collective.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cost import MIB, chunk_bytes_for
from .errors import CollectiveError

ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_REDUCE = "all_reduce"
KINDS = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)

_ALIASES = {
    "all_gather": ALL_GATHER, "allgather": ALL_GATHER, "all-gather": ALL_GATHER, "ag": ALL_GATHER,
    "reduce_scatter": REDUCE_SCATTER, "reducescatter": REDUCE_SCATTER, "reduce-scatter": REDUCE_SCATTER,
    "rs": REDUCE_SCATTER,
    "all_reduce": ALL_REDUCE, "allreduce": ALL_REDUCE, "all-reduce": ALL_REDUCE, "ar": ALL_REDUCE,
}


def canonical_kind(name: str) -> str:
    """Canonical collective name, accepting common spellings.

    >>> canonical_kind("AllGather")
    'all_gather'
    """
    key = str(name).strip().lower()
    if key not in _ALIASES:
        raise CollectiveError(f"unknown collective {name!r}; choose one of {', '.join(KINDS)}")
    return _ALIASES[key]


@dataclass(frozen=True)
class Collective:
    """A collective operation and its size.

    Parameters
    ----------
    kind : str
        ``all_gather``, ``reduce_scatter`` or ``all_reduce`` (aliases accepted).
    chunks_per_npu : int
        Chunks each NPU owns (``cpn``).
    buffer_mib : float
        Collective size in MiB: the All-Gather output / Reduce-Scatter input /
        All-Reduce buffer, split into ``N * cpn`` chunks.
    overlap : bool
        All-Reduce only: ``True`` (default) lets the All-Gather of a chunk start
        as soon as its reduction is complete at its owner and each link as soon
        as its Reduce-Scatter traffic is done; ``False`` puts a barrier between
        the two phases (:mod:`solvers.compose`).

    Examples
    --------
    >>> c = Collective("all_gather", chunks_per_npu=1, buffer_mib=1024)
    >>> c.num_chunks(16), c.chunk_bytes(16)
    (16, 67108864)
    """

    kind: str = ALL_GATHER
    chunks_per_npu: int = 1
    buffer_mib: float = 1024.0
    overlap: bool = True

    def __post_init__(self):
        object.__setattr__(self, "kind", canonical_kind(self.kind))
        if not isinstance(self.overlap, (bool, np.bool_)):
            raise CollectiveError(f"collective.overlap must be true or false, got {self.overlap!r}")
        object.__setattr__(self, "overlap", bool(self.overlap))
        cpn = self.chunks_per_npu
        if isinstance(cpn, bool) or not isinstance(cpn, (int, np.integer)) or cpn < 1:
            raise CollectiveError(f"collective.chunks_per_npu must be a positive integer, got {cpn!r}")
        object.__setattr__(self, "chunks_per_npu", int(cpn))
        try:
            size = float(self.buffer_mib)
        except (TypeError, ValueError):
            raise CollectiveError(f"collective.buffer_mib must be a positive number, got {self.buffer_mib!r}")
        if not (size > 0) or not np.isfinite(size):
            raise CollectiveError(f"collective.buffer_mib must be a positive number, got {self.buffer_mib!r}")
        if size * MIB >= 2.0**63:
            raise CollectiveError(f"collective.buffer_mib must be below {2.0**63 / MIB:.3g} MiB, got {size:g}")
        object.__setattr__(self, "buffer_mib", size)

    @property
    def buffer_bytes(self) -> int:
        return int(round(self.buffer_mib * MIB))

    def num_chunks(self, num_npus: int) -> int:
        return int(num_npus) * self.chunks_per_npu

    def chunk_bytes(self, num_npus: int) -> int:
        return chunk_bytes_for(self.buffer_bytes, self.num_chunks(num_npus))

    @staticmethod
    def owner(chunk, num_npus: int):
        """NPU that owns chunk ``c`` (``c mod N``); works on arrays."""
        return chunk % num_npus

    # ---- pre/postconditions (bitmask of contributing NPUs; bit i = NPU i) ----
    def initial_state(self, npu: int, chunk: int, num_npus: int) -> int:
        """Contributions NPU ``npu`` holds for ``chunk`` before the collective."""
        if self.kind == ALL_GATHER:
            return (1 << num_npus) - 1 if chunk % num_npus == npu else 0
        return 1 << npu

    def required_state(self, npu: int, chunk: int, num_npus: int) -> int | None:
        """Contributions NPU ``npu`` must hold for ``chunk`` after; ``None`` if unconstrained."""
        if self.kind == REDUCE_SCATTER and chunk % num_npus != npu:
            return None
        return (1 << num_npus) - 1

    @property
    def reduces(self) -> bool:
        return self.kind in (REDUCE_SCATTER, ALL_REDUCE)

    def label(self) -> str:
        extra = "" if self.kind != ALL_REDUCE else (", overlap" if self.overlap else ", barrier")
        return f"{self.kind}(cpn={self.chunks_per_npu}, {self.buffer_mib:g} MiB{extra})"
