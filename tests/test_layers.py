"""The layers: the core never imports the backends or the runner, the backends never import the runner
(import-linter contracts in pyproject.toml), and every core module is under the first contract."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _contracts():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_core_module_is_under_the_core_contract():
    core = [c for c in _contracts() if "solvers" in c["forbidden_modules"]]
    assert len(core) == 1
    listed = set(core[0]["source_modules"])
    pkg = ROOT / "tacos_bench"
    modules = {f"tacos_bench.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"}
    modules |= {f"tacos_bench.{d.name}" for d in pkg.iterdir() if (d / "__init__.py").exists() and d.name != "runner"}
    assert modules == listed, f"add to / remove from pyproject's core contract: {sorted(modules ^ listed)}"


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    r = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "broken" not in r.stdout.lower() or "0 broken" in r.stdout.lower()


def test_core_package_init_imports_no_backend():
    # tacos_bench/__init__.py itself (outside the listed modules) must not pull in solvers or the runner
    code = "import sys, tacos_bench; print(any(m == 'solvers' or m.startswith(('solvers.', 'tacos_bench.runner')) " \
           "for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
