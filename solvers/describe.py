"""Describe backends: their options, capabilities and status tables, from the code itself.

    python -m solvers.describe            # every backend, as markdown (docs/solvers.md is this output)
    python -m solvers.describe greedy     # one backend

Examples
--------
>>> print(options_table("rhd").splitlines()[2])
| `seed` | int | 0 | master seed of every random choice |
"""

from __future__ import annotations

import dataclasses
import sys
import typing

from .base import available_solvers, solver_class
from .options import base_type


def _type_name(annotation) -> str:
    typ, optional = base_type(annotation)
    return typ.__name__ + (" or null" if optional else "")


def options_table(name: str) -> str:
    cls = solver_class(name).Options
    hints = typing.get_type_hints(cls)
    rows = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        doc = f.metadata.get("doc", "")
        if "choices" in f.metadata:
            doc += f" ({' / '.join(f.metadata['choices'])})"
        default = "null" if f.default is None else str(f.default).lower() if isinstance(f.default, bool) \
            else str(f.default)
        rows.append(f"| `{f.name}` | {_type_name(hints[f.name])} | {default} | {doc} |")
    return "\n".join(rows) + "\n"


def describe(name: str) -> str:
    cls = solver_class(name)
    doc = (cls.__doc__ or "").strip().splitlines()[0]
    caps = ", ".join(sorted(cls.capabilities))
    status = "\n".join(f"| `{native}` | {shared} |" for native, shared in cls.STATUS_MAP.items())
    return (f"## `{name}`\n\n{doc}\n\nCapabilities: {caps}.\n\n{options_table(name)}\n"
            f"| native outcome | status |\n|---|---|\n{status}\n")


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or available_solvers()
    for n in names:
        print(describe(n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
