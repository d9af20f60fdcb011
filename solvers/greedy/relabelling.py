"""The NPU labellings of ``greedy_plus``'s relabelled copies of a rooted problem (candidate ``relabel``)."""

from __future__ import annotations

import numpy as np

from tacos_bench.problem import Problem


def _hops(topo, sources) -> np.ndarray:
    """Hop counts from each of ``sources`` (rows) to every NPU (``num_npus + 1`` where unreachable): one
    breadth-first search per source, all advanced together level by level."""
    n = topo.num_npus
    sources = np.asarray(sources, dtype=np.int64).reshape(-1)
    rows = np.arange(sources.size)
    out = np.full((sources.size, n), n + 1, dtype=np.int64)
    out[rows, sources] = 0
    frontier = np.zeros((sources.size, n), dtype=bool)
    frontier[rows, sources] = True
    src, dst = topo.src.astype(np.int64), topo.dst.astype(np.int64)
    d = 0
    while frontier.any():
        d += 1
        r, li = np.nonzero(frontier[:, src])
        nxt = np.zeros_like(frontier)
        nxt[r, dst[li]] = True
        nxt &= out > n
        out[nxt] = d
        frontier = nxt
    return out


# the root's neighbours are ordered spread apart (O(degree^2) set intersections) up to this out-degree, else by id
SPREAD_MAX_DEGREE = 64


def relabelling(problem: Problem, attempt: int, seed: int = 0) -> np.ndarray:
    """The NPU permutation of ``greedy_plus``'s relabelled copy number ``attempt`` of a rooted problem.

    Attempts ``0 .. 2d-1`` (``d`` the root's out-degree) number the NPUs by hops from the root, ties by the
    hops from each out-neighbour of the root in turn, then by id. The neighbours come *spread*: from the
    lowest id, each next one the farthest from the previous (ties: the fewest two-hop paths between them,
    then the lowest id; by id alone above ``SPREAD_MAX_DEGREE`` neighbours) -- on a torus ``+x, -x, +y, -y``, never ``+x, +y, -y, -x`` -- rotated by
    ``attempt mod d``. The labels then depend mostly on an NPU's place relative to the root, not on the
    root's id (ties, such as two NPUs the same hops from all of those, stay by id). Later attempts are random
    relabellings (:func:`tacos_bench.topology.relabel.random_permutation`, seed from ``seed`` and
    ``attempt``). ``perm[i]`` is the new id of NPU ``i`` (:func:`tacos_bench.topology.relabel.relabel`).

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> relabelling(Problem(ring(5), Collective("broadcast", 2, 8, root=2)), 0).tolist()   # 2 -> 0, 1 -> 1, 3 -> 2
    [3, 1, 0, 2, 4]
    """
    from tacos_bench.topology.relabel import random_permutation

    topo, root = problem.topology, int(problem.collective.root)
    n = topo.num_npus
    nbrs = np.unique(topo.out_neighbors(root))
    nbrs = nbrs[nbrs != root]
    d = len(nbrs)
    if attempt >= 2 * max(d, 1):
        return random_permutation(n, attempt_seed(seed, attempt))
    both = _hops(topo, np.concatenate(([root], nbrs)))
    hops = both[1:]
    seq = [0]
    if 2 < d <= SPREAD_MAX_DEGREE:
        outs = [set(topo.out_neighbors(int(u)).tolist()) for u in nbrs]
        ins = [set(topo.in_neighbors(int(u)).tolist()) for u in nbrs]
        left = list(range(1, d))
        while left:
            last = seq[-1]
            nxt = max(left, key=lambda j: (hops[last, nbrs[j]], -len(outs[last] & ins[j]), -j))
            seq.append(nxt)
            left.remove(nxt)
    else:
        seq = list(range(d))
    seq = np.roll(np.asarray(seq, dtype=np.int64), -(attempt % max(d, 1)))
    keys = np.vstack((both[:1], hops[seq]))
    # np.lexsort: the last key is the primary one
    order = np.lexsort((np.arange(n),) + tuple(keys[::-1]))
    perm = np.empty(n, dtype=np.int64)
    perm[order] = np.arange(n)
    return perm


def attempt_seed(seed: int, attempt: int) -> int:
    """The seed of relabelled copy number ``attempt``: its runs and (beyond the hop orders) its labels."""
    return int(np.random.SeedSequence([int(seed), int(attempt)]).generate_state(1)[0] >> 1)
