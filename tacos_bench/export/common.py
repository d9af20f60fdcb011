"""What every exporter shares: the error type, loading a run directory, the
verification gate and the chunk-to-buffer mapping.

Chunk numbering in tacos-bench is owner-minor: chunk ``c = k*N + owner``
(``k`` in ``0..cpn-1``). MSCCL (like NCCL) lays buffers out rank-major: the
All-Gather output holds rank ``r``'s ``k``-th chunk at index ``r*cpn + k``.
:func:`msccl_index` converts one to the other; every exporter that names
buffer slots uses it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..collective import Collective
from ..errors import ExportError  # noqa: F401 - re-exported for the export modules
from ..problem import Problem
from ..schedule import Schedule

RESULT_FILE = "result.json"
SCHEDULE_FILE = "schedule.csv"



def msccl_index(chunk, num_npus: int, chunks_per_npu: int):
    """Rank-major buffer index of tacos-bench chunk ``c = k*N + owner``: ``owner*cpn + k``.

    Works on scalars and numpy arrays.

    Examples
    --------
    >>> [msccl_index(c, 4, 2) for c in range(8)]
    [0, 2, 4, 6, 1, 3, 5, 7]
    """
    c = np.asarray(chunk) if not isinstance(chunk, (int, np.integer)) else int(chunk)
    return (c % num_npus) * chunks_per_npu + c // num_npus


def chunk_of_index(index, num_npus: int, chunks_per_npu: int):
    """Inverse of :func:`msccl_index`: buffer index ``r*cpn + k`` -> chunk ``k*N + r``.

    >>> [chunk_of_index(i, 4, 2) for i in range(8)]
    [0, 4, 1, 5, 2, 6, 3, 7]
    """
    i = np.asarray(index) if not isinstance(index, (int, np.integer)) else int(index)
    return (i % chunks_per_npu) * num_npus + i // chunks_per_npu


def verified(problem: Problem, schedule: Schedule):
    """Replay ``schedule`` with the independent verifier; raise if it is invalid.

    Exporters call this first: a runtime must never receive an algorithm the
    verifier has not accepted. Returns the :class:`~tacos_bench.verify.Verification`.
    """
    from ..verify import verify

    if not isinstance(problem, Problem):
        raise ExportError(f"expected a Problem, got {type(problem).__name__}")
    if not isinstance(schedule, Schedule):
        raise ExportError(f"expected a Schedule, got {type(schedule).__name__}")
    return verify(problem, schedule)


def load_run(result_dir: str | os.PathLike):
    """Rebuild ``(problem, schedule, record)`` from a directory written by ``run.py``.

    The directory holds ``result.json`` (the run record), ``schedule.csv`` and
    the topology file the record names in ``topology_file`` (TACOS edge list,
    read with :func:`tacos_bench.io.load_topology`). The rebuilt problem is
    checked against the record (NPU count, link count, chunk size), so a
    stale or foreign file is caught here rather than exported.

    Raises
    ------
    ExportError
        Missing files, a run without a schedule, or a record that does not
        match the rebuilt problem.
    """
    from ..io import load_topology
    from ..records import read_record

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
    if record.get("status") == "error":
        raise ExportError(f"{d}: the run failed ({record.get('error')}); nothing to export")
    if record.get("valid") is False:
        raise ExportError(f"{d}: the run's schedule was rejected by the verifier; nothing to export")
    topo_name = record.get("topology_file")
    if not topo_name:
        raise ExportError(f"{rec_path}: the record names no topology_file, so the problem cannot be rebuilt")
    topo_path = d / str(topo_name)
    if not topo_path.is_file():
        raise ExportError(f"{d}: topology file {topo_name!r} named by the record is missing")
    sched_name = record.get("schedule_file") or SCHEDULE_FILE
    sched_path = d / str(sched_name)
    if not sched_path.is_file():
        raise ExportError(f"{d}: no {sched_name} (the run saved no schedule; rerun with schedule_csv=always)")
    for key in ("collective", "chunks_per_npu", "buffer_mib"):
        if record.get(key) is None:
            raise ExportError(f"{rec_path}: field {key!r} is missing")

    topo = load_topology(topo_path)
    if record.get("topology"):
        topo = topo.with_name(str(record["topology"]))
    coll = Collective(kind=str(record["collective"]), chunks_per_npu=int(record["chunks_per_npu"]),
                      buffer_mib=float(record["buffer_mib"]))
    problem = Problem(topo, coll)
    for key, have in (("num_npus", problem.num_npus), ("num_links", problem.num_links),
                      ("chunk_bytes", problem.chunk_bytes)):
        want = record.get(key)
        if want is not None and int(want) != int(have):
            raise ExportError(f"{d}: record says {key}={want} but the rebuilt problem has {have}")
    schedule = Schedule.from_csv(sched_path)
    return problem, schedule, record


def safe_name(text: str, limit: int = 200) -> str:
    """Restrict a name to characters every consumer parses verbatim (no quotes, no ``&``).

    The MSCCL runtime's XML reader does not unescape entities and caps values
    at 255 characters, so anything else becomes ``_``.

    >>> safe_name('ring8 "AG" <1>')
    'ring8__AG___1_'
    """
    out = "".join(ch if (ch.isascii() and (ch.isalnum() or ch in "._-+")) else "_" for ch in str(text))
    return (out or "algo")[:limit]
