"""The TACOS greedy on switched fabrics: free sender ports matched to free receiver ports through switches.

Time advances event by event, as in TACOS. At each event every NPU (in a seeded random order) is offered, over
each *hop* into it (:mod:`solvers.fabric_routes`: a path through switches from another NPU) whose links
are all free, the chunks the hop's sender holds and it still needs; it takes the rarest (fewest holders, then
a seeded random key), and repeats while a hop into it is free and useful — so an NPU with an NVSwitch port and
a NIC receives on both. Where the chosen hop crosses a switch with ``multicast``, every other NPU that needs
the chunk and whose hop from the same sender branches off the reserved links at a multicast switch, over free
links, joins the transfer (in-network multicast: the shared links carry the chunk once).

Unicast collectives (Gather, Scatter, All-to-All) move each chunk along hops that shorten its remaining time
to its destination (an NPU may relay); a chunk has one holder at a time.

Reducing collectives come from the copy ones by :mod:`solvers.compose` (the reversed fabric swaps
``multicast`` and ``reduce``, so a multicast tree becomes an in-network reduction). All-Reduce runs its
All-Gather phase forward from the Reduce-Scatter's end state (:func:`fabric_copy` with ``link_free`` and
``chunk_ready``).
"""

from __future__ import annotations

import heapq

import numpy as np

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule, route_column

from ..fabric_routes import Hops, build_hops, segment_table

def _eps(t: float) -> float:
    return 1e-9 * max(1.0, abs(t))


def fabric_copy(problem: Problem, *, seed: int = 0, max_switches: int = 0, chunk_order: str = "rarest",
                link_free: np.ndarray | None = None, chunk_ready: np.ndarray | None = None,
                hops: Hops | None = None, local_first: bool = False, engine: str = "auto",
                stats: dict | None = None, holds: tuple | None = None, alive: np.ndarray | None = None,
                subset_trees: bool = False) -> Schedule:
    """A schedule of the copy collective of ``problem`` (a switched fabric or not).

    Parameters
    ----------
    problem : Problem
        A copy collective (All-Gather, Broadcast, Gather, Scatter, All-to-All).
    seed : int
        Orders NPUs at each event and breaks ties between chunks.
    max_switches : int
        Hops through at most this many switches (0: the fewest that connect the NPUs).
    chunk_order : {"rarest", "random"}
        ``rarest``: the chunk fewest NPUs hold or receive (pipelines a Broadcast); ``random``: TACOS's rule.
    local_first : bool
        Over a hop, offer only chunks that no NPU with a faster hop to the receiver holds or is receiving
        (a slow NIC then brings what the node lacks, and the NVSwitch spreads it).
    engine : {"auto", "python"}
        ``auto``: All-Gather and Broadcast on the compiled kernel (:mod:`solvers.greedy._kernel_fabric`; on
        large problems it looks at no more than ``SCAN_CAP`` candidate chunks per hop), unicast chunks on
        :mod:`solvers.greedy._kernel_fabric_unicast` (the Python loop's schedule, row for row);
        ``python``: everything in Python (the reference the kernels are tested against).
    link_free, chunk_ready : array, optional
        A start state: link ``l`` is free from ``link_free[l]`` (``inf``: never, a failed link); chunk ``c``
        is at its source from ``chunk_ready[c]`` (All-Reduce's All-Gather phase after its Reduce-Scatter).
    holds, alive : optional
        A start state instead of the sources (a fault's, :mod:`solvers.repair`): ``holds = (npu, chunk,
        time)`` arrays, NPU ``npu[i]`` holding ``chunk[i]`` from ``time[i]`` on; NPUs with ``alive`` false
        need nothing. A unicast chunk moves on from the holder that reaches its destination first.
    subset_trees : bool
        A copy chunk table whose chunks go to subsets of the NPUs (MoE dispatch): multicast trees on the
        compiled kernel, only the chunk's destinations receiving it (so a token for two GPUs of one node
        crosses the NIC once and the second copy comes over the NVSwitch). Without it such a table is not
        taken here: :func:`solvers.compose.per_destination` hands it over as unicast chunks.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology import Switch, Topology
    >>> from tacos_bench.verify import verify
    >>> e = [(i, 8, 50, 0.5) for i in range(8)] + [(8, i, 50, 0.5) for i in range(8)]
    >>> p = Problem(Topology.from_edges(8, e, switches=[Switch()]), Collective("broadcast", 8, 1024))
    >>> s = fabric_copy(p)
    >>> t = 1.0 + 128 * 2**20 / (50 * 2**30) * 1e6     # one chunk through the switch
    >>> round(verify(p, s).collective_time_us / t, 3)  # 3 port times to reach all 8 NPUs, then 7 more chunks
    10.0
    """
    if not problem.collective.copies:
        raise SolverError(f"fabric_copy schedules copy collectives, not {problem.kind}")
    if chunk_order not in ("rarest", "random"):
        raise SolverError(f"chunk_order must be rarest or random on a fabric, got {chunk_order!r}")
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    hops = hops or build_hops(topo, problem.chunk_bytes, max_switches)
    rng = np.random.default_rng(seed)
    key = rng.random(C)                    # tie-break between chunks
    multicast_kind = problem.collective.multicast   # every NPU needs every chunk (a table's too)
    src_of = np.asarray(problem.sources)
    dst_of = np.asarray(problem.destinations)
    if subset_trees:
        return _subset_trees(problem, hops, key, seed, chunk_order == "rarest", local_first, holds, alive,
                             link_free, chunk_ready, stats, engine)

    busy = np.zeros(topo.num_links) if link_free is None else np.array(link_free, dtype=np.float64)
    live = np.ones(n, dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
    dist = route_next = None
    if not multicast_kind:
        dist = _hop_distances(n, hops)
    hv, hc, ht = _start_state(problem, holds, chunk_ready)
    if holds is not None and not multicast_kind:
        # each unicast chunk moves on from the holder whose copy can reach its destination first
        src_of, ready = _nearest_holders(hv, hc, ht, dst_of, dist, C)
        hv, hc, ht = src_of, np.arange(C, dtype=np.int64), ready
    if multicast_kind:
        need = np.repeat(live[:, None], C, axis=1)        # need[v, c]: v must end up with c
    else:
        need = np.zeros((n, C), dtype=bool)
        need[dst_of, np.arange(C)] = live[dst_of]
    if not multicast_kind:
        at = src_of.copy()                 # the one holder of each unicast chunk (-1 while moving)
        # greedy_plus: every chunk follows a route of hops chosen up front to spread the links' load
        route_next = _balanced_routes(topo, hops, dist, src_of, dst_of, key) if local_first else None
    if not (need & ~_held(n, C, hv, hc)).any():
        return Schedule.empty()
    if multicast_kind and engine != "python":
        return _compiled_multicast(problem, hops, key, seed, chunk_order == "rarest", local_first,
                                   (hv, hc, ht, need), link_free, stats)
    if engine != "python":
        return _compiled_unicast(problem, hops, key, rng, chunk_order == "rarest", route_next, dist,
                                 (hv, hc, ht, need[dst_of, np.arange(C)]), dst_of, link_free, stats)
    # the Python loop's own state (the kernels build theirs)
    has = np.zeros((n, C), dtype=bool)     # holds the chunk (arrived)
    coming = np.zeros((n, C), dtype=bool)  # a transfer of the chunk to it is under way
    holders = np.zeros(C, dtype=np.int64)  # NPUs holding or receiving each chunk
    got = np.zeros(n, dtype=np.int64)      # chunks each NPU holds or receives
    events: list = []                      # (time, kind, npu, chunk): kind 0 = arrival
    for s, c, t0 in zip(hv.tolist(), hc.tolist(), ht.tolist()):
        if not coming[s, c]:
            holders[c] += 1
            coming[s, c] = True
            got[s] += 1
        heapq.heappush(events, (float(t0), 0, s, c))
    missing = int(need.sum())              # arrivals count down, the start's own copies too

    rows: list[tuple] = []
    hop_links = hops.links
    near = _faster_senders(n, hops) if local_first and multicast_kind else None

    best_in = None
    if near is not None:
        best_in = np.full((n, n), np.inf)
        np.minimum.at(best_in, (hops.src, hops.dst), hops.dur)

    def _offers(v: int, hs: list, taken: set, picked: dict) -> list:
        """Multicast kinds, vectorized over the hops ``hs`` into ``v``: ``(score, hop, chunk)`` of each hop's
        best chunk (see ``_best_chunk``)."""
        hs = np.asarray(hs, dtype=np.int64)
        base = ~(has[v] | coming[v])
        if taken:
            base[list(taken)] = False
        M = has[hops.src[hs]] & base[None, :]
        if near is not None:
            durs = hops.dur[hs]
            for d in np.unique(durs):
                rows = np.flatnonzero(durs == d)
                w = np.flatnonzero(best_in[:, v] < d * (1 - 1e-9))
                if not w.size:
                    continue
                local = (has[w] | coming[w]).any(axis=0)
                for x in w.tolist():
                    for c in picked.get(x, ()):
                        local[c] = True
                own = np.isin(hops.src[hs[rows]], w)
                M[rows[~own]] &= ~local
                for r in rows[own].tolist():   # the sender itself is near: leave its own holdings out
                    w2 = w[w != hops.src[hs[r]]]
                    loc2 = (has[w2] | coming[w2]).any(axis=0) if w2.size else np.zeros(C, bool)
                    for x in w2.tolist():
                        for c in picked.get(x, ()):
                            loc2[c] = True
                    M[r] &= ~loc2
        sc = holders + key * 0.5 if chunk_order == "rarest" else key
        S = np.where(M, sc[None, :], np.inf)
        best = S.argmin(axis=1)
        out = []
        for r in np.flatnonzero(np.isfinite(S[np.arange(len(hs)), best])).tolist():
            c = int(best[r])
            h = int(hs[r])
            lead = int(holders[c]) if chunk_order == "rarest" else 0
            out.append(((lead, float(hops.dur[h]), float(key[c])), h, c))
        return out

    at_index = (np.zeros(0, np.int64), np.zeros(0, np.int64))   # set per event (unicast)

    def _best_chunk(h: int, v: int, taken: set, picked: dict):
        """The chunk hop ``h`` would bring ``v`` and its score (lower is better), or None; ``taken``: chunks
        already picked at this event (for ``v``, or moving unicast chunks)."""
        u = int(hops.src[h])
        if multicast_kind:
            cand = np.flatnonzero(has[u] & ~has[v] & ~coming[v])
        else:
            # the chunks at u, from this event's index of ``at`` (ascending ids, as a scan would give them)
            by_at, at_sorted = at_index
            here = by_at[np.searchsorted(at_sorted, u, "left"):np.searchsorted(at_sorted, u, "right")]
            cand = here[has[u, here] & ~has[v, here] & ~coming[v, here]]
            if cand.size and route_next is not None:
                cand = cand[[route_next.get((int(c), u)) == v for c in cand]]
            elif cand.size:
                d = dst_of[cand]
                cand = cand[(d == v) | (dist[v, d] + hops.dur[h] <= dist[u, d] * (1 + 1e-9) + 1e-9)]
        if taken and cand.size:
            cand = cand[[int(c) not in taken for c in cand]]
        if near is not None and cand.size and len(near[h]):
            w = near[h]
            cand = cand[~(has[w][:, cand] | coming[w][:, cand]).any(axis=0)]
            local = set().union(*(picked.get(int(x), ()) for x in w))   # picked at this event
            if local and cand.size:
                cand = cand[[int(c) not in local for c in cand]]
        if not cand.size:
            return None
        if chunk_order == "rarest" and not multicast_kind:
            # unicast: the chunk with the longest way still to go first, so far destinations never wait
            rem = dist[u, dst_of[cand]]
            i = np.lexsort((key[cand], -rem))[0]
            return (-float(rem[i]), float(hops.dur[h]), float(key[cand[i]])), int(cand[i])
        if chunk_order == "rarest":
            i = np.lexsort((key[cand], holders[cand]))[0]
            return (int(holders[cand[i]]), float(hops.dur[h]), float(key[cand[i]])), int(cand[i])
        i = int(np.argmin(key[cand]))
        return (0, float(hops.dur[h]), float(key[cand[i]])), int(cand[i])
    t = float(ht.min())
    while True:
        while events and events[0][0] <= t + _eps(t):
            _, _, v, c = heapq.heappop(events)
            if not has[v, c]:
                has[v, c] = True
                coming[v, c] = False
                if need[v, c]:
                    missing -= 1
                if not multicast_kind:
                    at[c] = v
        if not missing:
            break
        # the neediest receivers first (fewest chunks held or coming; ties at random): a Broadcast's root then
        # feeds NPUs that hold nothing yet, and the holders multiply as in a binomial tree
        order = np.lexsort((rng.random(n), got)).tolist()
        senders = None
        if not multicast_kind:
            # only a holder of a chunk still on its way can send one, and on a planned route only to the
            # chunk's next NPU: the other hops need no look
            left = np.flatnonzero((at >= 0) & need[dst_of, np.arange(C)] & ~has[dst_of, np.arange(C)])
            if route_next is None:
                senders = np.zeros(n, dtype=bool)
                senders[at[left]] = True
            else:
                senders = np.zeros((n, n), dtype=bool)
                for c in left.tolist():
                    v = route_next.get((c, int(at[c])))
                    if v is not None:
                        senders[at[c], v] = True
        if not multicast_kind:   # at does not change while the picks are chosen: index it once per event
            by_at = np.argsort(at, kind="stable")
            at_index = (by_at, at[by_at])
        picks = _match(order, hops, t, busy, _best_chunk, _offers if multicast_kind else None,
                       unicast=not multicast_kind, senders=senders)
        pending = np.zeros(topo.num_links, dtype=np.int64)   # links of the picks still to commit
        for _, h, _ in picks:
            pending[hop_links[h]] += 1
        for v, h, c in picks:
            pending[hop_links[h]] -= 1
            # an earlier pick's multicast tree may have reached v or taken a link of this hop
            if coming[v, c] or has[v, c] or np.any(busy[hop_links[h]] > t + hops.off[h] + _eps(t)):
                continue
            if not multicast_kind:
                at[c] = -1
            tree = _grow_tree(problem, hops, h, c, t, busy, has, coming, need if multicast_kind else None,
                              forbidden=pending)
            for w, end in _reserve(topo, hops, tree, c, t, busy, rows):
                coming[w, c] = True
                holders[c] += 1
                got[w] += 1
                heapq.heappush(events, (end, 0, w, c))
        # the next event: an arrival, or a link becoming free
        nxt = [events[0][0]] if events else []
        later = busy[(busy > t + _eps(t)) & np.isfinite(busy)]
        if later.size:
            nxt.append(float(later.min()))
        if not nxt:
            raise SolverError(f"{topo.name}: the fabric greedy is stuck with {missing} (NPU, chunk) pairs "
                              "unreached (no hop reaches them)")
        t = min(nxt)
    if stats is not None:
        stats.update(engine="fabric", hops=len(hops), max_route_switches=hops.max_switches, transfers=len(rows))
    return _rows_to_schedule(rows)


def warmup_fabric() -> float:
    """Compile the fabric kernel (once per machine: numba caches it) on a tiny switch; returns the seconds."""
    import time

    from tacos_bench.collective import Collective
    from tacos_bench.topology import Switch, Topology

    t0 = time.perf_counter()
    e = [(i, 2, 50.0, 0.5) for i in range(2)] + [(2, i, 50.0, 0.5) for i in range(2)]
    fabric_copy(Problem(Topology.from_edges(2, e, switches=[Switch(multicast=True)]), Collective("all_gather", 1, 1)))
    return time.perf_counter() - t0


# the compiled kernel scans every candidate chunk of a hop up to this many NPUs x chunks, else SCAN_CAP of them
SCAN_ALL_MAX_PAIRS = 1 << 18
SCAN_CAP = 32


def _held(n: int, C: int, hv, hc) -> np.ndarray:
    """``(n, C)``: True where a copy is held."""
    out = np.zeros((n, C), dtype=bool)
    out[hv, hc] = True
    return out


def _nearest_holders(hv, hc, ht, dst_of, dist, C: int) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk, the holder whose copy reaches the chunk's destination first (fewest hop-µs after its
    arrival), and that copy's time."""
    reach = ht + np.where(hv == dst_of[hc], 0.0, dist[hv, dst_of[hc]])
    order = np.lexsort((hv, reach, hc))
    first = np.ones(order.size, bool)
    first[1:] = hc[order][1:] != hc[order][:-1]
    pick = order[first]
    if pick.size != C:
        raise SolverError(f"the start state holds {pick.size} of {C} chunks")
    src = np.empty(C, np.int64)
    ready = np.empty(C)
    src[hc[pick]] = hv[pick]
    ready[hc[pick]] = ht[pick]
    return src, ready


def _subset_trees(problem: Problem, hops: Hops, key, seed: int, rarest: bool, local_first: bool, holds, alive,
                  link_free, chunk_ready, stats, engine: str, kept: bool = True) -> Schedule:
    """A copy table with subsets of destinations on the multicast kernel (``fabric_copy(subset_trees=True)``);
    ``kept=False``: each offer rebuilds its hop's candidates (the reference the kept sets are tested against)."""
    c = problem.collective
    if not (c.general and c.copies):
        raise SolverError(f"subset trees schedule copy chunk tables, not {problem.kind}")
    if engine == "python":
        raise SolverError("subset trees run on the compiled kernel only (engine=auto)")
    n, C = problem.num_npus, problem.num_chunks
    live = np.ones(n, dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
    need = np.zeros((n, C), dtype=bool)
    dv, dc = problem.demand.required_pairs()
    need[dv, dc] = live[dv]
    hv, hc, ht = _start_state(problem, holds, chunk_ready)
    if not (need & ~_held(n, C, hv, hc)).any():
        return Schedule.empty()
    return _compiled_multicast(problem, hops, key, seed, rarest, local_first, (hv, hc, ht, need), link_free, stats,
                               relays=_relays(n, hops), kept=kept)


def _start_state(problem: Problem, holds, chunk_ready) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(npu, chunk, time)`` of every copy held at the start: a fault's ``holds``, else each chunk at its source
    from ``chunk_ready`` (0 without)."""
    if holds is not None:
        hv, hc, ht = (np.asarray(x) for x in holds)
        return hv.astype(np.int64), hc.astype(np.int64), ht.astype(np.float64)
    C = problem.num_chunks
    ready = np.zeros(C) if chunk_ready is None else np.asarray(chunk_ready, dtype=np.float64)
    return np.asarray(problem.sources, np.int64), np.arange(C, dtype=np.int64), ready


def _relays(n: int, hops: Hops) -> tuple[np.ndarray, np.ndarray]:
    """CSR over hops: the NPUs ``w`` (other than its ends) that hop ``u -> v`` is on a shortest way to
    (``dist[u, w] = dur + dist[v, w]``): what ``v`` may receive without needing it, as a relay (on a rail cluster a
    token for another rail's GPU of a remote node goes over that node's rail GPU, or over its own node's)."""
    dist = _hop_distances(n, hops)
    u, v = np.asarray(hops.src), np.asarray(hops.dst)
    via = hops.dur[:, None] + dist[v]                      # (hops, n): the way to w through the hop
    tol = 1e-9 * np.maximum(1.0, dist[u])
    on = np.abs(via - dist[u]) <= tol
    on[np.arange(len(u)), v] = False
    on[np.arange(len(u)), u] = False
    h, w = np.nonzero(on)
    ptr = np.zeros(len(u) + 1, dtype=np.int64)
    np.cumsum(np.bincount(h, minlength=len(u)), out=ptr[1:])
    return ptr, w.astype(np.int64)


def _kept_arrays(n: int, C: int, hops: Hops, arr: dict, relays: tuple, local_first: bool) -> tuple:
    """The kernel's kept candidate sets (``SUBSET_KEPT``): per hop a bitset of chunks, its summary (a bit per
    non-empty word) and count, the hop lists its updates walk (the NPUs nearer the receiver than the hop with
    ``local_first``, their inverse, the relays' inverse, the hops out of each NPU), and the offer cache."""
    H = len(hops)
    W = (C + 63) // 64
    src = np.asarray(hops.src, np.int64)
    dst = np.asarray(hops.dst, np.int64)
    nsl = [[] for _ in range(H)]
    if local_first:
        ptr, npu, dur = arr["near_ptr"], arr["near_npu"], arr["near_dur"]
        for h in range(H):
            v, lim = dst[h], hops.dur[h] * (1.0 - 1e-9)
            for j in range(ptr[v], ptr[v + 1]):
                if dur[j] >= lim:
                    break
                if npu[j] != src[h]:
                    nsl[h].append(int(npu[j]))

    def csr(lists):
        p = np.zeros(len(lists) + 1, np.int64)
        p[1:] = np.cumsum([len(x) for x in lists])
        return p, (np.concatenate([np.asarray(x, np.int64) for x in lists]) if p[-1] else np.zeros(0, np.int64))

    def inverse(ptr, idx):
        by = [[] for _ in range(n)]
        for h in range(H):
            for w in idx[ptr[h]:ptr[h + 1]].tolist():
                by[w].append(h)
        return csr(by)

    nsl_ptr, nsl_idx = csr(nsl)
    out = [[] for _ in range(n)]
    for h in range(H):
        out[src[h]].append(h)
    # then each hop's offer cached within an event: chunk, holders, key, the event it was computed at
    return (np.zeros((H, W), np.uint64), np.zeros((H, (W + 63) // 64), np.uint64), np.zeros(H, np.int64),
            nsl_ptr, nsl_idx, *inverse(nsl_ptr, nsl_idx), *inverse(*relays), *csr(out),
            np.zeros(H, np.int64), np.zeros(H, np.int64), np.zeros(H), np.full(H, -1, np.int64), np.zeros(1, np.int64))


def _no_kept() -> tuple:
    z = np.zeros(1, np.int64)
    return (np.zeros((1, 1), np.uint64), np.zeros((1, 1), np.uint64), z, z, z, z, z, z, z, z, z, z, z, np.zeros(1),
            z, z)


def _compiled_multicast(problem: Problem, hops: Hops, key, seed: int, rarest: bool, local_first: bool, holds,
                        link_free, stats, relays: tuple | None = None, kept: bool = False) -> Schedule:
    """All-Gather / Broadcast on the compiled kernel; rows per segment, as :func:`_reserve` writes them."""
    from ._kernel_fabric import fabric_multicast_kernel

    topo = problem.topology
    n, C, L = problem.num_npus, problem.num_chunks, topo.num_links
    arr = _kernel_arrays(topo, hops)
    busy0 = np.full(L + 1, -np.inf)
    busy0[:L] = 0.0 if link_free is None else np.asarray(link_free, dtype=np.float64)
    cap = 0 if n * C <= SCAN_ALL_MAX_PAIRS else SCAN_CAP
    hv, hc, ht, need = holds
    hv = np.require(hv, np.int64, "W")   # the sources are read-only, a fault's holders not: one kernel signature
    W = (C + 63) // 64
    bits = np.zeros((n, W * 64), dtype=bool)
    bits[:, :C] = need
    needbits = np.packbits(bits, axis=1, bitorder="little").view("<u8").astype(np.uint64)
    from ._kernel_fabric import EVERY_NPU, SUBSET_KEPT, SUBSET_SCAN

    # with relays, only the NPUs that need a chunk, or relay it, receive it
    mode = EVERY_NPU if relays is None else SUBSET_KEPT if kept else SUBSET_SCAN
    relay_ptr, relay_idx = (np.zeros(len(hops) + 1, np.int64), np.zeros(0, np.int64)) if relays is None else relays
    sets = _kept_arrays(n, C, hops, arr, relays, local_first) if mode == SUBSET_KEPT else _no_kept()
    ch, hop, seg, start, end, left, n_events = fabric_multicast_kernel(
        n, C, hv, hc, ht, needbits, int(need.sum()), key, int(seed) % (2**32), rarest, local_first, cap, mode,
        busy0, hops.src, hops.dst, hops.dur, hops.link_pad, hops.off_pad,
        hops.end_pad, arr["hlen"], arr["into_ptr"], arr["into_idx"], arr["grp"], arr["grp_ptr"], arr["grp_idx"],
        arr["mc_pos"], arr["seg_ptr"], arr["seg_a"], arr["seg_b"], arr["seg_start_node"], arr["near_ptr"],
        arr["near_npu"], arr["near_dur"], relay_ptr, relay_idx, sets)
    if left:
        raise SolverError(f"{topo.name}: the fabric greedy is stuck with {left} (NPU, chunk) pairs unreached "
                          "(no hop reaches them)")
    if stats is not None:
        stats.update(engine="fabric_kernel", hops=len(hops), max_route_switches=hops.max_switches,
                     transfers=len(ch), events=int(n_events), scan_cap=cap)
    routed = bool(np.any(arr["seg_route"] != ""))
    return Schedule(ch, arr["seg_src"][seg], arr["seg_dst"][seg], start, end, np.zeros(len(ch), dtype=np.int8),
                    route=route_column(arr["seg_route"], seg) if routed else None).sorted()


def _compiled_unicast(problem: Problem, hops: Hops, key, rng, rarest: bool, route_next, dist, holds, dst_of,
                      link_free, stats) -> Schedule:
    """Unicast chunks on the compiled kernel (:mod:`solvers.greedy._kernel_fabric_unicast`): the Python
    loop's schedule, with the same draws of ``rng`` (``rng.random(n)`` per event, after ``key``)."""
    from ._kernel_fabric_unicast import fabric_unicast_kernel

    topo = problem.topology
    n, C, L = problem.num_npus, problem.num_chunks, topo.num_links
    arr = _hop_arrays(hops)
    busy0 = np.full(L + 1, -np.inf)
    busy0[:L] = 0.0 if link_free is None else np.asarray(link_free, dtype=np.float64)
    hv, hc, ht, need_c = holds
    hv = np.require(hv, np.int64, "W")   # the sources are read-only, a fault's holders not: one kernel signature
    src_of = hv.copy()                     # one holder per chunk (the nearest, after a fault)
    rptr, rnode = _route_csr(route_next, src_of, C)
    draws = rng.random(n * (256 + 4 * (C // max(n, 1))))
    order_c = np.argsort(key, kind="stable")               # the kernel's buckets: by destination, key, id
    order_c = order_c[np.argsort(np.asarray(dst_of)[order_c], kind="stable")]
    while True:
        ch, hop, seg, start, end, left, n_events, status = fabric_unicast_kernel(
            n, C, hv, hc, ht, src_of, np.asarray(dst_of, np.int64), np.asarray(need_c, bool), key, draws, rarest,
            route_next is not None, rptr, rnode, dist, busy0, hops.src, hops.dst, hops.dur, hops.link_pad,
            hops.off_pad, hops.end_pad, arr["hlen"], arr["seg_ptr"], arr["seg_a"], arr["seg_b"], order_c)
        if status != 2:
            break
        draws = np.concatenate([draws, rng.random(draws.size)])   # the stream goes on where it stopped
    if status == 1:
        raise SolverError(f"{topo.name}: the fabric greedy is stuck with {left} (NPU, chunk) pairs unreached "
                          "(no hop reaches them)")
    if stats is not None:
        stats.update(engine="fabric_unicast_kernel", hops=len(hops), max_route_switches=hops.max_switches,
                     transfers=len(ch), events=int(n_events))
    if not len(ch):
        return Schedule.empty()
    used = np.zeros(len(arr["seg_route"]), dtype=bool)
    used[seg] = True
    routed = bool(np.any(arr["seg_route"][used] != ""))
    return Schedule(ch, arr["seg_src"][seg], arr["seg_dst"][seg], start, end, np.full(len(ch), COPY, np.int8),
                    route=route_column(arr["seg_route"], seg) if routed else None).sorted()


def _route_csr(route_next, src_of, C: int) -> tuple[np.ndarray, np.ndarray]:
    """``{(chunk, npu): next npu}`` as each chunk's route of NPUs from its holder (CSR); empty without."""
    if route_next is None:
        return np.zeros(C + 1, np.int64), np.zeros(0, np.int64)
    ptr, nodes = [0], []
    for c, x in enumerate(src_of.tolist()):
        nodes.append(x)
        while (c, x) in route_next:
            x = route_next[(c, x)]
            nodes.append(x)
        ptr.append(len(nodes))
    return np.array(ptr, np.int64), np.array(nodes, np.int64)


def _hop_arrays(hops: Hops) -> dict:
    """The hop structure both kernels read: CSR of hops into each NPU, segments and their rows' ends."""
    into_ptr, into_idx = hops.into_csr
    seg_ptr, seg_start_node, seg_dst, _, _, seg_route = segment_table(hops)
    return dict(hlen=hops.hlen, into_ptr=into_ptr, into_idx=into_idx, seg_ptr=seg_ptr, seg_a=hops.seg_a,
                seg_b=hops.seg_b, seg_start_node=seg_start_node, seg_src=seg_start_node, seg_dst=seg_dst,
                seg_route=seg_route)


def _kernel_arrays(topo, hops: Hops) -> dict:
    """The hop structure as the multicast kernel's arrays: :func:`_hop_arrays`, multicast branch groups (hops
    from one sender that share their links up to their first multicast switch), faster senders."""
    H, n = len(hops), topo.num_npus
    out = _hop_arrays(hops)
    mc = np.zeros(topo.num_nodes, dtype=bool)
    for i, sw in enumerate(topo.switches):
        mc[n + i] = sw.multicast
    mc_pos = np.full(H, -1, dtype=np.int64)
    grp = np.full(H, -1, dtype=np.int64)
    groups: dict = {}
    for h in range(H):
        nodes = hops.nodes[h]
        p = next((k for k in range(1, len(nodes) - 1) if mc[nodes[k]]), -1)
        if p > 0:
            mc_pos[h] = p
            grp[h] = groups.setdefault((nodes[0], tuple(hops.links[h][:p].tolist())), len(groups))
    members: list[list[int]] = [[] for _ in groups]
    for h in range(H):
        if grp[h] >= 0:
            members[grp[h]].append(h)
    grp_ptr = np.zeros(len(members) + 1, dtype=np.int64)
    grp_ptr[1:] = np.cumsum([len(m) for m in members])
    grp_idx = np.array([h for m in members for h in m], dtype=np.int64)
    best_in = np.full((n, n), np.inf)
    np.minimum.at(best_in, (hops.src, hops.dst), hops.dur)
    near_npu, near_dur, near_ptr = [], [], [0]
    for v in range(n):
        w = np.flatnonzero(np.isfinite(best_in[:, v]))
        w = w[np.argsort(best_in[w, v], kind="stable")]
        near_npu.extend(w.tolist())
        near_dur.extend(best_in[w, v].tolist())
        near_ptr.append(len(near_npu))
    return dict(out, grp=grp, grp_ptr=grp_ptr, grp_idx=grp_idx, mc_pos=mc_pos,
                near_ptr=np.array(near_ptr, dtype=np.int64), near_npu=np.array(near_npu, dtype=np.int64),
                near_dur=np.array(near_dur, dtype=np.float64))


def _match(order: list[int], hops: Hops, t: float, busy, best_chunk, offers=None,
           unicast: bool = False, senders=None) -> list[tuple[int, int, int]]:
    """The (receiver, hop, chunk) transfers to start at ``t``: greedily in ``order`` (each receiver takes its
    best free hop, again while another is free), then augmented: a receiver left without a transfer takes a
    hop blocked by one other receiver's pick when that one can move to another free hop. Picks share no link
    (a multicast tree is grown around each afterwards); a unicast chunk is picked once. ``senders`` (per NPU, or
    per (sender, receiver) pair): who may send at all, or to whom (the other hops are skipped)."""
    eps = _eps(t)
    L = len(busy)
    bx = np.append(busy, -np.inf)          # the padding link is always free
    free = np.all(bx[hops.link_pad] <= t + hops.off_pad + eps, axis=1)
    if senders is not None:
        free &= senders[hops.src] if senders.ndim == 1 else senders[hops.src, hops.dst]
    free_hops = {}
    for v in order:
        hv = hops.into[v]
        ok = hv[free[hv]]
        if ok.size:
            free_hops[v] = ok
    owner = np.full(L + 1, -1, dtype=np.int64)   # link -> index of the pick that holds it (-1: none)
    picks: list[list] = []                       # [v, h, c]
    chunks_of: dict[int, set] = {}               # v -> chunks picked for it (a receiver gets distinct chunks)
    moving: set = set()                          # unicast chunks picked

    def options(v, blocked):
        hs = free_hops.get(v)
        if hs is None:
            return []
        hs = hs[~(blocked[hops.link_pad[hs]]).any(axis=1)]
        if not hs.size:
            return []
        taken = chunks_of.get(v, set()) | moving
        if offers is not None:
            return sorted(offers(v, hs, taken, chunks_of))
        got = []
        for h in hs.tolist():
            r = best_chunk(h, v, taken, chunks_of)
            if r is not None:
                got.append((r[0], h, r[1]))
        return sorted(got)

    def place(v, h, c, k=None):
        if k is None:
            picks.append([v, h, c])
            k = len(picks) - 1
        else:
            picks[k] = [v, h, c]
        owner[hops.links[h]] = k
        chunks_of.setdefault(v, set()).add(c)
        if unicast:
            moving.add(c)

    for v in order:
        while True:
            opts = options(v, owner >= 0)
            if not opts:
                break
            _, h, c = opts[0]
            place(v, h, c)
    # augment: one level of reassignment for receivers that got nothing
    for v in order:
        if v in chunks_of or v not in free_hops:
            continue
        for h in free_hops[v].tolist():
            blockers = set(owner[hops.links[h]].tolist()) - {-1}
            if len(blockers) != 1:
                continue
            (k,) = blockers
            w, hw, cw = picks[k]
            r = best_chunk(h, v, moving, chunks_of)
            if r is None:
                continue
            held = np.flatnonzero(owner == k)
            owner[held] = -1
            blocked = owner >= 0
            blocked[hops.links[h]] = True
            if unicast:
                moving.discard(cw)
            chunks_of[w].discard(cw)
            alt = [o for o in options(w, blocked) if o[1] != hw]
            if alt:
                _, h2, c2 = alt[0]
                place(w, h2, c2, k)
                place(v, h, r[1])
                break
            owner[held] = k
            chunks_of[w].add(cw)
            if unicast:
                moving.add(cw)
    return [(v, h, c) for v, h, c in picks]


def _faster_senders(n: int, hops: Hops) -> list[np.ndarray]:
    """Per hop ``u -> v``: the other NPUs with a hop to ``v`` faster than it."""
    best = np.full((n, n), np.inf)
    np.minimum.at(best, (hops.src, hops.dst), hops.dur)
    return [np.flatnonzero((best[:, v] < d * (1 - 1e-9)) & (np.arange(n) != u))
            for u, v, d in zip(hops.src.tolist(), hops.dst.tolist(), hops.dur.tolist())]


def _balanced_routes(topo, hops: Hops, dist, src_of, dst_of, key) -> dict:
    """For each unicast chunk a shortest route of hops (by time) that keeps the busiest link it crosses, then
    the sum of its links' loads, least; chunks with the longest way first (ties: ``key``). A link's load is
    the time the chunks routed over it hold it. Returns ``{(chunk, npu): next npu}``."""
    n = dist.shape[0]
    load = np.zeros(topo.num_links)
    by_src = [[] for _ in range(n)]
    for h in range(len(hops)):
        by_src[int(hops.src[h])].append(h)
    hop_occ = [hops.end[h] - hops.off[h] for h in range(len(hops))]
    order = np.lexsort((key, -dist[src_of, dst_of]))
    nxt: dict = {}
    for c in order.tolist():
        s, d = int(src_of[c]), int(dst_of[c])
        if s == d:
            continue
        # NPUs on a shortest route to d, nearest first; best (max load, sum load, hop) from each
        on = np.flatnonzero(np.isfinite(dist[:, d]) & (dist[s, :] + dist[:, d] <= dist[s, d] * (1 + 1e-9) + 1e-9))
        best: dict[int, tuple] = {d: (0.0, 0.0, -1)}
        for x in on[np.argsort(dist[on, d])].tolist():
            if x == d:
                continue
            cur = None
            for h in by_src[x]:
                v = int(hops.dst[h])
                if v not in best or abs(dist[x, d] - hops.dur[h] - dist[v, d]) > 1e-9 * max(1.0, dist[x, d]):
                    continue
                ls = load[hops.links[h]] + hop_occ[h]
                cand = (max(float(ls.max()), best[v][0]), float(ls.sum()) + best[v][1], h)
                if cur is None or cand[:2] < cur[:2]:
                    cur = cand
            if cur is not None:
                best[x] = cur
        x = s
        while x != d:
            h = best[x][2]
            load[hops.links[h]] += hop_occ[h]
            v = int(hops.dst[h])
            nxt[(c, x)] = v
            x = v
    return nxt


def _hop_distances(n: int, hops: Hops) -> np.ndarray:
    """Least total hop time between NPUs (Floyd-Warshall on the hop graph; fabrics here are small enough)."""
    from ._kernel_fabric import floyd_warshall

    D = np.full((n, n), np.inf)
    np.fill_diagonal(D, 0.0)
    np.minimum.at(D, (hops.src, hops.dst), hops.dur)
    return floyd_warshall(D)


def _grow_tree(problem, hops: Hops, h: int, c: int, t: float, busy, has, coming, need,
               forbidden=None) -> list[int]:
    """Hop ``h`` plus, for a multicast collective, the hops from the same sender that branch off it at a
    multicast switch over free links (none where ``forbidden`` > 0: other transfers starting now) to NPUs needing
    chunk ``c``."""
    tree = [h]
    if need is None:
        return tree
    topo = problem.topology
    nodes0 = hops.nodes[h]
    if not any(topo.is_switch(x) and topo.switch(x).multicast for x in nodes0[1:-1]):
        return tree
    u = int(hops.src[h])
    used = {int(l) for l in hops.links[h]}
    # the tree's paths from u, as node prefixes -> link: a branch must follow one of them, then leave it
    prefixes = {nodes0[:k + 2] for k in range(len(nodes0) - 1)}
    taken = {int(hops.dst[h])}
    for h2 in hops.out_of[u].tolist():
        w = int(hops.dst[h2])
        if w in taken or has[w, c] or coming[w, c] or not need[w, c]:
            continue
        nodes = hops.nodes[h2]
        k = 0
        while k + 2 <= len(nodes) and nodes[:k + 2] in prefixes:
            k += 1
        # nodes[k] is where h2 leaves the tree: a multicast switch, not the sender itself
        if k == 0 or not topo.is_switch(nodes[k]) or not topo.switch(nodes[k]).multicast:
            continue
        rest = hops.links[h2][k:]
        if any(int(l) in used for l in rest) or (forbidden is not None and np.any(forbidden[rest] > 0)):
            continue
        if np.any(busy[rest] > t + hops.off[h2][k:] + _eps(t)):
            continue
        tree.append(h2)
        taken.add(w)
        used.update(int(l) for l in rest)
        prefixes.update(nodes[:j + 2] for j in range(len(nodes) - 1))
    return tree


def _reserve(topo, hops: Hops, tree: list[int], c: int, t: float, busy, rows: list) -> list[tuple[int, float]]:
    """Reserve the links of a transfer tree starting at ``t``; append its rows; return (receiver, arrival).

    Rows are per segment. Branches of one tree that start a segment at the same node and time share its
    first links, so they must end together (the verifier's multicast group): they get the latest end."""
    seg_rows = {}   # (seg_src, seg_start) -> list of [dst, start, end, route, links]
    for h in tree:
        nodes = hops.nodes[h]
        for a, b in hops.segments[h]:
            start = t + float(hops.off[h][a])
            end = t + float(hops.end[h][a])
            path = nodes[a:b + 2]
            r = (path[-1], start, end, ">".join(map(str, path)) if len(path) > 2 else "",
                 hops.links[h][a:b + 1])
            group = seg_rows.setdefault((path[0], round(start, 9)), [])
            if not any(x[3] == r[3] and x[0] == r[0] for x in group):
                group.append(list(r))
    arrivals = {}
    for (s, _), group in seg_rows.items():
        end = max(x[2] for x in group)
        for d, start, _, route, links in group:
            rows.append((c, s, d, start, end, route))
            busy[links] = np.maximum(busy[links], end)
            if d < topo.num_npus:
                arrivals[d] = end
    # a receiver's arrival is its last segment's end
    return [(int(hops.dst[h]), arrivals[int(hops.dst[h])]) for h in tree]


def _rows_to_schedule(rows: list[tuple]) -> Schedule:
    if not rows:
        return Schedule.empty()
    c, s, d, a, b, r = zip(*rows)
    routed = any(r)
    return Schedule(c, s, d, a, b, np.full(len(rows), COPY, dtype=np.int8),
                    route=list(r) if routed else None).sorted()
