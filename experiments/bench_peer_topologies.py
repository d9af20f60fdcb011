"""Benchmark: the greedy family on real topologies from peers' repositories, next to each source's own figure.

    python experiments/bench_peer_topologies.py [--chunks 1 4 16 64] [--topologies mi250_forestcoll ...]
                                                [--quick] [--no-nominal] [--out results/bench_peer_topologies]
                                                [--doc docs/peer_topologies.md]

The topologies are the edge lists of ``data/topologies/peer/`` written by
``experiments/convert_peer_topologies.py`` (its ``sources.json`` names each source: repository, commit, file,
function, and the source's published optimum or measured time). Problem: All-Gather, 1 GiB output
(``buffer_mib=1024``), 1/4/16/64 chunks per NPU, bandwidths in GiB/s converted from the sources' GB/s, latency as
the source gives it. Every schedule goes through ``tacos_bench.runner.solve_and_verify`` (replayed by the
verifier; an invalid one stops the benchmark). Configurations, all in one process:

* ``greedy`` (the TACOS rule) and ``greedy_plus``, seeds 0..4;
* the greedy grid of ``conf/experiment/ablation.yaml`` (study (c), ``experiments/study_ablation.py``: chunk order
  x link tie-break x matching x restarts), over its seeds;
* the rule ablation of ``experiments/study_ablation.py`` (``RULES``, each on the TACOS base, restarts 1), seeds 0..2;
* issue 22's configuration ``greedy chunk_order=rarest matching=maximum restarts=8``.

The cut bound is ``tacos_bench.bounds.lower_bounds``'s ``cut_us`` (chunked, latency-aware) and ``cut_bw_us``
(ForestColl's fluid form). Also run, unless ``--no-nominal``: issue 22's setting, the sources' GB/s numbers read
as GiB/s (the issue's 'before' figures were measured so), for the MI250 node and the DGX-1, and a unit-scale check
(the MI250 node with every bandwidth times 1, 2, 10^9/2^30, 3, 1.1).

Writes ``<out>.csv`` (every run), ``<out>_summary.csv`` and ``<out>.md``; with ``--doc`` also replaces the section
between ``<!-- bench:peer:start -->`` and ``<!-- bench:peer:end -->`` of that markdown file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "topologies" / "peer"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BUFFER_MIB = 1024.0
TIGHT = {"chunk_order": "rarest", "matching": "maximum"}
# issue 22's "before" figures (nominal units: the sources' GB/s read as GiB/s), MI250 node, latency 0
ISSUE22 = {"greedy_plus": {4: 3750.000, 16: 3261.719, 64: 3007.812},
           "tight": {4: 3437.500, 16: 3046.875, 64: 2958.984},   # 64: with restarts 8
           "cut": {4: 3125.000, 16: 2968.750, 64: 2929.688}, "forestcoll": 2916.7}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--topologies", nargs="+", default=None, help="names in data/topologies/peer/sources.json")
    ap.add_argument("--data", default=str(DATA), help="directory of the converted topologies")
    ap.add_argument("--quick", action="store_true", help="seed 0 only, a few grid points (smoke run)")
    ap.add_argument("--no-nominal", dest="nominal", action="store_false",
                    help="skip issue 22's nominal-unit reproduction")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_peer_topologies"))
    ap.add_argument("--doc", default=None, help="markdown file whose bench section is replaced")
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------------------ configurations
def grid_configs(quick: bool) -> tuple[list[dict], list[int]]:
    """The greedy grid of study (c), read from conf/experiment/ablation.yaml so the two stay the same."""
    from itertools import product

    from omegaconf import OmegaConf

    params = OmegaConf.load(ROOT / "conf" / "experiment" / "ablation.yaml").hydra.sweeper.params
    axes = {k.split(".", 1)[1]: [_value(v) for v in str(params[k]).split(",")]
            for k in params if k.startswith("solver.")}
    seeds = [int(s) for s in str(params["seed"]).split(",")]
    if quick:
        axes = {k: v[:1] if k in ("link_tiebreak", "restarts") else v[:2] for k, v in axes.items()}
        seeds = seeds[:1]
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in product(*(axes[k] for k in keys))], seeds


def rule_configs(quick: bool) -> tuple[list[tuple[str, dict]], list[int]]:
    """The rule ablation of study (c): each variant on the TACOS base, as ``rule_sweeps`` runs it."""
    from study_ablation import RULES, TACOS

    fixed = {"restarts": 1, "matching": "greedy", "link_tiebreak": "earliest_finish"}
    names = ["TACOS rule (greedy)", "greedy_plus rules"] if quick else list(RULES)
    out = [(n, {**fixed, **{k: _value(v) for k, v in {**TACOS, **RULES[n]}.items()}}) for n in names]
    return out, [0] if quick else [0, 1, 2]


def _value(v):
    v = str(v).strip()
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def _label(opts: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in opts.items()) or "defaults"


PLUS_WITHOUT = [("rarest", "rarest_candidate"), ("trees", "tree_candidate"), ("decomposition", "decompose"),
                ("tacos", "tacos_candidate")]


def plan(quick: bool) -> list[tuple[str, str, str, dict, int]]:
    """(family, label, solver, options, seed) of every run on one problem."""
    base_seeds = [0] if quick else [0, 1, 2, 3, 4]
    runs = [("greedy", "greedy (TACOS rule)", "greedy", {}, s) for s in base_seeds]
    runs += [("greedy_plus", "greedy_plus", "greedy_plus", {}, s) for s in base_seeds]
    # greedy_plus with one All-Gather candidate off (seed 0): what each adds
    runs += [("plus_without", name, "greedy_plus", {opt: False}, 0) for name, opt in PLUS_WITHOUT]
    runs += [("issue", "greedy rarest+maximum, restarts 8", "greedy", {**TIGHT, "restarts": 8}, 0)]
    grid, seeds = grid_configs(quick)
    runs += [("grid", _label(o), "greedy", o, s) for o in grid for s in seeds]
    rules, rseeds = rule_configs(quick)
    runs += [("rules", n, "greedy", o, s) for n, o in rules for s in rseeds]
    return runs


# -------------------------------------------------------------------------------------------------- runs
def load_sources(data: Path) -> dict:
    path = data / "sources.json"
    if not path.exists():
        raise SystemExit(f"{path} not found: run python experiments/convert_peer_topologies.py first")
    return json.loads(path.read_text(encoding="utf-8"))


def nominal(topo):
    """The same topology with the sources' GB/s numbers read as GiB/s (issue 22's setting)."""
    import numpy as np

    from tacos_bench.topology.model import Topology

    bw = np.round(np.asarray(topo.bw_GiBps, float) * 2**30 / 1e9, 6)
    return Topology(topo.num_npus, topo.src, topo.dst, bw, topo.lat_us, name=topo.name + "_nominal",
                    meta=dict(topo.meta))


SCALES = [("1 (issue 22)", 1.0), ("2", 2.0), ("10^9/2^30 (GB -> GiB)", 10**9 / 2**30), ("3", 3.0), ("1.1", 1.1)]
SCALE_CONFIGS = [("greedy_plus", "greedy_plus", {}), ("greedy (TACOS rule)", "greedy", {}),
                 ("greedy rarest+maximum", "greedy", TIGHT)]


def scale_sensitivity(topo_nominal, chunks: list[int]) -> list[dict]:
    """The same problem with every bandwidth multiplied by one factor: the exact schedule time scales by 1/f, so
    time x f should not move. It does not for factors that are not powers of two (ties between floating-point
    times break differently)."""
    from tacos_bench import Collective, Problem
    from tacos_bench.topology.model import Topology

    rows = []
    for label, f in SCALES:
        t = Topology(topo_nominal.num_npus, topo_nominal.src, topo_nominal.dst, topo_nominal.bw_GiBps * f,
                     topo_nominal.lat_us, name=f"{topo_nominal.name}_x{f:g}")
        for c in chunks:
            p = Problem(t, Collective("all_gather", c, BUFFER_MIB))
            for name, solver, opts in SCALE_CONFIGS:
                rec = run_one(p, solver, opts, 0)
                rows.append({"topology": topo_nominal.name, "scale": label, "factor": f, "chunks_per_npu": c,
                             "config": name, "time_x_factor_us": rec["collective_time_us"] * f})
    return rows


def run_one(problem, solver: str, opts: dict, seed: int) -> dict:
    from tacos_bench.runner import solve_and_verify

    rec, _ = solve_and_verify(problem, solver, {**opts, "seed": seed, "progress": False}, bounds=False)
    if not rec.get("valid"):
        raise SystemExit(f"{problem.topology.name} {solver} {opts} seed {seed}: schedule rejected: {rec.get('error')}")
    return rec


def bench_problem(topo, chunks: int, runs, sink: list, units: str) -> dict:
    from tacos_bench import Collective, Problem
    from tacos_bench.bounds import lower_bounds

    problem = Problem(topo, Collective("all_gather", chunks, BUFFER_MIB))
    lb = lower_bounds(problem)
    t0 = time.perf_counter()
    for family, label, solver, opts, seed in runs:
        rec = run_one(problem, solver, opts, seed)
        sink.append({"topology": topo.name, "units": units, "chunks_per_npu": chunks, "family": family,
                     "config": label, "solver": solver, "seed": seed, "collective_time_us": rec["collective_time_us"],
                     "synthesis_time_s": rec["synthesis_time_s"], "verify_time_s": rec.get("verify_time_s"),
                     "valid": rec["valid"], "cut_us": lb["cut_us"], "cut_bw_us": lb["cut_bw_us"],
                     "lower_bound_us": lb["best_us"], "lower_bound_source": lb["best_source"]})
    print(f"  {topo.name:26s} {chunks:3d} chunks/NPU: {len(runs)} verified runs in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return lb


def summarize(df, sources: dict):
    """One row per (topology, units, chunks)."""
    import pandas as pd

    rows = []
    for (topo, units, c), g in df.groupby(["topology", "units", "chunks_per_npu"], sort=False):
        name = topo.removesuffix("_nominal")
        pubs = sources["topologies"][name]["published"]

        def at(family, label=None, seed=0, g=g):
            x = g[(g.family == family) & (g.seed == seed) & ((g.config == label) if label else True)]
            return float(x.collective_time_us.min()) if len(x) else None

        plus = g[g.family == "greedy_plus"]
        gp = at("greedy_plus")
        grid, rules = g[g.family == "grid"], g[g.family == "rules"]
        singles = g[g.family.isin(["greedy", "grid", "rules", "issue"])]
        best = singles.loc[singles.collective_time_us.idxmin()]
        tight1 = grid[(grid.config == _label({"chunk_order": "rarest", "link_tiebreak": "earliest_finish",
                                               "matching": "maximum", "restarts": 1})) & (grid.seed == 0)]
        eps = 1e-6 * gp
        row = {
            "topology": name, "units": units, "chunks_per_npu": c,
            "cut_us": g.cut_us.iloc[0], "cut_bw_us": g.cut_bw_us.iloc[0], "lower_bound_us": g.lower_bound_us.iloc[0],
            "greedy_us": at("greedy"), "greedy_plus_us": gp,
            "greedy_plus_min_us": float(plus.collective_time_us.min()),
            "greedy_plus_max_us": float(plus.collective_time_us.max()),
            "greedy_plus_synthesis_s": float(plus[plus.seed == 0].synthesis_time_s.iloc[0]),
            "tight_r1_us": float(tight1.collective_time_us.iloc[0]) if len(tight1) else None,
            "tight_r8_us": at("issue"),
            "best_grid_us": float(grid.collective_time_us.min()) if len(grid) else None,
            "best_rules_us": float(rules.collective_time_us.min()) if len(rules) else None,
            "best_single_us": float(best.collective_time_us),
            "best_single": f"{best.family}: {best.config} (seed {best.seed})",
            "single_runs": len(singles),
            "single_runs_faster_than_plus": int((singles.collective_time_us < gp - eps).sum()),
            "grid_configs_faster_than_plus": int(grid[grid.collective_time_us < gp - eps].config.nunique()),
            **{f"plus_without_{n}_us": at("plus_without", n) for n, _ in PLUS_WITHOUT},
        }
        applicable = [(p["who"].split(" (")[0], p["us_nominal"] if units == "nominal" else p["us_1gib"])
                      for p in pubs if p["chunks_per_npu"] in (None, c)]
        row["published"] = " · ".join(f"{who} {us:.1f}" for who, us in applicable) or None
        row["published_us"] = min((us for _, us in applicable), default=None)
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------ report
def _f(v, spec=".1f"):
    return "–" if v is None or math.isnan(v) else format(v, spec)


def report(summary, sources: dict, args, elapsed_s: float, n_runs: int, scales=None) -> str:
    cmd = "python experiments/bench_peer_topologies.py" + (" --quick" if args.quick else "") + (
        "" if args.chunks == [1, 4, 16, 64] else " --chunks " + " ".join(map(str, args.chunks))) + (
        "" if args.nominal else " --no-nominal")
    lines = [f"Command: `{cmd}` ({platform.machine()}, {os.cpu_count()} cores shared with other jobs, Python "
             f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; {n_runs} verified runs in "
             f"{elapsed_s:.0f} s, one process).", ""]
    faith = summary[summary.units == "GiB"]
    lines += ["All-Gather, 1 GiB output, bandwidths converted to GiB/s, latency as the source gives it; times in µs. "
              "`greedy`, `greedy_plus`: seed 0 (`greedy_plus` over seeds 0–4 in brackets when they differ); "
              "`rarest+max`: `greedy chunk_order=rarest matching=maximum`, restarts 1 / 8; `best single`: the "
              "fastest run of any single greedy configuration (TACOS rule, study (c)'s grid over its 5 seeds, its "
              "rule ablation over 3 seeds, rarest+max r8); `faster`: how many of the grid's 48 configurations "
              "have a seed faster than `greedy_plus` (seed 0). `cut`: `lower_bounds` `cut_us` (chunked); `fluid`: "
              "`cut_bw_us` (ForestColl's form, any chunking); `published`: the source's own figure for this "
              "problem, scaled to 1 GiB (see the sources below); the last column divides by the smallest.", ""]
    head = ["topology", "chunks/NPU", "cut", "fluid", "published", "greedy", "greedy_plus", "rarest+max r1 / r8",
            "best single", "faster", "greedy_plus / best single", "greedy_plus / published"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in faith.iterrows():
        gp = _f(r.greedy_plus_us, ".3f")
        if abs(r.greedy_plus_max_us - r.greedy_plus_min_us) > 1e-6 * r.greedy_plus_us:
            gp += f" [{r.greedy_plus_min_us:.3f}–{r.greedy_plus_max_us:.3f}]"
        pub = r.published_us if r.published_us is not None and r.published_us == r.published_us else None
        pub_cell = r.published if isinstance(r.published, str) else "–"
        lines.append("| " + " | ".join([
            r.topology, str(r.chunks_per_npu), _f(r.cut_us, ".3f"), _f(r.cut_bw_us, ".3f"), pub_cell,
            _f(r.greedy_us, ".3f"), gp, f"{_f(r.tight_r1_us, '.3f')} / {_f(r.tight_r8_us, '.3f')}",
            _f(r.best_single_us, ".3f"), str(r.grid_configs_faster_than_plus),
            _f(r.greedy_plus_us / r.best_single_us, ".4f"),
            _f(r.greedy_plus_us / pub if pub else None, ".4f")]) + " |")
    lines += ["", "The fastest single configuration per row:", ""]
    for _, r in faith.iterrows():
        lines.append(f"- {r.topology}, {r.chunks_per_npu}/NPU: {r.best_single_us:.3f} µs — {r.best_single}")
    lines += ["", "What each of `greedy_plus`'s All-Gather candidates adds (seed 0, GiB/s): its time with that "
              "candidate off, over its time with every candidate (1.0000: the candidate did not decide the row).", "",
              "| topology | chunks/NPU | greedy_plus | " + " | ".join(f"without {n}" for n, _ in PLUS_WITHOUT) + " |",
              "|" + "---|" * (3 + len(PLUS_WITHOUT))]
    for _, r in faith.iterrows():
        cells = [_f(r[f"plus_without_{n}_us"] / r.greedy_plus_us, ".4f") for n, _ in PLUS_WITHOUT]
        lines.append(f"| {r.topology} | {r.chunks_per_npu} | {r.greedy_plus_us:.3f} | " + " | ".join(cells) + " |")
    nom = summary[summary.units == "nominal"]
    if len(nom):
        lines += ["", "### Issue 22's setting (the sources' GB/s numbers read as GiB/s)", "",
                  "The issue measured with the bandwidth numbers taken as GiB/s (50 GB/s read as 50 GiB/s), "
                  "latency 0; its figures, and ours in that setting:", "",
                  "| topology | chunks/NPU | cut (issue) | cut | greedy_plus (issue) | greedy_plus | rarest+max "
                  "(issue) | rarest+max r1 / r8 | best single | faster | published |", "|" + "---|" * 11]
        for _, r in nom.iterrows():
            c = r.chunks_per_npu
            mi = r.topology == "mi250_forestcoll"
            iss = (lambda k, c=c, mi=mi: _f(ISSUE22[k].get(c), ".3f") if mi else "–")
            lines.append("| " + " | ".join([
                r.topology, str(c), iss("cut"), _f(r.cut_us, ".3f"), iss("greedy_plus"), _f(r.greedy_plus_us, ".3f"),
                iss("tight"), f"{_f(r.tight_r1_us, '.3f')} / {_f(r.tight_r8_us, '.3f')}",
                _f(r.best_single_us, ".3f"), str(r.grid_configs_faster_than_plus),
                r.published if isinstance(r.published, str) else "–"]) + " |")
    if scales is not None and len(scales):
        cs = sorted(scales.chunks_per_npu.unique())
        lines += ["", f"### Unit-scale sensitivity ({scales.topology.iloc[0].removesuffix('_nominal')}, nominal "
                  "bandwidths x factor, latency 0)", "",
                  "Multiplying every bandwidth by f divides every exact schedule time by f, so time x f (µs, "
                  "below) should not depend on f. It does only for powers of two, which leave every floating-point "
                  "comparison unchanged; other factors round the link times differently, and the greedy's "
                  "choices (ties between equal finish times, most likely) come out differently.", "",
                  "| configuration (seed 0) | factor | " + " | ".join(f"{c}/NPU" for c in cs) + " |",
                  "|" + "---|" * (2 + len(cs))]
        for (cfg, lab), g in scales.groupby(["config", "scale"], sort=False):
            vals = [g[g.chunks_per_npu == c].time_x_factor_us.iloc[0] for c in cs]
            lines.append(f"| {cfg} | {lab} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    lines += ["", "Every schedule above was replayed by the verifier (`tacos_bench.runner.solve_and_verify`). "
              "Synthesis time of `greedy_plus` (seed 0): " + ", ".join(
                  f"{r.topology} {r.chunks_per_npu}/NPU {r.greedy_plus_synthesis_s:.3f} s"
                  for _, r in faith.iterrows()) + "."]
    return "\n".join(lines) + "\n"


def replace_section(path: Path, md: str) -> None:
    start, end = "<!-- bench:peer:start -->", "<!-- bench:peer:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else f"{start}\n{end}\n"
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no {start} ... {end} section to replace")
    a, rest = text.split(start, 1)
    _, b = rest.split(end, 1)
    path.write_text(f"{a}{start}\n{md}{end}{b}", encoding="utf-8")


def main(argv=None):
    args = parse_args(argv)
    import pandas as pd

    from solvers.greedy import warmup
    from tacos_bench.topology.io import load_topology

    data = Path(args.data)
    sources = load_sources(data)
    names = args.topologies or list(sources["topologies"])
    t_jit = time.perf_counter()
    warmup()
    print(f"numba warm-up {time.perf_counter() - t_jit:.1f} s (not counted)", flush=True)
    runs = plan(args.quick)
    rows: list[dict] = []
    t0 = time.perf_counter()
    for name in names:
        topo = load_topology(data / sources["topologies"][name]["file"])
        variants = [("GiB", topo)]
        if args.nominal and name in ("mi250_forestcoll", "dgx1_sccl"):
            variants.append(("nominal", nominal(topo)))
        for units, t in variants:
            for c in args.chunks:
                bench_problem(t, c, runs, rows, units)
    scales = None
    if args.nominal and "mi250_forestcoll" in names:
        topo = nominal(load_topology(data / sources["topologies"]["mi250_forestcoll"]["file"]))
        scales = pd.DataFrame(scale_sensitivity(topo, [c for c in args.chunks if c > 1] or args.chunks))
    elapsed = time.perf_counter() - t0
    df = pd.DataFrame(rows)
    n_runs = len(df) + (0 if scales is None else len(scales))
    summary = summarize(df, sources)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out.with_suffix(".csv"), index=False)
    summary.to_csv(out.parent / (out.name + "_summary.csv"), index=False)
    md = report(summary, sources, args, elapsed, n_runs, scales)
    if scales is not None:
        scales.to_csv(out.parent / (out.name + "_scales.csv"), index=False)
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    if args.doc:
        replace_section(Path(args.doc), md)
    print(md)


if __name__ == "__main__":
    main()
