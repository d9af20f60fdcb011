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

from collections import deque
from dataclasses import replace

import numpy as np

from ..cost import link_time_us
from ..errors import VerificationError
from ..problem import Problem
from ..schedule import COPY, OPS, REDUCE, Schedule
from ..topology.model import CUT_THROUGH
from .arrivals import earliest_arrivals
from .result import REL_TOL, TOL_LINK_FRACTION, Verification

NPU, CUT, STORE = 0, 1, 2   # node kinds
# above this many (NPU, chunk) pairs the copy postcondition is checked per short chunk, not on a dense table
DENSE_POST_LIMIT = 50_000_000


def _row(schedule: Schedule, i: int) -> str:
    i = int(i)
    r = "" if schedule.route is None else schedule.route[i]
    via = f" via {r}" if r else ""
    return (f"row {i} (chunk {int(schedule.chunk[i])}, {int(schedule.src[i])}->{int(schedule.dst[i])}{via}, "
            f"{schedule.start_us[i]:.6f}-{schedule.end_us[i]:.6f} µs, {OPS[int(schedule.op[i])]})")


def _node(kind: np.ndarray, v: int) -> str:
    v = int(v)
    return ("NPU", "cut_through switch", "store_forward switch")[int(kind[v])] + f" {v}"


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
    topo = problem.topology
    n, C, V = problem.num_npus, problem.num_chunks, topo.num_nodes
    T = len(schedule)
    makespan = schedule.makespan_us
    tol = REL_TOL * max(1.0, abs(makespan))
    if problem.num_links:
        # as in the point-to-point replay: the tolerance absorbs float rounding only
        tol = min(tol, TOL_LINK_FRACTION * float(problem.link_time_us.min()))

    chunk, src, dst, op = schedule.chunk, schedule.src, schedule.dst, schedule.op
    start, end = schedule.start_us, schedule.end_us

    kind = np.zeros(V, np.int8)
    mcast = np.zeros(V, bool)
    red = np.zeros(V, bool)
    for j, sw in enumerate(topo.switches):
        kind[n + j] = CUT if sw.mode == CUT_THROUGH else STORE
        mcast[n + j], red[n + j] = sw.multicast, sw.reduce

    # --- ids and times ----------------------------------------------------------
    for name, arr, hi in (("chunk", chunk, C), ("src", src, V), ("dst", dst, V)):
        bad = np.flatnonzero((arr < 0) | (arr >= hi))
        if bad.size:
            raise VerificationError(f"{_row(schedule, bad[0])}: {name} id out of range 0..{hi - 1}")
    bad = np.flatnonzero(~np.isfinite(start) | ~np.isfinite(end) | (start < -tol))
    if bad.size:
        raise VerificationError(f"{_row(schedule, bad[0])}: times must be finite and start >= 0")

    # --- rule 1: endpoints and routes -------------------------------------------
    for name, arr in (("src", src), ("dst", dst)):
        bad = np.flatnonzero(kind[arr] == CUT)
        if bad.size:
            i = bad[0]
            raise VerificationError(
                f"{_row(schedule, i)}: {name} {int(arr[i])} is a cut_through switch, which is never a row's "
                f"endpoint (a transfer through it is one row whose route names it)")
    seg = _Segments(schedule, topo, kind)

    # --- rule 2: durations --------------------------------------------------------
    need = seg.need(topo, problem.chunk_bytes)
    bad = np.flatnonzero(end - start < need - tol)
    if bad.size:
        i = bad[0]
        what = ("the link time" if seg.lens[i] == 1 else
                f"its route's time (latencies {seg.sum_lat[i]:.6f} µs + the chunk at the slowest link's "
                f"{seg.min_bw[i]:g} GiB/s)")
        raise VerificationError(
            f"{_row(schedule, i)}: lasts {end[i] - start[i]:.6f} µs, shorter than {what} {need[i]:.6f} µs")

    alive = None
    if fault is not None:
        failed = np.zeros(problem.num_links, bool)
        if fault.links:
            failed[replace(fault, npus=()).failed_link_ids(topo)] = True
        # a failed NPU loses every link touching it (Fault.failed_link_ids sizes its mask by NPUs only, and a
        # fabric's links also touch switches)
        dead = np.zeros(V, bool)
        dead[list(fault.npus)] = True
        failed |= dead[topo.src] | dead[topo.dst]
        hit = failed[seg.link] & (end[seg.row] > fault.at_us + tol)
        if hit.any():
            rows = seg.row[hit]
            k = int(np.argmin(start[rows]))
            i, lk = rows[k], seg.link[hit][k]
            raise VerificationError(f"{_row(schedule, i)}: link {int(topo.src[lk])}->{int(topo.dst[lk])} fails "
                                    f"at {fault.at_us:.6f} µs, before this transfer ends")
        alive = np.ones(n, bool)
        alive[list(fault.npus)] = False

    # --- rule 3: occupancy, multicast and reduction groups ------------------------
    busy = _check_occupancy(schedule, topo, seg, kind, mcast, red, need, tol)

    # --- rules 4-6: state replay and postcondition --------------------------------
    fifo_copy = (kind == STORE) & ~mcast      # forwards copies first in, first out
    fifo_red = (kind == STORE) & ~red         # forwards reduce packets first in, first out
    if problem.collective.copies and (T == 0 or not np.any(op == REDUCE)):
        _replay_copies(problem, schedule, seg, kind, fifo_copy, tol, alive)
    else:
        _replay_general(problem, schedule, seg, kind, fifo_copy, fifo_red, tol, alive)

    util = busy / (topo.num_links * makespan) if makespan > 0 and topo.num_links else None
    return Verification(True, makespan, T, busy, util, "")


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
            raise VerificationError(f"{_row(schedule, i)}: unknown link {int(src[i])}->{int(dst[i])}")

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
            raise VerificationError(f"{_row(schedule, i)}: {msg}")

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
            return [], (f"crosses {_node(kind, x)}, but only cut_through switches may be interior nodes "
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
        raise VerificationError(f"{_row(schedule, b)}: duplicates {_row(schedule, a)} (same chunk, times and route)")

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
                f"{_row(schedule, b)}: shares link {int(topo.src[lk])}->{int(topo.dst[lk])} with "
                f"{_row(schedule, a)} (one {what}), but they {verb} at {_node(kind, hub)}, which {lacks}")

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
            raise VerificationError(f"{_row(schedule, b)}: overlaps {_row(schedule, a)} on link "
                                    f"{int(topo.src[lk])}->{int(topo.dst[lk])}{hint}")
    return float(u_need.sum())


def _replay_copies(problem: Problem, schedule: Schedule, seg: _Segments, kind, fifo_copy, tol, alive) -> None:
    """Vectorized replay of a copy-only schedule of a copy collective.

    Every value is the whole chunk, so a copy is valid when its sender is the chunk's source or received the
    chunk by the start (NPUs and switches with multicast: the earliest arrival decides) or, from a
    store_forward switch without multicast, when the arrival it consumes (the k-th, first in, first out)
    ended by the start. Every row takes positive time, so checking all rows against all arrivals (invalid
    ones too) cannot accept a cycle: the earliest-ending ungrounded row would read an even earlier arrival.
    """
    n, C = problem.num_npus, problem.num_chunks
    chunk, src, dst = schedule.chunk, schedule.src, schedule.dst
    start, end = schedule.start_us, schedule.end_us
    source = problem.sources
    T = len(schedule)
    key_in = dst.astype(np.int64) * C + chunk
    uniq = np.zeros(0, np.int64)
    if T:
        key_hold = src.astype(np.int64) * C + chunk
        uniq, hold_t = earliest_arrivals(key_in, end, key_hold)
        # the FIFO switches' sends are checked below instead
        need = (src != np.where(src < n, source[chunk], -1)) & ~fifo_copy[src]
        bad = np.flatnonzero(need & (hold_t > start + tol))

        fbad, f_arrive, f_rank = _fifo_copies(schedule, seg, fifo_copy, C, tol)
        cand = []   # (start, row, which rule): the earliest-starting violation is reported
        if bad.size:
            i = bad[np.argmin(start[bad])]
            cand.append((float(start[i]), int(i), -1))
        if fbad.size:
            j = int(np.argmin(start[fbad]))
            cand.append((float(start[fbad[j]]), int(fbad[j]), j))
        if cand:
            _, i, j = min(cand)
            c, s = int(chunk[i]), int(src[i])
            if j < 0:
                when = ("never receives it" if not np.isfinite(hold_t[i])
                        else f"receives it only at {hold_t[i]:.6f} µs")
                raise VerificationError(
                    f"{_row(schedule, i)}: non-causal: {_node(kind, s)} does not hold chunk {c} at "
                    f"{start[i]:.6f} µs ({when})")
            k, arr = int(f_rank[j]) + 1, f_arrive[j]
            when = "never arrives" if not np.isfinite(arr) else f"arrives only at {arr:.6f} µs"
            raise VerificationError(
                f"{_row(schedule, i)}: non-causal: store_forward switch {s} has no multicast, so its "
                f"{_ordinal(k)} outgoing copy of chunk {c} forwards its {_ordinal(k)} incoming copy (first in, "
                f"first out), which {when}")

    # postcondition over the NPUs: every required (NPU, chunk) is the source or was reached
    npu_keys = uniq[uniq < n * C]
    dest = problem.destinations
    live = np.ones(n, bool) if alive is None else alive
    c_all = np.arange(C, dtype=np.int64)
    if (dest < 0).all():
        if n * C <= DENSE_POST_LIMIT:
            got = np.zeros(n * C, bool)
            got[npu_keys] = True
            got[source * C + c_all] = True
            got.reshape(n, C)[~live] = True   # failed NPUs need nothing
            missing = np.flatnonzero(~got)
            n_missing = missing.size
        else:
            rc, rv = npu_keys % C, npu_keys // C
            cnt = np.bincount(rc[(rv != source[rc]) & live[rv]], minlength=C)
            want = int(live.sum()) - live[source].astype(np.int64)
            short = np.flatnonzero(cnt < want)
            n_missing = int((want - cnt).sum())
            missing = np.zeros(0, np.int64)
            if short.size:
                c = int(short[0])
                got = set((npu_keys[rc == c] // C).tolist())
                missing = np.array([v * C + c for v in range(n) if v != source[c] and v not in got and live[v]])
    else:
        req = dest * C + c_all
        keep = (dest >= 0) & (dest != source)
        keep &= live[np.maximum(dest, 0)]
        req = req[keep]
        missing = req[~np.isin(req, npu_keys)]
        n_missing = missing.size
    if n_missing:
        miss = int(missing[0])
        raise VerificationError(
            f"postcondition unmet: NPU {miss // C} never receives chunk {miss % C} "
            f"({n_missing} (NPU, chunk) pairs missing)")


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


def _replay_general(problem: Problem, schedule: Schedule, seg: _Segments, kind, fifo_copy, fifo_red, tol,
                    alive) -> None:
    """Event replay with per-(node, chunk) contribution bitmasks (Python ints) and per-(switch, chunk, op)
    FIFO queues."""
    n, C = problem.num_npus, problem.num_chunks
    full = (1 << n) - 1
    reduces = problem.collective.reduces
    source = problem.sources.tolist()

    def initial(key: int) -> int:
        v, c = divmod(key, C)
        if v >= n:
            return 0
        if reduces:
            return 1 << v
        return full if source[c] == v else 0

    state: dict[int, int] = {}
    T = len(schedule)
    if T:
        chunk = schedule.chunk.tolist()
        src = schedule.src.tolist()
        dst = schedule.dst.tolist()
        op = schedule.op.tolist()
        end_l = schedule.end_us.tolist()
        opa = schedule.op
        fifo_out = np.where(opa == COPY, fifo_copy[schedule.src], fifo_red[schedule.src]).tolist()
        fifo_in = np.where(opa == COPY, fifo_copy[schedule.dst], fifo_red[schedule.dst]).tolist()
        # members of one multicast group leaving on one link are one packet; members of one reduction
        # group entering on one link too
        out_pkt = seg.uid[seg.first].tolist()
        in_pkt = seg.uid[seg.first + seg.lens - 1].tolist()
        times = np.concatenate([schedule.end_us - tol, schedule.start_us])
        kinds = np.concatenate([np.zeros(T, np.int8), np.ones(T, np.int8)])
        idx = np.concatenate([np.arange(T), np.arange(T)])
        order = np.lexsort((idx, kinds, times))
        payload = [0] * T
        queues: dict[int, deque] = {}
        sent: dict[int, int] = {}        # packet -> payload, for the members of one outgoing packet
        merging: dict[int, list] = {}    # packet -> queue entry, for the members of one incoming packet
        popped: dict[int, int] = {}      # queue -> packets taken, for the message
        last = {}  # (node, chunk) key -> (time, op) of the latest arrival, to catch same-instant races
        for e in order.tolist():
            if e >= T:  # read at start
                i = e - T
                c, s, o = chunk[i], src[i], op[i]
                if fifo_out[i]:
                    pk = out_pkt[i] if o == COPY else -1 - i
                    v = sent.get(pk)
                    if v is None:
                        qk = (s * C + c) * 2 + o
                        q = queues.get(qk)
                        k = popped.get(qk, 0) + 1
                        if not q:
                            _fifo_error(schedule, seg, i, k, s, c, o, tol)
                        v = q.popleft()[0]
                        popped[qk] = k
                        sent[pk] = v
                else:
                    key = s * C + c
                    v = state.get(key)
                    if v is None:
                        v = initial(key)
                    if s >= n and o == REDUCE:
                        # a store-and-forward switch that reduces combines what it buffered into this packet
                        # and drains its buffer: each contribution leaves it once (an empty packet carries nothing)
                        state[key] = 0
                    elif v == 0:
                        raise VerificationError(
                            f"{_row(schedule, i)}: non-causal: {_node(kind, s)} holds no part of chunk {c} "
                            f"at {schedule.start_us[i]:.6f} µs")
                payload[i] = v
            else:  # arrival at end
                i = e
                v = payload[i]
                d, c, o = dst[i], chunk[i], op[i]
                if fifo_in[i]:
                    qk = (d * C + c) * 2 + o
                    if o == REDUCE:
                        pk = in_pkt[i]
                        ent = merging.get(pk)
                        if ent is not None:
                            _twice(schedule, i, ent[0] & v, n, f"{_node(kind, d)} (merged into one packet)")
                            ent[0] |= v
                            continue
                        ent = merging[pk] = [v]
                    else:
                        ent = [v]
                    queues.setdefault(qk, deque()).append(ent)
                    continue
                key = d * C + c
                cur = state.get(key)
                if cur is None:
                    cur = initial(key)
                if o == COPY:
                    new = v
                else:
                    _twice(schedule, i, cur & v, n, _node(kind, d))
                    new = cur | v
                prev = last.get(key)
                if prev is not None and end_l[i] - prev[0] <= tol and COPY in (o, prev[1]) and new != cur:
                    raise VerificationError(
                        f"{_row(schedule, i)}: races with another transfer landing on {_node(kind, d)}, chunk {c} "
                        f"at the same instant; with a copy involved the result depends on their order")
                state[key] = new
                last[key] = (end_l[i], o)
    _check_post(problem, state, initial, alive)


def _twice(schedule: Schedule, i: int, both: int, n: int, where: str) -> None:
    if both:
        twice = [k for k in range(n) if both >> k & 1][:5]
        raise VerificationError(
            f"{_row(schedule, i)}: reduction counts the contribution of NPU(s) {', '.join(map(str, twice))} "
            f"twice at {where}")


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
        f"{_row(schedule, i)}: non-causal: store_forward switch {s} has no {flag}, so it forwards each "
        f"incoming {what} of chunk {c} once (first in, first out); this is its {_ordinal(k)} outgoing one, "
        f"but {have} arrived by {schedule.start_us[i]:.6f} µs ({later})")


def _check_post(problem: Problem, state: dict, initial, alive=None) -> None:
    """Rule 6: over the NPUs only."""
    n, C = problem.num_npus, problem.num_chunks
    full = (1 << n) - 1
    dest = problem.destinations.tolist()
    missing = []
    for c in range(C):
        for v in (range(n) if dest[c] < 0 else (dest[c],)):
            key = v * C + c
            have = state.get(key)
            if have is None:
                have = initial(key)
            if have != full and (alive is None or alive[v]):
                missing.append((v, c, have))
    if missing:
        v, c, have = min(missing)
        lacking = [k for k in range(n) if not (have >> k & 1)]
        what = ("holds nothing" if have == 0 else
                f"lacks the contribution(s) of NPU(s) {', '.join(map(str, lacking[:5]))}"
                + ("..." if len(lacking) > 5 else ""))
        raise VerificationError(
            f"postcondition unmet: NPU {v}, chunk {c} {what} at the end ({len(missing)} (NPU, chunk) pairs wrong)")
