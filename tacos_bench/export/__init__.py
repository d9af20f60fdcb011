"""Export verified schedules to formats runtimes and simulators consume.

* :func:`export_msccl` -- MSCCL-IR XML for the MSCCL runtime (NCCL / RCCL
  executors), in-place or out-of-place;
* :func:`export_json` -- the schedule and problem as versioned JSON;
* :func:`export_chakra` -- Chakra execution traces (one ``.et`` per NPU) for
  ASTRA-sim's custom-collective path; needs the ``mlc-chakra`` package;
* :func:`export_astra_sim` -- a directory that runs the schedule in ASTRA-sim
  as is (traces, workload, system/network/memory configs and ``run.sh``).

Every exporter replays the schedule with :func:`tacos_bench.verify.verify`
first. :func:`load_run` rebuilds ``(problem, schedule, record)`` from a
``run.py`` output directory; ``python -m tacos_bench.export`` is the command
line (see ``docs/export.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .common import ExportError, chunk_of_index, load_run, msccl_index
from .json_export import SCHEMA_VERSION, export_json, load_json, schedule_to_dict
from .msccl import export_msccl, export_msccl_dir, lower_msccl

FORMATS = ("msccl", "json", "chakra", "astra-sim")

__all__ = ["ExportError", "FORMATS", "SCHEMA_VERSION", "chunk_of_index", "export_astra_sim", "export_chakra",
           "export_json", "export_msccl", "export_msccl_dir", "export_to_file", "load_json", "load_run",
           "lower_msccl", "msccl_index", "schedule_to_dict"]


def export_chakra(problem, schedule, prefix, **kwargs):
    """Chakra traces ``<prefix>.<rank>.et`` (see :func:`tacos_bench.export.chakra.export_chakra`)."""
    from .chakra import export_chakra as _export_chakra

    return _export_chakra(problem, schedule, prefix, **kwargs)


def export_astra_sim(problem, schedule, out_dir, **kwargs):
    """ASTRA-sim bundle directory (see :func:`tacos_bench.export.astra_sim.export_astra_sim`)."""
    from .astra_sim import export_astra_sim as _export_astra_sim

    return _export_astra_sim(problem, schedule, out_dir, **kwargs)


def export_to_file(fmt: str, problem, schedule, out_dir: str | os.PathLike, *, record=None) -> Path:
    """Export into a run directory; returns what was written.

    ``msccl`` writes the directory ``out_dir/msccl/`` holding both the in-place
    and the out-of-place XML (usable as ``MSCCL_ALGO_DIR`` directly);
    ``json`` writes ``out_dir/schedule.json``; ``chakra`` writes
    ``out_dir/chakra/algo.<rank>.et``; ``astra-sim`` writes the directory
    ``out_dir/astra-sim/`` (run it with ``out_dir/astra-sim/run.sh PATH/TO/ASTRA-SIM-BINARY``).
    """
    out = Path(out_dir)
    fmt = str(fmt).strip().lower()
    if fmt == "msccl":
        export_msccl_dir(problem, schedule, out / "msccl")
        return out / "msccl"
    if fmt == "json":
        path = out / "schedule.json"
        path.write_text(export_json(problem, schedule, record=record))
        return path
    if fmt == "chakra":
        export_chakra(problem, schedule, out / "chakra" / "algo")
        return out / "chakra"
    if fmt in ("astra-sim", "astra_sim"):
        return export_astra_sim(problem, schedule, out / "astra-sim", record=record)
    raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
