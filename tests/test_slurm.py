"""A sweep through the SLURM launcher preset (conf/hydra/launcher/slurm.yaml) on a real cluster.

Runs only where SLURM is up with an idle node in partition `debug` (CI: `.ci/start-slurm` starts such a
one-node cluster); skipped otherwise. One job of the sweep fails on purpose: it must come back as an error
row, and the sweep must still aggregate every job.
"""

import importlib.util
import json
import re
import shutil
import subprocess
import uuid

import pandas as pd
import pytest

from cli import run_py

PARTITION = "debug"
TOPOLOGIES = ["mesh4x4", "torus4x4", "nosuchtopo"]  # the last one is rejected inside its job
BAD = "nosuchtopo"


def _slurm_missing() -> str | None:
    """Why the SLURM test cannot run here, or None when it can."""
    try:
        launcher = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher")
    except ImportError:
        launcher = None
    if launcher is None:
        return "hydra-submitit-launcher is not installed (pip install -e '.[cluster]')"
    if shutil.which("sinfo") is None:
        return "SLURM is not installed (no sinfo); start a one-node cluster with .ci/start-slurm"
    try:
        r = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-t", "idle,mixed", "-o", "%N"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed ({e}); start a one-node cluster with .ci/start-slurm"
    if r.returncode != 0 or not r.stdout.strip():
        why = r.stderr.strip().splitlines()[0] if r.stderr.strip() else "no idle node"
        return f"SLURM is not up in partition {PARTITION!r} ({why}); start it with .ci/start-slurm"
    return None


_WHY_NOT = _slurm_missing()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))


def _accounting_on() -> bool:
    """Accounting configured and its database answering (sacct works)."""
    r = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20)
    if "accounting_storage/slurmdbd" not in r.stdout:
        return False
    return subprocess.run(["sacct", "-n", "-X", "-S", "now"], capture_output=True, timeout=20).returncode == 0


def test_sweep_through_slurm_with_a_failing_job(tmp_path):
    sweep = tmp_path / "sweep"
    name = f"tacos-test-{uuid.uuid4().hex[:8]}"
    args = ["-m", "hydra/launcher=slurm",
            f"hydra.launcher.partition={PARTITION}", "hydra.launcher.mem_gb=1", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.timeout_min=5", f"hydra.launcher.name={name}", f"hydra.sweep.dir={sweep}",
            "solver=greedy", "topo=named", f"topo.name={','.join(TOPOLOGIES)}"]
    try:
        r = run_py(*args, timeout=300)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", f"--name={name}"], timeout=20)
        raise
    out = r.stdout + r.stderr
    assert r.returncode == 0, out

    # every job ran as a SLURM array task and wrote its record
    for num in range(len(TOPOLOGIES)):
        assert (sweep / str(num) / "result.json").exists(), f"job {num}: no result.json\n{out}"
    logs = sorted((sweep / ".submitit").glob("*_*/*_log.out"))
    assert len(logs) == len(TOPOLOGIES), logs
    for log in logs:
        assert re.search(r"JobEnvironment\(job_id=\d+_\d+", log.read_text()), log
    if _accounting_on():  # with slurmdbd, submitit reads job states from sacct without complaint
        assert "sacct error" not in out, out

    # the sweep aggregated all of them, in job order
    df = pd.read_parquet(sweep / "results.parquet")
    assert df["job_num"].tolist() == list(range(len(TOPOLOGIES)))
    assert df["topology"].tolist() == TOPOLOGIES
    records = [json.loads((sweep / str(n) / "result.json").read_text()) for n in range(len(TOPOLOGIES))]
    assert [rec["run_id"] for rec in records] == df["run_id"].tolist()

    bad = df[df["topology"] == BAD].iloc[0]
    assert bad["status"] == "error"
    assert isinstance(bad["error"], str) and BAD in bad["error"]

    good = df[df["topology"] != BAD]
    assert (good["status"] != "error").all(), good[["topology", "status", "error"]].to_string()
    assert good["valid"].astype(bool).all()
    assert (good["num_npus"] == 16).all()
    assert (good["collective_time_us"] > 0).all()
    assert (good["collective_time_us"] >= good["lower_bound_us"] * (1 - 1e-9)).all()
