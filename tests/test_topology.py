"""The topology object: sorted links, CSR views, validation, connectivity, networkx, reversal."""

import numpy as np
import pytest

from tacos_bench import Collective, Problem, Topology
from tacos_bench.errors import TopologyError
from tacos_bench.topology.generators import ring, torus2d


def test_topology_sorted_and_csr():
    t = Topology.from_edges(3, [(2, 0, 10, 1), (0, 1, 50, 0.5), (1, 2, 25, 0)])
    assert t.src.tolist() == [0, 1, 2] and t.dst.tolist() == [1, 2, 0]
    assert t.out_ptr.tolist() == [0, 1, 2, 3]
    assert t.in_neighbors(0).tolist() == [2]
    assert t.link_ids([0, 1, 0], [1, 2, 2]).tolist() == [0, 1, -1]
    assert not t.is_homogeneous and not t.is_symmetric
    with pytest.raises(TopologyError, match="no link 0->2"):
        t.link_id(0, 2)


@pytest.mark.parametrize("edges,msg", [
    ([(0, 5, 1, 1)], "out of range"),
    ([(1, 1, 1, 1)], "self-loop"),
    ([(0, 1, 0, 1)], "bandwidth must be > 0"),
    ([(0, 1, 1, -1)], "latency must be >= 0"),
    ([(0, 1, 1, 1), (0, 1, 2, 2)], "duplicate link 0->1"),
])
def test_topology_rejects_bad_links(edges, msg):
    with pytest.raises(TopologyError, match=msg):
        Topology.from_edges(3, edges)


def test_disconnected_topology_names_cut_off_npus():
    t = Topology.from_edges(4, [(0, 1, 1, 1), (1, 0, 1, 1), (2, 3, 1, 1), (3, 2, 1, 1)], name="split")
    with pytest.raises(TopologyError, match=r"NPU\(s\) 2, 3 cannot be reached from NPU 0"):
        Problem(t, Collective())
    one_way = Topology.from_edges(2, [(0, 1, 1, 1)])
    with pytest.raises(TopologyError, match=r"NPU\(s\) 1 cannot reach NPU 0"):
        Problem(one_way, Collective())


def test_networkx_round_trip():
    t = torus2d(3, 4, bw=[50, 100], lat=[0.5, 1.0])
    back = Topology.from_networkx(t.to_networkx())
    for a in ("src", "dst", "bw_GiBps", "lat_us"):
        assert np.array_equal(getattr(t, a), getattr(back, a))


def test_reversed_swaps_directions():
    t = ring(4, bidirectional=False)
    r = t.reversed()
    assert sorted(zip(r.src.tolist(), r.dst.tolist())) == sorted(zip(t.dst.tolist(), t.src.tolist()))
