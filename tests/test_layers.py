"""The layers: the core never imports the backends or the runner, the backends never import the runner, the
solver families are independent (import-linter contracts in pyproject.toml), every core module is under the
first contract, and no module takes part in an import cycle (function-level imports included)."""

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
    core = [c for c in _contracts() if "solvers" in c.get("forbidden_modules", [])]
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


def _import_graph():
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (pip install -e '.[test]')")
    import networkx as nx

    g = grimp.build_graph("tacos_bench", "solvers")
    G = nx.DiGraph()
    for m in g.modules:
        G.add_node(m)
        for i in g.find_modules_directly_imported_by(m):
            G.add_edge(m, i)
    return G


def test_no_import_cycles():
    import networkx as nx

    G = _import_graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(G) if len(c) > 1]
    assert not cycles, f"import cycles (a function-level import counts too): {cycles}"


def test_the_cycle_check_sees_function_level_imports(tmp_path):
    # the check must be able to fail: a cycle hidden inside a function is still an edge of the graph
    grimp = pytest.importorskip("grimp")
    import networkx as nx

    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    sys.path.insert(0, str(tmp_path))
    try:
        g = grimp.build_graph("cyc", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    G = nx.DiGraph([(m, i) for m in g.modules for i in g.find_modules_directly_imported_by(m)])
    assert [sorted(c) for c in nx.strongly_connected_components(G) if len(c) > 1] == [["cyc.a", "cyc.b"]]


def test_the_families_are_packages():
    for family in ("greedy", "exact", "baselines"):
        assert (ROOT / "solvers" / family / "__init__.py").exists()
    flat = sorted(p.name for p in (ROOT / "solvers").glob("*.py"))
    assert flat == ["__init__.py", "base.py", "compose.py", "concurrent.py", "describe.py", "detour_reducing.py", "fabric_routes.py", "in_switch.py", "list_schedule.py", "options.py",
                    "plan.py", "portfolio.py", "release.py", "repair.py", "resume_reducing.py", "stats.py"], flat
