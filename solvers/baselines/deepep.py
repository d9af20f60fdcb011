"""A DeepEP-like hierarchical dispatch and combine (after DeepEP's internode kernels): a chunk crosses each
node pair once over the NIC and fans out inside the node over the fast links.

Dispatch (a copy table: each token multicast to the GPUs hosting its experts): the source GPU sends the chunk
directly to its destinations inside its own server; for every other server holding destinations, it sends
the chunk once to the GPU of that server on its own rail (the same lane; ``lane mod size`` when sizes differ),
which forwards it to the server's destinations. Combine (a reducing table) is the time-reversed mirror: the
experts' outputs are summed at that rail GPU and cross back once. Servers are the groups of the fastest links
(:mod:`solvers.baselines.servers`); All-to-All and unicast tables go the same way (rail first, then inside).
"""

from __future__ import annotations

import numpy as np

from tacos_bench.problem import Problem

from ..base import CAP_ALL_TO_ALL, CAP_DEMAND_COPY, CAP_DEMAND_REDUCE, CAP_DEMAND_UNICAST
from ..plan import COPY, NO_PRED, Plan, send_path
from .common import PlanBaseline
from .direct import plan_start
from .stats import DEEPEP_STATS
from .servers import deliveries, servers


def deepep_plan(problem: Problem) -> tuple[Plan, dict]:
    """The DeepEP-like plan of a copy problem (module docstring) and its statistics."""
    plan, router, have = plan_start(problem)
    sv = servers(problem.topology)
    c, s, d = deliveries(problem)
    S, D = sv.server[s], sv.server[d]
    # chunk by chunk, destinations of the own server first, then the other servers in rail order
    order = np.lexsort((d, D != S, c))
    landed: dict[tuple[int, int], int] = {}   # (chunk, server) -> the transfer that gave its rail GPU the chunk
    rdma = forwards = 0
    for i in order.tolist():
        ch, u, v, B = int(c[i]), int(s[i]), int(d[i]), int(D[i])
        if B == S[i]:
            send_path(plan, ch, router.path(u, v), COPY, NO_PRED, prio=0, have=have)
            continue
        members = sv.members[B]
        land = int(members[sv.lane[u] % members.size])
        got = landed.get((ch, B))
        if got is None:
            got = send_path(plan, ch, router.path(u, land), COPY, NO_PRED, prio=0, have=have)
            landed[(ch, B)] = got
            rdma += 1
        if v != land:
            send_path(plan, ch, router.path(land, v), COPY, got, prio=1, have=have)
            forwards += 1
    return plan, {"deepep_servers": sv.count, "deepep_rdma_messages": rdma, "deepep_nvlink_forwards": forwards}


class DeepEpSolver(PlanBaseline):
    """DeepEP-like hierarchical dispatch / combine (:func:`deepep_plan`): once across each server pair over
    the rail, then inside the server; combine as the mirror. Runs on All-to-All and on chunk tables.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.named import named_topology
    >>> r = DeepEpSolver().solve(Problem(named_topology("hetero2x2x4"), Collective("all_to_all", 1, 16)))
    >>> r.status, r.stats["deepep_rdma_messages"] > 0
    ('feasible', True)
    """

    name = "deepep"
    capabilities = frozenset({CAP_ALL_TO_ALL, CAP_DEMAND_UNICAST, CAP_DEMAND_COPY, CAP_DEMAND_REDUCE})
    Stats = DEEPEP_STATS

    plan_builder = staticmethod(deepep_plan)
