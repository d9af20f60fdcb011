"""Shared plumbing of the studies: run a Hydra sweep, read its table, write markdown.

A study is one command. It runs ``python run.py -m experiment=<name>`` (the grid
lives in ``conf/experiment/<name>.yaml``, so the same sweep can be launched by
hand or on a cluster), then reads only the aggregated ``results.parquet`` to draw
its figures and tables — benchopt style: solvers never talk to plots.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed_verified(backend, problem, options=None):
    """``backend`` solving ``problem``, timed outside the solver, and its schedule replayed by the verifier:
    ``(result, seconds, verification)``."""
    from tacos_bench.verify import verify

    t0 = time.perf_counter()
    res = backend.solve(problem, options)
    return res, time.perf_counter() - t0, verify(problem, res.schedule)


def parse_args(description: str, default_out: str):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=str(ROOT / "results" / default_out),
                    help="directory for the sweep, parquet, figures and markdown")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (used by the tests)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel jobs (joblib launcher when > 1)")
    ap.add_argument("--docs", default=None, help="also copy figures and the markdown table here (e.g. docs/studies)")
    ap.add_argument("--plot-only", action="store_true", help="re-plot from an existing results.parquet")
    ap.add_argument("--parts", default=None,
                    help="studies made of several sweeps: re-run only these (comma-separated), re-read the others")
    return ap.parse_args()


class Study:
    """What a study script needs: its arguments, output dir and the results table (swept or re-read)."""

    def __init__(self, script: str, doc: str, name: str, quick_overrides: list[str]):
        self.script = Path(script).name
        self.name = name
        self.args = parse_args(doc.splitlines()[0], name)
        self.out = Path(self.args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        if self.args.plot_only:
            self.df = load(self.out)
        else:
            self.df = run_sweep(name, self.out, quick_overrides if self.args.quick else [], self.args.jobs)
        self.good = ok_rows(self.df)

    def report(self, title: str, body: str, figures: list[Path]) -> Path:
        a = self.args
        cmd = f"python experiments/{self.script}" + (" --quick" if a.quick else "") + (
            f" --jobs {a.jobs}" if a.jobs > 1 else "")
        return write_report(self.out, self.name, title, cmd, body + "\n" + error_summary(self.df), figures, a.docs)


def run_sweep(experiment: str, out: Path, overrides: list[str], jobs: int = 1) -> pd.DataFrame:
    """Run the experiment's Hydra multirun into ``out/sweep`` and return its results table."""
    sweep = out / "sweep"
    if sweep.exists():  # a smaller re-run must not aggregate the previous run's leftover jobs
        shutil.rmtree(sweep)
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", f"experiment={experiment}",
           f"hydra.sweep.dir={sweep}", *overrides]  # command-line sweeps win over the file's
    if jobs > 1:
        cmd += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
    print("$", " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        raise SystemExit(f"sweep {experiment} failed (exit {r.returncode})")
    print(f"sweep finished in {time.perf_counter() - t0:.1f} s", flush=True)
    return load(out)


def load(out: Path) -> pd.DataFrame:
    path = out / "sweep" / "results.parquet"
    if not path.exists():
        raise SystemExit(f"no results table at {path}")
    df = pd.read_parquet(path)
    df.to_parquet(out / "results.parquet", index=False)
    return df


def load_part(out: Path, name: str, part: str) -> pd.DataFrame:
    """A part of a study that is not re-run: its sweep's table, or, on a checkout without ``results/`` (not
    tracked), its rows of the published table ``docs/studies/<name>.parquet`` (written back as the part's sweep
    table, so that the next partial re-run finds it)."""
    if not (out / "sweep" / "results.parquet").exists():
        published = ROOT / "docs" / "studies" / f"{name}.parquet"
        df = pd.read_parquet(published) if published.exists() else pd.DataFrame()
        if "part" in df.columns and (df["part"] == part).any():
            (out / "sweep").mkdir(parents=True, exist_ok=True)
            df[df["part"] == part].drop(columns=["part"]).to_parquet(out / "sweep" / "results.parquet", index=False)
    return load(out)


def ratio_table(good: pd.DataFrame, solvers, baselines) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per case (``good["case"]``): each solver's best verified time (``best``, one column per solver) and
    ``wide``: the largest valid lower bound (``bound_us``), the argument that proved it most often
    (``bound``), ``solvers``' best time over it, and the best of ``baselines`` (``best_baseline``,
    ``which_baseline``)."""
    best = good.groupby(["case", "solver"])["collective_time_us"].min().unstack()
    bound = good.groupby("case")["lower_bound_us"].max()
    src = good.groupby("case")["lower_bound_source"].agg(lambda s: s.mode().iloc[0])
    wide = pd.DataFrame({"bound_us": bound, "bound": src})
    for s in solvers:
        if s in best:
            wide[s] = best[s] / bound
    base = [b for b in baselines if b in best]
    if base:
        wide["best_baseline"] = best[base].min(axis=1) / bound
        wide["which_baseline"] = best[base].idxmin(axis=1)
    return best, wide


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Verified runs only: no figure is drawn from a schedule the verifier did not accept."""
    good = (df["status"] != "error") & (df["valid"].astype("boolean").fillna(False))
    return df[good].copy()


def error_summary(df: pd.DataFrame) -> str:
    bad = df[(df["status"] == "error") | ~(df["valid"].astype("boolean").fillna(False))]
    if bad.empty:
        return "All runs verified.\n"
    lines = [f"{len(bad)} run(s) did not yield a verified schedule (kept as error rows in the table); "
             "identical messages counted once:", ""]
    keys = bad.assign(_msg=bad["error"].astype(str).str.slice(0, 200))
    for (solver, topo, msg), g in keys.groupby(["solver", "topology", "_msg"], sort=False, dropna=False):
        lines.append(f"- {solver} on {topo}: {msg}" + (f" ({len(g)} runs)" if len(g) > 1 else ""))
    return "\n".join(lines) + "\n"


def to_markdown(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """Markdown table without the optional ``tabulate`` dependency."""
    cols = list(df.columns)

    def fmt(v):
        if isinstance(v, float):
            return "" if pd.isna(v) else format(v, floatfmt)
        return "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)

    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, name: str, title: str, command: str, body: str, figures: list[Path],
                 docs: str | None) -> Path:
    text = f"# {title}\n\nProduced by:\n\n```bash\n{command}\n```\n\n{body}\n"
    for f in figures:
        text += f"\n![{f.stem}]({f.name})\n"
    md = out / f"{name}.md"
    md.write_text(text)
    if docs:
        d = Path(docs)
        d.mkdir(parents=True, exist_ok=True)
        (d / md.name).write_text(text)
        for f in figures:
            (d / f.name).write_bytes(f.read_bytes())
        (out / "results.parquet").exists() and (d / f"{name}.parquet").write_bytes((out / "results.parquet").read_bytes())
    print(f"wrote {md}")
    return md
