"""The topology model: NPUs (and switches) joined by directed, heterogeneous links.

A topology has NPUs ``0 .. N-1`` and, in a switched fabric, switches ``N .. N+S-1``
(:class:`Switch`): a switch holds no data of its own and is in no pre- or
postcondition; it forwards (``cut_through`` or ``store_forward``) and may
multicast and reduce (docs/fabrics.md has the rules the verifier enforces).

A :class:`Topology` is immutable. Links are stored as parallel numpy arrays
sorted by ``(src, dst)`` so that link ids are deterministic, with CSR views
(``out_ptr``/``in_ptr``) for the hot loops of the solvers and the verifier.
Bandwidth is in GiB/s, latency in µs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from ..errors import TopologyError


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


CUT_THROUGH = "cut_through"
STORE_FORWARD = "store_forward"
SWITCH_MODES = (CUT_THROUGH, STORE_FORWARD)

# The two network kinds (:func:`network_kind`): every layer keeps one implementation per kind in a table keyed
# by these names and looks it up there, instead of asking about switches inline.
POINT_TO_POINT = "point_to_point"
FABRIC = "fabric"
NETWORK_KINDS = (POINT_TO_POINT, FABRIC)


@dataclass(frozen=True)
class Switch:
    """What a switch does with the chunks it forwards.

    Parameters
    ----------
    mode : {"cut_through", "store_forward"}
        ``cut_through``: a transfer NPU -> switch(es) -> NPU is one row whose ``route`` names the switches; it
        occupies every link of its route for its whole duration (the route's latencies plus the chunk at the
        slowest link's bandwidth). ``store_forward``: every hop is a row of its own; the switch buffers.
    multicast : bool
        One incoming copy may leave on several ports (without it, each incoming copy leaves once).
    reduce : bool
        Incoming contributions to the same chunk may be combined into one outgoing transfer.

    Examples
    --------
    >>> Switch("store_forward", multicast=True).reversed()
    Switch(mode='store_forward', multicast=False, reduce=True)
    """

    mode: str = CUT_THROUGH
    multicast: bool = False
    reduce: bool = False

    def __post_init__(self):
        if self.mode not in SWITCH_MODES:
            raise TopologyError(f"unknown switch mode {self.mode!r}; valid: {', '.join(SWITCH_MODES)}")
        object.__setattr__(self, "multicast", bool(self.multicast))
        object.__setattr__(self, "reduce", bool(self.reduce))

    def reversed(self) -> "Switch":
        """The same switch with time and links reversed: multicast becomes reduction and back."""
        return Switch(self.mode, multicast=self.reduce, reduce=self.multicast)

    def spec(self) -> str:
        """The edge-list spelling (without ``switch ID``)."""
        return " ".join([self.mode] + [w for w, on in (("multicast", self.multicast), ("reduce", self.reduce)) if on])


@dataclass(frozen=True, eq=False)
class Topology:
    """A directed graph of NPUs with per-link bandwidth (GiB/s) and latency (µs).

    Parameters
    ----------
    num_npus : int
        Number of NPUs; ids are ``0 .. num_npus-1``.
    src, dst : array_like of int
        Endpoints of each directed link.
    bw_GiBps, lat_us : array_like of float
        Per-link bandwidth (> 0) and latency (>= 0).
    name : str
        Human-readable name (kept in records).
    switches : sequence of Switch, optional
        A switched fabric: node ``num_npus + i`` is ``switches[i]``; link endpoints range over every node.

    Raises
    ------
    TopologyError
        On ids out of range, self-loops, non-positive bandwidth, negative
        latency or duplicate links. Connectivity is checked separately by
        :meth:`check_strongly_connected` because a sub-topology may be
        legitimately disconnected before relays are added.

    Examples
    --------
    >>> t = Topology.from_edges(3, [(0, 1, 50, 0.5), (1, 2, 50, 0.5), (2, 0, 25, 1.0)])
    >>> t.num_npus, t.num_links
    (3, 3)
    >>> t.link_id(2, 0)
    2
    >>> f = Topology.from_edges(2, [(0, 2, 50, 0.5), (2, 0, 50, 0.5), (1, 2, 50, 0.5), (2, 1, 50, 0.5)],
    ...                         switches=[Switch("cut_through", multicast=True)])
    >>> f.num_nodes, f.num_switches, f.is_switch(2)
    (3, 1, True)
    """

    num_npus: int
    src: np.ndarray
    dst: np.ndarray
    bw_GiBps: np.ndarray
    lat_us: np.ndarray
    name: str = "custom"
    meta: dict = field(default_factory=dict, compare=False)
    switches: tuple = ()

    def __post_init__(self):
        npus = int(self.num_npus)
        if npus < 1:
            raise TopologyError(f"topology needs at least 1 NPU, got {self.num_npus}")
        switches = tuple(self.switches or ())
        for i, sw in enumerate(switches):
            if not isinstance(sw, Switch):
                raise TopologyError(f"switch {npus + i}: expected a Switch, got {sw!r}")
        n = npus + len(switches)
        src = np.asarray(self.src, dtype=np.int64).ravel()
        dst = np.asarray(self.dst, dtype=np.int64).ravel()
        bw = np.asarray(self.bw_GiBps, dtype=np.float64).ravel()
        lat = np.asarray(self.lat_us, dtype=np.float64).ravel()
        if not (len(src) == len(dst) == len(bw) == len(lat)):
            raise TopologyError("src, dst, bw_GiBps and lat_us must have the same length")
        for what, ids in (("source", src), ("destination", dst)):
            bad = np.flatnonzero((ids < 0) | (ids >= n))
            if bad.size:
                raise TopologyError(
                    f"link {int(src[bad[0]])}->{int(dst[bad[0]])}: {what} {'node' if switches else 'NPU'} "
                    f"{int(ids[bad[0]])} is out of range 0..{n - 1}"
                )
        bad = np.flatnonzero(src == dst)
        if bad.size:
            raise TopologyError(f"self-loop on {'node' if switches else 'NPU'} {int(src[bad[0]])}")
        bad = np.flatnonzero(~(bw > 0) | ~np.isfinite(bw))
        if bad.size:
            i = bad[0]
            raise TopologyError(f"link {int(src[i])}->{int(dst[i])}: bandwidth must be > 0 GiB/s, got {bw[i]}")
        bad = np.flatnonzero(~(lat >= 0) | ~np.isfinite(lat))
        if bad.size:
            i = bad[0]
            raise TopologyError(f"link {int(src[i])}->{int(dst[i])}: latency must be >= 0 µs, got {lat[i]}")
        order = np.lexsort((dst, src))
        src, dst, bw, lat = src[order], dst[order], bw[order], lat[order]
        key = src * n + dst
        dup = np.flatnonzero(key[1:] == key[:-1])
        if dup.size:
            i = dup[0]
            raise TopologyError(f"duplicate link {int(src[i])}->{int(dst[i])}")
        if switches:
            linked = np.zeros(n, bool)
            linked[src] = True
            linked[dst] = True
            lonely = np.flatnonzero(~linked[npus:])
            if lonely.size:
                raise TopologyError(f"switch {npus + int(lonely[0])} has no links")
        idt = np.int32 if n < 2**31 - 1 else np.int64
        object.__setattr__(self, "num_npus", npus)
        object.__setattr__(self, "switches", switches)
        object.__setattr__(self, "src", _readonly(src.astype(idt)))
        object.__setattr__(self, "dst", _readonly(dst.astype(idt)))
        object.__setattr__(self, "bw_GiBps", _readonly(bw))
        object.__setattr__(self, "lat_us", _readonly(lat))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, num_npus: int, edges: Iterable[Sequence], name: str = "custom", switches=(),
                   **meta) -> "Topology":
        """Build from ``(src, dst, bw_GiBps, lat_us)`` tuples (directed links); ``switches`` makes nodes
        ``num_npus ..`` switches."""
        edges = list(edges)
        if edges:
            s, d, b, l = (list(x) for x in zip(*edges))
        else:
            s, d, b, l = [], [], [], []
        return cls(num_npus, np.array(s, dtype=np.int64), np.array(d, dtype=np.int64),
                   np.array(b, dtype=np.float64), np.array(l, dtype=np.float64), name=name, meta=dict(meta),
                   switches=tuple(switches))

    @classmethod
    def from_networkx(cls, graph, name: str | None = None, bw_attr: str = "bw", lat_attr: str = "lat") -> "Topology":
        """Build from a networkx graph whose edges carry ``bw`` (GiB/s) and ``lat`` (µs).

        Undirected graphs get both directions. Nodes are renumbered ``0..N-1``
        in sorted order when they are not already those integers; the mapping
        is kept in ``meta["node_labels"]``.
        """
        nodes = list(graph.nodes)
        try:
            nodes_sorted = sorted(nodes)
        except TypeError:
            nodes_sorted = sorted(nodes, key=str)
        index = {v: i for i, v in enumerate(nodes_sorted)}
        edges = []
        directed = graph.is_directed()
        for u, v, data in graph.edges(data=True):
            missing = [a for a in (bw_attr, lat_attr) if a not in data]
            if missing:
                raise TopologyError(f"edge {u}->{v}: missing attribute(s) {', '.join(missing)}")
            try:
                b, l = float(data[bw_attr]), float(data[lat_attr])
            except (TypeError, ValueError):
                raise TopologyError(f"edge {u}->{v}: bw/lat must be numbers, got {data[bw_attr]!r}, {data[lat_attr]!r}")
            edges.append((index[u], index[v], b, l))
            if not directed:
                edges.append((index[v], index[u], b, l))
        meta = {}
        if nodes_sorted != list(range(len(nodes_sorted))):
            meta["node_labels"] = [str(v) for v in nodes_sorted]
        return cls.from_edges(len(nodes_sorted), edges, name=name or graph.graph.get("name") or "custom", **meta)

    def to_networkx(self):
        """A ``networkx.DiGraph`` with ``bw`` and ``lat`` edge attributes.

        Examples
        --------
        >>> t = Topology.from_edges(2, [(0, 1, 50, 0.5), (1, 0, 50, 0.5)])
        >>> g = t.to_networkx()
        >>> g[0][1]["bw"]
        50.0
        """
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        g.add_nodes_from(range(self.num_npus))
        for i, sw in enumerate(self.switches):
            g.add_node(self.num_npus + i, kind="switch", mode=sw.mode, multicast=sw.multicast, reduce=sw.reduce)
        for u, v, b, l in zip(self.src.tolist(), self.dst.tolist(), self.bw_GiBps.tolist(), self.lat_us.tolist()):
            g.add_edge(u, v, bw=b, lat=l)
        return g

    def edges(self):
        """Iterate ``(src, dst, bw_GiBps, lat_us)`` over links in id order."""
        return zip(self.src.tolist(), self.dst.tolist(), self.bw_GiBps.tolist(), self.lat_us.tolist())

    # ------------------------------------------------------------------ basic views
    @property
    def num_links(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_switches(self) -> int:
        return len(self.switches)

    @property
    def num_nodes(self) -> int:
        """NPUs plus switches: node ids are ``0 .. num_nodes-1``."""
        return self.num_npus + len(self.switches)

    @property
    def network_kind(self) -> str:
        """``"fabric"`` when the topology has switches as nodes, else ``"point_to_point"`` (see
        :func:`network_kind`, which also looks at a schedule's routes)."""
        return FABRIC if self.switches else POINT_TO_POINT

    @property
    def is_fabric(self) -> bool:
        """True when the topology has switches as nodes (kept for callers; new code looks up
        :attr:`network_kind` in a table)."""
        return self.network_kind == FABRIC

    def is_switch(self, node: int) -> bool:
        return self.num_npus <= int(node) < self.num_nodes

    def switch(self, node: int) -> Switch:
        """The :class:`Switch` at node id ``node``."""
        if not self.is_switch(node):
            raise TopologyError(f"node {node} is not a switch of {self.name!r}")
        return self.switches[int(node) - self.num_npus]

    @cached_property
    def out_ptr(self) -> np.ndarray:
        """CSR pointer: out-links of ``u`` are link ids ``out_ptr[u]:out_ptr[u+1]``."""
        return _readonly(np.searchsorted(self.src, np.arange(self.num_nodes + 1)).astype(np.int64))

    @cached_property
    def in_order(self) -> np.ndarray:
        """Link ids sorted by ``(dst, src)``; in-links of ``v`` are ``in_order[in_ptr[v]:in_ptr[v+1]]``."""
        return _readonly(np.lexsort((self.src, self.dst)).astype(np.int64))

    @cached_property
    def in_ptr(self) -> np.ndarray:
        return _readonly(np.searchsorted(self.dst[self.in_order], np.arange(self.num_nodes + 1)).astype(np.int64))

    @cached_property
    def _keys(self) -> np.ndarray:
        return self.src.astype(np.int64) * self.num_nodes + self.dst.astype(np.int64)

    def link_ids(self, src, dst) -> np.ndarray:
        """Vectorized link lookup; ``-1`` where no link ``src->dst`` exists."""
        s = np.asarray(src, dtype=np.int64)
        d = np.asarray(dst, dtype=np.int64)
        n = self.num_nodes
        ok = (s >= 0) & (s < n) & (d >= 0) & (d < n)
        key = np.where(ok, s * n + d, -1)
        pos = np.searchsorted(self._keys, key)
        pos_c = np.minimum(pos, max(self.num_links - 1, 0))
        found = ok & (self.num_links > 0) & (self._keys[pos_c] == key) if self.num_links else np.zeros_like(ok)
        return np.where(found, pos_c, -1)

    def link_id(self, src: int, dst: int) -> int:
        """Id of link ``src->dst``; raises :class:`TopologyError` if absent."""
        lid = int(self.link_ids(src, dst))
        if lid < 0:
            raise TopologyError(f"no link {src}->{dst}")
        return lid

    def has_link(self, src: int, dst: int) -> bool:
        return int(self.link_ids(src, dst)) >= 0

    def out_neighbors(self, u: int) -> np.ndarray:
        return self.dst[self.out_ptr[u]:self.out_ptr[u + 1]]

    def in_neighbors(self, v: int) -> np.ndarray:
        return self.src[self.in_order[self.in_ptr[v]:self.in_ptr[v + 1]]]

    def out_degree(self) -> np.ndarray:
        return np.diff(self.out_ptr)

    def in_degree(self) -> np.ndarray:
        return np.diff(self.in_ptr)

    @property
    def is_homogeneous(self) -> bool:
        return bool(self.num_links == 0 or (np.ptp(self.bw_GiBps) == 0 and np.ptp(self.lat_us) == 0))

    @property
    def is_symmetric(self) -> bool:
        """True when every link ``u->v`` has a reverse ``v->u`` with the same bw and lat."""
        rev = self.link_ids(self.dst, self.src)
        if np.any(rev < 0):
            return False
        return bool(np.all(self.bw_GiBps[rev] == self.bw_GiBps) and np.all(self.lat_us[rev] == self.lat_us))

    # ------------------------------------------------------------------ reachability
    def _bfs(self, start: int, forward: bool) -> np.ndarray:
        seen = np.zeros(self.num_nodes, dtype=bool)
        seen[start] = True
        q = deque([start])
        if forward:
            ptr, nbr = self.out_ptr, self.dst
        else:
            ptr, nbr = self.in_ptr, self.src[self.in_order]
        ptr_l = ptr.tolist()
        nbr_l = nbr.tolist()
        while q:
            u = q.popleft()
            for w in nbr_l[ptr_l[u]:ptr_l[u + 1]]:
                if not seen[w]:
                    seen[w] = True
                    q.append(w)
        return seen

    def check_strongly_connected(self) -> None:
        """Raise :class:`TopologyError` naming NPUs that cannot reach or be reached.

        A collective needs every NPU to reach every other one.
        """
        if self.num_npus <= 1:
            return
        npus = self.num_npus
        fwd = self._bfs(0, True)[:npus]
        if not fwd.all():
            cut = np.flatnonzero(~fwd)
            raise TopologyError(
                f"topology {self.name!r} is disconnected: NPU(s) {fmt_ids(cut)} cannot be reached from NPU 0"
            )
        bwd = self._bfs(0, False)[:npus]
        if not bwd.all():
            cut = np.flatnonzero(~bwd)
            raise TopologyError(
                f"topology {self.name!r} is disconnected: NPU(s) {fmt_ids(cut)} cannot reach NPU 0"
            )

    # ------------------------------------------------------------------ transforms
    def reversed(self) -> "Topology":
        """Every link ``u->v`` becomes ``v->u`` with the same bandwidth and latency."""
        return Topology(self.num_npus, self.dst, self.src, self.bw_GiBps, self.lat_us,
                        name=f"{self.name}-reversed", meta=dict(self.meta),
                        switches=tuple(sw.reversed() for sw in self.switches))

    def with_name(self, name: str) -> "Topology":
        return Topology(self.num_npus, self.src, self.dst, self.bw_GiBps, self.lat_us, name=name, meta=dict(self.meta),
                        switches=self.switches)

    def summary(self) -> str:
        sw = f", {self.num_switches} switch{'es' if self.num_switches > 1 else ''}" if self.switches else ""
        return (f"{self.name}: {self.num_npus} NPUs{sw}, {self.num_links} directed links, "
                f"bw {self.bw_GiBps.min():g}-{self.bw_GiBps.max():g} GiB/s, "
                f"lat {self.lat_us.min():g}-{self.lat_us.max():g} µs") if self.num_links else f"{self.name}: {self.num_npus} NPUs, no links"

    def __repr__(self) -> str:
        return f"Topology({self.summary()})"


def network_kind(topology: Topology, schedule=None) -> str:
    """The kind of network whose rules apply: ``"fabric"`` on a topology with switches, or when some row of
    ``schedule`` names a route (a route through a point-to-point topology is replayed by the fabric rules,
    docs/fabrics.md); else ``"point_to_point"``.

    Examples
    --------
    >>> from tacos_bench import Schedule
    >>> t = Topology.from_edges(2, [(0, 1, 50, 0.5), (1, 0, 50, 0.5)])
    >>> network_kind(t), network_kind(t, Schedule.from_rows([(0, 0, 1, 0.0, 1.0, "copy", "0>1")]))
    ('point_to_point', 'fabric')
    """
    route = getattr(schedule, "route", None)
    if topology.network_kind == FABRIC or route is None:
        return topology.network_kind
    return FABRIC if bool(np.any(route != "")) else POINT_TO_POINT


def fmt_ids(ids, limit: int = 10) -> str:
    ids = [int(i) for i in ids]
    s = ", ".join(map(str, ids[:limit]))
    if len(ids) > limit:
        s += f", ... ({len(ids)} in all)"
    return s
