"""Label independence (issue 22, item 2): the same problem on relabelled copies of a topology.

A relabelling (:mod:`tacos_bench.topology.relabel`) renames the NPUs; the problem is the same, so its lower
bounds are identical and a schedule of one maps onto a valid schedule of the other with the same makespan.
A heuristic that breaks ties by id may still do better or worse on a copy: its *spread* (max - min of its
ratio to the bound over the copies) is what issue 22 wants near zero. Here the spread is measured and
reported (``pytest -rP tests/test_label_independence.py`` prints it) and held to the issue's targets on
small copies (see ``TARGET`` below). The full measurement is ``experiments/bench_relabel.py``
(docs/relabel.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from solvers import get_solver
from tacos_bench import Collective, Problem, Topology
from tacos_bench.bounds import lower_bounds, npu_orbits
from tacos_bench.collective import KINDS
from tacos_bench.errors import TopologyError
from tacos_bench.topology import named_topology
from tacos_bench.topology.relabel import (chunk_permutation, random_permutation, random_relabelling, relabel,
                                          relabel_collective, relabel_problem, relabel_schedule)
from tacos_bench.verify import verify

MIB = 64.0
REL = 1e-9
COPY = ("all_gather", "broadcast", "all_to_all", "gather", "scatter")


def _links(t: Topology) -> dict:
    return {(u, v): (b, l) for u, v, b, l in t.edges()}


def _spread(ratios) -> dict:
    r = np.asarray(ratios, dtype=np.float64)
    return {"min": float(r.min()), "median": float(np.median(r)), "max": float(r.max()),
            "spread": float(r.max() - r.min())}


# ---------------------------------------------------------------------------- the transform
@pytest.mark.parametrize("name", ["torus4x4", "hetero_mesh4x4", "random16d3s2", "hetero2x1x4"])
def test_relabel_is_an_isomorphism(name):
    t = named_topology(name)
    for seed in range(3):
        r = random_relabelling(t, seed)
        perm = np.asarray(r.meta["permutation"])
        assert sorted(perm.tolist()) == list(range(t.num_npus))
        assert _links(r) == {(int(perm[u]), int(perm[v])): x for (u, v), x in _links(t).items()}
        # original_ids maps back, and relabelling by the inverse restores the topology exactly
        assert [int(perm[o]) for o in r.meta["original_ids"]] == list(range(t.num_npus))
        back = relabel(r, r.meta["original_ids"])
        assert _links(back) == _links(t) and back.meta["original_ids"] == list(range(t.num_npus))


def test_relabel_drops_id_layout_metadata_and_keeps_labels():
    t = named_topology("torus4x4")
    r = relabel(t, np.arange(16)[::-1])
    assert "dims" not in r.meta and r.meta["parent"] == "torus4x4" and r.meta["parent_kind"] == t.meta["kind"]
    lab = Topology.from_edges(3, [(0, 1, 1, 0), (1, 2, 1, 0), (2, 0, 1, 0)], node_labels=["a", "b", "c"])
    assert relabel(lab, [1, 2, 0]).meta["node_labels"] == ["c", "a", "b"]


@pytest.mark.parametrize("perm", [[0, 1], [0, 1, 1, 2], [0, 1, 2, 4], [0, 1, 2, 2.0], "0123"])
def test_relabel_rejects_what_is_not_a_permutation(perm):
    with pytest.raises(TopologyError):
        relabel(named_topology("ring4"), perm)


@pytest.mark.parametrize("kind", KINDS)
def test_chunks_follow_their_npu(kind):
    # the chunk map of the collective must carry every chunk's source and destination onto the relabelled ones
    n = 5
    perm = random_permutation(n, 3)
    c = Collective(kind, 2, MIB, root=1)
    rc = relabel_collective(c, perm)
    cmap = chunk_permutation(c, n, perm)
    assert sorted(cmap.tolist()) == list(range(c.num_chunks(n)))
    for old, new in ((c.sources(n), rc.sources(n)), (c.destinations(n), rc.destinations(n))):
        mapped = np.where(old >= 0, perm[np.maximum(old, 0)], -1)
        assert np.array_equal(new[cmap], mapped)


@pytest.mark.parametrize("kind", KINDS)
def test_a_schedule_maps_onto_the_relabelled_problem(kind):
    # the relabelled problem is the same problem: the mapped schedule verifies, with the same makespan
    p = Problem(named_topology("random12d3s1"), Collective(kind, 2, MIB, root=5))
    res = get_solver("greedy").solve(p)
    t0 = verify(p, res.schedule).collective_time_us
    for seed in range(2):
        perm = random_permutation(p.num_npus, seed)
        q = relabel_problem(p, perm)
        assert verify(q, relabel_schedule(res.schedule, p, perm)).collective_time_us == pytest.approx(t0, rel=REL)


# ---------------------------------------------------------------------------- bounds are invariant
# The cut bound's candidate sets (bounds._candidate_cuts) come from the layout as built (meta["dims"], the
# server torus of a hetero cluster) and from spectral bisections. A relabelled copy carries its layout in the
# ids as built (meta["layout"] with meta["original_ids"]), so the layout cuts are the same sets on every copy
# (before: torus8x8 All-to-All cut_us 1282 vs 781-1042 µs on copies, hetero64 All-to-All best_us 1314 vs
# 985.5, torus4x4 All-to-All 629 vs 471.75). The spectral sets sweep the Fiedler vector from both ends with
# ties kept together, or, where its eigenspace is degenerate (a symmetric topology, whose LAPACK basis depends
# on the row order), every NPU's projection onto it (before: torus4x4 Gather/Scatter cut_us 79.125 µs as built,
# 118.6875 on most copies).
BOUND_CASES = [*[(t, k) for t in ("torus4x4", "hetero_mesh4x4", "random16d3s2", "hetero2x1x4") for k in KINDS],
               ("torus8x8", "all_to_all"), ("torus8x8", "gather"), ("torus4x4x4", "scatter"),
               ("bhypercube16", "all_to_all"), ("random32d3s0", "all_to_all"), ("hetero64", "all_gather"),
               ("hetero64", "broadcast"), ("hetero64", "all_to_all")]
BOUND_SEEDS = (0, 2, 3, 4)


def _bounds(name, kind):
    p = Problem(named_topology(name), Collective(kind, 2 if kind != "all_to_all" else 1, MIB, root=3))
    return lower_bounds(p), [lower_bounds(relabel_problem(p, random_permutation(p.num_npus, s))) for s in BOUND_SEEDS]


@pytest.mark.parametrize("name,kind", BOUND_CASES)
def test_best_lower_bound_is_label_invariant(name, kind):
    want, copies = _bounds(name, kind)
    for seed, got in zip(BOUND_SEEDS, copies):
        assert got["best_us"] == pytest.approx(want["best_us"], rel=REL), seed


@pytest.mark.parametrize("name,kind", BOUND_CASES)
def test_every_lower_bound_is_label_invariant(name, kind):
    want, copies = _bounds(name, kind)
    keys = [k for k in want if k.endswith("_us")]
    for seed, got in zip(BOUND_SEEDS, copies):
        for key in keys:
            if want[key] is None:
                assert got.get(key) is None, (key, seed)
            else:
                assert got.get(key) == pytest.approx(want[key], rel=REL), (key, seed)


# ---------------------------------------------------------------------------- greedy_plus over labellings
# TARGET (issue 22): greedy_plus at 1.000x the pipeline bound for every root of torus4x4 and torus8x8
# Broadcast/Reduce (8 chunks, 64 MiB), and a spread (max - min of time / bound) <= 0.02 over 20 random
# relabellings of torus8x8, hetero64 and a random asymmetric graph for All-Gather, Broadcast and All-to-All
# (experiments/bench_relabel.py, docs/relabel.md). Asserted here on small copies: torus4x4's roots, and the
# spread over 4 relabellings, except where it is measured above the target (not one of the graphs):
SPREAD_TARGET = 0.02
OVER_TARGET = {("random16d3s2", "all_to_all"): "0.081: 1.019-1.100x over the identity and 4 relabellings"}

def _ratios(problems, solver="greedy_plus"):
    s = get_solver(solver)
    out = []
    bound0 = None
    for p in problems:
        res = s.solve(p)
        t = verify(p, res.schedule).collective_time_us          # raises on an invalid schedule
        b = lower_bounds(p)["best_us"]
        bound0 = b if bound0 is None else bound0
        assert b == pytest.approx(bound0, rel=REL), "the same problem got another bound"
        assert t >= b * (1 - REL), f"{p.describe()}: {t} µs beats the lower bound {b} µs"
        out.append(t / b)
    return out


def test_torus4x4_broadcast_every_root(record_property):
    t = named_topology("torus4x4")
    assert len(set(npu_orbits(t, np.ones(t.num_links)).tolist())) == 1   # vertex-transitive: one problem
    ratios = _ratios([Problem(t, Collective("broadcast", 8, MIB, root=r)) for r in range(t.num_npus)])
    s = _spread(ratios)
    assert len(ratios) == 16 and s["spread"] == pytest.approx(max(ratios) - min(ratios)) and s["spread"] >= 0
    assert max(ratios) <= 1 + REL, "a torus4x4 root above the pipeline bound"
    record_property("torus4x4_broadcast_roots", s)
    print(f"torus4x4 broadcast, roots 0..15: greedy_plus / bound {s}; per root {np.round(ratios, 4).tolist()}")


@pytest.mark.parametrize("name", ["torus4x4", "hetero2x1x4", "random16d3s2"])
@pytest.mark.parametrize("kind,cpn", [("all_gather", 1), ("broadcast", 8), ("all_to_all", 1)])
def test_random_relabellings(name, kind, cpn, record_property):
    p = Problem(named_topology(name), Collective(kind, cpn, MIB))
    copies = [p] + [relabel_problem(p, random_permutation(p.num_npus, seed)) for seed in range(4)]
    ratios = _ratios(copies)
    s = _spread(ratios)
    assert s["min"] <= ratios[0] <= s["max"] and np.isfinite(s["spread"])
    if (name, kind) not in OVER_TARGET:
        assert s["spread"] <= SPREAD_TARGET, s
    record_property(f"{name}_{kind}_relabel", s)
    print(f"{name} {kind}: greedy_plus / bound over identity + 4 relabellings {s}")
