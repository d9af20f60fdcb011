"""Lower bounds on the collective time of a switched fabric (docs/fabrics.md): ports, cuts around switches,
the broadcast's start-up, distance.

Every argument counts whole chunks through links. A transfer that enters link ``l`` occupies it for at least
``occ[l]``: its latency, the chunk at its bandwidth, and — through cut-through switches, where one transfer
holds every link of its route for the route's whole duration — the least latency from the last
store-and-forward node before it and to the next one after it.

* **ingress / egress (ports)**: an NPU receives every chunk it needs over its in-links, and every chunk that
  leaves it (each of its chunks someone else needs, at least once) over its out-links: ``count_time_us``.
* **cut** (switch uplinks, oversubscription): around each switch with the NPUs joined to it both ways (a
  node's NVSwitch and its GPUs, a leaf and its NPUs), every chunk needed inside from outside crosses the links
  into the set at least once, and every chunk needed outside from inside crosses the links out.
* **last import wave** (All-Gather, Broadcast; part of *cut*): into such a group whose links from outside all end
  at its NPUs (a DGX node: its NICs), the chunks from outside that every NPU of it needs enter one at a time per
  link, so the last of them enter together at ``T`` or later (``W`` of them: those no earlier import can carry),
  and each NPU still needs them afterwards, through its own links from outside or from inside the group
  (``W - 1`` more chunk times on its down-link from the switch when the NIC is much slower): docs/fabrics.md.
* **start-up** (Broadcast without multicast anywhere): the NPUs holding something at most multiply by ``1 + p``
  per shortest transfer (``p``: the most out-links of an NPU; slower growth through store-and-forward switches,
  :func:`_startup_us`), so the last NPU receives its first chunk only after ``ceil(log_{1+p} N)`` of them, and
  the rest of its ``K`` chunks after that over its in-links.
* **distance**: the least route latency between a chunk's source and a destination, plus the chunk at the
  fastest link.

Reduce-Scatter and Reduce take their copy mirror's bounds (the reversed fabric, multicast and reduction
swapped: a contribution leaves each NPU at least once, as a copy reaches it at least once). All-Reduce: every
NPU receives something of every chunk and sends its contribution to every chunk at least once (``N K``
chunks each way; in-network reduction can reach it), every chunk crosses each switch group's cut both ways,
without in-network reduction ``2 (N-1)`` arrivals per chunk at NPUs, per switch group the rows into it that start
before two other groups' contributions can have met (one group's each: :func:`_late_import_us`), per group with
one NIC per NPU its exports after the switch gathered each chunk (:func:`_export_ramp_us`), and the distance.
"""

from __future__ import annotations

import math

import numpy as np

from ..collective import ALL_REDUCE, MULTICAST_KINDS, REDUCE, REDUCE_SCATTER
from ..cost import link_time_us
from ..graph import shortest_path_tree
from ..problem import Problem
from ..topology import CUT_THROUGH, Topology
from ._graph import switch_groups as _groups
from .load import count_time_us


def _is_relay_point(topo: Topology) -> np.ndarray:
    """Nodes where a segment starts or ends: NPUs and store-and-forward switches."""
    n = topo.num_npus
    ep = np.ones(topo.num_nodes, dtype=bool)
    for i, sw in enumerate(topo.switches):
        ep[n + i] = sw.mode != CUT_THROUGH
    return ep


def occupancy_us(topo: Topology, chunk_bytes: int) -> np.ndarray:
    """Least time one transfer holds each link (see the module docstring)."""
    ep = _is_relay_point(topo)
    lat = topo.lat_us
    src, dst = topo.src.astype(np.int64), topo.dst.astype(np.int64)
    # least latency from a node to the next segment end (0 at one), and from the last segment start to it
    to_ep = np.where(ep, 0.0, np.inf)
    from_ep = np.where(ep, 0.0, np.inf)
    for _ in range(topo.num_nodes):
        a = np.full(topo.num_nodes, np.inf)
        np.minimum.at(a, src, lat + to_ep[dst])
        b = np.full(topo.num_nodes, np.inf)
        np.minimum.at(b, dst, lat + from_ep[src])
        new_to = np.where(ep, 0.0, np.minimum(to_ep, a))
        new_from = np.where(ep, 0.0, np.minimum(from_ep, b))
        if np.array_equal(new_to, to_ep) and np.array_equal(new_from, from_ep):
            break
        to_ep, from_ep = new_to, new_from
    extra = np.where(np.isfinite(to_ep[dst]), to_ep[dst], 0.0) + np.where(np.isfinite(from_ep[src]), from_ep[src], 0.0)
    return link_time_us(topo.bw_GiBps, lat, chunk_bytes) + extra


def lead_lag_us(topo: Topology, occ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per link: the least time before a chunk can be at its sender (``lead``: 0 unless the sender is a
    store-and-forward switch, which holds nothing until a transfer into it ends) and after it leaves the link
    until it can be at an NPU (``lag``: 0 unless the receiver is a store-and-forward switch)."""
    n = topo.num_npus
    sf = np.zeros(topo.num_nodes, dtype=bool)
    for i, sw in enumerate(topo.switches):
        sf[n + i] = sw.mode != CUT_THROUGH
    src, dst = topo.src.astype(np.int64), topo.dst.astype(np.int64)
    at = np.zeros(topo.num_nodes)     # earliest a chunk can be at a node
    to = np.zeros(topo.num_nodes)     # least time from a node to an NPU
    at[sf] = np.inf
    to[sf] = np.inf
    for _ in range(topo.num_nodes):
        a = np.full(topo.num_nodes, np.inf)
        np.minimum.at(a, dst, at[src] + occ)
        b = np.full(topo.num_nodes, np.inf)
        np.minimum.at(b, src, occ + to[dst])
        new_at, new_to = np.where(sf, a, 0.0), np.where(sf, b, 0.0)
        if np.array_equal(new_at, at) and np.array_equal(new_to, to):
            break
        at, to = new_at, new_to
    return at[src], to[dst]


def _count(occ: np.ndarray, links: np.ndarray, need: int, lead=None, lag=None) -> float:
    """The count bound on ``links``, plus the least lead before and lag after any of them."""
    if need <= 0:
        return 0.0
    if not len(links):
        return math.inf
    extra = (float(lead[links].min()) if lead is not None else 0.0) + (float(lag[links].min()) if lag is not None else 0.0)
    return extra + float(count_time_us(occ[links], np.array([0, len(links)]), np.array([need]))[0])


def _needs(problem: Problem) -> np.ndarray:
    """``need[v, c]``: NPU ``v`` must receive chunk ``c`` (copy collectives)."""
    n, C = problem.num_npus, problem.num_chunks
    src, dst = np.asarray(problem.sources), np.asarray(problem.destinations)
    if problem.kind in MULTICAST_KINDS:
        need = np.ones((n, C), dtype=bool)
    else:
        need = np.zeros((n, C), dtype=bool)
        need[dst, np.arange(C)] = True
    need[src, np.arange(C)] = False
    return need


def _partitions(topo: Topology) -> list[list[np.ndarray]]:
    """Families of switch groups (:func:`_groups`) of one size that split the NPUs: each NPU in exactly one."""
    n = topo.num_npus
    families: list[tuple[int, set, list]] = []     # (size, NPUs taken, groups): each group joins the first it fits
    for X in _groups(topo):
        mine = set(X[X < n].tolist())
        for size, taken, groups in families:
            if size == len(X) and not taken & mine:
                taken |= mine
                groups.append(X)
                break
        else:
            families.append((len(X), set(mine), [X]))
    return [groups for _, taken, groups in families if len(groups) > 1 and len(taken) == n]


def _group_of(topo: Topology, family: list[np.ndarray]) -> np.ndarray:
    """Per node, the index of its group in ``family`` (a partition of :func:`_partitions`), -1 outside them."""
    inside = np.full(topo.num_nodes, -1, dtype=np.int64)
    for i, X in enumerate(family):
        inside[X] = i
    return inside


def _group_gossip_us(topo: Topology, occ: np.ndarray, C: int, lead) -> float:
    """All-Reduce over groups that split the NPUs (a partition of :func:`_partitions`, ``G`` groups): without a
    switch outside the groups that reduces, two groups' contributions only combine inside a group, so a chunk's
    G contributions meet after at least G-1 transfers into groups, and its complete value, made in one group,
    reaches the G-1 others by at least G-1 more (a multicast outside them still enters each group on its own
    link): 2 (G-1) transfers per chunk over the links into the groups (Patarasuk and Yuan's count with groups for
    NPUs; on a rail cluster the NICs)."""
    best = 0.0
    for family in _partitions(topo):
        inside = _group_of(topo, family)
        outside = np.flatnonzero(inside[topo.num_npus:] < 0) + topo.num_npus
        if any(topo.switch(int(s)).reduce for s in outside):
            continue
        into = np.flatnonzero((inside[topo.dst] >= 0) & (inside[topo.src] != inside[topo.dst]))
        best = max(best, _count(occ, into, 2 * (len(family) - 1) * C, lead=lead))
    return best


def _late_import_us(topo: Topology, occ: np.ndarray, C: int, lead: np.ndarray) -> float:
    """All-Reduce, per group ``X`` of a partition (:func:`_partitions`, ``G >= 3`` groups): every chunk needs the
    contribution of each of the ``G - 1`` other groups brought into ``X`` by a row over a link into ``X``.
    Contributions of two groups meet only in a group (no switch outside the groups reduces, and a reducing
    switch receives only from its own group), after a row into that group has ended: not before ``tau``, the
    least ``lead + occ`` of a link into a group other than ``X``. So a row into ``X`` that starts before ``tau``
    carries one other group's contribution at most, and a chunk needs one row into ``X`` starting at ``tau`` or
    later, or ``G - 1`` rows starting before it. A link into ``X`` with ``e`` rows starting before ``tau`` fits
    at most ``floor((T - max(tau, lead + e occ)) / occ)`` later ones by ``T``; ``T`` is ruled out when even the
    best ``e`` per link, counted fractionally, cannot cover the ``C`` chunks (docs/bounds.md)."""
    n = topo.num_npus
    best = 0.0
    for family in _partitions(topo):
        G = len(family)
        if G < 3:
            continue
        inside = _group_of(topo, family)
        ok = True
        for s in range(n, topo.num_nodes):
            if topo.switch(s).reduce:
                feeders = topo.in_neighbors(s)
                if inside[s] < 0 or np.any(inside[feeders] != inside[s]):
                    ok = False
                    break
        if not ok:
            continue
        entry = (inside[topo.dst] >= 0) & (inside[topo.src] != inside[topo.dst])
        first = lead + occ          # least end of a row over each link
        for i in range(G):
            into = np.flatnonzero(entry & (inside[topo.dst] == i))
            others = entry & (inside[topo.dst] != i)
            if not len(into) or not others.any():
                continue
            tau = float(first[others].min())
            t, a = occ[into], lead[into]
            # e = 0 .. e_max rows starting before tau on each link (their starts a, a + t, ...)
            e_max = np.minimum(np.ceil((tau - a) / t + 1e-9).clip(min=0), (G - 1) * C).astype(np.int64)
            es = [np.arange(k + 1, dtype=np.float64) for k in e_max.tolist()]

            def cover(T: float) -> float:
                total = 0.0
                for j in range(len(into)):
                    e = es[j]
                    start = np.maximum(tau, a[j] + e * t[j])
                    m = np.floor((T - start) / t[j] + 1e-9)
                    val = np.where(a[j] + e * t[j] <= T * (1 + 1e-12), np.maximum(m, 0) + e / (G - 1), -1.0)
                    total += float(val.max())
                return total

            if cover(best) >= C:            # nothing above the best found so far is ruled out here
                continue
            lo, hi = best, tau + (C + 1) * float(t.max())
            while hi - lo > 1e-10 * hi:
                mid = 0.5 * (lo + hi)
                if cover(mid) >= C:
                    hi = mid
                else:
                    lo = mid
            best = max(best, lo)
    return best


def _export_ramp_us(topo: Topology, occ: np.ndarray, C: int) -> float:
    """All-Reduce, per group ``X`` of a partition (:func:`_partitions`) whose ``m`` NPUs each have one link out
    of ``X`` (a NIC) and one into it (to its switch; no link leaves ``X`` from the switch), with no switch
    outside the groups that reduces or multicasts. Every NPU outside ``X`` needs every chunk's ``m``
    contributions from ``X``, which leave ``X`` only in rows over those links (*exports*). Either some chunk
    leaves in two exports or more: ``C + 1`` exports, one at a time per link. Or each chunk leaves in exactly
    one, which carries all ``m`` contributions: before the first export of ``k`` NICs starts, every NPU not
    among their senders (or, with ``k = m``, every NPU) has sent its contribution to each of those ``k``
    chunks over its one link into ``X``, so the ``k``-th NIC to start starts no sooner than ``min(k, m-1)``
    times that link's least occupancy; the ``C`` exports end by ``E`` no sooner than their counts allow, and
    the chunk of the last one reaches the NPUs outside ``X`` only from its end, on which a third group (or,
    with two groups, the receiver's group-mates) then still waits one more row (docs/bounds.md)."""
    n = topo.num_npus
    best = 0.0
    for family in _partitions(topo):
        G = len(family)
        inside = _group_of(topo, family)
        if any((topo.switch(s).reduce or topo.switch(s).multicast) for s in range(n, topo.num_nodes)
               if inside[s] < 0):
            continue
        src_g, dst_g = inside[topo.src], inside[topo.dst]
        leaving = (src_g >= 0) & (dst_g != src_g)
        if np.any(leaving & (topo.src >= n)):
            continue
        for i, X in enumerate(family):
            members = np.sort(X[X < n])
            m = len(members)
            out = np.flatnonzero(leaving & (src_g == i))
            own = np.flatnonzero((src_g == i) & (dst_g == i) & (topo.src < n))
            if m < 2 or not np.array_equal(np.sort(topo.src[out]), members) or \
                    not np.array_equal(np.sort(topo.src[own]), members):
                continue
            delta, tau = float(occ[own].min()), float(occ[out].min())
            ramps = np.minimum(np.arange(1, m + 1), m - 1) * delta
            ends = (ramps[:, None] + tau * np.arange(1, C + 1)[None, :]).ravel()
            single = float(np.partition(ends, C - 1)[C - 1])
            if G >= 3:
                tail = float(occ[(dst_g >= 0) & (src_g != dst_g) & (dst_g != i)].min())
            else:
                tail = float(occ[(dst_g == 1 - i) & (topo.dst < n)].min())
            twice = _count(occ, out, C + 1)
            best = max(best, min(single + tail, twice))
    return best


def _import_wave_us(topo: Topology, occ: np.ndarray, X: np.ndarray, late_need: int, into: np.ndarray) -> float:
    """The last import wave into the group ``X`` (a switch and its NPUs; every link into it ends at an NPU of
    it): ``late_need`` chunks from outside that every NPU of the group needs enter one at a time per link of
    ``into``, ``occ[e]`` each, so the ``late_need``-th distinct one enters at ``T`` or later, and so do at
    least ``W`` of them (those no import completing before ``T`` can carry). Each NPU of the group still needs
    all ``W``: through its own links from outside (one per ``occ[e]``, the first at ``T``) or from inside the
    group once they are in it (one per ``occ[i]`` per link, the first at ``T + occ[i]``)."""
    n = topo.num_npus
    if late_need <= 0 or not len(into):
        return 0.0
    vals = np.concatenate([np.arange(1, late_need + 1) * occ[e] for e in into])
    T = float(np.partition(vals, late_need - 1)[late_need - 1])
    W = late_need - int(np.count_nonzero(vals < T * (1 - 1e-9)))
    inside = np.zeros(topo.num_nodes, dtype=bool)
    inside[X] = True
    ks = np.arange(W, dtype=np.float64)
    best = 0.0
    for v in X[X < n].tolist():
        links = topo.in_order[topo.in_ptr[v]:topo.in_ptr[v + 1]]
        outer = links[~inside[topo.src[links]]]
        inner = links[inside[topo.src[links]]]
        ends = [T + ks * occ[e] for e in outer] + [T + (ks + 1) * occ[i] for i in inner]
        if not ends:
            return math.inf
        got = np.concatenate(ends)
        best = max(best, float(np.partition(got, W - 1)[W - 1]))
    return best


def _startup_us(occ: np.ndarray, lag: np.ndarray, out_links: list, n: int) -> float:
    """The least time before every NPU holds some chunk, with no multicast: a holder starts at most ``p`` new
    transfers (its out-links) per ``s`` (the shortest occupancy of an NPU's out-link), and a transfer takes at
    least ``d`` of those slots to land at an NPU (``d > 1`` through store-and-forward switches, which buffer
    copies while the sender already sends the next). So holders at slot ``k`` are at most
    ``H(k) = H(k-1) + p H(k-d)`` (``(1+p)^k`` when ``d = 1``; Fibonacci through a store-and-forward switch);
    the last NPU gets its first chunk no earlier than ``k s`` for the least ``k`` with ``H(k) >= N``."""
    links = np.concatenate(out_links)
    s = float(occ[links].min())
    d = max(1, int(math.floor(float((occ + lag)[links].min()) / s + 1e-9)))
    p = int(max(len(x) for x in out_links))
    H = [1]
    while H[-1] < n:
        k = len(H)
        H.append(H[k - 1] + p * (H[k - d] if k >= d else 0))
    return (len(H) - 1) * s


def _distance(topo: Topology, pairs_src: np.ndarray, pairs_dst: np.ndarray, chunk_bytes: int) -> float:
    if not len(pairs_src):
        return 0.0
    out_ptr = np.asarray(topo.out_ptr, np.int64)
    dst = np.asarray(topo.dst, np.int64)
    lat = np.asarray(topo.lat_us, np.float64)
    far = 0.0
    for s in np.unique(pairs_src).tolist():
        d = shortest_path_tree(topo.num_nodes, out_ptr, dst, lat, int(s))[0]
        far = max(far, float(d[pairs_dst[pairs_src == s]].max()))
    return far + float(link_time_us(topo.bw_GiBps.max(), 0.0, chunk_bytes))


def _copy_bounds(problem: Problem) -> dict:
    topo = problem.topology
    n = problem.num_npus
    occ = occupancy_us(topo, problem.chunk_bytes)
    need = _needs(problem)
    src = np.asarray(problem.sources)
    in_links = [topo.in_order[topo.in_ptr[v]:topo.in_ptr[v + 1]] for v in range(n)]
    out_links = [np.arange(topo.out_ptr[u], topo.out_ptr[u + 1]) for u in range(n)]
    in_need = need.sum(axis=1)
    wanted = need.any(axis=0)
    out_need = np.bincount(src[wanted], minlength=n)
    lead, lag = lead_lag_us(topo, occ)
    ingress = max(_count(occ, in_links[v], int(in_need[v]), lead=lead) for v in range(n))
    egress = max(_count(occ, out_links[u], int(out_need[u]), lag=lag) for u in range(n))
    cut = wave = 0.0
    for X in _groups(topo):
        inside = np.zeros(topo.num_nodes, dtype=bool)
        inside[X] = True
        npu_in = inside[:n]
        into = np.flatnonzero(~inside[topo.src] & inside[topo.dst])
        out = np.flatnonzero(inside[topo.src] & ~inside[topo.dst])
        need_in = int((need[npu_in].any(axis=0) & ~npu_in[src]).sum())
        need_out = int((need[~npu_in].any(axis=0) & npu_in[src]).sum())
        if problem.kind not in MULTICAST_KINDS:  # unicast: every (chunk, destination) pair is its own chunk
            need_in = int((need[npu_in] & ~npu_in[src][None, :]).sum())
            need_out = int((need[~npu_in] & npu_in[src][None, :]).sum())
        cut = max(cut, _count(occ, into, need_in), _count(occ, out, need_out))
        if problem.kind in MULTICAST_KINDS and len(into) and np.all(topo.dst[into] < n):
            # chunks from outside every NPU of the group needs: the last of them enter in a wave
            every = int((need[npu_in].all(axis=0) & ~npu_in[src]).sum()) if npu_in.any() else 0
            wave = max(wave, _import_wave_us(topo, occ, X, every, into))
    startup = None
    multicast_somewhere = any(sw.multicast for sw in topo.switches)
    if problem.kind == "broadcast" and n > 2 and not multicast_somewhere:
        startup = _startup_us(occ, lag, out_links, n) + min(
            _count(occ, in_links[v], problem.num_chunks - len(in_links[v]))
            for v in range(n) if v != problem.collective.root)
    pv, pc = np.nonzero(need)
    distance = _distance(topo, src[pc], pv, problem.chunk_bytes)
    return {"ingress_us": ingress, "egress_us": egress, "cut_us": max(cut, wave) or None, "pipeline_us": startup,
            "distance_us": distance, "wave_us": wave or None}


def _all_reduce_bounds(problem: Problem) -> dict:
    topo = problem.topology
    n, C = problem.num_npus, problem.num_chunks
    occ = occupancy_us(topo, problem.chunk_bytes)
    lead, lag = lead_lag_us(topo, occ)
    in_links = [topo.in_order[topo.in_ptr[v]:topo.in_ptr[v + 1]] for v in range(n)]
    ingress = max(_count(occ, in_links[v], C, lead=lead) for v in range(n))
    egress = max(_count(occ, np.arange(topo.out_ptr[u], topo.out_ptr[u + 1]), C, lag=lag) for u in range(n))
    # Without in-network reduction, each chunk's N-1 partial sums reach an NPU before its first complete copy
    # exists and N-1 complete copies reach NPUs after: 2 (N-1) arrivals per chunk over the NPUs' in-links
    # (Patarasuk and Yuan's All-Reduce bandwidth bound, counted in whole chunks)
    if not any(sw.reduce for sw in topo.switches):
        ingress = max(ingress, _count(occ, np.concatenate(in_links), 2 * (n - 1) * C, lead=lead))
    # the same count over groups: with no reducing switch outside them, each chunk's partial sums enter groups
    # G-1 times before its complete value exists and the complete value enters the other G-1 groups after
    ingress = max(ingress, _group_gossip_us(topo, occ, C, lead))
    # every chunk's complete value on each side of a cut needs a transfer of it across, each way
    cut = 0.0
    for X in _groups(topo):
        inside = np.zeros(topo.num_nodes, dtype=bool)
        inside[X] = True
        into = np.flatnonzero(~inside[topo.src] & inside[topo.dst])
        out = np.flatnonzero(inside[topo.src] & ~inside[topo.dst])
        cut = max(cut, _count(occ, into, C), _count(occ, out, C))
    # and, without in-network reduction across groups, rows into a group before two other groups' contributions
    # can have met carry one group's each
    late = _late_import_us(topo, occ, C, lead)
    # and a group with one NIC per NPU sends each chunk's sum out once (after its switch gathered it: the NICs
    # start one by one) or some chunk twice
    ramp = _export_ramp_us(topo, occ, C)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    return {"ingress_us": ingress, "egress_us": egress, "cut_us": max(cut, late, ramp) or None, "pipeline_us": None,
            "distance_us": _distance(topo, a, b, problem.chunk_bytes), "late_us": late or None,
            "ramp_us": ramp or None}


def fabric_lower_bounds(problem: Problem, **options) -> dict:
    """The bounds of the module docstring, keyed as :func:`tacos_bench.bounds.lower_bounds` keys its own.
    ``options`` (the size limits of the point-to-point bounds) do not apply here: every bound is cheap.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology import Switch, Topology
    >>> e = [(i, 8, 50, 0.5) for i in range(8)] + [(8, i, 50, 0.5) for i in range(8)]
    >>> p = Problem(Topology.from_edges(8, e, switches=[Switch()]), Collective("broadcast", 8, 1024))
    >>> b = fabric_lower_bounds(p)
    >>> t = 1.0 + p.chunk_bytes / (50 * 2**30) * 1e6
    >>> round(b["egress_us"] / t, 6), round(b["pipeline_us"] / t, 6), b["best_source"]
    (8.0, 10.0, 'pipeline')
    """
    if problem.num_npus < 2:
        res = {"ingress_us": 0.0, "egress_us": 0.0, "cut_us": None, "pipeline_us": None, "distance_us": 0.0}
    elif problem.kind in (REDUCE_SCATTER, REDUCE):
        res = _copy_bounds(problem.mirror())
    elif problem.kind == ALL_REDUCE:
        res = _all_reduce_bounds(problem)
    else:
        res = _copy_bounds(problem)
    wave = res.pop("wave_us", None) or 0.0
    late = res.pop("late_us", None) or 0.0
    ramp = res.pop("ramp_us", None) or 0.0
    parts = {k: res[f"{k}_us"] for k in ("ingress", "egress", "distance", "cut", "pipeline")}
    best = max(v for v in parts.values() if v is not None)
    source = next(k for k, v in parts.items() if v is not None and v >= best * (1 - 1e-12))
    res.update(best_us=float(best), best_source=source, kind=problem.kind, step_us=None, ingress_steps=None,
               ingress_basic_us=res["ingress_us"], ingress_basic_steps=None, ingress_refined=False,
               distance_exact=True, cut_bw_us=None, cut_exact=False,
               cut_method=("switch groups, last import wave" if wave and wave >= (res["cut_us"] or 0) * (1 - 1e-12)
                           else "switch groups, export ramp" if ramp and ramp >= (res["cut_us"] or 0) * (1 - 1e-12)
                           else "switch groups, late imports" if late and late >= (res["cut_us"] or 0) * (1 - 1e-12)
                           else "switch groups"), cut_flows=0,
               cut_size=None, drain_us=None, linkload_us=None, gossip_us=None, fabric=True)
    return res


def cheap_bound_us(problem: Problem) -> float:
    """All of the fabric bounds: they are as cheap as a solver's stopping test needs."""
    return fabric_lower_bounds(problem)["best_us"]
