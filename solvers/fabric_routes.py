"""Hops of a switched fabric: the ways one NPU reaches another through switches (docs/fabrics.md).

A *hop* is a path from an NPU to another NPU whose interior nodes are switches. Its links are occupied as the
switches forward: a run of ``cut_through`` switches is one *segment* (every link of it busy from the segment's
start for the route's latencies plus the chunk at the slowest link's bandwidth); a ``store_forward`` switch
ends a segment, and the next one starts when the chunk has arrived there. The greedy matches hops, not links,
so a sender's and a receiver's ports are matched through the switches between them.

Only hops through at most ``max_switches`` switches are kept (the fewest that connect every NPU to every other
one when ``max_switches=0``): on a rail-optimized cluster that is one switch (NVSwitch within a node, the rail's
leaf across nodes; traffic between rails relays through an NPU, as NCCL's PXN does), on a leaf-spine three.
Between two NPUs, every hop of the least duration is kept (one per spine), so the greedy picks a free one.

Inside a :func:`shared_hops` block the hops of a fabric are built once and handed to every caller (the greedy's
runs over the seeds, each mirrored phase's reversed copy of the fabric, and ``greedy_plus``'s baseline
candidates, which build them again otherwise).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tacos_bench.cost import link_time_us
from tacos_bench.errors import SolverError
from tacos_bench.graph import undirected_components
from tacos_bench.schedule import Schedule, route_column, row_links
from tacos_bench.topology import CUT_THROUGH, Topology

MAX_ROUTE_SWITCHES = 6   # the auto search gives up beyond this many switches on a hop
DUR_REL = 1e-9           # hops within this fraction of the shortest count as equally short


@dataclass(frozen=True)
class Hops:
    """Every hop, column-wise: hop ``h`` goes ``src[h] -> dst[h]`` over the nodes ``nodes[h]`` (a tuple); its
    ``k``-th link ``links[h][k]`` is busy from ``start + off[h][k]`` to ``start + end[h][k]``; it lasts
    ``dur[h]``; ``segments[h]`` lists ``(first_link, last_link)`` index pairs of its segments.

    The hops are arrays (``hlen[h]`` links, padded to the longest: ``link_pad`` with the id ``num_links``, a free
    dummy, ``off_pad``/``end_pad`` with 0, ``node_pad`` with -1; segments as CSR ``seg_ptr``, ``seg_a``,
    ``seg_b``); the per-hop lists above and ``into``/``out_of`` are derived from them when first read (a
    512-GPU fabric has 36,000 hops, and the compiled kernels read only the arrays)."""

    src: np.ndarray
    dst: np.ndarray
    dur: np.ndarray
    hlen: np.ndarray
    node_pad: np.ndarray       # [H, longest + 1] the nodes of each hop
    link_pad: np.ndarray       # [H, longest] its links
    off_pad: np.ndarray        # [H, longest] their offsets
    end_pad: np.ndarray        # [H, longest] their ends
    seg_ptr: np.ndarray        # [H + 1] each hop's segments in seg_a / seg_b
    seg_a: np.ndarray          # first link (index within the hop) of each segment
    seg_b: np.ndarray          # last link of each segment
    max_switches: int
    num_npus: int

    def __len__(self) -> int:
        return len(self.src)

    @cached_property
    def nodes(self) -> list:
        return [tuple(r[:k + 1]) for r, k in zip(self.node_pad.tolist(), self.hlen.tolist())]

    @cached_property
    def links(self) -> list:
        return [r[:k] for r, k in zip(self.link_pad, self.hlen.tolist())]

    @cached_property
    def off(self) -> list:
        return [r[:k] for r, k in zip(self.off_pad, self.hlen.tolist())]

    @cached_property
    def end(self) -> list:
        return [r[:k] for r, k in zip(self.end_pad, self.hlen.tolist())]

    @cached_property
    def segments(self) -> list:
        pairs = list(zip(self.seg_a.tolist(), self.seg_b.tolist()))
        ptr = self.seg_ptr.tolist()
        return [pairs[ptr[h]:ptr[h + 1]] for h in range(len(self))]

    @cached_property
    def into_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ptr, idx)``: the hop ids ending at NPU ``v`` are ``idx[ptr[v]:ptr[v + 1]]``, ascending."""
        return _by_npu(self.dst, self.num_npus)

    @cached_property
    def into(self) -> list:
        """``into[v]``: the hop ids ending at NPU ``v``, ascending."""
        ptr, idx = self.into_csr
        return np.split(idx, ptr[1:-1])

    @cached_property
    def out_of(self) -> list:
        """``out_of[u]``: the hop ids starting at NPU ``u``, ascending."""
        ptr, idx = _by_npu(self.src, self.num_npus)
        return np.split(idx, ptr[1:-1])


def _by_npu(ends: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The hops grouped by the NPU at one end (CSR, each group in id order)."""
    idx = np.argsort(ends, kind="stable").astype(np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(ends, minlength=n))
    return ptr, idx


def _segments(topo: Topology, path: list[int]) -> list[tuple[int, int]]:
    """Split a path's links at store-and-forward switches."""
    segs, first = [], 0
    for k in range(1, len(path) - 1):
        if topo.switch(path[k]).mode != CUT_THROUGH:
            segs.append((first, k - 1))
            first = k
    segs.append((first, len(path) - 2))
    return segs


def _timed_paths(topo: Topology, length: np.ndarray, links: np.ndarray, tail: np.ndarray, chunk_bytes: int) -> tuple:
    """Every path's :func:`_segments` and timing at once, on arrays (a 512-GPU fabric has 36,000 paths); paths
    given by their number of links ``length``, their links and each link's tail node, flat. Returns per link its
    start and end offsets within its hop, per path its duration and number of segments, per segment its first and
    last link (indices within the path). A segment lasts its links' latencies plus the chunk's time on its slowest
    link and starts when the one before it ends; the sums are the per-path loop's, in the same order
    (``np.add.reduceat`` is the reduction ``ndarray.sum`` runs), so the times are bit for bit those of a loop
    over the paths."""
    n = topo.num_npus
    store_fwd = np.zeros(n + len(topo.switches), dtype=bool)
    for k in range(len(topo.switches)):
        store_fwd[n + k] = topo.switch(n + k).mode != CUT_THROUGH
    base = np.cumsum(length) - length                       # each path's first link
    # the node each link leaves from: a store-and-forward switch there (or the path's start) starts a segment
    start = store_fwd[tail]
    start[base] = True
    starts = np.flatnonzero(start)
    d = (np.add.reduceat(topo.lat_us[links], starts)
         + link_time_us(np.minimum.reduceat(topo.bw_GiBps[links], starts), 0.0, chunk_bytes))
    nseg = np.add.reduceat(start.astype(np.int64), base)
    first_seg = np.cumsum(nseg) - nseg
    rank = np.arange(starts.size) - np.repeat(first_seg, nseg)
    t0 = np.zeros(starts.size)
    for r in range(1, int(rank.max()) + 1):
        at = np.flatnonzero(rank == r)
        t0[at] = t0[at - 1] + d[at - 1]
    seg_of = np.cumsum(start) - 1
    link_base = np.repeat(base, nseg)
    seg_lo = starts - link_base
    seg_hi = np.append(starts[1:], links.size) - 1 - link_base
    return t0[seg_of], (t0 + d)[seg_of], (t0 + d)[first_seg + nseg - 1], nseg, seg_lo, seg_hi


def _paths_from(topo: Topology, u: int, max_switches: int):
    """Simple paths from NPU ``u`` to other NPUs through at most ``max_switches`` switches (depth-first)."""
    n = topo.num_npus
    out_ptr, ldst = topo.out_ptr, topo.dst
    stack = [(u, [u], [])]
    while stack:
        x, path, links = stack.pop()
        for lid in range(int(out_ptr[x]), int(out_ptr[x + 1])):
            y = int(ldst[lid])
            if y in path:
                continue
            if y < n:
                yield path + [y], links + [lid]
            elif len(path) - 1 < max_switches:  # path[1:] are switches
                stack.append((y, path + [y], links + [lid]))


# the hops built so far inside a shared_hops() block (None outside one), by content of the topology
_SHARED: ContextVar[dict | None] = ContextVar("shared_hops", default=None)


@contextmanager
def shared_hops():
    """Within the block, :func:`build_hops` builds the hops of a fabric once per chunk size and hands every later
    call the same :class:`Hops` (its callers only read them); a topology is recognized by its content, so the
    reversed copy a mirrored phase builds again is the same fabric. Outside any block every call builds afresh;
    a nested block shares the outer one's store.

    >>> from tacos_bench.topology import Switch, Topology
    >>> e = [(i, 4, 50, 0.5) for i in range(4)] + [(4, i, 50, 0.5) for i in range(4)]
    >>> t = Topology.from_edges(4, e, switches=[Switch()])
    >>> with shared_hops():
    ...     build_hops(t, 2**20) is build_hops(t.reversed().reversed(), 2**20)
    True
    >>> build_hops(t, 2**20) is build_hops(t, 2**20)
    False
    """
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _content_key(topo: Topology, chunk_bytes: int, max_switches: int) -> tuple:
    return (topo.num_npus, topo.src.tobytes(), topo.dst.tobytes(), topo.bw_GiBps.tobytes(), topo.lat_us.tobytes(),
            tuple(topo.switches), int(chunk_bytes), int(max_switches))


def build_hops(topo: Topology, chunk_bytes: int, max_switches: int = 0) -> Hops:
    """The hops of ``topo`` for chunks of ``chunk_bytes`` (see the module docstring; built once per
    :func:`shared_hops` block).

    Examples
    --------
    >>> from tacos_bench.topology import Switch, Topology
    >>> e = [(i, 4, 50, 0.5) for i in range(4)] + [(4, i, 50, 0.5) for i in range(4)]
    >>> h = build_hops(Topology.from_edges(4, e, switches=[Switch()]), 2**20)
    >>> len(h), h.nodes[0], round(float(h.dur[0]), 4)
    (12, (0, 4, 1), 20.5312)
    """
    store = _SHARED.get()
    if store is None:
        return _build_hops(topo, chunk_bytes, max_switches)
    key = _content_key(topo, chunk_bytes, max_switches)
    if key not in store:
        store[key] = _build_hops(topo, chunk_bytes, max_switches)
    return store[key]


def route_switches(topo: Topology) -> int:
    """The fewest switches per hop that connect every NPU to every other (via NPUs): the hops' default."""
    return _routed_paths(topo, 0)[0]


def _routed_paths(topo: Topology, max_switches: int) -> tuple:
    """``(max_switches, length, nodes, links)``: the simple paths between NPUs through at most ``max_switches``
    switches (when 0: the fewest that connect every NPU to every other, :func:`route_switches`), in
    :func:`_paths_from`'s order, as each path's number of links and the paths' nodes and links laid end to end."""
    for m in ([max_switches] if max_switches > 0 else range(0, MAX_ROUTE_SWITCHES + 1)):
        length, nodes, links = [], [], []
        for u in range(topo.num_npus):
            for path, lk in _paths_from(topo, u, m):
                length.append(len(lk))
                nodes.extend(path)
                links.extend(lk)
        length = np.array(length, dtype=np.int64)
        nodes = np.array(nodes, dtype=np.int64)
        last = np.cumsum(length + 1) - 1                  # each path's last node
        if max_switches > 0 or _connected(topo.num_npus, nodes[last - length], nodes[last]):
            return m, length, nodes, np.array(links, dtype=np.int64)
    raise SolverError(f"{topo.name!r}: some NPU reaches another only through more than "
                      f"{MAX_ROUTE_SWITCHES} switches")


def _build_hops(topo: Topology, chunk_bytes: int, max_switches: int) -> Hops:
    n = topo.num_npus
    max_switches, length, nodes, links = _routed_paths(topo, max_switches)
    if not length.size:
        e = np.zeros(0, dtype=np.int64)
        return Hops(e, e, np.zeros(0), e, np.zeros((0, 2), np.int64), np.zeros((0, 1), np.int64), np.zeros((0, 1)),
                    np.zeros((0, 1)), np.zeros(1, np.int64), e, e, max_switches, n)
    node_base = np.cumsum(length + 1) - (length + 1)         # each path's first node
    tail = np.delete(nodes, node_base + length)             # each link's tail: the path's nodes but its last
    off, end, dur, nseg, seg_lo, seg_hi = _timed_paths(topo, length, links, tail, chunk_bytes)
    keep = _least_per_pair(nodes[node_base], nodes[node_base + length], dur)
    # the hops: by (source, destination), then by their nodes
    P, width = len(length), int(length.max())
    node_pad = np.full((P, width + 1), -1, dtype=np.int64)
    col = np.arange(nodes.size) - np.repeat(node_base, length + 1)
    node_pad[np.repeat(np.arange(P), length + 1), col] = nodes
    last = node_pad[np.arange(P), length]
    order = np.lexsort([node_pad[:, k] for k in range(width, 0, -1)] + [last, node_pad[:, 0]])
    order = order[keep[order]]
    H = order.size
    hlen = length[order]
    link_pad = np.full((P, width), topo.num_links, dtype=np.int64)
    off_pad, end_pad = np.zeros((P, width)), np.zeros((P, width))
    rows = np.repeat(np.arange(P), length)
    col = np.arange(links.size) - np.repeat(node_base - np.arange(P), length)   # (node_base - p: the first link)
    link_pad[rows, col], off_pad[rows, col], end_pad[rows, col] = links, off, end
    w = int(hlen.max())                      # as wide as the longest hop kept
    node_pad, link_pad, off_pad, end_pad = node_pad[:, :w + 1], link_pad[:, :w], off_pad[:, :w], end_pad[:, :w]
    seg_ptr = np.zeros(H + 1, dtype=np.int64)
    seg_ptr[1:] = np.cumsum(nseg[order])
    # the kept hops' segments, in their order
    pick = np.repeat((np.cumsum(nseg) - nseg)[order] - seg_ptr[:-1], nseg[order]) + np.arange(seg_ptr[-1])
    return Hops(src=node_pad[order, 0], dst=last[order], dur=dur[order], hlen=hlen, node_pad=node_pad[order],
                link_pad=link_pad[order], off_pad=off_pad[order], end_pad=end_pad[order], seg_ptr=seg_ptr,
                seg_a=seg_lo[pick], seg_b=seg_hi[pick], max_switches=max_switches, num_npus=n)


def _least_per_pair(src: np.ndarray, dst: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Which paths are kept: between two NPUs, in the order found, the first path and every later one as short
    within ``DUR_REL`` of it, a path shorter by more starting the list again (so every path of the least duration
    is kept, one per spine). Pairs whose paths all lie within ``DUR_REL`` of their least keep every path (no
    path is then shorter by more than ``DUR_REL`` than the first, nor longer by more); the others are walked."""
    keep = np.ones(dur.size, dtype=bool)
    pair = src * (int(dst.max(initial=0)) + 1) + dst
    o = np.argsort(pair, kind="stable")                      # each pair's paths, in the order found
    cut = np.flatnonzero(np.diff(pair[o])) + 1
    lo, hi = np.minimum.reduceat(dur[o], np.r_[0, cut]), np.maximum.reduceat(dur[o], np.r_[0, cut])
    spread = np.repeat(hi > lo * (1 + DUR_REL), np.diff(np.r_[0, cut, o.size]))
    first: dict = {}
    for i in np.sort(o[spread]).tolist():
        key, d = int(pair[i]), float(dur[i])
        cur = first.get(key)
        if cur is None or d < cur[0] * (1 - DUR_REL):
            if cur is not None:
                keep[cur[1]] = False
            first[key] = (d, [i])
        elif d <= cur[0] * (1 + DUR_REL):
            cur[1].append(i)
        else:
            keep[i] = False
    return keep


def surviving_hops(topo: Topology, keep: np.ndarray, chunk_bytes: int) -> Hops:
    """The hops of ``topo`` over the links ``keep`` marks only (a fault's survivors), with ``topo``'s link ids;
    through as many switches as the healthy ``topo`` needs (:func:`route_switches`: after the fault some NPU
    may have no way out left, so the survivors alone may not say)."""
    keep = np.asarray(keep, bool)
    sub = Topology(topo.num_npus, topo.src[keep], topo.dst[keep], topo.bw_GiBps[keep], topo.lat_us[keep],
                   name=f"{topo.name}-surviving", switches=topo.switches)
    h = _build_hops(sub, chunk_bytes, max(route_switches(topo), 1))
    pad = np.full_like(h.link_pad, topo.num_links)
    used = np.arange(pad.shape[1]) < h.hlen[:, None]
    pad[used] = topo.link_ids(h.node_pad[:, :-1][used], h.node_pad[:, 1:][used])
    return dataclasses.replace(h, link_pad=pad)


def _connected(n: int, src: np.ndarray, dst: np.ndarray) -> bool:
    """True when the pairs ``src -> dst`` connect every NPU to every other one (via NPUs), both ways."""
    if n <= 1:
        return True
    for a, b in ((src, dst), (dst, src)):     # every NPU reached from NPU 0, and NPU 0 from every NPU
        seen = np.zeros(n, dtype=bool)
        seen[0] = True
        o = np.argsort(a, kind="stable")
        ptr = np.searchsorted(a[o], np.arange(n + 1))
        todo = [0]
        while todo:
            x = todo.pop()
            for y in b[o[ptr[x]:ptr[x + 1]]].tolist():
                if not seen[y]:
                    seen[y] = True
                    todo.append(y)
        if not seen.all():
            return False
    return True


def route_links(topo: Topology, schedule) -> list[np.ndarray]:
    """The link ids each row of ``schedule`` occupies (:func:`tacos_bench.schedule.row_links`)."""
    return row_links(topo, schedule)


def fastest_groups(hops: Hops, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The NPUs joined by the fastest hops (a node's NVSwitch on a rail cluster; the whole topology when every
    hop is as fast): per NPU its group (numbered by lowest member) and rank in it, and each group's size."""
    fast = hops.dur <= float(hops.dur.min()) * (1 + 1e-9)
    gid = undirected_components(n, hops.src[fast], hops.dst[fast])
    size = np.bincount(gid)
    pos = np.zeros(n, dtype=np.int64)
    seen = np.zeros(len(size), dtype=np.int64)
    for x in range(n):
        pos[x] = seen[gid[x]]
        seen[gid[x]] += 1
    return gid, pos, size


def segment_table(hops: Hops) -> tuple:
    """Every hop's segments as arrays ``(seg_ptr, src, dst, off, end, route)``, built once per :class:`Hops` (a
    schedule is often made of several calls of :func:`hop_rows` on the same hops)."""
    cached = hops.__dict__.get("_segments_cache")
    if cached is not None:
        return cached
    seg_hop = np.repeat(np.arange(len(hops)), np.diff(hops.seg_ptr))
    a, b = hops.seg_a, hops.seg_b
    pad = hops.node_pad.tolist()
    route = np.array([">".join(map(str, pad[h][i:j + 2])) if j > i else "" for h, i, j in
                      zip(seg_hop.tolist(), a.tolist(), b.tolist())], dtype=object)
    out = (hops.seg_ptr, hops.node_pad[seg_hop, a], hops.node_pad[seg_hop, b + 1], hops.off_pad[seg_hop, a],
           hops.end_pad[seg_hop, a], route)
    object.__setattr__(hops, "_segments_cache", out)
    return out


def hop_rows(hops: Hops, ch: np.ndarray, hop: np.ndarray, start: np.ndarray, sort: bool = True) -> Schedule:
    """One row per (transfer, segment) of chunk ``ch[i]`` over hop ``hop[i]`` from ``start[i]``: the segment's nodes
    (a route through its switches) and times; in the canonical row order unless ``sort`` is false."""
    seg_ptr, s_src, s_dst, s_off, s_end, s_route = segment_table(hops)
    first = seg_ptr[hop]
    nseg = seg_ptr[hop + 1] - first
    if np.all(nseg == 1):   # cut-through hops: one row per transfer
        seg, t = first, slice(None)
    else:
        t = np.repeat(np.arange(len(hop)), nseg)
        seg = first[t] + (np.arange(len(t)) - np.repeat(np.cumsum(nseg) - nseg, nseg))
    routed = bool(np.any(s_route != ""))
    out = Schedule(ch[t], s_src[seg], s_dst[seg], start[t] + s_off[seg], start[t] + s_end[seg],
                   np.zeros(len(seg), dtype=np.int8), route=route_column(s_route, seg) if routed else None)
    return out.sorted() if sort else out
