"""Link tiers and groups of a topology, derived from the topology alone (no named topology is special).

Two structures feed the topology-aware rules of the greedy (:mod:`solvers.greedy._kernel_tiered`):

Near classes (``imports="near"``)
    For a link ``l = u->v`` of chunk time ``t_l``, ``near(l)`` is the set of NPUs ``w != v`` from which a
    chunk reaches ``v`` sooner than over ``l`` even without contention: ``D(w, v) < t_l``, ``D`` the
    shortest-path time over link chunk times. A link does not import a chunk that a near NPU holds or is
    already receiving: the faster route delivers it. In-links of ``v`` with the same near set share a class.
    Found by one Dijkstra per NPU on the reversed links, bounded by its slowest in-link time (the cost of a
    ball, not of all pairs). On a topology with one link time every near set is empty and the rule is inert;
    a link whose sender is near its receiver is never used (a faster path exists).
Groups (``imports="group"``, group matching, group rarity)
    For every distinct link time ``tau``, the strongly connected components of the links faster than
    ``tau`` (servers, then pods, ...); partitions with no group larger than one NPU are dropped, equal
    partitions merged. A link is *cross-group* when its sender and receiver lie in different groups of the
    partition of its own time and the receiver's group has more than one NPU.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.named import named_topology
>>> t = Tiers(Problem(named_topology("hetero64"), Collective("all_gather", 1, 64)))
>>> t.num_classes, int(t.near_ptr[1] - t.near_ptr[0]), t.num_partitions, t.num_groups
(64, 7, 1, 8)
>>> int((t.part_of_link >= 0).sum())   # 3 inter-server in-links per NPU (8 servers on a 4x2 torus)
192
"""

from __future__ import annotations

import numpy as np
from numba import njit

from typing import TYPE_CHECKING

from ..graph import dijkstra_within, strong_components

if TYPE_CHECKING:  # a Problem is built on a topology: at run time this module needs only its attributes
    from ..problem import Problem

REL = 1e-9  # link times equal up to this relative difference are one tier


def tier_times(link_time_us: np.ndarray, rel: float = REL) -> np.ndarray:
    """The distinct link times, those within ``rel`` of a smaller one merged into it (ascending).

    >>> tier_times(np.array([2.0, 1.0, 1.0 + 1e-12, 4.0])).tolist()
    [1.0, 2.0, 4.0]
    """
    times = np.unique(np.asarray(link_time_us, dtype=np.float64))
    tiers = [times[0]] if times.size else []
    for x in times[1:]:
        if x > tiers[-1] * (1 + rel):
            tiers.append(x)
    return np.asarray(tiers, dtype=np.float64)


def faster_link_components(num_npus: int, out_ptr, dst, link_time_us, rel: float = REL):
    """For every tier time ``tau`` (:func:`tier_times`), ``(tau, labels)``: the strongly connected components
    of the links faster than ``tau`` (a label per NPU). The one definition of "groups of faster links"
    that the greedy's rules (:class:`Tiers`) and the drain bound (:mod:`tacos_bench.bounds`) share.

    >>> from tacos_bench.topology.named import named_topology
    >>> from tacos_bench import Collective, Problem
    >>> p = Problem(named_topology("hetero2x1x2"), Collective("all_gather"))
    >>> [(round(tau, 3), lab.tolist()) for tau, lab in faster_link_components(
    ...     4, p.topology.out_ptr, p.topology.dst, p.link_time_us)]
    [(1666.917, [0, 1, 2, 3]), (10002.0, [0, 0, 1, 1])]
    """
    lt = np.asarray(link_time_us, dtype=np.float64)
    out_ptr = np.asarray(out_ptr, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    for tau in tier_times(lt, rel).tolist():
        keep = lt < tau * (1 - rel)
        yield tau, (strong_components(num_npus, out_ptr, dst, keep) if keep.any() else np.arange(num_npus))


@njit(cache=True)
def _room(buf, used, more):
    """``buf``, or a copy twice as large (at least ``used + more``) with its first ``used`` entries."""
    if used + more <= buf.size:
        return buf
    grown = np.empty(max(2 * buf.size, used + more), buf.dtype)
    grown[:used] = buf[:used]
    return grown


@njit(cache=True)
def _near_class_arrays(N, in_ptr, in_order, lsrc, lt, rel):
    """The near classes (module docstring) as arrays: ``near_of_link`` (-1: none), each class's receiver
    ``near_v``, its members ``near_mem[near_ptr[k]:near_ptr[k + 1]]`` (ascending) and its gate links, the
    receiver's in-links from members, ``fin_links[fin_ptr[k]:fin_ptr[k + 1]]`` (in ``in_order``). Classes are
    numbered by receiver, then by first in-link in ``in_order``; in-links of one receiver with equal near sets
    share one."""
    M = lsrc.shape[0]
    rsrc = lsrc[in_order]            # the reversed graph: v -> its in-neighbours
    rw = lt[in_order]
    dist = np.full(N, np.inf)
    hk = np.empty(M + 1)
    hv = np.empty(M + 1, np.int64)
    reached = np.empty(N, np.int64)
    near_of_link = np.full(M, -1, np.int64)
    near_v = np.empty(M, np.int64)
    near_ptr = np.zeros(M + 1, np.int64)
    near_mem = np.empty(max(4 * M, 16), np.int64)
    fin_links = np.empty(max(4 * M, 16), np.int64)
    fin_ptr = np.zeros(M + 1, np.int64)
    is_mem = np.zeros(N, np.bool_)
    K = 0
    n_mem = 0
    n_fin = 0
    for v in range(N):
        a, b = in_ptr[v], in_ptr[v + 1]
        if a == b:
            continue
        radius = 0.0
        for i in range(a, b):
            radius = max(radius, lt[in_order[i]])
        k = dijkstra_within(in_ptr, rsrc, rw, v, radius, dist, hk, hv, reached)
        ball = reached[:k].copy()
        d = dist[ball].copy()
        for i in range(k):
            dist[ball[i]] = np.inf
        first_k = K                      # this receiver's classes: first_k .. K - 1
        for i in range(a, b):
            lk = in_order[i]
            thr = lt[lk] * (1 - rel)
            mem = np.sort(ball[(d < thr) & (ball != v)])
            if mem.size == 0:
                continue
            c = -1
            for kk in range(first_k, K):
                lo, hi = near_ptr[kk], near_ptr[kk + 1]
                if hi - lo == mem.size and np.all(near_mem[lo:hi] == mem):
                    c = kk
                    break
            if c < 0:
                near_mem = _room(near_mem, n_mem, mem.size)
                fin_links = _room(fin_links, n_fin, b - a)
                c = K
                near_mem[n_mem:n_mem + mem.size] = mem
                n_mem += mem.size
                near_v[K] = v
                K += 1
                near_ptr[K] = n_mem
                for u in mem:
                    is_mem[u] = True
                for j in range(a, b):
                    if is_mem[lsrc[in_order[j]]]:
                        fin_links[n_fin] = in_order[j]
                        n_fin += 1
                fin_ptr[K] = n_fin
                for u in mem:
                    is_mem[u] = False
            near_of_link[lk] = c
    return (near_of_link, near_v[:K].copy(), near_ptr[:K + 1].copy(), near_mem[:n_mem].copy(),
            fin_links[:n_fin].copy(), fin_ptr[:K + 1].copy())


class Tiers:
    """Near classes and group partitions of ``problem``'s topology (see the module docstring)."""

    def __init__(self, problem: Problem, topology=None, link_time_us=None):
        """``topology``/``link_time_us``: the links a run may use when not all of ``problem``'s (a fault)."""
        topo = problem.topology if topology is None else topology
        self.N = problem.num_npus
        self.M = topo.num_links
        self.lsrc = np.ascontiguousarray(topo.src, dtype=np.int64)
        self.ldst = np.ascontiguousarray(topo.dst, dtype=np.int64)
        self.lt = np.ascontiguousarray(problem.link_time_us if link_time_us is None else link_time_us,
                                       dtype=np.float64)
        self.in_ptr = np.ascontiguousarray(topo.in_ptr, dtype=np.int64)
        self.in_order = np.ascontiguousarray(topo.in_order, dtype=np.int64)
        self.out_ptr = np.ascontiguousarray(topo.out_ptr, dtype=np.int64)
        self._near_classes()
        self._partitions()

    # ------------------------------------------------------------------ near classes
    def _near_classes(self):
        N = self.N
        (self.near_of_link, self.near_v, self.near_ptr, self.near_mem,
         self.fin_links, self.fin_ptr) = _near_class_arrays(N, self.in_ptr, self.in_order, self.lsrc, self.lt, REL)
        K = self.num_classes = int(self.near_v.size)
        sizes = np.diff(self.near_ptr)
        # classes that contain w (updated when w starts receiving a chunk)
        owner = np.repeat(np.arange(K), sizes)
        order = np.argsort(self.near_mem, kind="stable")
        self.rev_cls = owner[order].astype(np.int64)
        self.rev_ptr = np.searchsorted(self.near_mem[order], np.arange(N + 1)).astype(np.int64)
        # the gate: v's in-links from near NPUs (fin_links), their summed chunk rate and the fastest of them
        rate, tmin = [], []
        for k in range(K):
            sel = self.fin_links[self.fin_ptr[k]:self.fin_ptr[k + 1]]
            rate.append(float(np.sum(1.0 / self.lt[sel])) if sel.size else 0.0)
            tmin.append(float(self.lt[sel].min()) if sel.size else np.inf)
        self.fin_rate = np.array(rate if K else [0.0], np.float64)
        self.fin_tmin = np.array(tmin if K else [np.inf], np.float64)

    # ------------------------------------------------------------------ groups
    def _partitions(self):
        N, M = self.N, self.M
        lt, tiers = self.lt, tier_times(self.lt)
        parts, seen, tier_part = [], {}, []
        for _, lab in faster_link_components(N, self.out_ptr, self.ldst, self.lt):
            if lab.max() + 1 == N:          # every group a single NPU: nothing to group
                tier_part.append(-1)
                continue
            key = lab.tobytes()
            if key not in seen:
                seen[key] = len(parts)
                parts.append(lab)
            tier_part.append(seen[key])
        P = self.num_partitions = len(parts)
        offs = np.zeros(P + 1, np.int64)
        for p, lab in enumerate(parts):
            offs[p + 1] = offs[p] + lab.max() + 1
        G = self.num_groups = int(offs[-1])
        self.gid = (np.stack([parts[p] + offs[p] for p in range(P)]).astype(np.int64) if P
                    else np.zeros((0, N), np.int64))
        self.gsize = np.zeros(max(G, 1), np.int64)
        for p in range(P):
            np.add.at(self.gsize, self.gid[p], 1)
        # the partition of each link's own time; cross-group links into a group of more than one NPU
        tier_of = np.searchsorted(np.array(tiers) * (1 + REL), lt)
        self.part_of_link = np.full(M, -1, np.int64)
        pl = np.asarray(tier_part, np.int64)[np.minimum(tier_of, len(tiers) - 1)]
        lk = np.flatnonzero(pl >= 0)
        gu, gv = self.gid[pl[lk], self.lsrc[lk]], self.gid[pl[lk], self.ldst[lk]]
        cross = lk[(gu != gv) & (self.gsize[gv] > 1)]
        self.part_of_link[cross] = pl[cross]
        # per group: the groups of the senders of its cross-group in-links (neighbour groups), and back
        nb = [set() for _ in range(G)]
        for p in range(P):
            gp = self.gid[p]
            cross = gp[self.lsrc] != gp[self.ldst]
            for gu, gv in zip(gp[self.lsrc[cross]].tolist(), gp[self.ldst[cross]].tolist()):
                nb[gv].add(gu)
        rev = [[] for _ in range(G)]
        for g, s in enumerate(nb):
            for h in s:
                rev[h].append(g)
        self.ngrev_ptr = np.concatenate([[0], np.cumsum([len(r) for r in rev])]).astype(np.int64)
        self.ngrev = np.array([g for r in rev for g in sorted(r)], np.int64)

    # ------------------------------------------------------------------ summary
    def stats(self) -> dict:
        sizes = np.diff(self.near_ptr)
        return {"near_classes": self.num_classes, "near_max": int(sizes.max()) if sizes.size else 0,
                "partitions": self.num_partitions, "groups": self.num_groups,
                "cross_group_links": int((self.part_of_link >= 0).sum())}
