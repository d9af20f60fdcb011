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
        N, M = self.N, self.M
        rsrc = self.lsrc[self.in_order]          # the reversed graph: v -> its in-neighbours
        rw = self.lt[self.in_order]
        dist = np.full(N, np.inf)
        hk = np.empty(M + 1)
        hv = np.empty(M + 1, np.int64)
        reached = np.empty(N, np.int64)
        self.near_of_link = np.full(M, -1, np.int64)
        members, cls_v, index = [], [], {}
        for v in range(N):
            a, b = self.in_ptr[v], self.in_ptr[v + 1]
            if a == b:
                continue
            links = self.in_order[a:b]
            radius = float(self.lt[links].max())
            k = dijkstra_within(self.in_ptr, rsrc, rw, v, radius, dist, hk, hv, reached)
            ball = reached[:k].copy()
            d = dist[ball].copy()
            dist[ball] = np.inf
            for lk in links.tolist():
                mem = np.sort(ball[(d < self.lt[lk] * (1 - REL)) & (ball != v)])
                if mem.size == 0:
                    continue
                key = (v, mem.tobytes())
                c = index.get(key)
                if c is None:
                    c = index[key] = len(members)
                    members.append(mem)
                    cls_v.append(v)
                self.near_of_link[lk] = c
        K = self.num_classes = len(members)
        sizes = np.array([m.size for m in members], np.int64)
        self.near_v = np.array(cls_v, np.int64)
        self.near_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.near_mem = np.concatenate(members).astype(np.int64) if K else np.zeros(0, np.int64)
        # classes that contain w (updated when w starts receiving a chunk)
        owner = np.repeat(np.arange(K), sizes)
        order = np.argsort(self.near_mem, kind="stable")
        self.rev_cls = owner[order].astype(np.int64)
        self.rev_ptr = np.searchsorted(self.near_mem[order], np.arange(N + 1)).astype(np.int64)
        # the gate: v's in-links from near NPUs, their summed chunk rate and the fastest of them
        fin, fptr, rate, tmin = [], [0], [], []
        for k in range(K):
            v = self.near_v[k]
            links = self.in_order[self.in_ptr[v]:self.in_ptr[v + 1]]
            sel = links[np.isin(self.lsrc[links], self.near_mem[self.near_ptr[k]:self.near_ptr[k + 1]])]
            fin.extend(sel.tolist())
            fptr.append(len(fin))
            rate.append(float(np.sum(1.0 / self.lt[sel])) if sel.size else 0.0)
            tmin.append(float(self.lt[sel].min()) if sel.size else np.inf)
        self.fin_links = np.array(fin, np.int64)
        self.fin_ptr = np.array(fptr, np.int64)
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
        for lk in range(M):
            p = tier_part[min(tier_of[lk], len(tiers) - 1)]
            if p < 0:
                continue
            gu, gv = self.gid[p, self.lsrc[lk]], self.gid[p, self.ldst[lk]]
            if gu != gv and self.gsize[gv] > 1:
                self.part_of_link[lk] = p
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
