"""Run settings and the Hydra structured-config schemas of ``run.py``.

The settings of a run are plain dataclasses (:class:`RunSettings`,
:class:`TopoConf`, :class:`CollectiveConf`, :class:`FaultConf`) that :func:`tacos_bench.runner.run_job`
reads from any mapping, Hydra or not. The solver schemas are *derived* from the
backends' options dataclasses (:mod:`solvers.options`), so every default is
written once, next to the backend that uses it. :func:`register_configs` hands
the schemas to Hydra's ConfigStore; the YAML files under ``conf/`` extend them
and an unknown key or a value of the wrong type is rejected before any work
starts. ``python run.py --help`` shows the composed config of one backend only,
so :func:`backend_defaults_help` adds every backend's own defaults to it
(:data:`HELP_TEMPLATE`).

The classes are created at import time and live in this module, so the joblib
and submitit workers can unpickle configs that reference them.

Examples
--------
>>> GreedyConf().name, GreedyConf().chunk_order
('greedy', 'random')
>>> "seed" in {f.name for f in dataclasses.fields(GreedyConf)}   # seed is a top-level setting
False
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from solvers.base import _REGISTRY, solver_class
from solvers.options import base_type

MISSING = "???"  # omegaconf's marker of a mandatory value

# Top-level settings of a run besides the three config groups; defaults of RunSettings.
EXPORT_FORMATS = ("none", "msccl", "json", "chakra", "astra-sim")
SCHEDULE_CSV_MODES = ("auto", "always", "never")


@dataclass
class TopoConf:
    """A named topology, a generated one, or a file (``kind: file``)."""

    name: str = MISSING
    kind: str = MISSING
    dims: List[int] = field(default_factory=list)
    bw_GiBps: float = 50.0
    lat_us: float = 0.5
    path: Optional[str] = None
    params: Dict[str, Any] = field(default_factory=dict)
    failed_npus: List[int] = field(default_factory=list)
    # directed links [[u, v], ...]; [u, v, "both"] fails both directions
    failed_links: List[Any] = field(default_factory=list)
    subset: Optional[List[int]] = None
    subset_mode: str = "induced"


@dataclass
class CollectiveConf:
    kind: str = "all_gather"
    chunks_per_npu: int = 1
    buffer_mib: float = 1024.0
    overlap: bool = True
    # broadcast, reduce, gather, scatter: the root's NPU id as configured (before failed_npus/subset renumbering)
    root: int = 0
    # collectives given by a chunk table (tacos_bench.runner.demand_config): all_to_allv's byte matrix, custom's
    # chunks.csv, the size of every chunk; a mixture-of-experts layer's shape and routing skew
    demand: Optional[str] = None
    chunks: Optional[str] = None
    chunk_bytes: Optional[int] = None
    tokens_per_npu: Optional[int] = None
    hidden: Optional[int] = None
    dtype: Optional[str] = None
    experts: Optional[int] = None
    top_k: Optional[int] = None
    gini: Optional[float] = None
    # concurrent: the parts ({kind, npus, buffer_mib, chunks_per_npu, root, overlap, demand}) and how they share
    parts: Optional[List[Any]] = None
    mode: Optional[str] = None
    # stragglers: [[npu, t_us], ...], NPU npu (id as configured) neither sends nor receives before t (solvers.release)
    release_us: Optional[List[Any]] = None


@dataclass
class FaultConf:
    """Links or NPUs failing at ``at_us`` during the collective; the rest is repaired (:mod:`solvers.repair`,
    run by :mod:`tacos_bench.runner.faulted`)."""

    at_us: Optional[float] = None
    # or: at this fraction of the healthy schedule's time (0.5 = mid-collective)
    at_fraction: Optional[float] = None
    links: List[Any] = field(default_factory=list)
    npus: List[int] = field(default_factory=list)
    # also this many random links (both directions where both exist), drawn from `seed`, never disconnecting
    random_links: int = 0
    # links slower from the start: [[u, v, factor], ...] ([u, v, factor, both]), bandwidth times factor in (0, 1];
    # slow_npus: [[npu, factor], ...], every link of that NPU (tacos_bench.faults.slowed_topology)
    slow_links: List[Any] = field(default_factory=list)
    slow_npus: List[Any] = field(default_factory=list)


@dataclass
class RunSettings:
    """Top-level run configuration (``conf/config.yaml`` extends it)."""

    solver: Any = MISSING
    topo: TopoConf = MISSING
    collective: CollectiveConf = MISSING
    fault: FaultConf = field(default_factory=FaultConf)
    seed: int = 0
    experiment: str = "default"
    # also export the verified schedule: none | msccl | json | chakra | astra-sim
    export: str = "none"
    # "auto" writes schedule.csv up to schedule_csv_max_rows transfers; "always"/"never" force it.
    schedule_csv: str = "auto"
    schedule_csv_max_rows: int = 20_000_000
    # Save the topology as an edge list next to the results (for exports / replays) up to this many links.
    save_topology_max_links: int = 2_000_000
    # Refuse, in words and before any work, a problem of more deliveries than this (All-Gather excepted: its
    # compact path streams billions); 12 M deliveries take the greedy about 100 s on 2 cores.
    max_deliveries: int = 10_000_000


def unknown_keys_message(section: str, unknown, valid) -> str:
    """One line for settings a schema does not have: each with the nearest valid name (a typo is the usual
    cause), then every valid name.

    >>> print(unknown_keys_message("solver", ["time_limit"], ["name", "time_limit_s", "threads"]))  # doctest: +ELLIPSIS
    unknown setting solver.time_limit (did you mean solver.time_limit_s?); valid keys of solver: name, ...
    """
    from ..errors import nearest_name

    valid = list(dict.fromkeys(valid))
    pre = f"{section}." if section else ""
    named = []
    for k in unknown:
        near = nearest_name(k, valid)
        named.append(f"{pre}{k}" + (f" (did you mean {pre}{near}?)" if near else ""))
    return (f"unknown setting{'s' if len(named) > 1 else ''} {', '.join(named)}; valid "
            f"{f'keys of {section}' if section else 'top-level keys'}: {', '.join(valid)}")


def _hydra_type(annotation):
    """OmegaConf takes ``Optional[X]``, not the ``X | None`` spelling of the options dataclasses."""
    typ, optional = base_type(annotation)
    if typing.get_origin(typ) is tuple:   # a list option (solver.candidates=[a,b])
        typ = List[typing.get_args(typ)[0]]
    return Optional[typ] if optional else typ


def foreign_options(name: str) -> list[str]:
    """Options some other backend has and ``name`` has not (``warm_start`` for ``greedy``), sorted.

    They are in every backend's schema, unset, so that one sweep can give an option to the backends that
    have it (``-m solver=greedy,cpsat solver.warm_start=false``); a run records what did not apply to it
    (``options_not_applied``) instead of failing. A name that no backend has is still rejected.
    """
    own = set(solver_class(name).Options.names())
    every = {f for n in _REGISTRY for f in solver_class(n).Options.names()}
    return sorted(every - own)


def solver_schema(name: str) -> type:
    """The structured config of solver ``name``: ``name``, its options except ``seed`` (top level), and every
    other backend's options as unset, untyped fields (:func:`foreign_options`)."""
    opts = solver_class(name).Options
    hints = typing.get_type_hints(opts)
    fields = [("name", str, field(default=name))]
    for f in dataclasses.fields(opts):
        if f.name == "seed":
            continue
        fields.append((f.name, _hydra_type(hints[f.name]), field(default=f.default)))
    for other in foreign_options(name):
        fields.append((other, Optional[Any], field(default=None)))
    cls_name = "".join(part.capitalize() for part in name.split("_")) + "Conf"
    cls = dataclasses.make_dataclass(cls_name, fields)
    cls.__module__ = __name__
    return cls


SOLVER_SCHEMAS: dict[str, type] = {}
for _name in _REGISTRY:
    SOLVER_SCHEMAS[_name] = solver_schema(_name)
    globals()[SOLVER_SCHEMAS[_name].__name__] = SOLVER_SCHEMAS[_name]  # importable by name (pickling)


def _defaults(options_cls) -> dict[str, Any]:
    """``{option: default}`` of an options dataclass."""
    return {f.name: f.default for f in dataclasses.fields(options_cls)}


def backend_defaults_help(width: int = 110) -> str:
    """Every backend's own defaults, one entry per backend, for ``python run.py --help``.

    The help's Config section is the config composed for one backend (``solver=greedy`` unless given), so
    on its own it says ``time_limit_s: null`` and never that milp and cpsat stop at 600 s. Each entry gives
    the backend's time limit and whether it honours one, the shared options whose default differs from
    :class:`~solvers.options.SolverOptions`, and its own options; a backend whose options extend another
    backend's (greedy_plus: greedy's) lists only what it changes, which is what tells the two apart.

    Parameters
    ----------
    width : int
        Wrap the entries at this many characters.

    Returns
    -------
    str

    Examples
    --------
    >>> text = backend_defaults_help()
    >>> [ln for ln in text.splitlines() if ln.startswith("  milp")]
    ['  milp         time_limit_s: 600.0 (honoured); time_step_us: null, horizon_steps: null, warm_start: true,']
    >>> [ln for ln in text.splitlines() if ln.startswith("  bfs")]
    ['  bfs          time_limit_s: null (not honoured: runs to completion)']
    >>> "greedy_plus  time_limit_s: null (none; honoured when set); as greedy except chunk_order:" in text
    True
    """
    from solvers.base import CAP_TIME_LIMIT
    from solvers.describe import format_default
    from solvers.options import COMMON, SolverOptions

    generic = _defaults(SolverOptions)
    # The generic class is no backend's own (bfs, direct, ... use it as is), so it never counts as a parent.
    owner = {solver_class(n).Options: n for n in _REGISTRY if solver_class(n).Options is not SolverOptions}
    pad = max(len(n) for n in _REGISTRY) + 2
    lines = []
    for name in _REGISTRY:
        cls = solver_class(name)
        mine = _defaults(cls.Options)
        if CAP_TIME_LIMIT not in cls.capabilities:
            honoured = "not honoured: runs to completion"
        else:
            honoured = "none; honoured when set" if mine["time_limit_s"] is None else "honoured"
        items = [f"time_limit_s: {format_default(mine['time_limit_s'])} ({honoured});"]
        items += [f"{k}: {format_default(mine[k])}," for k in COMMON
                  if k not in ("seed", "time_limit_s") and mine[k] != generic[k]]
        parent = next((owner[b] for b in cls.Options.__mro__[1:] if b in owner and owner[b] != name), None)
        base = _defaults(solver_class(parent).Options) if parent else {}
        own = [f"{k}: {format_default(v)}," for k, v in mine.items()
               if k not in COMMON and (k not in base or base[k] != v)]
        if parent:
            items.append(f"as {parent} except" if own else f"as {parent}")
        items = items + own
        items[-1] = items[-1].rstrip(",;")
        lines += _wrap_items(items, f"  {name:<{pad}}", " " * (pad + 4), width)
    return "\n".join(lines)


def _wrap_items(items: list[str], first: str, indent: str, width: int) -> list[str]:
    """Lines of at most ``width`` characters (unless one item is longer), breaking only between items, so
    an option's name and its default stay on one line."""
    lines, cur = [], first
    for item in items:
        if cur.strip() and len(cur) + 1 + len(item) > width:
            lines.append(cur.rstrip())
            cur = indent
        cur += ("" if cur.isspace() or cur == first else " ") + item
    return lines + [cur.rstrip()]


# Hydra's default help with a section on the backends before the composed config. No "$" or "${" may appear
# in the inserted text except Hydra's own placeholders: Hydra substitutes them and OmegaConf interpolates.
HELP_TEMPLATE = """${hydra.help.header}
== Configuration groups ==
Compose your configuration from those groups (group=option)
(solver: base_<name> are the schemas the YAML files extend; pick a name without base_)

$APP_CONFIG_GROUPS

== Solver backends: their own defaults ==
Every backend takes seed (top level), solver.time_limit_s and solver.threads; the Config below shows the chosen
backend only. Each option with its meaning: python -m solvers.describe NAME

{backends}

== Config ==
Override anything in the config (foo.bar=value)

$CONFIG

${hydra.help.footer}
"""


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore (``base_config`` and ``solver/base_<name>``).

    ``base_config`` also carries the help template (``hydra.help.template``): it is the one node of the
    primary config's defaults list that this module owns, and a ``hydra`` key there is merged into Hydra's
    own config (and dropped from the job's) like the one in ``conf/config.yaml``.
    """
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf, open_dict

    base = OmegaConf.structured(RunSettings)
    with open_dict(base):
        base.hydra = {"help": {"template": HELP_TEMPLATE.replace("{backends}", backend_defaults_help())}}
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=base)
    for name, schema in SOLVER_SCHEMAS.items():
        cs.store(group="solver", name=f"base_{name}", node=schema)
