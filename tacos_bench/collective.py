"""Collectives as pre/postconditions over (NPU, chunk): a new collective is a definition, not a code path.

``N`` NPUs, ``K = chunks_per_npu``, ``B = buffer_mib * 2^20`` bytes, ``R = root``:

==================  ==========  ===================  ==================================  =====================================
collective          chunks C    chunk bytes          before                              after
==================  ==========  ===================  ==================================  =====================================
``all_gather``      N K         floor(B / C)         chunk c at NPU c mod N              every NPU holds every chunk
``reduce_scatter``  N K         floor(B / C)         every NPU holds its contribution    NPU c mod N holds the full reduction
``all_reduce``      N K         floor(B / C)         every NPU holds its contribution    every NPU holds the full reduction
``broadcast``       K           floor(B / K)         R holds every chunk                 every NPU holds every chunk
``reduce``          K           floor(B / K)         every NPU holds its contribution    R holds the full reduction
``gather``          N K         floor(B / C)         chunk c at NPU c mod N              R holds every chunk
``scatter``         N K         floor(B / C)         R holds every chunk                 NPU c mod N holds chunk c
``all_to_all``      N N K       floor(B / (N K))     chunk c = (s N + d) K + k at NPU s  NPU d holds it
==================  ==========  ===================  ==================================  =====================================

Everything else reads two arrays: :meth:`Collective.sources` (the NPU holding a chunk before, ``-1`` when
every NPU holds a contribution of it) and :meth:`Collective.destinations` (the one NPU that must hold the
complete chunk after, ``-1`` for every NPU). The state of NPU ``v`` for chunk ``c`` is the set of NPUs whose
contribution it holds; a copied chunk counts as complete (every contribution), so the same replay rules
serve every collective (:mod:`tacos_bench.verify`).

*Copy* collectives move data (all_gather, broadcast, gather, scatter, all_to_all); *reducing* ones combine
it. A reducing collective with one destination per chunk is the time-reversed mirror of a copy collective on
the reversed links (:meth:`Collective.mirror`): reduce_scatter of all_gather, reduce of broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .cost import MIB, chunk_bytes_for
from .errors import CollectiveError

ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_REDUCE = "all_reduce"
BROADCAST = "broadcast"
REDUCE = "reduce"
GATHER = "gather"
SCATTER = "scatter"
ALL_TO_ALL = "all_to_all"
KINDS = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, BROADCAST, REDUCE, GATHER, SCATTER, ALL_TO_ALL)
COPY_KINDS = (ALL_GATHER, BROADCAST, GATHER, SCATTER, ALL_TO_ALL)
REDUCE_KINDS = (REDUCE_SCATTER, ALL_REDUCE, REDUCE)
ROOTED_KINDS = (BROADCAST, REDUCE, GATHER, SCATTER)
# every NPU needs every chunk (multicast) / every chunk has one destination (unicast)
MULTICAST_KINDS = (ALL_GATHER, BROADCAST)
UNICAST_KINDS = (GATHER, SCATTER, ALL_TO_ALL)
_MIRROR = {REDUCE_SCATTER: ALL_GATHER, REDUCE: BROADCAST}
# collectives given by a chunk table (tacos_bench.demand) rather than by a rule: All-to-Allv from a byte matrix, a
# mixture-of-experts layer's dispatch and combine, a user's table, several collectives on one network
ALL_TO_ALLV = "all_to_allv"
MOE_DISPATCH = "moe_dispatch"
MOE_COMBINE = "moe_combine"
CUSTOM = "custom"
CONCURRENT = "concurrent"
DEMAND_KINDS = (ALL_TO_ALLV, MOE_DISPATCH, MOE_COMBINE, CUSTOM, CONCURRENT)


def reloaded_kind(kind: str) -> str:
    """The kind a chunk table read back from a file (``chunks.csv``, a JSON export) is: its own, except a concurrent
    collective's, which comes back as ``custom`` (the file holds the union table, not the parts)."""
    return CUSTOM if kind == CONCURRENT else kind

_ALIASES = {
    "all_gather": ALL_GATHER, "allgather": ALL_GATHER, "all-gather": ALL_GATHER, "ag": ALL_GATHER,
    "reduce_scatter": REDUCE_SCATTER, "reducescatter": REDUCE_SCATTER, "reduce-scatter": REDUCE_SCATTER,
    "rs": REDUCE_SCATTER,
    "all_reduce": ALL_REDUCE, "allreduce": ALL_REDUCE, "all-reduce": ALL_REDUCE, "ar": ALL_REDUCE,
    "broadcast": BROADCAST, "bcast": BROADCAST, "reduce": REDUCE, "gather": GATHER, "scatter": SCATTER,
    "all_to_all": ALL_TO_ALL, "alltoall": ALL_TO_ALL, "all-to-all": ALL_TO_ALL, "a2a": ALL_TO_ALL,
    "all_to_allv": ALL_TO_ALLV, "alltoallv": ALL_TO_ALLV, "all-to-allv": ALL_TO_ALLV,
    "moe_dispatch": MOE_DISPATCH, "moe_combine": MOE_COMBINE, "custom": CUSTOM, "concurrent": CONCURRENT,
}


def parse_release(value) -> tuple:
    """``collective.release_us`` as sorted ``(npu, t)`` pairs (NPU ids as given; :class:`Problem` checks
    them against the topology); one line naming the bad entry otherwise.

    >>> parse_release([[3, 12.5], [1, 0]])
    ((1, 0.0), (3, 12.5))
    """
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise CollectiveError(f"collective.release_us must be a list of [npu, t] pairs, got {value!r}")
    out: dict[int, float] = {}
    for item in value:
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) != 2:
            raise CollectiveError(f"collective.release_us: each entry is [npu, t] (t in µs), got {item!r}")
        v, t = item
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise CollectiveError(f"collective.release_us: NPU id {v!r} is not a non-negative integer")
        if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or not np.isfinite(t) \
                or t < 0:
            raise CollectiveError(f"collective.release_us: NPU {v} joins at {t!r}: a release time is a finite, "
                                  "non-negative number of µs")
        if int(v) in out:
            raise CollectiveError(f"collective.release_us lists NPU {v} twice")
        out[int(v)] = float(t)
    return tuple(sorted(out.items()))


def canonical_kind(name: str) -> str:
    """Canonical collective name, accepting common spellings.

    >>> canonical_kind("AllGather"), canonical_kind("alltoall")
    ('all_gather', 'all_to_all')
    """
    key = str(name).strip().lower()
    if key not in _ALIASES:
        raise CollectiveError(f"unknown collective {name!r}; choose one of {', '.join(KINDS + DEMAND_KINDS)}")
    return _ALIASES[key]


@dataclass(frozen=True)
class Collective:
    """A collective operation and its size.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS` (aliases accepted).
    chunks_per_npu : int
        ``K`` (see the table in the module docstring).
    buffer_mib : float
        Collective size in MiB: the All-Gather output / Reduce-Scatter input / All-Reduce buffer / the
        broadcast, reduced, gathered or scattered data; for All-to-All each NPU's send buffer.
    overlap : bool
        All-Reduce only: ``True`` (default) lets the All-Gather of a chunk start as soon as its reduction
        is complete at its owner and each link as soon as its Reduce-Scatter traffic is done; ``False``
        puts a barrier between the two phases (:mod:`solvers.compose`).
    root : int
        The root of broadcast, reduce, gather and scatter (checked against the topology by
        :class:`~tacos_bench.problem.Problem`).
    demand : Demand, optional
        The chunk table of a collective of :data:`DEMAND_KINDS` (:mod:`tacos_bench.demand`); its chunks, their
        size, sources and destinations then replace the rule above (``chunks_per_npu`` and ``buffer_mib`` only
        describe how it was made).
    release : tuple of (int, float)
        Stragglers: ``(npu, t)`` pairs, NPU ``npu`` joins at ``t`` µs: it neither sends nor receives before
        ``t`` and its data exists from ``t`` (:mod:`solvers.release`); NPUs not listed join at 0.

    Examples
    --------
    >>> c = Collective("all_gather", chunks_per_npu=1, buffer_mib=1024)
    >>> c.num_chunks(16), c.chunk_bytes(16)
    (16, 67108864)
    >>> a = Collective("all_to_all", 1, 16)
    >>> a.num_chunks(4), a.chunk_bytes(4), a.sources(4)[:6].tolist(), a.destinations(4)[:6].tolist()
    (16, 4194304, [0, 0, 0, 0, 1, 1], [0, 1, 2, 3, 0, 1])
    >>> Collective("reduce", 2, 8, root=1).mirror().kind
    'broadcast'
    """

    kind: str = ALL_GATHER
    chunks_per_npu: int = 1
    buffer_mib: float = 1024.0
    overlap: bool = True
    root: int = 0
    demand: Any = None
    release: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "kind", canonical_kind(self.kind))
        object.__setattr__(self, "release", parse_release(self.release))
        if (self.kind in DEMAND_KINDS) != (self.demand is not None):
            raise CollectiveError(f"collective {self.kind} " + ("needs its chunk table (demand)" if self.demand is None
                                                               else "is a named collective: it takes no demand"))
        if not isinstance(self.overlap, (bool, np.bool_)):
            raise CollectiveError(f"collective.overlap must be true or false, got {self.overlap!r}")
        object.__setattr__(self, "overlap", bool(self.overlap))
        cpn = self.chunks_per_npu
        if isinstance(cpn, bool) or not isinstance(cpn, (int, np.integer)) or cpn < 1:
            raise CollectiveError(f"collective.chunks_per_npu must be a positive integer, got {cpn!r}")
        object.__setattr__(self, "chunks_per_npu", int(cpn))
        root = self.root
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or root < 0:
            raise CollectiveError(f"collective.root must be a non-negative NPU id, got {root!r}")
        object.__setattr__(self, "root", int(root))
        try:
            size = float(self.buffer_mib)
        except (TypeError, ValueError):
            raise CollectiveError(f"collective.buffer_mib must be a positive number, got {self.buffer_mib!r}")
        if not (size > 0) or not np.isfinite(size):
            raise CollectiveError(f"collective.buffer_mib must be a positive number, got {self.buffer_mib!r}")
        if size * MIB >= 2.0**63:
            raise CollectiveError(f"collective.buffer_mib must be below {2.0**63 / MIB:.3g} MiB, got {size:g}")
        object.__setattr__(self, "buffer_mib", size)

    def without_release(self) -> "Collective":
        """This collective with every NPU joining at 0 (the healthy problem of a straggler run)."""
        return replace(self, release=()) if self.release else self

    # ------------------------------------------------------------------ sizes
    @property
    def buffer_bytes(self) -> int:
        return int(round(self.buffer_mib * MIB))

    def num_chunks(self, num_npus: int) -> int:
        if self.demand is not None:
            return self.demand.num_chunks
        n, k = int(num_npus), self.chunks_per_npu
        if self.kind in (BROADCAST, REDUCE):
            return k
        if self.kind == ALL_TO_ALL:
            return n * n * k
        return n * k

    def chunk_bytes(self, num_npus: int) -> int:
        if self.demand is not None:
            return int(self.demand.chunk_bytes)
        if self.kind == ALL_TO_ALL:  # B is one NPU's send buffer: N K chunks of it
            return chunk_bytes_for(self.buffer_bytes, int(num_npus) * self.chunks_per_npu)
        return chunk_bytes_for(self.buffer_bytes, self.num_chunks(num_npus))

    # ------------------------------------------------------------------ classes of collective
    @property
    def reduces(self) -> bool:
        return self.demand.reduces if self.demand is not None else self.kind in REDUCE_KINDS

    @property
    def copies(self) -> bool:
        return self.demand.copies if self.demand is not None else self.kind in COPY_KINDS

    @property
    def multicast(self) -> bool:
        """Every NPU needs every chunk, from one source each (the TACOS case)."""
        return self.demand.multicast_all if self.demand is not None else self.kind in MULTICAST_KINDS

    @property
    def unicast(self) -> bool:
        """Every chunk has one source and one destination."""
        return self.demand.unicast if self.demand is not None else self.kind in UNICAST_KINDS

    @property
    def rooted(self) -> bool:
        return self.kind in ROOTED_KINDS

    @property
    def general(self) -> bool:
        """Given by a chunk table (:data:`DEMAND_KINDS`): some chunk may have a subset of sources or
        destinations."""
        return self.demand is not None

    def mirror(self) -> "Collective":
        """The copy collective whose time-reversed schedule on the reversed links is this reducing one."""
        if self.demand is not None:
            return replace(self, demand=self.demand.mirror())
        if self.kind not in _MIRROR:
            raise CollectiveError(f"{self.kind} has no single-phase mirror")
        return replace(self, kind=_MIRROR[self.kind])

    # ------------------------------------------------------------------ pre/postconditions
    @staticmethod
    def owner(chunk, num_npus: int):
        """NPU ``c mod N`` (works on arrays): the owner of an All-Gather / Reduce-Scatter / All-Reduce chunk."""
        return chunk % num_npus

    def source_of(self, chunk, num_npus: int):
        """The NPU holding ``chunk`` before the collective (``-1``: every NPU contributes); works on arrays."""
        n, k = int(num_npus), self.chunks_per_npu
        if self.kind in REDUCE_KINDS:
            return chunk * 0 - 1
        if self.kind in (BROADCAST, SCATTER):
            return chunk * 0 + self.root
        if self.kind == ALL_TO_ALL:
            return (chunk // k) // n
        return chunk % n

    def destination_of(self, chunk, num_npus: int):
        """The one NPU that must hold ``chunk`` (complete) after the collective (``-1``: every NPU); works on
        arrays."""
        n, k = int(num_npus), self.chunks_per_npu
        if self.kind in (ALL_GATHER, ALL_REDUCE, BROADCAST):
            return chunk * 0 - 1
        if self.kind in (GATHER, REDUCE):
            return chunk * 0 + self.root
        if self.kind == ALL_TO_ALL:
            return (chunk // k) % n
        return chunk % n  # reduce_scatter, scatter

    def sources(self, num_npus: int) -> np.ndarray:
        """:meth:`source_of` of every chunk (a chunk table: ``-2`` for a subset of several sources)."""
        if self.demand is not None:
            return self.demand.source.copy()
        return self.source_of(np.arange(self.num_chunks(num_npus), dtype=np.int64), num_npus)

    def destinations(self, num_npus: int) -> np.ndarray:
        """:meth:`destination_of` of every chunk (a chunk table: ``-2`` for a subset of several destinations)."""
        if self.demand is not None:
            return self.demand.destination.copy()
        return self.destination_of(np.arange(self.num_chunks(num_npus), dtype=np.int64), num_npus)

    def initial_state(self, npu: int, chunk: int, num_npus: int) -> int:
        """Contributions NPU ``npu`` holds for ``chunk`` before the collective (bitmask, bit i = NPU i)."""
        if self.reduces:
            return 1 << npu
        return (1 << num_npus) - 1 if self.source_of(chunk, num_npus) == npu else 0

    def required_state(self, npu: int, chunk: int, num_npus: int) -> int | None:
        """Contributions NPU ``npu`` must hold for ``chunk`` after; ``None`` if unconstrained."""
        d = self.destination_of(chunk, num_npus)
        if d >= 0 and d != npu:
            return None
        return (1 << num_npus) - 1

    def label(self) -> str:
        if self.demand is not None:
            return f"{self.kind}({self.demand.num_chunks} chunks of {self.demand.chunk_bytes} B)"
        extra = ""
        if self.kind == ALL_REDUCE:
            extra = ", overlap" if self.overlap else ", barrier"
        elif self.rooted:
            extra = f", root {self.root}"
        if self.release:
            extra += f", {len(self.release)} late NPU(s)"
        return f"{self.kind}(cpn={self.chunks_per_npu}, {self.buffer_mib:g} MiB{extra})"
