"""Directed Hamiltonian cycles for the Ring baseline.

:func:`find_hamiltonian_cycle` tries cheap constructions first (identity order
``0 -> 1 -> ... -> N-1 -> 0``, the binary-reflected Gray code on power-of-two
sizes, a boustrophedon "snake" on meshes and tori of any dimension), checks each
against the real links, and otherwise runs a depth-first search with
Warnsdorff's rule (visit the neighbour with the fewest onward options first)
and a cap on the number of expansions, so the result is
deterministic and the cost bounded. Deciding whether a Hamiltonian cycle exists
is NP-complete; a search that hits its cap reports ``None`` even if a cycle
exists, and the Ring baseline then embeds its logical ring over shortest paths.

Examples
--------
>>> from tacos_bench.topology.generators import mesh2d
>>> order, how, _ = find_hamiltonian_cycle(mesh2d(4, 3))
>>> how, len(order)
('grid-snake', 12)
>>> find_hamiltonian_cycle(mesh2d(3, 3))[1]   # odd bipartite mesh: none exists
'none'
"""

from __future__ import annotations

import numpy as np

from tacos_bench.errors import TopologyError
from tacos_bench.topology import Topology

DEFAULT_MAX_EXPANSIONS = 200_000


def is_cycle(topology: Topology, order) -> bool:
    """True when ``order`` visits every NPU once and consecutive NPUs (cyclically) are linked."""
    order = np.asarray(order, dtype=np.int64)
    n = topology.num_npus
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        return False
    if n == 1:
        return True
    return bool(np.all(topology.link_ids(order, np.roll(order, -1)) >= 0))


def _snake_path(dims: list[int]) -> list[tuple[int, ...]]:
    """Boustrophedon order of a grid: consecutive coordinates differ by 1 in one axis."""
    if not dims:
        return [()]
    inner = _snake_path(dims[:-1])
    out = []
    for z in range(dims[-1]):
        seq = inner if z % 2 == 0 else inner[::-1]
        out.extend(t + (z,) for t in seq)
    return out


def grid_cycle(dims) -> list[int] | None:
    """A Hamiltonian cycle of the mesh ``dims`` (ids ``x + X*(y + ...)``), or None.

    One axis of size >= 2 plays "x", the snake through the other axes plays
    "y" (an even number of rows is needed): row 0 left to right, the remaining
    rows snake over columns ``1..X-1``, and column 0 leads back. Needs an even
    NPU count and at least two axes of size >= 2 (a mesh with an odd NPU count
    is bipartite with unequal sides and has none).
    """
    dims = [int(d) for d in dims]
    n = int(np.prod(dims)) if dims else 1
    if n % 2 or sum(d >= 2 for d in dims) < 2:
        return None
    axis = next((a for a, d in enumerate(dims) if d >= 2 and (n // d) % 2 == 0), None)
    if axis is None:
        return None
    rest = [a for a in range(len(dims)) if a != axis]
    rows = _snake_path([dims[a] for a in rest])
    X, Y = dims[axis], len(rows)
    cells = [(x, 0) for x in range(X)]
    for y in range(1, Y):
        xs = range(X - 1, 0, -1) if y % 2 else range(1, X)
        cells.extend((x, y) for x in xs)
    cells.extend((0, y) for y in range(Y - 1, 0, -1))
    strides = np.cumprod([1] + dims[:-1])
    order = []
    for x, y in cells:
        coord = [0] * len(dims)
        coord[axis] = x
        for a, v in zip(rest, rows[y]):
            coord[a] = v
        order.append(int(np.dot(coord, strides)))
    return order


def _dfs(topology: Topology, max_expansions: int) -> tuple[list[int] | None, int]:
    """Depth-first search from NPU 0 with Warnsdorff ordering and two prunings.

    Pruning: an unvisited NPU whose in-neighbours are all visited can only be
    entered from the current tail, so it must be next (two such NPUs, or one
    that the tail cannot reach, is a dead end); and NPU 0 must keep an
    unvisited in-neighbour to close the cycle.
    """
    n = topology.num_npus
    ptr = topology.out_ptr.tolist()
    dst = topology.dst.tolist()
    closes = [False] * n
    for u in topology.in_neighbors(0).tolist():
        closes[u] = True
    in_left = topology.in_degree().astype(np.int64).tolist()  # unvisited in-neighbours per NPU
    visited = [False] * n
    zeros = 0  # unvisited NPUs with no unvisited in-neighbour

    def enter(v: int) -> None:
        nonlocal zeros
        visited[v] = True
        if in_left[v] == 0:
            zeros -= 1
        for lk in range(ptr[v], ptr[v + 1]):
            x = dst[lk]
            in_left[x] -= 1
            if not visited[x] and in_left[x] == 0:
                zeros += 1

    def leave(v: int) -> None:
        nonlocal zeros
        for lk in range(ptr[v], ptr[v + 1]):
            x = dst[lk]
            if not visited[x] and in_left[x] == 0:
                zeros -= 1
            in_left[x] += 1
        visited[v] = False
        if in_left[v] == 0:
            zeros += 1

    def candidates(u: int) -> list[int]:
        opts = []
        for lk in range(ptr[u], ptr[u + 1]):
            v = dst[lk]
            if not visited[v]:
                onward = sum(1 for q in range(ptr[v], ptr[v + 1]) if not visited[dst[q]])
                opts.append((onward, v))
        opts.sort(reverse=True)  # popped from the end: best first
        return [v for _, v in opts]

    zeros = sum(1 for v in range(n) if in_left[v] == 0)
    enter(0)
    path = [0]
    stack = [candidates(0)]
    expansions = 0
    while stack:
        cand = stack[-1]
        if not cand:
            stack.pop()
            if len(path) > 1:
                leave(path.pop())
            continue
        v = cand.pop()
        expansions += 1
        if expansions > max_expansions:
            return None, -expansions  # negative: the cap was hit, nothing is proven
        enter(v)
        path.append(v)
        if len(path) == n:
            if closes[v]:
                return path, expansions
            leave(path.pop())
            continue
        forced = [dst[lk] for lk in range(ptr[v], ptr[v + 1]) if not visited[dst[lk]] and in_left[dst[lk]] == 0]
        if in_left[0] == 0 or zeros > len(forced) or len(forced) > 1:
            leave(path.pop())
            continue
        stack.append(forced if forced else candidates(v))
    return None, expansions


def _constructions(topology: Topology):
    n = topology.num_npus
    yield "identity", list(range(n))
    if n & (n - 1) == 0:
        yield "gray-code", [i ^ (i >> 1) for i in range(n)]
    dims = topology.meta.get("dims") if isinstance(topology.meta, dict) else None
    if dims and int(np.prod(dims)) == n:
        g = grid_cycle(dims)
        if g is not None:
            yield "grid-snake", g


def _strongly_connected(topology: Topology) -> bool:
    try:
        topology.check_strongly_connected()
    except TopologyError:
        return False
    return True


def find_hamiltonian_cycle(topology: Topology, weight=None, max_expansions: int = DEFAULT_MAX_EXPANSIONS,
                           max_levels: int = 8) -> tuple[list[int] | None, str, int]:
    """A directed Hamiltonian cycle as an NPU order, how it was found, and DFS expansions used.

    With per-link ``weight`` (link times) the search prefers fast cycles: it
    first looks for a cycle on the fastest links only, then admits slower
    links level by level (at most ``max_levels`` levels, skipping levels whose
    links do not connect all NPUs), because a ring runs at the pace of its
    slowest link. The DFS budget is shared among the levels tried.

    Returns ``(order, method, expansions)`` with ``method`` one of ``trivial``,
    ``identity``, ``gray-code``, ``grid-snake``, ``dfs``; without a cycle it is
    ``none`` when the search was exhausted (none exists) and ``search-capped``
    when it stopped after ``max_expansions`` expansions.
    """
    n = topology.num_npus
    if n == 1:
        return [0], "trivial", 0
    if weight is None or topology.num_links == 0:
        levels = [None]
    else:
        weight = np.asarray(weight, dtype=np.float64)
        levels = np.unique(weight)
        if len(levels) > max_levels:
            levels = np.unique(np.quantile(weight, np.linspace(0, 1, max_levels), method="higher"))
        levels = list(levels)
    subs = []
    for lv in levels:
        if lv is None or bool(np.all(weight <= lv)):
            subs.append(topology)
            break
        keep = weight <= lv
        sub = Topology(n, topology.src[keep], topology.dst[keep], topology.bw_GiBps[keep], topology.lat_us[keep],
                       name=topology.name, meta=dict(topology.meta))
        if _strongly_connected(sub):
            subs.append(sub)
    used = 0
    capped = False
    for i, sub in enumerate(subs):
        for how, order in _constructions(sub):
            if is_cycle(sub, order):
                return order, how, used
        if n == 2:
            continue
        budget = max_expansions - used
        if i < len(subs) - 1:
            budget //= (len(subs) - i)
        order, spent = _dfs(sub, budget)
        used += abs(spent)
        if order is not None:
            return order, "dfs", used
        capped = capped or spent < 0
    return None, ("search-capped" if capped else "none"), used


__all__ = ["find_hamiltonian_cycle", "grid_cycle", "is_cycle", "DEFAULT_MAX_EXPANSIONS"]
