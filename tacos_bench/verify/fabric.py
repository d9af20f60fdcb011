"""The replay of a schedule on a switched fabric: rules 1-6 of docs/fabrics.md ("The rules the verifier
enforces"), independent of any solver.

A row ``chunk, src, dst, start_us, end_us, op, route`` is checked for

1. its endpoints (an NPU or a ``store_forward`` switch, never a ``cut_through`` one) and its route (from
   ``src`` to ``dst``, every interior node a ``cut_through`` switch, every hop a link; no route: the link
   ``src -> dst``);
2. its duration: at least the route's latencies plus the chunk at its slowest link's bandwidth
   (:func:`tacos_bench.cost.link_time_us`, so a one-link row needs exactly its link time);
3. the occupancy of every link of its route over ``[start, end]``: rows overlap on a link only inside one
   multicast group (copies of one chunk from one ``src`` over the same interval whose routes form a tree
   that branches at ``cut_through`` switches with ``multicast``) or one reduction group (the mirror: one
   ``dst``, routes merging at ``cut_through`` switches with ``reduce``); a shared link is occupied once;
4. the state: it reads the sender's contributions at ``start`` and applies them at ``end`` (copy overwrites,
   reduce adds without counting a contribution twice); arrivals at an instant apply before reads;
5. a ``store_forward`` switch starts empty; it sends copies from its state when it has ``multicast``, and
   with ``reduce`` a reduce row carries everything it buffered and not yet sent on (its buffer then empties:
   each contribution leaves it once); otherwise it forwards what arrived first in, first out;
6. the postcondition, over the NPUs only.

Choices where docs/fabrics.md leaves room (each for the stricter, physical reading):

* a route is a simple path: it may not visit a node twice;
* the members of a group have bit-identical ``start`` and ``end`` (a CSV round trip keeps them so);
* the packet a store-and-forward switch without ``multicast`` sends is what leaves on one link: the members
  of one multicast group that share the switch's out-link consume one incoming copy (a ``cut_through``
  switch downstream duplicates it), members leaving on different links consume one each; likewise the
  members of one reduction group that share the last link into a switch without ``reduce`` arrive as one
  packet (the union of their contributions, which must be disjoint);
* a switch keeps the two streams apart unless it has both flags: without ``multicast`` a copy that arrived
  is only forwarded (never read by a reduce row), without ``reduce`` a reduce packet is only forwarded
  (never read by a copy row); with both it is a relay without data of its own;
* packets that arrive (or leave) a FIFO switch at the same instant are taken in row order.
"""
from __future__ import annotations

import numpy as np

from ..cost import link_time_us
from ..errors import VerificationError
from ..problem import Problem
from ..schedule import COPY, REDUCE, Schedule
from ..topology.model import CUT_THROUGH
from .replay import replay
from .result import Verification
from .rules import CUT, STORE, node_text, row_text


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def verify_fabric(problem: Problem, schedule: Schedule, fault=None) -> Verification:
    """Replay ``schedule`` on ``problem``, whose topology may have switches and whose rows may have routes.

    Parameters
    ----------
    problem : Problem
        The collective over the NPUs ``0 .. N-1`` of a topology with switches ``N .. N+S-1`` (or none).
    schedule : Schedule
        Rows with an optional ``route`` column (``"0>8>3"``; empty: the link ``src -> dst``).
    fault : tacos_bench.faults.Fault, optional
        The schedule ran through this failure: no row may cross a failed link and end after it; failed NPUs
        need nothing.

    Returns
    -------
    Verification
        ``valid=True`` with the collective time (the last arrival), the rows, the link busy time and the
        utilization. Each link of a row is busy for the row's minimum duration (rule 2), as each link is
        for its link time without switches; a link a group shares counts once, at its members' longest.

    Raises
    ------
    VerificationError
        On the first broken rule, with a one-line message naming the row and the rule.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.cost import link_time_us
    >>> from tacos_bench.topology import Switch, Topology
    >>> star = Topology.from_edges(2, [(0, 2, 50, 0.5), (2, 0, 50, 0.5), (1, 2, 50, 0.5), (2, 1, 50, 0.5)],
    ...                            switches=[Switch("cut_through")])
    >>> p = Problem(star, Collective("all_gather", 1, 1))
    >>> t = float(link_time_us(50, 0.5 + 0.5, p.chunk_bytes))
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy", "0>2>1"), (1, 1, 0, 0.0, t, "copy", "1>2>0")])
    >>> verify_fabric(p, s).collective_time_us == t
    True
    """
    return replay(problem, schedule, fault, Fabric)


class Fabric:
    """Rules 1-3 on a switched fabric (or of a schedule with routes): endpoints and routes, the duration of a
    route, the multicast and reduction groups that may share a link; and the switches that forward first in,
    first out (rule 5), for the state replay of :mod:`tacos_bench.verify.replay`."""

    def __init__(self, problem: Problem, schedule: Schedule):
        topo = problem.topology
        n, V = problem.num_npus, topo.num_nodes
        self._problem, self._schedule = problem, schedule
        kind = np.zeros(V, np.int8)
        mcast = np.zeros(V, bool)
        red = np.zeros(V, bool)
        for j, sw in enumerate(topo.switches):
            kind[n + j] = CUT if sw.mode == CUT_THROUGH else STORE
            mcast[n + j], red[n + j] = sw.multicast, sw.reduce
        self.kind, self._mcast, self._red = kind, mcast, red
        self.fifo_copy = (kind == STORE) & ~mcast      # forwards copies first in, first out
        self.fifo_red = (kind == STORE) & ~red         # forwards reduce packets first in, first out
        # rule 1: endpoints, then routes
        for name, arr in (("src", schedule.src), ("dst", schedule.dst)):
            bad = np.flatnonzero(kind[arr] == CUT)
            if bad.size:
                i = bad[0]
                raise VerificationError(
                    f"{row_text(schedule, i)}: {name} {int(arr[i])} is a cut_through switch, which is never a "
                    f"row's endpoint (a transfer through it is one row whose route names it)")
        self.seg = _Segments(schedule, topo, kind)
        self.row, self.link = self.seg.row, self.seg.link

    def need(self) -> np.ndarray:
        """Rule 2: a row needs its route's latencies plus the chunk at its slowest link's bandwidth."""
        return self.seg.need(self._problem.topology, self._problem.chunk_bytes)

    def need_text(self, i: int) -> str:
        seg = self.seg
        return ("the link time" if seg.lens[i] == 1 else
                f"its route's time (latencies {seg.sum_lat[i]:.6f} µs + the chunk at the slowest link's "
                f"{seg.min_bw[i]:g} GiB/s)")

    def occupancy(self, need: np.ndarray, tol: float) -> float:
        """Rule 3; returns the links' busy time."""
        return _check_occupancy(self._schedule, self._problem.topology, self.seg, self.kind, self._mcast,
                                self._red, need, tol)

    def packets(self) -> tuple[list, list]:
        """Per row, the packet it leaves its ``src`` in and the one it enters its ``dst`` in: the members of one
        multicast group leaving on one link are one packet, the members of one reduction group entering on one
        link too."""
        seg = self.seg
        return seg.uid[seg.first].tolist(), seg.uid[seg.first + seg.lens - 1].tolist()

    def fifo_copies(self, tol: float):
        """Rule 5 for the copies FIFO switches send (:func:`_fifo_copies`)."""
        return _fifo_copies(self._schedule, self.seg, self.fifo_copy, self._problem.num_chunks, tol)

    def fifo_copy_error(self, i: int, k: int, arrive: float):
        """Raise for row ``i``, the ``k``-th copy its switch sends, whose incoming copy arrives at ``arrive``."""
        s = self._schedule
        when = "never arrives" if not np.isfinite(arrive) else f"arrives only at {arrive:.6f} µs"
        raise VerificationError(
            f"{row_text(s, i)}: non-causal: store_forward switch {int(s.src[i])} has no multicast, so its "
            f"{_ordinal(k)} outgoing copy of chunk {int(s.chunk[i])} forwards its {_ordinal(k)} incoming copy "
            f"(first in, first out), which {when}")

    def fifo_error(self, i: int, k: int, s: int, c: int, o: int, tol: float):
        _fifo_error(self._schedule, self.seg, i, k, s, c, o, tol)


class _Segments:
    """Every row expanded into the links of its route (a row without a route: one segment).

    ``row``, ``pos`` (hop index), ``link``, ``head`` / ``tail`` (the hop's nodes) per segment; ``first`` and
    ``lens`` per row; ``prefix`` / ``suffix``: ids of the route up to and including the hop, and from the hop
    to ``dst`` (one-hop paths share the link id, so a route ``"u>v"`` and an empty route on ``u -> v`` agree).
    Routes are parsed once per distinct string: a schedule repeats few of them.
    """

    def __init__(self, schedule: Schedule, topo, kind: np.ndarray):
        T, L = len(schedule), topo.num_links
        src, dst = schedule.src, schedule.dst
        code = np.full(T, -1, np.int64)
        uroutes: list[str] = []
        if schedule.route is not None and T:
            index: dict[str, int] = {}
            code = np.fromiter((index.setdefault(r, len(index)) if r else -1 for r in schedule.route.tolist()),
                               np.int64, T)
            uroutes = list(index)
        routed = code >= 0

        # rule 1 for rows without a route: src -> dst is a link
        single = topo.link_ids(src, dst)
        bad = np.flatnonzero(~routed & (single < 0))
        if bad.size:
            i = bad[0]
            raise VerificationError(f"{row_text(schedule, i)}: unknown link {int(src[i])}->{int(dst[i])}")

        # rule 1 for each distinct route, then its endpoints per row
        pre_ids: dict[tuple, int] = {}
        suf_ids: dict[tuple, int] = {}
        errors: dict[int, str] = {}
        u_nodes: list[list[int]] = []
        for k, r in enumerate(uroutes):
            nodes, err = _parse_route(r, topo, kind)
            u_nodes.append(nodes)
            if err:
                errors[k] = f"route {r!r} {err}"
        u_first = np.array([x[0] if x else -1 for x in u_nodes], np.int64)
        u_last = np.array([x[-1] if x else -1 for x in u_nodes], np.int64)
        bad_route = np.zeros(len(uroutes), bool)
        bad_route[list(errors)] = True
        c0 = np.maximum(code, 0)
        bad = np.zeros(T, bool)
        if uroutes:
            bad = routed & (bad_route[c0] | (u_first[c0] != src) | (u_last[c0] != dst))
        first_bad = np.flatnonzero(bad)
        if first_bad.size:
            i = int(first_bad[0])
            r = schedule.route[i]
            msg = errors.get(int(code[i])) or f"route {r!r} does not run from src {int(src[i])} to dst {int(dst[i])}"
            raise VerificationError(f"{row_text(schedule, i)}: {msg}")

        # the hops of every distinct route
        u_len = np.array([len(x) - 1 for x in u_nodes], np.int64)
        u_start = np.concatenate([[0], np.cumsum(u_len)]).astype(np.int64)
        U_link, U_pre, U_suf, U_head, U_tail = ([] for _ in range(5))
        for nodes in u_nodes:
            m = len(nodes) - 1
            links = topo.link_ids(nodes[:-1], nodes[1:]).tolist()
            for p in range(m):
                U_link.append(links[p])
                U_head.append(nodes[p + 1])
                U_tail.append(nodes[p])
                U_pre.append(links[p] if p == 0 else L + pre_ids.setdefault(tuple(nodes[:p + 2]), len(pre_ids)))
                U_suf.append(links[p] if p == m - 1 else L + suf_ids.setdefault(tuple(nodes[p:]), len(suf_ids)))
        U_link, U_pre, U_suf, U_head, U_tail = (np.array(a, np.int64) for a in (U_link, U_pre, U_suf, U_head, U_tail))

        lens = np.ones(T, np.int64)
        lens[routed] = u_len[code[routed]]
        first = np.cumsum(lens) - lens
        nseg = int(lens.sum())
        row = np.repeat(np.arange(T, dtype=np.int64), lens)
        pos = np.arange(nseg, dtype=np.int64) - first[row]
        is_r = routed[row]
        link = np.empty(nseg, np.int64)
        head = np.empty(nseg, np.int64)
        tail = np.empty(nseg, np.int64)
        prefix = np.empty(nseg, np.int64)
        suffix = np.empty(nseg, np.int64)
        plain = row[~is_r]
        link[~is_r] = prefix[~is_r] = suffix[~is_r] = single[plain]
        head[~is_r], tail[~is_r] = dst[plain], src[plain]
        if is_r.any():
            u = u_start[code[row[is_r]]] + pos[is_r]
            link[is_r], head[is_r], tail[is_r] = U_link[u], U_head[u], U_tail[u]
            prefix[is_r], suffix[is_r] = U_pre[u], U_suf[u]
        self.row, self.pos, self.link, self.head, self.tail = row, pos, link, head, tail
        self.prefix, self.suffix, self.first, self.lens = prefix, suffix, first, lens

    def need(self, topo, chunk_bytes: int) -> np.ndarray:
        """Rule 2's minimum duration of every row (µs)."""
        if not len(self.first):
            self.min_bw = self.sum_lat = np.zeros(0)
            return np.zeros(0)
        self.min_bw = np.minimum.reduceat(topo.bw_GiBps[self.link], self.first)
        self.sum_lat = np.add.reduceat(topo.lat_us[self.link], self.first)
        # the cost model's own function, so a one-hop row needs exactly problem.link_time_us of its link
        return link_time_us(self.min_bw, self.sum_lat, chunk_bytes)


def _parse_route(r: str, topo, kind: np.ndarray) -> tuple[list[int], str]:
    """The nodes of route ``r`` and what breaks rule 1 in it ("" when nothing)."""
    V = topo.num_nodes
    try:
        nodes = [int(x) for x in r.split(">")]
    except ValueError:
        return [], "is not node ids joined by '>'"
    if len(nodes) < 2:
        return [], "names fewer than two nodes"
    for x in nodes:
        if not 0 <= x < V:
            return [], f"has node {x} out of range 0..{V - 1}"
    seen = set()
    for x in nodes:
        if x in seen:  # a loop: a route is a simple path (a shorter route would use a subset of its links)
            return [], f"visits node {x} twice"
        seen.add(x)
    for x in nodes[1:-1]:
        if kind[x] != CUT:
            return [], (f"crosses {node_text(kind, x)}, but only cut_through switches may be interior nodes "
                        f"(a store-and-forward hop is a row of its own)")
    ids = topo.link_ids(nodes[:-1], nodes[1:])
    bad = np.flatnonzero(ids < 0)
    if bad.size:
        p = int(bad[0])
        return [], f"has no link {nodes[p]}->{nodes[p + 1]}"
    return nodes, ""


def _check_occupancy(schedule: Schedule, topo, seg: _Segments, kind, mcast, red, need, tol) -> float:
    """Rule 3; returns the links' busy time (a link a group shares counted once).

    A multicast group's routes form a tree rooted at ``src``: two members share a link exactly when they
    share the route up to and including it (the same ``prefix`` id), so the unit of occupancy is
    (group, prefix); a node where members sharing a hop continue on different hops is a branching node. A
    reduction group is the mirror (group, suffix) with merging nodes.
    """
    T = len(schedule)
    seg.group = np.zeros(T, np.int64)
    seg.uid = np.zeros(len(seg.row), np.int64)
    if T == 0:
        return 0.0
    chunk, src, dst, op = schedule.chunk, schedule.src, schedule.dst, schedule.op
    start, end = schedule.start_us, schedule.end_us
    anchor = np.where(op == COPY, src, dst)
    o = np.lexsort((end, start, anchor, chunk, op))
    brk = np.ones(T, bool)
    brk[1:] = ((op[o][1:] != op[o][:-1]) | (chunk[o][1:] != chunk[o][:-1]) | (anchor[o][1:] != anchor[o][:-1])
               | (start[o][1:] != start[o][:-1]) | (end[o][1:] != end[o][:-1]))
    group = np.empty(T, np.int64)
    group[o] = np.cumsum(brk) - 1
    row = seg.row
    is_copy = op[row] == COPY
    tree = np.where(is_copy, seg.prefix, seg.suffix)
    _, uid, counts = np.unique(group[row] * (int(tree.max()) + 1) + tree, return_inverse=True, return_counts=True)
    uid = uid.ravel()
    seg.group, seg.uid = group, uid
    shared = counts[uid] > 1
    last = seg.pos == seg.lens[row] - 1

    # identical routes: a copy sharing its last hop (or a reduction its first) shares the whole route
    dup = np.flatnonzero(shared & np.where(is_copy, last, seg.pos == 0))
    if dup.size:
        mates = np.sort(row[uid == uid[dup[0]]])
        a, b = mates[0], mates[1]
        raise VerificationError(f"{row_text(schedule, b)}: duplicates {row_text(schedule, a)} (same chunk, times and route)")

    # branching (multicast) and merging (reduce) nodes
    for copy, flag, verb, lacks in ((True, mcast, "branch", "has no multicast"),
                                    (False, red, "merge", "does not reduce")):
        # pairs (shared hop, neighbouring hop of the same row): downstream for copies, upstream for reductions
        s = np.flatnonzero(shared & (is_copy == copy) & (~last if copy else seg.pos > 0))
        if not s.size:
            continue
        nb = uid[s + 1] if copy else uid[s - 1]
        pairs = np.unique(np.stack([uid[s], nb], 1), axis=0)
        multi = np.flatnonzero(pairs[1:, 0] == pairs[:-1, 0])
        if not multi.size:
            continue
        hub_of = seg.head[s] if copy else seg.tail[s]
        fork = np.isin(uid[s], pairs[multi + 1, 0])
        bad = np.flatnonzero(fork & ~flag[hub_of])
        if bad.size:
            u0 = uid[s[bad[0]]]
            mine = s[uid[s] == u0]
            others = nb[uid[s] == u0]
            a = row[mine[0]]
            b = row[mine[np.flatnonzero(others != others[0])[0]]]
            a, b = min(a, b), max(a, b)
            lk = seg.link[s[bad[0]]]
            hub = int(hub_of[bad[0]])
            what = "multicast group" if copy else "reduction group"
            raise VerificationError(
                f"{row_text(schedule, b)}: shares link {int(topo.src[lk])}->{int(topo.dst[lk])} with "
                f"{row_text(schedule, a)} (one {what}), but they {verb} at {node_text(kind, hub)}, which {lacks}")

    # distinct occupancies per link may not overlap
    nu = int(counts.size)
    rep = np.zeros(nu, np.int64)
    rep[uid[::-1]] = row[::-1]      # the first row of each occupancy
    u_link = np.zeros(nu, np.int64)
    u_link[uid] = seg.link
    u_need = np.zeros(nu)
    np.maximum.at(u_need, uid, need[row])
    if nu > 1:
        s_, e_ = start[rep], end[rep]
        order = np.lexsort((e_, s_, u_link))
        ls, ss, es = u_link[order], s_[order], e_[order]
        clash = np.flatnonzero((ls[1:] == ls[:-1]) & (ss[1:] < es[:-1] - tol))
        if clash.size:
            ua, ub = order[clash[0]], order[clash[0] + 1]
            a, b = rep[ua], rep[ub]
            lk = u_link[ua]
            hint = ""
            if group[a] == group[b]:
                hint = (f" (one {'multicast' if op[a] == COPY else 'reduction'} group, but their routes do not "
                        f"{'agree up to' if op[a] == COPY else 'agree from'} this link)")
            raise VerificationError(f"{row_text(schedule, b)}: overlaps {row_text(schedule, a)} on link "
                                    f"{int(topo.src[lk])}->{int(topo.dst[lk])}{hint}")
    return float(u_need.sum())

def _fifo_copies(schedule: Schedule, seg: _Segments, fifo_copy, C: int, tol):
    """Rule 5 for copies leaving store_forward switches without multicast: the k-th outgoing packet of a
    chunk (by start) needs the k-th incoming copy (by end) to have ended by its start. Returns the rows that
    break it, the arrival each needed (inf: none) and its rank."""
    chunk, src, dst, op = schedule.chunk, schedule.src, schedule.dst, schedule.op
    start, end = schedule.start_us, schedule.end_us
    out = np.flatnonzero(fifo_copy[src] & (op == COPY))
    if not out.size:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    # members of one multicast group leaving on one link are one packet
    pkt = seg.uid[seg.first[out]]
    _, keep = np.unique(pkt, return_index=True)
    out = out[np.sort(keep)]
    ko = src[out].astype(np.int64) * C + chunk[out]
    oo = np.lexsort((out, start[out], ko))
    out, ko = out[oo], ko[oo]
    rank = np.arange(out.size) - np.searchsorted(ko, ko, "left")
    inc = np.flatnonzero(fifo_copy[dst] & (op == COPY))
    ki = dst[inc].astype(np.int64) * C + chunk[inc]
    io = np.lexsort((inc, end[inc], ki))
    ki, ei = ki[io], end[inc][io]
    at = np.searchsorted(ki, ko, "left") + rank
    ok = at < ki.size
    ok[ok] = ki[at[ok]] == ko[ok]
    arrive = np.full(out.size, np.inf)
    arrive[ok] = ei[at[ok]]
    bad = np.flatnonzero(arrive > start[out] + tol)
    return out[bad], arrive[bad], rank[bad]


def _fifo_error(schedule: Schedule, seg: _Segments, i: int, k: int, s: int, c: int, o: int, tol: float):
    """Raise for row ``i``, the ``k``-th packet switch ``s`` sends of chunk ``c`` with nothing left to forward."""
    what, flag = ("copy", "multicast") if o == COPY else ("reduce packet", "reduce")
    inc = np.flatnonzero((schedule.dst == s) & (schedule.chunk == c) & (schedule.op == o))
    # members of one reduction group entering on one link are one packet
    _, one = np.unique(seg.uid[seg.first[inc] + seg.lens[inc] - 1], return_index=True)
    ends = np.sort(schedule.end_us[inc[one]]) if o == REDUCE else np.sort(schedule.end_us[inc])
    have = int(np.sum(ends <= schedule.start_us[i] + tol))
    later = (f"the {_ordinal(k)} arrives only at {ends[k - 1]:.6f} µs" if ends.size >= k
             else f"only {ends.size} ever arrive")
    raise VerificationError(
        f"{row_text(schedule, i)}: non-causal: store_forward switch {s} has no {flag}, so it forwards each "
        f"incoming {what} of chunk {c} once (first in, first out); this is its {_ordinal(k)} outgoing one, "
        f"but {have} arrived by {schedule.start_us[i]:.6f} µs ({later})")
