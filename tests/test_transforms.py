"""remove_npus, subset and reverse."""

from __future__ import annotations

import numpy as np
import pytest

from tacos_bench import generators as gen
from tacos_bench.errors import TopologyError
from tacos_bench.topology import Topology
from tacos_bench.topology.transforms import remove_npus, reverse, subset


def links(t: Topology) -> dict[tuple[int, int], tuple[float, float]]:
    return {(s, d): (b, l) for s, d, b, l in t.edges()}


def random_topology(rng: np.random.Generator, n: int, p: float) -> Topology:
    mask = rng.random((n, n)) < p
    np.fill_diagonal(mask, False)
    s, d = np.nonzero(mask)
    return Topology(n, s, d, rng.uniform(1, 100, s.size), rng.uniform(0, 2, s.size), name="rand")


def check_induced(parent: Topology, child: Topology, kept: list[int]) -> None:
    """child must be exactly parent's links among `kept`, renumbered by position in sorted(kept)."""
    kept = sorted(kept)
    assert child.num_npus == len(kept)
    new = {old: i for i, old in enumerate(kept)}
    expect = {(new[s], new[d]): v for (s, d), v in links(parent).items() if s in new and d in new}
    assert links(child) == expect


def test_remove_npus_renumbers_densely():
    t = gen.mesh2d(4, 4, bw=[10.0, 20.0])
    r = remove_npus(t, [5, 10])
    kept = [i for i in range(16) if i not in (5, 10)]
    check_induced(t, r, kept)
    assert r.meta["original_ids"] == kept
    assert r.meta["removed_npus"] == [5, 10]
    assert "dims" not in r.meta and r.meta["parent_kind"] == "mesh2d"


def test_remove_npus_random_graphs():
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(3, 30))
        t = random_topology(rng, n, 0.3)
        failed = rng.choice(n, size=int(rng.integers(0, n)), replace=False).tolist()
        r = remove_npus(t, failed)
        kept = [i for i in range(n) if i not in set(failed)]
        check_induced(t, r, kept)
        assert r.meta["original_ids"] == kept


def test_remove_npus_repeats_and_empty():
    t = gen.ring(5)
    assert remove_npus(t, [2, 2]).num_npus == 4
    r = remove_npus(t, [])
    assert r.num_npus == 5 and links(r) == links(t)


@pytest.mark.parametrize("bad,words", [([5], ["unknown NPU id 5", "0..4"]), ([-1], ["unknown NPU id -1"]),
                                       ([1.5], ["1.5", "not an integer"]), ([True], ["not an integer"]),
                                       ("3", ["list of NPU ids"]), (7, ["list of NPU ids"])])
def test_remove_npus_bad_ids(bad, words):
    with pytest.raises(TopologyError) as e:
        remove_npus(gen.ring(5), bad)
    for w in words:
        assert w in str(e.value)


def test_remove_all_npus_fails():
    with pytest.raises(TopologyError, match="no NPU"):
        remove_npus(gen.ring(3), [0, 1, 2])


def test_remove_npus_accepts_numpy_ids():
    r = remove_npus(gen.ring(5), np.array([1, 3]))
    assert r.meta["original_ids"] == [0, 2, 4]


def test_subset_induced():
    t = gen.mesh2d(8, 8)
    members = [y * 8 + x for y in range(8) for x in range(4)]
    s = subset(t, members[::-1])  # listing order does not matter
    check_induced(t, s, members)
    assert s.meta["original_ids"] == members
    expect = gen.mesh2d(4, 8)
    assert np.array_equal(s.src, expect.src) and np.array_equal(s.dst, expect.dst)


def test_subset_may_be_disconnected():
    s = subset(gen.ring(6), [0, 3])
    assert s.num_links == 0
    with pytest.raises(TopologyError, match="disconnected"):
        s.check_strongly_connected()


def test_original_ids_compose():
    t = gen.ring(10)
    a = remove_npus(t, [0, 5])          # original ids 1,2,3,4,6,7,8,9
    b = subset(a, [0, 1, 2, 3])         # a's 0..3 = original 1..4
    assert b.meta["original_ids"] == [1, 2, 3, 4]
    c = remove_npus(b, [1])
    assert c.meta["original_ids"] == [1, 3, 4]


def test_subset_keeps_node_labels():
    t = Topology.from_edges(3, [(0, 1, 1, 0), (1, 2, 1, 0), (2, 0, 1, 0)], node_labels=["a", "b", "c"])
    assert subset(t, [0, 2]).meta["node_labels"] == ["a", "c"]


def test_subset_relay_mode_rejected():
    with pytest.raises(TopologyError) as e:
        subset(gen.ring(6), [0, 3], mode="relay")
    msg = str(e.value)
    assert "relay" in msg and "participants" in msg and "induced" in msg


@pytest.mark.parametrize("members,mode,words", [
    ([0, 1], "bogus", ["unknown subset_mode", "induced"]),
    ([], "induced", ["empty"]),
    ([0, 1, 1], "induced", ["NPU(s) 1", "more than once"]),
    ([0, 6], "induced", ["unknown NPU id 6"]),
])
def test_subset_errors(members, mode, words):
    with pytest.raises(TopologyError) as e:
        subset(gen.ring(6), members, mode=mode)
    for w in words:
        assert w in str(e.value)


def test_reverse():
    t = gen.hetero_cluster(2, 2, 2, inter_bw=[10.0, 20.0])
    r = reverse(t)
    assert links(r) == {(d, s): v for (s, d), v in links(t).items()}
    rr = reverse(r)
    assert links(rr) == links(t)
    u = gen.ring(4, bidirectional=False)
    assert reverse(u).has_link(1, 0) and not reverse(u).has_link(0, 1)
