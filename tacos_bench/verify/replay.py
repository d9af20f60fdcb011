"""The replay of a table schedule on any network: the rules in the order they are checked, and the state
replay (rules 4-6 of docs/fabrics.md) every network shares.

A point-to-point topology is a network without switches: every node an NPU, no switch that forwards first in,
first out, so the same state replay serves both kinds; the network's rules object
(:class:`tacos_bench.verify.table.PointToPoint`, :class:`tacos_bench.verify.fabric.Fabric`) gives it the node
kinds, the FIFO switches and their checks.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import VerificationError
from ..problem import Problem
from ..schedule import COPY, REDUCE, Schedule
from .arrivals import earliest_arrivals
from .result import Verification
from .rules import (accepted, check_durations, check_fault, check_ids_and_times, check_release, missing_text,
                    node_text, row_text, tolerance)

# Up to this many (node, chunk) pairs the copy replay keeps the earliest arrivals in a dense table (one float
# each, an unbuffered np.minimum.at: several times faster than sorting the arrivals); beyond, it sorts them.
DENSE_LIMIT = 200_000_000


def replay(problem: Problem, schedule: Schedule, fault, network) -> Verification:
    """Check ``schedule`` rule by rule, the network-dependent ones by ``network(problem, schedule)``; raise
    :class:`VerificationError` on the first broken rule."""
    makespan = schedule.makespan_us
    tol = tolerance(problem, makespan)
    check_ids_and_times(schedule, problem.num_chunks, problem.topology.num_nodes, tol)
    net = network(problem, schedule)                               # rule 1: endpoints, links, routes
    need = net.need()                                              # rule 2: durations
    check_durations(schedule, need, tol, net.need_text)
    alive = None if fault is None else check_fault(problem, schedule, fault, net.row, net.link, tol)
    if problem.has_release:
        check_release(problem, schedule, net.row, net.link, tol)
    busy = net.occupancy(need, tol)                                # rule 3: one occupancy at a time per link
    if problem.collective.copies and (len(schedule) == 0 or not np.any(schedule.op == REDUCE)):
        _replay_copies(problem, schedule, net, tol, alive)         # rules 4-6, vectorized
    else:
        _replay_general(problem, schedule, net, tol, alive)
    return accepted(problem.topology.num_links, len(schedule), makespan, busy)


def _replay_copies(problem: Problem, schedule: Schedule, net, tol: float, alive) -> None:
    """Vectorized replay of a copy-only schedule of a copy collective (one source per chunk).

    Every value is the whole chunk, so a copy is valid when its sender is the chunk's source or received the
    chunk by the start (NPUs and switches with multicast: the earliest arrival decides) or, from a
    store_forward switch without multicast, when the arrival it consumes (the k-th, first in, first out)
    ended by the start (``net.fifo_copies``). Every row takes positive time, so checking all rows against all
    arrivals (invalid ones too) cannot accept a cycle: the earliest-ending ungrounded row would read an even
    earlier arrival. Only the (node, chunk) pairs a row touches are looked at when the dense table would be
    large (All-to-All has N^2 K chunks).
    """
    n, C = problem.num_npus, problem.num_chunks
    chunk, src, dst = schedule.chunk, schedule.src, schedule.dst
    start, end = schedule.start_us, schedule.end_us
    source = problem.sources
    T = len(schedule)
    dense = len(net.kind) * C <= DENSE_LIMIT
    received = None                     # dense: the (NPU, chunk) pairs an arrival reached
    npu_keys = np.zeros(0, np.int64)    # sparse: the distinct (NPU, chunk) keys arrivals reached, sorted
    if dense and not T:
        received = np.zeros(n * C, bool)
    if T:
        if float(np.min(end - start)) <= 0:
            i = int(np.argmin(end - start))
            raise VerificationError(f"{row_text(schedule, i)}: a transfer must take positive time")
        key_in = dst.astype(np.int64) * C + chunk
        key_hold = src.astype(np.int64) * C + chunk
        if dense:
            earliest = np.full(len(net.kind) * C, np.inf)
            np.minimum.at(earliest, key_in, end)
            hold_t = earliest[key_hold]
            received = np.isfinite(earliest[:n * C])
        else:
            uniq, hold_t = earliest_arrivals(key_in, end, key_hold)
            npu_keys = uniq[uniq < n * C]
        need = src != source[chunk]     # a switch is never a chunk's source
        fifo = net.fifo_copy.any()
        if fifo:                        # the FIFO switches' sends are checked by net.fifo_copies instead
            need &= ~net.fifo_copy[src]
        bad = np.flatnonzero(need & (hold_t > start + tol))
        cand = []   # (start, row, which rule): the earliest-starting violation is reported
        if bad.size:
            i = bad[np.argmin(start[bad])]
            cand.append((float(start[i]), int(i), None))
        if fifo:
            fbad, f_arrive, f_rank = net.fifo_copies(tol)
            if fbad.size:
                j = int(np.argmin(start[fbad]))
                cand.append((float(start[fbad[j]]), int(fbad[j]), (int(f_rank[j]) + 1, float(f_arrive[j]))))
        if cand:
            _, i, fifo_miss = min(cand, key=lambda x: x[:2])
            if fifo_miss is not None:
                net.fifo_copy_error(i, *fifo_miss)
            when = "never receives it" if not np.isfinite(hold_t[i]) else f"receives it only at {hold_t[i]:.6f} µs"
            raise VerificationError(
                f"{row_text(schedule, i)}: non-causal: {node_text(net.kind, src[i])} does not hold chunk "
                f"{int(chunk[i])} at {start[i]:.6f} µs ({when})")
    _copy_postcondition(problem, received, npu_keys, alive)


def _copy_postcondition(problem: Problem, received, npu_keys: np.ndarray, alive) -> None:
    """Rule 6 of a copy collective: every required (NPU, chunk) is the source or was reached; ``received``
    (dense: a mask over the keys ``v * C + c``, changed here) or else ``npu_keys`` (sparse) says which pairs
    arrivals reached."""
    n, C = problem.num_npus, problem.num_chunks
    source, dest = problem.sources, problem.destinations
    live = np.ones(n, bool) if alive is None else alive
    c_all = np.arange(C, dtype=np.int64)
    if problem.collective.general:
        # a chunk table: its required (NPU, chunk) pairs, whatever mix of one, some and every NPU they are
        dv, dc = problem.demand.required_pairs()
        keep = live[dv]
        req = dv[keep] * C + dc[keep]
        have = received[req] if received is not None else np.isin(req, npu_keys)
        missing = np.sort(req[~have])
        n_missing = missing.size
    elif (dest < 0).all():
        if received is not None:
            got = received
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
            if short.size:   # the pairs of the first short chunk, in NPU order
                c = int(short[0])
                got = set((npu_keys[rc == c] // C).tolist())
                missing = np.array([v * C + c for v in range(n) if v != source[c] and v not in got and live[v]])
    else:
        keep = (dest >= 0) & (dest != source) & live[np.maximum(dest, 0)]
        req = (dest * C + c_all)[keep]
        if received is not None:
            have = received[req]
        else:
            have = np.isin(req, npu_keys)
        missing = req[~have]
        n_missing = missing.size
    if n_missing:
        miss = int(missing[0])
        raise VerificationError(missing_text(miss // C, miss % C, n_missing))


def _replay_general(problem: Problem, schedule: Schedule, net, tol: float, alive) -> None:
    """Event replay with per-(node, chunk) contribution bitmasks (Python ints) and, for the switches that forward
    first in, first out, per-(switch, chunk, op) queues."""
    n, C = problem.num_npus, problem.num_chunks
    kind = net.kind
    V = len(kind)
    full = (1 << n) - 1
    if problem.collective.general:
        state = _table_state(problem)
    elif problem.collective.reduces:
        state = [[1 << v] * C for v in range(n)]
    else:
        state = [[0] * C for _ in range(n)]
        for c, v in enumerate(problem.sources.tolist()):
            state[v][c] = full
    state += [[0] * C for _ in range(V - n)]   # a switch holds no data of its own
    T = len(schedule)
    if T:
        chunk = schedule.chunk.tolist()
        src = schedule.src.tolist()
        dst = schedule.dst.tolist()
        op = schedule.op.tolist()
        end_l = schedule.end_us.tolist()
        opa = schedule.op
        fifo = net.fifo_copy.any() or net.fifo_red.any()
        if fifo:
            fifo_out = np.where(opa == COPY, net.fifo_copy[schedule.src], net.fifo_red[schedule.src]).tolist()
            fifo_in = np.where(opa == COPY, net.fifo_copy[schedule.dst], net.fifo_red[schedule.dst]).tolist()
            out_pkt, in_pkt = net.packets()
        else:
            fifo_out = fifo_in = [False] * T
        # arrivals by end - tol, so that one counts for a read at the same instant; reads at their start
        order = schedule.event_order(tol)
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
                            net.fifo_error(i, k, s, c, o, tol)
                        v = q.popleft()[0]
                        popped[qk] = k
                        sent[pk] = v
                else:
                    v = state[s][c]
                    if s >= n and o == REDUCE:
                        # a store-and-forward switch that reduces combines what it buffered into this packet
                        # and drains its buffer: each contribution leaves it once (an empty packet carries nothing)
                        state[s][c] = 0
                    elif v == 0:
                        raise VerificationError(
                            f"{row_text(schedule, i)}: non-causal: {node_text(kind, s)} holds no part of chunk {c} "
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
                            if ent[0] & v:
                                _twice(schedule, i, ent[0] & v, n, f"{node_text(kind, d)} (merged into one packet)")
                            ent[0] |= v
                            continue
                        ent = merging[pk] = [v]
                    else:
                        ent = [v]
                    queues.setdefault(qk, deque()).append(ent)
                    continue
                cur = state[d][c]
                if o == COPY:
                    new = v
                else:
                    if cur & v:
                        _twice(schedule, i, cur & v, n, node_text(kind, d))
                    new = cur | v
                key = d * C + c
                prev = last.get(key)
                if prev is not None and end_l[i] - prev[0] <= tol and COPY in (o, prev[1]) and new != cur:
                    raise VerificationError(
                        f"{row_text(schedule, i)}: races with another transfer landing on {node_text(kind, d)}, "
                        f"chunk {c} at the same instant; with a copy involved the result depends on their order")
                state[d][c] = new
                last[key] = (end_l[i], o)
    _check_post(problem, state, alive)


def _twice(schedule: Schedule, i: int, both: int, n: int, where: str) -> None:
    """Raise for row ``i``, whose reduction adds the contributions ``both`` a second time at ``where``."""
    twice = [k for k in range(n) if both >> k & 1][:5]
    raise VerificationError(
        f"{row_text(schedule, i)}: reduction counts the contribution of NPU(s) {', '.join(map(str, twice))} "
        f"twice at {where}")


def _table_state(problem: Problem) -> list:
    """The state before a chunk table's collective: a copy chunk complete at its source, each source of a
    reduce chunk holding its own contribution."""
    d = problem.demand
    n, C = problem.num_npus, problem.num_chunks
    state = [[0] * C for _ in range(n)]
    for c in range(C):
        srcs = d.sources_of(c).tolist()
        if d.op[c] == COPY:
            state[srcs[0]][c] = (1 << n) - 1
        else:
            for v in srcs:
                state[v][c] = 1 << v
    return state


def _complete(problem: Problem) -> list:
    """Per chunk, the contributions a destination must hold: every NPU's for a copy (complete) or a named
    collective, its sources' for a reduce chunk of a table."""
    n, C = problem.num_npus, problem.num_chunks
    full = (1 << n) - 1
    if not problem.collective.general:
        return [full] * C
    d = problem.demand
    return [full if d.op[c] == COPY else sum(1 << v for v in d.sources_of(c).tolist()) for c in range(C)]


def _check_post(problem: Problem, state: list, alive=None) -> None:
    """Rule 6: over the NPUs only (``state[v][c]``: the contributions NPU ``v`` holds of chunk ``c``)."""
    n, C = problem.num_npus, problem.num_chunks
    full = _complete(problem)
    if problem.collective.general:
        dv, dc = problem.demand.required_pairs()
        pairs = zip(dv.tolist(), dc.tolist())
    else:
        dest = problem.destinations.tolist()
        pairs = ((v, c) for c in range(C) for v in (range(n) if dest[c] < 0 else (dest[c],)))
    missing = []
    for v, c in pairs:
        if state[v][c] != full[c] and (alive is None or alive[v]):
            missing.append((v, c))
    if missing:
        v, c = min(missing)
        have = state[v][c]
        lacking = [k for k in range(n) if not (have >> k & 1)]
        what = ("holds nothing" if have == 0 else
                f"lacks the contribution(s) of NPU(s) {', '.join(map(str, lacking[:5]))}"
                + ("..." if len(lacking) > 5 else ""))
        raise VerificationError(
            f"postcondition unmet: NPU {v}, chunk {c} {what} at the end ({len(missing)} (NPU, chunk) pairs wrong)")
