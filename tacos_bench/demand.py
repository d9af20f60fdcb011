"""Traffic as a table of chunks: each chunk's sources, destinations and op, all of one size (``chunk_bytes``).

A *copy* chunk has one source and any destinations (one: unicast; several: a multicast to that subset; every
NPU: ``*``); a *reduce* chunk has several sources whose contributions are combined into each destination. The
named collectives are constructors of this table (:func:`of_collective`); so are an N x N byte matrix
(:func:`all_to_allv`, All-to-Allv), a mixture-of-experts layer (:mod:`tacos_bench.moe`), a user's own table
(:func:`read_chunks_csv`) and several demands on one network (:func:`union`).

Every run writes the table as ``chunks.csv`` (:func:`write_chunks_csv`: ``chunk,sources,destinations,op``; ids
space-separated, ``*`` only for every NPU of the topology) beside ``schedule.csv``, so anyone can check a schedule
against its demand; a generated demand also writes its per-pair byte matrix as ``demand.csv``.

Examples
--------
>>> d = all_to_allv([[0, 10, 0], [25, 0, 5], [0, 0, 0]], chunk_bytes=10)
>>> d.num_chunks, d.source.tolist(), d.destination.tolist(), d.padding_bytes
(5, [0, 1, 1, 1, 1], [1, 0, 0, 0, 2], 10)
>>> d.unicast, d.copies
(True, True)
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .errors import CollectiveError

COPY_OP, REDUCE_OP = 0, 1
OPS = ("copy", "reduce")
EVERY = "*"
# a source / destination array entry: -1 every NPU, -2 a subset of several (see the sets)
ALL, SUBSET = -1, -2
CHUNKS_CSV_COLUMNS = ("chunk", "sources", "destinations", "op")
# a table file may hold at most this many bytes (a chunk table of millions of rows is a few hundred MB)
MAX_TABLE_BYTES = 1 << 30


@dataclass(frozen=True, eq=False)
class Demand:
    """A chunk table on ``num_npus`` NPUs (see the module docstring).

    Chunk ``c``'s sources are ``src_ids[src_ptr[c]:src_ptr[c + 1]]`` (an empty list: every NPU), its
    destinations ``dst_ids[dst_ptr[c]:dst_ptr[c + 1]]`` (empty: every NPU); ``op[c]`` is ``COPY_OP`` or
    ``REDUCE_OP``. ``padding_bytes``: bytes added by rounding pairs up to whole chunks; ``name`` the collective
    it came from; ``meta`` what its generator recorded (e.g. ``demand_gini``).
    """

    num_npus: int
    chunk_bytes: int
    src_ptr: np.ndarray
    src_ids: np.ndarray
    dst_ptr: np.ndarray
    dst_ids: np.ndarray
    op: np.ndarray
    padding_bytes: int = 0
    name: str = "custom"
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        for k in ("src_ptr", "src_ids", "dst_ptr", "dst_ids"):
            a = np.ascontiguousarray(getattr(self, k), dtype=np.int64)
            a.setflags(write=False)
            object.__setattr__(self, k, a)
        op = np.ascontiguousarray(self.op, dtype=np.int8)
        op.setflags(write=False)
        object.__setattr__(self, "op", op)
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise :class:`CollectiveError` (one line, naming the chunk) on a table that cannot be a demand."""
        n, C = int(self.num_npus), self.num_chunks
        if C == 0:
            raise CollectiveError("the demand is empty: no chunk to move")
        if int(self.chunk_bytes) < 1:
            raise CollectiveError(f"chunk_bytes must be a positive number of bytes, got {self.chunk_bytes}")
        for what, ptr, ids in (("sources", self.src_ptr, self.src_ids), ("destinations", self.dst_ptr, self.dst_ids)):
            if ptr.size != C + 1 or ptr[0] != 0 or np.any(np.diff(ptr) < 0) or ptr[-1] != ids.size:
                raise CollectiveError(f"malformed {what} index of the chunk table")
            bad = np.flatnonzero((ids < 0) | (ids >= n))
            if bad.size:
                c = int(np.searchsorted(ptr, bad[0], side="right") - 1)
                raise CollectiveError(f"chunk {c}: {what} names NPU {int(ids[bad[0]])}, not one of the NPUs "
                                      f"0..{n - 1}")
        nsrc = np.diff(self.src_ptr)
        if np.any((self.op != COPY_OP) & (self.op != REDUCE_OP)):
            raise CollectiveError("a chunk's op must be copy or reduce")
        copy = self.op == COPY_OP
        bad = np.flatnonzero(copy & (nsrc != 1))
        if bad.size:
            raise CollectiveError(f"chunk {int(bad[0])}: a copy chunk has exactly one source, not "
                                  f"{'every NPU' if nsrc[bad[0]] == 0 else int(nsrc[bad[0]])}")
        bad = np.flatnonzero(~copy & (nsrc == 1))
        if bad.size:
            raise CollectiveError(f"chunk {int(bad[0])}: reduce with one source (there is nothing to combine: "
                                  "use op copy)")
        for c in np.flatnonzero(np.diff(self.src_ptr) > 1)[:1].tolist() + np.flatnonzero(
                np.diff(self.dst_ptr) > 1)[:1].tolist():
            for ptr, ids in ((self.src_ptr, self.src_ids), (self.dst_ptr, self.dst_ids)):
                s = ids[ptr[c]:ptr[c + 1]]
                if np.unique(s).size != s.size:
                    raise CollectiveError(f"chunk {c}: an NPU is listed twice")

    # ------------------------------------------------------------------ sizes and classes
    @property
    def num_chunks(self) -> int:
        return int(self.op.size)

    @property
    def copies(self) -> bool:
        return bool(np.all(self.op == COPY_OP))

    @property
    def reduces(self) -> bool:
        return bool(np.all(self.op == REDUCE_OP))

    @property
    def unicast(self) -> bool:
        """Every chunk is a copy with one source and one destination."""
        return self.copies and bool(np.all(np.diff(self.dst_ptr) == 1))

    @property
    def multicast_all(self) -> bool:
        """Every chunk is a copy every NPU needs (the TACOS case)."""
        return self.copies and bool(np.all(np.diff(self.dst_ptr) == 0))

    @property
    def one_destination(self) -> bool:
        """Every chunk has exactly one destination (a reducing table then mirrors to a copy one)."""
        return bool(np.all(np.diff(self.dst_ptr) == 1))

    @property
    def source(self) -> np.ndarray:
        """Each chunk's one source (``ALL`` -1: every NPU contributes; ``SUBSET`` -2: several, see the sets)."""
        return _one_of(self.src_ptr, self.src_ids)

    @property
    def destination(self) -> np.ndarray:
        """Each chunk's one destination (``ALL`` -1: every NPU; ``SUBSET`` -2: a subset of several)."""
        return _one_of(self.dst_ptr, self.dst_ids)

    def sources_of(self, c: int) -> np.ndarray:
        ids = self.src_ids[self.src_ptr[c]:self.src_ptr[c + 1]]
        return np.arange(self.num_npus) if ids.size == 0 else ids

    def destinations_of(self, c: int) -> np.ndarray:
        ids = self.dst_ids[self.dst_ptr[c]:self.dst_ptr[c + 1]]
        return np.arange(self.num_npus) if ids.size == 0 else ids

    def required_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(npu, chunk)`` of every pair the demand requires after the collective (a copy chunk's own source
        excluded); every-NPU destinations expanded. Computed once per demand (a portfolio asks it of every
        candidate: 0.7 s on a 64-GPU MoE layer's 1.8 M pairs); the arrays are read-only."""
        cached = self.__dict__.get("_required_pairs")
        if cached is None:
            cached = self._required_pairs_now()
            for a in cached:
                a.flags.writeable = False
            object.__setattr__(self, "_required_pairs", cached)
        return cached

    def _required_pairs_now(self) -> tuple[np.ndarray, np.ndarray]:
        n, C = self.num_npus, self.num_chunks
        counts = np.diff(self.dst_ptr)
        every = counts == 0
        chunk = np.concatenate([np.repeat(np.arange(C), counts), np.repeat(np.flatnonzero(every), n)])
        npu = np.concatenate([self.dst_ids, np.tile(np.arange(n), int(every.sum()))])
        src = self.source
        keep = ~((self.op[chunk] == COPY_OP) & (npu == src[chunk]))
        return npu[keep], chunk[keep]

    def pair_bytes(self) -> np.ndarray:
        """The N x N matrix of bytes each source sends each destination (a multicast chunk counts for each of
        its destinations; a reduce chunk for each (contributor, destination) pair), diagonal 0."""
        n = self.num_npus
        M = np.zeros((n, n))
        dv, dc = self.required_pairs()
        src = self.source
        one = src[dc] >= 0
        np.add.at(M, (src[dc[one]], dv[one]), self.chunk_bytes)
        for v, c in zip(dv[~one].tolist(), dc[~one].tolist()):
            s = self.sources_of(c)
            M[s[s != v], v] += self.chunk_bytes
        np.fill_diagonal(M, 0)
        return M

    def mirror(self) -> "Demand":
        """The copy table whose time-reversed schedule on the reversed links is this reducing one (every chunk
        one destination): sources and destinations swap (MoE combine mirrors to its dispatch)."""
        if not (self.reduces and self.one_destination):
            raise CollectiveError("only a reducing demand with one destination per chunk has a copy mirror")
        return replace(self, src_ptr=self.dst_ptr, src_ids=self.dst_ids, dst_ptr=self.src_ptr, dst_ids=self.src_ids,
                       op=np.zeros(self.num_chunks, np.int8), name=f"{self.name} (mirrored)")

    def expanded_unicast(self) -> tuple["Demand", np.ndarray]:
        """A copy table as one unicast chunk per (chunk, destination) pair, and the chunk each came from."""
        if not self.copies:
            raise CollectiveError("only a copy demand expands into unicast chunks")
        dv, dc = self.required_pairs()
        order = np.lexsort((dv, dc))
        dv, dc = dv[order], dc[order]
        k = dc.size
        ptr = np.arange(k + 1, dtype=np.int64)
        return (Demand(self.num_npus, self.chunk_bytes, ptr, self.source[dc], ptr, dv, np.zeros(k, np.int8),
                       name=f"{self.name} (per destination)"), dc)

    def with_npus(self, npus: np.ndarray, num_npus: int) -> "Demand":
        """The same table with NPU ``i`` renamed ``npus[i]`` on a network of ``num_npus`` NPUs (a part of a
        concurrent collective on its NPU group); every-NPU entries become the group."""
        npus = np.asarray(npus, np.int64)
        C = self.num_chunks

        def mapped(ptr, ids):
            counts = np.diff(ptr)
            full = counts == 0
            new_counts = np.where(full, npus.size, counts)
            new_ptr = np.concatenate([[0], np.cumsum(new_counts)]).astype(np.int64)
            new_ids = np.empty(int(new_ptr[-1]), np.int64)
            rows = np.repeat(np.arange(C), counts)
            pos = new_ptr[rows] + (np.arange(ids.size) - np.repeat(ptr[:-1], counts))
            new_ids[pos] = npus[ids]
            for c in np.flatnonzero(full).tolist():
                new_ids[new_ptr[c]:new_ptr[c + 1]] = npus
            return new_ptr, new_ids

        sp, si = mapped(self.src_ptr, self.src_ids)
        dp, di = mapped(self.dst_ptr, self.dst_ids)
        # a copy chunk lists every group member but its source as destinations
        return Demand(num_npus, self.chunk_bytes, sp, si, dp, di, self.op, self.padding_bytes, self.name, dict(self.meta))


def _one_of(ptr: np.ndarray, ids: np.ndarray) -> np.ndarray:
    counts = np.diff(ptr)
    out = np.full(counts.size, SUBSET, np.int64)
    out[counts == 0] = ALL
    one = counts == 1
    out[one] = ids[ptr[:-1][one]]
    return out


def _csr(lists) -> tuple[np.ndarray, np.ndarray]:
    counts = np.array([len(x) for x in lists], np.int64)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = np.concatenate([np.asarray(x, np.int64) for x in lists]) if len(lists) and ptr[-1] else np.zeros(0, np.int64)
    return ptr, ids


def table(num_npus: int, chunk_bytes: int, sources, destinations, ops, **kw) -> Demand:
    """A :class:`Demand` from per-chunk lists (``sources[c]``: NPU ids, an empty list for every NPU)."""
    sp, si = _csr(sources)
    dp, di = _csr(destinations)
    op = np.array([OPS.index(o) if isinstance(o, str) else int(o) for o in ops], np.int8)
    return Demand(int(num_npus), int(chunk_bytes), sp, si, dp, di, op, **kw)


# ---------------------------------------------------------------------------- constructors
def of_collective(collective, num_npus: int) -> Demand:
    """The table of a named collective (:class:`tacos_bench.collective.Collective`): its sources and
    destinations arrays, ``-1`` as every NPU."""
    n = int(num_npus)
    src = np.asarray(collective.sources(n), np.int64)
    dst = np.asarray(collective.destinations(n), np.int64)
    C = src.size
    s_one = src >= 0
    d_one = dst >= 0
    sp = np.concatenate([[0], np.cumsum(s_one)]).astype(np.int64)
    dp = np.concatenate([[0], np.cumsum(d_one)]).astype(np.int64)
    op = np.full(C, REDUCE_OP if collective.reduces else COPY_OP, np.int8)
    return Demand(n, collective.chunk_bytes(n), sp, src[s_one], dp, dst[d_one], op, name=collective.kind)


def all_to_allv(matrix, chunk_bytes: int | None = None, chunks_per_npu: int = 1) -> Demand:
    """All-to-Allv: ``matrix[s][d]`` bytes from NPU ``s`` to NPU ``d`` (the diagonal is local and ignored); a pair
    of ``D`` bytes becomes ``ceil(D / chunk_bytes)`` chunks, pairs in row-major order (``padding_bytes``: what the
    rounding adds). Default ``chunk_bytes``: the largest pair's bytes / ``chunks_per_npu``."""
    M = check_matrix(matrix)
    n = M.shape[0]
    off = M.copy()
    np.fill_diagonal(off, 0)
    if not np.any(off > 0):
        raise CollectiveError("the demand matrix is empty: every off-diagonal entry is 0")
    if chunk_bytes is None:
        chunk_bytes = max(1, int(math.ceil(float(off.max()) / int(chunks_per_npu))))
    chunk_bytes = int(chunk_bytes)
    if chunk_bytes < 1:
        raise CollectiveError(f"collective.chunk_bytes must be a positive number of bytes, got {chunk_bytes}")
    k = np.ceil(off / chunk_bytes).astype(np.int64)
    s, d = np.nonzero(k)
    reps = k[s, d]
    src = np.repeat(s, reps).astype(np.int64)
    dst = np.repeat(d, reps).astype(np.int64)
    C = src.size
    ptr = np.arange(C + 1, dtype=np.int64)
    pad = int(reps.sum() * chunk_bytes - off.sum())
    return Demand(n, chunk_bytes, ptr, src, ptr, dst, np.zeros(C, np.int8), padding_bytes=pad, name="all_to_allv")


def check_matrix(matrix, name: str = "the demand matrix") -> np.ndarray:
    """A square matrix of non-negative finite byte counts, or a one-line :class:`CollectiveError`."""
    try:
        M = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise CollectiveError(f"{name} has non-numeric entries") from None
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 2:
        raise CollectiveError(f"{name} must be square N x N with N >= 2, got shape {'x'.join(map(str, M.shape))}")
    if not np.all(np.isfinite(M)):
        i, j = map(int, np.argwhere(~np.isfinite(M))[0])
        raise CollectiveError(f"{name}: entry ({i}, {j}) is not a finite number ({M[i, j]})")
    if np.any(M < 0):
        i, j = map(int, np.argwhere(M < 0)[0])
        raise CollectiveError(f"{name}: entry ({i}, {j}) is negative ({M[i, j]:g} bytes)")
    return M


def read_matrix(path) -> np.ndarray:
    """An N x N byte matrix from a CSV without header (row = sender) or a ``.npy`` file."""
    p = Path(path)
    _check_file(p)
    if p.suffix == ".npy":
        try:
            return check_matrix(np.load(p, allow_pickle=False), f"{p.name}")
        except ValueError as e:
            raise CollectiveError(f"{p.name}: not a numpy array file ({e})") from None
    rows = []
    with p.open(newline="", encoding="utf-8-sig") as f:
        for i, row in enumerate(csv.reader(f), start=1):
            if not row or all(not x.strip() for x in row):
                continue
            try:
                rows.append([float(x) for x in row])
            except ValueError:
                raise CollectiveError(f"{p.name} line {i}: non-numeric entry "
                                      f"{next(x for x in row if not _is_number(x))!r}") from None
    if len({len(r) for r in rows}) > 1:
        raise CollectiveError(f"{p.name}: rows of different lengths ({sorted({len(r) for r in rows})})")
    return check_matrix(rows, p.name)


def _is_number(x: str) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


def _check_file(p: Path) -> None:
    if not p.exists():
        raise CollectiveError(f"no such file: {p}")
    if not p.is_file():
        raise CollectiveError(f"{p} is not a regular file")
    if p.stat().st_size > MAX_TABLE_BYTES:
        raise CollectiveError(f"{p.name} is larger than {MAX_TABLE_BYTES >> 20} MiB")


def union(parts: list[Demand]) -> tuple[Demand, np.ndarray]:
    """Several demands on one network as one table (chunks of part 0 first, ...), and each chunk's part; the
    parts must share ``chunk_bytes``."""
    sizes = {p.chunk_bytes for p in parts}
    if len(sizes) != 1:
        raise CollectiveError(f"the parts of one table must share chunk_bytes, got {sorted(sizes)}")
    n = parts[0].num_npus
    sp = [parts[0].src_ptr]
    dp = [parts[0].dst_ptr]
    for p in parts[1:]:
        sp.append(p.src_ptr[1:] + sp[-1][-1])
        dp.append(p.dst_ptr[1:] + dp[-1][-1])
    part = np.concatenate([np.full(p.num_chunks, i, np.int64) for i, p in enumerate(parts)])
    return Demand(n, parts[0].chunk_bytes, np.concatenate(sp), np.concatenate([p.src_ids for p in parts]),
                  np.concatenate(dp), np.concatenate([p.dst_ids for p in parts]),
                  np.concatenate([p.op for p in parts]), sum(p.padding_bytes for p in parts), "concurrent"), part


# ---------------------------------------------------------------------------- chunks.csv
def _ids_text(ids: np.ndarray) -> str:
    return EVERY if ids.size == 0 else " ".join(map(str, ids.tolist()))


def write_chunks_csv(demand: Demand, path) -> Path:
    """``chunks.csv``: one row per chunk, ``chunk,sources,destinations,op`` (module docstring)."""
    path = Path(path)
    sp, si, dp, di, op = demand.src_ptr, demand.src_ids, demand.dst_ptr, demand.dst_ids, demand.op
    C = demand.num_chunks
    with path.open("w", newline="") as f:
        f.write(",".join(CHUNKS_CSV_COLUMNS) + "\n")
        if np.all(np.diff(sp) <= 1) and np.all(np.diff(dp) <= 1):
            # one id or every NPU on each side (the named collectives, All-to-Allv): written column-wise
            cols = [np.arange(C).astype(str), _column(sp, si, C), _column(dp, di, C), np.array(OPS)[op]]
            f.write("\n".join(",".join(r) for r in zip(*cols)) + "\n")
        else:
            w = csv.writer(f, lineterminator="\n")
            for c in range(C):
                w.writerow((c, _ids_text(si[sp[c]:sp[c + 1]]), _ids_text(di[dp[c]:dp[c + 1]]), OPS[op[c]]))
    return path


def _column(ptr: np.ndarray, ids: np.ndarray, C: int) -> np.ndarray:
    out = np.full(C, EVERY, dtype=object)
    one = np.diff(ptr) == 1
    out[one] = ids[ptr[:-1][one]].astype(str)
    return out.astype(str)


def read_chunks_csv(path, num_npus: int, chunk_bytes: int) -> Demand:
    """A chunk table in the ``chunks.csv`` format (chunk ids 0..C-1 in order), on ``num_npus`` NPUs."""
    p = Path(path)
    _check_file(p)
    sources, dests, ops = [], [], []
    with p.open(newline="", encoding="utf-8-sig") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header is None or tuple(h.strip() for h in header) != CHUNKS_CSV_COLUMNS:
            raise CollectiveError(f"{p.name} line 1: expected the header {','.join(CHUNKS_CSV_COLUMNS)}")
        for line, row in enumerate(r, start=2):
            if not row:
                continue
            if len(row) != 4:
                raise CollectiveError(f"{p.name} line {line}: expected 4 columns, got {len(row)}")
            try:
                c = int(row[0])
            except ValueError:
                raise CollectiveError(f"{p.name} line {line}: chunk id {row[0]!r} is not an integer") from None
            if c != len(ops):
                raise CollectiveError(f"{p.name} line {line}: chunk ids must run 0, 1, 2, ... (got {c}, expected "
                                      f"{len(ops)})")
            try:
                sources.append(_parse_ids(row[1]))
                dests.append(_parse_ids(row[2]))
            except ValueError as e:
                raise CollectiveError(f"{p.name} line {line}: {e}") from None
            o = row[3].strip().lower()
            if o not in OPS:
                raise CollectiveError(f"{p.name} line {line}: op {row[3]!r} is not copy or reduce")
            ops.append(o)
    if not ops:
        raise CollectiveError(f"{p.name}: no chunk (the demand is empty)")
    try:
        return table(num_npus, chunk_bytes, sources, dests, ops, name="custom")
    except CollectiveError as e:
        raise CollectiveError(f"{p.name}: {e}") from None


def _parse_ids(text: str) -> list[int]:
    t = text.strip()
    if t == EVERY:
        return []
    if not t:
        raise ValueError("an empty id list (use * for every NPU)")
    try:
        return [int(x) for x in t.split()]
    except ValueError:
        raise ValueError(f"ids {text!r} are not space-separated integers") from None


def write_matrix_csv(matrix: np.ndarray, path) -> Path:
    """``demand.csv``: the per-pair byte matrix, row = sender, no header."""
    path = Path(path)
    np.savetxt(path, np.asarray(matrix), delimiter=",", fmt="%.17g")
    return path


def gini(x) -> float:
    """The Gini coefficient of non-negative values (0: all equal).

    >>> gini([1, 1, 1, 1]), round(gini([0, 0, 0, 4]), 3)
    (0.0, 0.75)
    """
    v = np.sort(np.asarray(x, np.float64))
    if v.size == 0 or v.sum() == 0:
        return 0.0
    i = np.arange(1, v.size + 1)
    return float((2 * (i * v).sum()) / (v.size * v.sum()) - (v.size + 1) / v.size)
