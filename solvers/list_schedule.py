"""A list schedule over hops: repeatedly the (chunk, hop) transfer that completes first, the rarest chunk on ties.

The exact family's continuous fabric model starts from such a schedule (:func:`solvers.exact.fabric.list_schedule`,
in its integer time units, over every simple hop); this is the same rule in the verifier's float times over the
hops of :func:`solvers.fabric_routes.build_hops` (the least-duration hops through the fewest switches, or the
links themselves on a point-to-point topology), compiled, and shared so that any family may use it (the greedy's
``greedy_plus`` runs it as the candidate ``list``; the families stay independent).

The rule: among every (chunk, hop) whose sender holds (or will hold) the chunk and whose receiver still needs it,
the one that completes first when appended to its links (its links' last reservation and the chunk's arrival at
the sender), ties (within 1e-9 relative) broken by the chunk fewest NPUs hold or will hold, then by the rule's
tie order (:func:`list_copy`); committed, and again until every NPU has every chunk it needs. Unlike the event-driven
greedy, which at each moment fills the links that are free *now*, a transfer here may be placed behind another on
a link that is busy now, so a slow link (a NIC) is never handed a chunk that a fast one (the NVSwitch) brings
sooner: on a rail-optimized cluster the NICs carry each node's imports back to back and the NVSwitch spreads each
import as it lands, which is what the lower bound's last import wave asks for (docs/rails.md).

Copies to every NPU only (All-Gather, Broadcast; their mirrors and All-Reduce by :mod:`solvers.compose`); no
in-network multicast (a multicast switch carries one copy per receiver here). Work per run is about (NPU, chunk)
receipts x hops (:func:`list_work`).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.fabrics import rail_cluster
>>> from tacos_bench.bounds import lower_bound_us
>>> from tacos_bench.verify import verify
>>> p = Problem(rail_cluster(3, 4, nvlink_GiBps=400.0, nic_GiBps=50.0), Collective("all_gather", 1, 64))
>>> [round(verify(p, list_copy(p, rule=r)).collective_time_us / lower_bound_us(p), 3) for r in
...  ("id", "ring", "group+near")]
[1.42, 1.0, 1.0]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import Schedule

from .fabric_routes import Hops, build_hops, fastest_groups, hop_rows

__all__ = ["RULES", "applies", "list_copy", "list_work", "warmup"]

_REL = 1e-9   # completions within this fraction are tied (float noise is no difference)
# the tie rules, in the order greedy_plus tries them (docs/rails.md: group+near meets the bound on 2-8 DGX nodes
# of every speed at 1-4 chunks per NPU but 2 nodes at 2 and 4 chunks, where id does; without +near where the NIC
# is nearly as fast as the NVSwitch, and on the MI250X node; id+near and ring+near never did better than these)
RULES = ("group+near", "id", "ring")
TIES = ("id", "ring", "group")


def applies(problem: Problem) -> str | None:
    """``None`` when :func:`list_copy` schedules ``problem``'s copy phase(s), else why not."""
    coll = problem.collective
    if coll.general:
        return "a chunk table (named collectives only)"
    if coll.unicast:
        return f"copies to every NPU only (All-Gather, Broadcast and their mirrors), not {problem.kind}"
    return None


def list_work(problem: Problem, hops: Hops) -> int:
    """The work of one run: (NPU, chunk) receipts x hops (each commit rescans every hop's cached offer)."""
    return int(problem.num_chunks) * max(problem.num_npus - 1, 1) * max(len(hops), 1)


def list_copy(problem: Problem, *, hops: Hops | None = None, link_free: np.ndarray | None = None,
              chunk_ready: np.ndarray | None = None, rule: str = RULES[0]) -> Schedule:
    """The list schedule (see the module docstring) of a copy collective to every NPU (All-Gather, Broadcast).

    Parameters
    ----------
    problem : Problem
        All-Gather or Broadcast (a named collective), on a switched fabric or point-to-point links.
    hops : Hops, optional
        The hops to use (default :func:`solvers.fabric_routes.build_hops` of the topology and chunk size).
    link_free, chunk_ready : array, optional
        A start state: link ``l`` is free from ``link_free[l]``; chunk ``c`` is at its source from
        ``chunk_ready[c]`` (All-Reduce's All-Gather phase after its Reduce-Scatter).
    rule : str
        ``<ties>`` or ``<ties>+near``, ``ties`` one of ``id``, ``ring``, ``group`` (:data:`RULES` are those
        greedy_plus tries). The ties after the rarest chunk: ``id`` the lowest chunk, then the lowest hop; ``ring``
        the hop whose receiver follows its sender most closely in id order (``(dst - src) mod N``: on a rail of K
        nodes the NICs then send round a K-cycle instead of pairing off and leaving a node idle), then the lowest
        chunk; ``group`` the same within the groups of NPUs joined by the fastest hops (a node's NVSwitch) and,
        between groups, by group (the NICs of a rail round the nodes, the NVSwitch ports round the node).
        ``+near``: a hop ``u -> v`` carries no chunk that an NPU with a shorter hop to ``v`` holds or will hold (the
        NIC brings only what the node lacks, the NVSwitch spreads it; the fabric greedy's ``local_first``).

    Raises
    ------
    SolverError
        On a collective it does not take, an unknown rule, or when some receipt is unreachable over the hops.
    """
    ties, _, near = rule.partition("+")
    if ties not in TIES or near not in ("", "near"):
        raise SolverError(f"list schedule rule {rule!r}: expected <ties> or <ties>+near, ties one of "
                          f"{', '.join(TIES)}")
    why = applies(problem)
    if why is not None or not problem.collective.copies:
        raise SolverError(f"the list schedule takes {why or 'copy collectives'}")
    topo = problem.topology
    n, C, L = problem.num_npus, problem.num_chunks, topo.num_links
    if hops is None:
        hops = build_hops(topo, problem.chunk_bytes)
    src = np.asarray(problem.sources, dtype=np.int64)
    R0 = np.full((C, n), np.inf)
    R0[np.arange(C), src] = 0.0 if chunk_ready is None else np.asarray(chunk_ready, dtype=np.float64)
    pend = np.ones((n, C), dtype=np.bool_)
    pend[src, np.arange(C)] = False
    left = int(pend.sum())
    if left == 0 or len(hops) == 0:
        if left:
            raise SolverError(f"{topo.name}: the list schedule has no hop to deliver over")
        return Schedule.empty()
    free0 = np.full(L + 1, -np.inf)
    free0[:L] = 0.0 if link_free is None else np.asarray(link_free, dtype=np.float64)
    H = len(hops)
    lh_ptr, lh_idx = _link_hops(hops, L)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    out_ptr[1:] = np.cumsum([len(x) for x in hops.out_of])
    out_idx = np.concatenate(hops.out_of).astype(np.int64)
    ch, hop, start, stuck = _list_kernel(n, C, R0, pend, left, hops.src, hops.dst, hops.dur, hops.link_pad,
                                         hops.off_pad, hops.end_pad, lh_ptr, lh_idx, out_ptr, out_idx, free0, L,
                                         _REL, _hop_keys(hops, n, ties), *_near(hops, n, bool(near)))
    if stuck:
        raise SolverError(f"{topo.name}: the list schedule is stuck with {stuck} (NPU, chunk) receipts unreachable "
                          "over hops")
    return hop_rows(hops, ch, hop, start)


def warmup() -> None:
    """Compile (or load from numba's cache) the kernel on a tiny problem."""
    from tacos_bench import Collective
    from tacos_bench.topology.fabrics import switched

    list_copy(Problem(switched(3), Collective("all_gather", 1, 1)))


def _near(hops: Hops, n: int, local: bool) -> tuple[np.ndarray, np.ndarray]:
    """CSR per hop ``u -> v`` of the NPUs other than ``u`` with a hop to ``v`` shorter than it (``local``; else
    none): a chunk one of them holds or will hold reaches ``v`` sooner from there."""
    ptr = np.zeros(len(hops) + 1, dtype=np.int64)
    if not local:
        return ptr, np.zeros(0, dtype=np.int64)
    best = np.full((n, n), np.inf)
    np.minimum.at(best, (hops.src, hops.dst), hops.dur)
    idx = []
    for h in range(len(hops)):
        u, v, d = int(hops.src[h]), int(hops.dst[h]), float(hops.dur[h])
        w = np.flatnonzero(best[:, v] < d * (1 - 1e-9))
        w = w[w != u]
        idx.extend(w.tolist())
        ptr[h + 1] = len(idx)
    return ptr, np.array(idx, dtype=np.int64)


def _hop_keys(hops: Hops, n: int, ties: str) -> np.ndarray:
    """Each hop's tie key after the rarest chunk (``ring``: how far the receiver follows the sender; ``group``:
    the same within a group and between groups, :func:`solvers.fabric_routes.fastest_groups`)."""
    if ties == "ring":
        return ((hops.dst - hops.src) % n).astype(np.float64)
    if ties == "group":
        gid, pos, size = fastest_groups(hops, n)
        u, v = hops.src, hops.dst
        inside = gid[u] == gid[v]
        return np.where(inside, (pos[v] - pos[u]) % size[gid[u]],
                        n + (gid[v] - gid[u]) % len(size)).astype(np.float64)
    return np.zeros(len(hops))


def _link_hops(hops: Hops, L: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the hops over each link (a commit on a link changes their offers)."""
    H, W = hops.link_pad.shape
    flat = hops.link_pad.ravel()
    owner = np.repeat(np.arange(H, dtype=np.int64), W)
    keep = flat < L
    lk, ow = flat[keep], owner[keep]
    order = np.argsort(lk, kind="stable")
    ptr = np.zeros(L + 1, dtype=np.int64)
    np.add.at(ptr, lk + 1, 1)
    return np.cumsum(ptr), ow[order]


@njit(cache=True)
def _offer(h, C, R, pend, holders, hsrc, hdst, hdur, link_pad, off_pad, free, L, rel, near_ptr, near_idx):
    """Hop ``h``'s best transfer: (completion, chunk) of the chunk its sender holds and its receiver needs that
    completes first behind the hop's links, the fewest holders then the lowest id on ties ((inf, -1): none)."""
    u = hsrc[h]
    v = hdst[h]
    sf = -np.inf
    for k in range(link_pad.shape[1]):
        lk = link_pad[h, k]
        if lk < L:
            x = free[lk] - off_pad[h, k]
            if x > sf:
                sf = x
    best = np.inf
    bc = -1
    d = hdur[h]
    for c in range(C):
        if pend[v, c]:
            r = R[c, u]
            if r < np.inf:
                near = False
                for i in range(near_ptr[h], near_ptr[h + 1]):
                    if R[c, near_idx[i]] < np.inf:
                        near = True
                        break
                if near:
                    continue
                t = (r if r > sf else sf) + d
                if bc < 0 or t < best - rel * max(1.0, abs(best)):
                    best = t
                    bc = c
                elif t <= best + rel * max(1.0, abs(best)) and holders[c] < holders[bc]:
                    best = t if t < best else best
                    bc = c
    return best, bc


@njit(cache=True)
def _list_kernel(n, C, R0, pend, left, hsrc, hdst, hdur, link_pad, off_pad, end_pad, lh_ptr, lh_idx, out_ptr,
                 out_idx, free0, L, rel, hkey, near_ptr, near_idx):
    """The list schedule's loop: per hop a cached offer, rebuilt only where a commit changed it (the hops over
    the committed links, out of the receiver, and those offering the committed chunk, whose holder count
    grew). Returns (chunk, hop, start) per transfer and the receipts left unreachable (0: none)."""
    H = hsrc.shape[0]
    R = R0.copy()
    free = free0.copy()
    holders = np.zeros(C, dtype=np.int64)
    for c in range(C):
        for v in range(n):
            if R[c, v] < np.inf:
                holders[c] += 1
    bt = np.full(H, np.inf)
    bc = np.full(H, -1, dtype=np.int64)
    for h in range(H):
        bt[h], bc[h] = _offer(h, C, R, pend, holders, hsrc, hdst, hdur, link_pad, off_pad, free, L, rel, near_ptr,
                                   near_idx)
    out_c = np.empty(left, dtype=np.int64)
    out_h = np.empty(left, dtype=np.int64)
    out_s = np.empty(left)
    dirty = np.zeros(H, dtype=np.bool_)
    # the holders of each hop's chunk when its offer was made: offers only get worse (links fill, holders grow,
    # receivers and near NPUs receive) except by a new chunk at the sender, which rebuilds the hops out of it
    # eagerly; so a cached offer is a lower bound, and the earliest one is rebuilt, and taken only if unchanged
    bh = np.zeros(H, dtype=np.int64)
    for h in range(H):
        if bc[h] >= 0:
            bh[h] = holders[bc[h]]
    m = 0
    while m < left:
        g = _earliest(H, bt, bc, bh, hkey, rel)
        while g >= 0:
            t, c = _offer(g, C, R, pend, holders, hsrc, hdst, hdur, link_pad, off_pad, free, L, rel, near_ptr,
                          near_idx)
            if c == bc[g] and t == bt[g] and (c < 0 or holders[c] == bh[g]):
                break
            bt[g], bc[g] = t, c
            if c >= 0:
                bh[g] = holders[c]
            g = _earliest(H, bt, bc, bh, hkey, rel)
        if g < 0:
            return out_c[:m], out_h[:m], out_s[:m], left - m
        c = bc[g]
        u = hsrc[g]
        v = hdst[g]
        s = R[c, u]
        for k in range(link_pad.shape[1]):
            lk = link_pad[g, k]
            if lk < L and free[lk] - off_pad[g, k] > s:
                s = free[lk] - off_pad[g, k]
        for k in range(link_pad.shape[1]):
            lk = link_pad[g, k]
            if lk < L:
                free[lk] = s + end_pad[g, k]
        R[c, v] = s + hdur[g]
        pend[v, c] = False
        holders[c] += 1
        out_c[m] = c
        out_h[m] = g
        out_s[m] = s
        m += 1
        # the offers a commit changes
        for k in range(link_pad.shape[1]):
            lk = link_pad[g, k]
            if lk < L:
                for i in range(lh_ptr[lk], lh_ptr[lk + 1]):
                    dirty[lh_idx[i]] = True
        for i in range(out_ptr[v], out_ptr[v + 1]):
            dirty[out_idx[i]] = True
        for h in range(H):
            if dirty[h]:
                bt[h], bc[h] = _offer(h, C, R, pend, holders, hsrc, hdst, hdur, link_pad, off_pad, free, L, rel,
                                      near_ptr, near_idx)
                if bc[h] >= 0:
                    bh[h] = holders[bc[h]]
                dirty[h] = False
    return out_c, out_h, out_s, 0


@njit(cache=True)
def _earliest(H, bt, bc, bh, hkey, rel):
    """The hop of the earliest cached offer; ties: fewest holders, then the hop's key, the lowest chunk, the
    lowest hop (-1: no offer)."""
    g = -1
    gt = np.inf
    for h in range(H):
        c = bc[h]
        if c < 0:
            continue
        t = bt[h]
        if g < 0 or t < gt - rel * max(1.0, abs(gt)):
            g = h
            gt = t
        elif t <= gt + rel * max(1.0, abs(gt)):
            gc = bc[g]
            if bh[h] < bh[g] or (bh[h] == bh[g] and (hkey[h] < hkey[g] or (hkey[h] == hkey[g] and c < gc))):
                g = h
                gt = t if t < gt else gt
    return g
