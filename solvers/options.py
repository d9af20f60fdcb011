"""Backend options: one frozen dataclass per backend, validated in one shared way.

Every backend declares its options as a frozen dataclass deriving from
:class:`SolverOptions`, which holds the three options whose meaning is the
same everywhere:

``seed``
    Master seed of every random choice (non-negative integer). A backend
    without :data:`~solvers.base.CAP_RANDOMIZED` is deterministic and ignores it.
``time_limit_s``
    Wall-clock budget of ``solve()`` in seconds (``None``: no limit). A
    backend without :data:`~solvers.base.CAP_TIME_LIMIT` runs to completion.
``threads``
    Threads the backend may use; ``0`` means one per usable core. It changes
    the speed of a run, never its schedule for a given seed, except where a
    backend's documentation says otherwise (the exact solvers' search order).

A field's type annotation, default and ``metadata`` (``choices``, ``minimum``,
``doc``) are the whole specification: :meth:`SolverOptions.parse` validates a
mapping against it and the Hydra schemas of ``run.py`` are derived from it
(:mod:`tacos_bench.runner.conf`), so no default is written twice.

Examples
--------
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class DemoOptions(SolverOptions):
...     rule: str = option("fast", choices=("fast", "slow"), doc="which rule")
>>> DemoOptions.parse({"rule": "slow", "seed": 3}).rule
'slow'
>>> DemoOptions.parse({"rule": "medium"})
Traceback (most recent call last):
...
tacos_bench.errors.SolverError: option rule='medium' is not one of fast, slow
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tacos_bench.errors import SolverError

COMMON = ("seed", "time_limit_s", "threads")


def option(default, *, choices: tuple | None = None, minimum: float | None = None, positive: bool = False,
           plugin: bool = False, doc: str = ""):
    """A dataclass field with its validation rules and one-line documentation; ``plugin``: besides its
    ``choices``, a ``module.path:name`` naming a user's function is accepted (case kept)."""
    meta = {"doc": doc}
    if plugin:
        meta["plugin"] = True
    if choices is not None:
        meta["choices"] = tuple(choices)
    if minimum is not None:
        meta["minimum"] = minimum
    if positive:
        meta["positive"] = True
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class SolverOptions:
    """The options every backend accepts (see the module docstring)."""

    seed: int = option(0, minimum=0, doc="master seed of every random choice")
    time_limit_s: float | None = option(None, positive=True, doc="wall-clock budget of solve() in s (null: none)")
    threads: int = option(0, minimum=0, doc="threads; 0 = one per usable core")

    @classmethod
    def fields(cls) -> tuple[dataclasses.Field, ...]:
        return dataclasses.fields(cls)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None = None, solver: str | None = None, /, **more):
        """Validate ``values`` (and keyword ``more``) into a frozen options object.

        Unknown names, values of the wrong type and values outside a field's
        ``choices``/``minimum`` raise a one-line :class:`SolverError`;
        ``None`` for a non-optional field means its default.
        """
        given = dict(values or {})
        given.update(more)
        known = cls.names()
        unknown = sorted(set(given) - set(known))
        if unknown:
            from tacos_bench.errors import nearest_name

            who = f"solver {solver!r}" if solver else "this solver"
            near = [f"{k} (did you mean {m}?)" if (m := nearest_name(k, known)) else k for k in unknown]
            raise SolverError(f"{who} has no option(s) {', '.join(near)}; known: {', '.join(known)}")
        hints = _type_hints(cls)
        out = {}
        for f in dataclasses.fields(cls):
            if f.name in given:
                out[f.name] = _coerce(f, hints[f.name], given[f.name])
        opts = cls(**out)
        opts.check()
        return opts

    def check(self) -> None:
        """Cross-field rules (subclasses extend; raise SolverError)."""

    def replace(self, **changes):
        return type(self).parse({**self.as_dict(), **changes})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def specific(self) -> dict[str, Any]:
        """The backend's own options (everything but seed, time_limit_s, threads)."""
        return {k: v for k, v in self.as_dict().items() if k not in COMMON}

    @property
    def num_threads(self) -> int:
        """``threads`` resolved: 0 becomes the number of usable cores."""
        return usable_cores() if self.threads == 0 else int(self.threads)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def base_type(annotation) -> tuple[type, bool]:
    """``(type, optional)`` of a field annotation such as ``int``, ``float | None``."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return annotation, False


@functools.lru_cache(maxsize=None)
def _type_hints(cls) -> dict[str, Any]:
    """``typing.get_type_hints`` of an options class, once: it re-evaluates every annotation string, which
    cost ~1 ms of every ``solve`` (a per-root sweep of a small problem takes a few ms in all)."""
    return typing.get_type_hints(cls)


def _coerce(f: dataclasses.Field, annotation, value):
    typ, optional = base_type(annotation)
    name = f.name
    meta = f.metadata
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("null", "none")):
        if optional:
            return None
        return f.default
    if typ is bool:
        v = _as_bool(name, value)
    elif typ is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise SolverError(f"option {name} must be an integer, got {value!r}")
        v = int(value)
    elif typ is float:
        if isinstance(value, (bool, np.bool_)):
            raise SolverError(f"option {name} must be a number, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise SolverError(f"option {name} must be a number, got {value!r}") from None
        if not math.isfinite(v):
            raise SolverError(f"option {name} must be a finite number, got {value!r}")
    elif typ is str:
        v = str(value).strip()
        if meta.get("plugin") and ":" in v:
            return v
        v = v.lower()
    elif typing.get_origin(typ) is tuple:
        v = _as_names(name, value)
        if v is None:
            return None if optional else f.default
    else:  # pragma: no cover - options only use the types above
        raise TypeError(f"unsupported option type {annotation!r} for {name}")
    if "choices" in meta and v not in meta["choices"]:
        raise SolverError(f"option {name}={value!r} is not one of {', '.join(map(str, meta['choices']))}")
    if "minimum" in meta and v < meta["minimum"]:
        raise SolverError(f"option {name} must be >= {meta['minimum']}, got {value!r}")
    if meta.get("positive") and not v > 0:
        raise SolverError(f"option {name} must be positive, got {value!r}")
    return v


def _as_names(name: str, value) -> tuple[str, ...] | None:
    """A list option (names, import paths) from a list, a tuple or a string ``"[a,b]"`` / ``"a,b"``."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("null", "none"):
            return None
        value = [] if text in ("", "[]") else text.strip("[]").split(",")
    elif not isinstance(value, (list, tuple)) and not hasattr(value, "__iter__"):
        raise SolverError(f"option {name} must be a list, got {value!r}")
    names = tuple(str(v).strip() for v in value)
    if any(not n for n in names):
        raise SolverError(f"option {name} has an empty entry: {value!r}")
    return names


def _as_bool(name: str, v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.strip().lower() in ("true", "1", "yes")
    raise SolverError(f"option {name} must be true or false, got {v!r}")
