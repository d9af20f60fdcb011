"""Compact, streamable All-Gather schedules: billions of transfers on disk in a few bytes each.

A 40,000-NPU All-Gather has ``N * (N - 1)`` ≈ 1.6 billion transfers: as a
:class:`~tacos_bench.schedule.Schedule` (five 8-byte columns) that is 53 GB, as
``schedule.csv`` far more. A :class:`CompactSchedule` stores the same transfers
in 6-7 bytes each, written in bounded segments while the solver runs, read
back segment by segment, and verified in one pass by
:func:`tacos_bench.verify.compact.verify_compact`.

Format (a directory, ``FORMAT = "tacos-compact-v1"``)
------------------------------------------------------
``meta.json``
    ``format``, ``kind`` (``"all_gather"``), ``op`` (``"copy"``),
    ``num_npus``, ``num_chunks``, ``num_links``, ``num_rows``,
    ``num_events``, ``num_segments``, ``makespan_us``, ``topology`` and
    free-form ``producer`` information.
``links.npy``
    ``int32[num_links, 2]``: the ``(src, dst)`` NPUs of every link id used by
    the rows (the producer's link numbering).
``events.npy``
    ``float64[num_events]``: the event times in µs, strictly increasing. Every
    start and end time of the schedule is one of them.
``seg_000000.npz``, ``seg_000001.npz``, ...
    Uncompressed ``.npz`` segments, in order. Each holds the rows of a run of
    end events, ordered by end event (non-decreasing over the whole file):

    * ``chunk``: ``uint16`` when ``num_chunks <= 65536``, else ``uint32``;
    * ``link``: ``uint16`` when ``num_links <= 65536``, else ``uint32``, an
      index into ``links.npy``;
    * ``lag``: ``end event - start event`` (``uint8``/``uint16``/``uint32``,
      the narrowest that fits the segment);
    * ``end_first`` (scalar) and ``end_count`` (``uint32``): the first
      ``end_count[0]`` rows end at event ``end_first``, the next
      ``end_count[1]`` at ``end_first + 1``, and so on.

A row is the standard transfer ``chunk, src, dst, start_us, end_us, op`` with
``src, dst = links[link]``, ``end_us = events[e]``, ``start_us = events[e - lag]``
and ``op = copy``. :meth:`CompactSchedule.iter_rows` converts segment by segment,
:meth:`CompactSchedule.to_schedule` materializes a :class:`Schedule` (for
schedules small enough), :meth:`CompactSchedule.to_csv` writes the standard
``schedule.csv``.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> from tacos_bench.schedule import Schedule
>>> p = Problem(ring(3), Collective("all_gather", 1, 1))
>>> t = float(p.link_time_us[0])
>>> s = Schedule.from_rows([(0, 0, 1, 0, t, "copy"), (1, 1, 2, 0, t, "copy"), (2, 2, 0, 0, t, "copy"),
...                         (0, 1, 2, t, 2 * t, "copy"), (1, 2, 0, t, 2 * t, "copy"), (2, 0, 1, t, 2 * t, "copy")])
>>> cs = CompactSchedule.from_schedule(p, s)
>>> len(cs), cs.makespan_us == 2 * t, cs.num_events
(6, True, 3)
>>> cs.to_schedule().sorted().to_frame().equals(s.sorted().to_frame())
True
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Iterator

import numpy as np

from .errors import ScheduleError
from .schedule import COPY, Schedule

FORMAT = "tacos-compact-v1"
META_FILE = "meta.json"
LINKS_FILE = "links.npy"
EVENTS_FILE = "events.npy"
COMPACT_DIR = "schedule_compact"  # the name a run directory gives it


def chunk_dtype(num_chunks: int):
    return np.uint16 if num_chunks <= 1 << 16 else np.uint32


def link_dtype(num_links: int):
    return np.uint16 if num_links <= 1 << 16 else np.uint32


def _lag_dtype(max_lag: int):
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_lag <= np.iinfo(dt).max:
            return dt
    raise ScheduleError(f"a transfer spans {max_lag} events, more than the compact format holds")


def _seg_name(k: int) -> str:
    return f"seg_{k:06d}.npz"


class CompactWriter:
    """Append rows in end-event order; :meth:`close` returns the :class:`CompactSchedule`.

    Parameters
    ----------
    path : path or None
        Directory to create (it must not exist or be empty); ``None`` keeps the
        segments in memory (small schedules, tests).
    num_npus, num_chunks : int
        The All-Gather's size.
    link_src, link_dst : array_like of int
        Endpoints of every link id the rows will use.
    topology : str
        Name recorded in ``meta.json``.
    """

    def __init__(self, path, num_npus: int, num_chunks: int, link_src, link_dst, *, topology: str = ""):
        self.path = None if path is None else Path(path)
        self.num_npus, self.num_chunks = int(num_npus), int(num_chunks)
        self.links = np.stack([np.asarray(link_src, dtype=np.int32), np.asarray(link_dst, dtype=np.int32)], axis=1)
        self.num_links = len(self.links)
        self.topology = topology
        self._cdt, self._ldt = chunk_dtype(self.num_chunks), link_dtype(self.num_links)
        self._segments: list[dict] = []  # in memory only
        self._nseg = 0
        self._rows = 0
        self._last_end = -1
        self._events: list[np.ndarray] = []
        self._nevents = 0
        self._closed = False
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            if any(self.path.iterdir()):
                raise ScheduleError(f"{self.path}: compact schedule directory is not empty")
            np.save(self.path / LINKS_FILE, self.links)

    def add_events(self, times) -> None:
        """Append event times (µs), continuing the strictly increasing sequence."""
        t = np.asarray(times, dtype=np.float64).copy()
        if len(t):
            self._events.append(t)
            self._nevents += len(t)

    def append(self, chunk, link, start_event, end_event) -> None:
        """Append rows (non-decreasing ``end_event``); the arrays may be any integer dtype."""
        chunk = np.asarray(chunk)
        n = len(chunk)
        if n == 0:
            return
        end_event = np.asarray(end_event, dtype=np.int64)
        start_event = np.asarray(start_event, dtype=np.int64)
        if np.any(end_event[1:] < end_event[:-1]):
            raise ScheduleError("compact schedule rows must come in non-decreasing end-event order")
        first = int(end_event[0])
        self.append_counted(chunk, link, end_event - start_event, first, np.bincount(end_event - first))

    def append_counted(self, chunk, link, lag, end_first: int, end_count) -> None:
        """Append rows already in the segment layout: the first ``end_count[0]`` end at event ``end_first``,
        the next ``end_count[1]`` at ``end_first + 1``, ...; ``lag`` = end event - start event."""
        chunk = np.asarray(chunk)
        n = len(chunk)
        if n == 0:
            return
        lag = np.asarray(lag)
        end_count = np.asarray(end_count)
        if end_first < self._last_end:
            raise ScheduleError("compact schedule rows must come in non-decreasing end-event order")
        if int(end_count.sum()) != n or len(lag) != n:
            raise ScheduleError("compact schedule segment: end counts and rows disagree")
        if lag.min() < 0:
            raise ScheduleError("compact schedule row starts after it ends")
        first = int(end_first)
        count = end_count.astype(np.uint32)
        seg = {
            "chunk": chunk.astype(self._cdt, copy=False),
            "link": np.asarray(link).astype(self._ldt, copy=False),
            "lag": lag.astype(_lag_dtype(int(lag.max())), copy=False),
            "end_first": np.int64(first),
            "end_count": count,
        }
        if self.path is None:
            self._segments.append({k: np.array(v, copy=True) for k, v in seg.items()})
        else:
            np.savez(self.path / _seg_name(self._nseg), **seg)
        self._nseg += 1
        self._rows += n
        self._last_end = first + int(np.flatnonzero(count)[-1])

    def close(self, producer: dict | None = None) -> "CompactSchedule":
        if self._closed:
            raise ScheduleError("compact writer already closed")
        self._closed = True
        events = np.concatenate(self._events) if self._events else np.zeros(0)
        makespan = float(events[self._last_end]) if self._rows else 0.0
        meta = {
            "format": FORMAT, "kind": "all_gather", "op": "copy",
            "num_npus": self.num_npus, "num_chunks": self.num_chunks, "num_links": self.num_links,
            "num_rows": self._rows, "num_events": int(len(events)), "num_segments": self._nseg,
            "makespan_us": makespan, "topology": self.topology, "producer": producer or {},
        }
        if self.path is None:
            return CompactSchedule(None, meta, self.links, events, self._segments)
        np.save(self.path / EVENTS_FILE, events)
        tmp = self.path / (META_FILE + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2, default=_json_default) + "\n")
        tmp.replace(self.path / META_FILE)  # written last: a directory with meta.json is complete
        return CompactSchedule(self.path, meta, self.links, events)

    def abort(self) -> None:
        """Drop what was written (on error)."""
        self._closed = True
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def _json_default(v):
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()
    return str(v)


class CompactSchedule:
    """An All-Gather schedule in the compact format (on disk or in memory).

    Use :func:`read_compact` to open a directory. ``len()`` is the number of
    transfers; ``makespan_us`` the last arrival. ``is_compact`` is ``True``
    (the run pipeline dispatches on it).
    """

    is_compact = True
    storage = "compact"   # ScheduleLike: segments on disk

    def __init__(self, path, meta: dict, links: np.ndarray, events: np.ndarray, segments: list | None = None):
        self.path = None if path is None else Path(path)
        self.meta = dict(meta)
        self.links = links
        self.events = events
        self._segments = segments
        self._finalizer = None

    # ------------------------------------------------------------------ views
    @property
    def num_npus(self) -> int:
        return int(self.meta["num_npus"])

    @property
    def num_chunks(self) -> int:
        return int(self.meta["num_chunks"])

    @property
    def num_links(self) -> int:
        return int(self.meta["num_links"])

    @property
    def num_events(self) -> int:
        return int(len(self.events))

    @property
    def num_segments(self) -> int:
        return int(self.meta["num_segments"])

    def __len__(self) -> int:
        return int(self.meta["num_rows"])

    @property
    def makespan_us(self) -> float:
        return float(self.meta["makespan_us"])

    @property
    def nbytes_on_disk(self) -> int:
        if self.path is None:
            return 0
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return f"CompactSchedule({len(self)} transfers, makespan {self.makespan_us:.6g} µs, {where})"

    # ------------------------------------------------------------------ reading
    def iter_segments(self) -> Iterator[dict]:
        """The raw segments in order: dicts of ``chunk, link, lag, end_first, end_count``."""
        if self._segments is not None:
            yield from self._segments
            return
        for k in range(self.num_segments):
            f = self.path / _seg_name(k)
            try:
                with np.load(f, allow_pickle=False) as z:
                    yield {name: z[name] for name in ("chunk", "link", "lag", "end_first", "end_count")}
            except FileNotFoundError:
                raise ScheduleError(f"{f}: compact schedule segment missing")
            except (KeyError, ValueError, OSError) as e:
                raise ScheduleError(f"{f}: unreadable compact schedule segment: {e}")

    def iter_rows(self) -> Iterator[tuple[np.ndarray, ...]]:
        """Segment by segment, the standard columns ``(chunk, src, dst, start_us, end_us)``."""
        for seg in self.iter_segments():
            link = seg["link"].astype(np.int64)
            end_ev = _expand_ends(seg)
            start_ev = end_ev - seg["lag"].astype(np.int64)
            if len(link) and (link.max() >= self.num_links or start_ev.min() < 0
                              or end_ev.max() >= self.num_events):
                raise ScheduleError("compact schedule row refers to a link or event that does not exist")
            yield (seg["chunk"].astype(np.int64), self.links[link, 0].astype(np.int64),
                   self.links[link, 1].astype(np.int64), self.events[start_ev], self.events[end_ev])

    def link_ids(self, topology) -> np.ndarray:
        """The link id in ``topology`` of every row, in :meth:`iter_rows` order (-1 where it has no such link)."""
        parts = [topology.link_ids(s, d) for _, s, d, _, _ in self.iter_rows()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def keep_files(self, directory) -> "CompactSchedule":
        """:meth:`save` to ``directory`` (the run directory's ``schedule_compact/``)."""
        return self.save(directory)

    def to_schedule(self, max_rows: int | None = None) -> Schedule:
        """Materialize as a :class:`Schedule` (raises if longer than ``max_rows``)."""
        if max_rows is not None and len(self) > max_rows:
            raise ScheduleError(f"compact schedule has {len(self)} transfers, more than {max_rows} to materialize")
        parts = [Schedule(c, s, d, t0, t1, np.full(len(c), COPY, dtype=np.int8)) for c, s, d, t0, t1 in
                 self.iter_rows()]
        return Schedule.concat(parts)

    def to_csv(self, path, max_rows: int | None = None) -> Path:
        """The standard ``schedule.csv`` (canonical row order, as :meth:`Schedule.to_csv`)."""
        return self.to_schedule(max_rows).to_csv(path)

    # ------------------------------------------------------------------ files
    def save(self, path) -> "CompactSchedule":
        """Put the schedule at ``path`` (a directory): moved if this one is a temporary spool, else copied.

        Returns the schedule at its new place (``self``, updated, when moved).
        """
        path = Path(path)
        if path.exists():
            shutil.rmtree(path)
        if self.path is None:
            w = CompactWriter(path, self.num_npus, self.num_chunks, self.links[:, 0], self.links[:, 1],
                              topology=self.meta.get("topology", ""))
            w.add_events(self.events)
            for seg in self._segments:
                _write_raw_segment(w, seg)
            return w.close(self.meta.get("producer"))
        if self._finalizer is not None and self._finalizer.alive:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(self.path), str(path))
            self._finalizer.detach()
            self._finalizer = None
            self.path = path
            return self
        shutil.copytree(self.path, path)
        return read_compact(path)

    def delete(self) -> None:
        """Remove the files (a temporary spool is also removed when the object is garbage-collected)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        elif self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)

    def _own_temporary(self) -> None:
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), True)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_schedule(cls, problem, schedule: Schedule, path=None) -> "CompactSchedule":
        """The compact form of a copy-only schedule (rows reordered by end time).

        The event table is every distinct start or end time; links are the
        problem's link ids (rows on a missing link raise :class:`ScheduleError`).
        """
        if len(schedule) and np.any(schedule.op != COPY):
            raise ScheduleError("the compact format holds copy transfers only (All-Gather)")
        topo = problem.topology
        link = topo.link_ids(schedule.src, schedule.dst)
        if np.any(link < 0):
            i = int(np.flatnonzero(link < 0)[0])
            raise ScheduleError(f"row {i}: no link {int(schedule.src[i])}->{int(schedule.dst[i])} in the topology")
        events = np.unique(np.concatenate([schedule.start_us, schedule.end_us]))
        s_ev = np.searchsorted(events, schedule.start_us)
        e_ev = np.searchsorted(events, schedule.end_us)
        order = np.lexsort((schedule.chunk, link, e_ev))
        w = CompactWriter(path, problem.num_npus, problem.num_chunks, topo.src, topo.dst, topology=topo.name)
        w.add_events(events)
        w.append(schedule.chunk[order], link[order], s_ev[order], e_ev[order])
        return w.close({"from": "Schedule"})


def _write_raw_segment(w: CompactWriter, seg: dict) -> None:
    end_ev = _expand_ends(seg)
    w.append(seg["chunk"], seg["link"], end_ev - seg["lag"].astype(np.int64), end_ev)


def _expand_ends(seg: dict) -> np.ndarray:
    count = np.asarray(seg["end_count"], dtype=np.int64)
    first = int(seg["end_first"])
    if count.sum() != len(seg["chunk"]):
        raise ScheduleError("compact schedule segment: end_count does not add up to its rows")
    return np.repeat(np.arange(first, first + len(count), dtype=np.int64), count)


def read_compact(path) -> CompactSchedule:
    """Open a compact schedule directory (see the module docstring for the format)."""
    path = Path(path)
    try:
        meta = json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        raise ScheduleError(f"{path}: not a compact schedule (no {META_FILE}; incomplete or missing)")
    except json.JSONDecodeError as e:
        raise ScheduleError(f"{path / META_FILE}: not valid JSON: {e}")
    if meta.get("format") != FORMAT:
        raise ScheduleError(f"{path}: unknown compact format {meta.get('format')!r}, expected {FORMAT}")
    try:
        links = np.load(path / LINKS_FILE, allow_pickle=False)
        events = np.load(path / EVENTS_FILE, allow_pickle=False)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise ScheduleError(f"{path}: unreadable compact schedule: {e}")
    if links.ndim != 2 or links.shape[1] != 2 or events.ndim != 1:
        raise ScheduleError(f"{path}: malformed links or events table")
    return CompactSchedule(path, meta, links, events)


def spool_dir(prefix: str = "tacos-compact-") -> Path:
    """A fresh temporary directory for a compact schedule (``$TACOS_SPOOL_DIR`` or the system temp dir)."""
    base = os.environ.get("TACOS_SPOOL_DIR") or None
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
