"""Run records: one flat dict per run, written as ``result.json``.

A record is flat (scalars only) so that many of them become one tidy table
(:mod:`tacos_bench.collect`). Field names are a public contract: add, never rename.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import platform
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any, Mapping

import numpy as np

RESULT_FILE = "result.json"
SCHEDULE_FILE = "schedule.csv"
TOPOLOGY_FILE = "topology.txt"

_VERSIONED = ("numpy", "pandas", "networkx", "numba", "pulp", "highspy", "ortools", "hydra-core", "omegaconf")


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """HEAD of the checkout this package runs from (None outside git)."""
    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    commit = out.stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=5)
    return commit + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """Package versions and host, as flat ``v_*`` fields plus ``host``/``python``."""
    from importlib.metadata import PackageNotFoundError, version

    env: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version(),
                           "platform": platform.platform(terse=True)}
    for pkg in _VERSIONED:
        try:
            env[f"v_{pkg.replace('-', '_')}"] = version(pkg)
        except PackageNotFoundError:
            env[f"v_{pkg.replace('-', '_')}"] = None
    return env


def new_record(**fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "run_id": uuid.uuid4().hex[:12],
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
    }
    rec.update(fields)
    return rec


def flatten(prefix: str, mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a": 1, "b": {"c": 2}}`` -> ``{prefix+"a": 1, prefix+"b_c": 2}``; lists become JSON strings."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(key + "_", v))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(list(v), default=_json_default)
        else:
            out[key] = v
    return out


def _json_default(v: Any) -> Any:
    """numpy scalars/arrays inside lists: their Python value; anything else: its string."""
    if isinstance(v, (np.generic, np.ndarray)):
        return v.tolist()
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        v = float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, Path):
        return str(v)
    return v


def write_record(out_dir: Path, record: Mapping[str, Any]) -> Path:
    path = Path(out_dir) / RESULT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = {k: _jsonable(v) for k, v in record.items()}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(clean, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a record
    return path


def read_record(path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
