"""Lower a verified schedule to MSCCL-IR XML (the format the MSCCL runtime executes).

One transfer ``u -> v`` of chunk ``c`` becomes a send step on ``u`` and a
receive step on ``v``: ``r`` for a copy, ``rrc`` (receive, reduce with the
local partial sum, store) for a reduction. Each rank gets one threadblock per
(peer, channel) and direction -- ``send=peer recv=-1`` for its out-links and
``send=-1 recv=peer`` for its in-links -- plus, for an out-of-place
All-Gather, one local threadblock holding the ``cpy`` of its own chunks into
the output buffer.

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
Chunk ``c = k*N + owner`` lives at MSCCL index ``owner*cpn + k`` (see
:func:`~tacos_bench.export.common.msccl_index`):

===================  =========================================  =========================================
collective           in-place (``inplace=1``)                   out-of-place (``outofplace=1``)
===================  =========================================  =========================================
All-Gather           everything in ``o`` (``i_chunks=0``);      own chunk ``k`` read from ``i[k]`` and
                     own chunks already at ``o[rank*cpn+k]``    copied (``cpy``) to ``o[rank*cpn+k]``
Reduce-Scatter       everything in ``i``; rank ``r``'s result   partial sums of other ranks' chunks in
                     at ``i[r*cpn+k]`` (= ``o[k]``)             scratch ``s``; own result into ``o[k]``;
                                                                ``i`` is never written
All-Reduce           everything in ``i`` (``o_chunks=0``)       results (and partial sums) in ``o[idx]``;
                                                                ``i`` is never written
===================  =========================================  =========================================

In-place Reduce-Scatter also keeps other ranks' partial sums in scratch, so
the parts of the buffer a rank does not own are left as they were.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from ..problem import Problem
from ..schedule import REDUCE, Schedule
from .common import ExportError, msccl_index, safe_name, verified

COLL_NAMES = {ALL_GATHER: "allgather", REDUCE_SCATTER: "reducescatter", ALL_REDUCE: "allreduce"}
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

    @property
    def nchunksperloop(self) -> int:
        return self.num_npus * self.chunks_per_npu

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


def _default_name(problem: Problem, inplace: bool) -> str:
    c = problem.collective
    return safe_name(f"tacos-{COLL_NAMES[c.kind]}-{problem.topology.name}-n{problem.num_npus}"
                     f"-cpn{c.chunks_per_npu}-{'inplace' if inplace else 'outofplace'}")


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
    inplace = bool(inplace)
    kind = problem.kind
    n = problem.num_npus
    cpn = problem.collective.chunks_per_npu
    name = safe_name(name) if name else _default_name(problem, inplace)

    steps_by_transfer, cpy_steps, scratch = _build_steps(problem, schedule, inplace)
    tbs = _assign_threadblocks(problem, schedule, steps_by_transfer, cpy_steps, max_steps_per_tb)
    _finalize_dependencies(tbs, max_steps_per_tb)

    buffers = []
    for v in range(n):
        if kind == ALL_GATHER:
            i_chunks, o_chunks = (0 if inplace else cpn), n * cpn
        elif kind == REDUCE_SCATTER:
            i_chunks, o_chunks = n * cpn, (0 if inplace else cpn)
        else:
            i_chunks, o_chunks = n * cpn, (0 if inplace else n * cpn)
        buffers.append((i_chunks, o_chunks, scratch[v]))
    for v in range(n):
        nodes = 1 + n + len(tbs[v]) + sum(len(tb.rows) for tb in tbs[v])
        if nodes > MAX_XML_NODES:
            raise ExportError(f"NPU {v} needs {nodes} XML elements but the MSCCL runtime's parser loads at most "
                              f"{MAX_XML_NODES} per rank; use fewer chunks per NPU")
    nchannels = max((tb.chan + 1 for rank_tbs in tbs for tb in rank_tbs), default=1)
    if nchannels > MAX_CHANNELS:
        raise ExportError(f"the algorithm needs {nchannels} channels but NCCL has at most {MAX_CHANNELS}; "
                          f"use more chunks per link-time or a coarser schedule")
    return MscclProgram(name, COLL_NAMES[kind], proto, inplace, n, cpn, buffers, tbs, nchannels,
                        int(min_bytes), int(max_bytes))


def _build_steps(problem: Problem, schedule: Schedule, inplace: bool):
    """One step per transfer endpoint, with read/write hazard dependencies."""
    from ..verify import REL_TOL

    kind = problem.kind
    n = problem.num_npus
    cpn = problem.collective.chunks_per_npu
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

    scratch_slot: dict[tuple[int, int], int] = {}
    scratch = [0] * n

    def initial(v: int, c: int):
        owner, k = c % n, c // n
        if kind == ALL_GATHER:
            if v != owner:
                return None
            return ("o", owner * cpn + k) if inplace else ("i", k)
        return ("i", msccl_index(c, n, cpn))

    def accumulator(v: int, c: int):
        owner, k = c % n, c // n
        idx = owner * cpn + k
        if kind == ALL_GATHER:
            return ("o", idx)
        if kind == ALL_REDUCE:
            return ("i", idx) if inplace else ("o", idx)
        if v == owner:
            return ("i", idx) if inplace else ("o", k)
        # Partial sums of chunks this rank does not own go to scratch so the user's buffer is not clobbered.
        key = (v, c)
        if key not in scratch_slot:
            scratch_slot[key] = scratch[v]
            scratch[v] += 1
        return ("s", scratch_slot[key])

    state: dict[tuple[int, int], tuple] = {}          # (rank, chunk) -> (location, writer step or None)
    last_write: dict[tuple, _Step] = {}               # (rank, buf, off) -> step
    readers: dict[tuple, list] = defaultdict(list)    # (rank, buf, off) -> steps reading since last write

    cpy_steps: list[list[_Step]] = [[] for _ in range(n)]
    if kind == ALL_GATHER and not inplace:
        pos = -(n * cpn) - 1
        for v in range(n):
            for k0 in range(0, cpn, MAX_STEPS_PER_TB):
                cnt = min(MAX_STEPS_PER_TB, cpn - k0)
                st = _Step("cpy", v, pos, src=("i", k0), dst=("o", v * cpn + k0), cnt=cnt)
                pos += 1
                cpy_steps[v].append(st)
                for j in range(cnt):
                    last_write[(v, "o", v * cpn + k0 + j)] = st
                    readers[(v, "i", k0 + j)].append(st)

    send_step: list[_Step | None] = [None] * T
    recv_step: list[_Step | None] = [None] * T
    for pos, e in enumerate(order):
        t = ids[e]
        c = chunk[t]
        if kinds[e]:  # the sender reads its current value of the chunk
            u = src[t]
            cur = state.get((u, c))
            if cur is None:
                loc = initial(u, c)
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
                loc0 = initial(v, c)
                cur = (loc0, None) if loc0 is not None else None
            slot = accumulator(v, c)
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
            state[(v, c)] = (slot, st)
            recv_step[t] = st
            sender.dst = slot
    steps_by_transfer = list(zip(send_step, recv_step))
    for s_st, r_st in steps_by_transfer:
        for st in (s_st, r_st):
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
    link = problem.topology.link_ids(schedule.src, schedule.dst).tolist()
    per_link: dict[int, list[int]] = defaultdict(list)
    for t in sorted(range(len(steps_by_transfer)), key=lambda t: steps_by_transfer[t][0].pos):
        per_link[link[t]].append(t)

    groups: dict[tuple, list[_Step]] = defaultdict(list)   # (rank, send, recv, chan) -> steps
    for lid, ts in per_link.items():
        recv_order = sorted(ts, key=lambda t: steps_by_transfer[t][1].pos)
        if recv_order != ts:
            raise ExportError(f"internal: link {lid} delivers chunks out of send order")
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
        # Local copies get their own threadblock(s): they have no peer and must not wait for a link.
        for i in range(0, len(cpy_steps[v]), max_steps):
            tbs[v].append(_Tb(v, -1, -1, 0, cpy_steps[v][i:i + max_steps]))
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
    >>> from tacos_bench.generators import ring
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
