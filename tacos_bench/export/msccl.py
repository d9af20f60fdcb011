"""Lower a verified schedule to MSCCL-IR XML (the format the MSCCL runtime executes).

One transfer ``u -> v`` of chunk ``c`` becomes a send step on ``u`` and a
receive step on ``v``: ``r`` for a copy, ``rrc`` (receive, reduce with the
local partial sum, store) for a reduction. Each rank gets one threadblock per
(peer, channel) and direction -- ``send=peer recv=-1`` for its out-links and
``send=-1 recv=peer`` for its in-links -- plus local threadblocks
(``send=-1 recv=-1``) for the ``cpy`` steps: a rank's own chunks copied
into its output at the start (out-of-place All-Gather, and the root of an
out-of-place Broadcast, Gather or Scatter, every rank of an out-of-place
All-to-All), and arrivals that had to wait in scratch copied into place at
the end (in-place All-to-All).

Ordering, and why it cannot deadlock
------------------------------------
Every step gets the time of its event in the schedule: a send its
``start_us``, a receive its ``end_us`` (arrivals before reads at the same
instant, as in the verifier). All events are sorted once; each threadblock
executes its steps in that order, so sends and receives on a link pair up in
FIFO order (the verifier guarantees one chunk at a time per link, so start
and end order agree). A step waits (``depid``/``deps``) only for steps with
earlier events:

* read after write -- a send waits for the receive that produced the value it
  forwards;
* write after read -- a receive into a buffer slot waits for every send that
  still has to read the slot's previous value;
* write after write -- writes to one slot keep their order.

Then the earliest unfinished step can always run (its threadblock
predecessors, its dependencies, its matching send, and the receive of the
previous message on its connection are all earlier), so execution always
progresses. Dependencies inside a threadblock are dropped (program order
covers them); of several on one threadblock only the latest is kept; when a
step still waits on more than one threadblock the extra ones become ``nop``
steps placed just before it (the runtime accepts one dependency per step).

Buffers
-------
tacos-bench chunk ``c`` lives at one MSCCL buffer index per rank; ``N`` ranks,
``K = chunks_per_npu``, ``R`` the root, ``idx(c) = owner*K + k`` for
``c = k*N + owner`` (:func:`~tacos_bench.export.common.msccl_index`):

===================  =========================================  =========================================
collective           in-place (``inplace=1``)                   out-of-place (``outofplace=1``)
===================  =========================================  =========================================
All-Gather           everything in ``o`` (``i_chunks=0``);      own chunk ``k`` read from ``i[k]`` and
                     own chunks already at ``o[rank*K+k]``      copied (``cpy``) to ``o[rank*K+k]``
Reduce-Scatter       everything in ``i``; rank ``r``'s result   partial sums of other ranks' chunks in
                     at ``i[r*K+k]`` (= ``o[k]``)               scratch ``s``; own result into ``o[k]``;
                                                                ``i`` is never written
All-Reduce           everything in ``i`` (``o_chunks=0``)       results (and partial sums) in ``o[idx]``;
                                                                ``i`` is never written
Broadcast            everything in ``o[c]`` (``i_chunks=0``)    the root reads ``i[c]`` and copies it to
                                                                ``o[c]``; the others receive into ``o[c]``
Reduce               the root accumulates in ``i[c]``; other    the root accumulates in ``o[c]``; other
                     ranks' partial sums in scratch             ranks' partial sums in scratch
Gather               rank ``r``'s chunk ``k`` at                rank ``r`` reads ``i[k]``; the root
                     ``o[r*K+k]``; the root receives there      receives into ``o[idx]`` and copies its own
Scatter              the root holds ``i[idx]``; rank ``r``      rank ``r`` receives chunk ``k`` into
                     receives into ``i[r*K+k]`` (= ``o[k]``)    ``o[k]``; the root copies its own
All-to-All           one buffer ``i``: chunk ``(s, d, k)``      ``i[d*K+k]`` at ``s`` to ``o[s*K+k]`` at
                     leaves ``i[d*K+k]`` at ``s`` and lands     ``d``; each rank copies its own
                     in ``i[s*K+k]`` at ``d``                   ``i[r*K+k]`` to ``o[r*K+k]``
===================  =========================================  =========================================

A rank that relays a chunk it does not need (gather, scatter, all-to-all) or
holds a partial sum it does not own keeps it in scratch, so no user buffer a
rank does not own is written. In-place All-to-All reuses each slot for the
chunk that leaves it and the chunk that arrives in it: an arrival whose slot
still has to be read (its old chunk not sent yet) lands in scratch and is
copied into place after the last read (``cpy`` in a local threadblock).

``nchunksperloop`` is what the runtime divides the message into
(``count * sizeMultiplier / nchunksperloop`` elements per index, msccl_setup.cc):
``N*K`` for All-Gather, Reduce-Scatter, All-Reduce and All-to-All (the
runtime multiplies All-Gather, Reduce-Scatter and All-to-All counts by ``N``),
``K`` for Broadcast, Reduce, Gather and Scatter (``sizeMultiplier`` 1, and the
count of a Gather/Scatter call is one rank's share). The runtime passes no
root to the kernel and selects algorithms without looking at it, so a
Broadcast/Reduce/Gather/Scatter XML serves calls with its own root only (the
default name says which).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..collective import (ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, BROADCAST, DEMAND_KINDS, GATHER, REDUCE_SCATTER,
                          SCATTER)
from ..collective import REDUCE as REDUCE_KIND
from ..problem import Problem
from ..schedule import REDUCE, Schedule
from ..topology.model import FABRIC, POINT_TO_POINT, network_kind
from .common import ExportError, msccl_index, safe_name, verified
from .fabric import refuse_in_switch, refuse_switch_endpoints, row_text

# The runtime's <algo coll> names (msccl_parser.cc, mscclGetAlgoFromXmlFile): every tacos-bench collective
# has one. gather/scatter are reached only through RCCL's ncclGather/ncclScatter (NCCL has no such calls).
COLL_NAMES = {ALL_GATHER: "allgather", REDUCE_SCATTER: "reducescatter", ALL_REDUCE: "allreduce",
              BROADCAST: "broadcast", REDUCE_KIND: "reduce", GATHER: "gather", SCATTER: "scatter",
              ALL_TO_ALL: "alltoall"}
PROTOCOLS = ("Simple", "LL", "LL128")

# Runtime limits (msccl-executor-nccl, src/include/msccl/msccl_struct.h and msccl_parser.cc).
MAX_STEPS_PER_TB = 64           # MSCCL_MAX_NUM_STEPS; nop steps count too
MAX_COUNT = 72                  # a step's cnt must be < MSCCL_MAX_COUNT
MAX_PEER_TBS_PER_CHANNEL = 32   # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL (send tbs, recv tbs)
MAX_DEP_TB_ID = 127             # dependentBid is an int8
MAX_CHANNELS = 32               # NCCL's MAXCHANNELS
MAX_XML_NODES = 4096            # msccl_parser.h MAX_NODES: <algo> + every <gpu> + one rank's <tb>s and <step>s

@dataclass(eq=False)
class _Step:
    kind: str                       # s, r, rrc, cpy
    rank: int
    pos: int                        # global event order (cpy steps come first: negative)
    src: tuple | None = None        # (buffer, offset): local for s/rrc/cpy, the sender's slot for r
    dst: tuple | None = None        # local for r/rrc/cpy, the receiver's slot for s
    cnt: int = 1
    deps: list = field(default_factory=list)
    transfer: int = -1
    tb: "_Tb | None" = None
    index: int = -1                 # the step's s attribute (nop steps included)
    hasdep: bool = False
    waits: list = field(default_factory=list)   # final cross-threadblock dependencies


@dataclass(eq=False)
class _Tb:
    rank: int
    send: int
    recv: int
    chan: int
    steps: list = field(default_factory=list)
    id: int = -1
    rows: list = field(default_factory=list)    # ("nop", target) or ("step", step, target|None)


@dataclass
class MscclProgram:
    """The lowered program, before it is written out (kept for inspection and tests)."""

    name: str
    coll: str
    proto: str
    inplace: bool
    num_npus: int
    chunks_per_npu: int
    buffers: list                   # per rank (i_chunks, o_chunks, s_chunks)
    tbs: list                       # per rank: list of _Tb in id order
    nchannels: int
    min_bytes: int = 0
    max_bytes: int = 0
    loop_chunks: int = 0            # nchunksperloop; 0 means N*K (All-Gather, Reduce-Scatter, All-Reduce)
    root: int | None = None         # broadcast/reduce/gather/scatter: the root the XML is specific to

    @property
    def nchunksperloop(self) -> int:
        return self.loop_chunks or self.num_npus * self.chunks_per_npu

    def stats(self) -> dict:
        """Counts of threadblocks, steps (by type) and the busiest threadblock."""
        types: dict[str, int] = defaultdict(int)
        longest = 0
        ntb = 0
        for rank_tbs in self.tbs:
            for tb in rank_tbs:
                ntb += 1
                longest = max(longest, len(tb.rows))
                for row in tb.rows:
                    types["nop" if row[0] == "nop" else row[1].kind] += 1
        nodes = max((1 + self.num_npus + len(rank_tbs) + sum(len(tb.rows) for tb in rank_tbs)
                     for rank_tbs in self.tbs), default=0)
        return {"threadblocks": ntb, "steps": sum(types.values()), "max_steps_per_tb": longest,
                "nchannels": self.nchannels, "max_xml_nodes_per_rank": nodes,
                "step_types": dict(sorted(types.items()))}


def _coll_name(kind: str) -> str:
    if kind not in COLL_NAMES:
        if kind in DEMAND_KINDS:
            raise ExportError(f"cannot export {kind} to MSCCL: a chunk table (unequal pairs, subsets of "
                              f"destinations) is none of the runtime's collectives ({', '.join(COLL_NAMES.values())}), "
                              "whose buffers are N equal chunks; export it as json or chakra instead")
        raise ExportError(f"cannot export {kind} to MSCCL: the runtime knows {', '.join(COLL_NAMES.values())}")
    return COLL_NAMES[kind]


def _default_name(problem: Problem, inplace: bool) -> str:
    c = problem.collective
    root = f"-root{c.root}" if c.rooted else ""   # the runtime ignores the root: keep it in the name
    return safe_name(f"tacos-{_coll_name(c.kind)}{root}-{problem.topology.name}-n{problem.num_npus}"
                     f"-cpn{c.chunks_per_npu}-{'inplace' if inplace else 'outofplace'}")


class _Layout:
    """Where a collective keeps each chunk in the MSCCL buffers of one rank (the module's buffer table).

    Parameters
    ----------
    problem : Problem
        The collective, its size and root.
    inplace : bool
        The variant: in-place names one buffer for what NCCL aliases.
    """

    def __init__(self, problem: Problem, inplace: bool):
        c = problem.collective
        self.kind = c.kind
        self.n = problem.num_npus
        self.k = c.chunks_per_npu
        self.root = c.root
        self.inplace = inplace
        self.src = problem.sources.tolist()
        self.dst = problem.destinations.tolist()
        self.copies = c.copies

    @property
    def loop_chunks(self) -> int:
        """``nchunksperloop``: how many indices the runtime cuts one call's (multiplied) count into."""
        if self.kind in (BROADCAST, REDUCE_KIND, GATHER, SCATTER):
            return self.k            # sizeMultiplier 1: the count is the whole buffer or one rank's share
        return self.n * self.k       # All-to-All: N x K per rank; All-Gather, Reduce-Scatter, All-Reduce: all

    def _idx(self, c: int) -> int:
        return msccl_index(c, self.n, self.k)

    def initial(self, v: int, c: int):
        """``(buffer, index)`` holding ``v``'s data of chunk ``c`` before the collective, or None."""
        kind, n, K = self.kind, self.n, self.k
        if kind in (REDUCE_SCATTER, ALL_REDUCE):
            return ("i", self._idx(c))
        if kind == REDUCE_KIND:
            return ("i", c)
        if self.src[c] != v:
            return None
        if kind in (ALL_GATHER, GATHER):
            return ("o", self._idx(c)) if self.inplace else ("i", c // n)
        if kind == BROADCAST:
            return ("o", c) if self.inplace else ("i", c)
        if kind == SCATTER:
            return ("i", self._idx(c))
        return ("i", ((c // K) % n) * K + c % K)      # all_to_all: ordered by destination

    def final(self, v: int, c: int):
        """``(buffer, index)`` where ``v`` must hold chunk ``c`` afterwards, or None if it need not."""
        d = self.dst[c]
        if d >= 0 and d != v:
            return None
        kind, n, K = self.kind, self.n, self.k
        if kind in (ALL_GATHER, GATHER):
            return ("o", self._idx(c))
        if kind == ALL_REDUCE:
            return ("i" if self.inplace else "o", self._idx(c))
        if kind in (REDUCE_SCATTER, SCATTER):
            return ("i", self._idx(c)) if self.inplace else ("o", c // n)
        if kind == BROADCAST:
            return ("o", c)
        if kind == REDUCE_KIND:
            return ("i" if self.inplace else "o", c)
        return ("i" if self.inplace else "o", (c // K // n) * K + c % K)   # all_to_all: ordered by source

    def buffers(self, v: int) -> tuple[int, int]:
        """``(i_chunks, o_chunks)`` of rank ``v``: what the runtime bounds-checks offsets against."""
        kind, n, K, ip, is_root = self.kind, self.n, self.k, self.inplace, v == self.root
        if kind == ALL_GATHER:
            return (0 if ip else K), n * K
        if kind == REDUCE_SCATTER:
            return n * K, (0 if ip else K)
        if kind == ALL_REDUCE:
            return n * K, (0 if ip else n * K)
        if kind == BROADCAST:
            return (0 if ip else (K if is_root else 0)), K
        if kind == REDUCE_KIND:
            return K, (0 if ip else (K if is_root else 0))
        if kind == GATHER:     # in place, a non-root's data sits at o[v*K...] (sendbuff = recvbuff + v*count)
            return (0, n * K) if ip else (K, n * K if is_root else 0)
        if kind == SCATTER:    # in place, a non-root's output is i[v*K...] (recvbuff = sendbuff + v*count)
            return (n * K, 0) if ip else (n * K if is_root else 0, K)
        return n * K, (0 if ip else n * K)


def lower_msccl(problem: Problem, schedule: Schedule, *, name: str | None = None, proto: str = "Simple",
                inplace: bool = True, max_steps_per_tb: int = MAX_STEPS_PER_TB,
                min_bytes: int = 0, max_bytes: int = 0) -> MscclProgram:
    """Lower ``schedule`` to an :class:`MscclProgram` (see :func:`export_msccl`)."""
    if proto not in PROTOCOLS:
        raise ExportError(f"proto must be one of {', '.join(PROTOCOLS)}, got {proto!r}")
    if isinstance(max_steps_per_tb, bool) or not isinstance(max_steps_per_tb, (int, np.integer)) \
            or not 1 <= max_steps_per_tb <= MAX_STEPS_PER_TB:
        raise ExportError(f"max_steps_per_tb must be an integer in 1..{MAX_STEPS_PER_TB} (the runtime's "
                          f"limit), got {max_steps_per_tb!r}")
    for label, val in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise ExportError(f"{label} must be a non-negative integer, got {val!r}")
    if max_bytes and max_bytes < min_bytes:
        raise ExportError(f"max_bytes={max_bytes} is below min_bytes={min_bytes} (0 means no limit)")
    verified(problem, schedule)
    _NETWORK_CHECKS[network_kind(problem.topology, schedule)](problem, schedule)
    inplace = bool(inplace)
    kind = problem.kind
    coll = _coll_name(kind)
    n = problem.num_npus
    cpn = problem.collective.chunks_per_npu
    name = safe_name(name) if name else _default_name(problem, inplace)
    layout = _Layout(problem, inplace)

    steps_by_transfer, cpy_steps, scratch = _build_steps(problem, schedule, layout)
    tbs = _assign_threadblocks(problem, schedule, steps_by_transfer, cpy_steps, max_steps_per_tb)
    _finalize_dependencies(tbs, max_steps_per_tb)

    buffers = [layout.buffers(v) + (scratch[v],) for v in range(n)]
    for v in range(n):
        nodes = 1 + n + len(tbs[v]) + sum(len(tb.rows) for tb in tbs[v])
        if nodes > MAX_XML_NODES:
            raise ExportError(f"NPU {v} needs {nodes} XML elements but the MSCCL runtime's parser loads at most "
                              f"{MAX_XML_NODES} per rank; use fewer chunks per NPU")
    nchannels = max((tb.chan + 1 for rank_tbs in tbs for tb in rank_tbs), default=1)
    if nchannels > MAX_CHANNELS:
        raise ExportError(f"the algorithm needs {nchannels} channels but NCCL has at most {MAX_CHANNELS}; "
                          f"use more chunks per link-time or a coarser schedule")
    return MscclProgram(name, coll, proto, inplace, n, cpn, buffers, tbs, nchannels, int(min_bytes),
                        int(max_bytes), layout.loop_chunks, problem.collective.root if problem.collective.rooted
                        else None)


def _check_fabric(problem: Problem, schedule: Schedule) -> None:
    """On a switched fabric MSCCL takes NPU-to-NPU sends only: a row through cut-through switches is one send
    (the network routes it); a store-and-forward hop (a switch as endpoint) or an in-switch operation (rows
    sharing a link: a multicast or reduction group) is refused, and so are rows between one pair of NPUs
    that overlap in time (one in-order connection per pair and channel carries them)."""
    from ..verify import REL_TOL

    refuse_switch_endpoints(problem, schedule, "MSCCL", " (json and chakra take it)")
    refuse_in_switch(problem, schedule, "MSCCL")
    tol = REL_TOL * max(1.0, abs(schedule.makespan_us))
    o = np.lexsort((schedule.end_us, schedule.start_us, schedule.dst, schedule.src))
    src, dst = schedule.src[o], schedule.dst[o]
    same = (src[1:] == src[:-1]) & (dst[1:] == dst[:-1])
    bad = np.flatnonzero(same & (schedule.start_us[o][1:] < schedule.end_us[o][:-1] - tol))
    if bad.size:
        a, b = int(o[bad[0]]), int(o[bad[0] + 1])
        raise ExportError(f"cannot export to MSCCL: {row_text(schedule, b)} overlaps {row_text(schedule, a)} "
                          f"between the same two NPUs over different routes; MSCCL has one in-order connection "
                          f"per pair of ranks")



# what MSCCL refuses on each network kind beyond what every schedule must be (tacos_bench.topology.network_kind)
_NETWORK_CHECKS = {POINT_TO_POINT: lambda problem, schedule: None, FABRIC: _check_fabric}

def _build_steps(problem: Problem, schedule: Schedule, layout: _Layout):
    """One step per transfer endpoint, plus local copies, with read/write hazard dependencies."""
    from ..verify import REL_TOL

    n = problem.num_npus
    C = problem.num_chunks
    T = len(schedule)
    chunk = schedule.chunk.tolist()
    src = schedule.src.tolist()
    dst = schedule.dst.tolist()
    op = schedule.op.tolist()
    tol = REL_TOL * max(1.0, abs(schedule.makespan_us))

    # Same event order as the verifier: arrivals at end - tol, reads at start; arrivals first on ties.
    times = np.concatenate([schedule.end_us - tol, schedule.start_us])
    kinds = np.concatenate([np.zeros(T, np.int8), np.ones(T, np.int8)])
    ids = np.concatenate([np.arange(T), np.arange(T)])
    order = np.lexsort((ids, kinds, times)).tolist()
    # The last event at which each rank still reads its value of a chunk: a slot holding it is busy until then.
    last_read: dict[tuple[int, int], int] = {}
    for pos, e in enumerate(order):
        if kinds[e]:
            last_read[(src[ids[e]], chunk[ids[e]])] = pos

    scratch_slot: dict[tuple[int, int], int] = {}
    scratch = [0] * n

    def scratch_of(v: int, c: int):
        key = (v, c)
        if key not in scratch_slot:
            scratch_slot[key] = scratch[v]
            scratch[v] += 1
        return ("s", scratch_slot[key])

    state: dict[tuple[int, int], tuple] = {}          # (rank, chunk) -> (location, writer step or None)
    last_write: dict[tuple, _Step] = {}               # (rank, buf, off) -> step
    readers: dict[tuple, list] = defaultdict(list)    # (rank, buf, off) -> steps reading since last write
    occupant: dict[tuple, int] = {}                   # (rank, buf, off) -> chunk whose value lives there
    at_final: set[tuple[int, int]] = set()            # (rank, chunk) whose final slot holds its latest value
    if layout.copies:
        for c in range(C):
            v = layout.src[c]
            occupant[(v,) + layout.initial(v, c)] = c

    cpy_steps: list[list[_Step]] = [[] for _ in range(n)]
    # A rank that starts with a chunk it must also hold elsewhere copies it first; its sends keep reading
    # the original, so nothing waits for the copy.
    pre = [[] for _ in range(n)]
    if layout.copies:
        for c in range(C):
            v = layout.src[c]
            a, b = layout.initial(v, c), layout.final(v, c)
            if b is not None and a != b:
                pre[v].append((a, b, c))
    pos = -sum(len(x) for x in pre) - 1
    for v in range(n):
        moves = sorted(pre[v], key=lambda m: (m[0], m[1]))
        i = 0
        while i < len(moves):
            # Runs of consecutive source and destination slots become one cpy of cnt chunks.
            j = i + 1
            while (j < len(moves) and j - i < MAX_STEPS_PER_TB and moves[j][0][0] == moves[i][0][0]
                   and moves[j][1][0] == moves[i][1][0] and moves[j][0][1] == moves[i][0][1] + (j - i)
                   and moves[j][1][1] == moves[i][1][1] + (j - i)):
                j += 1
            st = _Step("cpy", v, pos, src=moves[i][0], dst=moves[i][1], cnt=j - i)
            pos += 1
            cpy_steps[v].append(st)
            for a, b, c in moves[i:j]:
                last_write[(v,) + b] = st
                readers[(v,) + a].append(st)
                occupant[(v,) + b] = c
                at_final.add((v, c))
            i = j

    send_step: list[_Step | None] = [None] * T
    recv_step: list[_Step | None] = [None] * T
    for pos, e in enumerate(order):
        t = ids[e]
        c = chunk[t]
        if kinds[e]:  # the sender reads its current value of the chunk
            u = src[t]
            cur = state.get((u, c))
            if cur is None:
                loc = layout.initial(u, c)
                if loc is None:
                    raise ExportError(f"transfer {t}: NPU {u} sends chunk {c} before holding it")
                cur = (loc, None)
                state[(u, c)] = cur
            loc, writer = cur
            st = _Step("s", u, pos, src=loc, transfer=t)
            if writer is not None:
                st.deps.append(writer)
            readers[(u,) + loc].append(st)
            send_step[t] = st
        else:  # the receiver stores (copy) or accumulates (reduce) at its slot for the chunk
            v = dst[t]
            cur = state.get((v, c))
            if cur is None:
                loc0 = layout.initial(v, c)
                cur = (loc0, None) if loc0 is not None else None
            slot = layout.final(v, c)
            if slot is not None:
                old = occupant.get((v,) + slot)
                # The slot still serves another chunk (in-place All-to-All: one not sent yet): land in scratch.
                if old is not None and old != c and (last_read.get((v, old), -1) > pos or (
                        (v, old) not in at_final and layout.final(v, old) is not None
                        and state.get((v, old), (layout.initial(v, old),))[0] == slot)):
                    slot = None
            if slot is None:
                # A relay, a partial sum this rank does not own, or a displaced arrival: scratch, so no user
                # buffer the rank does not own is written.
                slot = scratch_of(v, c)
                at_final.discard((v, c))
            else:
                at_final.add((v, c))
            sender = send_step[t]
            if op[t] == REDUCE and cur is not None:
                st = _Step("rrc", v, pos, src=cur[0], dst=slot, transfer=t)
                if cur[1] is not None:
                    st.deps.append(cur[1])
                if cur[0] != slot:
                    readers[(v,) + cur[0]].append(st)
            else:
                st = _Step("r", v, pos, src=sender.src, dst=slot, transfer=t)
            key = (v,) + slot
            if key in last_write:
                st.deps.append(last_write[key])
            st.deps.extend(r for r in readers[key] if r is not st)
            last_write[key] = st
            readers[key] = []
            occupant[key] = c
            state[(v, c)] = (slot, st)
            recv_step[t] = st
            sender.dst = slot

    # Whatever is not where the collective wants it yet (a displaced arrival; a rank that never received a
    # chunk it must hold) is copied there after every event, so each copy waits only for earlier ones.
    pos = len(order)
    for v in range(n):
        for c in range(C):
            want = layout.final(v, c)
            if want is None or (v, c) in at_final:
                continue
            loc, writer = state.get((v, c), (layout.initial(v, c), None))
            if loc is None:
                raise ExportError(f"internal: NPU {v} never holds chunk {c}")
            if loc == want:
                continue
            st = _Step("cpy", v, pos, src=loc, dst=want)
            pos += 1
            key = (v,) + want
            st.deps.extend(d for d in [writer, last_write.get(key)] + readers[key] if d is not None)
            readers[(v,) + loc].append(st)
            last_write[key] = st
            readers[key] = []
            state[(v, c)] = (want, st)
            cpy_steps[v].append(st)

    steps_by_transfer = list(zip(send_step, recv_step))
    for st in [x for pair in steps_by_transfer for x in pair] + [x for steps in cpy_steps for x in steps]:
        seen, uniq = set(), []
        for d in st.deps:
            if id(d) not in seen:
                seen.add(id(d))
                uniq.append(d)
        st.deps = uniq
    return steps_by_transfer, cpy_steps, scratch


def _assign_threadblocks(problem, schedule, steps_by_transfer, cpy_steps, max_steps):
    """Split each link's transfers into channels (<= max_steps per threadblock) and build the tbs."""
    n = problem.num_npus
    # one connection per (sender, receiver): a link, or on a switched fabric a route through switches
    link = list(zip(schedule.src.tolist(), schedule.dst.tolist()))
    per_link: dict[tuple, list[int]] = defaultdict(list)
    for t in sorted(range(len(steps_by_transfer)), key=lambda t: steps_by_transfer[t][0].pos):
        per_link[link[t]].append(t)

    groups: dict[tuple, list[_Step]] = defaultdict(list)   # (rank, send, recv, chan) -> steps
    for lid, ts in per_link.items():
        recv_order = sorted(ts, key=lambda t: steps_by_transfer[t][1].pos)
        if recv_order != ts:
            raise ExportError(f"internal: link {lid[0]}->{lid[1]} delivers chunks out of send order")
        chan, used_s, used_r = 0, 0, 0
        for t in ts:
            s_st, r_st = steps_by_transfer[t]
            # Each dependency may need its own nop step: an upper bound on the steps this transfer uses.
            cs, cr = max(1, len(s_st.deps)), max(1, len(r_st.deps))
            if cs > max_steps or cr > max_steps:
                raise ExportError(f"transfer {t} ({s_st.rank}->{r_st.rank}) waits on {max(cs, cr)} steps, more "
                                  f"than fit in a threadblock of {max_steps} steps")
            if used_s + cs > max_steps or used_r + cr > max_steps:
                chan, used_s, used_r = chan + 1, 0, 0
            used_s += cs
            used_r += cr
            u, v = s_st.rank, r_st.rank
            groups[(u, v, -1, chan)].append(s_st)
            groups[(v, -1, u, chan)].append(r_st)

    tbs: list[list[_Tb]] = [[] for _ in range(n)]
    for (rank, send, recv, chan), steps in groups.items():
        tb = _Tb(rank, send, recv, chan, sorted(steps, key=lambda s: s.pos))
        tbs[rank].append(tb)
    for v in range(n):
        # Local copies get their own threadblock(s): they have no peer and must not wait for a link. Each
        # copy may need a nop per dependency, so a threadblock takes copies while that bound fits.
        local: list[_Step] = []
        used = 0
        for st in sorted(cpy_steps[v], key=lambda s: s.pos):
            cost = max(1, len(st.deps))
            if cost > max_steps:
                raise ExportError(f"a local copy on NPU {v} waits on {cost} steps, more than fit in a "
                                  f"threadblock of {max_steps} steps")
            if used + cost > max_steps:
                tbs[v].append(_Tb(v, -1, -1, 0, local))
                local, used = [], 0
            local.append(st)
            used += cost
        if local:
            tbs[v].append(_Tb(v, -1, -1, 0, local))
        # Sorted by (send, recv, chan) as msccl-tools does, so tbs using one link sit together.
        tbs[v].sort(key=lambda tb: (tb.send, tb.recv, tb.chan, tb.steps[0].pos if tb.steps else 0))
        per_chan_send: dict[int, int] = defaultdict(int)
        per_chan_recv: dict[int, int] = defaultdict(int)
        for i, tb in enumerate(tbs[v]):
            tb.id = i
            for st in tb.steps:
                st.tb = tb
            if tb.send >= 0:
                per_chan_send[tb.chan] += 1
            if tb.recv >= 0:
                per_chan_recv[tb.chan] += 1
        worst = max(list(per_chan_send.values()) + list(per_chan_recv.values()) + [0])
        if worst > MAX_PEER_TBS_PER_CHANNEL:
            raise ExportError(f"NPU {v} needs {worst} peers on one channel; the MSCCL runtime allows "
                              f"{MAX_PEER_TBS_PER_CHANNEL}")
    return tbs


def _finalize_dependencies(tbs, max_steps):
    """Drop implied dependencies, expand extra ones into nops, number the steps."""
    for rank_tbs in tbs:
        for tb in rank_tbs:
            waited: dict[int, int] = {}   # target tb id -> latest target pos already waited for
            for st in tb.steps:
                latest: dict[int, _Step] = {}
                for d in st.deps:
                    if d.pos >= st.pos:
                        raise ExportError(f"internal: step at event {st.pos} waits on a later event {d.pos}")
                    if d.tb is tb:
                        continue  # program order already covers it
                    cur = latest.get(d.tb.id)
                    if cur is None or d.pos > cur.pos:
                        latest[d.tb.id] = d
                st.waits = [d for tid, d in sorted(latest.items()) if waited.get(tid, -np.inf) < d.pos]
                for d in st.waits:
                    waited[d.tb.id] = d.pos
                    d.hasdep = True
            rows = []
            for st in tb.steps:
                for d in st.waits[:-1]:
                    rows.append(("nop", d))
                rows.append(("step", st, st.waits[-1] if st.waits else None))
            if len(rows) > max_steps:
                raise ExportError(f"internal: threadblock {tb.id} on NPU {tb.rank} has {len(rows)} steps "
                                  f"(limit {max_steps})")
            tb.rows = rows
            for i, row in enumerate(rows):
                if row[0] == "step":
                    row[1].index = i
    for rank_tbs in tbs:
        for tb in rank_tbs:
            for row in tb.rows:
                target = row[1] if row[0] == "nop" else row[2]
                if target is not None and target.tb.id > MAX_DEP_TB_ID:
                    raise ExportError(f"NPU {tb.rank}: a step waits on threadblock {target.tb.id}, but the "
                                      f"runtime stores dependency threadblock ids in 8 bits (max {MAX_DEP_TB_ID})")


def _fmt_step(s: int, kind: str, src, dst, cnt: int, dep, hasdep: bool) -> str:
    sb, so = src if src is not None else ("i", -1)
    db, do = dst if dst is not None else ("o", -1)
    depid, deps = (dep.tb.id, dep.index) if dep is not None else (-1, -1)
    return (f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" '
            f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{1 if hasdep else 0}"/>')


def render_msccl(prog: MscclProgram) -> str:
    """Write an :class:`MscclProgram` as XML text the MSCCL runtime's parser reads.

    The runtime has its own minimal XML reader: no ``<?xml?>`` declaration,
    double-quoted values, spaces (never tabs) between attributes, no entity
    escapes. The text is therefore formatted by hand.
    """
    out = [f'<algo name="{prog.name}" proto="{prog.proto}" nchannels="{prog.nchannels}" '
           f'nchunksperloop="{prog.nchunksperloop}" ngpus="{prog.num_npus}" coll="{prog.coll}" '
           f'inplace="{1 if prog.inplace else 0}" outofplace="{0 if prog.inplace else 1}" '
           f'minBytes="{prog.min_bytes}" maxBytes="{prog.max_bytes}">']
    for v in range(prog.num_npus):
        i_chunks, o_chunks, s_chunks = prog.buffers[v]
        out.append(f'  <gpu id="{v}" i_chunks="{i_chunks}" o_chunks="{o_chunks}" s_chunks="{s_chunks}">')
        for tb in prog.tbs[v]:
            out.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for s, row in enumerate(tb.rows):
                if row[0] == "nop":
                    out.append(_fmt_step(s, "nop", None, None, 0, row[1], False))
                else:
                    st, dep = row[1], row[2]
                    out.append(_fmt_step(s, st.kind, st.src, st.dst, st.cnt, dep, st.hasdep))
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"


def export_msccl(problem: Problem, schedule: Schedule, *, name: str | None = None, proto: str = "Simple",
                 inplace: bool = True, max_steps_per_tb: int = MAX_STEPS_PER_TB,
                 min_bytes: int = 0, max_bytes: int = 0) -> str:
    """MSCCL-IR XML text for a verified schedule.

    Parameters
    ----------
    problem, schedule : Problem, Schedule
        The schedule is replayed by :func:`tacos_bench.verify.verify` first;
        an invalid one raises :class:`~tacos_bench.errors.VerificationError`.
    name : str, optional
        ``<algo name>``; default ``tacos-<coll>-<topology>-n<N>-cpn<cpn>-<variant>``.
    proto : {"Simple", "LL", "LL128"}
        NCCL protocol the runtime uses for this algorithm.
    inplace : bool
        ``True`` writes the in-place variant (``inplace="1" outofplace="0"``),
        ``False`` the out-of-place one. The runtime picks an algorithm per call
        by this flag, so install both to cover both kinds of calls.
    max_steps_per_tb : int
        At most this many steps (``nop`` included) per threadblock; a link
        with more transfers is split over several channels. The runtime's
        limit is 64.
    min_bytes, max_bytes : int
        Message-size window the runtime selects the algorithm for
        (``maxBytes=0``: no upper limit).

    Returns
    -------
    str
        The XML document.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
    >>> xml = export_msccl(p, s, name="ag2")
    >>> xml.splitlines()[0][:74]
    '<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2"'
    >>> sum(line.strip().startswith("<step") for line in xml.splitlines())
    4
    """
    prog = lower_msccl(problem, schedule, name=name, proto=proto, inplace=inplace,
                       max_steps_per_tb=max_steps_per_tb, min_bytes=min_bytes, max_bytes=max_bytes)
    return render_msccl(prog)


def export_msccl_dir(problem: Problem, schedule: Schedule, out_dir, *, name: str | None = None, **kwargs):
    """Write both variants (``<name>-inplace.xml``, ``<name>-outofplace.xml``) into ``out_dir``.

    The directory then holds nothing but MSCCL algorithms, so it can be handed
    to the runtime as ``MSCCL_ALGO_DIR`` as it is. Returns the two paths.
    """
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for inplace in (True, False):
        variant = "inplace" if inplace else "outofplace"
        algo_name = f"{safe_name(name)}-{variant}" if name else None
        xml = export_msccl(problem, schedule, name=algo_name, inplace=inplace, **kwargs)
        path = out / f"{algo_name or _default_name(problem, inplace)}.xml"
        path.write_text(xml)
        paths.append(path)
    return paths
