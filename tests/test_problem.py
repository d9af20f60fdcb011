"""Collectives (sizes, aliases, pre/postconditions), the one cost model, and the problem object."""

import pytest

from tacos_bench import Collective, Problem
from tacos_bench.collective import canonical_kind
from tacos_bench.cost import link_time_us
from tacos_bench.errors import CollectiveError
from tacos_bench.topology.generators import mesh2d


def test_collective_sizes_and_aliases():
    c = Collective("AllReduce", chunks_per_npu=3, buffer_mib=1)
    assert c.kind == "all_reduce" and c.num_chunks(4) == 12 and c.chunk_bytes(4) == 2**20 // 12
    assert canonical_kind("rs") == "reduce_scatter"
    with pytest.raises(CollectiveError, match="unknown collective 'broadcastx'"):
        Collective("broadcastx")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(CollectiveError, match="chunks_per_npu"):
            Collective(chunks_per_npu=bad)
    for bad in (0, -2, float("nan"), "big"):
        with pytest.raises(CollectiveError, match="buffer_mib"):
            Collective(buffer_mib=bad)


def test_pre_and_postconditions():
    c = Collective("reduce_scatter")
    assert c.initial_state(2, 5, 4) == 0b0100
    assert c.required_state(1, 5, 4) == 0b1111 and c.required_state(2, 5, 4) is None
    ag = Collective("all_gather")
    assert ag.initial_state(1, 5, 4) == 0b1111 and ag.initial_state(2, 5, 4) == 0


def test_cost_model_matches_reference():
    # ../shared/reference: mesh2d 8x8, 1 GiB, cpn 1 -> 313.0 µs per link; 1 MiB (16 KiB chunks) -> 0.8052 µs
    assert float(link_time_us(50, 0.5, 2**30 // 64)) == pytest.approx(313.0)
    p = Problem(mesh2d(8, 8), Collective("all_gather", 1, 1))
    assert p.chunk_bytes == 16384 and float(p.link_time_us[0]) == pytest.approx(0.8052, abs=1e-4)


def test_problem_rejects_zero_byte_chunks():
    with pytest.raises(CollectiveError, match="too small"):
        Problem(mesh2d(4, 4), Collective("all_gather", 1, 1e-6))
