"""All-Reduce inside a switch that multicasts and reduces (NVLS-like), shared by ``greedy_plus`` and the ``nvls``
baseline.

For each chunk ``c`` (owner ``o = c mod N``) two cut-through transfers through the switch ``s``: the
*reduction* — every other NPU sends its contribution over ``u > s > o`` at once and the switch delivers the
sum (a reduction group, docs/fabrics.md) — and, one slot later, the *multicast* of the result over
``o > s > v`` to every other NPU. The reduction of one chunk uses every up-port but the owner's and the owner's
down-port; the multicast of a chunk of the same owner uses exactly the other ports, so the two run side by
side. Chunks go owner by owner; a change of owner costs one slot. With ``K`` chunks per NPU the schedule takes
``N K + N`` slots where every up-port must carry ``N K`` chunk-sends (the bound): ``1 + 1/K`` times it.
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
    if problem.kind != "all_reduce":
        raise SolverError(f"the in-switch pipeline is an All-Reduce, not {problem.kind}")
    topo = problem.topology
    s = nvls_switch(topo)
    if s is None:
        raise SolverError(f"{topo.name!r} has no cut-through switch with multicast and reduce joined to every NPU")
    n, C = problem.num_npus, problem.num_chunks
    npus = np.arange(n)
    up = topo.link_ids(npus, np.full(n, s))
    down = topo.link_ids(np.full(n, s), npus)
    # the slot: the slowest route through the switch (every route is one cut-through segment)
    route_t = (topo.lat_us[up][:, None] + topo.lat_us[down][None, :]
               + link_time_us(np.minimum(topo.bw_GiBps[up][:, None], topo.bw_GiBps[down][None, :]), 0.0,
                              problem.chunk_bytes))
    slot = float(route_t.max())
    rows = []
    k = 0
    prev_owner = None
    for o in range(n):
        for c in range(o, C, n):
            if prev_owner is not None and prev_owner != o:
                k += 1   # the previous owner's last multicast occupies the slot this reduction would share
            for u in range(n):
                if u != o:
                    rows.append((c, u, o, k * slot, (k + 1) * slot, REDUCE, f"{u}>{s}>{o}"))
            for v in range(n):
                if v != o:
                    rows.append((c, o, v, (k + 1) * slot, (k + 2) * slot, COPY, f"{o}>{s}>{v}"))
            k += 1
            prev_owner = o
    c, a, b, t0, t1, op, r = zip(*rows)
    return Schedule(c, a, b, t0, t1, np.array(op, dtype=np.int8), route=list(r)).sorted()
