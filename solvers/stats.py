"""Declared solver statistics: what each backend may report in ``SolveResult.stats``.

A backend declares its statistics once (:class:`StatsSchema`: a name, a type, a unit and a meaning each), and
every run's statistics are checked against the declaration in :meth:`solvers.base.Solver.solve` and flattened
the same way for every backend into the record's ``s_<name>`` fields (:func:`tacos_bench.runner.records.flatten`).
``python -m solvers.describe NAME`` and ``docs/solvers.md`` list them. A composed collective reports each phase's
statistics under a phase prefix (``rs_``, ``ag_``), declared once with ``phases``.

An undeclared statistic is a bug of its backend: with ``TACOS_STRICT_STATS=1`` (the test suite sets it) it raises,
otherwise it is logged once and kept, so a user's run never fails for a statistic.

Examples
--------
>>> schema = StatsSchema(Stat("events", int, "", "events processed"), phases=("rs", "ag"))
>>> schema.undeclared({"events": 3, "rs_events": 1, "draws": 2})
['draws']
>>> schema.undeclared({"events": "three"})
['events: str, declared int']
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from tacos_bench.errors import SolverError

log = logging.getLogger(__name__)

STRICT_ENV = "TACOS_STRICT_STATS"
# the numpy scalars a statistic of each declared type may also be
_NUMPY = {int: (np.integer,), float: (np.floating, np.integer, int), bool: (np.bool_,), str: ()}


@dataclass(frozen=True)
class Stat:
    """One statistic: its name, its Python type (``None`` values are always allowed), unit and meaning."""

    name: str
    type: type | tuple
    unit: str
    doc: str

    def accepts(self, value: Any) -> bool:
        if value is None:
            return True
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if bool in types or not isinstance(value, (bool, np.bool_)):
            ok = tuple(types) + tuple(t for ty in types for t in _NUMPY.get(ty, ()))
            return isinstance(value, ok)
        return False


class StatsSchema:
    """The statistics of one backend: :class:`Stat` entries, other schemas it includes, the phase prefixes its
    composed collectives use, and name patterns (``prefix*``) for families of statistics."""

    def __init__(self, *stats: Stat, include: Iterable["StatsSchema"] = (), phases: tuple[str, ...] = (),
                 patterns: Iterable[Stat] = ()):
        self.stats: dict[str, Stat] = {}
        self.patterns: dict[str, Stat] = {}
        for s in include:
            self.stats.update(s.stats)
            self.patterns.update(s.patterns)
        self.stats.update({s.name: s for s in stats})
        self.patterns.update({p.name: p for p in patterns})
        self.phases = tuple(phases)

    def lookup(self, name: str) -> Stat | None:
        """The declaration of ``name`` (through a phase prefix or a pattern), or ``None``."""
        if name in self.stats:
            return self.stats[name]
        for phase in self.phases:
            if name.startswith(phase + "_") and name[len(phase) + 1:] in self.stats:
                return self.stats[name[len(phase) + 1:]]
        bare = name
        for phase in self.phases:
            if name.startswith(phase + "_"):
                bare = name[len(phase) + 1:]
        for pat, stat in self.patterns.items():
            if name.startswith(pat.rstrip("*")) or bare.startswith(pat.rstrip("*")):
                return stat
        return None

    def renamed(self, prefix: str, what: str = "") -> "StatsSchema":
        """The same statistics named ``<prefix><name>``, their meaning opened by ``what``: a sub-model's
        statistics that its caller copies under a prefix (``continuous_intervals``), declared once.

        >>> inner = StatsSchema(Stat("intervals", int, "", "optional intervals"))
        >>> inner.renamed("continuous_", "continuous model: ").lookup("continuous_intervals").doc
        'continuous model: optional intervals'
        """
        def one(s: Stat) -> Stat:
            return Stat(prefix + s.name, s.type, s.unit, what + s.doc)

        return StatsSchema(*map(one, self.stats.values()), patterns=map(one, self.patterns.values()),
                           phases=self.phases)

    def undeclared(self, stats: Mapping[str, Any]) -> list[str]:
        """The names in ``stats`` this schema does not declare, or whose value has another type."""
        out = []
        for k, v in stats.items():
            stat = self.lookup(k)
            if stat is None:
                out.append(k)
            elif not (isinstance(v, (list, tuple, dict)) and stat.type in (list, dict)) and not stat.accepts(v):
                out.append(f"{k}: {type(v).__name__}, declared {_type_name(stat.type)}")
        return out

    def check(self, stats: Mapping[str, Any], backend: str) -> None:
        """Raise (strict mode) or log the undeclared statistics of a run of ``backend``."""
        bad = self.undeclared(stats)
        if not bad:
            return
        msg = f"solver {backend!r} reported undeclared statistics: {', '.join(bad)} (declare them in its Stats)"
        if os.environ.get(STRICT_ENV):
            raise SolverError(msg)
        key = (backend, tuple(bad))
        if key not in _WARNED:
            _WARNED.add(key)
            log.warning("%s", msg)

    def markdown(self) -> str:
        """The statistics as a markdown table (record field, type, unit, meaning)."""
        return family_markdown({"": self})


def family_markdown(schemas: Mapping[str, "StatsSchema"]) -> str:
    """One markdown table of the statistics of several backends (name -> schema), with a column naming the
    backends that report each statistic (``all``: every one) when they differ; one backend's table has none.

    >>> a = StatsSchema(Stat("events", int, "", "events processed"))
    >>> b = StatsSchema(Stat("draws", int, "", "random draws"), include=(a,))
    >>> print(family_markdown({"x": a, "y": b}))
    | record field | type | unit | backends | meaning |
    |---|---|---|---|---|
    | `s_draws` | int |  | y | random draws |
    | `s_events` | int |  | all | events processed |
    <BLANKLINE>
    """
    rows: dict[tuple, list[str]] = {}   # (record field, type, unit, meaning) -> backends
    for name, schema in schemas.items():
        for s in schema.stats.values():
            rows.setdefault((f"`s_{s.name}`", _type_name(s.type), s.unit, s.doc), []).append(name)
    order = sorted(rows, key=lambda r: r[0].strip("`"))
    # then the families (patterns) and the phases, in the order the schemas declare them
    for name, schema in schemas.items():
        for s in schema.patterns.values():
            rows.setdefault((f"`s_{s.name}`", _type_name(s.type), s.unit, s.doc), []).append(name)
        if schema.phases:
            rows.setdefault(("`s_<phase>_<stat>`", "", "", f"a composed collective's phase "
                             f"({', '.join(schema.phases)}): each statistic above of that phase"), []).append(name)
    named = set(order)
    order += [r for r in rows if r not in named]
    split = any(len(names) != len(schemas) for names in rows.values())
    header = ["record field", "type", "unit"] + (["backends"] if split else []) + ["meaning"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in order:
        who = "all" if len(rows[r]) == len(schemas) else ", ".join(rows[r])
        cells = list(r[:3]) + ([who] if split else []) + [r[3]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


_WARNED: set = set()


def _type_name(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    return getattr(t, "__name__", str(t))


# statistics every backend may report
COMMON = StatsSchema(
    Stat("jit_warmup_s", float, "s", "one-off JIT compilation before the clock started (folded into the "
                                      "record's jit_warmup_s)"),
    Stat("transfers", int, "", "transfers of the returned schedule"),
    Stat("concurrent_plan", str, "", "collective=concurrent: how the parts were combined (sequential, priority, "
                                     "joint: merged, union: solved as one table)"),
    Stat("concurrent_plans_us", str, "µs", "collective=concurrent: each combination's verified time (or why it "
                                           "was rejected)"),
    Stat("part_times_us", list, "µs", "collective=concurrent: each part's finish in the returned schedule"),
)
