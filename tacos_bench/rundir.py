"""The run directory: the one module that knows its layout.

A run (``run.py``, a study job, a benchmark) writes into one directory:

=====================  ==================================================================
``result.json``        the flat record (always, also when the run fails)
``schedule.csv``       the verified schedule (``chunk,src,dst,start_us,end_us,op``)
``schedule_compact/``  very large All-Gathers in the compact format (:mod:`tacos_bench.compact`)
``topology.txt``       the topology as an edge list, so exports and replays can rebuild the problem
``traceback.txt``      only after an internal error (a bug, not bad input)
=====================  ==================================================================

Writers (:func:`prepare`, :func:`write_record`, :func:`save_schedule`) and the
reader (:func:`load_run`) live side by side so the two cannot drift apart.

Examples
--------
>>> import tempfile
>>> from tacos_bench import Collective, Problem, Schedule
>>> from tacos_bench.topology.generators import ring
>>> p = Problem(ring(2), Collective("all_gather", 1, 1))
>>> t = float(p.link_time_us[0])
>>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
>>> d = tempfile.mkdtemp()
>>> _, files = save_schedule(d, p, s)
>>> _ = write_record(d, {"status": "feasible", "valid": True, "collective": "all_gather", "chunks_per_npu": 1,
...                      "buffer_mib": 1.0, "topology": "ring2", **files})
>>> problem, schedule, record = load_run(d)
>>> len(schedule), problem.topology.name
(2, 'ring2')
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .collective import DEMAND_KINDS, Collective, reloaded_kind
from .compact import COMPACT_DIR
from .errors import ExportError
from .problem import Problem
from .schedule import Schedule

RESULT_FILE = "result.json"
SCHEDULE_FILE = "schedule.csv"
TOPOLOGY_FILE = "topology.txt"
TRACEBACK_FILE = "traceback.txt"

__all__ = ["RESULT_FILE", "SCHEDULE_FILE", "TOPOLOGY_FILE", "TRACEBACK_FILE", "COMPACT_DIR", "prepare",
           "write_record", "read_record", "save_schedule", "load_run"]


def prepare(out_dir) -> Path:
    """Create ``out_dir`` and remove what an earlier run in it left behind (never the record itself)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (TRACEBACK_FILE, SCHEDULE_FILE, TOPOLOGY_FILE):
        (out_dir / stale).unlink(missing_ok=True)
    shutil.rmtree(out_dir / COMPACT_DIR, ignore_errors=True)
    return out_dir


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, Path):
        return str(v)
    return v


def write_record(out_dir, record: Mapping[str, Any]) -> Path:
    """Write ``result.json`` atomically (a reader never sees half a record)."""
    path = Path(out_dir) / RESULT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = {k: _jsonable(v) for k, v in record.items()}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(clean, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def read_record(path) -> dict[str, Any]:
    """A record from ``result.json`` (or the directory holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT_FILE
    return json.loads(path.read_text())


def save_schedule(out_dir, problem: Problem, schedule, *, csv: str = "auto", csv_max_rows: int = 20_000_000,
                  topology_max_links: int = 2_000_000):
    """Write the schedule (and the topology) into the run directory.

    A :class:`~tacos_bench.compact.CompactSchedule` is first moved into
    ``schedule_compact/``; ``schedule.csv`` is written for ``csv="always"``, or
    for ``"auto"`` up to ``csv_max_rows`` transfers. Returns the schedule as it
    now lives (compact ones are re-homed) and the record fields naming the files.
    """
    out_dir = Path(out_dir)
    fields: dict[str, Any] = {}
    schedule = schedule.keep_files(out_dir / COMPACT_DIR)
    if schedule.nbytes_on_disk:
        fields.update(schedule_compact_dir=COMPACT_DIR, schedule_compact_bytes=schedule.nbytes_on_disk)
    if csv == "always" or (csv == "auto" and len(schedule) <= csv_max_rows):
        schedule.to_csv(out_dir / SCHEDULE_FILE)
        fields["schedule_file"] = SCHEDULE_FILE
    else:
        fields["schedule_file"] = None
    if problem.num_links <= topology_max_links:
        from .topology.io import save_topology

        save_topology(problem.topology, out_dir / TOPOLOGY_FILE)
        fields["topology_file"] = TOPOLOGY_FILE
    return schedule, fields


def load_run(result_dir: str | os.PathLike):
    """Rebuild ``(problem, schedule, record)`` from a run directory.

    The directory holds ``result.json`` (the run record), ``schedule.csv`` and
    the topology file the record names in ``topology_file`` (an edge list,
    read with :func:`tacos_bench.topology.io.load_topology`). The rebuilt problem is
    checked against the record (NPU count, link count, chunk size), so a
    stale or foreign file is caught here rather than exported.

    Raises
    ------
    ExportError
        Missing files, a run without a schedule, or a record that does not
        match the rebuilt problem.
    """
    d = Path(result_dir)
    problem, record = load_run_problem(d)
    if record.get("status") == "error":
        raise ExportError(f"{d}: the run failed ({record.get('error')}); nothing to export")
    if record.get("valid") is False:
        raise ExportError(f"{d}: the run's schedule was rejected by the verifier; nothing to export")
    sched_name = record.get("schedule_file") or SCHEDULE_FILE
    sched_path = d / str(sched_name)
    if not sched_path.is_file():
        raise ExportError(f"{d}: no {sched_name} (the run saved no schedule; rerun with schedule_csv=always)")
    schedule = Schedule.from_csv(sched_path)
    return problem, schedule, record


def _table_problem(d: Path, topo, record: dict, table: str) -> Problem:
    """A chunk-table run's problem from its ``chunks.csv`` (a concurrent run comes back as its one union table,
    ``custom``: the parts are not in the file, the demand is)."""
    from .demand import read_chunks_csv

    path = d / table
    if not path.is_file():
        raise ExportError(f"{d}: chunk table {table!r} named by the record is missing")
    demand = read_chunks_csv(path, topo.num_npus, int(record["chunk_bytes"]))
    kind = str(record["collective"])
    coll = Collective(reloaded_kind(kind), demand=demand)
    return Problem(topo, coll)


def _release_of(record: dict) -> tuple:
    """The late NPUs of a run's record (``release_us``: JSON text or a list), so a replay holds them too."""
    r = record.get("release_us")
    if isinstance(r, str):
        r = json.loads(r)
    return tuple((int(v), float(t)) for v, t in (r or ()))


def load_run_problem(result_dir: str | os.PathLike) -> tuple[Problem, dict[str, Any]]:
    """The problem of a run directory, rebuilt from its record and topology file (see :func:`load_run`), and
    the record; whatever the run's outcome."""
    from .topology.io import load_topology

    d = Path(result_dir)
    if not d.is_dir():
        raise ExportError(f"{d}: not a directory (expected a run directory with {RESULT_FILE})")
    rec_path = d / RESULT_FILE
    if not rec_path.is_file():
        raise ExportError(f"{d}: no {RESULT_FILE}; is this a run directory?")
    try:
        record = read_record(rec_path)
    except ValueError as e:
        raise ExportError(f"{rec_path}: not valid JSON: {e}") from None
    topo_name = record.get("topology_file")
    if not topo_name:
        raise ExportError(f"{rec_path}: the record names no topology_file, so the problem cannot be rebuilt")
    topo_path = d / str(topo_name)
    if not topo_path.is_file():
        raise ExportError(f"{d}: topology file {topo_name!r} named by the record is missing")
    # a chunk-table collective: its table is the run's chunks.csv (a named collective's chunks.csv is its own table)
    table = record.get("chunks_file") if record.get("collective") in DEMAND_KINDS else None
    for key in ("collective", "chunk_bytes") if table else ("collective", "chunks_per_npu", "buffer_mib"):
        if record.get(key) is None:
            raise ExportError(f"{rec_path}: field {key!r} is missing")

    topo = load_topology(topo_path)
    if record.get("topology"):
        topo = topo.with_name(str(record["topology"]))
    if table:
        problem = _table_problem(d, topo, record, str(table))
        release = _release_of(record)
        return (Problem(topo, replace(problem.collective, release=release)) if release else problem), record
    extra = {} if record.get("overlap") is None else {"overlap": bool(record["overlap"])}
    extra["release"] = _release_of(record)
    if record.get("root") is not None:   # rooted collectives: without it the problem is rebuilt with root 0
        extra["root"] = int(record["root"])
    coll = Collective(kind=str(record["collective"]), chunks_per_npu=int(record["chunks_per_npu"]),
                      buffer_mib=float(record["buffer_mib"]), **extra)
    problem = Problem(topo, coll)
    for key, have in (("num_npus", problem.num_npus), ("num_links", problem.num_links),
                      ("chunk_bytes", problem.chunk_bytes)):
        want = record.get(key)
        if want is not None and int(want) != int(have):
            raise ExportError(f"{d}: record says {key}={want} but the rebuilt problem has {have}")
    return problem, record
