"""What every exporter shares: the error type, loading a run directory
(:func:`tacos_bench.rundir.load_run`), the verification gate and the
chunk-to-buffer mapping.

Chunk numbering in tacos-bench is owner-minor: chunk ``c = k*N + owner``
(``k`` in ``0..cpn-1``). MSCCL (like NCCL) lays buffers out rank-major: the
All-Gather output holds rank ``r``'s ``k``-th chunk at index ``r*cpn + k``.
:func:`msccl_index` converts one to the other; every exporter that names
buffer slots uses it.
"""

from __future__ import annotations

import numpy as np

from ..errors import ExportError  # noqa: F401 - re-exported for the export modules
from ..problem import Problem
from ..rundir import load_run  # noqa: F401 - re-exported: exporters read run directories through it
from ..schedule import ScheduleLike


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


def verified(problem: Problem, schedule: ScheduleLike):
    """Replay ``schedule`` with the independent verifier; raise if it is invalid.

    Exporters call this first: a runtime must never receive an algorithm the
    verifier has not accepted. Returns the :class:`~tacos_bench.verify.Verification`.
    """
    from ..verify import verify

    if not isinstance(problem, Problem):
        raise ExportError(f"expected a Problem, got {type(problem).__name__}")
    if not isinstance(schedule, ScheduleLike):
        raise ExportError(f"expected a schedule, got {type(schedule).__name__}")
    return verify(problem, schedule.to_schedule())


def safe_name(text: str, limit: int = 200) -> str:
    """Restrict a name to characters every consumer parses verbatim (no quotes, no ``&``).

    The MSCCL runtime's XML reader does not unescape entities and caps values
    at 255 characters, so anything else becomes ``_``.

    >>> safe_name('ring8 "AG" <1>')
    'ring8__AG___1_'
    """
    out = "".join(ch if (ch.isascii() and (ch.isalnum() or ch in "._-+")) else "_" for ch in str(text))
    return (out or "algo")[:limit]
