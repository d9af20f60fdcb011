"""Fuzz the inputs a user hands ``run.py``: files, overrides, faults; every run must end in seconds, in one line
on stderr and exit 2 when refused (never a traceback, never a numpy warning, never "internal error" for an input
the user can fix), and a schedule it accepts must verify again from its files.

    python experiments/fuzz_inputs.py                          # every fixed case + 120 seeded mutations, run.py
    python experiments/fuzz_inputs.py --in-process --mutations 40   # the same through run_job (no Hydra), faster
    python experiments/fuzz_inputs.py --slow                   # also the 16 M-chunk All-to-All with its limit raised (minutes)

Cases: the inputs of issue 34 (``/dev/zero``, a FIFO, 10^9 chunks, a latency of 1e308 on one and on every link, a
JSON of 200,000 nested brackets, a UTF-8 byte-order mark, a duplicate JSON key, unknown keys such as
``solver.time_limit``, a run directory that cannot be created, a Gather whose root fails), bad sizes and ids,
and ``--mutations`` random edits (seeded by ``--seed``) of a valid edge list and JSON topology: a token replaced
by ``nan``, ``inf``, ``1e308``, ``-1``, a huge integer, text, a NUL; a line dropped, doubled or cut; a byte-order
mark, CRLF line ends, an extra field, nested JSON, a duplicate key.

A case *hangs* when it passes ``--timeout`` (default 60 s; the process is killed), *tracebacks* when stderr
holds "Traceback", a numpy warning or "internal error", or a refusal is not exactly one line or exits other
than 2 or leaves no ``result.json``; a *wrong accept* is an exit 0 whose schedule the verifier rejects when it
replays the run directory (``tacos_bench.verify``), or a case that must be refused and is not. The report ends
in ``hangs=0 tracebacks=0 wrong_accepts=0`` when all is well (exit 0; 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
REFUSE, ACCEPT, EITHER = "refuse", "accept", "either"

PAIR = "2\n0 1 50 0.5\n1 0 50 0.5\n"
RING4 = "# name: ring4\n4\n" + "".join(f"{u} {(u + d) % 4} 50 0.5\n" for u in range(4) for d in (1, 3))


@dataclass
class Case:
    """One input: a ``run_job`` configuration (and the same as ``run.py`` overrides), the files it reads, and
    whether it must be refused, accepted or may be either."""

    name: str
    solver: str = "greedy"
    topo: dict[str, Any] = field(default_factory=lambda: {"conf": "mesh4x4"})
    collective: dict[str, Any] = field(default_factory=lambda: {"kind": "all_gather"})
    fault: dict[str, Any] = field(default_factory=dict)
    solver_options: dict[str, Any] = field(default_factory=dict)
    files: dict[str, bytes | str] = field(default_factory=dict)   # name -> content, or "FIFO"
    expect: str = EITHER
    needle: str | None = None          # a refusal's line must contain it
    raw_overrides: list[str] = field(default_factory=list)   # CLI only (Hydra's own checks)
    run_dir: str | None = None         # a run directory other than the case's own (may not be creatable)
    cli_only: bool = False
    slow: bool = False


# --------------------------------------------------------------------------------------------- the fixed cases
def fixed_cases() -> list[Case]:
    """The inputs of issue 34 and their neighbours."""
    nested = "[" * 200_000 + "]" * 200_000
    link = {"src": 0, "dst": 1, "bw_GiBps": 50, "lat_us": 0.5}
    back = {"src": 1, "dst": 0, "bw_GiBps": 50, "lat_us": 0.5}
    f = {"conf": "file", "path": "{dir}/t.txt"}
    fj = {"conf": "file", "path": "{dir}/t.json"}
    cases = [
        Case("dev_zero", topo={"conf": "file", "path": "/dev/zero"}, expect=REFUSE, needle="not a regular file"),
        Case("fifo", topo=f, files={"t.txt": "FIFO"}, expect=REFUSE, needle="a FIFO"),
        Case("directory", topo={"conf": "file", "path": "{dir}"}, expect=REFUSE, needle="a directory"),
        Case("missing_file", topo={"conf": "file", "path": "{dir}/none.txt"}, expect=REFUSE, needle="no such file"),
        Case("chunks_1e9", topo={"kind": "uniring", "dims": [4]},
             collective={"kind": "all_to_all", "chunks_per_npu": 62_500_000, "buffer_mib": 1e8},
             expect=REFUSE, needle="GiB are available"),
        Case("chunks_16M", topo={"kind": "uniring", "dims": [4]},
             collective={"kind": "all_to_all", "chunks_per_npu": 1_000_000, "buffer_mib": 1e8},
             expect=REFUSE, needle="above max_deliveries=10,000,000"),
        Case("chunks_16M_limit_raised", topo={"kind": "uniring", "dims": [4]},
             collective={"kind": "all_to_all", "chunks_per_npu": 1_000_000, "buffer_mib": 1e8},
             raw_overrides=["max_deliveries=12000000"], cli_only=True, expect=ACCEPT, slow=True),
        Case("lat_1e308_one", topo=f, files={"t.txt": "2\n0 1 50 1e308\n1 0 50 0.5\n"}, expect=REFUSE,
             needle="more than the 1e+12 µs"),
        Case("lat_1e308_every", topo=f, files={"t.txt": "2\n0 1 50 1e308\n1 0 50 1e308\n"}, expect=REFUSE),
        Case("lat_1e308_greedy_plus_broadcast", solver="greedy_plus", collective={"kind": "broadcast"}, topo=f,
             files={"t.txt": "2\n0 1 50 1e308\n1 0 50 0.5\n"}, expect=REFUSE),
        Case("bw_1e308", topo=f, files={"t.txt": "2\n0 1 1e308 0\n1 0 50 0.5\n"}, expect=REFUSE),
        Case("bw_1e-300", topo=f, files={"t.txt": "2\n0 1 1e-300 0\n1 0 50 0.5\n"}, expect=REFUSE),
        Case("spread_1e12", topo=f, files={"t.txt": "2\n0 1 50 9e11\n1 0 1e6 0\n"}, expect=REFUSE,
             needle="apart"),
        Case("lat_nan", topo=f, files={"t.txt": "2\n0 1 50 nan\n1 0 50 0.5\n"}, expect=REFUSE),
        Case("bw_inf", topo=f, files={"t.txt": "2\n0 1 inf 0.5\n1 0 50 0.5\n"}, expect=REFUSE),
        Case("json_nested", topo=fj, files={"t.json": nested}, expect=REFUSE, needle="t.json: invalid JSON"),
        Case("json_nested_object", topo=fj, files={"t.json": '{"a":' * 100_000 + "1" + "}" * 100_000},
             expect=REFUSE, needle="t.json"),
        Case("bom_edge_list", topo=f, files={"t.txt": b"\xef\xbb\xbf" + PAIR.encode()}, expect=ACCEPT),
        Case("bom_json", topo=fj, files={"t.json": b"\xef\xbb\xbf" + json.dumps(
            {"num_npus": 2, "links": [link, back]}).encode()}, expect=ACCEPT),
        Case("json_duplicate_key", topo=fj, files={"t.json": '{"num_npus": 2, "num_npus": 3, "links": ' +
                                                      json.dumps([link, back]) + "}"},
             expect=REFUSE, needle="duplicate key 'num_npus'"),
        Case("json_not_utf8", topo=fj, files={"t.json": b"\xff\xfe{}"}, expect=REFUSE, needle="UTF-8"),
        Case("crlf_edge_list", topo=f, files={"t.txt": PAIR.replace("\n", "\r\n")}, expect=ACCEPT),
        Case("gather_root_fails", topo={"kind": "mesh", "dims": [3, 3]},
             collective={"kind": "gather", "root": 0, "chunks_per_npu": 2, "buffer_mib": 1},
             fault={"at_fraction": 0.5, "npus": [0]}, expect=REFUSE, needle="the gather's root, fails"),
        Case("broadcast_root_fails_late", topo={"kind": "mesh", "dims": [3, 3]},
             collective={"kind": "broadcast", "root": 4, "chunks_per_npu": 1, "buffer_mib": 1},
             fault={"at_fraction": 0.9, "npus": [4]}, expect=EITHER),
        Case("cpn_zero", collective={"kind": "all_gather", "chunks_per_npu": 0}, expect=REFUSE),
        Case("cpn_negative", collective={"kind": "all_gather", "chunks_per_npu": -3}, expect=REFUSE),
        Case("cpn_huge", collective={"kind": "all_gather", "chunks_per_npu": 2 ** 62}, expect=REFUSE),
        Case("buffer_zero", collective={"kind": "all_gather", "buffer_mib": 0}, expect=REFUSE),
        Case("buffer_tiny", collective={"kind": "all_gather", "buffer_mib": 1e-12}, expect=REFUSE),
        Case("buffer_huge", collective={"kind": "all_gather", "buffer_mib": 1e30}, expect=EITHER),
        Case("root_out_of_range", collective={"kind": "broadcast", "root": 99}, expect=REFUSE),
        Case("root_negative", collective={"kind": "broadcast", "root": -1}, expect=REFUSE),
        Case("failed_link_unknown", topo={"conf": "mesh4x4", "failed_links": [[0, 15]]}, expect=REFUSE),
        Case("failed_npus_all", topo={"conf": "mesh4x4", "failed_npus": list(range(16))}, expect=REFUSE),
        Case("fault_at_negative", fault={"at_us": -5.0, "links": [[0, 1]]}, expect=REFUSE),
        Case("fault_link_unknown", fault={"at_fraction": 0.5, "links": [[0, 15]]}, expect=REFUSE),
        Case("unknown_solver_option", solver_options={"time_limit": 5}, expect=REFUSE,
             needle="time_limit (did you mean"),
        Case("unknown_collective_key", collective={"kind": "all_gather", "sizes": 3}, expect=REFUSE,
             needle="unknown setting collective.sizes"),
        Case("nvls_all_gather", solver="nvls", topo={"conf": "switched8_nvls"}, expect=REFUSE,
             needle="solvers that take it"),
        Case("ring_time_limit_all_to_all", solver="ring", solver_options={"time_limit_s": 3},
             collective={"kind": "all_to_all"}, expect=REFUSE),
        Case("cli_solver_time_limit", raw_overrides=["solver.time_limit=5"], cli_only=True, expect=REFUSE,
             needle="did you mean solver.time_limit_s?"),
        Case("cli_collective_sizes", raw_overrides=["collective.sizes=3"], cli_only=True, expect=REFUSE,
             needle="unknown setting collective.sizes"),
        Case("cli_collective_matrix", raw_overrides=["+collective.matrix=3"], cli_only=True, expect=REFUSE,
             needle="unknown setting collective.matrix"),
        Case("cli_seed_text", raw_overrides=["seed=abc"], cli_only=True, expect=REFUSE),
        Case("cli_run_dir_not_creatable", files={"blocker": ""}, run_dir="{dir}/blocker/run", cli_only=True,
             expect=REFUSE, needle="cannot write"),
        Case("healthy_mesh", expect=ACCEPT),
        Case("healthy_all_reduce_file", topo=f, files={"t.txt": RING4}, collective={"kind": "all_reduce"},
             expect=ACCEPT),
    ]
    return cases


# --------------------------------------------------------------------------------------------- mutations
_TOKENS = ["nan", "inf", "-inf", "1e308", "1e-308", "-1", "0", "", "abc", "99999999999999999999", "\x00",
           "½", "1_000", "0x10", "1e400", "-0", "4.5"]


def mutate_edge_list(rng: random.Random, text: str) -> str:
    """One random edit of an edge list: a token, a line, the encoding or the line ends."""
    lines = text.splitlines() or [""]
    op = rng.randrange(8)
    i = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
    if op == 0 or op == 1:      # replace a token (or give an empty line one)
        toks = lines[i].split() or [""]
        toks[rng.randrange(len(toks))] = rng.choice(_TOKENS)
        lines[i] = " ".join(toks)
    elif op == 2:
        del lines[i]
    elif op == 3:
        lines.insert(i, lines[i])
    elif op == 4:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    elif op == 5:
        lines[i] += " " + rng.choice(_TOKENS[:8] + ["7"])
    elif op == 6:
        lines[0] = rng.choice(["0", "-4", "4 -1", "4 1", "1e9", "99999999999", "4 4 4", "four"])
    else:
        return "\ufeff" + "\r\n".join(lines) + "\r\n"
    return "\n".join(lines) + "\n"


def mutate_json(rng: random.Random) -> str:
    """One random edit of a JSON topology: a value of the wrong type or range, a key missing, twice or unknown."""
    links = [{"src": u, "dst": (u + d) % 4, "bw_GiBps": 50.0, "lat_us": 0.5} for u in range(4) for d in (1, 3)]
    doc: dict[str, Any] = {"name": "ring4", "num_npus": 4, "links": links}
    op = rng.randrange(6)
    bad = rng.choice([None, True, "4", -1, 0, 1e308, float("nan"), [], {}, 2 ** 70, [[[[1]]]]])
    if op == 0:
        doc["num_npus"] = bad
    elif op == 1:
        k = rng.choice(["src", "dst", "bw_GiBps", "lat_us"])
        doc["links"][rng.randrange(len(links))][k] = bad
    elif op == 2:
        del doc["links"][rng.randrange(len(links))][rng.choice(["src", "dst", "bw_GiBps", "lat_us"])]
    elif op == 3:
        doc[rng.choice(["extra", "switches", "num_switches", "meta"])] = bad
    elif op == 4:
        text = json.dumps(doc, allow_nan=True)
        return text.replace('"num_npus": 4', '"num_npus": 4, "num_npus": ' + json.dumps(bad, allow_nan=True), 1)
    else:
        doc["links"] = bad
    return json.dumps(doc, allow_nan=True)


def mutation_cases(n: int, seed: int) -> list[Case]:
    """``n`` seeded random inputs (half edge lists, half JSON), each through a random solver and collective."""
    rng = random.Random(seed)
    solvers = ["greedy", "greedy_plus", "ring", "direct", "bfs"]
    kinds = ["all_gather", "reduce_scatter", "all_reduce", "broadcast", "gather", "all_to_all"]
    out = []
    for i in range(n):
        kind = rng.choice(kinds)
        coll: dict[str, Any] = {"kind": kind, "chunks_per_npu": rng.choice([1, 2]), "buffer_mib": 1.0}
        if kind in ("broadcast", "gather"):
            coll["root"] = rng.randrange(4)
        if i % 2 == 0:
            text = mutate_edge_list(rng, RING4)
            for _ in range(rng.randrange(2)):
                text = mutate_edge_list(rng, text)
            out.append(Case(f"mutated_edges_{i}", solver=rng.choice(solvers), collective=coll,
                            topo={"conf": "file", "path": "{dir}/t.txt"}, files={"t.txt": text}))
        else:
            out.append(Case(f"mutated_json_{i}", solver=rng.choice(solvers), collective=coll,
                            topo={"conf": "file", "path": "{dir}/t.json"}, files={"t.json": mutate_json(rng)}))
    return out


# --------------------------------------------------------------------------------------------- running a case
def _conf(group: str, name: str) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def _materialize(case: Case, d: Path) -> tuple[dict, Path]:
    """Write the case's files into ``d``; its run_job config and run directory."""
    for name, content in case.files.items():
        p = d / name
        if content == "FIFO":
            os.mkfifo(p)
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8", newline="")
    topo = {k: (v.replace("{dir}", str(d)) if isinstance(v, str) else v) for k, v in case.topo.items()}
    if "conf" in topo:
        topo = {**_conf("topo", topo.pop("conf")), **topo}
    coll_kind = case.collective.get("kind", "all_gather")
    coll = {**_conf("collective", coll_kind), **case.collective}
    cfg = {"solver": {"name": case.solver, **case.solver_options}, "topo": topo, "collective": coll, "seed": 0}
    if case.fault:
        cfg["fault"] = dict(case.fault)
    run_dir = Path(case.run_dir.replace("{dir}", str(d))) if case.run_dir else d / "run"
    return cfg, run_dir


def _value(v) -> str:
    """A Hydra override value."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _overrides(case: Case, cfg: dict, run_dir: Path) -> list[str]:
    """The ``run.py`` overrides of a case (the same configuration as ``cfg``)."""
    out = [f"solver={case.solver}"] + [f"solver.{k}={_value(v)}" for k, v in case.solver_options.items()]
    topo = case.topo
    if "conf" in topo:
        out.append(f"topo={topo['conf']}")
        out += [f"topo.{k}={_value(cfg['topo'][k])}" for k in topo if k != "conf"]
    else:   # a generated topology: the settings of a generator over the mesh4x4 file
        out += ["topo=mesh4x4", f"topo.name={topo['kind']}"] + [f"topo.{k}={_value(v)}" for k, v in topo.items()]
    kind = case.collective.get("kind", "all_gather")
    out.append(f"collective={kind}")
    out += [f"collective.{k}={_value(v)}" for k, v in case.collective.items() if k != "kind"]
    out += [f"fault.{k}={_value(v)}" for k, v in case.fault.items()]
    return out + case.raw_overrides + [f"hydra.run.dir={run_dir}"]


@dataclass
class Outcome:
    name: str
    expect: str
    code: int | None          # exit status (None: hung)
    seconds: float
    stderr: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.code is None:
            return "hang"
        if any(p.startswith("wrong accept") for p in self.problems):
            return "wrong_accept"
        return "traceback" if self.problems else "ok"


def _reverify(run_dir: Path) -> str | None:
    """Replay an accepted run from its files with the verifier; why it fails, or None."""
    from tacos_bench.errors import TacosError
    from tacos_bench.verify.__main__ import main as verify_main

    if not (run_dir / "schedule.csv").exists():
        return None   # too large to save as a table: nothing to replay from files
    try:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = verify_main([str(run_dir)])
    except (TacosError, SystemExit) as e:
        return f"the replay failed: {e}"
    msg = err.getvalue().strip()
    if code != 0 and "do not let the verifier rebuild" in msg:
        return None   # a run with failed NPUs: its files cannot rebuild the fault (the run itself verified it)
    return None if code == 0 else f"the replay rejects it: {msg}"


def _judge(case: Case, out: Outcome, run_dir: Path, record: dict | None) -> Outcome:
    err_lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    text = out.stderr
    for bad in ("Traceback", "RuntimeWarning", "internal error"):
        if bad in text or (record and bad in str(record.get("error") or "")):
            out.problems.append(f"{bad!r} in the output")
    if out.code == 0:
        if case.expect == REFUSE:
            out.problems.append("wrong accept: the input must be refused")
        if record is not None and not record.get("valid"):
            out.problems.append("exit 0 without a verified schedule")
        why = _reverify(run_dir)
        if why:
            out.problems.append(f"wrong accept: {why}")
    elif out.code is not None:
        if out.code != 2:
            out.problems.append(f"exit {out.code}, not 2")
        if len(err_lines) != 1:
            out.problems.append(f"{len(err_lines)} lines on stderr, not 1")
        if case.expect == ACCEPT:
            out.problems.append("refused an input that must be accepted")
        if case.needle and not any(case.needle in ln for ln in err_lines):
            out.problems.append(f"the message lacks {case.needle!r}")
        if not case.run_dir and not (run_dir / "result.json").exists():
            out.problems.append("no result.json kept")
    return out


def run_cli(case: Case, d: Path, timeout: float) -> Outcome:
    """The case through ``python run.py`` in a subprocess (killed at ``timeout``)."""
    cfg, run_dir = _materialize(case, d)
    args = [sys.executable, str(ROOT / "run.py"), *_overrides(case, cfg, run_dir)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    try:
        r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return Outcome(case.name, case.expect, None, time.perf_counter() - t0,
                       (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
    rec = _read_record(run_dir)
    return _judge(case, Outcome(case.name, case.expect, r.returncode, time.perf_counter() - t0, r.stderr), run_dir, rec)


def _read_record(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        return None


class _Hung(Exception):
    pass


def run_in_process(case: Case, d: Path, timeout: float) -> Outcome:
    """The case through :func:`~tacos_bench.runner.pipeline.run_job` in this process, its stderr the line
    ``run.py`` would print; a SIGALRM after ``timeout`` counts it as hung (it interrupts a blocking open)."""
    import signal
    import warnings

    from tacos_bench.runner.pipeline import run_job

    cfg, run_dir = _materialize(case, d)

    def alarm(*_):
        raise _Hung()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rec = run_job(cfg, run_dir)
    except _Hung:
        return Outcome(case.name, case.expect, None, time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - run_job must never raise: that is a traceback
        return Outcome(case.name, case.expect, 1, time.perf_counter() - t0, f"Traceback: {type(e).__name__}: {e}",
                       [f"run_job raised {type(e).__name__}"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    ok = rec["status"] != "error" and rec.get("valid")
    stderr = "" if ok else f"tacos-bench: error: {rec.get('error')}\n"
    stderr += "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    return _judge(case, Outcome(case.name, case.expect, 0 if ok else 2, time.perf_counter() - t0, stderr),
                  run_dir, rec)


def fuzz(cases: list[Case], *, in_process: bool, timeout: float, jobs: int = 1,
         log: Callable[[str], None] = print) -> list[Outcome]:
    """Run every case (each in a fresh temporary directory); the outcomes in case order."""
    runner = run_in_process if in_process else run_cli

    def one(case: Case) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="fuzz_") as d:
            out = runner(case, Path(d), timeout)
        mark = "ok " if out.kind == "ok" else out.kind.upper()
        first = out.stderr.strip().splitlines()[0][:150] if out.stderr.strip() else ""
        log(f"{mark:<13} {case.name:<36} exit {out.code} {out.seconds:6.2f} s  {first}"
            + (f"  <- {'; '.join(out.problems)}" if out.problems else ""))
        return out

    if in_process or jobs <= 1:
        return [one(c) for c in cases]
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, cases))


def report(outcomes: list[Outcome]) -> str:
    counts = {k: sum(o.kind == k for o in outcomes) for k in ("hang", "traceback", "wrong_accept")}
    slowest = max(outcomes, key=lambda o: o.seconds)
    return (f"{len(outcomes)} cases: hangs={counts['hang']} tracebacks={counts['traceback']} "
            f"wrong_accepts={counts['wrong_accept']} (refused {sum(o.code == 2 for o in outcomes)}, accepted "
            f"{sum(o.code == 0 for o in outcomes)}; slowest {slowest.name} {slowest.seconds:.1f} s)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutations", type=int, default=120, help="random edits of valid topology files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as hung")
    ap.add_argument("--jobs", type=int, default=2, help="cases at once (run.py mode)")
    ap.add_argument("--in-process", action="store_true", help="run_job in this process instead of run.py")
    ap.add_argument("--slow", action="store_true", help="also the cases that take minutes")
    ap.add_argument("--only", help="run only the cases whose name contains this")
    args = ap.parse_args(argv)
    cases = [c for c in fixed_cases() if args.slow or not c.slow] + mutation_cases(args.mutations, args.seed)
    if args.in_process:
        cases = [c for c in cases if not c.cli_only]
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    outcomes = fuzz(cases, in_process=args.in_process, timeout=args.timeout, jobs=args.jobs)
    line = report(outcomes)
    print(line)
    return 0 if line.count("=0") == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
