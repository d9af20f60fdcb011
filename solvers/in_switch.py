"""All-Reduce inside switches that multicast and reduce: NVLS-like on one switch (shared by ``greedy_plus`` and
the ``nvls`` baseline) and SHARP-like on a two-level tree of such switches (the ``sharp`` baseline).

For each chunk ``c`` (owner ``o = c mod N``) two cut-through transfers: the *reduction* -- every other NPU sends
its contribution to ``o`` at once and the switches deliver the sum (a reduction group, docs/fabrics.md) -- and,
one slot later, the *multicast* of the result from ``o`` to every other NPU. On one switch ``s`` the routes are
``u > s > o``; on a tree of leaves (each NPU's switch) under spines, ``u > leaf(u) > spine > leaf(o) > o``
between leaves and ``u > leaf > o`` within one, each chunk through one spine (round robin). The reduction of
a chunk uses every up-port but the owner's, the owner's down-port and, towards the spine, every uplink but
the owner's leaf's and that leaf's downlink from it; the multicast of a chunk of the same owner uses exactly
the other directions, so the two run side by side. Chunks go owner by owner; a change of owner costs one
slot. With ``K`` chunks per NPU the schedule takes ``N K + N`` slots where every up-port must carry ``N K``
chunk-sends (the bound): ``1 + 1/K`` times it when the slot is the port time (one switch, or spines fast
enough). The slot is the slowest route's time (sum of the largest latencies per level plus the chunk at the
slowest link: exact on uniform fabrics, an upper bound otherwise).
"""

from __future__ import annotations

import numpy as np

from tacos_bench.cost import link_time_us
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, REDUCE, Schedule
from tacos_bench.topology import CUT_THROUGH, Topology


def nvls_switch(topo: Topology) -> int | None:
    """A cut-through switch with ``multicast`` and ``reduce`` linked both ways to every NPU, or None."""
    n = topo.num_npus
    for i, sw in enumerate(topo.switches):
        s = n + i
        if sw.mode == CUT_THROUGH and sw.multicast and sw.reduce:
            npus = np.arange(n)
            if np.all(topo.link_ids(npus, np.full(n, s)) >= 0) and np.all(topo.link_ids(np.full(n, s), npus) >= 0):
                return s
    return None


def reduction_tree(topo: Topology) -> tuple[np.ndarray, list[int]] | None:
    """Each NPU's leaf (the first cut-through switch with ``multicast`` and ``reduce`` linked both ways to it)
    and the spines (such switches linked both ways to every leaf; none when one leaf holds every NPU), or
    None when some NPU has no such switch or several leaves share no spine."""
    n = topo.num_npus
    able = [n + i for i, sw in enumerate(topo.switches) if sw.mode == CUT_THROUGH and sw.multicast and sw.reduce]
    if not able:
        return None
    npus = np.arange(n)
    leaf = np.full(n, -1, np.int64)
    for s in able:
        both = (topo.link_ids(npus, np.full(n, s)) >= 0) & (topo.link_ids(np.full(n, s), npus) >= 0)
        leaf[(leaf < 0) & both] = s
    if (leaf < 0).any():
        return None
    leaves = np.unique(leaf)
    if leaves.size == 1:
        return leaf, []
    k = leaves.size
    spines = [s for s in able if s not in set(leaves.tolist())
              and np.all(topo.link_ids(leaves, np.full(k, s)) >= 0) and np.all(topo.link_ids(np.full(k, s), leaves) >= 0)]
    return (leaf, spines) if spines else None


def nvls_all_reduce(problem: Problem) -> Schedule:
    """The in-switch All-Reduce of ``problem`` (see the module docstring).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology import Switch, Topology
    >>> e = [(i, 4, 50, 0.5) for i in range(4)] + [(4, i, 50, 0.5) for i in range(4)]
    >>> p = Problem(Topology.from_edges(4, e, switches=[Switch(multicast=True, reduce=True)]),
    ...             Collective("all_reduce", 2, 64))
    >>> s = nvls_all_reduce(p)
    >>> slot = 1.0 + p.chunk_bytes / (50 * 2**30) * 1e6
    >>> round(s.makespan_us / slot, 6)   # N K + N slots
    12.0
    """
    s = _one_switch(problem)
    return _in_network_pipeline(problem, np.full(problem.num_npus, s, np.int64), [])


def _one_switch(problem: Problem) -> int:
    """The switch of an in-switch All-Reduce of ``problem`` (:func:`nvls_switch`), or a one-line error."""
    if problem.kind != "all_reduce":
        raise SolverError(f"the in-switch pipeline is an All-Reduce, not {problem.kind}")
    s = nvls_switch(problem.topology)
    if s is None:
        raise SolverError(f"{problem.topology.name!r} has no cut-through switch with multicast and reduce joined "
                          "to every NPU")
    return s


def interleaved_all_reduce(problem: Problem) -> Schedule:
    """The in-switch All-Reduce of ``problem`` on one switch (:func:`nvls_switch`), owner changes interleaved:
    ``N K + 3`` slots instead of ``N K + N`` (``N K + 1`` for two NPUs, ``N K + 2`` for three).

    Owners go in order; inside an owner's block each slot reduces its next chunk and multicasts the previous
    one, as in :func:`nvls_all_reduce`. Where the owner changes from ``a`` to ``b`` (``c`` next), one slot
    holds three operations that share no port: ``b``'s first reduction without ``a``'s contribution, ``a``'s
    last multicast to everyone but ``b`` and ``c``, and ``b``'s contribution to ``c``'s first chunk (a reduce
    of one row, early). ``a``'s contribution to ``b``'s first chunk went the same way one block before (the
    first block's came in its first slot, where the owner's up-port is idle). What each change leaves out --
    ``a``'s last chunk to ``b`` and ``c`` -- goes at the end: to the last owner next to its last multicast,
    the others as multicasts in two more slots (one up-port each, two down-ports, alternate changes apart).

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology import Switch, Topology
    >>> e = [(i, 8, 50, 0.5) for i in range(8)] + [(8, i, 50, 0.5) for i in range(8)]
    >>> p = Problem(Topology.from_edges(8, e, switches=[Switch(multicast=True, reduce=True)]),
    ...             Collective("all_reduce", 8, 1024))
    >>> slot = 1.0 + p.chunk_bytes / (50 * 2**30) * 1e6
    >>> round(interleaved_all_reduce(p).makespan_us / slot, 6), round(nvls_all_reduce(p).makespan_us / slot, 6)
    (67.0, 72.0)
    """
    s = _one_switch(problem)
    n, C = problem.num_npus, problem.num_chunks
    slot = _slot_us(problem, np.full(n, s, np.int64), [])
    chunks = [list(range(o, C, n)) for o in range(n)]
    rows = []

    def send(k: int, c: int, u: int, vs, op: int):
        for v in vs:
            rows.append((c, u, v, k * slot, (k + 1) * slot, op, f"{u}>{s}>{v}"))

    k = 0
    late = []      # (owner, its last chunk, the two NPUs its last multicast left out)
    for o in range(n):
        nxt = o + 1 if o + 1 < n else None
        early = set() if o == 0 else {o - 1}      # contributed to this owner's first chunk one block before
        for j, c in enumerate(chunks[o]):
            for u in range(n):
                if u != o and not (j == 0 and u in early):
                    send(k, c, u, [o], REDUCE)
            if j:
                send(k, chunks[o][j - 1], o, [v for v in range(n) if v != o], COPY)
            elif o:
                # the owner change: the previous owner's last multicast, leaving out this owner and the next
                a = o - 1
                skip = {o} | ({nxt} if nxt is not None else set())
                send(k, chunks[a][-1], a, [v for v in range(n) if v != a and v not in skip], COPY)
                late.append((a, chunks[a][-1], sorted(skip)))
            if j == 0 and nxt is not None:
                # this owner's contribution to the next owner's first chunk, early (its up-port is free now)
                send(k, chunks[nxt][0], o, [nxt], REDUCE)
            k += 1
    # the last owner's last multicast, with the last change's left-out copy to it (its down-port is free)
    last = n - 1
    send(k, chunks[last][-1], last, [v for v in range(n) if v != last], COPY)
    rest = []
    for a, c, skip in late:
        if a == last - 1:
            send(k, c, a, [last], COPY)
            skip = [v for v in skip if v != last]
        if skip:
            rest.append((a, c, skip))
    k += 1
    for parity in (0, 1):
        mine = [x for x in rest if x[0] % 2 == parity]
        for a, c, vs in mine:
            send(k, c, a, vs, COPY)
        k += bool(mine)
    c, a, b, t0, t1, op, r = zip(*rows)
    return Schedule(c, a, b, t0, t1, np.array(op, dtype=np.int8), route=list(r)).sorted()


def sharp_all_reduce(problem: Problem) -> Schedule:
    """The in-network All-Reduce of ``problem`` on its tree of reducing switches (:func:`reduction_tree`; see
    the module docstring): one switch (then it is :func:`nvls_all_reduce`'s schedule) or leaves under spines.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.fabrics import leaf_spine
    >>> t = leaf_spine(2, 4, oversubscription=1, leaf_multicast=True, leaf_reduce=True, spine_multicast=True,
    ...                spine_reduce=True)
    >>> s = sharp_all_reduce(Problem(t, Collective("all_reduce", 2, 64)))
    >>> slot = 4 * 0.5 + 4 * 2**20 / (50 * 2**30) * 1e6     # four hops, a 4 MiB chunk at the port rate
    >>> round(s.makespan_us / slot, 6)   # N K + N slots
    24.0
    """
    if problem.kind != "all_reduce":
        raise SolverError(f"the in-network pipeline is an All-Reduce, not {problem.kind}")
    tree = reduction_tree(problem.topology)
    if tree is None:
        raise SolverError(f"{problem.topology.name!r} has no tree of cut-through switches with multicast and reduce "
                          "(every NPU on a leaf, every leaf on a common spine)")
    return _in_network_pipeline(problem, *tree)


def _slot_us(problem: Problem, leaf: np.ndarray, spines: list[int]) -> float:
    """The pipelines' slot: the slowest route NPU > leaf[u] (> spine > leaf[v]) > NPU, a route being one
    cut-through segment (its latencies + the chunk at its slowest link)."""
    topo = problem.topology
    n = problem.num_npus
    npus = np.arange(n)
    up, down = topo.link_ids(npus, leaf), topo.link_ids(leaf, npus)
    lat, bw = np.asarray(topo.lat_us), np.asarray(topo.bw_GiBps)
    same = leaf[:, None] == leaf[None, :]
    slot = 0.0
    for sp in spines or [None]:
        l_lat, l_bw = lat[up][:, None] + lat[down][None, :], np.minimum(bw[up][:, None], bw[down][None, :])
        if sp is not None:
            ls, sl = topo.link_ids(leaf, np.full(n, sp)), topo.link_ids(np.full(n, sp), leaf)
            l_lat = np.where(same, l_lat, l_lat + lat[ls][:, None] + lat[sl][None, :])
            l_bw = np.where(same, l_bw, np.minimum(l_bw, np.minimum(bw[ls][:, None], bw[sl][None, :])))
        slot = max(slot, float((l_lat + link_time_us(l_bw, 0.0, problem.chunk_bytes)).max()))
    return slot


def _in_network_pipeline(problem: Problem, leaf: np.ndarray, spines: list[int]) -> Schedule:
    """The owner-by-owner pipeline of reductions and multicasts through ``leaf[u]`` (and one of ``spines``
    per chunk, round robin, between leaves)."""
    n, C = problem.num_npus, problem.num_chunks
    slot = _slot_us(problem, leaf, spines)

    def route(u: int, v: int, sp) -> str:
        if leaf[u] == leaf[v]:
            return f"{u}>{leaf[u]}>{v}"
        return f"{u}>{leaf[u]}>{sp}>{leaf[v]}>{v}"

    rows = []
    k = 0
    prev_owner = None
    m = 0   # chunks so far: the spine of each, round robin
    for o in range(n):
        for c in range(o, C, n):
            if prev_owner is not None and prev_owner != o:
                k += 1   # the previous owner's last multicast occupies the slot this reduction would share
            sp = spines[m % len(spines)] if spines else None
            for u in range(n):
                if u != o:
                    rows.append((c, u, o, k * slot, (k + 1) * slot, REDUCE, route(u, o, sp)))
            for v in range(n):
                if v != o:
                    rows.append((c, o, v, (k + 1) * slot, (k + 2) * slot, COPY, route(o, v, sp)))
            k += 1
            m += 1
            prev_owner = o
    c, a, b, t0, t1, op, r = zip(*rows)
    return Schedule(c, a, b, t0, t1, np.array(op, dtype=np.int8), route=list(r)).sorted()
