"""Versioned JSON form of a verified schedule and the problem it solves.

The document is self-contained: the topology (every link with its bandwidth,
latency and per-chunk time), the collective (kind, root, and each chunk's
source and destination NPU), the transfers and the verified collective
time. :func:`load_json` reads it back into ``(problem, schedule)``.
The schema is documented in ``docs/export.md``; ``schema_version`` changes
whenever a field changes meaning or disappears (adding fields does not).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..collective import Collective, reloaded_kind
from ..errors import InputFileError
from ..inputs import read_input_text
from ..problem import Problem
from ..schedule import COLUMNS, OPS, Schedule
from ..topology import Switch, Topology
from ..topology.model import CUT_THROUGH, FABRIC, POINT_TO_POINT, network_kind
from .common import ExportError, verified

SCHEMA = "tacos-bench/schedule"
SCHEMA_VERSION = 1

# Run-record fields worth carrying along (the rest describe the machine, not the algorithm).
_RECORD_KEYS = ("solver", "seed", "status", "valid", "collective_time_us", "lower_bound_us", "objective_us",
                "best_bound_us", "synthesis_time_s", "experiment", "run_id", "git_commit", "timestamp")


def chunk_table(demand) -> list[dict]:
    """A chunk table (:mod:`tacos_bench.demand`) as JSON rows: each chunk's ``sources`` and ``destinations``
    (NPU id lists; ``null``: every NPU) and ``op`` (``copy`` or ``reduce``), in chunk order (the schedule's ids)."""
    def sets(ptr, ids):
        return [None if a == b else ids[a:b] for a, b in zip(ptr[:-1], ptr[1:])]

    src = sets(demand.src_ptr.tolist(), demand.src_ids.tolist())
    dst = sets(demand.dst_ptr.tolist(), demand.dst_ids.tolist())
    ops = ("copy", "reduce")
    return [{"sources": s, "destinations": d, "op": ops[o]} for s, d, o in zip(src, dst, demand.op.tolist())]


def _table_of(c: Mapping, num_npus: int):
    """The chunk table of a document's ``collective.chunks`` rows (:func:`chunk_table`)."""
    from ..demand import table

    rows = c["chunks"]
    every = []
    return table(num_npus, int(c["chunk_bytes"]), [r["sources"] or every for r in rows],
                 [r["destinations"] or every for r in rows], [r["op"] for r in rows],
                 padding_bytes=int(c.get("padding_bytes", 0)))


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def schedule_to_dict(problem: Problem, schedule: Schedule, *, record: Mapping[str, Any] | None = None) -> dict:
    """The JSON document as a dict (the schedule is verified first).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> d = schedule_to_dict(p, Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")]))
    >>> d["schema_version"], len(d["transfers"]), d["transfers"][0]["op"]
    (1, 2, 'copy')
    >>> d["collective"]["root"], d["collective"]["sources"], d["collective"]["destinations"]
    (None, [0, 1], [-1, -1])
    """
    from .. import __version__

    ver = verified(problem, schedule)
    topo = problem.topology
    coll = problem.collective
    sched = schedule.sorted()
    link = topo.link_ids(sched.src, sched.dst).tolist()
    lt = problem.link_time_us.tolist()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "generator": {"name": "tacos-bench", "version": __version__},
        "units": {"time": "us", "bandwidth": "GiB/s", "size": "bytes"},
        "collective": {
            "kind": coll.kind,
            "chunks_per_npu": coll.chunks_per_npu,
            "buffer_mib": coll.buffer_mib,
            "num_chunks": problem.num_chunks,
            "chunk_bytes": problem.chunk_bytes,
            # Added in schema 1 without a version change (readers ignore unknown fields): what a consumer
            # needs to place every chunk without re-deriving tacos-bench's numbering.
            "root": coll.root if coll.rooted else None,
            "overlap": coll.overlap,
            "sources": problem.sources.tolist(),            # NPU holding chunk c before; -1: every NPU
            "destinations": problem.destinations.tolist(),  # the one NPU that needs it after; -1: every NPU
        },
        "topology": {
            "name": topo.name,
            "num_npus": topo.num_npus,
            "links": [{"id": i, "src": s, "dst": d, "bw_GiBps": b, "lat_us": la, "chunk_time_us": lt[i]}
                      for i, (s, d, b, la) in enumerate(topo.edges())],
        },
        "transfers": [
            {"chunk": c, "src": s, "dst": d, "link": lk, "start_us": t0, "end_us": t1, "op": OPS[o]}
            for c, s, d, lk, t0, t1, o in zip(sched.chunk.tolist(), sched.src.tolist(), sched.dst.tolist(), link,
                                              sched.start_us.tolist(), sched.end_us.tolist(), sched.op.tolist())
        ],
        "summary": {"num_transfers": len(sched), "collective_time_us": ver.collective_time_us, "verified": True},
    }
    if coll.demand is not None:
        doc["collective"]["chunks"] = chunk_table(coll.demand)
        doc["collective"]["padding_bytes"] = int(coll.demand.padding_bytes)
    _NETWORK_FIELDS[network_kind(topo, schedule)](doc, topo, sched)
    if record:
        doc["run"] = {k: _clean(record[k]) for k in _RECORD_KEYS if k in record}
    return doc


def _fabric_fields(doc: dict, topo: Topology, sched: Schedule) -> None:
    """Switched fabrics (docs/fabrics.md), and routed schedules: the switches, and every transfer's route."""
    doc["topology"]["num_switches"] = topo.num_switches
    doc["topology"]["switches"] = [{"id": topo.num_npus + j, "mode": sw.mode, "multicast": sw.multicast,
                                    "reduce": sw.reduce} for j, sw in enumerate(topo.switches)]
    routes = sched.route.tolist() if sched.route is not None else [""] * len(sched)
    for tr, r in zip(doc["transfers"], routes):
        tr["route"] = r
        nodes = [int(x) for x in r.split(">")] if r else []
        if len(nodes) > 2:       # several links: no single one; route_links lists them in order
            tr["link"] = None
            tr["route_links"] = topo.link_ids(nodes[:-1], nodes[1:]).tolist()
        elif nodes:
            tr["link"] = int(topo.link_ids(nodes[0], nodes[1]))


# what each network kind adds to the document (tacos_bench.topology.network_kind of the problem and schedule)
_NETWORK_FIELDS = {POINT_TO_POINT: lambda doc, topo, sched: None, FABRIC: _fabric_fields}


def export_json(problem: Problem, schedule: Schedule, *, record: Mapping[str, Any] | None = None,
                indent: int | None = 1) -> str:
    """JSON text of :func:`schedule_to_dict` (floats written with round-trip precision)."""
    return json.dumps(schedule_to_dict(problem, schedule, record=record), indent=indent, allow_nan=False) + "\n"


def load_json(source: str | os.PathLike | Mapping) -> tuple[Problem, Schedule]:
    """Read a document written by :func:`export_json` back into ``(problem, schedule)``.

    ``source`` is a path, JSON text, or the already parsed dict.
    """
    if isinstance(source, Mapping):
        doc = source
        where = "document"
    else:
        text = str(source)
        if isinstance(source, os.PathLike) or not text.lstrip().startswith("{"):
            path = Path(source)
            try:
                text, where = read_input_text(path, "JSON export"), str(path)
            except InputFileError as e:
                raise ExportError(str(e)) from None
        else:
            where = "document"
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ExportError(f"{where}: not valid JSON: {e}") from None
        except RecursionError:
            raise ExportError(f"{where}: not valid JSON: nested too deeply") from None
        if not isinstance(doc, Mapping):
            raise ExportError(f"{where}: not a JSON export: the top level is a {type(doc).__name__}, not an object")
    if doc.get("schema") != SCHEMA:
        raise ExportError(f"{where}: schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ExportError(f"{where}: schema_version {doc.get('schema_version')!r} is not supported "
                          f"(this tacos-bench reads {SCHEMA_VERSION})")
    try:
        t = doc["topology"]
        n_npus = int(t["num_npus"])
        listed = sorted(t.get("switches", []), key=lambda sw: int(sw["id"]))
        if [int(sw["id"]) for sw in listed] != list(range(n_npus, n_npus + int(t.get("num_switches", len(listed))))):
            raise ValueError(f"topology.switches must list the ids {n_npus}.. of its num_switches switches once each")
        switches = [Switch(sw.get("mode", CUT_THROUGH), bool(sw.get("multicast", False)), bool(sw.get("reduce", False)))
                    for sw in listed]
        topo = Topology.from_edges(n_npus,
                                   [(lk["src"], lk["dst"], lk["bw_GiBps"], lk["lat_us"]) for lk in t["links"]],
                                   name=str(t.get("name", "custom")), switches=switches)
        c = doc["collective"]
        extra = {}
        if c.get("root") is not None:       # documents written before roots existed carry none
            extra["root"] = int(c["root"])
        if "overlap" in c:
            extra["overlap"] = bool(c["overlap"])
        if "chunks" in c:   # a chunk table: its rows are the demand
            problem = Problem(topo, Collective(reloaded_kind(c["kind"]), demand=_table_of(c, n_npus)))
        else:
            problem = Problem(topo, Collective(c["kind"], int(c["chunks_per_npu"]), float(c["buffer_mib"]), **extra))
        rows = doc["transfers"]
        cols = {k: [r[k] for r in rows] for k in COLUMNS}
        route = [str(r.get("route") or "") for r in rows] if any("route" in r for r in rows) else None
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(f"{where}: malformed document ({type(e).__name__}: {e})") from None
    try:
        schedule = Schedule(cols["chunk"], cols["src"], cols["dst"], cols["start_us"], cols["end_us"],
                            [OPS.index(o) if o in OPS else -1 for o in cols["op"]], route=route)
    except (TypeError, ValueError) as e:
        raise ExportError(f"{where}: malformed transfers ({e})") from None
    if problem.chunk_bytes != int(c.get("chunk_bytes", problem.chunk_bytes)):
        raise ExportError(f"{where}: chunk_bytes {c['chunk_bytes']} does not match the collective "
                          f"({problem.chunk_bytes})")
    for field, have in (("sources", problem.sources), ("destinations", problem.destinations)):
        if field in c and list(c[field]) != have.tolist():
            raise ExportError(f"{where}: collective.{field} does not match {problem.collective.label()}")
    return problem, schedule
