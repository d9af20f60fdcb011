"""A FAST-like All-to-All(v) scheduler (after FAST, arXiv 2505.09764): balance inside the server first, then
cross between servers in one-to-one steps from a Birkhoff–von Neumann decomposition of the server matrix.

For every ordered pair of servers ``(A, B)`` the chunks that NPUs of ``A`` send to NPUs of ``B`` are first
spread evenly over ``A``'s NPUs (*intra-server balancing*: an NPU keeps what its share allows and hands the
excess to the NPUs of ``A`` that have less, over the fast links), so that every lane carries the same
amount across. The server-level matrix (per-lane chunks of each pair) is padded to a doubly stochastic one
(equal row and column sums) and decomposed into permutations (Birkhoff–von Neumann): each *step* is a
matching in which every server sends to one server and receives from one, so no NIC is shared by two server
pairs. Lane ``i`` of ``A`` sends to lane ``i`` of ``B`` (its rail; ``i mod |B|`` when sizes differ), which
forwards to the destination NPU over ``B``'s fast links. Steps are ordered on every link by their index
(the list scheduler's priority), so they pipeline rather than wait for each other; traffic inside a server
goes directly, alongside.

A multicast chunk (MoE dispatch) is sent once per destination, as FAST schedules the per-pair byte matrix;
reducing tables (MoE combine) are the time-reversed mirror (:func:`solvers.compose.mirrored`).
"""

from __future__ import annotations

import numpy as np

from tacos_bench.problem import Problem

from ..base import CAP_ALL_TO_ALL, CAP_DEMAND_COPY, CAP_DEMAND_REDUCE, CAP_DEMAND_UNICAST
from ..plan import COPY, NO_PRED, Plan, send_path
from .common import PlanBaseline
from .direct import plan_start
from .stats import FAST_STATS
from .servers import Servers, deliveries, servers


def doubly_stochastic_padding(W: np.ndarray) -> np.ndarray:
    """``W`` plus non-negative padding so that every row and column sums to the largest line sum of ``W``.

    Examples
    --------
    >>> doubly_stochastic_padding(np.array([[0, 3], [1, 0]])).tolist()
    [[0, 3], [3, 0]]
    """
    W = np.asarray(W, dtype=np.int64).copy()
    target = int(max(W.sum(axis=1).max(initial=0), W.sum(axis=0).max(initial=0)))
    row, col = target - W.sum(axis=1), target - W.sum(axis=0)
    # fill the deficits greedily: one entry of a short row and a short column at a time (the off-diagonal
    # first, so padding stays off the server's own entry where it can)
    k = W.shape[0]
    cells = sorted(((i, j) for i in range(k) for j in range(k)), key=lambda ij: ij[0] == ij[1])
    for i, j in cells:
        add = min(row[i], col[j])
        if add > 0:
            W[i, j] += add
            row[i] -= add
            col[j] -= add
    return W


def birkhoff_steps(W: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Birkhoff–von Neumann decomposition of a matrix with equal line sums into ``(perm, weight)`` steps,
    ``perm[i]`` the column of row ``i``; the weights sum to the line sum.

    Examples
    --------
    >>> [(p.tolist(), w) for p, w in birkhoff_steps(np.array([[2, 1], [1, 2]]))]
    [([0, 1], 2), ([1, 0], 1)]
    """
    from scipy.optimize import linear_sum_assignment

    W = np.asarray(W, dtype=np.int64).copy()
    k = W.shape[0]
    steps = []
    while W.any():
        # a perfect matching on the support that takes the largest entries first (fewer, longer steps);
        # Birkhoff's theorem guarantees one exists while the line sums are equal
        cost = np.where(W > 0, -W.astype(np.float64), 1e18)
        r, c = linear_sum_assignment(cost)
        if (W[r, c] <= 0).any():   # pragma: no cover - only on unequal line sums, which the padding rules out
            raise ValueError("birkhoff_steps needs equal row and column sums")
        w = int(W[r, c].min())
        perm = np.empty(k, np.int64)
        perm[r] = c
        steps.append((perm, w))
        W[r, c] -= w
    return steps


def _balanced_lanes(src_lane: np.ndarray, k: int) -> np.ndarray:
    """The lane each chunk crosses on: as many as possible stay on their source's lane, the excess goes to
    the lanes below their share (shares differ by at most one; the lanes that hold most get the larger)."""
    m = src_lane.size
    have = np.bincount(src_lane, minlength=k)
    share = np.full(k, m // k)
    share[np.argsort(-have, kind="stable")[: m % k]] += 1
    lane = src_lane.copy()
    kept = np.zeros(k, np.int64)
    moved = []
    for i, l in enumerate(src_lane.tolist()):
        if kept[l] < share[l]:
            kept[l] += 1
        else:
            moved.append(i)
    free = np.repeat(np.arange(k), share - kept)
    lane[np.asarray(moved, dtype=np.int64)] = free
    return lane


def fast_plan(problem: Problem) -> tuple[Plan, dict]:
    """The FAST-like plan of a copy problem (module docstring) and its statistics."""
    plan, router, have = plan_start(problem)
    sv: Servers = servers(problem.topology)
    c, s, d = deliveries(problem)
    S, D = sv.server[s], sv.server[d]
    k = sv.count
    inside = S == D
    for i in np.flatnonzero(inside).tolist():
        send_path(plan, int(c[i]), router.path(int(s[i]), int(d[i])), COPY, NO_PRED, prio=0, have=have)
    cross = np.flatnonzero(~inside)
    # per server pair: its rows and, after balancing, the lane each crosses on
    order = cross[np.lexsort((c[cross], s[cross], D[cross], S[cross]))]
    pair = S[order] * k + D[order]
    starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]]) if order.size else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], order.size]
    lanes = np.empty(order.size, np.int64)
    per_lane = np.zeros((k, k), np.int64)
    for a, b in zip(starts.tolist(), ends.tolist()):
        A = int(S[order[a]])
        width = sv.members[A].size
        lanes[a:b] = _balanced_lanes(sv.lane[s[order[a:b]]], width)
        per_lane[A, int(D[order[a]])] = int(np.bincount(lanes[a:b], minlength=width).max())
    steps = birkhoff_steps(doubly_stochastic_padding(per_lane)) if order.size else []
    # step of the j-th chunk of each (pair, lane): the steps that pair A -> B, in order, each taking its weight
    step_of: dict[tuple[int, int], list[int]] = {}
    for t, (perm, w) in enumerate(steps):
        for A in range(k):
            step_of.setdefault((A, int(perm[A])), []).extend([t] * w)
    seen: dict[tuple[int, int, int], int] = {}
    balanced = 0
    for pos, i in enumerate(order.tolist()):
        A, B, lane = int(S[i]), int(D[i]), int(lanes[pos])
        j = seen.get((A, B, lane), 0)
        seen[(A, B, lane)] = j + 1
        prio = 1 + step_of[(A, B)][j]
        u, v = int(s[i]), int(d[i])
        out = int(sv.members[A][lane])
        land = int(sv.members[B][lane % sv.members[B].size])
        balanced += out != u
        last = send_path(plan, int(c[i]), router.path(u, out), COPY, NO_PRED, prio=0, have=have)
        last = send_path(plan, int(c[i]), router.path(out, land), COPY, last, prio=prio, have=have)
        send_path(plan, int(c[i]), router.path(land, v), COPY, last, prio=prio, have=have)
    return plan, {"fast_servers": k, "fast_steps": len(steps), "fast_cross_deliveries": int(order.size),
                  "fast_balanced_deliveries": int(balanced), "fast_inside_deliveries": int(inside.sum())}


class FastSolver(PlanBaseline):
    """FAST-like All-to-All(v): intra-server balancing, then Birkhoff–von Neumann steps between servers
    (:func:`fast_plan`). Runs on All-to-All and on chunk tables (a multicast chunk once per destination; a
    reducing table as the mirror).

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.named import named_topology
    >>> r = FastSolver().solve(Problem(named_topology("hetero2x2x4"), Collective("all_to_all", 1, 16)))
    >>> r.status, r.stats["fast_servers"] > 1
    ('feasible', True)
    """

    name = "fast"
    capabilities = frozenset({CAP_ALL_TO_ALL, CAP_DEMAND_UNICAST, CAP_DEMAND_COPY, CAP_DEMAND_REDUCE})
    Stats = FAST_STATS

    plan_builder = staticmethod(fast_plan)
