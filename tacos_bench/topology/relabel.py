"""Relabelling: the same topology with its NPUs renamed, and the same problem on it.

A relabelling is a permutation ``perm`` of the NPU ids: NPU ``i`` of the original is NPU ``perm[i]`` of the
copy, and a link ``u->v`` becomes ``perm[u]->perm[v]`` with the same bandwidth and latency. The copy is
isomorphic to the original, so every collective on it is *the same problem*: the optimum, every valid lower
bound and the set of valid schedules are identical up to the renaming. What may change is the outcome of a
heuristic that breaks ties by id -- which is what issue 22 ("label independence as a measured property")
measures with :func:`random_relabelling` (tests/test_label_independence.py, experiments/bench_relabel.py).

The data follows the NPU:

- the root of a rooted collective: ``root -> perm[root]``;
- chunk ownership (:mod:`tacos_bench.collective`): chunk ``c = k N + u`` of NPU ``u`` (All-Gather, Gather,
  Scatter, Reduce-Scatter, All-Reduce) is chunk ``k N + perm[u]``; All-to-All chunk ``(s N + d) K + k`` is
  ``(perm[s] N + perm[d]) K + k``; Broadcast/Reduce chunks live at the root and keep their ids
  (:func:`chunk_permutation`);
- a schedule: every row's chunk, sender and receiver are mapped, its times are kept
  (:func:`relabel_schedule`), so a valid schedule of the original is a valid schedule of the copy with the
  same makespan.

Metadata follows :mod:`~tacos_bench.topology.transforms`: structural keys of the parent (``dims``, the
server counts of a hetero cluster, ...) describe ids and are *not* copied (a relabelled torus is not laid
out by ``id = y X + x``); the parent's name and kind are kept as ``meta["parent"]`` and
``meta["parent_kind"]``, the permutation as ``meta["permutation"]``, and ``meta["original_ids"][new]`` names
the NPU of the originally built topology (composed with the parent's own ``original_ids``), so a root or a
fault configured in built ids still finds its NPU.

Examples
--------
>>> from tacos_bench.topology.generators import ring
>>> t = relabel(ring(4, bidirectional=False), [2, 0, 3, 1])   # 0->1->2->3->0 becomes 2->0->3->1->2
>>> sorted((u, v) for u, v, _, _ in t.edges())
[(0, 3), (1, 2), (2, 0), (3, 1)]
>>> t.meta["permutation"], t.meta["original_ids"]
([2, 0, 3, 1], [1, 3, 0, 2])
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import TopologyError
from .model import Topology

if TYPE_CHECKING:  # a Problem is built on a topology: at run time these are imported where they are used
    from ..collective import Collective
    from ..problem import Problem
    from ..schedule import Schedule

__all__ = ["as_permutation", "relabel", "random_permutation", "random_relabelling", "chunk_permutation",
           "relabel_collective", "relabel_problem", "relabel_schedule"]

# meta keys that are about the NPUs or links as built, not about their ids' layout: kept as they are
_KEPT_META = ("failed_links", "header_name", "path")
# layout keys read by label-free consumers through ``meta["layout"]`` with ``meta["original_ids"]``
_LAYOUT_META = ("kind", "dims", "servers_x", "servers_y", "npus_per_server")


def as_permutation(permutation: Sequence[int], num_npus: int) -> np.ndarray:
    """``permutation`` checked to be a permutation of ``0 .. num_npus-1``, as int64.

    Raises
    ------
    TopologyError
        If it has the wrong length, a non-integer, an id out of range or a repeated id.

    Examples
    --------
    >>> as_permutation([1, 2, 0], 3).tolist()
    [1, 2, 0]
    >>> as_permutation([0, 0, 1], 3)
    Traceback (most recent call last):
    ...
    tacos_bench.errors.TopologyError: relabelling: NPU id 0 appears more than once (a permutation of 0..2 is needed)
    """
    if isinstance(permutation, (str, bytes)):
        raise TopologyError(f"relabelling must be a list of NPU ids, got {permutation!r}")
    items = list(np.asarray(permutation).ravel().tolist()) if isinstance(permutation, np.ndarray) \
        else list(permutation)
    for v in items:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TopologyError(f"relabelling: NPU id {v!r} is not an integer")
    if len(items) != num_npus:
        raise TopologyError(f"relabelling has {len(items)} entries, the topology has {num_npus} NPUs")
    perm = np.asarray(items, dtype=np.int64).reshape(-1)
    bad = np.flatnonzero((perm < 0) | (perm >= num_npus))
    if bad.size:
        raise TopologyError(f"relabelling: NPU id {int(perm[bad[0]])} is out of range 0..{num_npus - 1}")
    uniq, counts = np.unique(perm, return_counts=True)
    if np.any(counts > 1):
        raise TopologyError(f"relabelling: NPU id {int(uniq[counts > 1][0])} appears more than once "
                            f"(a permutation of 0..{num_npus - 1} is needed)")
    return perm


def relabel(topology: Topology, permutation: Sequence[int], name: str | None = None) -> Topology:
    """The isomorphic topology in which NPU ``i`` is renamed ``permutation[i]``.

    Parameters
    ----------
    topology : Topology
    permutation : sequence of int
        A permutation of ``0 .. N-1``; ``permutation[i]`` is the new id of NPU ``i``.
    name : str, optional
        Name of the copy (default: ``"<name>-relabelled"``).

    Returns
    -------
    Topology
        Link ``u->v`` of ``topology`` is link ``permutation[u]->permutation[v]``, same bandwidth and latency.
        ``meta``: ``kind="relabelled"``, ``parent``, ``parent_kind``, ``permutation``, ``original_ids``
        (see the module docstring), ``layout`` (the grid dims / server torus as built, in original ids);
        ``node_labels`` follow their NPUs.

    Raises
    ------
    TopologyError
        If ``permutation`` is not a permutation of the NPU ids.

    Examples
    --------
    >>> from tacos_bench.topology.named import named_topology
    >>> t = named_topology("hetero_mesh2x2")        # x links 50 GiB/s, y links 100 GiB/s
    >>> r = relabel(t, [3, 2, 1, 0])                # a rotation by 180 degrees
    >>> float(t.bw_GiBps[t.link_id(0, 1)]), float(r.bw_GiBps[r.link_id(3, 2)])
    (50.0, 50.0)
    >>> r.name, r.meta["parent_kind"], "dims" in r.meta
    ('hetero_mesh2x2-relabelled', 'mesh2d', False)
    >>> relabel(r, [3, 2, 1, 0]).meta["original_ids"]      # composed: back to the ids as built
    [0, 1, 2, 3]
    """
    n = topology.num_npus
    perm = as_permutation(permutation, n)
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    meta = topology.meta if isinstance(topology.meta, dict) else {}
    parent_orig = meta.get("original_ids")
    if parent_orig is not None and len(parent_orig) == n:
        original = np.asarray(parent_orig, dtype=np.int64)[inv]
    else:
        original = inv
    new_meta = {"kind": "relabelled", "parent": meta.get("parent", topology.name),
                "parent_kind": meta.get("parent_kind", meta.get("kind")),
                "permutation": perm.tolist(), "original_ids": original.tolist()}
    new_meta.update({k: meta[k] for k in _KEPT_META if k in meta})
    # the layout as built (grid dims, server torus) in the ids of ``original_ids``, so label-free users (the cut
    # candidates of tacos_bench.bounds) can map it onto the copy
    layout = meta.get("layout") if parent_orig is not None else {k: meta[k] for k in _LAYOUT_META if k in meta}
    if layout:
        new_meta["layout"] = dict(layout)
    labels = meta.get("node_labels")
    if labels is not None and len(labels) == n:
        new_meta["node_labels"] = [labels[i] for i in inv.tolist()]
    # switches of a fabric keep their ids: only the NPUs are renamed
    full = np.concatenate([perm, np.arange(n, topology.num_nodes, dtype=np.int64)])
    src = full[topology.src.astype(np.int64)]
    dst = full[topology.dst.astype(np.int64)]
    return Topology(n, src, dst, topology.bw_GiBps, topology.lat_us,
                    name=name or f"{topology.name}-relabelled", meta=new_meta, switches=topology.switches)


def random_permutation(num_npus: int, seed: int) -> np.ndarray:
    """A permutation of ``0 .. num_npus-1`` drawn from ``seed`` (``numpy.random.default_rng``).

    Examples
    --------
    >>> bool(np.array_equal(random_permutation(8, 3), random_permutation(8, 3)))
    True
    >>> sorted(random_permutation(8, 3).tolist()) == list(range(8))
    True
    """
    return np.random.default_rng(int(seed)).permutation(int(num_npus)).astype(np.int64)


def random_relabelling(topology: Topology, seed: int) -> Topology:
    """:func:`relabel` by :func:`random_permutation` ``(N, seed)``; named ``"<name>-r<seed>"``.

    The permutation is in ``meta["permutation"]`` (pass it to :func:`relabel_problem` and friends).

    Examples
    --------
    >>> from tacos_bench.topology.named import named_topology
    >>> t = named_topology("torus4x4")
    >>> r = random_relabelling(t, 7)
    >>> r.name, r.num_links == t.num_links
    ('torus4x4-r7', True)
    >>> r.meta["permutation"] == random_permutation(16, 7).tolist()
    True
    """
    perm = random_permutation(topology.num_npus, seed)
    return relabel(topology, perm, name=f"{topology.name}-r{int(seed)}")


def chunk_permutation(collective: "Collective", num_npus: int, permutation: Sequence[int]) -> np.ndarray:
    """New id of every chunk of ``collective`` on ``num_npus`` NPUs when NPU ``i`` becomes ``permutation[i]``.

    Chunks follow the NPU that owns them (see the module docstring); the result is a permutation of the
    chunk ids with ``sources`` and ``destinations`` of the relabelled collective equal to the mapped ones.

    Examples
    --------
    >>> from tacos_bench.collective import Collective
    >>> chunk_permutation(Collective("all_gather", 2, 8), 3, [1, 2, 0]).tolist()   # c = k*3 + owner
    [1, 2, 0, 4, 5, 3]
    >>> chunk_permutation(Collective("broadcast", 3, 8, root=0), 3, [1, 2, 0]).tolist()
    [0, 1, 2]
    >>> chunk_permutation(Collective("all_to_all", 1, 8), 2, [1, 0]).tolist()     # (s*2 + d): 0->0 is 1->1
    [3, 2, 1, 0]
    """
    from ..collective import ALL_TO_ALL, BROADCAST, REDUCE

    n = int(num_npus)
    perm = as_permutation(permutation, n)
    c = np.arange(collective.num_chunks(n), dtype=np.int64)
    if collective.kind in (BROADCAST, REDUCE):
        return c
    if collective.kind == ALL_TO_ALL:
        k = collective.chunks_per_npu
        pair, j = c // k, c % k
        s, d = pair // n, pair % n
        return (perm[s] * n + perm[d]) * k + j
    return (c // n) * n + perm[c % n]


def relabel_collective(collective: "Collective", permutation: Sequence[int]) -> "Collective":
    """The collective on the relabelled NPUs: a rooted one's root is ``permutation[root]``, others unchanged.

    Examples
    --------
    >>> from tacos_bench.collective import Collective
    >>> relabel_collective(Collective("gather", 1, 8, root=1), [2, 0, 1]).root
    0
    """
    if not collective.rooted:
        return collective
    perm = np.asarray(permutation, dtype=np.int64)
    if not 0 <= collective.root < perm.size:
        raise TopologyError(f"relabelling: root {collective.root} is not among its {perm.size} NPUs")
    return replace(collective, root=int(perm[collective.root]))


def relabel_problem(problem: "Problem", permutation: Sequence[int], name: str | None = None) -> "Problem":
    """The same problem on :func:`relabel` ``(problem.topology, permutation)``: the root follows its NPU.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.named import named_topology
    >>> p = Problem(named_topology("torus4x4"), Collective("broadcast", 8, 64, root=0))
    >>> q = relabel_problem(p, random_permutation(16, 1))
    >>> q.collective.root == q.topology.meta["permutation"][0], q.num_chunks == p.num_chunks
    (True, True)
    """
    from ..problem import Problem

    perm = as_permutation(permutation, problem.num_npus)
    return Problem(relabel(problem.topology, perm, name=name), relabel_collective(problem.collective, perm))


def relabel_schedule(schedule, problem: "Problem", permutation: Sequence[int]) -> "Schedule":
    """A schedule of ``problem`` rewritten for :func:`relabel_problem` ``(problem, permutation)``.

    Chunk ids follow :func:`chunk_permutation`, senders and receivers the NPU permutation; times and
    operations are kept, so the copy is valid exactly when the original is, with the same makespan.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.topology.generators import ring
    >>> from tacos_bench.verify import verify
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
    >>> r = relabel_schedule(s, p, [1, 0])
    >>> r.chunk.tolist(), r.src.tolist()
    ([1, 0], [1, 0])
    >>> verify(relabel_problem(p, [1, 0]), r).collective_time_us == t
    True
    """
    from ..schedule import Schedule

    perm = as_permutation(permutation, problem.num_npus)
    cmap = chunk_permutation(problem.collective, problem.num_npus, perm)
    s = schedule.to_schedule()
    return Schedule(cmap[s.chunk], perm[s.src], perm[s.dst], s.start_us, s.end_us, s.op)
