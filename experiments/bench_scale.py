"""Benchmark: All-Gather synthesis on very large topologies through ``run.py``, end to end.

    python experiments/bench_scale.py [--sizes mesh64x64 mesh100x100 mesh141x141 mesh200x200 torus40x40x25
                                       hetero40000] [--solver greedy] [--checkout DIR] [--out results/bench_scale]
                                      [--doc docs/scale.md] [--tag scale] [--keep]

Each size runs, one at a time, as its own process::

    /usr/bin/time -v python run.py solver=<solver> topo=<size> solver.progress=true hydra.run.dir=<out>/<size>

(sizes without a ``conf/topo`` file go through ``topo=named topo.name=<size>``), in the checkout ``--checkout``
(default: this repository). The table reports the wall time and peak RSS of the whole command (Python start,
imports, JIT loading, bounds, synthesis, writing the compact schedule, verification, record), the synthesis
and verification times from ``result.json``, the collective time against the lower bound of
``tacos_bench.bounds``, the size of the compact schedule on disk and whether the verifier accepted it. The
fitted growth exponent of the wall and synthesis times over the 2-D meshes (``time ∝ N^k``) is printed under
the table. The run directories (multi-GB compact schedules) are deleted after reading unless ``--keep``.

Writes ``<out>.csv`` and ``<out>.md``; with ``--doc`` it replaces the section between
``<!-- bench:scale:start -->`` and ``<!-- bench:scale:end -->`` of that markdown file. ``--from-csv`` rebuilds
the table from an earlier CSV (e.g. to merge rows measured in separate invocations, with ``--append``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = ["mesh64x64", "mesh100x100", "mesh141x141", "mesh200x200", "torus40x40x25", "hetero40000"]
FIELDS = ["topology", "num_npus", "num_links", "wall_s", "peak_rss_gib", "synthesis_time_s", "verify_time_s", "bounds_time_s",
          "collective_time_us", "lower_bound_us", "ratio_to_bound", "valid", "num_transfers", "compact_gib",
          "engine", "events", "load_avg", "command"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES)
    ap.add_argument("--solver", default="greedy", help="the run.py solver (greedy, greedy_plus, hier)")
    ap.add_argument("--tag", default="scale", help="the doc section <!-- bench:TAG:start --> ... to replace")
    ap.add_argument("--checkout", default=str(ROOT), help="repository whose run.py is measured")
    ap.add_argument("--runs", default="/tmp/tacos_bench_scale_runs", help="where the run directories go")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_scale"), help="output path prefix")
    ap.add_argument("--doc", default=None, help="markdown file whose bench section is replaced")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (compact schedules)")
    ap.add_argument("--append", action="store_true", help="merge with the rows already in <out>.csv")
    ap.add_argument("--from-csv", action="store_true", help="only rebuild the table from <out>.csv")
    ap.add_argument("--extra", nargs="*", default=[], help="more run.py overrides, e.g. seed=1")
    return ap.parse_args(argv)


def topo_overrides(checkout: Path, size: str) -> list[str]:
    if (checkout / "conf" / "topo" / f"{size}.yaml").exists():
        return [f"topo={size}"]
    return ["topo=named", f"topo.name={size}"]


def parse_time_v(text: str) -> tuple[float | None, float | None]:
    """Wall seconds and peak RSS (GiB) from ``/usr/bin/time -v`` output."""
    wall = rss = None
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
    if m:
        wall = int(m[1] or 0) * 3600 + int(m[2]) * 60 + float(m[3])
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        rss = int(m[1]) / 2**20
    return wall, rss


def run_one(args, size: str) -> dict:
    checkout = Path(args.checkout).resolve()
    run_dir = Path(args.runs) / size
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = (["/usr/bin/time", "-v", sys.executable, "run.py", f"solver={args.solver}", *topo_overrides(checkout, size),
            "solver.progress=true", f"hydra.run.dir={run_dir}"] + list(args.extra))
    shown = " ".join(["python"] + cmd[3:-1 - len(args.extra)] + list(args.extra))
    print(f"[bench_scale] {size}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=checkout, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    wall, rss = parse_time_v(proc.stderr)
    tail = "\n".join(l for l in proc.stderr.splitlines()[-60:] if "Mpair/s" not in l and "row/s" not in l)
    rec_path = run_dir / "result.json"
    rec = json.loads(rec_path.read_text()) if rec_path.exists() else {}
    if proc.returncode != 0 or not rec:
        print(tail, file=sys.stderr)
    compact_bytes = rec.get("schedule_compact_bytes")
    row = {
        "topology": size,
        "num_npus": rec.get("num_npus"),
        "num_links": rec.get("num_links"),
        "wall_s": wall if wall is not None else elapsed,
        "peak_rss_gib": rss,
        "synthesis_time_s": rec.get("synthesis_time_s"),
        "verify_time_s": rec.get("verify_time_s"),
        "bounds_time_s": rec.get("bounds_time_s"),
        "collective_time_us": rec.get("collective_time_us"),
        "lower_bound_us": rec.get("lower_bound_us"),
        "ratio_to_bound": rec.get("ratio_to_bound"),
        "valid": rec.get("valid"),
        "num_transfers": rec.get("num_transfers"),
        "compact_gib": compact_bytes / 2**30 if compact_bytes else None,
        "engine": rec.get("s_engine"),
        "events": rec.get("s_events"),
        "load_avg": os.getloadavg()[0],
        "command": shown,
        "error": rec.get("error") or (None if proc.returncode == 0 else f"exit {proc.returncode}"),
    }
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    print(f"[bench_scale] {size}: wall {row['wall_s']:.1f} s, peak RSS {row['peak_rss_gib'] or 0:.2f} GiB, "
          f"ratio {row['ratio_to_bound']}, valid {row['valid']}", flush=True)
    return row


def fit_exponent(rows, key: str) -> float | None:
    import numpy as np

    pts = [(r["num_npus"], r[key]) for r in rows
           if str(r["topology"]).startswith("mesh") and r.get(key) and r.get("num_npus")
           and len(re.findall(r"\d+", str(r["topology"]))) == 2]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def fmt(v, nd=1):
    if v is None or v != v:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def fint(v):
    """A count (CSV round trips turn them into floats when a row has none)."""
    return "–" if v is None or v != v else f"{int(v):,}"


def markdown(rows, header: str) -> str:
    lines = [header, "",
             "| topology | NPUs | links | transfers | wall s | peak RSS GiB | synthesis s | verify s | "
             "collective µs | lower bound µs | time / bound | verified | compact GiB | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['topology']} | {fint(r['num_npus'])} | {fint(r['num_links'])} | {fint(r['num_transfers'])} | "
            f"{fmt(r['wall_s'])} | {fmt(r['peak_rss_gib'], 2)} | {fmt(r['synthesis_time_s'])} | {fmt(r['verify_time_s'])} | "
            f"{fmt(r['collective_time_us'], 2)} | {fmt(r['lower_bound_us'], 2)} | {fmt(r['ratio_to_bound'], 4)} | "
            f"{fmt(r['valid'])} | {fmt(r['compact_gib'], 2)} | {fmt(r['load_avg'])} |")
    lines.append("")
    for key, what in (("wall_s", "wall time"), ("synthesis_time_s", "synthesis time")):
        k = fit_exponent(rows, key)
        if k is not None:
            lines.append(f"Fitted growth of the {what} over the 2-D meshes: ∝ N^{k:.2f} "
                         f"(the schedule itself has N² transfers).  ")
    errs = [r for r in rows if r.get("error")]
    for r in errs:
        lines.append(f"`{r['topology']}` failed: {r['error']}  ")
    lines.append("")
    lines.append("Commands (each in its own process, one at a time): " +
                 "; ".join(f"`{r['command']}`" for r in rows) + ".")
    return "\n".join(lines) + "\n"


def replace_section(doc: Path, body: str, tag: str = "scale") -> None:
    text = doc.read_text()
    start, end = f"<!-- bench:{tag}:start -->", f"<!-- bench:{tag}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"{doc}: no {start} ... {end} section")
    i, j = text.index(start) + len(start), text.index(end)
    doc.write_text(text[:i] + "\n" + body + text[j:])


def main(argv=None):
    import pandas as pd

    args = parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    old = pd.read_csv(out.with_suffix(".csv")).to_dict("records") if (
        (args.append or args.from_csv) and out.with_suffix(".csv").exists()) else []
    rows = [] if args.from_csv else [run_one(args, s) for s in args.sizes]
    if old:
        done = {r["topology"] for r in rows}
        rows = [r for r in old if r["topology"] not in done] + rows
        order = {s: i for i, s in enumerate(DEFAULT_SIZES)}
        rows.sort(key=lambda r: (order.get(r["topology"], 99), r["num_npus"] or 0))
    for r in rows:
        for k in ("error",):
            if k in r and r[k] != r[k]:
                r[k] = None
    pd.DataFrame(rows).to_csv(out.with_suffix(".csv"), index=False)
    header = (f"Measured with `python experiments/bench_scale.py` ({platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; `load avg` = 1-minute load average "
              f"when the run ended: ~2 means the run had both cores to itself, more means other jobs shared "
              f"them). All-Gather, 1 chunk per NPU, 1 GiB, " + (
                  "greedy with default options (TACOS random rule, `threads=0`: one per core)."
                  if args.solver == "greedy" else f"`solver={args.solver}` with default options (`threads=0`: "
                  "one per core)."))
    md = markdown(rows, header)
    out.with_suffix(".md").write_text(md)
    print(md)
    if args.doc:
        replace_section(Path(args.doc), md, args.tag)


if __name__ == "__main__":
    main()
