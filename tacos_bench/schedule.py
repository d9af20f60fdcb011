"""The schedule every backend returns, and its CSV form.

A schedule is a set of link transfers, stored column-wise (numpy arrays) so that
millions of transfers stay cheap. One row = one chunk crossing one directed link:

``chunk,src,dst,start_us,end_us,op``

The transfer reads the sender's state of ``chunk`` at ``start_us`` and applies
it at the receiver at ``end_us``: ``copy`` overwrites the receiver's copy,
``reduce`` adds the sender's partial sum into the receiver's.

The CSV column names and order are a public contract: never rename them. A schedule on a switched
fabric adds one optional last column, ``route``: the nodes a cut-through transfer crosses, joined by
``>`` (``0>8>3``: NPU 0 through switch 8 to NPU 3); empty for a transfer over one link.

Two types hold schedules: :class:`Schedule` (a table in memory) and
:class:`~tacos_bench.compact.CompactSchedule` (segments on disk, for All-Gathers of
hundreds of millions of transfers). Both implement :class:`ScheduleLike`, the one
protocol every consumer (verifier, run directory, exporters, runner) relies on, so
none of them asks which type it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol, runtime_checkable

import numpy as np

from .errors import ScheduleError

COLUMNS = ("chunk", "src", "dst", "start_us", "end_us", "op")
ROUTE = "route"  # the optional column of switched fabrics
OPS = ("copy", "reduce")
# Schedule.to_csv writes up to this many rows without pandas
CSV_PLAIN_MAX_ROWS = 200_000
COPY = 0
REDUCE = 1


@runtime_checkable
class ScheduleLike(Protocol):
    """What every consumer needs of a schedule, whatever holds it.

    ``storage`` names the representation (``"table"`` or ``"compact"``): a consumer that has an algorithm per
    representation (the verifier's in-memory and streaming replays) looks it up by this name; every other
    consumer uses the methods alone.
    """

    storage: str

    def __len__(self) -> int: ...

    @property
    def makespan_us(self) -> float: ...

    def iter_rows(self) -> Iterator[tuple[np.ndarray, ...]]:
        """Blocks of rows ``(chunk, src, dst, start_us, end_us)`` in order of end time."""

    def link_ids(self, topology) -> np.ndarray:
        """The link id of every row, in :meth:`iter_rows` order (-1 where the topology has no such link)."""

    def to_schedule(self, max_rows: int | None = None) -> "Schedule":
        """The schedule as a table (a compact one raises beyond ``max_rows`` rows)."""

    def to_csv(self, path, max_rows: int | None = None) -> Path:
        """The public ``schedule.csv``."""

    def keep_files(self, directory) -> "ScheduleLike":
        """Keep the files the schedule lives in under ``directory`` (nothing for a table in memory); returns
        the schedule as it now lives."""

    @property
    def nbytes_on_disk(self) -> int: ...

    def delete(self) -> None:
        """Release the files (nothing for a table in memory)."""


def _node_pair_chunk(src: np.ndarray, dst: np.ndarray, chunk: np.ndarray):
    """One sort key ordered as ``(src, dst, chunk)``: bit fields of one integer, when they fit in 63 bits (a sort
    then takes one key for three), else None."""
    if len(src) and min(int(src.min()), int(dst.min()), int(chunk.min())) >= 0:
        bn = int(max(src.max(), dst.max())).bit_length()
        bc = int(chunk.max()).bit_length()
        if 2 * bn + bc <= 63:
            return (src.astype(np.int64) << (bn + bc)) | (dst.astype(np.int64) << bc) | chunk.astype(np.int64)
    return None


@dataclass(frozen=True, eq=False)
class Schedule:
    """Column-wise list of link transfers.

    Examples
    --------
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, 1.5, "copy"), (1, 1, 0, 0.0, 1.5, "copy")])
    >>> len(s), s.makespan_us
    (2, 1.5)
    """

    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    op: np.ndarray
    route: np.ndarray | None = None  # object array of "u>s>v" strings ("" = the link src->dst); None: no routes
    # the file line each row was read from (header: line 1), so messages name what an editor shows; None: rows
    # built in memory, named by their index. Kept by take() (the same rows), dropped by anything that changes them.
    lines: np.ndarray | None = field(default=None, repr=False)

    storage = "table"   # ScheduleLike: a table in memory

    def __post_init__(self):
        cols = {
            "chunk": np.asarray(self.chunk, dtype=np.int64).ravel(),
            "src": np.asarray(self.src, dtype=np.int64).ravel(),
            "dst": np.asarray(self.dst, dtype=np.int64).ravel(),
            "start_us": np.asarray(self.start_us, dtype=np.float64).ravel(),
            "end_us": np.asarray(self.end_us, dtype=np.float64).ravel(),
            "op": np.asarray(self.op, dtype=np.int8).ravel(),
        }
        n = len(cols["chunk"])
        for k, v in cols.items():
            if len(v) != n:
                raise ScheduleError(f"schedule column {k!r} has {len(v)} rows, expected {n}")
            v.setflags(write=False)
            object.__setattr__(self, k, v)
        if n and (cols["op"].min() < 0 or cols["op"].max() >= len(OPS)):
            raise ScheduleError("schedule op codes must be 0 (copy) or 1 (reduce)")
        if isinstance(self.route, _Routes):
            route = self.route.values
        elif self.route is not None:
            route = _normalized_routes(self.route)
        if self.route is not None:
            if len(route) != n:
                raise ScheduleError(f"schedule column 'route' has {len(route)} rows, expected {n}")
            route.setflags(write=False)
            object.__setattr__(self, "route", route)
        if self.lines is not None:
            lines = np.asarray(self.lines, dtype=np.int64).ravel()
            if len(lines) != n:
                raise ScheduleError(f"schedule lines have {len(lines)} entries, expected {n}")
            lines.setflags(write=False)
            object.__setattr__(self, "lines", lines)

    def _with(self, idx=None, **cols) -> "Schedule":
        """A schedule of these columns (each replaced by ``cols`` or indexed by ``idx``), routes kept."""
        def pick(k):
            if k in cols:
                return cols[k]
            v = getattr(self, k)
            v = v if idx is None or v is None else v[idx]
            return _Routes(v) if k == ROUTE and v is not None else v
        lines = None if cols or idx is None or self.lines is None else self.lines[idx]
        return Schedule(*(pick(k) for k in COLUMNS), route=pick(ROUTE), lines=lines)

    @property
    def has_routes(self) -> bool:
        return self.route is not None

    # ------------------------------------------------------------------ construction
    @classmethod
    def empty(cls) -> "Schedule":
        z = np.zeros(0)
        return cls(z, z, z, z, z, z)

    @classmethod
    def from_rows(cls, rows) -> "Schedule":
        rows = list(rows)
        if not rows:
            return cls.empty()
        width = {len(r) for r in rows}
        if width - {6, 7}:
            raise ScheduleError("schedule rows need 6 fields (chunk, src, dst, start_us, end_us, op) or 7 (+ route)")
        route = [r[6] if len(r) == 7 else "" for r in rows] if 7 in width else None
        c, s, d, t0, t1, op = (list(x) for x in zip(*(r[:6] for r in rows)))
        return cls(c, s, d, t0, t1, [_op_code(o) for o in op], route=route)

    @classmethod
    def concat(cls, parts) -> "Schedule":
        parts = [p for p in parts if p is not None]
        if not parts:
            return cls.empty()
        route = None
        if any(p.route is not None for p in parts):
            route = _Routes(np.concatenate([p.route if p.route is not None else np.full(len(p), "", dtype=object)
                                            for p in parts]))
        return cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in COLUMNS), route=route)

    # ------------------------------------------------------------------ views
    def __len__(self) -> int:
        return int(self.chunk.shape[0])

    @property
    def makespan_us(self) -> float:
        """Last arrival time (0 for an empty schedule)."""
        return float(self.end_us.max()) if len(self) else 0.0

    def shifted(self, dt_us: float) -> "Schedule":
        return self._with(start_us=self.start_us + dt_us, end_us=self.end_us + dt_us)

    def time_reversed(self, horizon_us: float | None = None, op: int | None = None) -> "Schedule":
        """Mirror in time and direction: a transfer ``u->v`` over ``[s, e]`` becomes
        ``v->u`` over ``[T-e, T-s]`` (``T`` = makespan unless given).

        This turns an All-Gather on the reversed topology into a Reduce-Scatter.
        """
        T = self.makespan_us if horizon_us is None else float(horizon_us)
        new_op = self.op if op is None else np.full(len(self), op, dtype=np.int8)
        route = None if self.route is None else _Routes(np.array(
            [">".join(reversed(r.split(">"))) if r else "" for r in self.route.tolist()], dtype=object))
        return Schedule(self.chunk, self.dst, self.src, T - self.end_us, T - self.start_us, new_op,
                        route=route).sorted()

    def sorted(self) -> "Schedule":
        """Rows ordered by (start, end, src, dst, chunk): the canonical CSV order."""
        code = _node_pair_chunk(self.src, self.dst, self.chunk)
        ties = (self.chunk, self.dst, self.src) if code is None else (code,)
        return self.take(np.lexsort(ties + (self.end_us, self.start_us)))

    def take(self, idx) -> "Schedule":
        return self._with(idx)

    def with_chunks(self, ids) -> "Schedule":
        """The same rows, each carrying chunk ``ids[chunk]`` (a sub-problem's chunk ids mapped back to its parent's).

        >>> Schedule.from_rows([(1, 0, 1, 0.0, 1.0, "copy")]).with_chunks([7, 9]).chunk.tolist()
        [9]
        """
        return self._with(chunk=np.asarray(ids, np.int64)[self.chunk])

    def with_op(self, op) -> "Schedule":
        """The same rows with the ops ``op`` (one per row)."""
        return self._with(op=np.asarray(op, np.int8))

    def event_order(self, tol: float) -> np.ndarray:
        """The order in which a replay takes the rows' events: ``i`` is row ``i``'s arrival at its end, ``len + i``
        its read of the sender at its start; by time, an arrival within ``tol`` of a read first (a node may forward
        a chunk the instant it arrives), then by row."""
        T = len(self)
        times = np.concatenate([self.end_us - tol, self.start_us])
        kinds = np.concatenate([np.zeros(T, np.int8), np.ones(T, np.int8)])
        idx = np.concatenate([np.arange(T), np.arange(T)])
        return np.lexsort((idx, kinds, times))

    def row_name(self, i: int) -> str:
        """How messages name row ``i``: ``line 42`` for a row read from a file, else ``row 40`` (its index).

        >>> Schedule.from_rows([(0, 0, 1, 0.0, 1.5, "copy")]).row_name(0)
        'row 0'
        """
        return f"row {int(i)}" if self.lines is None else f"line {int(self.lines[int(i)])}"

    # ------------------------------------------------------------------ ScheduleLike
    def iter_rows(self) -> Iterator[tuple[np.ndarray, ...]]:
        """One block of rows ``(chunk, src, dst, start_us, end_us)`` in order of end time (stable)."""
        o = np.argsort(self.end_us, kind="stable")
        yield self.chunk[o], self.src[o], self.dst[o], self.start_us[o], self.end_us[o]

    def link_ids(self, topology) -> np.ndarray:
        """The link id of every row in :meth:`iter_rows` order (-1 where ``topology`` has no such link)."""
        o = np.argsort(self.end_us, kind="stable")
        return topology.link_ids(self.src[o], self.dst[o])

    def to_schedule(self, max_rows: int | None = None) -> "Schedule":
        """Itself: a table is already in memory (``max_rows`` limits what a compact one materializes)."""
        return self

    def keep_files(self, directory) -> "Schedule":
        """Itself: a table lives in memory and has no files to keep."""
        return self

    @property
    def nbytes_on_disk(self) -> int:
        return 0

    def delete(self) -> None:
        """Nothing to release: a table lives in memory."""

    def to_frame(self):
        """A pandas DataFrame with the public columns (``op`` as strings)."""
        import pandas as pd

        cols = {
            "chunk": self.chunk, "src": self.src, "dst": self.dst,
            "start_us": self.start_us, "end_us": self.end_us,
            "op": np.asarray(OPS, dtype=object)[self.op],
        }
        if self.route is not None:
            cols[ROUTE] = self.route
        return pd.DataFrame(cols)

    @classmethod
    def from_frame(cls, df, lines=None) -> "Schedule":
        """The schedule of a DataFrame with the public columns; ``lines``: the file line of each row (for
        messages, see :attr:`lines`)."""
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise ScheduleError(f"schedule is missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}")

        def where(i: int) -> str:
            return f"schedule row {i + 1}" if lines is None else f"line {int(lines[i])}"

        ops = df["op"].astype(str).str.strip().str.lower()
        bad = ~ops.isin(OPS)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ScheduleError(f"{where(i)}: op must be copy or reduce, got {df['op'].iloc[i]!r}")
        codes = np.where(ops.to_numpy() == "reduce", REDUCE, COPY)
        ids = {k: _int_column(df[k], k, where) for k in ("chunk", "src", "dst")}
        route = df[ROUTE].fillna("").astype(str).to_numpy(dtype=object) if ROUTE in df.columns else None
        try:
            return cls(ids["chunk"], ids["src"], ids["dst"],
                       df["start_us"].to_numpy(np.float64), df["end_us"].to_numpy(np.float64), codes, route=route,
                       lines=lines)
        except (TypeError, ValueError) as e:
            raise ScheduleError(f"schedule has a non-numeric value: {e}")

    # ------------------------------------------------------------------ files
    def to_csv(self, path) -> Path:
        """Write the public CSV form (canonical row order, round-trip float repr). Up to ``CSV_PLAIN_MAX_ROWS``
        rows with the standard library (pandas' import costs a one-run CLI about a fifth of its time), beyond
        with pandas' C writer; the two write the same bytes (tests/test_schedule_csv.py)."""
        path = Path(path)
        s = self.sorted()
        if len(s) > CSV_PLAIN_MAX_ROWS:
            s.to_frame().to_csv(path, index=False)
            return path
        import csv

        ops = np.asarray(OPS, dtype=object)[s.op].tolist()
        cols = [s.chunk.tolist(), s.src.tolist(), s.dst.tolist(), [repr(x) for x in s.start_us.tolist()],
                [repr(x) for x in s.end_us.tolist()], ops]
        head = list(COLUMNS)
        if s.route is not None:
            cols.append(s.route.tolist())
            head.append(ROUTE)
        with path.open("w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(head)
            w.writerows(zip(*cols))
        return path

    @classmethod
    def from_csv(cls, path) -> "Schedule":
        import io

        import pandas as pd

        from .errors import InputFileError
        from .inputs import read_input_bytes

        path = Path(path)
        try:
            data = read_input_bytes(path, "schedule CSV")
        except InputFileError as e:
            raise ScheduleError(f"{path}: {'no such schedule file' if e.reason == 'no such file' else e.reason}") \
                from None
        try:
            df = pd.read_csv(io.BytesIO(data), dtype={ROUTE: str}, keep_default_na=False,
                             na_values={c: [""] for c in COLUMNS})
        except Exception as e:  # pandas raises many parser error types
            raise ScheduleError(f"{path}: cannot parse schedule CSV: {e}")
        if not isinstance(df.index, pd.RangeIndex):  # pandas made the first field an index: rows too long
            raise ScheduleError(f"{path}: rows have more fields than the {len(COLUMNS)} header columns "
                                f"{','.join(COLUMNS)}")
        if list(df.columns) not in (list(COLUMNS), list(COLUMNS) + [ROUTE]):
            raise ScheduleError(f"{path}: header must be exactly {','.join(COLUMNS)} (or with a last column "
                                f"{ROUTE} on a switched fabric), got {','.join(map(str, df.columns))}")
        lines = _data_lines(data)
        return cls.from_frame(df, lines if len(lines) == len(df) else None)

    def __repr__(self) -> str:
        return f"Schedule({len(self)} transfers, makespan {self.makespan_us:.6g} µs)"


def row_text(schedule: Schedule, i: int) -> str:
    """Row ``i`` as every message names it: ``row 3 (chunk 0, 0->8 via 0>8>3, 0.000000-2.500000 µs, copy)``;
    ``line 5 (...)`` for a row read from a file (:meth:`Schedule.row_name`).

    Examples
    --------
    >>> row_text(Schedule.from_rows([(0, 0, 1, 0.0, 1.5, "copy")]), 0)
    'row 0 (chunk 0, 0->1, 0.000000-1.500000 µs, copy)'
    """
    i = int(i)
    return describe_row(schedule.row_name(i), int(schedule.chunk[i]), int(schedule.src[i]), int(schedule.dst[i]),
                        float(schedule.start_us[i]), float(schedule.end_us[i]), OPS[int(schedule.op[i])],
                        "" if schedule.route is None else schedule.route[i])


def describe_row(name: str, chunk: int, src: int, dst: int, start_us: float, end_us: float, op: str,
                 route: str = "") -> str:
    """A row named ``name`` with its fields, as :func:`row_text` writes it (for rows held in other forms)."""
    via = f" via {route}" if route else ""
    return f"{name} (chunk {chunk}, {src}->{dst}{via}, {start_us:.6f}-{end_us:.6f} µs, {op})"


def _data_lines(data: bytes) -> np.ndarray:
    """The 1-based line of every data row of CSV text ``data``: the lines after the header that are not blank
    (the CSV reader skips empty and whitespace-only lines). A quoted field spanning lines would shift them; the
    caller then finds more lines than rows and keeps row indices."""
    b = np.frombuffer(data, np.uint8)
    if not len(b):
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(b == 10)
    if b[-1] != 10:
        ends = np.append(ends, len(b))
    starts = np.concatenate([[0], ends[:-1] + 1])
    # blank: empty, or (rare, looked at one by one) starting with white space and holding nothing else
    blank = starts >= ends
    for k in np.flatnonzero(~blank & np.isin(b[np.minimum(starts, len(b) - 1)], (9, 13, 32))).tolist():
        blank[k] = not data[starts[k]:ends[k]].strip()
    return (np.flatnonzero(~blank) + 1)[1:]


def _int_column(col, name: str, where=lambda i: f"schedule row {i + 1}") -> np.ndarray:
    """An id column as int64; blank, fractional, boolean or out-of-range values raise ScheduleError
    (``where(i)`` names row ``i``)."""
    import pandas as pd

    if col.dtype == np.int64:
        return col.to_numpy(copy=True)
    num = pd.to_numeric(col, errors="coerce").astype("float64")
    is_bool = np.array([isinstance(v, (bool, np.bool_)) for v in col], dtype=bool)
    bad = (num.isna() | (num != np.floor(num)) | (num.abs() >= 2.0**63)).to_numpy() | is_bool
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ScheduleError(f"{where(i)}: {name} must be an integer id, got {col.iloc[i]!r}")
    return num.to_numpy().astype(np.int64)


def _op_code(op) -> int:
    if isinstance(op, str):
        key = op.strip().lower()
        if key not in OPS:
            raise ScheduleError(f"op must be copy or reduce, got {op!r}")
        return OPS.index(key)
    return int(op)


def row_links(topology, schedule) -> list[np.ndarray]:
    """The link ids each row of ``schedule`` occupies on ``topology``: its route's links (a row through
    ``cut_through`` switches of a fabric), or the link ``src -> dst``."""
    routes = schedule.route if getattr(schedule, "route", None) is not None else [""] * len(schedule)
    out = []
    for s, d, r in zip(schedule.src.tolist(), schedule.dst.tolist(), routes):
        if r:
            nodes = [int(x) for x in r.split(">")]
            out.append(topology.link_ids(nodes[:-1], nodes[1:]))
        else:
            out.append(topology.link_ids([s], [d]))
    return out


class _Routes:
    """A route column already normalized (an object array of ``str``, "" for the link itself): a schedule takes it
    as it is (a column of another schedule, or :func:`route_column`'s)."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray):
        self.values = values


def _normalized_routes(route) -> np.ndarray:
    """``route`` as an object array of ``str``: None and NaN (an empty CSV cell) as "", anything else as ``str``."""
    return np.array(["" if r is None or (isinstance(r, float) and r != r) else str(r)
                     for r in np.asarray(route, dtype=object).ravel()], dtype=object)


def route_column(routes, codes) -> _Routes:
    """A route column for :class:`Schedule`: row ``i`` takes ``routes[codes[i]]``. Only the (few) distinct routes
    are normalized, not every row, so a producer of millions of rows over a few routes pays for the routes.

    >>> s = Schedule([0, 1], [0, 1], [1, 0], [0, 0], [1, 1], [0, 0], route=route_column(["0>2>1", None], [0, 1]))
    >>> s.route.tolist()
    ['0>2>1', '']
    """
    return _Routes(_normalized_routes(routes)[np.asarray(codes, dtype=np.int64)])



def route_column_of(names) -> _Routes:
    """A route column from each row's route name (the distinct names normalized once, as :func:`route_column`).

    >>> route_column_of(["0>2>1", "", "0>2>1"]).values.tolist()
    ['0>2>1', '', '0>2>1']
    """
    routes, codes = np.unique(np.asarray(names, dtype=object), return_inverse=True)
    return route_column(routes, codes)
