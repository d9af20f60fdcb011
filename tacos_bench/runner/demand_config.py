"""The collectives given by a chunk table, from a ``collective`` config mapping (``conf/collective/*.yaml``).

``collective=all_to_allv collective.demand=PATH``
    an N x N byte matrix (CSV without header, or ``.npy``; row = sender), ``collective.chunk_bytes`` (default:
    the largest pair's bytes / ``chunks_per_npu``);
``collective=moe_dispatch`` / ``collective=moe_combine``
    one mixture-of-experts layer (:mod:`tacos_bench.moe`): ``tokens_per_npu``, ``hidden``, ``dtype``,
    ``experts``, ``top_k``, ``gini``, drawn from the run's ``seed``; ``chunk_bytes`` (default one token);
``collective=custom collective.chunks=PATH collective.chunk_bytes=B``
    a table in the ``chunks.csv`` format (:func:`tacos_bench.demand.read_chunks_csv`);
``collective=concurrent collective.parts=[{kind: all_reduce, npus: [...], buffer_mib: M}, ...]``
    several collectives on one network, ``collective.mode=joint|sequential|priority`` (:mod:`tacos_bench.concurrent`).

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> c = demand_collective({"kind": "moe_dispatch", "tokens_per_npu": 8, "hidden": 4, "experts": 4, "top_k": 2},
...                       ring(4), seed=0)
>>> c.kind, c.demand.chunk_bytes, 0 <= c.demand.meta["demand_gini"] < 1
('moe_dispatch', 8, True)
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

from ..collective import ALL_TO_ALLV, CONCURRENT, CUSTOM, MOE_COMBINE, MOE_DISPATCH, Collective, canonical_kind
from ..errors import ConfigError

# the settings each chunk-table collective reads (besides kind); the others of CollectiveConf must stay unset
SETTINGS = {
    ALL_TO_ALLV: ("demand", "chunk_bytes", "chunks_per_npu"),
    MOE_DISPATCH: ("tokens_per_npu", "hidden", "dtype", "experts", "top_k", "gini", "chunk_bytes"),
    MOE_COMBINE: ("tokens_per_npu", "hidden", "dtype", "experts", "top_k", "gini", "chunk_bytes"),
    CUSTOM: ("chunks", "chunk_bytes"),
    CONCURRENT: ("parts", "mode", "chunk_bytes"),
}
MOE_DEFAULTS = {"tokens_per_npu": 4096, "hidden": 7168, "dtype": "bf16", "experts": 64, "top_k": 8, "gini": 0.2}


def demand_collective(coll_cfg: Mapping[str, Any], topology, seed: int = 0) -> Collective:
    """The :class:`~tacos_bench.collective.Collective` of a chunk-table kind on ``topology`` (module docstring).

    Raises
    ------
    ConfigError, CollectiveError
        One line naming the setting or the file line at fault.
    """
    from .. import demand as D

    kind = canonical_kind(coll_cfg.get("kind"))
    n = topology.num_npus
    if kind == ALL_TO_ALLV:
        path = _path(coll_cfg, "demand", "an N x N byte matrix (CSV without header, or .npy)")
        M = D.read_matrix(path)
        if M.shape[0] != n:
            raise ConfigError(f"collective.demand {path.name} is {M.shape[0]} x {M.shape[0]}; topology "
                              f"{topology.name!r} has {n} NPUs")
        table = D.all_to_allv(M, chunk_bytes=_int(coll_cfg, "chunk_bytes"),
                              chunks_per_npu=_int(coll_cfg, "chunks_per_npu") or 1)
    elif kind in (MOE_DISPATCH, MOE_COMBINE):
        from ..moe import combine_demand, dispatch_demand, moe_routing

        kw = {k: coll_cfg.get(k) if coll_cfg.get(k) is not None else v for k, v in MOE_DEFAULTS.items()}
        routing = moe_routing(n, seed=seed, **kw)
        make = dispatch_demand if kind == MOE_DISPATCH else combine_demand
        table = make(routing, chunk_bytes=_int(coll_cfg, "chunk_bytes"))
    elif kind == CUSTOM:
        path = _path(coll_cfg, "chunks", "a chunk table in the chunks.csv format")
        cb = _int(coll_cfg, "chunk_bytes")
        if cb is None:
            raise ConfigError("collective=custom needs collective.chunk_bytes (the size of every chunk, bytes)")
        table = D.read_chunks_csv(path, n, cb)
    elif kind == CONCURRENT:
        from ..concurrent import concurrent_collective

        parts = coll_cfg.get("parts")
        parts = [dict(p) if hasattr(p, "items") else p for p in (parts or [])]
        return concurrent_collective(parts, topology, mode=str(coll_cfg.get("mode") or "joint"),
                                     chunk_bytes=_int(coll_cfg, "chunk_bytes"))
    else:
        raise ConfigError(f"collective {kind} is not given by a chunk table")
    return Collective(kind, demand=table)


def unused_settings(coll_cfg: Mapping[str, Any], kind: str) -> list[str]:
    """Chunk-table settings given to a collective that does not read them (named ones read none)."""
    from .conf import CollectiveConf

    defaults = {f.name: f.default for f in fields(CollectiveConf)}
    own = set(SETTINGS.get(kind, ()))
    table_keys = {k for keys in SETTINGS.values() for k in keys} - {"chunks_per_npu"}
    return sorted(k for k in table_keys - own if coll_cfg.get(k) not in (None, defaults.get(k)))


def _path(cfg: Mapping[str, Any], key: str, what: str) -> Path:
    v = cfg.get(key)
    if v in (None, ""):
        raise ConfigError(f"collective={cfg.get('kind')} needs collective.{key}=PATH ({what})")
    return Path(str(v)).expanduser()


def _int(cfg: Mapping[str, Any], key: str) -> int | None:
    v = cfg.get(key)
    if v is None:
        return None
    if isinstance(v, bool):
        raise ConfigError(f"collective.{key} must be a positive integer, got {v!r}")
    try:
        i = int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"collective.{key} must be a positive integer, got {v!r}") from None
    if i != v and not (isinstance(v, str) and str(i) == v.strip()):
        raise ConfigError(f"collective.{key} must be a positive integer, got {v!r}")
    if i < 1:
        raise ConfigError(f"collective.{key} must be a positive integer, got {v!r}")
    return i
