"""Write ``docs/solvers.md``: the solver families, the registry, capabilities and status maps.

    python experiments/gen_solvers_doc.py            # rewrite docs/solvers.md
    python experiments/gen_solvers_doc.py --check    # exit 1 when the page is out of date

The prose about the families is kept here; every table is built from the registry
(``solvers.base._REGISTRY``) and the backend classes it names, so the page says what the code does.
``tests/test_docs.py`` fails when the page and the code disagree: run this again after adding a backend or
changing a backend's ``capabilities``, ``STATUS_MAP`` or ``Stats`` (its declared statistics).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's solvers, not an installed copy's
    sys.path.insert(0, str(ROOT))
PAGE = ROOT / "docs" / "solvers.md"

# The meaning of each flag lives in prose; a flag without one stops the generator (see _meaning) rather than
# reaching the page unexplained.
CAPABILITY_MEANINGS = {
    "exact": "can prove a schedule optimal on its model (`status=optimal` with a `proof`)",
    "time_limit": "honours `time_limit_s` (without it a run goes to completion)",
    "randomized": "uses `seed` (without it the backend is deterministic and ignores the seed)",
    "warm_start": "can start its search from an initial schedule (option `warm_start`)",
    "threads": "honours `threads`",
    "overlap": "All-Reduce follows `collective.overlap` (the composed Reduce-Scatter and All-Gather overlap "
               "per link and chunk, or run with a barrier)",
    "fabric": "schedules switched fabrics (switches as nodes, docs/fabrics.md)",
    "fabric_only": "needs a switched fabric (it runs inside a switch)",
    "demand_unicast": "chunk tables of unicast chunks (all_to_allv, custom; tacos_bench/demand.py)",
    "demand_copy": "chunk tables of copies to any destinations (moe_dispatch, custom)",
    "demand_reduce": "chunk tables of reductions into one destination each (moe_combine, custom)",
    "from_state": "can complete a copy collective from a given state (`Solver.solve_from`), so "
                  "`solvers/repair.py` can repair its schedules after a fault",
    "release": "models late NPUs (`collective.release_us`) itself: `solvers/release.py` runs its plan `exact` "
               "(the problem with its release times in the backend's own model) before `wait`",
}
STATUS_MEANINGS = {
    "optimal": "a schedule proved optimal (the backend's `proof` says how)",
    "feasible": "a schedule without a proof of optimality",
    "infeasible": "proved that no schedule meets the backend's constraints (e.g. a horizon below the optimum)",
    "no_solution": "stopped (time limit) before finding any schedule",
    "error": "the backend failed; the message says why",
}
FAMILY_DIRS = {"greedy": "solvers/greedy/", "exact": "solvers/exact/", "baselines": "solvers/baselines/"}

INTRO = """\
# Solvers: families, registry, capabilities, statuses

Every synthesis backend is a class behind one interface, `solvers.base.Solver`: it takes a
`tacos_bench.problem.Problem`, returns a `SolveResult` (status, schedule, objective, bound, timings, statistics)
and declares its name, its options (a frozen dataclass), its capability flags and its `STATUS_MAP`, the mapping of
its native outcomes onto the shared status vocabulary. Verification, bounds, whole-run timing and records happen
outside the backends, in `tacos_bench/runner/`. Backends are registered by name and imported on first use, so
`import solvers` pulls in neither OR-Tools, PuLP nor numba.

```python
from solvers import available_solvers, get_solver
get_solver("greedy").solve(problem, seed=1)      # run.py: solver=greedy seed=1
```

The backends come in three families, each a package that never imports another family, over a shared layer that
imports no family (import-linter contracts in `pyproject.toml`, checked by `tests/test_layers.py`). What one
family needs of another goes through the registry: the exact backends' warm start runs the greedy, and
`greedy_plus` on a switched fabric runs the baselines (`solver_family` names each backend's family) as candidates.
Each backend's options, their defaults and their meaning: `python -m solvers.describe NAME`.

## The shared layer (`solvers/`)

`solvers/base.py` holds the interface (`Solver`, `SolveResult`, `StartState`), the shared vocabularies (statuses,
stop reasons, solution sources), the capability flags and the registry (`get_solver`, `available_solvers`,
`register_solver`, `solver_family`). `solvers/options.py` is the options machinery every backend's dataclass derives
from (`SolverOptions`: `seed`, `time_limit_s`, `threads`, and one validation for all). `solvers/compose.py` builds
every collective from a copy synthesizer: a reducing collective is its copy mirror on the reversed topology with
time reversed, and All-Reduce is Reduce-Scatter then All-Gather, overlapped or with a barrier.
`solvers/plan.py` times the baselines' plans (single-hop transfers and barriers) with one list scheduler.
`solvers/repair.py` repairs a schedule after a fault with any backend that has `from_state`.
`solvers/describe.py` prints each backend's options, capabilities and status map from the code.

## The greedy family (`solvers/greedy/`)

The TACOS link-chunk matcher and what is built on it ([greedy.md](greedy.md), [scale.md](scale.md)).
`solvers/greedy/solver.py` holds the `greedy` and `greedy_plus` backends, `solvers/greedy/hierarchical.py` the
`hier` backend; `solvers/greedy/options.py` their options and constants; `solvers/greedy/engine.py` runs one
greedy on the kernel that fits the problem (`greedy_all_gather`); `solvers/greedy/hierarchy.py` finds the groups
and rails of a tiered topology and `solvers/greedy/decomposition.py` streams the tier decomposition to a compact
schedule at 40,000-NPU scale. The numba kernels are `solvers/greedy/_kernel_classic.py`,
`solvers/greedy/_kernel_scale.py`, `solvers/greedy/_kernel_tiered.py`, `solvers/greedy/_kernel_unicast.py` and
`solvers/greedy/_kernel_routed.py`, with their shared pieces (bit tricks, random stream, event queue, status
codes) in `solvers/greedy/_kernel_common.py`.

## The exact family (`solvers/exact/`)

Models that can prove optimality ([exact.md](exact.md)). `solvers/exact/ten.py` discretizes time into the
time-expanded network (TEN); `solvers/exact/common.py` builds the model's index structure once, gets the warm
start and lower bound, runs a backend under one deadline and maps its plan back to a continuous schedule;
`solvers/exact/milp.py` (`milp`: PuLP with HiGHS or CBC) and `solvers/exact/cpsat.py` (`cpsat`: OR-Tools CP-SAT)
solve it.

## The baselines (`solvers/baselines/`)

The classic algorithms as real schedules on the given topology ([baselines.md](baselines.md)).
`solvers/baselines/classic.py` holds `ring`, `direct`, `rhd` and `dbt` (with `solvers/baselines/_hamilton.py`
finding the ring's Hamiltonian cycles), `solvers/baselines/collectives.py` the rooted and All-to-All
algorithms `pairwise`, `bruck`, `binomial` and `chain`, `solvers/baselines/direct.py` the Direct plans of those
collectives, and `solvers/baselines/trivial.py` the naive `bfs` reference. `solvers/baselines/common.py` is what
they share (the deterministic backend class, the composition from an All-Gather plan).
"""


def _family(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in FAMILY_DIRS else "shared"


def _meaning(table: dict[str, str], key: str, what: str) -> str:
    if key not in table:
        raise SystemExit(f"{what} {key!r} has no meaning in experiments/gen_solvers_doc.py; add one there")
    return table[key]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |"
                                                                             for r in rows]


def render() -> str:
    """The page, from the registry and the backend classes."""
    from solvers import base
    from tacos_bench.collective import KINDS

    names = list(base._REGISTRY)
    classes = {n: base.solver_class(n) for n in names}
    out = [INTRO.rstrip("\n"), "",
           "## Registry", "",
           ("`get_solver(NAME)` and `run.py solver=NAME` pick a backend by these names "
            "(`solvers.base._REGISTRY`; `register_solver` adds one)."), ""]
    rows = []
    for n in names:
        module, cls = base._REGISTRY[n].split(":")
        rows.append([f"`{n}`", _family(module), f"`{cls}`", f"`{module.replace('.', '/')}.py`"])
    out += _table(["name", "family", "class", "module"], rows)

    out += ["", "## Collectives", "",
            ("Which collectives each backend synthesizes (its capability flags named after the collectives; a "
             "backend refuses the others in one line, naming the backends that can)."), ""]
    out += _table(["name"] + [f"`{k}`" for k in KINDS],
                  [[f"`{n}`"] + ["✓" if k in classes[n].capabilities else "" for k in KINDS] for n in names])

    # every declared flag, in declaration order, also one no backend has yet
    constants = {v: k for k, v in vars(base).items() if k.startswith("CAP_")}
    flags = [f for f in constants if f not in KINDS]
    out += ["", "## Capabilities", "",
            ("The other flags say what a backend does with the shared options and beyond, so callers test "
             "flags, never names."), ""]
    out += _table(["flag", "constant", "meaning"],
                  [[f"`{f}`", f"`{constants[f]}`", _meaning(CAPABILITY_MEANINGS, f, "capability")]
                   for f in flags])
    out += [""]
    out += _table(["name"] + [f"`{f}`" for f in flags],
                  [[f"`{n}`"] + ["✓" if f in classes[n].capabilities else "" for f in flags] for n in names])

    out += ["", "## Statuses", "",
            ("Every backend reports one of the shared statuses (`SolveResult.status`; the run's record says "
             "`optimal` for any verified schedule that meets the lower bound, whoever found it):"), ""]
    out += _table(["status", "meaning"], [[f"`{s}`", _meaning(STATUS_MEANINGS, s, "status")]
                                          for s in base.STATUSES])
    out += ["", ("Each backend's `STATUS_MAP` says which shared status each of its native outcomes becomes. "
                 "The exact backends report an outcome missing from their map as `error`, and an `optimal` or "
                 "`feasible` outcome that came without a solution as `no_solution` "
                 "(`solvers.exact.common.shared_status`)."), ""]
    groups: dict[tuple, list[str]] = {}
    for n in names:
        groups.setdefault(tuple(classes[n].STATUS_MAP.items()), []).append(n)
    for items, members in groups.items():
        out += [f"### {', '.join(f'`{n}`' for n in members)}", ""]
        out += _table(["native outcome", "status"], [[f"`{native}`", f"`{shared}`"] for native, shared in items])
        out += [""]
    out += _portfolios(names, classes)
    out += _statistics(names, classes)
    return "\n".join(out).rstrip("\n") + "\n"


def _portfolios(names, classes) -> list[str]:
    """Each backend with a portfolio of candidates (``portfolio_markdown``): its candidates at its defaults."""
    out = []
    for name in names:
        md = getattr(classes[name], "portfolio_markdown", None)
        if md is not None and name == "greedy_plus":   # greedy's is the same list with fewer switches on
            out += ["", f"## The portfolio of `{name}`", "",
                    "Which candidates run is a matter of options (`solver.candidates=[...]`, each one's switch and "
                    "budget; `greedy` has the same candidates with fewer switches on); the record names the winner "
                    "(`candidate`), what ran (`candidates_tried`) and what did not and why "
                    "(`candidates_skipped`). docs/greedy.md says how to add your own.", "", md().rstrip("\n")]
    return out


STATS_INTRO = """\
Every backend declares the statistics it may report in `SolveResult.stats` (`solvers/stats.py`): a name, a type,
a unit and a meaning each, checked on every solve. The run's record holds them as `s_<name>` fields, flattened the
same way for every backend (a list becomes a JSON string); a statistic a backend reports without declaring it is
logged once, and raises with `TACOS_STRICT_STATS=1` (the tests set it). A composed collective reports each phase's
statistics under the phase's prefix (`rs_`, `ag_`). One table per family; where the family's backends differ, a
column names those that report each statistic. `python -m solvers.describe NAME` prints one backend's table."""


def _statistics(names: list[str], classes: dict) -> list[str]:
    """The statistics section: one table per family (and one for the backends outside the families)."""
    from solvers.stats import family_markdown

    out = ["", "## Statistics", "", STATS_INTRO, ""]
    families: dict[str, list[str]] = {f: [] for f in FAMILY_DIRS}
    for n in names:
        families.setdefault(_family(base_module(n)), []).append(n)
    for family, members in families.items():
        if not members:
            continue
        where = FAMILY_DIRS.get(family, "")
        title = {"shared": "Other backends", "baselines": "The baselines"}.get(family, f"The {family} family")
        module = f"{where}stats.py"
        out += [f"### {title}" + (f" (`{module}`)" if (ROOT / module).exists() else ""), ""]
        schemas = {n: classes[n].Stats for n in members if classes[n].Stats is not None}
        undeclared = [n for n in members if classes[n].Stats is None]
        if schemas:
            out += [f"{', '.join(f'`{n}`' for n in schemas)}:", "", family_markdown(schemas).rstrip("\n"), ""]
        if undeclared:
            out += [f"Not declared yet (free-form, unchecked): {', '.join(f'`{n}`' for n in undeclared)}.", ""]
    return out


def base_module(name: str) -> str:
    from solvers import base

    return base._REGISTRY[name].split(":")[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/solvers.md differs from the code")
    ap.add_argument("-o", "--out", type=Path, default=PAGE, help=f"page to write (default {PAGE.relative_to(ROOT)})")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        old = a.out.read_text() if a.out.exists() else ""
        if old == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(a.out),
                                                   "generated"))
        print(f"{a.out} is out of date: python experiments/gen_solvers_doc.py", file=sys.stderr)
        return 1
    a.out.write_text(text)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
