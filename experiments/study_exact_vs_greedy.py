"""Study: the greedy heuristics against the exact solvers, run cold: proofs, bounds, gaps and anytime curves.

    python experiments/study_exact_vs_greedy.py [--scale small|full] [--time-limit 60] [--jobs 2]

Backends (every schedule verified; failures and refusals are kept as error rows):

* ``greedy`` (the TACOS rule) and ``greedy_plus``;
* ``milp`` and ``cpsat`` on the time-expanded network (TEN; ``solver.model=auto``), cold
  (``solver.warm_start=false``): what the project had before the continuous model ("today's" TEN models);
* ``cpsat solver.model=continuous`` (solvers/exact/continuous.py), cold and warm (warm: started from the
  greedy's schedules, and no search at all when one of them meets the lower bound).

Families: tori, two-tier clusters ``hetero<SX>x<SY>x<P>``, hetero meshes ``hetero_mesh<X>x<Y>``, random asymmetric
graphs ``random<N>d3s0`` and the two-server cluster of issue 20 (conf/topo/two_server2x4.yaml, two servers of P GPUs),
4 to 64 NPUs; All-Gather, All-to-All and Broadcast at 1 MiB and 1 GiB with 1 and 4 chunks per NPU (Broadcast: 1 and 4
chunks in all). ``--scale full`` runs every backend on that whole grid (``conf/experiment/exact_vs_greedy*.yaml``,
hours at 60 s per run); ``--scale small`` (the default) runs the heuristics on the whole grid and the exact backends
on a subset that fits about half an hour on 2 cores at ``--time-limit 20`` (see :data:`SMALL_TEN`,
:data:`SMALL_CONT`); ``--quick`` is the tiny grid of the tests.

Reports, per case: the best known time, the best proven bound and who proved it, each backend's gap to that
bound and when it first came within 1 % of the best known time; per family the largest N each backend proves
optimal (cold); the TEN models against the continuous model; where greedy_plus stays above the best bound. Figures:
gap against N per family and backend, and incumbent/bound against time on selected cases
(:func:`tacos_bench.plots.plot_anytime`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from _study import ROOT, error_summary, load, ok_rows, run_sweep, to_markdown, write_report

NAME = "exact_vs_greedy"
TWO_SERVER_EXPERIMENT = "exact_vs_greedy_two_server"
EPS = 1e-9
WITHIN = 0.01
OFF = 1e-4          # greedy_plus counts as above the bound beyond this relative gap (float noise of µs times)

# family -> {N: topology}; the two-server cluster is conf/topo/two_server2x4.yaml with topo.dims=[2,1,N/2]
FAMILIES: dict[str, dict[int, str]] = {
    "torus": {4: "torus2x2", 8: "torus2x4", 16: "torus4x4", 32: "torus4x8", 64: "torus8x8"},
    "hetero": {4: "hetero2x1x2", 8: "hetero2x2x2", 16: "hetero2x2x4", 32: "hetero4x2x4", 64: "hetero4x4x4"},
    "hetero_mesh": {4: "hetero_mesh2x2", 8: "hetero_mesh2x4", 16: "hetero_mesh4x4", 32: "hetero_mesh4x8",
                    64: "hetero_mesh8x8"},
    "random": {4: "random4d3s0", 8: "random8d3s0", 16: "random16d3s0", 32: "random32d3s0", 64: "random64d3s0"},
    "two_server": {n: f"two_server2x{n // 2}" for n in (4, 8, 16, 32, 64)},
}
FAMILY_NOTE = {
    "torus": "2-D tori, every link 50 GiB/s 0.5 µs (homogeneous: the TEN is exact)",
    "hetero": "two-tier clusters hetero<SX>x<SY>x<P>: servers of P NPUs fully connected at 150 GiB/s 0.25 µs on an "
              "SX x SY torus of servers, one 25 GiB/s 2 µs rail per local index",
    "hetero_mesh": "2-D meshes, x links 50 GiB/s, y links 100 GiB/s, 0.5 µs",
    "random": "random asymmetric strongly connected graphs, out-degree 3, links 25/50/100 GiB/s, 0.5/1/2 µs",
    "two_server": "two servers of N/2 GPUs, 150 GiB/s 1 µs inside, one 25 GiB/s 5 µs NIC link per GPU to the "
                  "same-index GPU of the other server (issue 20; N = 8 is its cluster)",
}
HETEROGENEOUS = ("hetero", "hetero_mesh", "random", "two_server")

BACKENDS = ("greedy", "greedy_plus", "milp TEN cold", "cpsat TEN cold", "cpsat cont. cold", "cpsat cont. warm")
EXACT_COLD = ("milp TEN cold", "cpsat TEN cold", "cpsat cont. cold")
TEN = ("milp TEN cold", "cpsat TEN cold")
# solver overrides of each group of backends (one Hydra sweep each)
GROUPS = {
    "heur": ["solver=greedy,greedy_plus"],
    "ten": ["solver=milp,cpsat", "solver.warm_start=false", "solver.model=auto"],
    "cold4": ["solver=greedy,greedy_plus,milp,cpsat", "solver.warm_start=false", "solver.model=auto"],
    "cont": ["solver=cpsat", "solver.model=continuous", "solver.warm_start=false,true"],
}
COLLECTIVES = ("all_gather", "all_to_all", "broadcast")
SIZES = (1, 1024)
CPNS = (1, 4)
NS = (4, 8, 16, 32, 64)

# A block: (collectives, buffer_mib values, chunks_per_npu values, N values) -- a product, one sweep per group and
# topology kind. SMALL: the TEN models on the cases where proofs are in reach plus one size beyond (80 cases); the
# continuous model, cheap where its own start meets the bound, on every case up to 16 NPUs, with 1 chunk per NPU at
# 32 and All-Gather with 1 chunk at 64 (270 cases); the heuristics on the whole grid (300 cases).
FULL_GRID = (COLLECTIVES, SIZES, CPNS, NS)
SMALL_TEN = (
    (("all_gather",), SIZES, CPNS, (4, 8)),
    (("all_gather",), SIZES, (1,), (16,)),
    (("all_gather",), (1,), (1,), (32,)),
    (("all_to_all",), (1024,), (1,), (4, 8, 16)),
    (("broadcast",), (1,), (4,), (4, 8)),
)
SMALL_CONT = (
    (COLLECTIVES, SIZES, CPNS, (4, 8, 16)),
    (COLLECTIVES, SIZES, (1,), (32,)),
    (("all_gather",), SIZES, (1,), (64,)),
)
QUICK = ((("all_gather",), (1,), (1,), (4,)),)
QUICK_FAMILIES = ("two_server",)   # one family: each sweep is a process start


# ---------------------------------------------------------------------------------------------- the sweeps
def _axes(colls, sizes, cpns) -> list[str]:
    return [f"collective={','.join(colls)}", f"collective.buffer_mib={','.join(map(str, sizes))}",
            f"collective.chunks_per_npu={','.join(map(str, cpns))}"]


def _topos(ns, families) -> list[tuple[str, list[str]]]:
    """(experiment, topology overrides): the named families in one sweep, the two-server cluster in another."""
    out = []
    named = [FAMILIES[f][n] for f in families if f != "two_server" for n in ns]
    if named:
        out.append((NAME, ["topo.name=" + ",".join(named)]))
    if "two_server" in families:
        out.append((TWO_SERVER_EXPERIMENT, ["topo.dims=" + ",".join(f"[2,1,{n // 2}]" for n in ns)]))
    return out


def sweeps(scale: str, time_limit: float) -> list[tuple[str, str, list[str]]]:
    """(part name, experiment, overrides) of every sweep of the study."""
    tl = f"solver.time_limit_s={time_limit:g}"
    parts = []
    if scale == "quick":
        for i, (colls, sizes, cpns, ns) in enumerate(QUICK):
            for exp, topo in _topos(ns, QUICK_FAMILIES):
                kind = "two" if exp == TWO_SERVER_EXPERIMENT else "named"
                for g in ("cold4", "cont"):
                    parts.append((f"q{i}-{g}-{kind}", exp, [*GROUPS[g], tl, *topo, *_axes(colls, sizes, cpns)]))
        return parts
    # the heuristics on the whole grid, once
    colls, sizes, cpns, ns = FULL_GRID
    for exp, topo in _topos(ns, FAMILIES):
        kind = "two" if exp == TWO_SERVER_EXPERIMENT else "named"
        parts.append((f"heur-{kind}", exp, [*GROUPS["heur"], tl, *topo, *_axes(colls, sizes, cpns)]))
    for g, blocks in (("ten", (FULL_GRID,) if scale == "full" else SMALL_TEN),
                      ("cont", (FULL_GRID,) if scale == "full" else SMALL_CONT)):
        for i, (colls, sizes, cpns, ns) in enumerate(blocks):
            for exp, topo in _topos(ns, FAMILIES):
                kind = "two" if exp == TWO_SERVER_EXPERIMENT else "named"
                parts.append((f"{g}{i}-{kind}", exp, [*GROUPS[g], tl, *topo, *_axes(colls, sizes, cpns)]))
    return parts


def anytime_sweeps(time_limit: float) -> list[tuple[str, str, list[str]]]:
    """(part name, experiment, overrides) of the sweeps of :data:`ANYTIME_CASES` alone, every backend: what
    ``--anytime-only`` runs to redraw the anytime figure (36 runs) without the whole grid."""
    tl = f"solver.time_limit_s={time_limit:g}"
    blocks = (("ag1", NAME, ["topo.name=hetero2x2x4,hetero_mesh4x4,random16d3s0", *_axes(("all_gather",), (1,), (1,))]),
              ("a2a", NAME, ["topo.name=random16d3s0", *_axes(("all_to_all",), (1024,), (1,))]),
              ("two", TWO_SERVER_EXPERIMENT, ["topo.dims=[2,1,4]", *_axes(("all_gather",), (1024,), (1, 4))]))
    return [(f"any-{g}-{b}", exp, [*GROUPS[g], tl, *over]) for b, exp, over in blocks for g in ("heur", "ten", "cont")]


def count_runs(parts) -> tuple[int, int]:
    """(heuristic runs, exact runs) of the sweeps (the product of every comma list)."""
    heur = exact = 0
    for name, _, over in parts:
        n = 1
        for o in over:
            if "=" in o and not o.startswith("topo.dims="):
                n *= len(o.split("=", 1)[1].split(","))
            elif o.startswith("topo.dims="):
                n *= o.count("[")
        solvers = next(o for o in over if o.startswith("solver=")).split("=", 1)[1].split(",")
        per = n // len(solvers)
        h = sum(s in ("greedy", "greedy_plus") for s in solvers) * per
        heur += h
        exact += n - h
    return heur, exact


# ---------------------------------------------------------------------------------------------- the table
def family_of(topology: str) -> str:
    for fam, sizes in FAMILIES.items():
        if topology in sizes.values():
            return fam
    for fam in ("hetero_mesh", "two_server", "torus", "random", "hetero"):
        if topology.startswith(fam):
            return fam
    return "other"


def backend_of(row) -> str:
    s = row["solver"]
    if s in ("greedy", "greedy_plus"):
        return s
    warm = row.get("p_solver_warm_start")
    warm = "warm" if (warm is True or str(warm).lower() == "true") else "cold"
    if s == "cpsat" and row.get("p_solver_model") == "continuous":
        return f"cpsat cont. {warm}"
    return f"{s} TEN {warm}"


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["family"] = df["topology"].map(family_of)
    df["backend"] = df.apply(backend_of, axis=1)
    size = df["buffer_mib"].map(lambda b: "1 GiB" if b == 1024 else f"{b:g} MiB")
    df["combo"] = df["collective"] + " " + size + " cpn" + df["chunks_per_npu"].astype(str)
    df["case"] = df["topology"] + " " + df["combo"]
    ok = (df["status"] != "error") & df["valid"].astype("boolean").fillna(False)
    df["ok"] = ok.astype(bool)
    t = df["collective_time_us"].astype(float)
    lb = df["lower_bound_us"].astype(float)
    scope = df.get("optimality_scope", pd.Series(None, index=df.index))
    # proven optimal for the problem the verifier checks: the backend's own proof in continuous time, or the
    # verified time meets the project's continuous lower bound (a TEN optimum above that bound is not a proof)
    df["proven"] = df["ok"] & (df["status"] == "optimal") & ((scope == "continuous") | (t <= lb * (1 + EPS)))
    df["ten_only"] = df["ok"] & (df["status"] == "optimal") & ~df["proven"]
    own = df.get("best_bound_us", pd.Series(np.nan, index=df.index)).astype(float)
    df["own_bound_us"] = own.where(scope == "continuous")
    return df


def _trace(r) -> pd.DataFrame | None:
    name, out_dir = r.get("anytime_file"), r.get("output_dir")
    if not isinstance(name, str) or not isinstance(out_dir, str) or not (Path(out_dir) / name).is_file():
        return None
    return pd.read_csv(Path(out_dir) / name)


def _first_within(trace: pd.DataFrame, target: float) -> float | None:
    hit = trace[trace["incumbent_us"].astype(float) <= target]
    return None if hit.empty else float(hit["time_s"].min())


def case_table(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per case (best known, best bound, who proved it) and one per (case, backend): time, gap, proof,
    time to within 1 % of the best known time."""
    keys = ["family", "topology", "num_npus", "collective", "buffer_mib", "chunks_per_npu", "combo", "case"]
    rows = []
    # the project's bound: what the heuristics' records carry (an exact record may fold its own bound in)
    heur = df[df["backend"].isin(("greedy", "greedy_plus"))]
    project_lb = df.groupby("case")["lower_bound_us"].max()
    project_lb.update(heur.groupby("case")["lower_bound_us"].max())
    src = df.groupby("case")["lower_bound_source"].agg(lambda s: s.dropna().mode().iloc[0] if s.notna().any()
                                                       else "")
    for case, g in df.groupby("case", sort=False):
        good = g[g["ok"]]
        best = float(good["collective_time_us"].min()) if len(good) else math.nan
        best_by = ", ".join(sorted(set(good.loc[good["collective_time_us"] <= best * (1 + EPS), "backend"]),
                                   key=BACKENDS.index)) if len(good) else ""
        nb = g[g["status"] != "error"]
        plb = float(project_lb[case])
        own = nb["own_bound_us"].astype(float)
        bound = max(plb, float(own.max()) if own.notna().any() else -math.inf)
        if own.notna().any() and own.max() > plb * (1 + EPS):
            who = ", ".join(sorted(set(nb.loc[own >= bound * (1 - EPS), "backend"]), key=BACKENDS.index))
        else:
            who = f"{src[case]} bound"
        row = {k: g[k].iloc[0] for k in keys}
        row.update(best_us=best, best_by=best_by, bound_us=bound, bound_by=who,
                   optimal=bool(best <= bound * (1 + EPS)))
        rows.append(row)
    cases = pd.DataFrame(rows)
    # time to within 1 % of the best known time: the anytime trace where there is one, else the run's time
    per = []
    best = cases.set_index("case")["best_us"]
    bound = cases.set_index("case")["bound_us"]
    for _, r in df.iterrows():
        case, b = r["case"], r["backend"]
        d = {"case": case, "backend": b, "status": r["status"], "ok": r["ok"], "proven": bool(r["proven"]),
             "ten_only": bool(r["ten_only"]), "time_us": r["collective_time_us"] if r["ok"] else math.nan,
             "stop_reason": r.get("stop_reason"), "solution_source": r.get("solution_source"),
             "search_time_s": r.get("search_time_s"), "synthesis_time_s": r.get("synthesis_time_s"),
             "error": r.get("error")}
        d["gap"] = d["time_us"] / bound[case] - 1 if r["ok"] else math.nan
        t1 = None
        if r["ok"]:
            target = best[case] * (1 + WITHIN)
            tr = _trace(r)
            if tr is not None and len(tr):
                t1 = _first_within(tr, target)
            if t1 is None and r["collective_time_us"] <= target:
                t1 = float(r.get("synthesis_time_s") or 0.0)
        d["t1pct_s"] = t1
        per.append(d)
    return cases, pd.DataFrame(per)


def _get(idx: pd.DataFrame, case: str, backend: str):
    """The (first) run of ``backend`` on ``case``, or None."""
    if (case, backend) not in idx.index:
        return None
    r = idx.loc[(case, backend)]
    return r.iloc[0] if isinstance(r, pd.DataFrame) else r


def _cell(r) -> str:
    if r is None:
        return "—"
    if not r["ok"]:
        if r["status"] == "error":
            return "refused" if "refused" in str(r["error"]) else "error"
        return "no schedule"
    mark = "*" if r["proven"] else ("t" if r["ten_only"] else "")
    t = "never" if r["t1pct_s"] is None or pd.isna(r["t1pct_s"]) else f"{r['t1pct_s']:.2f} s"
    return f"{100 * r['gap']:.2f}%{mark} ({t})"


def largest_proven(per: pd.DataFrame, cases: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per ``by`` and backend: the largest N with a proof, and proofs / runs."""
    m = per.merge(cases[["case", "family", "num_npus", "combo"]], on="case")
    out = []
    for key, g in m.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        for b in BACKENDS:
            s = g[g["backend"] == b]
            if s.empty:
                row[b] = ""
                continue
            p = s[s["proven"]]
            ns = sorted(s["num_npus"].unique())
            row[b] = (f"{int(p['num_npus'].max())}" if len(p) else "none") + f" ({len(p)}/{len(s)}; N≤{ns[-1]})"
        out.append(row)
    return pd.DataFrame(out)


def ten_vs_continuous(per: pd.DataFrame, cases: pd.DataFrame) -> pd.DataFrame:
    """Per family: the largest N proven cold by the TEN models and by the continuous model (also on the TEN's
    cases only), with the largest N each ran."""
    m = per.merge(cases[["case", "family", "num_npus"]], on="case")

    def largest(g) -> str:
        p = g[g["proven"]]["num_npus"]
        return (f"{int(p.max())}" if len(p) else "none") + (f" (N≤{int(g['num_npus'].max())} run)" if len(g) else "")

    rows = []
    for fam in FAMILIES:
        g = m[m["family"] == fam]
        ten = g[g["backend"].isin(TEN)]
        cont = g[g["backend"] == "cpsat cont. cold"]
        if ten.empty and cont.empty:
            continue
        a = ten[ten["proven"]]["num_npus"].max() if ten["proven"].any() else None
        both = cont[cont["case"].isin(set(ten["case"]))]
        b = both[both["proven"]]["num_npus"].max() if both["proven"].any() else None
        rows.append({"family": fam, "heterogeneous": fam in HETEROGENEOUS,
                     "TEN cold (milp or cpsat)": largest(ten), "continuous cold": largest(cont),
                     "continuous cold, on the TEN's cases": largest(both),
                     "ratio on the same cases": f"{b / a:g}x" if a and b else ""})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- figures
def plot_gaps(per: pd.DataFrame, cases: pd.DataFrame, path: Path) -> Path:
    """Gap to the best proven bound against N, one column per family, one line per backend: the median (top) and
    the largest (bottom) gap over the cases the backend ran at that N."""
    from tacos_bench.plots import _plt

    plt = _plt()
    m = per[per["ok"]].merge(cases[["case", "family", "num_npus"]], on="case")
    fams = [f for f in FAMILIES if f in set(m["family"])]
    fig, axes = plt.subplots(2, len(fams), figsize=(3.9 * len(fams), 6.4), squeeze=False, sharey="row",
                             sharex=True)
    cmap = plt.get_cmap("tab10")
    for j, fam in enumerate(fams):
        g = m[m["family"] == fam]
        for i, b in enumerate(BACKENDS):
            s = g[g["backend"] == b].groupby("num_npus")["gap"]
            if not len(s):
                continue
            x = s.median().index.to_numpy() * (1 + 0.04 * (i - 2.5))
            for row, stat in ((0, s.median()), (1, s.max())):
                axes[row, j].plot(x, 100 * stat.clip(lower=0).to_numpy(), marker="o", ms=4, color=cmap(i),
                                  label=b, ls="-" if b in ("greedy", "greedy_plus") else "--")
        axes[0, j].set_title(fam, fontsize=10)
        for row in (0, 1):
            ax = axes[row, j]
            ax.set_xscale("log", base=2)
            ax.set_xticks(NS)
            ax.set_xticklabels([str(n) for n in NS])
            ax.set_yscale("symlog", linthresh=1)
            ax.grid(alpha=0.3)
        axes[1, j].set_xlabel("NPUs")
    for row in (0, 1):  # after every column: a shared axis keeps the limits of the first one set
        top = max((max(ln.get_ydata(), default=0) for ax in axes[row] for ln in ax.get_lines()), default=1)
        axes[row, 0].set_ylim(-0.2, max(2.0, 1.5 * float(top)))
    axes[0, 0].set_ylabel("median gap (%)")
    axes[1, 0].set_ylabel("largest gap (%)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("time / best proven bound - 1 over the cases each backend ran at that N (0: at the bound)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


ANYTIME_CASES = ("two_server2x4 all_gather 1 GiB cpn1", "two_server2x4 all_gather 1 GiB cpn4",
                 "hetero2x2x4 all_gather 1 MiB cpn1", "hetero_mesh4x4 all_gather 1 MiB cpn1",
                 "random16d3s0 all_to_all 1 GiB cpn1", "random16d3s0 all_gather 1 MiB cpn1")


def plot_anytime_cases(df: pd.DataFrame, path: Path) -> Path | None:
    from tacos_bench.plots import anytime_table, plot_anytime

    want = [c for c in ANYTIME_CASES if c in set(df["case"])] or list(df["case"].drop_duplicates()[:3])
    # every run with a trace, those without a result too: the figure marks them instead of leaving them out
    sel = df[df["case"].isin(want)].copy()
    # one title per case and one label per backend: the case as the topology, the backend as the solver
    sel["topology"] = sel["case"]
    sel["solver"] = sel["backend"]
    sel["p_solver_warm_start"] = None
    sel["p_solver_model"] = None
    long = anytime_table(sel)
    if long.empty:
        return None
    return plot_anytime(long.drop(columns=["collective", "chunks_per_npu", "buffer_mib", "root"], errors="ignore"),
                        path, logx=True)


# ---------------------------------------------------------------------------------------------- report
def report_body(df: pd.DataFrame, scale: str, time_limit: float, wall_s: float | None, jobs: int) -> tuple[str, tuple]:
    cases, per = case_table(df)
    exact_cases = set(per.loc[per["backend"].isin(EXACT_COLD + ("cpsat cont. warm",)), "case"])
    cases["exact_ran"] = cases["case"].isin(exact_cases)
    lines = []
    n_h = int(per["backend"].isin(("greedy", "greedy_plus")).sum())
    lines.append(
        f"Scale `{scale}`, {time_limit:g} s time limit per run, {len(df)} runs ({n_h} heuristic, {len(df) - n_h} "
        f"exact) on {len(cases)} cases, {len(exact_cases)} of them with the exact backends"
        + (f"; wall time {wall_s / 60:.1f} min with {jobs} parallel job(s) on this 2-core machine" if wall_s else "")
        + ". Code: " + ", ".join(f"`{c[:7]}{'-dirty' if str(c).endswith('-dirty') else ''}` ({n} runs)"
                                 for c, n in df["git_commit"].astype(str).value_counts().items())
        + " (`git_commit` of the records). CP-SAT runs its default 8 workers (on 2 cores, and two runs at once with"
          " `--jobs 2`): its figures are"
          " those of a busy small machine, not of a workstation.\n")
    if scale == "small":
        lines.append("The `small` scale fits about half an hour on 2 cores: the heuristics and the bounds cover the "
                     "whole grid up to 64 NPUs; the TEN models run on a subset where proofs are in reach plus one size "
                     "beyond (All-Gather with 1 and 4 chunks at both sizes up to 8 NPUs, 1 chunk at 16, 1 MiB 1 chunk "
                     "at 32; All-to-All 1 GiB 1 chunk up to 16; Broadcast 1 MiB in 4 chunks up to 8); the continuous "
                     "model (cold and warm) on every case up to 16 NPUs, on the 1-chunk cases at 32 and on All-Gather "
                     "with 1 chunk at 64. `--scale full` runs every backend everywhere.\n")
    lines.append("Backends: `greedy` (the TACOS rule), `greedy_plus`; `milp TEN cold` and `cpsat TEN cold` are the "
                 "time-expanded-network models (`solver.model=auto`, `solver.warm_start=false`), i.e. the exact side "
                 "as it was before the continuous model; `cpsat cont. cold` / `warm` is `solver=cpsat "
                 "solver.model=continuous` with `solver.warm_start=false` / `true` (warm: started from the greedy's "
                 "schedules, no search at all when one meets the lower bound: `stop_reason=bound_met`). Cold runs use "
                 "no schedule of another backend (the continuous model's own list schedule is its start).\n")
    lines.append("**Proven optimal** means optimal for the problem the verifier checks: the run's status is "
                 "`optimal` and either its own proof holds in continuous time (`optimality_scope=continuous`) or its "
                 "verified time meets the project's continuous lower bound (`lower_bound_us`). An optimum of the TEN "
                 "above that bound (`optimality_scope=ten`: link times rounded up to TEN steps) is **not** counted "
                 "(marked `t` below). The best proven bound of a case is the largest of the project's lower bound "
                 "(ingress, distance, cut, drain, ... of docs/bounds.md) and the backends' own bounds in continuous "
                 "time (`best_bound_us` with `optimality_scope=continuous`); *gap* = time / that bound - 1.\n")
    for fam, note in FAMILY_NOTE.items():
        lines.append(f"- `{fam}`: {note}")
    lines.append("")

    # headline: largest N proven per family and backend
    lines.append("## Largest N proven optimal, per family and backend\n")
    lines.append("Cell: the largest N with at least one case proven optimal (proofs / runs; the largest N run). "
                 "For the heuristics a proof is their time meeting the lower bound; `cpsat cont. warm` proves what "
                 "the greedy already met, plus what its search adds; only the cold exact backends' proofs are the "
                 "exact side's own.\n")
    lp = largest_proven(per, cases, ["family"])
    lines.append(to_markdown(lp))
    any_cold = per[per["backend"].isin(EXACT_COLD) & per["proven"]]
    if any_cold.empty:
        lines.append("\nNo cold exact run proved anything.\n")
    lines.append("\nPer family and case type (collective, size, chunks per NPU):\n")
    lines.append(to_markdown(largest_proven(per, cases, ["family", "combo"])))

    lines.append("\n## The cases of issue 20\n")
    lines.append("Cold runs on the issue's cases that are in this grid (its 2-chunk cases are not): status, "
                 "whether proven optimal, gap to the best proven bound, synthesis time (s; the run's whole solve, "
                 "model building included).\n")
    idx = per.set_index(["case", "backend"])
    trows = []
    for case in ANYTIME_CASES:
        if case not in set(cases["case"]):
            continue
        r = {"case": case}
        for b in EXACT_COLD:
            x = _get(idx, case, b)
            if x is None:
                r[b] = "—"
            elif not x["ok"]:
                r[b] = _cell(x)
            else:
                r[b] = (f"{x['status']}{' (proven)' if x['proven'] else ''}, {100 * x['gap']:.2f}%, "
                        f"{float(x['synthesis_time_s']):.1f} s")
        trows.append(r)
    lines.append(to_markdown(pd.DataFrame(trows)) if trows else "None of them in this grid.\n")

    lines.append("\n## How the exact runs ended\n")
    lines.append("Per exact backend: `stop_reason` (proved: the search proved it; bound_met: no search, the start "
                 "already met the lower bound; time_limit) / `solution_source` (model: found by the search; "
                 "list_schedule: the backend's own constructive start; warm_start: the greedy's schedule), number of "
                 "runs; runs without a verified schedule by status.\n")
    ex = per[~per["backend"].isin(("greedy", "greedy_plus"))].copy()
    ex["how"] = np.where(ex["ok"], ex["stop_reason"].astype(str) + " / " + ex["solution_source"].astype(str),
                         "no verified schedule: " + ex["status"].astype(str))
    how = ex.groupby(["backend", "how"]).size().unstack(fill_value=0).reindex(
        [b for b in BACKENDS if b in set(ex["backend"])])
    how = how.T.reset_index().rename(columns={"how": "stop_reason / solution_source"})
    lines.append(to_markdown(how))

    lines.append("\n## Today's TEN models against the continuous model (cold)\n")
    lines.append("Largest N proven optimal cold within the time limit per family (any case type), by the TEN models "
                 "(`milp` or `cpsat`, `solver.model=auto`) and by the continuous CP-SAT model. `none`: nothing "
                 "proven at any N run.\n")
    lines.append(to_markdown(ten_vs_continuous(per, cases)))

    # greedy_plus against the best bound
    lines.append("\n## Where greedy_plus is above the best proven bound\n")
    gp = per[(per["backend"] == "greedy_plus") & per["ok"]].merge(cases, on="case")
    off = gp[gp["gap"] > OFF].sort_values("gap", ascending=False)
    lines.append(f"`greedy_plus` is within {100 * OFF:g} % of the best proven bound on {int((gp['gap'] <= OFF).sum())} "
                 f"of {len(gp)} cases. Above it on the following; *off the optimum* when another run proved a better optimum (the bound "
                 "is tight), *optimum unknown* when no run closed the gap.\n")
    worse = off[off["optimal"]]
    if len(worse):
        w = worse.iloc[0]
        lines.append(f"On {len(worse)} of these cases the optimum is known (a run met the best proven bound) and "
                     f"greedy_plus is above it (largest: `{w['case']}`, {100 * w['gap']:.1f}% above the optimum "
                     f"found by {w['best_by']}); on {len(off) - len(worse)} the optimum is not known.\n")
    bc1 = off[(off["collective"] == "broadcast") & (off["chunks_per_npu"] == 1) & ~off["optimal"]]
    if len(bc1):
        lines.append(f"({len(bc1)} of the unknown ones are Broadcasts of 1 chunk, whose optimum is the distance bound: "
                     "a shortest-path tree from the root meets it, and the continuous model proved exactly that "
                     "wherever it ran.)\n")
    if off.empty:
        lines.append("None.\n")
    else:
        t = off[["case", "num_npus", "time_us", "best_us", "best_by", "bound_us", "bound_by", "gap", "optimal"]].copy()
        t["gap"] = (t["gap"] * 100).map(lambda v: f"{v:.2f}%")
        t["greedy_plus vs best known"] = (off["time_us"] / off["best_us"] - 1).map(lambda v: f"{100 * v:.2f}%")
        t["verdict"] = np.where(off["optimal"], "off the optimum", "optimum unknown")
        t = t.drop(columns=["optimal"]).rename(columns={"num_npus": "N", "time_us": "greedy_plus µs",
                                                        "best_us": "best known µs", "bound_us": "best bound µs",
                                                        "bound_by": "bound proved by", "gap": "gap to bound"})
        lines.append(to_markdown(t))

    # per case
    lines.append("\n## Per case (exact backends run)\n")
    lines.append("Cell: gap to the best proven bound, `*` proven optimal (continuous), `t` optimal on the TEN only, "
                 "then the time (s since the run's solve started) when the run's incumbent first came within 1 % of "
                 "the case's best known time (anytime trace; a heuristic's synthesis time), `never` if it did not. "
                 "`refused`: the backend declined the model as too large (one line with its estimate in the error "
                 "rows), `no schedule`: none within the time limit.\n")
    rows = []
    for _, c in cases[cases["exact_ran"]].sort_values(["family", "num_npus", "combo"]).iterrows():
        r = {"case": c["case"], "N": c["num_npus"], "best known µs": c["best_us"], "best bound µs": c["bound_us"],
             "bound proved by": c["bound_by"] + (" (optimal)" if c["optimal"] else "")}
        for b in BACKENDS:
            r[b] = _cell(_get(idx, c["case"], b))
        rows.append(r)
    lines.append(to_markdown(pd.DataFrame(rows), ".3f"))
    lines.append("\n## Per case (heuristics and bounds only)\n")
    rows = []
    for _, c in cases[~cases["exact_ran"]].sort_values(["family", "num_npus", "combo"]).iterrows():
        r = {"case": c["case"], "N": c["num_npus"], "best known µs": c["best_us"], "best bound µs": c["bound_us"],
             "bound": c["bound_by"]}
        for b in ("greedy", "greedy_plus"):
            r[b] = _cell(_get(idx, c["case"], b))
        rows.append(r)
    if rows:
        lines.append(to_markdown(pd.DataFrame(rows), ".3f"))
    else:
        lines.append("None at this scale.\n")
    return "\n".join(lines) + "\n", (cases, per)


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results" / NAME),
                    help="directory for the sweeps, parquet, figures and markdown")
    ap.add_argument("--quick", action="store_true", help="tiny grid (used by the tests)")
    ap.add_argument("--scale", choices=("small", "full"), default="small",
                    help="small: exact backends on a subset (about 30 min on 2 cores at --time-limit 20); "
                         "full: every backend on the whole grid")
    ap.add_argument("--time-limit", type=float, default=60.0, help="time limit per run in s (solver.time_limit_s)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel jobs (joblib launcher when > 1)")
    ap.add_argument("--docs", default=None,
                    help="also copy figures, table and markdown here (default: docs/studies, none with --quick)")
    ap.add_argument("--plot-only", action="store_true", help="re-report from the existing sweeps")
    ap.add_argument("--parts", default=None, help="re-run only these sweeps (comma-separated part names), "
                                                  "re-read the others")
    ap.add_argument("--anytime-only", action="store_true",
                    help="run only the anytime figure's cases (every backend) and redraw that figure (and its "
                         "table, .csv beside it) into --docs; the report and the other figures are left alone")
    a = ap.parse_args()
    if a.docs is None and not a.quick:
        a.docs = str(ROOT / "docs" / "studies")
    return a


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scale = "quick" if args.quick else args.scale
    time_limit = 5.0 if args.quick and args.time_limit == 60.0 else args.time_limit
    if args.anytime_only:
        return anytime_only(args, out, time_limit)
    parts = sweeps(scale, time_limit)
    heur, exact = count_runs(parts)
    print(f"{len(parts)} sweeps, {heur} heuristic + {exact} exact runs; at most about "
          f"{(exact * time_limit + heur) / max(1, args.jobs) / 60:.0f} min if every exact run used its "
          f"{time_limit:g} s", flush=True)
    frames = []
    t0 = time.perf_counter()
    ran = False
    for part, exp, over in parts:
        sub = out / part
        if args.plot_only or (args.parts and part not in args.parts.split(",")):
            frames.append(load(sub))
            continue
        print(f"[{time.perf_counter() - t0:7.0f} s] part {part}", flush=True)
        frames.append(run_sweep(exp, sub, over, args.jobs))
        ran = True
    wall = time.perf_counter() - t0 if ran and not args.parts else None
    if wall is not None:
        (out / "wall_time_s.txt").write_text(f"{wall:.1f}\n")
    elif (out / "wall_time_s.txt").exists():
        wall = float((out / "wall_time_s.txt").read_text())
    df = pd.concat(frames, ignore_index=True)
    df.to_parquet(out / "results.parquet", index=False)
    df = prepare(df)
    body, (cases, per) = report_body(df, scale, time_limit, wall, args.jobs)
    cases.merge(per, on="case").to_csv(out / f"{NAME}_cases.csv", index=False)
    figs = [plot_gaps(per, cases, out / f"{NAME}.png")]
    any_fig = plot_anytime_cases(df, out / f"{NAME}_anytime.png")
    if any_fig is not None:
        figs.append(any_fig)
        body += ("\n## Anytime\n\nIncumbent (solid) and bound on the problem (dashed) against time since the run's "
                 "solve started, on the cases of issue 20 in the grid (`tacos_bench.plots.plot_anytime`; every run's "
                 f"trace: `python -m tacos_bench.plots anytime {_rel(out)}/<part>/sweep`). A TEN model's bound holds "
                 "for its rounded time grid only (`bound_scope=ten` in `anytime.csv`): it is drawn as crosses, never "
                 "as a bound, and an incumbent meeting it proves nothing; runs that ended without a result are drawn "
                 "hollow and dotted and named so in the legend. MILP (HiGHS through PuLP) reports its end state "
                 "only.\n")
    cmd = "python experiments/study_exact_vs_greedy.py" + (" --quick" if args.quick else f" --scale {args.scale}") + (
        f" --time-limit {time_limit:g}" if time_limit != 60.0 and not args.quick else "") + (
        f" --jobs {args.jobs}" if args.jobs > 1 else "")
    # the error rows named by backend (cold/warm, TEN/continuous) and case, not only by solver and topology
    labelled = df.assign(solver=df["backend"], topology=df["case"])
    assert len(ok_rows(df)) == int(df["ok"].sum())
    write_report(out, NAME, "Study: greedy heuristics against exact solvers, cold", cmd,
                 body + "\n" + error_summary(labelled), figs, args.docs)


def anytime_only(args, out: Path, time_limit: float) -> int:
    """The anytime figure alone: its cases' sweeps (or, with ``--plot-only``, their stored results), redrawn."""
    frames = []
    for part, exp, over in anytime_sweeps(time_limit):
        sub = out / part
        frames.append(load(sub) if args.plot_only else run_sweep(exp, sub, over, args.jobs))
    df = prepare(pd.concat(frames, ignore_index=True))
    fig = plot_anytime_cases(df, out / f"{NAME}_anytime.png")
    if fig is None:
        raise SystemExit("no run of the anytime cases wrote a trace")
    if args.docs:
        d = Path(args.docs)
        d.mkdir(parents=True, exist_ok=True)
        for f in (fig, fig.with_suffix(".csv")):
            (d / f.name).write_bytes(f.read_bytes())
    print(f"wrote {fig} ({len(df)} runs)" + (f", copied to {args.docs}" if args.docs else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
