"""Independent checker for MSCCL-IR XML: parse, validate, simulate, check the postcondition.

Written from the MSCCL runtime's rules (msccl-executor-nccl ``msccl_parser.cc``,
``msccl_struct.h`` and the interpreter kernel), not from tacos-bench's writer,
which it never imports. :func:`check_msccl_xml` raises :class:`MscclCheckError`
with a precise message, or returns a :class:`SimReport`.

Validation
    the runtime's raw-text quirks (no ``<?xml?>`` declaration, double quotes,
    no tabs); every required attribute of ``algo``/``gpu``/``tb``/``step``;
    gpu ids ``0..ngpus-1``; threadblock ids contiguous from 0; peers in range
    and not the gpu itself; one threadblock per (send peer, channel) and per
    (recv peer, channel); at most 32 of each per channel; channels below
    ``nchannels``; step ``s`` equal to its position; at most 64 steps per
    threadblock (``nop`` included); at most 4096 XML elements loaded per rank;
    known step types; sends only in
    threadblocks with a send peer, receives only with a receive peer; ``cnt``
    in ``1..71``; offsets inside the declared buffers (as the runtime checks)
    and inside the collective's real buffers (memory safety); ``nop`` steps
    carry a dependency and are followed by a dependent step (the runtime's
    step numbering relies on it); every waited-for step exists, is not a
    ``nop`` and has ``hasdep="1"``.

Simulation
    every threadblock runs its steps in order. A receive completes only when
    the matching send on the (sender, receiver, channel) FIFO has happened; a
    send blocks while ``fifo_capacity`` messages wait unread on its FIFO
    (default 1, the strictest: what completes with 1 completes with more); a
    step with ``depid``/``deps`` waits until the referenced threadblock's flag
    (set by its ``hasdep`` steps to their index) reaches ``deps``. No progress
    with work left is a deadlock, reported with what each stuck threadblock
    waits for. Buffer slots hold ``(logical index, contributions)``; reduction
    adds contribution counts. Races are detected with vector clocks over the
    happens-before edges the runtime guarantees (program order, send -> its
    receive, dependency target -> waiter; FIFO capacity is not relied on): two
    accesses to one slot, one a write, unordered -> error. With no race the
    result does not depend on the interleaving, so one simulation decides.

Semantics of step types (the runtime's ``prims`` calls; ``src`` of the
reducing types is a *local* slot): ``s`` send src; ``r`` dst := recv;
``rcs`` dst := recv, send it; ``rrs`` send src+recv; ``rrc`` dst := src+recv;
``rrcs`` dst := src+recv, send it; ``cpy`` dst := src; ``re`` dst := dst+src;
``nop`` nothing.

Buffers and postconditions, with ``cpn = nchunksperloop / ngpus`` for
allgather, reducescatter, allreduce and alltoall and ``cpn = nchunksperloop``
for broadcast, reduce, gather and scatter (the runtime multiplies only
allgather, reducescatter and alltoall counts by ``ngpus``, and a gather or
scatter count is one rank's share), index ``j = r*cpn + k``, ``R`` the root:

=============  ==========================  ==========================  =========================================
coll           input                       output                      after
=============  ==========================  ==========================  =========================================
allgather      ``cpn``: rank r's data      ``ngpus*cpn``               every output ``j`` = rank ``j//cpn``'s
reducescatter  ``ngpus*cpn`` contributions ``cpn``                     output ``k`` of r = sum of index ``r*cpn+k``
allreduce      ``ngpus*cpn`` contributions ``ngpus*cpn``               every output ``j`` = sum of index ``j``
broadcast      ``cpn`` at R only           ``cpn``                     every output ``k`` = R's input ``k``
reduce         ``cpn`` contributions       ``cpn`` at R only           R's output ``k`` = sum of index ``k``
gather         ``cpn``: rank r's data      ``ngpus*cpn`` at R only     R's output ``j`` = rank ``j//cpn``'s
scatter        ``ngpus*cpn`` at R only     ``cpn``                     output ``k`` of r = R's input ``r*cpn+k``
alltoall       ``ngpus*cpn`` by receiver   ``ngpus*cpn`` by sender     output ``s*cpn+k`` of d = input
                                                                       ``d*cpn+k`` of s
=============  ==========================  ==========================  =========================================

Sums count every rank exactly once. Out-of-place runs must not write the
input buffer, nor touch a buffer the call does not give a rank (the input of
a non-root in broadcast and scatter, the output of a non-root in reduce and
gather). In-place runs alias the buffers as the runtime's algorithm
selection defines them: allgather and gather input = output[r*cpn...],
reducescatter and scatter output = input[r*cpn...] (a non-root has only that
slice), allreduce, broadcast, reduce and alltoall output = input. An XML
declaring both variants is simulated in both.

The XML names no root (the runtime passes none to the kernel): pass
``root=`` or let the checker infer it -- the one rank that never receives
(broadcast, scatter) or never sends (reduce, gather).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter, deque
from dataclasses import dataclass, field

ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
              "minBytes", "maxBytes")
GPU_ATTRS = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS = ("id", "send", "recv", "chan")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")

MAX_STEPS = 64
MAX_COUNT = 72
MAX_TBS_PER_CHANNEL = 32
MAX_CHANNELS = 32
MAX_ATTRS = 16
MAX_NODES = 4096   # elements one rank's parse keeps: <algo>, every <gpu>, its own <tb>s and <step>s

SEND_TYPES = {"s", "rcs", "rrs", "rrcs"}
RECV_TYPES = {"r", "rcs", "rrs", "rrc", "rrcs"}
STEP_TYPES = SEND_TYPES | RECV_TYPES | {"cpy", "re", "nop"}
# Which of srcoff/dstoff the runtime bounds-checks, per type (msccl_parser.cc checkSrc/checkDst).
CHECK_SRC = {"s", "rrs", "rrcs", "cpy", "re"}
CHECK_DST = {"r", "rcs", "rrcs", "cpy", "re"}
COLLS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather", "scatter", "alltoall")
# Collectives whose loop spans every rank's share (nchunksperloop = ngpus * cpn) and those with a root.
PER_RANK_LOOP = ("allgather", "reducescatter", "allreduce", "alltoall")
ROOTED = ("broadcast", "reduce", "gather", "scatter")


class MscclCheckError(AssertionError):
    """The XML is malformed, deadlocks, races or misses the collective's postcondition."""


@dataclass
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int


@dataclass
class Tb:
    id: int
    send: int
    recv: int
    chan: int
    steps: list = field(default_factory=list)


@dataclass
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list = field(default_factory=list)


@dataclass
class Algo:
    attrs: dict
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: bool
    outofplace: bool
    gpus: list


@dataclass
class SimReport:
    variants: list            # "inplace" and/or "outofplace", each simulated and checked
    num_gpus: int
    num_tbs: int
    num_steps: int
    max_steps_per_tb: int
    nchannels: int
    step_types: dict
    messages: int             # point-to-point messages per simulated variant
    root: int | None = None   # the root simulated (broadcast, reduce, gather, scatter)


def _fail(msg: str):
    raise MscclCheckError(msg)


def _int(el, attr: str, where: str) -> int:
    val = el.get(attr)
    if val is None:
        _fail(f"{where}: attribute {attr!r} is missing")
    if not re.fullmatch(r"-?\d+", val.strip()):
        _fail(f"{where}: attribute {attr}={val!r} is not an integer")
    return int(val)


def _require(el, attrs, where: str) -> None:
    missing = [a for a in attrs if a not in el.attrib]
    if missing:
        _fail(f"{where}: missing attribute(s) {', '.join(missing)}")
    if len(el.attrib) > MAX_ATTRS:
        _fail(f"{where}: {len(el.attrib)} attributes; the runtime parser reads at most {MAX_ATTRS}")


def _raw_checks(text: str) -> None:
    head = text.lstrip()
    if head.startswith("<?"):
        _fail("the MSCCL runtime's XML reader cannot parse a <?xml ...?> declaration")
    if not head.startswith("<algo") and not head.startswith("<!--"):
        _fail("the document must start with <algo")
    if "\t" in text:
        _fail("tab characters break the MSCCL runtime's XML reader; use spaces")
    if re.search(r"=\s*'", text):
        _fail("single-quoted attribute values break the MSCCL runtime's XML reader")
    if "&" in text:
        _fail("the MSCCL runtime's XML reader does not decode entities (&...;)")


def parse_algo(text: str) -> Algo:
    """Parse and validate the structure (no simulation)."""
    _raw_checks(text)
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        _fail(f"not well-formed XML: {e}")
    if root.tag != "algo":
        _fail(f"root element is <{root.tag}>, expected <algo>")
    _require(root, ALGO_ATTRS, "<algo>")
    if len(root.get("name")) > 255:
        _fail("<algo name> longer than 255 characters")
    if root.get("proto") not in ("Simple", "LL", "LL128"):
        _fail(f"<algo proto={root.get('proto')!r}>: must be Simple, LL or LL128")
    coll = root.get("coll")
    if coll not in COLLS:
        _fail(f"<algo coll={coll!r}>: this checker knows {', '.join(COLLS)}")
    nch = _int(root, "nchannels", "<algo>")
    ncpl = _int(root, "nchunksperloop", "<algo>")
    ngpus = _int(root, "ngpus", "<algo>")
    inplace = _int(root, "inplace", "<algo>")
    outofplace = _int(root, "outofplace", "<algo>")
    mn = _int(root, "minBytes", "<algo>")
    mx = _int(root, "maxBytes", "<algo>")
    if inplace not in (0, 1) or outofplace not in (0, 1):
        _fail("<algo>: inplace and outofplace must be 0 or 1")
    if not (inplace or outofplace):
        _fail("<algo>: inplace=0 and outofplace=0: the runtime would never select it")
    if mn < 0 or mx < 0 or (mx and mx < mn):
        _fail(f"<algo>: bad message-size window minBytes={mn} maxBytes={mx}")
    if not 1 <= nch <= MAX_CHANNELS:
        _fail(f"<algo nchannels={nch}>: must be in 1..{MAX_CHANNELS}")
    if ngpus < 1 or ncpl < 1 or (coll in PER_RANK_LOOP and ncpl % ngpus):
        _fail(f"<algo>: nchunksperloop={ncpl} must be a positive multiple of ngpus={ngpus}")

    gpus: dict[int, Gpu] = {}
    for g_el in root:
        if g_el.tag != "gpu":
            _fail(f"unexpected element <{g_el.tag}> in <algo>")
        where = f"<gpu id={g_el.get('id')}>"
        _require(g_el, GPU_ATTRS, where)
        gid = _int(g_el, "id", where)
        if not 0 <= gid < ngpus:
            _fail(f"{where}: id outside 0..{ngpus - 1}")
        if gid in gpus:
            _fail(f"{where}: duplicate gpu id")
        gpu = Gpu(gid, _int(g_el, "i_chunks", where), _int(g_el, "o_chunks", where), _int(g_el, "s_chunks", where))
        if min(gpu.i_chunks, gpu.o_chunks, gpu.s_chunks) < 0:
            _fail(f"{where}: negative buffer size")
        tb_ids = set()
        for tb_el in g_el:
            if tb_el.tag != "tb":
                _fail(f"{where}: unexpected element <{tb_el.tag}>")
            twhere = f"gpu {gid} <tb id={tb_el.get('id')}>"
            _require(tb_el, TB_ATTRS, twhere)
            tb = Tb(_int(tb_el, "id", twhere), _int(tb_el, "send", twhere), _int(tb_el, "recv", twhere),
                    _int(tb_el, "chan", twhere))
            if tb.id in tb_ids:
                _fail(f"{twhere}: duplicate threadblock id")
            tb_ids.add(tb.id)
            for peer, label in ((tb.send, "send"), (tb.recv, "recv")):
                if not -1 <= peer < ngpus:
                    _fail(f"{twhere}: {label}={peer} is not -1 or a gpu id")
                if peer == gid:
                    _fail(f"{twhere}: {label} peer is the gpu itself")
            if not 0 <= tb.chan < nch:
                _fail(f"{twhere}: chan={tb.chan} outside 0..nchannels-1={nch - 1}")
            for pos, st_el in enumerate(tb_el):
                if st_el.tag != "step":
                    _fail(f"{twhere}: unexpected element <{st_el.tag}>")
                swhere = f"{twhere} step {pos}"
                _require(st_el, STEP_ATTRS, swhere)
                st = Step(_int(st_el, "s", swhere), st_el.get("type"), st_el.get("srcbuf"),
                          _int(st_el, "srcoff", swhere), st_el.get("dstbuf"), _int(st_el, "dstoff", swhere),
                          _int(st_el, "cnt", swhere), _int(st_el, "depid", swhere), _int(st_el, "deps", swhere),
                          _int(st_el, "hasdep", swhere))
                if st.s != pos:
                    _fail(f"{swhere}: s={st.s} but it is step {pos} of its threadblock")
                if st.type not in STEP_TYPES:
                    _fail(f"{swhere}: unknown type {st.type!r}")
                for b in (st.srcbuf, st.dstbuf):
                    if b not in ("i", "o", "s"):
                        _fail(f"{swhere}: buffer {b!r} is not i, o or s")
                if st.hasdep not in (0, 1):
                    _fail(f"{swhere}: hasdep must be 0 or 1")
                if st.type != "nop" and not 1 <= st.cnt < MAX_COUNT:
                    _fail(f"{swhere}: cnt={st.cnt} outside 1..{MAX_COUNT - 1}")
                if st.type in SEND_TYPES and tb.send < 0:
                    _fail(f"{swhere}: {st.type} sends but the threadblock has no send peer")
                if st.type in RECV_TYPES and tb.recv < 0:
                    _fail(f"{swhere}: {st.type} receives but the threadblock has no recv peer")
                if (st.depid < 0) != (st.deps < 0):
                    _fail(f"{swhere}: depid={st.depid} and deps={st.deps} must both be -1 or both set")
                if st.type == "nop" and st.depid < 0:
                    _fail(f"{swhere}: a nop without a dependency breaks the runtime's step numbering")
                sizes = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
                for check, buf, off, label in ((CHECK_SRC, st.srcbuf, st.srcoff, "src"),
                                                (CHECK_DST, st.dstbuf, st.dstoff, "dst")):
                    if st.type in check and not 0 <= off <= sizes[buf] - st.cnt:
                        _fail(f"{swhere}: {label} {buf}[{off}:{off + st.cnt}] outside the declared "
                              f"{buf}_chunks={sizes[buf]}")
                tb.steps.append(st)
            if len(tb.steps) > MAX_STEPS:
                _fail(f"{twhere}: {len(tb.steps)} steps, the runtime allows {MAX_STEPS}")
            if tb.steps and tb.steps[-1].type == "nop":
                _fail(f"{twhere}: ends with a nop (its dependency would attach to nothing)")
            for a, b in zip(tb.steps, tb.steps[1:]):
                if a.type == "nop" and b.depid < 0:
                    _fail(f"{twhere} step {b.s}: follows a nop but has no dependency (the runtime rejects it)")
            gpu.tbs.append(tb)
        if tb_ids != set(range(len(tb_ids))):
            _fail(f"{where}: threadblock ids {sorted(tb_ids)} are not contiguous from 0")
        gpu.tbs.sort(key=lambda t: t.id)
        send_keys, recv_keys = Counter(), Counter()
        for tb in gpu.tbs:
            if tb.send >= 0:
                send_keys[(tb.send, tb.chan)] += 1
            if tb.recv >= 0:
                recv_keys[(tb.recv, tb.chan)] += 1
        for keys, label in ((send_keys, "send to"), (recv_keys, "receive from")):
            dup = [k for k, m in keys.items() if m > 1]
            if dup:
                _fail(f"{where}: several threadblocks {label} gpu {dup[0][0]} on channel {dup[0][1]}")
            per_chan = Counter(ch for _, ch in keys)
            if per_chan and max(per_chan.values()) > MAX_TBS_PER_CHANNEL:
                _fail(f"{where}: more than {MAX_TBS_PER_CHANNEL} threadblocks {label} peers on one channel")
        for tb in gpu.tbs:
            for st in tb.steps:
                if st.depid < 0:
                    continue
                swhere = f"gpu {gid} tb {tb.id} step {st.s}"
                if st.depid > 127:
                    _fail(f"{swhere}: depid={st.depid} exceeds the runtime's 8-bit dependency id")
                if st.depid >= len(gpu.tbs):
                    _fail(f"{swhere}: depends on threadblock {st.depid}, which does not exist")
                target_tb = gpu.tbs[st.depid]
                if not 0 <= st.deps < len(target_tb.steps):
                    _fail(f"{swhere}: depends on step {st.deps} of tb {st.depid}, which has "
                          f"{len(target_tb.steps)} steps")
                target = target_tb.steps[st.deps]
                if target.type == "nop":
                    _fail(f"{swhere}: depends on a nop (a nop never sets its flag)")
                if target.hasdep != 1:
                    _fail(f"{swhere}: depends on tb {st.depid} step {st.deps}, which lacks hasdep=\"1\"")
                if st.depid == tb.id and st.deps >= st.s:
                    _fail(f"{swhere}: waits on a later step of its own threadblock")
        loaded = 1 + ngpus + len(gpu.tbs) + sum(len(tb.steps) for tb in gpu.tbs)
        if loaded > MAX_NODES:
            _fail(f"{where}: the runtime parser would load {loaded} XML elements for this rank (max {MAX_NODES})")
        gpus[gid] = gpu
    if sorted(gpus) != list(range(ngpus)):
        _fail(f"<algo ngpus={ngpus}> but gpu ids are {sorted(gpus)}")
    return Algo(dict(root.attrib), nch, ncpl, ngpus, coll, bool(inplace), bool(outofplace),
                [gpus[g] for g in range(ngpus)])


# ------------------------------------------------------------------------------------------------ simulation
def _cpn(algo: Algo) -> int:
    """Chunks per rank's share: the loop spans every rank's share only where the count is multiplied."""
    return algo.nchunksperloop // algo.ngpus if algo.coll in PER_RANK_LOOP else algo.nchunksperloop


def _real_sizes(algo: Algo, rank: int = 0, root: int | None = None):
    """Chunks of the input and output buffers the call gives ``rank`` (0: none)."""
    n, cpn = algo.ngpus, _cpn(algo)
    is_root = rank == root
    return {"allgather": {"i": cpn, "o": n * cpn},
            "reducescatter": {"i": n * cpn, "o": cpn},
            "allreduce": {"i": n * cpn, "o": n * cpn},
            "broadcast": {"i": cpn if is_root else 0, "o": cpn},
            "reduce": {"i": cpn, "o": cpn if is_root else 0},
            "gather": {"i": cpn, "o": n * cpn if is_root else 0},
            "scatter": {"i": n * cpn if is_root else 0, "o": cpn},
            "alltoall": {"i": n * cpn, "o": n * cpn}}[algo.coll]


def _canonical(algo: Algo, rank: int, buf: str, off: int, inplace: bool):
    """Memory cell a (buffer, offset) names, with the runtime's in-place aliasing."""
    cpn = _cpn(algo)
    if inplace:
        if algo.coll in ("allgather", "gather") and buf == "i":
            return ("o", rank * cpn + off)
        if algo.coll in ("reducescatter", "scatter") and buf == "o":
            return ("i", rank * cpn + off)
        if algo.coll in ("allreduce", "reduce", "alltoall") and buf == "o":
            return ("i", off)
        if algo.coll == "broadcast" and buf == "i":
            return ("o", off)
    return (buf, off)


def _inplace_sizes(algo: Algo, rank: int, root: int | None):
    """Buffer sizes an in-place call gives ``rank``, and the one canonical slice it owns when it has no more.

    In place, the aliased buffers are one allocation; a non-root of gather/scatter passes only its own
    slice of the root's layout (sendbuff = recvbuff + rank*count, or the reverse), nothing around it.
    """
    n, cpn = algo.ngpus, _cpn(algo)
    sizes = dict(_real_sizes(algo, rank, root))
    only = None
    if algo.coll in ("broadcast", "reduce"):
        sizes = {"i": cpn, "o": cpn}
    elif algo.coll == "gather" and rank != root:
        sizes, only = {"i": cpn, "o": n * cpn}, ("o", rank * cpn, (rank + 1) * cpn)
    elif algo.coll == "scatter" and rank != root:
        sizes, only = {"i": n * cpn, "o": cpn}, ("i", rank * cpn, (rank + 1) * cpn)
    return sizes, only


def _initial_cells(algo: Algo, rank: int, inplace: bool, root: int | None) -> dict:
    """Canonical cell -> (logical index, contributions) of ``rank`` before the collective."""
    n, cpn, coll = algo.ngpus, _cpn(algo), algo.coll
    me = Counter({rank: 1})
    cells = {}

    def put(off, val):
        cells[_canonical(algo, rank, "i", off, inplace)] = val

    if coll in ("allgather", "gather"):
        for k in range(cpn):
            put(k, (rank * cpn + k, me))
    elif coll in ("reducescatter", "allreduce"):
        for j in range(n * cpn):
            put(j, (j, me))
    elif coll == "reduce":
        for k in range(cpn):
            put(k, (k, me))
    elif coll == "broadcast" and rank == root:
        for k in range(cpn):
            put(k, (k, me))
    elif coll == "scatter" and rank == root:
        for j in range(n * cpn):
            put(j, (j, me))
    elif coll == "alltoall":   # logical index of (sender s, receiver d, k): s*n*cpn + d*cpn + k
        for j in range(n * cpn):
            put(j, (rank * n * cpn + j, me))
    return cells


def _wanted(algo: Algo, rank: int, root: int | None) -> dict:
    """Output offset -> (logical index, contributions) ``rank`` must hold after the collective."""
    n, cpn, coll = algo.ngpus, _cpn(algo), algo.coll
    everyone = Counter({r: 1 for r in range(n)})
    if coll == "allgather":
        return {j: (j, Counter({j // cpn: 1})) for j in range(n * cpn)}
    if coll == "reducescatter":
        return {k: (rank * cpn + k, everyone) for k in range(cpn)}
    if coll == "allreduce":
        return {j: (j, everyone) for j in range(n * cpn)}
    if coll == "broadcast":
        return {k: (k, Counter({root: 1})) for k in range(cpn)}
    if coll == "reduce":
        return {k: (k, everyone) for k in range(cpn)} if rank == root else {}
    if coll == "gather":
        return {j: (j, Counter({j // cpn: 1})) for j in range(n * cpn)} if rank == root else {}
    if coll == "scatter":
        return {k: (rank * cpn + k, Counter({root: 1})) for k in range(cpn)}
    return {s * cpn + k: (s * n * cpn + rank * cpn + k, Counter({s: 1})) for s in range(n) for k in range(cpn)}


def infer_root(algo: Algo) -> int:
    """The root of a rooted collective, from its traffic: the one rank that never receives (broadcast,
    scatter: the data starts there) or never sends (reduce, gather: the data ends there)."""
    receives = algo.coll in ("broadcast", "scatter")
    types = RECV_TYPES if receives else SEND_TYPES
    quiet = [g.id for g in algo.gpus if not any(st.type in types for tb in g.tbs for st in tb.steps)]
    if len(quiet) != 1:
        _fail(f"cannot tell the root of this {algo.coll}: {len(quiet)} ranks never "
              f"{'receive' if receives else 'send'} ({quiet[:6]}); pass root=")
    return quiet[0]


def _add(a, b, where: str):
    if a is None or b is None:
        _fail(f"{where}: reduces an uninitialized slot")
    if a[0] != b[0]:
        _fail(f"{where}: reduces chunk index {a[0]} with chunk index {b[0]}")
    return (a[0], a[1] + b[1])


def _simulate(algo: Algo, inplace: bool, fifo_capacity: int, root: int | None = None) -> int:
    n = algo.ngpus
    variant = "in-place" if inplace else "out-of-place"
    real = [(_inplace_sizes(algo, r, root) if inplace else (_real_sizes(algo, r, root), None)) for r in range(n)]

    mem: list[dict] = [_initial_cells(algo, r, inplace, root) for r in range(n)]
    initial_inputs = [{k: v for k, v in cells.items() if k[0] == "i"} for cells in mem]

    # Threads = threadblocks; vector clocks index them globally.
    threads = [(r, tb) for r in range(n) for tb in algo.gpus[r].tbs]
    tid = {(r, tb.id): i for i, (r, tb) in enumerate(threads)}
    nthreads = len(threads)
    pc = [0] * nthreads
    flag = [-1] * nthreads
    vc = [[0] * nthreads for _ in range(nthreads)]
    done_vc: dict[tuple[int, int], list] = {}           # (thread, step) -> clock after the step
    fifo: dict[tuple[int, int, int], deque] = {}
    last_write: dict = {}                               # (rank, cell) -> (thread, clock, where)
    reads: dict = {}                                    # (rank, cell) -> list of (thread, clock, where)
    messages = 0

    for r in range(n):
        for tb in algo.gpus[r].tbs:
            if tb.send >= 0:
                fifo.setdefault((r, tb.send, tb.chan), deque())
    for r in range(n):
        for tb in algo.gpus[r].tbs:
            if tb.recv >= 0 and (tb.recv, r, tb.chan) not in fifo:
                if any(st.type in RECV_TYPES for st in tb.steps):
                    _fail(f"gpu {r} tb {tb.id} receives from gpu {tb.recv} on channel {tb.chan}, but gpu "
                          f"{tb.recv} has no threadblock sending to {r} on that channel")

    def cell(r, buf, off, cnt, where, write):
        limit = algo.gpus[r].s_chunks if buf == "s" else real[r][0][buf]
        if not 0 <= off <= limit - cnt:
            _fail(f"{where}: {buf}[{off}:{off + cnt}] is outside the collective's {buf} buffer ({limit} chunks)")
        cells = [_canonical(algo, r, buf, off + j, inplace) for j in range(cnt)]
        only = real[r][1]
        if only is not None and buf != "s":
            bad = [c for c in cells if c[0] != only[0] or not only[1] <= c[1] < only[2]]
            if bad:
                _fail(f"{variant}: {where} touches {bad[0][0]}[{bad[0][1]}] on gpu {r}, outside the slice "
                      f"{only[0]}[{only[1]}:{only[2]}] an in-place {algo.coll} gives a non-root")
        if write and not inplace and any(c[0] == "i" for c in cells):
            _fail(f"{where}: out-of-place run writes the input buffer")
        return cells

    def access(t, r, cells, write, where):
        clock = vc[t]
        for c in cells:
            key = (r, c)
            lw = last_write.get(key)
            if lw is not None and lw[0] != t and clock[lw[0]] < lw[1]:
                _fail(f"{variant}: race on gpu {r} {c[0]}[{c[1]}]: {where} is unordered with the write by {lw[2]}")
            if write:
                for rd in reads.get(key, ()):
                    if rd[0] != t and clock[rd[0]] < rd[1]:
                        _fail(f"{variant}: race on gpu {r} {c[0]}[{c[1]}]: {where} writes while {rd[2]} may "
                              f"still be reading it")
                last_write[key] = (t, clock[t], where)
                reads[key] = []
            else:
                reads.setdefault(key, []).append((t, clock[t], where))

    def blocked(t):
        """None if thread t can run its next step, else the reason it waits."""
        r, tb = threads[t]
        st = tb.steps[pc[t]]
        if st.depid >= 0 and flag[tid[(r, st.depid)]] < st.deps:
            return f"waits for tb {st.depid} step {st.deps}"
        if st.type == "nop":
            return None
        if st.type in RECV_TYPES and not fifo.get((tb.recv, r, tb.chan)):
            return f"waits for a message from gpu {tb.recv} on channel {tb.chan}"
        if st.type in SEND_TYPES and len(fifo[(r, tb.send, tb.chan)]) >= fifo_capacity:
            return f"waits for gpu {tb.send} to drain channel {tb.chan}"
        return None

    def run(t):
        nonlocal messages
        r, tb = threads[t]
        st = tb.steps[pc[t]]
        where = f"gpu {r} tb {tb.id} step {st.s} ({st.type})"
        clock = vc[t]
        clock[t] += 1
        if st.depid >= 0:
            dep = done_vc[(tid[(r, st.depid)], st.deps)]
            for i in range(nthreads):
                if dep[i] > clock[i]:
                    clock[i] = dep[i]
        received = None
        if st.type in RECV_TYPES:
            data, cnt, sender_vc, sender_where = fifo[(tb.recv, r, tb.chan)].popleft()
            if cnt != st.cnt:
                _fail(f"{where}: receives cnt={st.cnt} but {sender_where} sent cnt={cnt}")
            for i in range(nthreads):
                if sender_vc[i] > clock[i]:
                    clock[i] = sender_vc[i]
            received = data
        m = mem[r]
        out = None
        if st.type in ("s", "rrs", "rrcs", "cpy", "re", "rrc"):
            src_cells = cell(r, st.srcbuf, st.srcoff, st.cnt, where, False)
            access(t, r, src_cells, False, where)
            src_vals = [m.get(c) for c in src_cells]
            if any(v is None for v in src_vals):
                bad = src_cells[[v is None for v in src_vals].index(True)]
                _fail(f"{variant}: {where} reads uninitialized {bad[0]}[{bad[1]}] on gpu {r}")
        if st.type == "s":
            out = src_vals
        elif st.type in ("r", "rcs"):
            out = received
        elif st.type in ("rrs", "rrc", "rrcs"):
            out = [_add(a, b, where) for a, b in zip(src_vals, received)]
        elif st.type == "cpy":
            out = src_vals
        elif st.type == "re":
            dst_cells = cell(r, st.dstbuf, st.dstoff, st.cnt, where, False)
            access(t, r, dst_cells, False, where)
            out = [_add(m.get(c), v, where) for c, v in zip(dst_cells, src_vals)]
        if st.type in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
            dst_cells = cell(r, st.dstbuf, st.dstoff, st.cnt, where, True)
            access(t, r, dst_cells, True, where)
            for c, v in zip(dst_cells, out):
                m[c] = v
        if st.type in SEND_TYPES:
            fifo[(r, tb.send, tb.chan)].append((out, st.cnt, list(clock), where))
            messages += 1
        done_vc[(t, pc[t])] = list(clock)
        if st.hasdep:
            flag[t] = st.s
        pc[t] += 1

    remaining = sum(len(tb.steps) for _, tb in threads)
    while remaining:
        progress = False
        for t in range(nthreads):
            while pc[t] < len(threads[t][1].steps) and blocked(t) is None:
                run(t)
                remaining -= 1
                progress = True
        if not progress:
            stuck = [f"gpu {threads[t][0]} tb {threads[t][1].id} step {pc[t]} {blocked(t)}"
                     for t in range(nthreads) if pc[t] < len(threads[t][1].steps)]
            _fail(f"{variant}: deadlock with {len(stuck)} threadblock(s) stuck: " + "; ".join(stuck[:6])
                  + (" ..." if len(stuck) > 6 else ""))
    left = {k: len(q) for k, q in fifo.items() if q}
    if left:
        (u, v, ch), cnt = next(iter(left.items()))
        _fail(f"{variant}: {cnt} message(s) from gpu {u} to gpu {v} on channel {ch} are never received")

    for r in range(n):
        want = _wanted(algo, r, root)
        for j, expect in want.items():
            have = mem[r].get(_canonical(algo, r, "o", j, inplace))
            if have is None:
                _fail(f"{variant}: postcondition unmet: gpu {r} output[{j}] was never written")
            if have[0] != expect[0] or +have[1] != expect[1]:
                extra = {k: c for k, c in have[1].items() if c > 1}
                missing = sorted(set(expect[1]) - set(have[1]))
                what = (f"holds chunk index {have[0]} instead of {expect[0]}" if have[0] != expect[0] else
                        f"counts rank(s) {sorted(extra)} twice" if extra else f"lacks rank(s) {missing[:6]}")
                _fail(f"{variant}: postcondition unmet: gpu {r} output[{j}] {what}")
        if not inplace:
            for key, val in initial_inputs[r].items():
                if mem[r].get(key) != val:
                    _fail(f"{variant}: gpu {r} input {key} changed")
    return messages


def check_msccl_xml(text: str, *, fifo_capacity: int = 1, expect_coll: str | None = None,
                    expect_ngpus: int | None = None, max_steps: int = MAX_STEPS,
                    root: int | None = None) -> SimReport:
    """Validate and simulate an MSCCL-IR document; raise :class:`MscclCheckError` on any problem.

    Parameters
    ----------
    text : str
        The XML document.
    fifo_capacity : int
        Messages a send may leave unread per (sender, receiver, channel); 1 is the strictest.
    expect_coll, expect_ngpus : optional
        Fail unless the document declares this ``coll`` / ``ngpus``.
    max_steps : int
        Fail when a threadblock has more steps.
    root : int, optional
        Root of a broadcast, reduce, gather or scatter (the XML does not name it); inferred from the
        traffic when omitted (:func:`infer_root`). Ignored for the other collectives.

    Returns
    -------
    SimReport
        What was simulated.
    """
    if fifo_capacity < 1:
        raise ValueError("fifo_capacity must be >= 1")
    algo = parse_algo(text)
    if expect_coll is not None and algo.coll != expect_coll:
        _fail(f"coll={algo.coll!r}, expected {expect_coll!r}")
    if expect_ngpus is not None and algo.ngpus != expect_ngpus:
        _fail(f"ngpus={algo.ngpus}, expected {expect_ngpus}")
    longest = max((len(tb.steps) for g in algo.gpus for tb in g.tbs), default=0)
    if longest > max_steps:
        _fail(f"a threadblock has {longest} steps, more than {max_steps}")
    if algo.coll in ROOTED:
        if root is None:
            root = infer_root(algo)
        elif not 0 <= root < algo.ngpus:
            _fail(f"root={root} is not a gpu id (ngpus={algo.ngpus})")
    else:
        root = None
    variants = []
    messages = 0
    for inplace, flag in ((True, algo.inplace), (False, algo.outofplace)):
        if flag:
            messages = _simulate(algo, inplace, fifo_capacity, root)
            variants.append("inplace" if inplace else "outofplace")
    types = Counter(st.type for g in algo.gpus for tb in g.tbs for st in tb.steps)
    return SimReport(variants, algo.ngpus, sum(len(g.tbs) for g in algo.gpus), sum(types.values()), longest,
                     algo.nchannels, dict(sorted(types.items())), messages, root)
