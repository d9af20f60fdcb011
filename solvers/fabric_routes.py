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
from dataclasses import dataclass

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
    ``dur[h]``; ``segments[h]`` lists ``(first_link, last_link)`` index pairs of its segments."""

    src: np.ndarray
    dst: np.ndarray
    dur: np.ndarray
    nodes: list
    links: list
    off: list
    end: list
    segments: list
    into: list      # into[v]: hop ids ending at NPU v
    out_of: list    # out_of[u]: hop ids starting at NPU u
    max_switches: int
    link_pad: np.ndarray = None  # [H, longest] links of each hop, padded with the id num_links (a free dummy)
    off_pad: np.ndarray = None   # [H, longest] their offsets (0 on the padding)
    end_pad: np.ndarray = None   # [H, longest] their ends (0 on the padding)

    def __len__(self) -> int:
        return len(self.src)


def _segments(topo: Topology, path: list[int]) -> list[tuple[int, int]]:
    """Split a path's links at store-and-forward switches."""
    segs, first = [], 0
    for k in range(1, len(path) - 1):
        if topo.switch(path[k]).mode != CUT_THROUGH:
            segs.append((first, k - 1))
            first = k
    segs.append((first, len(path) - 2))
    return segs


def _timed_paths(topo: Topology, found: list, chunk_bytes: int) -> list[tuple[list, list, float, list]]:
    """Every path's :func:`_segments` and timing at once, on arrays (a 512-GPU fabric has 73,000 paths): per
    path ``(off, end, duration, segments)``, each link's start and end offsets within the hop. A segment
    lasts its links' latencies plus the chunk's time on its slowest link and starts when the one before it
    ends; the sums are the per-path loop's, in the same order (``np.add.reduceat`` is the reduction
    ``ndarray.sum`` runs), so the times are bit for bit those of a loop over the paths."""
    if not found:
        return []
    n = topo.num_npus
    store_fwd = np.zeros(n + len(topo.switches), dtype=bool)
    for k in range(len(topo.switches)):
        store_fwd[n + k] = topo.switch(n + k).mode != CUT_THROUGH
    length = np.fromiter((len(lk) for _, lk in found), dtype=np.int64, count=len(found))
    links = np.fromiter((x for _, lk in found for x in lk), dtype=np.int64, count=int(length.sum()))
    # the node each link leaves from: a store-and-forward switch there (or the path's start) starts a segment
    tail = np.fromiter((x for p, _ in found for x in p[:-1]), dtype=np.int64, count=links.size)
    base = np.cumsum(length) - length                       # each path's first link
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
    off = t0[seg_of].tolist()
    end = (t0 + d)[seg_of].tolist()
    total = (t0 + d).tolist()
    link_base = np.repeat(base, nseg)
    seg_lo = (starts - link_base).tolist()
    seg_hi = (np.append(starts[1:], links.size) - 1 - link_base).tolist()
    out, a, sg = [], 0, 0
    for k, ns in zip(length.tolist(), nseg.tolist()):
        out.append((off[a:a + k], end[a:a + k], total[sg + ns - 1],
                    list(zip(seg_lo[sg:sg + ns], seg_hi[sg:sg + ns]))))
        a += k
        sg += ns
    return out


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
    for m in range(0, MAX_ROUTE_SWITCHES + 1):
        if _connected(topo, m):
            return m
    raise SolverError(f"{topo.name!r}: some NPU reaches another only through more than "
                      f"{MAX_ROUTE_SWITCHES} switches")


def _build_hops(topo: Topology, chunk_bytes: int, max_switches: int) -> Hops:
    if max_switches <= 0:
        max_switches = route_switches(topo)
    found = [pl for u in range(topo.num_npus) for pl in _paths_from(topo, u, max_switches)]
    timed = _timed_paths(topo, found, chunk_bytes)
    best: dict[tuple[int, int], list] = {}
    for (path, links), (off, end, dur, segs) in zip(found, timed):
        key = (path[0], path[-1])
        cur = best.get(key)
        if cur is None or dur < cur[0][0] * (1 - DUR_REL):
            best[key] = [(dur, path, links, off, end, segs)]
        elif dur <= cur[0][0] * (1 + DUR_REL):
            cur.append((dur, path, links, off, end, segs))
    rows = [r for key in sorted(best) for r in sorted(best[key], key=lambda r: r[1])]
    n = topo.num_npus
    into: list[list[int]] = [[] for _ in range(n)]
    out_of: list[list[int]] = [[] for _ in range(n)]
    for h, r in enumerate(rows):
        out_of[r[1][0]].append(h)
        into[r[1][-1]].append(h)
    width = max((len(r[2]) for r in rows), default=1)
    link_pad = np.full((len(rows), width), topo.num_links, dtype=np.int64)
    off_pad = np.zeros((len(rows), width))
    end_pad = np.zeros((len(rows), width))
    for h, r in enumerate(rows):
        link_pad[h, :len(r[2])] = r[2]
        off_pad[h, :len(r[3])] = r[3]
        end_pad[h, :len(r[4])] = r[4]
    return Hops(src=np.array([r[1][0] for r in rows], dtype=np.int64),
                dst=np.array([r[1][-1] for r in rows], dtype=np.int64),
                dur=np.array([r[0] for r in rows], dtype=np.float64),
                nodes=[tuple(r[1]) for r in rows], links=[np.array(r[2], dtype=np.int64) for r in rows],
                off=[np.array(r[3]) for r in rows], end=[np.array(r[4]) for r in rows],
                segments=[r[5] for r in rows], into=[np.array(x, dtype=np.int64) for x in into],
                out_of=[np.array(x, dtype=np.int64) for x in out_of], max_switches=max_switches,
                link_pad=link_pad, off_pad=off_pad, end_pad=end_pad)


def surviving_hops(topo: Topology, keep: np.ndarray, chunk_bytes: int) -> Hops:
    """The hops of ``topo`` over the links ``keep`` marks only (a fault's survivors), with ``topo``'s link ids;
    through as many switches as the healthy ``topo`` needs (:func:`route_switches`: after the fault some NPU
    may have no way out left, so the survivors alone may not say)."""
    keep = np.asarray(keep, bool)
    sub = Topology(topo.num_npus, topo.src[keep], topo.dst[keep], topo.bw_GiBps[keep], topo.lat_us[keep],
                   name=f"{topo.name}-surviving", switches=topo.switches)
    h = _build_hops(sub, chunk_bytes, max(route_switches(topo), 1))
    links = [topo.link_ids(np.asarray(p[:-1]), np.asarray(p[1:])) for p in h.nodes]
    pad = np.full_like(h.link_pad, topo.num_links)
    for k, x in enumerate(links):
        pad[k, :x.size] = x
    return Hops(src=h.src, dst=h.dst, dur=h.dur, nodes=h.nodes, links=links, off=h.off, end=h.end,
                segments=h.segments, into=h.into, out_of=h.out_of, max_switches=h.max_switches, link_pad=pad,
                off_pad=h.off_pad, end_pad=h.end_pad)


def _connected(topo: Topology, m: int) -> bool:
    """True when hops through at most ``m`` switches connect every NPU to every other one (via NPUs)."""
    n = topo.num_npus
    adj = [set() for _ in range(n)]
    for u in range(n):
        for path, _ in _paths_from(topo, u, m):
            adj[u].add(path[-1])
    for forward in (True, False):
        nbr = adj if forward else [set() for _ in range(n)]
        if not forward:
            for u in range(n):
                for v in adj[u]:
                    nbr[v].add(u)
        seen, todo = {0}, [0]
        while todo:
            x = todo.pop()
            for y in nbr[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        if len(seen) < n:
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


def _segment_table(hops: Hops) -> tuple:
    """Every hop's segments as arrays ``(seg_ptr, src, dst, off, end, route)``, built once per :class:`Hops` (a
    schedule is often made of several calls of :func:`hop_rows` on the same hops)."""
    cached = hops.__dict__.get("_segment_table")
    if cached is not None:
        return cached
    H = len(hops)
    seg_ptr = np.zeros(H + 1, dtype=np.int64)
    seg_ptr[1:] = np.cumsum([len(s) for s in hops.segments])
    s_src, s_dst, s_off, s_end, s_route = [], [], [], [], []
    for h in range(H):
        nodes = hops.nodes[h]
        for a, b in hops.segments[h]:
            path = nodes[a:b + 2]
            s_src.append(path[0])
            s_dst.append(path[-1])
            s_off.append(float(hops.off[h][a]))
            s_end.append(float(hops.end[h][a]))
            s_route.append(">".join(map(str, path)) if len(path) > 2 else "")
    out = (seg_ptr, np.array(s_src, dtype=np.int64), np.array(s_dst, dtype=np.int64), np.array(s_off),
           np.array(s_end), np.array(s_route, dtype=object))
    object.__setattr__(hops, "_segment_table", out)
    return out


def hop_rows(hops: Hops, ch: np.ndarray, hop: np.ndarray, start: np.ndarray, sort: bool = True) -> Schedule:
    """One row per (transfer, segment) of chunk ``ch[i]`` over hop ``hop[i]`` from ``start[i]``: the segment's nodes
    (a route through its switches) and times; in the canonical row order unless ``sort`` is false."""
    seg_ptr, s_src, s_dst, s_off, s_end, s_route = _segment_table(hops)
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
