"""Benchmark: synthesis time and quality of the greedy TACOS matcher, against the C++ reference.

    python experiments/bench_greedy.py [--sizes mesh16x16 mesh32x32 mesh40x40 torus8x8x16]
                                       [--configs default tight window4] [--repeat 3] [--cold-jit]
                                       [--out results/bench_greedy] [--doc docs/greedy.md]
    python experiments/bench_greedy.py --suite quality [--seeds 5] [--doc docs/greedy.md]
    python experiments/bench_greedy.py --suite hetero [--seeds 5] [--doc docs/greedy.md]

``--suite speed`` (default): All-Gather, 1 chunk per NPU, 1 GiB, 50 GiB/s and 0.5 µs per link (the
reference's setting). Every run goes through the pipeline's one path, ``tacos_bench.runner.solve_and_verify``:
``synthesis_time_s`` is the wall time of ``solve()`` alone (Python start-up and the numba JIT warm-up are
measured once and reported separately), every schedule is verified, and the collective time is compared
with the per-NPU ingress bound and both with ``../shared/reference/tacos_cpp_measured.csv`` (its
``synthesis_s`` and ``steps``).

``--suite quality``: steps against the ingress step bound over seeds on homogeneous meshes, tori and
hypercubes. ``--suite hetero``: collective time of the three ways of handling a chunk that a faster link
could deliver while it is in flight on a slower one (``duplicates``/``preempt``), on heterogeneous topologies.

Each suite writes ``<out>_<suite>.csv``, ``.parquet`` and ``.md``; with ``--doc`` it also replaces the section
between ``<!-- bench:<suite>:start -->`` and ``<!-- bench:<suite>:end -->`` in that markdown file.

Configurations: ``default`` = the TACOS rules (random chunk order, earliest-finish tie-break, maximal
matching, every candidate); ``tight`` = ``chunk_order=rarest, matching=maximum``; ``window4`` = the
default with ``window=4``; ``tight_window4``; or ``key=value,key=value`` for anything else.
"""

from __future__ import annotations

import time

_T_START = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_CSV = ROOT.parent / "shared" / "reference" / "tacos_cpp_measured.csv"
DEFAULT_SIZES = ["mesh16x16", "mesh32x32", "mesh40x40", "torus8x8x16"]
TIGHT = {"chunk_order": "rarest", "matching": "maximum"}
CONFIGS = {"default": {}, "tight": TIGHT, "window4": {"window": 4}, "tight_window4": {**TIGHT, "window": 4}}
QUALITY_SIZES = ["mesh8x8", "mesh16x16", "mesh4x4x4", "mesh8x8x4", "torus4x4x4", "torus8x8x4", "bhypercube16",
                 "bhypercube64", "bhypercube256", "torus4x4", "torus6x6", "torus8x8", "torus16x16", "torus5x7",
                 "torus32x32", "mesh8x8x16", "bhypercube1024"]
HETERO_SIZES = ["hetero_mesh8x8", "hetero_mesh16x16", "hetero512", "dragonfly4x4"]
DUP_MODES = {"forbid": {}, "duplicate": {"duplicates": True}, "preempt": {"duplicates": True, "preempt": True}}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("speed", "quality", "hetero"), default="speed")
    ap.add_argument("--sizes", nargs="+", default=None,
                    help="named topologies (tacos_bench.topology.named.named_topology), e.g. mesh40x40 torus8x8x16")
    ap.add_argument("--configs", nargs="+", default=None,
                    help="greedy settings: default, tight, window4, tight_window4, greedy_plus (its options), "
                         "or key=value,key=value")
    ap.add_argument("--repeat", type=int, default=3, help="speed: timed runs per (topology, config); min kept")
    ap.add_argument("--seeds", type=int, default=5, help="quality/hetero: seeds 0..k-1 per (topology, config)")
    ap.add_argument("--seed", type=int, default=0, help="speed: the seed of the timed runs")
    ap.add_argument("--cold-jit", action="store_true",
                    help="compile the kernels from scratch (empty numba cache) to time the JIT itself")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_greedy"), help="output path prefix")
    ap.add_argument("--doc", default=None, help="markdown file whose bench section is replaced")
    args = ap.parse_args(argv)
    defaults = {"speed": (DEFAULT_SIZES, ["default", "tight", "window4"]),
                "quality": (QUALITY_SIZES, ["default", "tight", "tight_window4"]),
                "hetero": (HETERO_SIZES, ["default", "tight"])}[args.suite]
    args.sizes = args.sizes or defaults[0]
    args.configs = args.configs or defaults[1]
    return args


def config_options(name: str) -> dict:
    if name in CONFIGS:
        return dict(CONFIGS[name])
    if name == "greedy_plus":   # every option where solver=greedy_plus differs from solver=greedy
        from dataclasses import fields

        from solvers.greedy import GreedyOptions, GreedyPlusOptions

        a, b = GreedyOptions(), GreedyPlusOptions()
        return {f.name: getattr(b, f.name) for f in fields(b) if getattr(a, f.name) != getattr(b, f.name)}
    opts = {}
    for kv in name.split(","):
        if "=" not in kv:
            raise SystemExit(f"bad --configs entry {name!r}: use {', '.join(CONFIGS)}, greedy_plus or "
                             "key=value,key=value")
        k, v = kv.split("=", 1)
        v = v.strip()
        opts[k.strip()] = int(v) if v.isdigit() else {"true": True, "false": False}.get(v.lower(), v)
    return opts


def reference_key(topo_name: str) -> str | None:
    """Row label of the reference CSV for one of our named topologies (1 chunk per NPU)."""
    import re

    m = re.fullmatch(r"(mesh|torus)(\d+(?:x\d+)*)", topo_name)
    if m:
        dims = m[2].split("x")
        if m[1] == "mesh":
            return f"mesh2d {m[2]}" if len(dims) == 2 else f"hypercube3d {m[2]}" if len(dims) == 3 else None
        return f"torus{len(dims)}d {m[2]}" if len(dims) in (2, 3) else None
    m = re.fullmatch(r"b?hypercube(\d+)", topo_name)
    if m:
        return f"binary hypercube (bhypercube_{m[1]})"
    m = re.fullmatch(r"hetero_mesh(\d+x\d+)", topo_name)
    if m:
        return f"mesh2d_hetero {m[1]} (x 50, y 100 GiB/s)"
    return None


def load_reference():
    import pandas as pd

    if not REFERENCE_CSV.exists():
        return {}
    df = pd.read_csv(REFERENCE_CSV)
    df = df[(df["chunks_per_npu"] == 1) & (df["chunk_bytes"] == (2**30) // df["npus"])]
    return {row["topology"]: row for _, row in df.iterrows()}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def fit_exponent(npus, seconds) -> float | None:
    import numpy as np

    x, y = np.log(np.asarray(npus, float)), np.log(np.asarray(seconds, float))
    if len(x) < 2 or np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


def _num(v):
    """A float, or None for missing values (pandas NaN included)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def main(argv=None):
    args = parse_args(argv)
    if args.cold_jit:
        import atexit
        import shutil

        cache = tempfile.mkdtemp(prefix="bench_greedy_numba_")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        os.environ["NUMBA_CACHE_DIR"] = cache
    sys.path.insert(0, str(ROOT))
    t0 = time.perf_counter()
    import pandas as pd

    from solvers.greedy import warmup

    import_s = time.perf_counter() - t0
    jit_s = warmup()
    startup = {"python_startup_s": t0 - _T_START, "import_s": import_s, "jit_warmup_s": jit_s,
               "cold_jit": bool(args.cold_jit)}
    print(f"start-up: imports {import_s:.2f} s, numba JIT warm-up {jit_s:.2f} s "
          f"({'compiled from scratch' if args.cold_jit else 'from the numba cache when present'})", flush=True)
    rows, md = {"speed": run_speed, "quality": run_quality, "hetero": run_hetero}[args.suite](args, startup)
    df = pd.DataFrame(rows)
    out = Path(f"{args.out}_{args.suite}")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out.with_suffix(".csv"), index=False)
    try:
        df.to_parquet(out.with_suffix(".parquet"), index=False)
    except ImportError:  # no parquet engine: the CSV is the record
        pass
    out.with_suffix(".md").write_text(md)
    if args.doc:
        replace_section(Path(args.doc), args.suite, md)
    print(md)


def _command(args) -> str:
    cmd = f"python experiments/bench_greedy.py --suite {args.suite} --sizes " + " ".join(args.sizes)
    cmd += " --configs " + " ".join(args.configs)
    cmd += f" --repeat {args.repeat}" if args.suite == "speed" else f" --seeds {args.seeds}"
    return cmd + (" --cold-jit" if args.cold_jit else "")


def _header(args) -> str:
    return (f"Command: `{_command(args)}` ({platform.machine()}, {os.cpu_count()} cores shared with other jobs, "
            f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}).\n\n")


def _table(rows, cols) -> list[str]:
    lines = ["| " + " | ".join(h for _, h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for key, _, f in cols:
            v = r.get(key)
            cells.append("–" if v is None or (isinstance(v, float) and v != v) else f(v))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _problem(name):
    from tacos_bench import Collective, Problem
    from tacos_bench.topology.named import named_topology

    return Problem(named_topology(name), Collective("all_gather", 1, 1024.0))


def _run(problem, opts: dict, seed: int, bounds: bool = False) -> dict:
    """One verified greedy run through the pipeline's path; a schedule the verifier rejects stops the benchmark."""
    from tacos_bench.runner import solve_and_verify

    rec, _ = solve_and_verify(problem, "greedy", {**opts, "seed": seed, "progress": False}, bounds=bounds)
    if not rec["valid"]:
        raise SystemExit(f"{problem.topology.name} {opts}: {rec['error']}")
    return rec


def run_speed(args, startup):
    import numpy as np

    ref = load_reference()
    rows = []
    for name in args.sizes:
        problem = _problem(name)
        topo = problem.topology
        step_us = float(problem.link_time_us.min())
        r = ref.get(reference_key(topo.name))
        for cfg in args.configs:
            opts = config_options(cfg)
            load = os.getloadavg()[0]
            recs = [_run(problem, opts, args.seed, bounds=(i == 0)) for i in range(max(1, args.repeat))]
            times = [x["synthesis_time_s"] for x in recs]
            rec = recs[0]
            row = {
                "topology": topo.name, "npus": topo.num_npus, "links": topo.num_links, "config": cfg,
                "options": ",".join(f"{k}={x}" for k, x in opts.items()) or "TACOS rules",
                "synthesis_time_s": min(times), "synthesis_median_time_s": float(np.median(times)), "repeats": len(times),
                "valid": rec["valid"], "verify_time_s": rec["verify_time_s"], "transfers": rec["num_transfers"],
                "collective_time_us": rec["collective_time_us"], "lower_bound_us": rec["lower_bound_us"],
                "steps": round(rec["collective_time_us"] / step_us, 3) if topo.is_homogeneous else None,
                "ingress_steps": rec["lb_ingress_steps"],
                "ref_steps": None if r is None else _num(r["steps"]),
                "ref_allgather_us": None if r is None else _num(r["allgather_us"]),
                "ref_synthesis_s": None if r is None else _num(r["synthesis_s"]),
                "events": rec["s_events"], "candidates": rec["s_candidates"],
                "peak_rss_mib": peak_rss_mib(), "load_avg_1min": load,
            }
            row["speedup_vs_ref"] = (row["ref_synthesis_s"] / row["synthesis_time_s"]
                                     if row["ref_synthesis_s"] and row["synthesis_time_s"] > 0 else None)
            rows.append(row)
            print(f"{topo.name:14s} {cfg:14s} synthesis {row['synthesis_time_s']:8.3f} s (median "
                  f"{row['synthesis_median_time_s']:.3f}), {row['collective_time_us']:.3f} µs"
                  + (f" = {row['steps']:g} steps (bound {row['ingress_steps']})" if row["steps"] else "")
                  + (f"; reference {row['ref_synthesis_s']:.2f} s" if row["ref_synthesis_s"] else ""), flush=True)
    f3, f2, g = (lambda v: f"{v:.3f}"), (lambda v: f"{v:.2f}"), (lambda v: f"{v:g}")
    cols = [("topology", "topology", str), ("npus", "NPUs", str), ("config", "config", str),
            ("synthesis_time_s", "synthesis s", f3), ("synthesis_median_time_s", "median s", f3),
            ("ref_synthesis_s", "C++ ref s", f2), ("speedup_vs_ref", "speed-up", lambda v: f"{v:.0f}×"),
            ("steps", "steps", g), ("ingress_steps", "ingress bound", g), ("ref_steps", "C++ ref steps", g),
            ("verify_time_s", "verify s", f3), ("peak_rss_mib", "peak RSS MiB", lambda v: f"{v:.0f}"),
            ("load_avg_1min", "load avg", lambda v: f"{v:.1f}")]
    lines = [_header(args).rstrip("\n"), ""] + _table(rows, cols) + [""]
    lines.append(f"Start-up, not included above: Python {startup['python_startup_s']:.2f} s, imports "
                 f"{startup['import_s']:.2f} s, numba JIT warm-up {startup['jit_warmup_s']:.2f} s "
                 f"({'cold compile' if startup['cold_jit'] else 'numba cache'}).")
    for cfg in args.configs:
        mesh = [r for r in rows if r["config"] == cfg and r["topology"].startswith("mesh")
                and r["topology"].count("x") == 1]
        e = fit_exponent([r["npus"] for r in mesh], [r["synthesis_time_s"] for r in mesh]) if len(mesh) >= 2 else None
        if e is not None:
            lines.append(f"Fitted growth of the synthesis time over the {len(mesh)} 2-D meshes, `{cfg}`: "
                         f"∝ N^{e:.2f} (the schedule itself has N² transfers).")
    lines.append("Every schedule was replayed by `tacos_bench.verify` (verify s). `synthesis s` is the minimum "
                 "over the repeats; the load average shows how busy the shared machine was.")
    return rows, "\n".join(lines) + "\n"


def run_quality(args, startup):
    from tacos_bench.bounds import lower_bounds

    ref = load_reference()
    rows = []
    for name in args.sizes:
        problem = _problem(name)
        bound = lower_bounds(problem)["ingress_steps"]
        step_us = float(problem.link_time_us.min())
        r = ref.get(reference_key(problem.topology.name))
        row = {"topology": problem.topology.name, "npus": problem.num_npus, "ingress_steps": bound,
               "ref_steps": None if r is None else _num(r["steps"])}
        for cfg in args.configs:
            st = [_run(problem, config_options(cfg), s)["collective_time_us"] / step_us for s in range(args.seeds)]
            row[f"{cfg}_min"], row[f"{cfg}_max"] = min(st), max(st)
            row[f"{cfg}_at_bound"] = sum(abs(x - bound) < 1e-6 for x in st)
        rows.append(row)
        print(row, flush=True)
    cols = [("topology", "topology", str), ("npus", "NPUs", str), ("ingress_steps", "ingress bound", str),
            ("ref_steps", "C++ ref", lambda v: f"{v:g}")]
    for cfg in args.configs:
        cols.append((f"{cfg}_min", f"{cfg} min–max", None))
        cols.append((f"{cfg}_at_bound", f"{cfg} at bound", None))
    for r in rows:
        for cfg in args.configs:
            r[f"{cfg}_range"] = f"{r[f'{cfg}_min']:g}–{r[f'{cfg}_max']:g}"
            r[f"{cfg}_hits"] = f"{r[f'{cfg}_at_bound']}/{args.seeds}"
    cols = [c if c[2] else ((c[0].replace("_min", "_range").replace("_at_bound", "_hits")), c[1], str) for c in cols]
    body = _table(rows, cols)
    opts = "; ".join(f"`{c}` = {config_options(c) or 'TACOS rules'}" for c in args.configs)
    text = (_header(args) + "Collective time in link times (steps), over seeds 0.."
            f"{args.seeds - 1} (one run each, no restarts), against the per-NPU ingress step bound "
            "(`tacos_bench.bounds`) and the C++ reference's steps. " + opts + ".\n\n" + "\n".join(body) + "\n")
    return rows, text


def run_hetero(args, startup):
    import numpy as np

    from tacos_bench.bounds import lower_bounds

    ref = load_reference()
    rows = []
    for name in args.sizes:
        problem = _problem(name)
        lb = lower_bounds(problem)["best_us"]
        r = ref.get(reference_key(problem.topology.name))
        for cfg in args.configs:
            for mode, mopts in DUP_MODES.items():
                ms, wasted, cancelled = [], [], []
                for s in range(args.seeds):
                    rec = _run(problem, {**config_options(cfg), **mopts}, s)
                    ms.append(rec["collective_time_us"])
                    wasted.append(rec["s_wasted_link_time_us"])
                    cancelled.append(rec["s_cancelled_transfers"])
                rows.append({"topology": problem.topology.name, "npus": problem.num_npus, "config": cfg,
                             "in_flight": mode, "min_us": min(ms), "mean_us": float(np.mean(ms)),
                             "lower_bound_us": lb, "min_over_bound": min(ms) / lb,
                             "ref_us": None if r is None else _num(r["allgather_us"]),
                             "wasted_link_us": float(np.mean(wasted)), "cancelled": float(np.mean(cancelled))})
                print(rows[-1], flush=True)
    f2 = lambda v: f"{v:.2f}"  # noqa: E731
    cols = [("topology", "topology", str), ("config", "config", str), ("in_flight", "in flight", str),
            ("min_us", "min µs", f2), ("mean_us", "mean µs", f2), ("lower_bound_us", "lower bound µs", f2),
            ("min_over_bound", "min / bound", lambda v: f"{v:.4f}"), ("ref_us", "C++ ref µs (non-causal)", f2),
            ("wasted_link_us", "wasted link µs", lambda v: f"{v:.0f}"),
            ("cancelled", "cancelled", lambda v: f"{v:.0f}")]
    text = (_header(args) + f"All-Gather, 1 GiB, over seeds 0..{args.seeds - 1}; every schedule verified. "
            "`forbid`: a chunk in flight to v is never sent to v again (default); `duplicate`: a faster link may "
            "send it again, the slower copy is wasted; `preempt`: the slower copy is withdrawn and its link "
            "freed at once. Wasted link µs and cancelled transfers are means per run.\n\n"
            + "\n".join(_table(rows, cols)) + "\n")
    return rows, text


def replace_section(path: Path, suite: str, md: str) -> None:
    start, end = f"<!-- bench:{suite}:start -->", f"<!-- bench:{suite}:end -->"
    text = path.read_text() if path.exists() else ""
    block = f"{start}\n{md}{end}"
    if start in text and end in text:
        a, b = text.index(start), text.index(end) + len(end)
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
