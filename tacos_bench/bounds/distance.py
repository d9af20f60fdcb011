"""The distance bound (docs/bounds.md (b), (f)): a chunk cannot reach a node sooner than the shortest link-time
path from a node that holds it, so the weighted diameter bounds an All-Gather, and the farthest destination of
each chunk any copy collective. Also the all-pairs rows other families read: the entry-time matrix of the
refined ingress bound, the per-source rows of the pipeline and link load bounds.

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> from ._options import _Opts
>>> t = ring(5, bidirectional=False)
>>> _distances(_Graph(t, np.ones(t.num_links)), _Opts(5000, 2048, 1024, 32, 0), want_entry=False)[:2]
(4.0, True)
"""

from __future__ import annotations

import numpy as np

from ._graph import _distance_row, _distance_rows, _Graph
from ._options import _Opts

# Defaults of the size limits above which the distances switch to a cheaper valid bound.
DISTANCE_EXACT_MAX_NPUS = 5000
DISTANCE_EXACT_MAX_WORK = 4e8        # N * (N + L) edge relaxations for all-pairs
DISTANCE_SAMPLES = 32


def _sampled_diameter(g: _Graph, samples: int) -> float:
    """max d(o, v) over the pairs met by ``samples`` single-source runs (a valid lower bound on the diameter).

    Runs alternate forward from a node and backward (on the reversed links)
    from the farthest node found, a double sweep that finds the diameter of
    many graphs quickly; when a sweep repeats itself the next source is taken
    from an evenly spaced, deterministic list of NPUs.
    """
    rg = g.reversed()
    spare = iter(np.unique(np.linspace(0, g.n - 1, max(2, samples)).round().astype(np.int64)).tolist())
    best = 0.0
    node, forward = 0, True
    seen = set()
    for _ in range(max(1, samples)):
        while (node, forward) in seen:
            node = next(spare, None)
            if node is None:
                return best
        seen.add((node, forward))
        gg = g if forward else rg
        d = _distance_row(gg.out_ptr, gg.dst, gg.w, node, gg.uniform)
        far = int(np.argmax(d))   # first farthest id: deterministic
        best = max(best, float(d[far]))
        node, forward = far, not forward
    return best


def _distances(g: _Graph, opts: _Opts, want_entry: bool):
    """``(diameter, exact, E)``: E is the entry-time matrix or None when not affordable."""
    n, L = g.n, g.w.size
    exact = n <= opts.distance_exact_max_npus and n * (n + L) <= DISTANCE_EXACT_MAX_WORK
    entry = want_entry and exact and n <= opts.refine_max_npus
    if exact:
        ecc, E = _distance_rows(g.out_ptr, g.dst, g.w, g.in_ptr, g.in_src, np.arange(n, dtype=np.int64),
                                g.uniform, entry)
        return float(ecc.max()), True, (E if entry else None)
    return _sampled_diameter(g, opts.distance_samples), False, None


def _source_distances(g: _Graph, src: np.ndarray, moving: np.ndarray, opts: _Opts):
    """``(D, row, exact)``: the distance rows ``D`` of the sources with chunks to move, the row of each chunk's
    source (chunks that stay put get an unused one), and whether they were affordable (``D`` is None when not,
    or when nothing moves)."""
    n = g.n
    srcs = np.unique(src[moving])
    exact = n <= opts.distance_exact_max_npus and srcs.size * (n + g.w.size) <= DISTANCE_EXACT_MAX_WORK
    if not (exact and srcs.size):
        return None, None, exact
    D = np.vstack([_distance_row(g.out_ptr, g.dst, g.w, int(s), g.uniform) for s in srcs.tolist()])
    row = np.minimum(np.searchsorted(srcs, src), srcs.size - 1)
    return D, row, exact


def _copy_distance(D: np.ndarray, row: np.ndarray, d1: np.ndarray, every: np.ndarray) -> float:
    """The farthest any chunk must go: to every NPU from a multicast chunk's source (rows ``row[every]`` of
    ``D``), and ``d1``, the distances of the unicast chunks that move."""
    distance = 0.0
    if every.any():
        distance = float(D[row[every]].max())
    if d1.size:
        distance = max(distance, float(d1.max()))
    return distance
