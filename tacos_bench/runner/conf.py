"""Run settings and the Hydra structured-config schemas of ``run.py``.

The settings of a run are plain dataclasses (:class:`RunSettings`,
:class:`TopoConf`, :class:`CollectiveConf`, :class:`FaultConf`) that :func:`tacos_bench.runner.run_job`
reads from any mapping, Hydra or not. The solver schemas are *derived* from the
backends' options dataclasses (:mod:`solvers.options`), so every default is
written once, next to the backend that uses it. :func:`register_configs` hands
the schemas to Hydra's ConfigStore; the YAML files under ``conf/`` extend them
and an unknown key or a value of the wrong type is rejected before any work
starts.

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


@dataclass
class FaultConf:
    """Links or NPUs failing at ``at_us`` during the collective; the rest is repaired (tacos_bench.repair)."""

    at_us: Optional[float] = None
    # or: at this fraction of the healthy schedule's time (0.5 = mid-collective)
    at_fraction: Optional[float] = None
    links: List[Any] = field(default_factory=list)
    npus: List[int] = field(default_factory=list)
    # also this many random links (both directions where both exist), drawn from `seed`, never disconnecting
    random_links: int = 0


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


def _hydra_type(annotation):
    """OmegaConf takes ``Optional[X]``, not the ``X | None`` spelling of the options dataclasses."""
    typ, optional = base_type(annotation)
    return Optional[typ] if optional else typ


def solver_schema(name: str) -> type:
    """The structured config of solver ``name``: ``name`` plus its options except ``seed`` (top level)."""
    opts = solver_class(name).Options
    hints = typing.get_type_hints(opts)
    fields = [("name", str, field(default=name))]
    for f in dataclasses.fields(opts):
        if f.name == "seed":
            continue
        fields.append((f.name, _hydra_type(hints[f.name]), field(default=f.default)))
    cls_name = "".join(part.capitalize() for part in name.split("_")) + "Conf"
    cls = dataclasses.make_dataclass(cls_name, fields)
    cls.__module__ = __name__
    return cls


SOLVER_SCHEMAS: dict[str, type] = {}
for _name in _REGISTRY:
    SOLVER_SCHEMAS[_name] = solver_schema(_name)
    globals()[SOLVER_SCHEMAS[_name].__name__] = SOLVER_SCHEMAS[_name]  # importable by name (pickling)


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore (``base_config`` and ``solver/base_<name>``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=RunSettings)
    for name, schema in SOLVER_SCHEMAS.items():
        cs.store(group="solver", name=f"base_{name}", node=schema)
