"""The reference pages the code points to exist and say what the code does.

docs/solvers.md is generated from the solver registry (experiments/gen_solvers_doc.py): a backend added, or a
capability or status map changed, without regenerating the page fails here instead of leaving the page behind.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "solvers.md"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_solvers_doc", ROOT / "experiments" / "gen_solvers_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_solvers_page_matches_the_registry():
    from tacos_bench.errors import SolverError

    try:
        text = _generator().render()
    except SolverError as e:  # a backend whose optional dependency is not installed here
        pytest.skip(f"cannot import every registered backend: {e}")
    assert PAGE.read_text() == text, "docs/solvers.md is out of date: python experiments/gen_solvers_doc.py"


def test_solvers_page_names_every_registered_backend_and_flag():
    from solvers import base

    text = PAGE.read_text()
    for name in base._REGISTRY:
        assert f"| `{name}` |" in text, name
    for const, flag in vars(base).items():
        if const.startswith("CAP_"):
            assert f"`{flag}`" in text, const
    for status in base.STATUSES:
        assert f"| `{status}` |" in text, status


def test_solvers_page_paths_exist():
    text = PAGE.read_text()
    paths = set(re.findall(r"`((?:solvers|tacos_bench|experiments|tests)/[\w/.]*)`", text))
    assert len(paths) > 20
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
    links = re.findall(r"\]\(([\w./-]+\.md)\)", text)
    assert links and not [ln for ln in links if not (PAGE.parent / ln).exists()]


def test_docs_named_in_the_code_exist():
    # docs/solvers.md was named in solvers/base.py and solvers/describe.py long before it existed
    sources = [ROOT / "run.py", ROOT / "README.md"]
    for pkg in ("solvers", "tacos_bench", "experiments", "conf"):
        sources += [p for p in (ROOT / pkg).rglob("*") if p.suffix in (".py", ".yaml", ".md")]
    named = {}
    for src in sources:
        for ref in re.findall(r"\bdocs/[\w./-]*\w\.(?:md|png|csv)", src.read_text(errors="replace")):
            named.setdefault(ref, src.relative_to(ROOT))
    assert "docs/solvers.md" in named
    missing = {ref: str(src) for ref, src in named.items() if not (ROOT / ref).exists()}
    assert not missing, missing


def test_paths_and_modules_named_in_the_docs_exist():
    """Every repository path (``solvers/...``, ``tacos_bench/...``, ...) and dotted module or attribute
    (``tacos_bench.runner.synthesize``) named in README.md and docs/ exists: the pages cannot drift from the code
    (docs/exact.md named a tacos_bench/ten.py that had moved to solvers/exact/ten.py)."""
    import importlib
    import importlib.util

    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    missing = []
    for page in pages:
        text = page.read_text()
        for p in set(re.findall(r"(?<![\w/.])((?:solvers|tacos_bench|experiments|tests|conf)/[\w/.-]*\w)", text)):
            if not (ROOT / p).exists():
                missing.append(f"{page.relative_to(ROOT)}: {p}")
        for dotted in set(re.findall(r"(?<![\w/.])((?:solvers|tacos_bench)(?:\.[a-z_]\w*)+)", text)):
            parts = dotted.split(".")
            if parts[-1] in ("md", "py", "png", "csv", "yaml", "json", "parquet"):   # a file name, not a module
                continue
            for k in range(len(parts), 0, -1):
                try:
                    if importlib.util.find_spec(".".join(parts[:k])) is not None:
                        break
                except ModuleNotFoundError:   # a module's attribute, not a submodule
                    continue
            obj = importlib.import_module(".".join(parts[:k]))
            for attr in parts[k:]:
                obj = getattr(obj, attr, None)
            if obj is None:
                missing.append(f"{page.relative_to(ROOT)}: {dotted}")
    assert not missing, missing


def test_schedule_snapshot_compare_says_faster_and_slower():
    import importlib.util

    spec = importlib.util.spec_from_file_location("schedule_snapshot", ROOT / "experiments" / "schedule_snapshot.py")
    snap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snap)
    ref = {"a": "h1|10.000000", "b": "h2|10.000000", "c": "h3|10.000000", "d": "error: x", "e": "h5"}
    new = {"a": "h1|10.000000", "b": "h9|9.000000", "c": "h8|12.000000", "d": "error: y", "e": "h6"}
    c = snap.compare(ref, new)
    assert c["same"] == ["a"] and c["faster"] == [("b", 0.9)] and c["slower"] == [("c", 1.2)]
    assert c["other"] == ["d", "e"] and not c["missing"]
