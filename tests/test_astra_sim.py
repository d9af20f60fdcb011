"""ASTRA-sim round trip: run.py -> ``python -m tacos_bench.export astra-sim`` -> ``run.sh`` -> the same time.

The cross-check runs small verified schedules (All-Gather, Reduce-Scatter, All-Reduce on ring8, torus4x4 and
mesh4x4; 1 and 2 chunks per NPU; the greedy and CP-SAT) through the ASTRA-sim binary named by ``$ASTRA_SIM``
(default: the prebuilt one in ``../shared/tools/astra-sim``) and asserts that its collective time equals the
record's ``collective_time_us`` up to ASTRA-sim's rounding: it truncates every hop to whole ns (< 1 ns lost per
transfer) and charges 1 ns per reduction ``COMP_NODE``. A dependency chain has at most ``T / min_link_time``
transfers (each one takes at least the fastest link's time and they do not overlap), and behind each transfer at
most in-degree (<= 4 here) reductions of one chunk run back to back, so 10 ns per such step bounds the difference.

Nothing is installed here: the cross-check skips when the binary is missing or not executable, when its runtime
library ``libprotobuf.so.32`` is missing (Debian 12: ``apt-get install -y libprotobuf32``) or when the Chakra
schema (``mlc-chakra``) is not importable; the skip reason names the binary's path and ``ASTRA_SIM``. The
rejection tests need none of these.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cli import astra_sim_missing, run_in_process, run_module, run_py
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import ExportError
from tacos_bench.export import load_run
from tacos_bench.export.astra_sim import ENV_VAR, binary_problem, resolve_binary
from tacos_bench.topology.generators import ring
from tacos_bench.topology.named import named_topology

BINARY = resolve_binary()
BUFFER_MIB = 16
NS_PER_STEP = 10.0


MISSING = astra_sim_missing()
needs_astra_sim = pytest.mark.skipif(MISSING is not None, reason=f"ASTRA-sim cross-check skipped: {MISSING}")

TOPOS = ("ring8", "torus4x4", "mesh4x4")
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
GREEDY = [("greedy", t, k, cpn) for t in TOPOS for k in KINDS for cpn in (1, 2)]
# CP-SAT on the 4x4 torus: it proves All-Gather and Reduce-Scatter optimal itself (4 steps, the greedy needs 5)
# in about a second; an unproven schedule may idle, and ASTRA-sim's as-soon-as-possible replay would then
# legitimately finish earlier than the record, so only "never later" is asserted for those.
CPSAT = [("cpsat", "torus4x4", k, 1) for k in KINDS]
CPSAT_LIMIT_S = 20


def _sweep(out: Path, solver: str, topos, kinds, cpns, *extra: str) -> dict:
    """One ``run.py -m`` sweep; returns {(solver, topo, kind, cpn): run dir}."""
    r = run_py("-m", f"solver={solver}", f"topo={','.join(topos)}", f"collective={','.join(kinds)}",
               f"collective.chunks_per_npu={','.join(map(str, cpns))}", f"collective.buffer_mib={BUFFER_MIB}",
               f"hydra.sweep.dir={out}", *extra, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = {}
    for rec_path in out.glob("*/result.json"):
        rec = json.loads(rec_path.read_text())
        runs[(rec["solver"], rec["topology"], rec["collective"], int(rec["chunks_per_npu"]))] = rec_path.parent
    return runs


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("astra_runs")
    runs = _sweep(base / "greedy", "greedy", TOPOS, KINDS, (1, 2))
    runs.update(_sweep(base / "cpsat", "cpsat", ("torus4x4",), KINDS, (1,), f"solver.time_limit_s={CPSAT_LIMIT_S}"))
    return runs


def _export(run_dir: Path, out: Path, capsys) -> Path:
    from tacos_bench.export.__main__ import main

    assert main(["astra-sim", str(run_dir), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    return out


def _run_sh(bundle: Path, binary=BINARY, cwd=None):
    return subprocess.run([str(bundle / "run.sh"), str(binary)], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


@needs_astra_sim
@pytest.mark.parametrize("case", GREEDY + CPSAT, ids=lambda c: "-".join(map(str, c)))
def test_astra_sim_times_match_the_record(case, run_dirs, tmp_path, capsys):
    run_dir = run_dirs.get(case)
    assert run_dir is not None, f"the sweep produced no run for {case}"
    rec = json.loads((run_dir / "result.json").read_text())
    assert rec["status"] != "error" and rec["valid"] is True, rec.get("error")
    tight = case[0] == "greedy" or rec["status"] == "optimal"     # no idle slack in the schedule
    bundle = _export(run_dir, tmp_path / "bundle", capsys)
    net = (bundle / "network.yml").read_text().splitlines()[0]
    assert ("Ring" if case[1] == "ring8" else "FullyConnected") in net
    system = json.loads((bundle / "system.json").read_text())
    assert system["preferred-dataset-splits"] == 1

    r = _run_sh(bundle, cwd=tmp_path)              # from a directory that is not the bundle's
    assert r.returncode == 0, r.stderr[-2000:]
    astra_us = float(r.stdout.strip().splitlines()[-1])
    ours_us = float(rec["collective_time_us"])
    problem, _, _ = load_run(run_dir)
    topo = problem.topology
    min_link_us = float(np.min(topo.lat_us + problem.chunk_bytes / (topo.bw_GiBps * 2**30 / 1e6)))
    steps = int(np.floor(ours_us / min_link_us + 1e-9))
    tol_ns = NS_PER_STEP * steps
    diff_ns = (astra_us - ours_us) * 1000.0
    print(f"{case}: ours {ours_us:.4f} us, ASTRA-sim {astra_us:.3f} us, diff {diff_ns:+.3f} ns, "
          f"tolerance {tol_ns:g} ns ({steps} steps)")
    msg = f"ASTRA-sim {astra_us} us vs ours {ours_us} us: {diff_ns:+.3f} ns, tolerance {tol_ns:g} ns ({steps} steps)"
    assert diff_ns <= tol_ns, msg                                 # never later than our verified time
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["collective_time_us"] == pytest.approx(ours_us, rel=1e-12)
    if tight:
        assert abs(diff_ns) <= tol_ns, msg
        assert abs(diff_ns) <= manifest["causal_depth"] + 1e-6    # the exporter's own (tighter) bound


@needs_astra_sim
def test_run_sh_relative_binary_and_unfinished_runs(run_dirs, tmp_path, capsys):
    bundle = _export(run_dirs[("greedy", "ring8", "all_gather", 1)], tmp_path / "b", capsys)
    # a binary path relative to the caller's directory, the script called through a relative path too
    r = subprocess.run(["bash", "b/run.sh", os.path.relpath(BINARY, tmp_path)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.splitlines()[-1]) > 0
    assert not (bundle / "log").exists()                     # ASTRA-sim's log folder went to a temp dir
    # without preferred-dataset-splits = 1 ASTRA-sim exits 0 but never finishes: run.sh must fail
    sysj = json.loads((bundle / "system.json").read_text())
    sysj["preferred-dataset-splits"] = 2
    (bundle / "system.json").write_text(json.dumps(sysj))
    r = _run_sh(bundle)
    assert r.returncode == 3 and "NPUs finished" in r.stderr.splitlines()[-1]
    no_env = {k: v for k, v in os.environ.items() if k != ENV_VAR}   # else run.sh takes the binary from it
    r = subprocess.run([str(bundle / "run.sh")], capture_output=True, text=True, timeout=60, env=no_env)
    assert r.returncode == 2 and r.stderr.startswith("usage:")


# ---------------------------------------------------------------- rejections (no simulator needed)

def test_cli_rejects_a_mixed_speed_topology_with_exit_2(tmp_path):
    run_dir = tmp_path / "run"
    # the export CLI is what is checked; the run only provides its input, so it runs in-process
    rec = run_in_process(run_dir, solver="greedy", topo="hetero_mesh4x4", buffer_mib=1)
    assert rec["error"] is None and rec["valid"], rec["error"]
    e = run_module("tacos_bench.export", "astra-sim", run_dir, "-o", tmp_path / "b", timeout=120)
    assert e.returncode == 2
    assert e.stderr.count("\n") == 1 and e.stderr.startswith("error:") and "mix speeds" in e.stderr
    assert not (tmp_path / "b").exists()


def test_mixed_link_speeds_are_rejected_in_one_line(tmp_path):
    from tacos_bench.export.astra_sim import export_astra_sim

    p = Problem(named_topology("hetero_mesh4x4"), Collective("all_gather", 1, 1))
    with pytest.raises(ExportError, match="mix speeds") as e:
        export_astra_sim(p, Schedule.empty(), tmp_path / "b")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "b").exists()                      # nothing written


def test_ring_network_only_where_exact():
    from tacos_bench.export.astra_sim import embed_network

    assert embed_network(ring(8))["topology"] == "Ring"
    assert embed_network(ring(8), "fully_connected")["topology"] == "FullyConnected"
    assert embed_network(named_topology("torus4x4"))["topology"] == "FullyConnected"
    with pytest.raises(ExportError, match="not exact"):
        embed_network(named_topology("torus4x4"), "ring")
    sw = embed_network(named_topology("switch8"))             # the unwound switch: per-pair links
    assert sw["topology"] == "FullyConnected" and sw["latency"] == pytest.approx(1000.0)


@pytest.mark.parametrize("kind", ["broadcast", "reduce", "gather", "scatter", "bogus"])
def test_collectives_astra_sim_cannot_run_are_rejected(kind):
    from tacos_bench.export.astra_sim import astra_collective

    with pytest.raises(ExportError, match=f"cannot export {kind} to ASTRA-sim") as e:
        astra_collective(kind)
    assert "\n" not in str(e.value)
    if kind != "bogus":   # a real collective: the message says where it does go
        assert "msccl, json or chakra" in str(e.value)
    # all_to_all is ASTRA-sim's fourth custom-path collective (tests/test_export_collectives.py runs it)
    assert astra_collective("all_to_all") == ("ALL_TO_ALL", "all-to-all")


def test_module_doctests():
    import doctest

    import tacos_bench.export.astra_sim as mod

    if importlib.util.find_spec("chakra") is None:
        pytest.skip("the Chakra schema is not installed (pip install --no-deps mlc-chakra==1.0.0)")
    assert doctest.testmod(mod).failed == 0


# ---------------------------------------------------------------- finding the binary (no simulator needed)

def test_binary_comes_from_astra_sim_env_else_the_workspace(tmp_path, monkeypatch):
    from tacos_bench.export.astra_sim import default_binary

    monkeypatch.delenv(ENV_VAR, raising=False)
    assert resolve_binary() == default_binary()
    assert default_binary().parts[-5:-1] == ("shared", "tools", "astra-sim", "bin")
    fake = tmp_path / "sim"
    monkeypatch.setenv(ENV_VAR, str(fake))
    assert resolve_binary() == fake
    monkeypatch.chdir(tmp_path)
    assert resolve_binary("sub/sim") == tmp_path / "sub" / "sim"       # relative to the working directory
    assert resolve_binary(fake) == fake                               # an explicit path wins over ASTRA_SIM


def test_a_missing_binary_names_the_path_it_resolved(tmp_path, monkeypatch):
    fake = tmp_path / "nowhere" / "AstraSim_Analytical_Congestion_Aware"
    monkeypatch.setenv(ENV_VAR, str(fake))
    why = binary_problem()
    assert str(fake) in why and f"{ENV_VAR}=" in why
    # the skip reason of the cross-check says the same
    assert str(fake) in astra_sim_missing() and ENV_VAR in astra_sim_missing()
    monkeypatch.chdir(tmp_path)
    why = binary_problem("../elsewhere/sim")
    assert str(tmp_path.parent / "elsewhere" / "sim") in why and "'../elsewhere/sim'" in why and ENV_VAR in why

    (tmp_path / "notexec").write_text("")
    assert "is not executable" in binary_problem(tmp_path / "notexec")


def test_run_bundle_refuses_a_missing_binary_naming_it(tmp_path, monkeypatch):
    from tacos_bench.export.astra_sim import run_bundle, run_script

    (tmp_path / "run.sh").write_text(run_script(4))
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "none"))
    with pytest.raises(ExportError, match=f"no ASTRA-sim binary at {tmp_path / 'none'}") as e:
        run_bundle(tmp_path)
    assert ENV_VAR in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("how", ["argument", "env"])
def test_run_sh_names_the_path_it_resolved(tmp_path, how):
    from tacos_bench.export.astra_sim import run_script

    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "run.sh").write_text(run_script(4))
    given = "../shared/tools/astra-sim/bin/AstraSim_Analytical_Congestion_Aware"   # the README's, from elsewhere
    cwd = tmp_path / "clone"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    args = ["bash", str(bundle / "run.sh")]
    if how == "argument":
        args.append(given)
    else:
        env[ENV_VAR] = given
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: not an executable ASTRA-sim binary: ")
    assert f"{cwd}/{given}" in lines[0] and f"'{given}'" in lines[0] and f"{ENV_VAR}=" in lines[0]
    assert ("the argument" if how == "argument" else f"({ENV_VAR} was") in lines[0]
