"""Hydra structured-config schemas (importable, so joblib/submitit workers can unpickle them).

The YAML files under ``conf/`` extend these schemas; an unknown key or a value
of the wrong type is rejected by Hydra before any work starts. Each solver has
its own schema, selected by the YAML file of the ``solver`` group through its
defaults list (``- base_<name>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# Keys of a solver config that the pipeline consumes itself; every other key is
# passed to ``Solver.solve`` as a keyword option.
SOLVER_COMMON_KEYS = ("name", "time_limit_s", "threads")


@dataclass
class SolverConf:
    name: str = MISSING
    time_limit_s: Optional[float] = None
    threads: int = 1


@dataclass
class BfsConf(SolverConf):
    name: str = "bfs"


@dataclass
class GreedyConf(SolverConf):
    name: str = "greedy"
    threads: int = 0  # 0 = one per usable core (the scale engine's partitions); never changes the schedule
    chunk_order: str = "random"
    link_tiebreak: str = "earliest_finish"
    restarts: int = 1
    duplicates: bool = False
    matching: str = "greedy"
    preempt: bool = False
    window: int = 0
    progress: Optional[bool] = None


@dataclass
class ExactConf(SolverConf):
    """Options shared by the exact backends on the discretized time-expanded network."""

    name: str = MISSING
    time_step_us: Optional[float] = None
    horizon_steps: Optional[int] = None
    warm_start: bool = True
    mip_gap: float = 0.0
    log: bool = False


@dataclass
class MilpConf(ExactConf):
    name: str = "milp"
    backend: str = "highs"


@dataclass
class CpSatConf(ExactConf):
    name: str = "cpsat"
    model: str = "time_indexed"
    num_workers: Optional[int] = None


@dataclass
class BaselineConf(SolverConf):
    name: str = MISSING


@dataclass
class RingConf(SolverConf):
    name: str = "ring"
    bidirectional: bool = True
    max_expansions: int = 200_000


@dataclass
class RhdConf(SolverConf):
    name: str = "rhd"
    phase_sync: bool = True


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
    subset: Optional[List[int]] = None
    subset_mode: str = "induced"


@dataclass
class CollectiveConf:
    kind: str = "all_gather"
    chunks_per_npu: int = 1
    buffer_mib: float = 1024.0


@dataclass
class RunConf:
    """Top-level run configuration (``conf/config.yaml`` extends it)."""

    solver: Any = MISSING
    topo: TopoConf = MISSING
    collective: CollectiveConf = MISSING
    seed: int = 0
    experiment: str = "default"
    # "none", "msccl", "json" or "chakra": also export the verified schedule (msccl writes RESULT_DIR/msccl/).
    export: str = "none"
    # "auto" writes schedule.csv up to schedule_csv_max_rows transfers; "always"/"never" force it.
    schedule_csv: str = "auto"
    schedule_csv_max_rows: int = 20_000_000
    # Save the topology as an edge list next to the results (for exports / replays) up to this many links.
    save_topology_max_links: int = 2_000_000


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=RunConf)
    cs.store(group="solver", name="base_bfs", node=BfsConf)
    cs.store(group="solver", name="base_greedy", node=GreedyConf)
    cs.store(group="solver", name="base_milp", node=MilpConf)
    cs.store(group="solver", name="base_cpsat", node=CpSatConf)
    cs.store(group="solver", name="base_baseline", node=BaselineConf)
    cs.store(group="solver", name="base_ring", node=RingConf)
    cs.store(group="solver", name="base_rhd", node=RhdConf)
