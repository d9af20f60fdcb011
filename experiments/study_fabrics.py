"""Study: switched fabrics: the unwound switch against the switched model, in-network multicast and reduction,
oversubscription, greedy_plus against every baseline, and ASTRA-sim's Switch(N).

    python experiments/study_fabrics.py [--jobs 2] [--quick] [--out DIR] [--docs DIR] [--plot-only] [--no-astra]
                                        [--cpsat S]

Every run goes through the pipeline's one path, ``tacos_bench.runner.solve_and_verify``: the fabric lower
bounds (``tacos_bench.bounds.lower_bounds``), the solve, and the verifier's replay (``tacos_bench.verify.check``)
of the schedule. No figure is taken from a schedule the verifier did not accept; a run that raises (a
``SolverError``, a refused case, anything else) or is rejected is kept as an error row with its message, and the
sweep goes on. Flat rows, benchopt style: one per (topology, collective, chunks, size, solver, seed).

Parts (a case can belong to several; each case runs once):

1. ``unwound``: ``switch8`` (the switch unwound into a fully connected graph of 50/7 GiB/s links) against
   ``switched8`` (one cut-through switch, 50 GiB/s ports, 0.5 µs): Broadcast and Reduce of 8 chunks, Gather,
   Scatter, All-to-All, All-Gather, All-Reduce of 1 chunk per NPU (pair), 1 MiB and 1 GiB.
2. ``in_network``: ``switched8`` against ``switched8_nvls`` (the switch multicasts and reduces): All-Gather,
   Broadcast, Reduce-Scatter, Reduce, All-Reduce with 1, 4 and 16 chunks per NPU (Broadcast/Reduce: chunks),
   1 MiB and 1 GiB; the ``nvls`` baseline where it applies.
3. ``oversub``: 1:1 against 2:1: ``dgx_h100x4`` / ``dgx_h100x4_2to1`` and ``leafspine4x8`` /
   ``leafspine4x8_2to1``, as the public generators build them (spines at the port rate,
   ``fabrics.default_spines``: ceil(ports / ratio) spines, every leaf-spine link one port's bandwidth);
   All-Gather, All-to-All, All-Reduce, 1 and 4 chunks per NPU, 1 MiB and 1 GiB. (The first version of these
   fabrics modelled a leaf's uplink bundle as one fat link, which hid the oversubscription; they are now
   port-rate spines, docs/fabric_clusters.md.)
4. every case above: greedy_plus against greedy and every baseline whose capabilities cover the case (ring,
   direct, rhd, dbt, pairwise, bruck, binomial, chain, nvls), ratio to the bound.
5. ``astra``: greedy and greedy_plus on ``switched8_sf`` (one store-and-forward switch, ASTRA-sim's
   ``Switch(8)``), All-Gather, Reduce-Scatter, All-Reduce, All-to-All, 1 chunk per NPU, 1 MiB and 1 GiB, exported
   with ``tacos_bench.export.astra_sim`` pinned (every send held to its start: our schedule) and unpinned (each
   send once ready) and run through ASTRA-sim (skipped, with the reason, when the binary does not run here).

6. ``--cpsat S [--cpsat-max-npus N]``: CP-SAT on every case (of topologies up to N NPUs) with a time limit of S
   seconds (the continuous-time fabric model, cold, on switched fabrics), and greedy_plus against the best
   verified schedule of any backend (*gp / best*).

Seeds: the randomized backends (greedy, greedy_plus) run seeds 0, 1, 2; the deterministic baselines seed 0.
Writes ``fabrics.md``, ``fabrics.png`` and ``results.parquet`` under ``--out`` (default results/fabrics) and, unless
``--quick``, ``fabrics.md``, ``fabrics.png`` and ``fabrics.parquet`` into ``--docs`` (default docs/studies).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import cache
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
from _study import ROOT, error_summary, ok_rows, to_markdown

NAME = "fabrics"
SEEDS = (0, 1, 2)
RANDOMIZED = ("greedy", "greedy_plus")
BASELINES = ("ring", "direct", "rhd", "dbt", "pairwise", "bruck", "binomial", "chain", "nvls", "sharp")
SOLVERS = RANDOMIZED + BASELINES
EXACT = "cpsat"     # --cpsat S: the exact backend beside them (section 6), not one of the compared SOLVERS
TIE = 1e-9          # relative: two verified times closer than this are equal
AT_BOUND = 1e-6     # relative: a time within this of the bound is at the bound
FAR = 0.10          # greedy_plus more than 10 % above the bound is listed

MIB = {1: "1 MiB", 1024: "1 GiB"}
KIND_SHORT = {"all_gather": "AG", "reduce_scatter": "RS", "all_reduce": "AR", "broadcast": "Bcast",
              "reduce": "Reduce", "gather": "Gather", "scatter": "Scatter", "all_to_all": "A2A"}


# ---------------------------------------------------------------------------------------------- the grid
def grid(quick: bool) -> dict:
    """The parts: each a list of (topology, collective, chunks_per_npu, buffer_mib); plus the 1:1 / 2:1 pairs."""
    if quick:
        unwound = [(t, k, c, 1) for t in ("switch8", "switched8") for k, c in (("broadcast", 8), ("all_gather", 1))]
        in_net = [(t, "all_reduce", 1, 1) for t in ("switched8", "switched8_nvls")]
        pairs = [(pair_label("leafspine2x4", "leafspine2x4_2to1"), "leafspine2x4", "leafspine2x4_2to1")]
        oversub = [(t, "all_gather", 1, 1) for _, a, b in pairs for t in (a, b)]
        astra = [("switched4_sf", "all_gather", 1, 1)]
        sharp = [(t, "all_reduce", 4, 1) for t in ("leafspine2x4", "leafspine2x4_sharp")]
        return {"unwound": unwound, "in_network": in_net, "oversub": oversub, "astra": astra, "pairs": pairs,
                "astra_topology": "switched4_sf", "unwound_pair": ("switch8", "switched8"),
                "in_network_pair": ("switched8", "switched8_nvls"), "sharp": sharp,
                "sharp_pair": ("leafspine2x4", "leafspine2x4_sharp")}
    sizes = (1, 1024)
    unwound = [(t, k, c, s) for t in ("switch8", "switched8")
               for k, c in (("broadcast", 8), ("reduce", 8), ("broadcast", 1), ("reduce", 1), ("gather", 1),
                            ("scatter", 1), ("all_to_all", 1), ("all_gather", 1), ("all_reduce", 1))
               for s in sizes]
    in_net = [(t, k, c, s) for t in ("switched8", "switched8_nvls")
              for k in ("all_gather", "broadcast", "reduce_scatter", "reduce", "all_reduce")
              for c in (1, 4, 16) for s in sizes]
    pairs = [(pair_label(a, b), a, b) for a, b in OVERSUB_PAIRS]
    # dropped to keep the study within minutes at --jobs 2 on 2 cores: All-to-All with 4 chunks per pair at 1 MiB
    # on the leaf-spines (greedy_plus takes 7-36 s per run there; the 1 GiB rows and the 1-chunk rows keep the
    # comparison)
    oversub = [(t, k, c, s) for _, a, b in pairs for t in (a, b)
               for k in ("all_gather", "all_to_all", "all_reduce") for c in (1, 4) for s in sizes
               if (t, k, c, s) not in DROPPED]
    astra = [("switched8_sf", k, 1, s) for k in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
             for s in sizes]
    sharp = [(t, "all_reduce", c, s) for t in ("leafspine4x8", "leafspine4x8_sharp") for c in (1, 4, 16)
             for s in sizes]
    return {"unwound": unwound, "in_network": in_net, "oversub": oversub, "astra": astra, "pairs": pairs,
            "astra_topology": "switched8_sf", "unwound_pair": ("switch8", "switched8"),
            "in_network_pair": ("switched8", "switched8_nvls"), "sharp": sharp,
            "sharp_pair": ("leafspine4x8", "leafspine4x8_sharp")}


PARTS = ("unwound", "in_network", "oversub", "astra", "sharp")
# part 3's 1:1 / 2:1 twins (public names; every topology of the study is one)
OVERSUB_PAIRS = (("dgx_h100x4", "dgx_h100x4_2to1"), ("leafspine4x8", "leafspine4x8_2to1"))
DROPPED = {(t, "all_to_all", 4, 1) for pair in OVERSUB_PAIRS for t in pair if t.startswith("leafspine")}


@cache
def topology(name: str):
    """A public named topology (``tacos_bench.topology.named_topology``)."""
    from tacos_bench.topology import named_topology

    return named_topology(name)


def _fabric(name: str) -> dict:
    return topology(name).meta.get("fabric", {})


def _ratio_txt(r: float) -> str:
    return f"{r:g}:1"


def pair_label(a: str, b: str) -> str:
    """The fabric column of part 3, from the built topologies (spines of the 1:1 and 2:1 twin)."""
    fa, fb = _fabric(a), _fabric(b)
    kind = topology(a).meta.get("kind")
    if kind == "rail":
        head = f"{fa.get('preset', 'rail').upper().replace('_', '-')} x{fa['nodes']} (rail-optimized)"
    elif kind == "leafspine":
        head = f"leaf-spine {fa['leaves']}x{fa['npus_per_leaf']}"
    else:
        head = a
    return f"{head}, {fa.get('spines', '?')} / {fb.get('spines', '?')} spines"


def applicable(solver: str, kind: str, is_fabric: bool) -> bool:
    """What the backend declares (its capabilities): the collective, and switches if the topology has them. A
    backend that declares a case and then refuses it is run, and its refusal is an error row."""
    from solvers import get_solver
    from solvers.base import CAP_FABRIC, CAP_FABRIC_ONLY

    b = get_solver(solver)
    caps = b.capabilities
    if not b.supports(kind):
        return False
    if is_fabric and CAP_FABRIC not in caps:
        return False
    return not (CAP_FABRIC_ONLY in caps and not is_fabric)


def tasks(g: dict, cpsat_s: float = 0.0, cpsat_max_npus: int = 0) -> list[dict]:
    """One task per (case, solver, seed); a case in several parts runs once. ``cpsat_s`` > 0: also CP-SAT
    (the continuous-time model on fabrics, cold; seed 0) with that time limit on every case it declares, on
    topologies of at most ``cpsat_max_npus`` NPUs (0: any)."""
    parts_of: dict[tuple, list[str]] = {}
    for part in PARTS:
        for case in g[part]:
            parts_of.setdefault(case, []).append(part)
    out = []
    for (topo, kind, cpn, mib), parts in parts_of.items():
        t = topology(topo)
        for s in SOLVERS:
            if not applicable(s, kind, t.is_fabric):
                continue
            for seed in (SEEDS if s in RANDOMIZED else (0,)):
                out.append({"topology": topo, "collective": kind, "chunks_per_npu": cpn, "buffer_mib": mib,
                             "solver": s, "seed": seed, "parts": ",".join(parts),
                             "astra": "astra" in parts and s in RANDOMIZED})
        if cpsat_s > 0 and applicable(EXACT, kind, t.is_fabric) and (not cpsat_max_npus or t.num_npus <= cpsat_max_npus):
            out.append({"topology": topo, "collective": kind, "chunks_per_npu": cpn, "buffer_mib": mib,
                        "solver": EXACT, "seed": 0, "parts": ",".join(parts), "astra": False,
                        "time_limit_s": float(cpsat_s)})
    # longest first (All-to-All on the 32-NPU fabrics dominates), so two workers finish together
    def cost(tk):
        n = topology(tk["topology"]).num_npus
        w = n * n if tk["collective"] == "all_to_all" else n
        if tk["solver"] == EXACT:   # runs to its time limit on most cases
            return float("inf"), tk["time_limit_s"]
        return 0.0, w * tk["chunks_per_npu"] * (3 if tk["solver"] == "greedy_plus" else 1)

    return sorted(out, key=cost, reverse=True)


# ---------------------------------------------------------------------------------------------- one run
def run_task(task: dict, astra_dir: str | None) -> dict:
    """Bounds, solve, verify (and, for an ASTRA-sim task, export and simulate); never raises."""
    import logging

    logging.disable(logging.WARNING)
    from tacos_bench import Collective, Problem
    from tacos_bench.errors import TacosError
    from tacos_bench.runner.records import environment, new_record
    from tacos_bench.runner.stages import problem_fields, solve_and_verify

    rec = new_record(**task)
    rec.update(environment())
    rec.update(status="error", valid=False, collective_time_us=None, lower_bound_us=None, error=None)
    stage = "building the problem"
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        topo = topology(task["topology"])
        problem = Problem(topo, Collective(task["collective"], task["chunks_per_npu"], float(task["buffer_mib"]),
                                           root=0))
        rec.update(problem_fields(problem))
        rec["topology"] = task["topology"]
        rec["num_switches"] = int(topo.num_switches) if hasattr(topo, "num_switches") else 0
        stage = "solving"
        opts = {"seed": task["seed"], "threads": 1}
        if task["solver"] in RANDOMIZED:
            opts["progress"] = False
        if task["solver"] == EXACT:
            opts["time_limit_s"] = task["time_limit_s"]
        _, sched = solve_and_verify(problem, task["solver"], opts, fields=rec)
        if task.get("astra"):
            stage = "ASTRA-sim"
            rec.update(astra_round_trip(problem, sched, rec, task, astra_dir))
    except TacosError as e:
        rec["status"] = "error"
        rec["error"] = f"{stage}: {e}"
    except Exception as e:  # noqa: BLE001 - a bug, not bad input: the sweep goes on, the row says what happened
        rec["status"] = "error"
        rec["error"] = f"internal error while {stage}: {type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-2000:]
    rec["wall_s"] = time.perf_counter() - t0
    rec["cpu_s"] = time.process_time() - c0
    return rec


def astra_round_trip(problem, sched, rec: dict, task: dict, astra_dir: str | None) -> dict:
    """ASTRA-sim's time for a verified schedule, or why it was not run (``astra_error``)."""
    from tacos_bench.export.astra_sim import (
        binary_problem,
        causal_depth,
        export_astra_sim,
        run_bundle,
    )

    if not rec.get("valid"):
        return {"astra_error": "no verified schedule to export"}
    why = binary_problem()
    if why is None and astra_dir is None:
        why = "--no-astra"
    if why is not None:
        return {"astra_error": f"skipped: {why}"}
    bundle = Path(astra_dir) / (f"{task['topology']}_{task['collective']}_{task['buffer_mib']}MiB_"
                                f"cpn{task['chunks_per_npu']}_{task['solver']}_s{task['seed']}")
    # pinned (every send held to its start: the replay of our schedule) and unpinned (each send once ready), each
    # on its own: a pinned bundle may fail where the unpinned one runs (the binary's clock, docs/export.md)
    out = {"astra_bundle": str(bundle), "astra_error": None}
    try:
        free = run_bundle(export_astra_sim(problem, sched, Path(f"{bundle}_unpinned"), record=rec, pin="off"),
                          timeout=600)
        out["astra_unpinned_us"] = free.time_us
    except Exception as e:  # noqa: BLE001 - an ASTRA-sim failure is a finding of this row, not of the run
        out["astra_error"] = f"unpinned: {type(e).__name__}: {e}"
    try:
        run = run_bundle(export_astra_sim(problem, sched, bundle, record=rec, pin="on"), timeout=600)
    except Exception as e:  # noqa: BLE001
        out["astra_error"] = f"{type(e).__name__}: {e}"
        return out
    ours = float(rec["collective_time_us"])
    out.update(astra_sim_time_us=run.time_us, astra_minus_ours_us=run.time_us - ours,
               astra_causal_depth_ns=int(causal_depth(problem, sched)))
    return out


def run_all(todo: list[dict], jobs: int, astra_dir: str | None) -> list[dict]:
    rows = []
    t0 = time.perf_counter()

    def progress(rec):
        rows.append(rec)
        if len(rows) % 50 == 0 or len(rows) == len(todo):
            print(f"[{time.perf_counter() - t0:6.0f} s] {len(rows)}/{len(todo)} runs", flush=True)

    if jobs <= 1:
        for tk in todo:
            progress(run_task(tk, astra_dir))
        return rows
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futs = {pool.submit(run_task, tk, astra_dir): tk for tk in todo}
        for f in as_completed(futs):
            try:
                progress(f.result())
            except Exception as e:  # noqa: BLE001 - a worker that died: its run is an error row
                tk = futs[f]
                progress({**tk, "status": "error", "valid": False, "collective_time_us": None,
                          "error": f"worker failed: {type(e).__name__}: {e}"})
    return rows


# ---------------------------------------------------------------------------------------------- tables
def tidy(df: pd.DataFrame) -> pd.DataFrame:
    """Columns parquet can hold (an object column of mixed types becomes text), sorted rows."""
    df = df.copy()
    for c in df.columns:
        if df[c].dtype == object:
            types = {type(v) for v in df[c].dropna()}
            if len(types) > 1 or (types and not types <= {str, bool}):
                df[c] = df[c].map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    keys = ["topology", "collective", "chunks_per_npu", "buffer_mib", "solver", "seed"]
    return df.sort_values(keys).reset_index(drop=True)


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["ok"] = df.index.isin(ok_rows(df).index)  # verified runs only: every figure comes from these rows
    df["size"] = df["buffer_mib"].map(lambda m: MIB.get(int(m), f"{m:g} MiB"))
    df["case"] = (df["topology"] + " " + df["collective"] + " " + df["size"] + " cpn"
                  + df["chunks_per_npu"].astype(int).astype(str))
    df["ratio"] = df["collective_time_us"] / df["lower_bound_us"]
    return df


def fmt_us(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    return f"{v:.3f}" if abs(v) < 1000 else f"{v:.1f}"


def fmt_r(v, nd=3) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{nd}f}"


class Cases:
    """Per (case, solver): min / median / max verified time over the seeds; per case: the bound."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        good = df[df["ok"]]
        self.stats = good.groupby(["case", "solver"])["collective_time_us"].agg(["min", "median", "max", "count"])
        self.bound = df.groupby("case")["lower_bound_us"].max()
        self.source = df.groupby("case")["lower_bound_source"].agg(
            lambda s: s.dropna().mode().iloc[0] if s.notna().any() else None)
        self.err = df[~df["ok"]].groupby(["case", "solver"])["error"].first()
        self.ran = set(zip(df["case"], df["solver"]))

    @staticmethod
    def key(topo, kind, cpn, mib) -> str:
        return f"{topo} {kind} {MIB.get(int(mib), f'{mib:g} MiB')} cpn{int(cpn)}"

    def t(self, case, solver, stat="median"):
        try:
            return float(self.stats.loc[(case, solver), stat])
        except KeyError:
            return np.nan

    def spread_cell(self, case, solver="greedy_plus") -> str:
        """median, and (min-max) when the seeds differ."""
        if (case, solver) not in self.stats.index:
            return "error" if (case, solver) in self.ran else ""
        s = self.stats.loc[(case, solver)]
        cell = fmt_us(s["median"])
        if s["max"] > s["min"] * (1 + TIE):
            cell += f" ({fmt_us(s['min'])}-{fmt_us(s['max'])})"
        if s["count"] < (len(SEEDS) if solver in RANDOMIZED else 1):
            cell += f" [{int(s['count'])} verified]"
        return cell

    def ratio(self, case, solver, stat="median"):
        return self.t(case, solver, stat) / self.bound.get(case, np.nan)


def table_unwound(c: Cases, g: dict) -> str:
    a, b = g["unwound_pair"]
    rows = []
    for topo, kind, cpn, mib in g["unwound"]:
        if topo != a:
            continue
        ka, kb = c.key(a, kind, cpn, mib), c.key(b, kind, cpn, mib)
        ta, tb = c.t(ka, "greedy_plus"), c.t(kb, "greedy_plus")
        rows.append({"collective": kind, "chunks": cpn, "size": MIB[mib],
                     f"{a} µs": c.spread_cell(ka), f"{b} µs": c.spread_cell(kb),
                     "unwound / switched": fmt_r(ta / tb), f"{a} bound µs": fmt_us(c.bound.get(ka)),
                     f"{b} bound µs": fmt_us(c.bound.get(kb)),
                     "bound ratio": fmt_r(c.bound.get(ka, np.nan) / c.bound.get(kb, np.nan)),
                     f"gp / bound ({a})": fmt_r(c.ratio(ka, "greedy_plus")),
                     f"gp / bound ({b})": fmt_r(c.ratio(kb, "greedy_plus"))})
    return to_markdown(pd.DataFrame(rows))


def table_in_network(c: Cases, g: dict) -> str:
    """Part 2: the plain switch against the one that multicasts and reduces, and the ``nvls`` baseline."""
    return _in_network_table(c, g["in_network_pair"], g["in_network"], "nvls", "gain (plain / nvls switch)")


def table_sharp(c: Cases, g: dict) -> str:
    """Part 2b: All-Reduce on a leaf-spine without and with switches that multicast and reduce (SHARP-like)."""
    return _in_network_table(c, g["sharp_pair"], g["sharp"], "sharp", "gain (plain / SHARP tree)",
                             best_plain_baseline=True)


def _in_network_table(c: Cases, pair: tuple[str, str], cases, baseline: str, gain: str,
                      best_plain_baseline: bool = False) -> str:
    """greedy_plus on the plain fabric ``a`` and on its in-network twin ``b``, the in-network ``baseline`` on
    ``b`` (and, asked for, the fastest point-to-point baseline on ``a``), the bounds of both."""
    a, b = pair
    rows = []
    for topo, kind, cpn, mib in cases:
        if topo != a:
            continue
        ka, kb = c.key(a, kind, cpn, mib), c.key(b, kind, cpn, mib)
        ta, tb = c.t(ka, "greedy_plus"), c.t(kb, "greedy_plus")
        nv = c.t(kb, baseline, "min")
        row = {"collective": kind, "chunks": cpn, "size": MIB[mib],
               f"{a} µs": c.spread_cell(ka), f"{b} µs": c.spread_cell(kb), gain: fmt_r(ta / tb),
               f"{baseline} baseline on {b} µs": fmt_us(nv) if not np.isnan(nv) else (
                   "error" if (kb, baseline) in c.ran else "")}
        if best_plain_baseline:
            base = [x for x in (c.t(ka, s, "min") for s in BASELINES if s != baseline) if not np.isnan(x)]
            row[f"best baseline on {a} µs"] = fmt_us(min(base)) if base else ""
        else:
            row[f"gp / {baseline} baseline"] = fmt_r(tb / nv) if not np.isnan(nv) else ""
        row.update({f"{a} bound µs": fmt_us(c.bound.get(ka)), f"{b} bound µs": fmt_us(c.bound.get(kb)),
                    f"gp / bound ({b})": fmt_r(c.ratio(kb, "greedy_plus"))})
        rows.append(row)
    return to_markdown(pd.DataFrame(rows))


def table_oversub(c: Cases, g: dict) -> str:
    rows = []
    for label, a, b in g["pairs"]:
        for topo, kind, cpn, mib in g["oversub"]:
            if topo != a:
                continue
            ka, kb = c.key(a, kind, cpn, mib), c.key(b, kind, cpn, mib)
            ta, tb = c.t(ka, "greedy_plus"), c.t(kb, "greedy_plus")
            rows.append({"fabric": label, "collective": kind, "chunks": cpn, "size": MIB[mib],
                         "1:1 µs": c.spread_cell(ka), "2:1 µs": c.spread_cell(kb), "2:1 / 1:1": fmt_r(tb / ta),
                         "1:1 bound µs": fmt_us(c.bound.get(ka)), "2:1 bound µs": fmt_us(c.bound.get(kb)),
                         "bound 2:1 / 1:1": fmt_r(c.bound.get(kb, np.nan) / c.bound.get(ka, np.nan)),
                         "gp / bound 1:1": fmt_r(c.ratio(ka, "greedy_plus")),
                         "gp / bound 2:1": fmt_r(c.ratio(kb, "greedy_plus"))})
    return to_markdown(pd.DataFrame(rows))


def solver_summary(c: Cases, df: pd.DataFrame) -> pd.DataFrame:
    """Per solver over the cases it ran: verified / errors, ratio to the bound (its median seed), fastest on."""
    cases = sorted(set(df["case"]))
    fastest = {}
    for case in cases:
        best = {s: c.t(case, s, "min") for s in SOLVERS}
        best = {s: v for s, v in best.items() if not np.isnan(v)}
        if best:
            m = min(best.values())
            fastest[case] = {s for s, v in best.items() if v <= m * (1 + TIE)}
    rows = []
    for s in SOLVERS:
        sub = df[df["solver"] == s]
        if sub.empty:
            continue
        ran = sorted(set(sub["case"]))
        ok = [k for k in ran if (k, s) in c.stats.index]
        r = np.array([c.ratio(k, s) for k in ok], dtype=float)
        r = r[~np.isnan(r)]
        rows.append({"solver": s, "cases run": len(ran), "verified": len(ok), "error cases": len(ran) - len(ok),
                     "median ratio": fmt_r(np.median(r)) if len(r) else "",
                     "geo-mean ratio": fmt_r(float(np.exp(np.mean(np.log(r))))) if len(r) else "",
                     "max ratio": fmt_r(r.max()) if len(r) else "",
                     "at bound": int((r <= 1 + AT_BOUND).sum()),
                     "fastest on (ties count)": sum(1 for k in ok if s in fastest.get(k, ())),
                     "median synthesis s": fmt_r(float(sub.loc[sub["ok"], "synthesis_time_s"].median()), 4)})
    return pd.DataFrame(rows)


def per_case_table(c: Cases, df: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Per case: the bound, greedy_plus's min/median/max ratio, every other solver's ratio (its median seed;
    ``err`` when it ran without a verified schedule, blank when it does not take the case), the fastest other
    solver and greedy_plus's best seed over it. Also the cases where greedy_plus is not the fastest."""
    first = df.groupby("case")[["topology", "collective", "chunks_per_npu", "buffer_mib", "num_npus"]].first()
    first = first.sort_values(["topology", "collective", "chunks_per_npu", "buffer_mib"])
    rows, behind = [], []
    for case, f in first.iterrows():
        r = {"case": case, "bound µs": fmt_us(c.bound.get(case)), "bound": c.source.get(case) or ""}
        for stat in ("min", "median", "max"):
            r[f"gp {stat}"] = fmt_r(c.ratio(case, "greedy_plus", stat))
        for s in ("greedy",) + BASELINES:
            if (case, s) in c.stats.index:
                r[s] = fmt_r(c.ratio(case, s))
            elif (case, s) in c.ran:
                r[s] = "err"
            else:
                r[s] = ""
        others = {s: c.t(case, s, "min") for s in ("greedy",) + BASELINES}
        others = {s: v for s, v in others.items() if not np.isnan(v)}
        gp = c.t(case, "greedy_plus", "min")
        if others:
            who = min(others, key=others.get)
            r["fastest other"] = who
            r["gp best / it"] = fmt_r(gp / others[who])
            if not np.isnan(gp) and gp > others[who] * (1 + TIE):
                behind.append({"case": case, "gp_min": gp, "gp_median": c.t(case, "greedy_plus"),
                               "who": who, "t": others[who], "bound": c.bound.get(case),
                               "ties": sorted(s for s, v in others.items() if v <= others[who] * (1 + TIE))})
        rows.append(r)
    return pd.DataFrame(rows), behind


def table_astra(df: pd.DataFrame, g: dict) -> tuple[str, str]:
    a = df[df["parts"].astype(str).str.contains("astra") & df["solver"].isin(RANDOMIZED)].copy()
    if a.empty:
        return "", "No ASTRA-sim case in this grid.\n"
    errs = a["astra_error"].dropna().astype(str) if "astra_error" in a else pd.Series([], dtype=str)
    skipped = errs[errs.str.startswith("skipped")]
    if "astra_sim_time_us" not in a or a["astra_sim_time_us"].isna().all():
        why = skipped.iloc[0] if len(skipped) else (errs.iloc[0] if len(errs) else "no run")
        return "", f"The ASTRA-sim round trip was **not run**: {why}.\n"
    rows = []
    order = {k: i for i, k in enumerate(("all_gather", "reduce_scatter", "all_reduce", "all_to_all"))}
    a["_o"] = a["collective"].map(order)
    for (_, kind, mib, solver), grp in a.groupby(["_o", "collective", "buffer_mib", "solver"], sort=True):
        r = {"collective": kind, "size": MIB.get(int(mib), f"{mib:g} MiB"), "solver": solver}
        for _, x in grp.sort_values("seed").iterrows():
            key = f"seed {x['seed']}: ours / pinned / unpinned µs"
            pinned = (fmt_us(x["astra_sim_time_us"]) if pd.notna(x.get("astra_sim_time_us")) else
                      "clock saturated" if "clock stopped" in str(x.get("astra_error")) else "error")
            if pd.notna(x.get("astra_sim_time_us")) or pd.notna(x.get("astra_unpinned_us", float("nan"))):
                r[key] = (f"{fmt_us(x['collective_time_us'])} / {pinned} / "
                          f"{fmt_us(x.get('astra_unpinned_us', float('nan')))}")
            else:
                r[key] = f"error: {x.get('astra_error')}"
        ok = grp[grp["astra_sim_time_us"].notna()]
        q = ok["astra_sim_time_us"] / ok["collective_time_us"]
        r["pinned / ours"] = _range(q) if len(q) else ""
        if "astra_unpinned_us" in grp:
            free = grp[grp["astra_unpinned_us"].notna()]
            qf = free["astra_unpinned_us"] / free["collective_time_us"]
            r["unpinned / ours"] = _range(qf) if len(qf) else ""
        lo, hi = (int(ok["astra_causal_depth_ns"].min()), int(ok["astra_causal_depth_ns"].max())) if len(ok) else (0, 0)
        r["rounding bound ns"] = "" if not len(ok) else (str(lo) if lo == hi else f"{lo}-{hi}")
        agree = (ok["astra_minus_ours_us"].abs() * 1000 <= ok["astra_causal_depth_ns"] + 1e-6)
        r["agree (seeds)"] = f"{int(agree.sum())}/{len(grp)}"
        rows.append(r)
    return to_markdown(pd.DataFrame(rows)), ""


# ---------------------------------------------------------------------------------------------- figure
def plot(c: Cases, df: pd.DataFrame, g: dict, path: Path) -> Path:
    from tacos_bench.plots import _plt

    plt = _plt()
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    cmap = plt.get_cmap("tab10")

    def bars(ax, labels, series, title, ylabel, ref=1.0):
        x = np.arange(len(labels))
        w = 0.8 / max(1, len(series))
        for i, (name, ys) in enumerate(series.items()):
            ax.bar(x + (i - (len(series) - 1) / 2) * w, ys, w, label=name, color=cmap(i))
        ax.axhline(ref, color="k", lw=0.8)
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)

    def pair_ratios(pair, cases):
        """Bar labels and greedy_plus's time on ``pair[0]`` over ``pair[1]``, per case, at 1 MiB and 1 GiB."""
        a, b = pair
        labels, s1, s2 = [], [], []
        for topo, kind, cpn, mib in cases:
            if topo != a or mib != cases[0][3]:
                continue
            labels.append(f"{KIND_SHORT[kind]} cpn{cpn}")
            for mb, s in ((1, s1), (1024, s2)):
                s.append(c.t(c.key(a, kind, cpn, mb), "greedy_plus") / c.t(c.key(b, kind, cpn, mb), "greedy_plus"))
        return labels, ({"1 MiB": s1} if all(np.isnan(s2)) else {"1 MiB": s1, "1 GiB": s2})

    a, b = g["unwound_pair"]
    bars(axes[0, 0], *pair_ratios(g["unwound_pair"], g["unwound"]),
         f"1. unwound {a} / switched {b} (greedy_plus, median seed)", "time ratio (>1: unwound slower)")
    a, b = g["in_network_pair"]
    bars(axes[0, 1], *pair_ratios(g["in_network_pair"], g["in_network"]),
         f"2. gain of multicast + reduction: {a} / {b} (greedy_plus)", "time ratio (>1: the NVLS switch is faster)")

    labels, series = [], {}
    for label, a, b in g["pairs"]:
        series[label] = []
    combos = [(k, cpn, mib) for topo, k, cpn, mib in g["oversub"] if topo == g["pairs"][0][1]]
    for k, cpn, mib in combos:
        labels.append(f"{KIND_SHORT[k]} cpn{cpn} {MIB[mib]}")
        for label, a, b in g["pairs"]:
            series[label].append(c.t(c.key(b, k, cpn, mib), "greedy_plus")
                                 / c.t(c.key(a, k, cpn, mib), "greedy_plus"))
    bars(axes[1, 0], labels, series, "3. oversubscription: 2:1 / 1:1 (greedy_plus, median seed)",
         "time ratio (>1: 2:1 slower)")

    ax = axes[1, 1]
    order = [s for s in SOLVERS if (df["solver"] == s).any()]
    for i, s in enumerate(order):
        ks = [k for k in sorted(set(df.loc[df["solver"] == s, "case"])) if (k, s) in c.stats.index]
        r = np.array([c.ratio(k, s) for k in ks], dtype=float)
        r = r[~np.isnan(r)]
        jitter = (np.random.default_rng(i).random(len(r)) - 0.5) * 0.5
        ax.scatter(np.full(len(r), i) + jitter, r, s=9, alpha=0.6, color=cmap(i % 10))
        if len(r):
            ax.plot([i - 0.35, i + 0.35], [np.median(r)] * 2, color="k", lw=1.5)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, rotation=45, ha="right", fontsize=8)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_title("4. verified time / lower bound per case (median seed; bar: median over cases)", fontsize=9)
    ax.set_ylabel("ratio to bound (log)", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------- report
def describe_topologies(names) -> str:
    rows = []
    for n in names:
        t = topology(n)
        bw = t.bw_GiBps
        rows.append({"topology": n, "NPUs": t.num_npus, "switches": t.num_nodes - t.num_npus,
                     "directed links": t.num_links,
                     "link GiB/s": (f"{bw.min():g}" if bw.min() == bw.max() else f"{bw.min():.3f}-{bw.max():.3f}"),
                     "what": topo_note(n)})
    return to_markdown(pd.DataFrame(rows))


def _flags(multicast: bool, reduce: bool) -> str:
    on = [x for x, f in (("multicast", multicast), ("reduce", reduce)) if f]
    return " and ".join(on)


def topo_note(name: str) -> str:
    """The *what* column of the topology table, from the built topology (``meta``, link bandwidths)."""
    t = topology(name)
    meta = t.meta
    kind = meta.get("kind")
    f = meta.get("fabric", {})
    if kind == "switch":  # the unwound switch: point-to-point, every pair one link
        n, port = t.num_npus, meta.get("port_bw_GiBps", float("nan"))
        return (f"a {port:g} GiB/s switch unwound: {n} NPUs fully connected, {port:g}/{n - 1} = "
                f"{float(t.bw_GiBps.min()):.3f} GiB/s per pair (point-to-point)")
    if kind == "switched":
        fl = _flags(f["multicast"], f["reduce"])
        return (f"{f['npus']} NPUs on one {f['mode']} switch, {f['port_GiBps']:g} GiB/s {f['hop_lat_us']:g} µs ports"
                + (f", the switch does {fl} (NVLS-like)" if fl else "")
                + (f" (ASTRA-sim's Switch({f['npus']}))" if f["mode"] == "store_forward" else ""))
    if kind == "rail":
        nvs = _flags(*f["flags"]["nvswitch"])
        return (f"{f['nodes']} {f.get('preset', 'rail').upper().replace('_', '-')}-like nodes of {f['gpus_per_node']} "
                f"GPUs: NVSwitch ({f['nvlink_GiBps']:.3f} GiB/s ports" + (f", {nvs}" if nvs else "") + ") per node, "
                f"{f['gpus_per_node']} rail leaves ({f['nic_GiBps']:.3f} GiB/s NICs), {f['spines']} spines, every "
                f"leaf-spine link {f['spine_link_GiBps']:.3f} GiB/s"
                + (" (one NIC's worth)" if abs(f["spine_link_GiBps"] - f["nic_GiBps"]) < 1e-9 else "")
                + f", {_ratio_txt(f['oversubscription'])}")
    if kind == "leafspine":
        return (f"{f['leaves']} leaves x {f['npus_per_leaf']} NPUs ({f['port_GiBps']:g} GiB/s ports), {f['spines']} "
                f"spines, every leaf-spine link {f['spine_link_GiBps']:g} GiB/s"
                + (" (one port's worth)" if abs(f["spine_link_GiBps"] - f["port_GiBps"]) < 1e-9 else "")
                + f", {_ratio_txt(f['oversubscription'])}")
    return ""


def report(df: pd.DataFrame, g: dict, args, wall_s: float | None, cmd: str, fig: Path) -> str:
    c = Cases(df)
    cpu_s = float(df["cpu_s"].sum()) if "cpu_s" in df else None
    load = "n/a"
    busy = "load_start" in df and df["load_start"].notna().any() and float(df["load_start"].dropna().iloc[0]) > 1.0
    if "load_start" in df and df["load_start"].notna().any():
        load = f"{df['load_start'].dropna().iloc[0]:.1f} at the start, {df['load_end'].dropna().iloc[0]:.1f} at the end"
    L = []
    date = str(df["timestamp_utc"].dropna().min())[:10] if "timestamp_utc" in df else _dt.date.today().isoformat()
    commits = ", ".join(f"`{str(k)[:7]}{'-dirty' if str(k).endswith('-dirty') else ''}` ({n} runs)"
                        for k, n in df["git_commit"].astype(str).value_counts().items())
    n_ok = int(df["ok"].sum())
    L.append(f"Run on {date} (UTC) on a {os.cpu_count()}-core machine ({platform.machine()}, Python "
             f"{platform.python_version()}), {args.jobs} parallel job(s)" + (
                 ", other engineers' jobs sharing the cores: synthesis times are those of a busy small machine. "
                 if busy else ", the machine otherwise idle at the start. ")
             + (f"Wall time of the study: {wall_s / 60:.1f} min" if wall_s is not None else "")
             + (f" ({cpu_s / 60:.1f} CPU-min in the runs themselves; 1-min load average {load}). " if cpu_s else ". ")
             + f"{len(df)} runs on {df['case'].nunique()} cases, {n_ok} verified, {len(df) - n_ok} error rows. "
             f"Code: {commits} (`git_commit` of the rows)."
             + (f" The working tree, shared with other engineers, had uncommitted changes to "
                f"{', '.join('`' + x.split(' ', 1)[1] + '`' for x in args.uncommitted)} when the sweep started: "
                "the figures are those of that tree." if getattr(args, "uncommitted", None) else
                " No uncommitted change to `solvers/` or `tacos_bench/` when the sweep started (`-dirty`: this "
                "study's own files)." if getattr(args, "uncommitted", None) == [] else "") + "\n")
    L.append("Every figure below is a schedule the verifier replayed and accepted (`tacos_bench.runner."
             "solve_and_verify`: fabric lower bounds, solve, `tacos_bench.verify.check`). A run that raised or was "
             "rejected is an error row of the table (listed at the end), never a figure. greedy and greedy_plus are "
             f"randomized and ran seeds {', '.join(map(str, SEEDS))}: a time cell is the **median** seed, with "
             "(min-max) when the seeds differ; the baselines are deterministic (seed 0). *bound* is the best lower "
             "bound of `tacos_bench.bounds.lower_bounds` (docs/bounds.md, fabric bounds: docs/fabrics.md); "
             "*gp / bound* = greedy_plus's verified time over it (1.000: optimal). Broadcast and Reduce move "
             "*chunks* chunks in all, the others *chunks* per NPU (All-to-All: per pair). Flat rows: "
             "`docs/studies/fabrics.parquet` (one row per topology, collective, chunks, size, solver, seed).\n")
    if not args.quick:
        dropped = sorted({t for t, *_ in DROPPED})
        L.append("Sizes: 1 MiB and 1 GiB everywhere except one slice **dropped to keep the study within minutes at "
                 "`--jobs 2`**: All-to-All with 4 chunks per pair runs at 1 GiB only on the leaf-spines ("
                 + ", ".join(f"`{t}`" for t in dropped) + "; greedy_plus takes 7-36 s per run there; a first full "
                 "run with it, when the study still had two more leaf-spines, took 22.4 min while other jobs shared "
                 "the machine). Part 1 also has Broadcast and Reduce of 1 chunk (beyond the 8-chunk ones asked for).\n")
    names = []
    for part in PARTS:
        for t, *_ in g[part]:
            if t not in names:
                names.append(t)
    L.append("Topologies (docs/fabric_clusters.md):\n")
    L.append(describe_topologies(names))

    # 1
    a, b = g["unwound_pair"]
    L.append(f"\n## 1. The unwound switch (`{a}`) against the switched model (`{b}`)\n")
    L.append("greedy_plus's verified time on each; *unwound / switched* > 1: the point-to-point model is that many "
             "times more pessimistic than one cut-through switch with the same 50 GiB/s ports. The bounds of the two "
             "models in the *bound ratio* column show the same thing without any schedule.\n")
    L.append(table_unwound(c, g))
    L.append(unwound_notes(c, g))

    # 2
    a, b = g["in_network_pair"]
    L.append(f"\n## 2. What multicast and in-network reduction gain (`{a}` against `{b}`)\n")
    L.append(f"greedy_plus on the plain switch and on the NVLS-like one (`multicast`, `reduce`); *gain* > 1: the "
             f"in-network operations make the collective that many times faster. The `nvls` baseline (in-switch "
             f"reduce then multicast, pipelined owner by owner) takes only All-Reduce on a switch joined to every "
             f"NPU with both flags, i.e. `{b}` here.\n")
    L.append(table_in_network(c, g))
    L.append(in_network_notes(c, g))

    # 2b
    a, b = g["sharp_pair"]
    L.append(f"\n## 2b. A SHARP-like reduction tree (`{a}` against `{b}`)\n")
    L.append(f"All-Reduce on the leaf-spine as built and with every leaf and spine a switch that multicasts and "
             f"reduces (`{b}`, as InfiniBand switches running SHARP aggregation trees). The `sharp` baseline "
             f"(solvers/in_switch.py) reduces each chunk leaf -> spine -> leaf on its way to its owner and "
             f"multicasts it back the same way, one spine per chunk in turn, pipelined owner by owner; greedy_plus "
             f"keeps it as a candidate. *gain* > 1: the in-network tree is that many times faster than the best "
             f"greedy_plus schedule on the plain fabric; *best baseline*: the fastest of the point-to-point "
             f"baselines there.\n")
    L.append(table_sharp(c, g))

    # 3
    L.append("\n## 3. Oversubscription: 1:1 against 2:1\n")
    L.append("greedy_plus's verified time on the 1:1 fabric and on its 2:1 twin (half the spines, so half a leaf's "
             "uplink bandwidth; every leaf-spine link one port's bandwidth, `fabrics.default_spines`); *2:1 / 1:1* "
             "> 1: what the oversubscription costs. (The first version of these fabrics modelled a leaf's uplink "
             "bundle as one fat link, which hid the oversubscription: a link carries one transfer at a time, at the "
             "route's slowest rate. They are now port-rate spines (docs/fabric_clusters.md).)\n")
    L.append(table_oversub(c, g))
    L.append(oversub_notes(c, g))

    # 4
    L.append("\n## 4. greedy_plus against every baseline\n")
    L.append("Every case of the study (parts 1-3, 2b and the `switched8_sf` cases of part 5), every backend whose "
             "capabilities cover it: greedy (the TACOS rule), ring, direct, rhd, dbt, pairwise, bruck, binomial, "
             f"chain, nvls, sharp ({not_compared()}). Summary per solver over the cases "
             "it ran (ratio: its median seed over the bound; *fastest on*: its best seed is the fastest verified "
             "time of the case, ties counted for each):\n")
    L.append(to_markdown(solver_summary(c, df)))
    per, behind = per_case_table(c, df)
    L.append(behind_notes(c, df, behind))
    L.append(far_notes(c, df))
    L.append("\nPer case: ratio to the bound of greedy_plus (min / median / max over its seeds) and of every other "
             "backend (median seed); `err`: it declares the case but gave no verified schedule (error rows below); "
             "blank: it does not take the case. *gp best / it*: greedy_plus's best seed over the fastest other "
             "backend's best (> 1: greedy_plus is behind).\n")
    L.append(to_markdown(per))

    # 5
    L.append(f"\n## 5. ASTRA-sim's `Switch(N)` round trip (`{g['astra_topology']}`)\n")
    L.append("Each greedy and greedy_plus schedule (every seed) is exported with "
             "`tacos_bench.export.astra_sim.export_astra_sim` and run with `run_bundle` twice: *pinned* (`pin=\"on\"`, "
             "the default for `Switch`: every send held to its start in our schedule by a wait node, the simulator run "
             "1000x slower so that a whole Chakra µs is our ns) replays our schedule, and ASTRA-sim's shared ports and "
             "store-and-forward hops would make it later if the schedule were not feasible there; *unpinned* "
             "(`pin=\"off\"`) lets every send go once its data is there, which is another schedule: ASTRA-sim's links "
             "are busy for the serialization only (the latency is pipelined; ours holds a link for latency + "
             "serialization) and its trace replay queues every ready send first come first served on the NPU's "
             "up-link (docs/export.md, \"Switched fabrics\"). *agree*: pinned |ASTRA-sim - ours| within the "
             "exporter's rounding bound (`causal_depth` ns).\n")
    tab, why = table_astra(df, g)
    L.append(tab or why)
    if tab:
        L.append(astra_notes(df, g))
    if (df["solver"] == EXACT).any():
        L.append(best_known_section(c, df))
    L.append("\n## Errors\n")
    L.append(error_summary(df))
    L.append(f"\n![{fig.stem}]({fig.name})\n")
    body = "\n".join(L) + "\n"
    return f"# Study: switched fabrics\n\nProduced by:\n\n```bash\n{cmd}\n```\n\n{body}"


def best_known_section(c: Cases, df: pd.DataFrame) -> str:
    """Section 6: CP-SAT beside the heuristics, and greedy_plus against the best verified time of any backend."""
    ex = df[df["solver"] == EXACT]
    limit = float(ex["time_limit_s"].dropna().iloc[0]) if "time_limit_s" in ex and ex["time_limit_s"].notna().any() \
        else float("nan")
    L = [f"\n## 6. CP-SAT and the best known schedule\n",
         f"`cpsat` on {len(ex)} of the {df['case'].nunique()} cases ({_cpsat_scope(df, ex)}), seed 0, "
         f"`time_limit_s={limit:g}`, its default 8 workers sharing the "
         "job's core: on a switched fabric the continuous-time fabric model (`solvers.exact.fabric`, cold: no warm "
         "start), on the unwound `switch8` the TEN model with the greedy's warm start. *best known*: the fastest "
         "verified schedule of any backend of this study (every seed) on the case; *gp / best*: greedy_plus's best "
         "seed over it (> 1: another backend, CP-SAT included, found a faster schedule). CP-SAT's status: "
         "`optimal` (proved), `feasible` (its time limit ended the search), else its error row.\n"]
    st = ex.groupby("case")["status"].first()
    L.append("CP-SAT outcomes: " + ", ".join(f"{k} {v}" for k, v in st.value_counts().items()) + ".\n")
    rows, differ = [], []
    for case in sorted(df["case"].unique()):
        good = df[(df["case"] == case) & df["ok"]]
        if good.empty:
            continue
        best = float(good["collective_time_us"].min())
        who = sorted(set(good.loc[good["collective_time_us"] <= best * (1 + TIE), "solver"]))
        gp = good.loc[good["solver"] == "greedy_plus", "collective_time_us"]
        cp = good.loc[good["solver"] == EXACT, "collective_time_us"]
        bound = c.bound.get(case, float("nan"))
        r = {"case": case, "bound µs": fmt_us(bound), "greedy_plus µs": fmt_us(gp.min() if len(gp) else None),
             "cpsat µs": fmt_us(cp.min() if len(cp) else None), "cpsat status": st.get(case, ""),
             "best known µs": fmt_us(best), "by": ", ".join(who),
             "gp / best": fmt_r(gp.min() / best if len(gp) else None),
             "best / bound": fmt_r(best / bound if bound == bound and bound > 0 else None)}
        rows.append(r)
        if len(gp) and gp.min() > best * (1 + TIE):
            differ.append(r)
    ratios = [float(r["gp / best"]) for r in rows if r["gp / best"]]
    L.append(f"greedy_plus's best seed is the best known on {sum(x <= 1 + TIE for x in ratios)} of {len(ratios)} "
             f"cases and behind it on {len(differ)}" + (" (listed first, with who found it)" if differ else "")
             + f"; the worst *gp / best* is {max(ratios, default=1.0):.3f}.\n")
    if differ:
        L.append("Cases where greedy_plus is not the best known:\n")
        L.append(to_markdown(pd.DataFrame(differ)))
    L.append("\nEvery case:\n")
    L.append(to_markdown(pd.DataFrame(rows)))
    return "\n".join(L)


def _cpsat_scope(df: pd.DataFrame, ex: pd.DataFrame) -> str:
    """Which cases CP-SAT ran on: every one, or those of the topologies up to some size."""
    ran = set(ex["case"])
    left = df.loc[~df["case"].isin(ran), "topology"].unique()
    if not len(left):
        return "every case"
    most = int(ex["num_npus"].max()) if "num_npus" in ex and ex["num_npus"].notna().any() else 0
    return (f"the topologies of up to {most} NPUs; not on {', '.join(f'`{t}`' for t in sorted(left))}, where the "
            "exact fabric model's own list schedule runs minutes before its search and outside its time limit")


def not_compared() -> str:
    """The registered backends this study does not run, and why (from their declared capabilities)."""
    from solvers import available_solvers, get_solver
    from solvers.base import CAP_EXACT, CAP_FABRIC

    rest = [n for n in available_solvers() if n not in SOLVERS]
    no_fabric = [n for n in rest if CAP_FABRIC not in get_solver(n).capabilities]
    exact = [n for n in rest if n not in no_fabric and CAP_EXACT in get_solver(n).capabilities]
    other = [n for n in rest if n not in no_fabric and n not in exact]
    parts = []
    if no_fabric:
        parts.append(f"{', '.join(no_fabric)} {'does' if len(no_fabric) == 1 else 'do'} not declare switched "
                     "fabrics")
    if exact:
        parts.append(f"the exact {', '.join(exact)} {'declares' if len(exact) == 1 else 'declare'} them but "
                     f"{'is' if len(exact) == 1 else 'are'} not run here (time-limited searches, a study of their "
                     "own)")
    if other:
        parts.append(f"{', '.join(other)} not run")
    return "; ".join(parts) or "every registered backend is in the comparison"


def _pct(x) -> str:
    return f"{100 * x:+.1f}%"


def unwound_notes(c: Cases, g: dict) -> str:
    a, b = g["unwound_pair"]
    r = []
    for topo, kind, cpn, mib in g["unwound"]:
        if topo == a:
            ra = c.t(c.key(a, kind, cpn, mib), "greedy_plus") / c.t(c.key(b, kind, cpn, mib), "greedy_plus")
            r.append((ra, kind, cpn, mib))
    r = [x for x in r if not np.isnan(x[0])]
    if not r:
        return ""
    name = lambda x: f"{x[1]} cpn{x[2]} {MIB[x[3]]}"
    slower = sorted([x for x in r if x[0] > 1.01], reverse=True)
    faster = sorted([x for x in r if x[0] < 0.99])
    same = [x for x in r if 0.99 <= x[0] <= 1.01]
    s = []
    if slower:
        s.append(f"The unwound model is pessimistic on {len(slower)} of {len(r)} cases, "
                 + ", ".join(f"{name(x)} {x[0]:.2f}x" for x in slower)
                 + ": a chunk crosses an unwound link at 50/7 GiB/s, 7x slower than through the switch's port, "
                   "and the root's 7 links add up to its port only when it has 7 different things to move at once "
                   "(Gather, Scatter, the balanced collectives), not when a few chunks fan out from it or into it "
                   "(Broadcast, Reduce; the fewer the chunks, the worse).")
    if same:
        s.append(f"Within 1 % on {len(same)} ({', '.join(name(x) for x in same)}): balanced traffic at 1 GiB, "
                 "where every NPU's port (7 x 50/7 = 50 GiB/s) is the bottleneck in both models.")
    if faster:
        s.append(f"The unwound model is *optimistic* on {len(faster)} ("
                 + ", ".join(f"{name(x)} {x[0]:.3f}x" for x in faster)
                 + "): a transfer through the cut-through switch pays two port latencies (0.5 µs each) where an "
                   "unwound link pays one, which shows when the data term is small.")
    if slower and (same or faster):
        s.append("So docs/fabrics.md's \"2-7x pessimistic for rooted collectives, uneven All-to-All and small "
                 "messages\" holds here for Broadcast and Reduce only; Gather and Scatter are rooted too and equal "
                 "at 1 GiB, and small messages favour the unwound model (uneven All-to-All is not in this grid).")
    return "\n" + "\n\n".join(s) + "\n"


def in_network_notes(c: Cases, g: dict) -> str:
    a, b = g["in_network_pair"]
    out = []
    for kind in ("all_gather", "reduce_scatter", "broadcast", "reduce", "all_reduce"):
        gains = [c.t(c.key(a, k, cpn, mib), "greedy_plus") / c.t(c.key(b, k, cpn, mib), "greedy_plus")
                 for t, k, cpn, mib in g["in_network"] if t == a and k == kind]
        gains = [x for x in gains if not np.isnan(x)]
        if gains:
            out.append(f"{kind} {min(gains):.2f}-{max(gains):.2f}x")
    s = "\nGain range per collective (over chunks and sizes): " + ", ".join(out) + "."
    nv = [(k, cpn, mib) for t, k, cpn, mib in g["in_network"] if t == b and k == "all_reduce"]
    worse = [(k, cpn, mib, c.t(c.key(b, k, cpn, mib), "greedy_plus", "min"), c.t(c.key(b, k, cpn, mib), "nvls"))
             for k, cpn, mib in nv]
    worse = [w for w in worse if not np.isnan(w[3]) and not np.isnan(w[4])]
    if worse:
        beh = [w for w in worse if w[3] > w[4] * (1 + TIE)]
        ahead = [w for w in worse if w[3] < w[4] * (1 - TIE)]
        s += (f" On `{b}` All-Reduce greedy_plus (best seed) is behind the nvls baseline on {len(beh)} of "
              f"{len(worse)} cases" + (" (" + ", ".join(f"cpn{w[1]} {MIB[w[2]]}: {fmt_us(w[3])} vs {fmt_us(w[4])} µs"
                                                       for w in beh) + ")" if beh else "")
              + f", ahead on {len(ahead)}"
              + (" (" + ", ".join(f"cpn{w[1]} {MIB[w[2]]}: {fmt_us(w[3])} vs {fmt_us(w[4])} µs" for w in ahead) + ")"
                 if ahead else "") + ", equal on the rest.")
    return s + "\n"


def _range(vals) -> str:
    v = np.array([x for x in vals if not np.isnan(x)], dtype=float)
    if not len(v):
        return "n/a"
    return f"{v.min():.2f}x" if v.max() - v.min() < 0.005 else f"{v.min():.2f}-{v.max():.2f}x"


def oversub_notes(c: Cases, g: dict) -> str:
    kinds = ("all_gather", "all_to_all", "all_reduce")

    def twin_ratios(a, b, kind, what="gp", mib=None):
        """2:1 / 1:1 of greedy_plus (median seed) or of the bounds, over the grid's cases of ``kind``."""
        out = []
        for t, k, cpn, m in g["oversub"]:
            if t != a or k != kind or (mib is not None and m != mib):
                continue
            ka, kb = c.key(a, k, cpn, m), c.key(b, k, cpn, m)
            out.append(c.t(kb, "greedy_plus") / c.t(ka, "greedy_plus") if what == "gp"
                       else c.bound.get(kb, np.nan) / c.bound.get(ka, np.nan))
        return out

    def flat(vals, tol=0.05):
        v = np.array([x for x in vals if not np.isnan(x)], dtype=float)
        return len(v) > 0 and bool(np.all(np.abs(v - 1) <= tol))

    lines = []
    for label, a, b in g["pairs"]:
        gp = {k: twin_ratios(a, b, k) for k in kinds}
        lb = {k: twin_ratios(a, b, k, "bound") for k in kinds}
        if all(np.isnan(np.array(v, dtype=float)).all() for v in gp.values() if v):
            continue
        lines.append(f"- {label} (`{a}` / `{b}`): 2:1 / 1:1 of greedy_plus "
                     + ", ".join(f"{k} {_range(v)}" for k, v in gp.items() if v) + "; of the bounds "
                     + ", ".join(f"{k} {_range(v)}" for k, v in lb.items() if v) + ".")
    s = "\n" + "\n".join(lines) + "\n"
    leafspines = [x for x in g["pairs"] if topology(x[1]).meta.get("kind") == "leafspine"]
    dgx = next((x for x in g["pairs"] if topology(x[1]).meta.get("kind") == "rail"), None)

    for label, a, b in leafspines:
        fa, fb = _fabric(a), _fabric(b)
        n, p, bw = fa["leaves"] * fa["npus_per_leaf"], fa["npus_per_leaf"], fa["port_GiBps"]
        up_a, up_b = fa["spines"] * fa["spine_link_GiBps"], fb["spines"] * fb["spine_link_GiBps"]
        a2a, a2a_b = twin_ratios(a, b, "all_to_all"), twin_ratios(a, b, "all_to_all", "bound")
        if np.isnan(np.array(a2a, dtype=float)).all():
            continue
        s += (f"\n**{label.split(',')[0]}: 2:1 costs All-to-All.** `{a}` has {fa['spines']} spines and `{b}` "
              f"{fb['spines']}, every leaf-spine link {fa['spine_link_GiBps']:g} GiB/s: a leaf's {p} ports "
              f"({p * bw:g} GiB/s) have {up_a:g} GiB/s of uplinks at 1:1 and {up_b:g} GiB/s at 2:1. All-to-All, "
              f"the one collective here that must cross the uplinks with most of its data, takes {_range(a2a)} "
              f"longer at 2:1 (greedy_plus, median seed; the bounds {_range(a2a_b)}).")
        big = [(cpn, c.key(a, k, cpn, m), c.key(b, k, cpn, m)) for t, k, cpn, m in g["oversub"]
               if t == a and k == "all_to_all" and m == 1024]
        if big:
            export = p * (n - p) / n  # GiB: a leaf's All-to-All export of 1 GiB per NPU
            lim_a, lim_b = export / up_a * 1e6, export / up_b * 1e6
            src_b = sorted({str(c.source.get(kb)) for _, _, kb in big})
            below = all(lim_a < c.bound.get(ka, np.nan) for _, ka, _ in big)
            s += (f" At 1 GiB a leaf exports {p} x {n - p}/{n} = {export:g} GiB, at least {lim_b:.0f} µs over the "
                  f"2:1 uplinks ({lim_a:.0f} µs at 1:1" + (", below the 1:1 bound, " + " / ".join(
                      sorted({f"`{c.source.get(ka)}`" for _, ka, _ in big})) if below else "")
                  + f"); the 2:1 bound is {' / '.join(f'`{x}`' for x in src_b)} ("
                  + ", ".join(f"cpn{cpn} {fmt_us(c.bound.get(kb))} µs" for cpn, _, kb in big) + "), "
                  f"and greedy_plus's best seed is {_range([c.ratio(kb, 'greedy_plus', 'min') for *_, kb in big])} it "
                  f"(1:1: {_range([c.ratio(ka, 'greedy_plus', 'min') for _, ka, _ in big])} its bound).")
        rest = {k: twin_ratios(a, b, k) for k in ("all_gather", "all_reduce")}
        rest_b = [x for k in rest for x in twin_ratios(a, b, k, "bound")]
        if all(flat(v) for v in rest.values() if v) and flat(rest_b, 1e-9):
            s += (" All-Gather and All-Reduce do not notice 2:1 (" + ", ".join(f"{k} {_range(v)}" for k, v in
                                                                            rest.items() if v)
                  + "; their bounds are equal): relayed inside each leaf, a chunk crosses the uplinks at most once "
                    "per other leaf, far below their capacity.")
        else:
            s += (" All-Gather and All-Reduce: " + ", ".join(f"{k} {_range(v)}" for k, v in rest.items() if v)
                  + f" (bounds {_range(rest_b)}).")
    if dgx:
        label, a, b = dgx
        fa, fb = _fabric(a), _fabric(b)
        allr = [x for k in kinds for x in twin_ratios(a, b, k)]
        allb = [x for k in kinds for x in twin_ratios(a, b, k, "bound")]
        spines = (f"{fa['spines']} spines at 1:1, {fb['spines']} at 2:1, every leaf-spine link "
                  f"{fa['spine_link_GiBps']:.3f} GiB/s")
        if flat(allr, 1e-9) and flat(allb, 1e-9):
            s += (f"\n\n**The DGX-H100 cluster does not notice 2:1** ({spines}), and its bounds say so too "
                  f"(greedy_plus {_range(allr)}, bounds {_range(allb)}): it is rail-optimized (GPU g of every node "
                  "on leaf g), so every collective here crosses nodes leaf-locally (over NVSwitch to the right GPU, "
                  "then its rail) and never needs the spines.")
        else:
            s += (f"\n\n**The DGX-H100 cluster** ({spines}): 2:1 / 1:1 of greedy_plus {_range(allr)}, of the "
                  f"bounds {_range(allb)}; it is rail-optimized (GPU g of every node on leaf g), so a collective can "
                  "cross nodes leaf-locally (over NVSwitch to the right GPU, then its rail) without the spines.")
        f = topology(dgx[1]).meta["fabric"]
        nodes, gpn, nic = f["nodes"], f["gpus_per_node"], f["nic_GiBps"]
        k = c.key(dgx[1], "all_reduce", 1, 1024)
        gp, lb = c.t(k, "greedy_plus"), c.bound.get(k, np.nan)
        kag = c.key(dgx[1], "all_gather", 1, 1024)
        est = 2 * (nodes - 1) / nodes / (gpn * nic) * 1e6  # µs for 1 GiB
        if not np.isnan(gp):
            rng = _range([c.ratio(c.key(tt, kk, cpn, m), "greedy_plus") for tt, kk, cpn, m in g["oversub"]
                          if tt == dgx[1] and kk == "all_reduce"])
            if lb >= 0.95 * est:   # the bound knows the rails do not reduce (docs/bounds.md, the group bound)
                s += (f"\n\n**On the DGX All-Reduce greedy_plus is {rng} the bound.** At 1 GiB the bound "
                      f"({fmt_us(lb)} µs) is that of an All-Reduce of {nodes} parties without in-network reduction "
                      f"across the nodes: 2(P-1)/P of the buffer through each node's {gpn} NICs of {nic:.3f} GiB/s "
                      f"= {est:.0f} µs, latencies aside (Patarasuk and Yuan 2009). greedy_plus's {fmt_us(gp)} µs is "
                      f"{gp / lb:.2f}x it: its Reduce-Scatter and All-Gather each meet their own bound, and the rest "
                      "is mostly the two phases following each other, which shrinks with more chunks per NPU (a ring "
                      "on each rail, pipelined chunk by chunk, was tried and ended no sooner: the node's switch then "
                      "serializes the in-switch reductions and multicasts around the last ring steps).")
                return s + "\n"
            s += (f"\n\n**greedy_plus's {rng} the bound on the DGX All-Reduce is probably mostly a weak bound.** Its bound "
                  "at 1 GiB "
                  f"({fmt_us(lb)} µs) is barely above the All-Gather's ({fmt_us(c.bound.get(kag, np.nan))} µs), yet "
                  "the rail leaves and spines do not reduce, so across the nodes this is an All-Reduce of "
                  f"{nodes} parties without in-network reduction, whose standard bandwidth lower bound (2(P-1)/P "
                  f"of the buffer through each party's links; Patarasuk and Yuan 2009) over a node's {gpn} NICs of {nic:.3f} GiB/s is "
                  f"2 x {nodes - 1}/{nodes} x 1 GiB / {gpn * nic:.1f} GiB/s = {est:.0f} µs, latencies aside: "
                  f"greedy_plus's {fmt_us(gp)} µs is {gp / est:.2f}x that (our hand estimate, not a bound the "
                  "project computes).")
    return s + "\n"


def portfolio_note(df: pd.DataFrame) -> str:
    """On how many cases greedy_plus's best seed kept a baseline's schedule (its ``baseline_candidates``)."""
    gp = df[(df["solver"] == "greedy_plus") & df["ok"]]
    col = "candidate" if "candidate" in gp and gp["candidate"].notna().any() else "s_chosen"  # older tables
    if gp.empty or col not in gp:
        return ""
    best = gp.loc[gp.groupby("case")["collective_time_us"].idxmin()]
    kept = best[col].astype(str)
    kept = kept[kept.str.startswith("baseline:")].str.removeprefix("baseline:")
    if kept.empty:
        return ""
    per = kept.value_counts()
    return (f" On {len(kept)} of them its best seed's schedule is a baseline's, which greedy_plus runs as "
            "candidates on small fabrics (option `baseline_candidates`, solvers/greedy/fabric_solver.py) and keeps "
            "only when strictly faster than its own: " + ", ".join(f"{n} on {k}" for n, k in per.items()) + ".")


def behind_notes(c: Cases, df: pd.DataFrame, behind: list[dict]) -> str:
    cases = df.loc[df["solver"] == "greedy_plus", "case"].nunique()
    if not behind:
        return (f"\n**greedy_plus (best of its seeds) is the fastest, or tied, on every one of the {cases} cases.**"
                + portfolio_note(df) + "\n")
    s = [f"\n**greedy_plus (best of its {len(SEEDS)} seeds) is not the fastest on {len(behind)} of {cases} cases:**"
         + portfolio_note(df) + "\n"]
    for b in sorted(behind, key=lambda x: -x["gp_min"] / x["t"]):
        s.append(f"- `{b['case']}`: greedy_plus {fmt_us(b['gp_min'])} µs (median seed {fmt_us(b['gp_median'])}; "
                 f"{b['gp_min'] / b['bound']:.3f}x the bound) vs {' = '.join(b['ties'])} {fmt_us(b['t'])} µs "
                 f"({b['t'] / b['bound']:.3f}x): {_pct(b['gp_min'] / b['t'] - 1)}.")
    return "\n".join(s) + "\n"


def far_notes(c: Cases, df: pd.DataFrame) -> str:
    ks = sorted(set(df.loc[df["solver"] == "greedy_plus", "case"]))
    far = [(k, c.ratio(k, "greedy_plus", "min")) for k in ks]
    far = sorted([x for x in far if not np.isnan(x[1]) and x[1] > 1 + FAR], key=lambda x: -x[1])
    at = sum(1 for k in ks if c.ratio(k, "greedy_plus", "min") <= 1 + AT_BOUND)
    s = f"\ngreedy_plus's best seed meets the bound on {at} of {len(ks)} cases."
    if not far:
        return s + f" It is never more than {100 * FAR:g} % above it.\n"
    s += (f" More than {100 * FAR:g} % above it on {len(far)}: " + ", ".join(f"`{k}` {r:.3f}x" for k, r in far)
          + ". (No exact backend ran in this study, so how far these are from the optimum is unknown"
          + ("; section 3 argues the DGX All-Reduce bound is weak" if any(
              k.startswith("dgx_") and " all_reduce " in k for k, _ in far) else "") + ".)\n")
    return s


# docs/export.md, "Switched fabrics": the greedy (seed 0) on switched8_sf, ours / ASTRA-sim µs, as measured there
def astra_notes(df: pd.DataFrame, g: dict) -> str:
    every = df[df["parts"].astype(str).str.contains("astra") & df["solver"].isin(RANDOMIZED)]
    sat = int(every["astra_error"].astype(str).str.contains("clock stopped").sum()) if "astra_error" in every else 0
    a = every[every["astra_sim_time_us"].notna()] if "astra_sim_time_us" in every else every.iloc[0:0]
    if a.empty:
        return ""
    agree = (a["astra_minus_ours_us"].abs() * 1000 <= a["astra_causal_depth_ns"] + 1e-6)
    s = f"\n{int(agree.sum())} of {len(a)} pinned round trips agree within the rounding bound."
    if sat:
        s += (f" {sat} more could not be replayed pinned: a pinned bundle runs 1000x slower, and this ASTRA-sim "
              "binary's clock stops at 2^31 - 1 ns (2.1 ms of our time), which `run_bundle` refuses rather than "
              "report (docs/export.md); their unpinned runs are in the table.")
    s += "\n"
    if "astra_unpinned_us" not in a or a["astra_unpinned_us"].isna().all():
        return s
    d = a["astra_unpinned_us"] - a["collective_time_us"]
    q = a["astra_unpinned_us"] / a["collective_time_us"]
    a2a = a["collective"] == "all_to_all"
    split = (f"; All-to-All, which has no data dependencies, {_range(q[a2a])}: the pipelined latency; the others "
             f"{_range(q[~a2a])}" if a2a.any() and (~a2a).any() else "")
    return s + (f"Unpinned, ASTRA-sim is slower on {int((d > 1e-3).sum())} and faster on {int((d < -1e-3).sum())} "
                f"(its time over ours {q.min():.3f}-{q.max():.3f}{split}). Seeds with the same "
                "verified time get different unpinned times: an unpinned replay's time depends on the order the "
                "sends become ready, not only on our makespan.\n")


# ---------------------------------------------------------------------------------------------- main
def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results" / NAME), help="directory for the table, figure, markdown")
    ap.add_argument("--quick", action="store_true", help="tiny grid (used by the tests)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel worker processes")
    ap.add_argument("--docs", default=None,
                    help="also copy figure, table and markdown here (default: docs/studies, none with --quick)")
    ap.add_argument("--plot-only", action="store_true", help="re-report from the existing results.parquet")
    ap.add_argument("--no-astra", action="store_true", help="skip the ASTRA-sim runs of part 5")
    ap.add_argument("--cpsat", type=float, default=0.0, metavar="S",
                    help="also run cpsat with this time limit (s) on every case (section 6; 0: not)")
    ap.add_argument("--cpsat-max-npus", type=int, default=0, metavar="N",
                    help="only on topologies of at most N NPUs (0: any); on the 32-GPU fabrics the exact fabric "
                         "model's own list schedule runs minutes before its search and its time limit")
    a = ap.parse_args()
    if a.docs is None and not a.quick:
        a.docs = str(ROOT / "docs" / "studies")
    return a


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    g = grid(args.quick)
    wall = None
    if args.plot_only:
        df = pd.read_parquet(out / "results.parquet")
        if (out / "wall_time_s.txt").exists():
            wall = float((out / "wall_time_s.txt").read_text())
    else:
        todo = tasks(g, args.cpsat, args.cpsat_max_npus)
        print(f"{len(todo)} runs, {args.jobs} job(s)", flush=True)
        (out / "uncommitted.txt").write_text(uncommitted())
        t0 = time.perf_counter()
        load0 = os.getloadavg()[0]
        rows = run_all(todo, args.jobs, None if args.no_astra else str(out / "astra"))
        wall = time.perf_counter() - t0
        (out / "wall_time_s.txt").write_text(f"{wall:.1f}\n")
        df = tidy(pd.DataFrame(rows))
        df["load_start"], df["load_end"] = load0, os.getloadavg()[0]
        df.to_parquet(out / "results.parquet", index=False)
        print(f"{len(df)} runs in {wall:.1f} s", flush=True)
    unc = out / "uncommitted.txt"
    args.uncommitted = [ln for ln in unc.read_text().splitlines() if ln.strip()] if unc.exists() else []
    df = prepare(df)
    cmd = "python experiments/study_fabrics.py" + (" --quick" if args.quick else "") + (
        f" --jobs {args.jobs}" if args.jobs > 1 else "") + (" --no-astra" if args.no_astra else "") + (
        f" --cpsat {args.cpsat:g}" if args.cpsat else "") + (
        f" --cpsat-max-npus {args.cpsat_max_npus}" if args.cpsat and args.cpsat_max_npus else "")
    fig = plot(Cases(df), df, g, out / f"{NAME}.png")
    text = report(df, g, args, wall, cmd, fig)
    if not args.quick:
        text = text.replace("`docs/studies/fabrics.parquet`", f"`{_rel(Path(args.docs) / (NAME + '.parquet'))}`")
    (out / f"{NAME}.md").write_text(text)
    print(f"wrote {out / (NAME + '.md')}")
    if args.docs:
        d = Path(args.docs)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{NAME}.md").write_text(text)
        (d / fig.name).write_bytes(fig.read_bytes())
        (d / f"{NAME}.parquet").write_bytes((out / "results.parquet").read_bytes())
        print(f"copied to {d}")
    return 0


def uncommitted() -> str:
    """The code files with uncommitted changes when the sweep started (other engineers share the working tree)."""
    import subprocess

    try:
        r = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=10,
                           check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    keep = []
    for ln in r.stdout.splitlines():
        path = ln[3:].strip()
        if path.endswith(".py") and path.split("/")[0] in ("solvers", "tacos_bench", "run.py"):
            keep.append(f"{ln[:2].strip() or '?'} {path}")
    return "\n".join(keep) + ("\n" if keep else "")


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


if __name__ == "__main__":
    sys.exit(main())
