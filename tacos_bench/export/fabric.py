"""What the exporters share on switched fabrics (docs/fabrics.md): the rows a format cannot express, and the
store-and-forward hops paired into NPU-to-NPU transfers.

A runtime or a trace (MSCCL, Chakra, ASTRA-sim) knows ranks, i.e. NPUs, and sends between them; a switch is
no rank. So

* a row with a ``route`` through ``cut_through`` switches, between two NPUs, is one NPU-to-NPU send (the
  switches it crosses are the network's business);
* rows that share a link -- a **multicast group** (one copy duplicated in a switch) or a **reduction group**
  (contributions combined in a switch) -- are in-switch operations: no NPU-to-NPU send expresses them
  (:func:`in_switch_group`, :func:`refuse_in_switch`);
* a row whose ``src`` or ``dst`` is a ``store_forward`` switch is one hop of a transfer. Through a switch
  that forwards first in, first out (a copy through a switch without ``multicast``, a reduce packet through
  one without ``reduce``) the hops pair up: the k-th copy of chunk ``c`` leaving the switch forwards the
  k-th copy of ``c`` that arrived (ties in row order, as in the verifier's rule 5), so a chain
  ``u -> s -> ... -> v`` is one NPU-to-NPU transfer (:func:`npu_transfers`). A switch that sends from its own
  state (``multicast`` for copies, ``reduce`` for reductions) is an in-switch operation again.

On a point-to-point topology every row is one NPU-to-NPU send (:func:`direct_sends`); :func:`npu_sends` picks
the form of the problem's network kind from :data:`NPU_SENDS`, so an exporter has one code path for both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..problem import Problem
from ..schedule import COPY, OPS, REDUCE, Schedule, row_text
from ..topology.model import CUT_THROUGH, FABRIC, POINT_TO_POINT, network_kind
from .common import ExportError


def has_routes(schedule: Schedule) -> bool:
    """True when some row of ``schedule`` names a route."""
    return schedule.route is not None and bool(np.any(schedule.route != ""))


def path_of(schedule: Schedule, i: int) -> list[int]:
    """The nodes row ``i`` crosses: its route, or ``[src, dst]``."""
    r = "" if schedule.route is None else schedule.route[int(i)]
    if r:
        return [int(x) for x in r.split(">")]
    return [int(schedule.src[i]), int(schedule.dst[i])]


def _switch_text(topology, v: int) -> str:
    sw = topology.switch(v)
    flags = [w for w, on in (("multicast", sw.multicast), ("reduce", sw.reduce)) if on]
    return f"{sw.mode} switch {v}" + (f" ({', '.join(flags)})" if flags else "")


def in_switch_group(problem: Problem, schedule: Schedule):
    """The first two rows (in row order) that share a link, or None.

    In a verified schedule rows share a link only inside a multicast or a reduction group (docs/fabrics.md,
    rule 3), with bit-identical ``start`` and ``end``. Returns ``(a, b, what, hub)``: the rows, ``"multicast
    group"`` or ``"reduction group"``, and the node where their routes branch (copies) or merge (reductions).
    """
    T = len(schedule)
    if T < 2 or not has_routes(schedule):
        return None
    topo = problem.topology
    paths = [path_of(schedule, i) for i in range(T)]
    lens = np.array([len(p) - 1 for p in paths], np.int64)
    row = np.repeat(np.arange(T, dtype=np.int64), lens)
    tails = np.fromiter((x for p in paths for x in p[:-1]), np.int64, int(lens.sum()))
    heads = np.fromiter((x for p in paths for x in p[1:]), np.int64, int(lens.sum()))
    link = topo.link_ids(tails, heads)
    key = np.stack([link, schedule.start_us[row].view(np.int64), schedule.end_us[row].view(np.int64)], 1)
    _, inv, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    shared = np.flatnonzero(counts[inv] > 1)
    if not shared.size:
        return None
    mates = np.sort(row[inv == inv[shared[np.argmin(row[shared])]]])
    a, b = int(mates[0]), int(mates[1])
    pa, pb = paths[a], paths[b]
    if schedule.op[a] == REDUCE:
        k = 1
        while k < min(len(pa), len(pb)) and pa[-1 - k] == pb[-1 - k]:
            k += 1
        return a, b, "reduction group", pa[-k]
    k = 0
    while k + 1 < min(len(pa), len(pb)) and pa[k + 1] == pb[k + 1]:
        k += 1
    return a, b, "multicast group", pa[k]


def refuse_in_switch(problem: Problem, schedule: Schedule, fmt: str) -> None:
    """Raise a one-line :class:`ExportError` when rows share a link (an in-switch multicast or reduction)."""
    found = in_switch_group(problem, schedule)
    if found is None:
        return
    a, b, what, hub = found
    topo = problem.topology
    hub_text = _switch_text(topo, hub) if topo.is_switch(hub) else f"node {hub}"
    verb = "duplicates one copy" if what == "multicast group" else "combines the contributions"
    raise ExportError(
        f"cannot export to {fmt}: {row_text(schedule, a)} and {row_text(schedule, b)} are one {what} "
        f"({hub_text} {verb}), an in-switch operation; {fmt} has only NPU-to-NPU sends")


def switch_endpoint_row(problem: Problem, schedule: Schedule) -> int | None:
    """The first row whose ``src`` or ``dst`` is a switch (a store-and-forward hop), or None."""
    n = problem.num_npus
    bad = np.flatnonzero((schedule.src >= n) | (schedule.dst >= n))
    return int(bad[0]) if bad.size else None


@dataclass(frozen=True)
class NpuTransfers:
    """A fabric schedule as NPU-to-NPU transfers (:func:`npu_transfers`).

    ``schedule``: one row per transfer, NPUs only, ``start_us`` of its first hop, ``end_us`` of its last,
    ``route`` the whole path when it crosses a switch (``"0>8>3"``; ``""``: one link). ``hops[k]``: the rows of
    the original schedule (given order) that make transfer ``k``, first hop first; ``paths[k]``: the nodes of
    each of them. ``dropped``: rows into a store-and-forward switch that never leave it (they reach no NPU).
    Transfers are in the order of their first hop in the original schedule.
    """

    schedule: Schedule
    hops: list
    paths: list
    dropped: int

    @property
    def routes(self) -> list:
        """Per transfer, its whole path when it crosses a switch (``"0>8>3"``), else ``""``."""
        s = self.schedule
        return s.route.tolist() if s.route is not None else [""] * len(s)

    @property
    def num_links(self) -> np.ndarray:
        """Links each transfer crosses (ASTRA-sim truncates each hop to whole ns)."""
        return np.array([sum(len(p) - 1 for p in h) for h in self.paths], np.int64)

    def send_keys(self) -> list:
        """Per transfer, the link whose previous send a trace makes it wait for, or None.

        A transfer that holds its whole path until it lands (one link, or one row through cut-through
        switches) waits for the previous send on its first link, ``(src, next node)``, as on a point-to-point
        topology: in a trace a send completes when it lands, which is then exactly when the link is free. A
        store-and-forward transfer frees its first link after the first hop, which no trace node marks, so
        it waits for no earlier send (None): only for its data.
        """
        s = self.schedule
        return [None if len(h) > 1 else (u, int(r.split(">")[1]) if r else v)
                for u, v, r, h in zip(s.src.tolist(), s.dst.tolist(), self.routes, self.hops)]

    @property
    def paired(self) -> bool:
        """True when some transfer is made of several rows (store-and-forward hops)."""
        return any(len(h) > 1 for h in self.hops)


def npu_transfers(problem: Problem, schedule: Schedule, fmt: str) -> NpuTransfers:
    """Pair the store-and-forward hops of a (verified) fabric schedule into NPU-to-NPU transfers.

    Raises a one-line :class:`ExportError` for an in-switch operation: rows sharing a link
    (:func:`refuse_in_switch`), or a ``store_forward`` switch that sends from its own state (``multicast`` for
    copies, ``reduce`` for reductions) more than it forwards: more copies of a chunk than arrived, or a
    reduction carrying more than one incoming packet. A relay (both flags) that receives a chunk on both streams
    is refused too.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology import Switch, Topology
    >>> e = [(i, 2, 50.0, 0.5) for i in range(2)] + [(2, i, 50.0, 0.5) for i in range(2)]
    >>> p = Problem(Topology.from_edges(2, e, switches=[Switch("store_forward")]), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 2, 0, t, "copy"), (1, 1, 2, 0, t, "copy"),
    ...                         (0, 2, 1, t, 2 * t, "copy"), (1, 2, 0, t, 2 * t, "copy")])
    >>> x = npu_transfers(p, s, "chakra")
    >>> x.schedule.src.tolist(), x.schedule.dst.tolist(), x.schedule.route.tolist(), x.hops
    ([0, 1], [1, 0], ['0>2>1', '1>2>0'], [[0, 2], [1, 3]])
    """
    topo = problem.topology
    n = problem.num_npus
    refuse_in_switch(problem, schedule, fmt)
    T = len(schedule)
    chunk, src, dst, op = (schedule.chunk.tolist(), schedule.src.tolist(), schedule.dst.tolist(),
                           schedule.op.tolist())
    start, end = schedule.start_us.tolist(), schedule.end_us.tolist()
    from ..verify import REL_TOL

    tol = REL_TOL * max(1.0, abs(schedule.makespan_us))
    for i in range(T):
        if src[i] >= n and topo.switch(src[i]).mode == CUT_THROUGH:   # the verifier rejects this
            raise ExportError(f"cannot export to {fmt}: {row_text(schedule, i)} starts at cut_through switch "
                              f"{src[i]}")
    # pairing per (switch, chunk, op): incoming by (end, row), outgoing by (start, row)
    incoming: dict[tuple, list] = {}
    outgoing: dict[tuple, list] = {}
    for i in range(T):
        if dst[i] >= n:
            incoming.setdefault((dst[i], chunk[i], op[i]), []).append(i)
        if src[i] >= n:
            outgoing.setdefault((src[i], chunk[i], op[i]), []).append(i)
    nxt = [-1] * T
    for key, outs in outgoing.items():
        s, c, o = key
        sw = topo.switch(s)
        ins = sorted(incoming.get(key, []), key=lambda i: (end[i], i))
        outs = sorted(outs, key=lambda i: (start[i], i))
        from_state = sw.multicast if o == COPY else sw.reduce
        # A switch that forwards first in, first out pairs the k-th packet out with the k-th in (rule 5). One
        # that sends from its state (multicast for copies, reduce for reductions) is forwarding just the same
        # when each copy out has its own earlier copy in, or its one reduction out carries the one packet in;
        # anything more duplicates or combines in the switch.
        bad = next((b for k, b in enumerate(outs) if k >= len(ins) or end[ins[k]] > start[b] + tol), None)
        if from_state and bad is None and o == REDUCE and len(outs) > 0:
            later = [i for i in ins if end[i] <= start[outs[-1]] + tol]
            bad = outs[0] if len(outs) > 1 or len(later) > 1 else None
        if from_state and bad is None and sw.multicast and sw.reduce and (s, c, 1 - o) in incoming:
            bad = outs[0]     # a relay keeps one state per chunk: a packet out may mix both streams
        if bad is not None:
            if not from_state:
                raise ExportError(f"cannot export to {fmt}: {row_text(schedule, bad)} leaves switch {s} with no "
                                  f"packet of chunk {c} to forward (is the schedule verified?)")
            what = ("duplicates a copy (multicast)" if o == COPY else "combines contributions (in-switch reduction)")
            raise ExportError(
                f"cannot export to {fmt}: {row_text(schedule, bad)} is sent by {_switch_text(topo, s)} from its "
                f"state and {what}, an in-switch operation; {fmt} has only NPU-to-NPU sends")
        for a, b in zip(ins, outs):
            nxt[a] = b
    rows, hops, paths = [], [], []
    dropped = 0
    for i in range(T):
        if src[i] >= n:
            continue
        chain = [i]
        while dst[chain[-1]] >= n and nxt[chain[-1]] >= 0:
            chain.append(nxt[chain[-1]])
        last = chain[-1]
        if dst[last] >= n:
            dropped += len(chain)
            continue
        hop_paths = [path_of(schedule, h) for h in chain]
        nodes = hop_paths[0] + [x for p in hop_paths[1:] for x in p[1:]]
        route = ">".join(map(str, nodes)) if len(nodes) > 2 or (schedule.route is not None and schedule.route[i]) \
            else ""
        rows.append((chunk[i], src[i], dst[last], start[i], end[last], OPS[op[i]], route))
        hops.append(chain)
        paths.append(hop_paths)
    out = Schedule.from_rows(rows) if rows else Schedule(*([np.zeros(0)] * 6), route=np.zeros(0, object))
    return NpuTransfers(out, hops, paths, dropped)


def refuse_switch_endpoints(problem: Problem, schedule: Schedule, fmt: str, how: str = "") -> None:
    """Raise a one-line :class:`ExportError` when a row starts or ends at a switch (a store-and-forward hop)."""
    i = switch_endpoint_row(problem, schedule)
    if i is None:
        return
    topo = problem.topology
    s = int(schedule.src[i]) if schedule.src[i] >= problem.num_npus else int(schedule.dst[i])
    raise ExportError(
        f"cannot export to {fmt}: {row_text(schedule, i)} is a store-and-forward hop ({_switch_text(topo, s)} is "
        f"its {'src' if s == schedule.src[i] else 'dst'}); {fmt} has only NPU-to-NPU sends{how}")


def direct_sends(problem: Problem, schedule: Schedule, fmt: str) -> NpuTransfers:
    """A point-to-point schedule as NPU-to-NPU transfers: every row is one, over its link.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> x = direct_sends(p, Schedule.from_rows([(0, 0, 1, 0.0, 1.0, "copy"), (1, 1, 0, 0.0, 1.0, "copy")]), "json")
    >>> x.hops, x.send_keys()
    ([[0], [1]], [(0, 1), (1, 0)])
    """
    src, dst = schedule.src.tolist(), schedule.dst.tolist()
    return NpuTransfers(schedule, [[i] for i in range(len(schedule))], [[[u, v]] for u, v in zip(src, dst)], 0)


# the NPU-to-NPU sends of each network kind (tacos_bench.topology.network_kind of the problem and the schedule)
NPU_SENDS = {POINT_TO_POINT: direct_sends, FABRIC: npu_transfers}


def npu_sends(problem: Problem, schedule: Schedule, fmt: str) -> NpuTransfers:
    """The NPU-to-NPU sends of a verified schedule, made as its network kind makes them (:data:`NPU_SENDS`);
    ``fmt`` names the format in a refusal."""
    return NPU_SENDS[network_kind(problem.topology, schedule)](problem, schedule, fmt)
