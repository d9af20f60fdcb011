"""Chakra execution traces for ASTRA-sim's custom-collective path.

ASTRA-sim runs a custom collective from one Chakra ET file per NPU,
``<prefix>.<rank>.et`` (system configuration key
``all-gather-implementation-custom`` / ``reduce-scatter-...`` /
``all-reduce-...`` / ``all-to-all-...`` set to ``[<prefix>]``). Each file is a
length-prefixed protobuf stream: one ``GlobalMetadata`` message, then ``Node``
messages in the layout of ASTRA-sim's MSCCL-IR converter (``collectiveapi``).
Every collective exports (which of them ASTRA-sim can run is
:mod:`tacos_bench.export.astra_sim`'s business):

* ``GlobalMetadata`` attributes: ``collective`` (the MSCCL ``coll`` name),
  ``collective_kind`` (tacos-bench's name), ``root`` (``-1`` for a collective
  without one), ``chunks_per_npu``, ``num_chunks``, and per chunk
  ``chunk_sources`` / ``chunk_destinations`` (``int64_list``: the NPU holding
  the chunk before, the one NPU that needs it after; ``-1`` = every NPU),
  besides ``num_npus``, ``chunk_bytes`` and ``topology``;

* every transfer ``u -> v`` is a ``COMM_SEND_NODE`` on ``u`` and a
  ``COMM_RECV_NODE`` on ``v`` with attributes ``comm_type``, ``comm_size``
  (bytes), ``comm_dst``/``comm_src`` and ``comm_tag``; the tag is the
  transfer's row in the canonical schedule order, unique in the collective, so
  a receive matches exactly one send;
* a reduction adds a ``COMP_NODE`` after its receive (``duration_micros`` =
  ``reduce_time_us``, default 0: ASTRA-sim then charges 1 ns);
* ``data_deps``: a send waits for the node that produced the value it forwards
  (the receive, or the reduction) and for the previous send on the same link,
  so the simulator replays the synthesized per-link order; a reduction waits
  for its receive and the previous partial sum.

The protobuf schema comes from the ``mlc-chakra`` PyPI package (MLCommons
Chakra); install it with ``pip install --no-deps mlc-chakra==1.0.0`` -- its
only runtime need for this module is ``protobuf`` (already pulled in by
OR-Tools); the package's other requirements serve its trace-linking tools.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..problem import Problem
from ..schedule import REDUCE, Schedule
from ..topology.model import FABRIC, POINT_TO_POINT, network_kind
from .common import ExportError, verified
from .fabric import npu_sends
from .msccl import COLL_NAMES

SCHEMA_TAG = "1.0.2-chakra.0.0.4"   # the schema string ASTRA-sim's collective converter writes


def _chakra():
    try:
        from chakra.schema.protobuf import et_def_pb2
        from chakra.src.third_party.utils.protolib import encodeMessage
    except ImportError as e:
        raise ExportError("the Chakra exporter needs the MLCommons Chakra schema: "
                          "pip install --no-deps mlc-chakra==1.0.0 (" + str(e) + ")") from None
    return et_def_pb2, encodeMessage


def build_chakra_nodes(problem: Problem, schedule: Schedule, *, reduce_time_us: int = 0, pin_scale: int = 0):
    """Per-rank lists of Chakra ``Node`` messages (the schedule is verified first).

    ``pin_scale > 0`` pins every send that starts after 0 to its start: the send also waits for a
    ``COMP_NODE`` of ``duration_micros = round(start_us * pin_scale)`` with no dependencies of its own, so
    it leaves no earlier than the schedule says, in a simulator running ``pin_scale`` times slower than our
    µs (``pin_scale = 1000``: whole trace µs are our ns); a reduction then lasts ``reduce_time_us *
    pin_scale`` trace µs, the same time in ours.
    """
    from ..verify import REL_TOL

    pb, _ = _chakra()
    verified(problem, schedule)
    for name, v in (("reduce_time_us", reduce_time_us), ("pin_scale", pin_scale)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ExportError(f"{name} must be a non-negative integer (Chakra stores whole µs), got {v!r}")
    n = problem.num_npus
    size = int(problem.chunk_bytes)
    sources = problem.sources.tolist()
    destinations = problem.destinations.tolist()
    network = network_kind(problem.topology, schedule)
    rows = len(schedule)
    if rows >= 2**31:
        raise ExportError(f"{rows} transfers do not fit Chakra's 32-bit comm_tag")
    # NPU-to-NPU sends: a point-to-point row, or a cut-through row, as it is; store-and-forward hops paired
    # into one send each
    x = npu_sends(problem, schedule, "Chakra")
    canon = np.empty(rows, np.int64)       # a row's index in the canonical order (its tag, as in the JSON)
    canon[_canonical_order(schedule)] = np.arange(rows)
    order_t = _canonical_order(x.schedule).tolist()
    sched = x.schedule.take(order_t)
    tags = [int(canon[x.hops[k][0]]) for k in order_t]
    hop_tags = [[int(canon[h]) for h in x.hops[k]] for k in order_t]
    routes, keys = x.routes, x.send_keys()
    routes = [routes[k] for k in order_t]
    link_key = [keys[k] for k in order_t]
    T = len(sched)
    chunk, src, dst, op = (sched.chunk.tolist(), sched.src.tolist(), sched.dst.tolist(), sched.op.tolist())
    pins = np.rint(sched.start_us * pin_scale).astype(np.int64).tolist()
    tol = REL_TOL * max(1.0, abs(sched.makespan_us))
    times = np.concatenate([sched.end_us - tol, sched.start_us])
    kinds = np.concatenate([np.zeros(T, np.int8), np.ones(T, np.int8)])
    ids = np.concatenate([np.arange(T), np.arange(T)])
    order = np.lexsort((ids, kinds, times)).tolist()
    kind = problem.kind

    nodes: list[list] = [[] for _ in range(n)]
    writer: dict[tuple[int, int], int] = {}       # (rank, chunk) -> node id holding the current value
    holds: set[tuple[int, int]] = set()       # (rank, chunk): a receive there reduces instead of overwriting
    demand = problem.collective.demand
    for c, s0 in enumerate(sources):
        if s0 >= 0:
            holds.add((s0, c))
        else:   # every NPU, or a table's subset of contributors
            holds.update((int(v), c) for v in (demand.sources_of(c) if demand is not None else range(n)))
    last_send_on_link: dict[tuple, int] = {}

    def new_node(rank: int, name: str, ntype: int):
        node = pb.Node()
        node.id = len(nodes[rank])
        node.name = name
        node.type = ntype
        nodes[rank].append(node)
        return node

    def comm_attrs(node, peer_key: str, peer: int, tag: int, ctype: int):
        node.attr.append(pb.AttributeProto(name="comm_type", int64_val=ctype))
        node.attr.append(pb.AttributeProto(name="comm_size", int64_val=size))
        node.attr.append(pb.AttributeProto(name=peer_key, int32_val=peer))
        node.attr.append(pb.AttributeProto(name="comm_tag", int32_val=tag))

    def route_attrs(node, t: int):
        if routes[t]:
            node.attr.append(pb.AttributeProto(name="route", string_val=routes[t]))
            if len(hop_tags[t]) > 1:
                node.attr.append(pb.AttributeProto(name="hop_rows", int64_list=pb.Int64List(values=hop_tags[t])))

    for e in order:
        t = ids[e]
        c, u, v, tag = chunk[t], src[t], dst[t], tags[t]
        if kinds[e]:
            pin = None
            if pins[t] > 0:
                pin = new_node(u, f"wait_t{tag}", pb.COMP_NODE)
                pin.duration_micros = pins[t]
            node = new_node(u, f"send_c{c}_to{v}_t{tag}", pb.COMM_SEND_NODE)
            comm_attrs(node, "comm_dst", v, tag, pb.COMM_SEND_NODE)
            route_attrs(node, t)
            key = link_key[t]
            deps = [writer[(u, c)]] if (u, c) in writer else []
            if pin is not None:
                deps.append(pin.id)
            if key is not None:
                if key in last_send_on_link:
                    deps.append(last_send_on_link[key])
                last_send_on_link[key] = node.id
            node.data_deps.extend(sorted(set(deps)))
        else:
            node = new_node(v, f"recv_c{c}_from{u}_t{tag}", pb.COMM_RECV_NODE)
            comm_attrs(node, "comm_src", u, tag, pb.COMM_RECV_NODE)
            route_attrs(node, t)
            if op[t] == REDUCE and (v, c) in holds:
                comp = new_node(v, f"reduce_c{c}_t{tag}", pb.COMP_NODE)
                comp.duration_micros = int(reduce_time_us) * max(int(pin_scale), 1)
                deps = [node.id] + ([writer[(v, c)]] if (v, c) in writer else [])
                comp.data_deps.extend(sorted(deps))
                writer[(v, c)] = comp.id
            else:
                writer[(v, c)] = node.id
            holds.add((v, c))
    coll = problem.collective
    meta = pb.GlobalMetadata(version=SCHEMA_TAG, attr=[
        pb.AttributeProto(name="schema", string_val=SCHEMA_TAG),
        pb.AttributeProto(name="collective", string_val=COLL_NAMES.get(kind, kind)),
        pb.AttributeProto(name="generator", string_val="tacos-bench"),
        pb.AttributeProto(name="num_npus", int64_val=n),
        pb.AttributeProto(name="chunk_bytes", int64_val=size),
        pb.AttributeProto(name="topology", string_val=problem.topology.name),
        # Added after the first six (readers look attributes up by name): enough to place every chunk.
        pb.AttributeProto(name="collective_kind", string_val=kind),
        pb.AttributeProto(name="root", int64_val=coll.root if coll.rooted else -1),
        pb.AttributeProto(name="chunks_per_npu", int64_val=coll.chunks_per_npu),
        pb.AttributeProto(name="num_chunks", int64_val=problem.num_chunks),
        pb.AttributeProto(name="chunk_sources", int64_list=pb.Int64List(values=sources)),
        pb.AttributeProto(name="chunk_destinations", int64_list=pb.Int64List(values=destinations)),
    ])
    if demand is not None:   # a chunk table: each chunk's sets (CSR; an empty set is every NPU) and op
        for name, arr in (("chunk_source_ptr", demand.src_ptr), ("chunk_source_ids", demand.src_ids),
                          ("chunk_destination_ptr", demand.dst_ptr), ("chunk_destination_ids", demand.dst_ids),
                          ("chunk_ops", demand.op)):
            meta.attr.append(pb.AttributeProto(name=name, int64_list=pb.Int64List(values=np.asarray(arr).tolist())))
    meta.attr.extend(_NETWORK_ATTRS[network](pb, problem.topology, rows))
    return meta, nodes


def _fabric_attrs(pb, topo, rows: int) -> list:
    """Switched fabrics (docs/fabrics.md) and routed schedules: the switches, and the rows the tags number."""
    n = topo.num_npus
    return [pb.AttributeProto(name="num_switches", int64_val=topo.num_switches),
            pb.AttributeProto(name="switches", string_list=pb.StringList(
                values=[f"{n + j} {sw.spec()}" for j, sw in enumerate(topo.switches)])),
            pb.AttributeProto(name="num_rows", int64_val=rows)]


# the GlobalMetadata attributes each network kind adds (tacos_bench.topology.network_kind)
_NETWORK_ATTRS = {POINT_TO_POINT: lambda pb, topo, rows: [], FABRIC: _fabric_attrs}


def _canonical_order(schedule: Schedule) -> np.ndarray:
    """Row indices in the canonical order of :meth:`Schedule.sorted`."""
    return np.lexsort((schedule.chunk, schedule.dst, schedule.src, schedule.end_us, schedule.start_us))


def export_chakra(problem: Problem, schedule: Schedule, prefix: str | os.PathLike, *,
                  reduce_time_us: int = 0, pin_scale: int = 0, idle_node: bool = False) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` for every NPU; returns the paths. ``idle_node``: an NPU that neither sends
    nor receives (a chunk table may leave some out) gets one ``COMP_NODE`` of duration 0, since ASTRA-sim cannot
    open a trace without nodes ("Cannot access et file").

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
    >>> d = tempfile.mkdtemp()
    >>> [x.name for x in export_chakra(p, s, pathlib.Path(d) / "ag")]
    ['ag.0.et', 'ag.1.et']
    """
    _, encode = _chakra()
    meta, nodes = build_chakra_nodes(problem, schedule, reduce_time_us=reduce_time_us, pin_scale=pin_scale)
    if idle_node:
        pb, _ = _chakra()
        for rank_nodes in nodes:
            if not rank_nodes:
                rank_nodes.append(pb.Node(id=0, name="idle", type=pb.COMP_NODE, duration_micros=0))
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, rank_nodes in enumerate(nodes):
        path = prefix.parent / f"{prefix.name}.{rank}.et"
        with open(path, "wb") as fh:
            encode(fh, meta)
            for node in rank_nodes:
                encode(fh, node)
        paths.append(path)
    return paths
