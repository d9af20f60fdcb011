"""Aggregate run records into one tidy table.

    python -m tacos_bench.collect DIR [DIR ...] [-o results.parquet]

Finds every ``result.json`` below the given directories and writes one row per
run to parquet (and CSV, for humans). Rows are ordered by sweep directory and
job number (numerically, not by path, so job 10 follows job 9).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pandas as pd

from .rundir import RESULT_FILE

log = logging.getLogger(__name__)

# Integer columns that may be missing in some rows: nullable so they stay integers.
_INT_COLUMNS = ("job_num", "seed", "num_npus", "num_links", "chunks_per_npu", "num_chunks", "chunk_bytes",
                "num_transfers", "threads")


def find_records(*dirs) -> list[Path]:
    paths: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_file() and d.name == RESULT_FILE:
            paths.append(d)
        else:
            paths.extend(d.rglob(RESULT_FILE))
    return paths


def load_records(paths) -> pd.DataFrame:
    rows = []
    for p in paths:
        try:
            rec = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            log.warning("skipping unreadable record %s: %s", p, e)
            continue
        rec.setdefault("record_path", str(p))
        rows.append(rec)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    for c in _INT_COLUMNS:
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    sweep = df["record_path"].map(lambda s: str(Path(s).parent.parent))
    job = df["job_num"] if "job_num" in df.columns else pd.Series(pd.NA, index=df.index, dtype="Int64")
    df = df.assign(_sweep=sweep, _job=job).sort_values(["_sweep", "_job", "record_path"], na_position="last")
    return df.drop(columns=["_sweep", "_job"]).reset_index(drop=True)


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Columns that mix types across runs (e.g. None and str) become strings for parquet."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            kinds = {type(v) for v in out[c].dropna()}
            if len(kinds) > 1:
                out[c] = out[c].map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))
    return out


def count_failed(df: pd.DataFrame) -> int:
    """Runs without a verified schedule: solver/input errors and schedules the verifier rejected."""
    if df.empty or "status" not in df:
        return 0
    valid = df["valid"].astype("boolean").fillna(False) if "valid" in df else False
    return int(((df["status"] == "error") | ~valid).sum())


def collect(dirs, output=None) -> pd.DataFrame:
    """Load all records below ``dirs``; write ``output`` (.parquet) and a .csv twin if given."""
    df = load_records(find_records(*dirs))
    if output is not None and not df.empty:
        output = Path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        _parquet_safe(df).to_parquet(output, index=False)
        df.to_csv(output.with_suffix(".csv"), index=False)
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tacos_bench.collect", description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="directories holding result.json files (searched recursively)")
    ap.add_argument("-o", "--output", default=None, help="parquet file to write (default: DIR/results.parquet)")
    args = ap.parse_args(argv)
    out = args.output or str(Path(args.dirs[0]) / "results.parquet")
    missing = [d for d in args.dirs if not Path(d).exists()]
    if missing:
        print(f"collect: error: no such directory: {missing[0]}", file=sys.stderr)
        return 2
    df = collect(args.dirs, out)
    if df.empty:
        print(f"collect: error: no {RESULT_FILE} found under {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    print(f"collected {len(df)} runs ({count_failed(df)} without a verified schedule) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
