"""The switched-fabric verifier (docs/fabrics.md, rules 1-6): hand-built fabrics, hand-written schedules, one
accepted and one rejected schedule per rule."""

import numpy as np
import pytest

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.cost import link_time_us
from tacos_bench.errors import VerificationError
from tacos_bench.faults import Fault
from tacos_bench.topology import Switch, Topology
from tacos_bench.topology.generators import ring
from tacos_bench.verify import check, replay, verify
from tacos_bench.verify.fabric import verify_fabric

BW, LAT = 50.0, 0.5


def star(n=4, mode="cut_through", multicast=False, reduce=False):
    """NPUs 0..n-1, each linked both ways to switch n."""
    edges = [(i, n, BW, LAT) for i in range(n)] + [(n, i, BW, LAT) for i in range(n)]
    return Topology.from_edges(n, edges, switches=[Switch(mode, multicast=multicast, reduce=reduce)])


def leaf_spine(multicast=False, reduce=False, up_bw=25.0):
    """NPUs 0, 1 on leaf 4; NPUs 2, 3 on leaf 5; spine 6 (cut-through); the uplinks at ``up_bw``."""
    down = [(0, 4), (1, 4), (2, 5), (3, 5)]
    edges = [(u, v, BW, LAT) for u, v in down] + [(v, u, BW, LAT) for u, v in down]
    edges += [(4, 6, up_bw, LAT), (6, 4, up_bw, LAT), (5, 6, up_bw, LAT), (6, 5, up_bw, LAT)]
    sw = Switch("cut_through", multicast=multicast, reduce=reduce)
    return Topology.from_edges(4, edges, switches=[sw, sw, Switch("cut_through", multicast, reduce)])


def t_route(p, hops, bw=BW):
    """The exact time of a route of ``hops`` links at ``LAT`` each, slowest link ``bw``."""
    return float(link_time_us(bw, hops * LAT, p.chunk_bytes))


def ok(p, rows):
    v = verify(p, Schedule.from_rows(rows))
    assert v.valid and v.message == ""
    return v


def reject(p, rows, pattern):
    with pytest.raises(VerificationError, match=pattern):
        verify(p, Schedule.from_rows(rows))


# ----------------------------------------------------------------------------------------- schedules
def ag_unicast(p, n=4, sw=4):
    """All-Gather through one cut-through switch: in round r NPU j sends its chunk to NPU j+r."""
    t = t_route(p, 2)
    return [(j, j, (j + r) % n, (r - 1) * t, r * t, "copy", f"{j}>{sw}>{(j + r) % n}")
            for r in range(1, n) for j in range(n)]


def ag_multicast(p, n=4, sw=4):
    """All-Gather as one multicast group per NPU, one after the other (the downlinks are shared)."""
    t = t_route(p, 2)
    return [(j, j, k, j * t, (j + 1) * t, "copy", f"{j}>{sw}>{k}") for j in range(n) for k in range(n) if k != j]


def rs_reduction_groups(p, n=4, sw=4):
    """Reduce-Scatter as one reduction group per chunk, merging at the switch into the owner's downlink."""
    t = t_route(p, 2)
    return [(c, j, c, c * t, (c + 1) * t, "reduce", f"{j}>{sw}>{c}") for c in range(n) for j in range(n) if j != c]


def rs_unicast(p, n=4, sw=4):
    t = t_route(p, 2)
    return [((j + r) % n, j, (j + r) % n, (r - 1) * t, r * t, "reduce", f"{j}>{sw}>{(j + r) % n}")
            for r in range(1, n) for j in range(n)]


# ----------------------------------------------------------------------------------------- collectives
def test_all_gather_through_a_cut_through_switch():
    p = Problem(star(), Collective("all_gather", 1, 1))
    v = ok(p, ag_unicast(p))
    t = t_route(p, 2)
    assert v.collective_time_us == pytest.approx(3 * t)
    assert v.link_busy_us == pytest.approx(12 * 2 * t)   # 12 rows, two links each
    assert v.link_utilization == pytest.approx(1.0)


def test_all_gather_by_multicast_groups_needs_a_multicast_switch():
    p = Problem(star(multicast=True), Collective("all_gather", 1, 1))
    v = ok(p, ag_multicast(p))
    t = t_route(p, 2)
    # each group: the shared uplink once plus three downlinks
    assert v.link_busy_us == pytest.approx(4 * 4 * t)
    assert v.link_utilization == pytest.approx(16 / (8 * 4))
    plain = Problem(star(), Collective("all_gather", 1, 1))
    reject(plain, ag_multicast(plain), r"shares link 0->4 with row 0 .*one multicast group.*branch at "
                                       r"cut_through switch 4, which has no multicast")


def test_broadcast_multicast_and_store_forward():
    p = Problem(star(multicast=True), Collective("broadcast", 2, 1, root=0))
    t = t_route(p, 2)
    rows = [(c, 0, k, c * t, (c + 1) * t, "copy", f"0>4>{k}") for c in range(2) for k in (1, 2, 3)]
    assert ok(p, rows).collective_time_us == pytest.approx(2 * t)
    # a broadcast may not start two multicast groups of different chunks at once on the root's uplink
    rows[3:] = [(1, 0, k, 0.0, t, "copy", f"0>4>{k}") for k in (1, 2, 3)]
    reject(p, rows, r"overlaps row \d .* on link 0->4")


def test_reduce_scatter_by_reduction_groups_needs_a_reducing_switch():
    p = Problem(star(reduce=True), Collective("reduce_scatter", 1, 1))
    v = ok(p, rs_reduction_groups(p))
    assert v.collective_time_us == pytest.approx(4 * t_route(p, 2))
    plain = Problem(star(), Collective("reduce_scatter", 1, 1))
    reject(plain, rs_reduction_groups(plain), r"shares link 4->0 with row 0 .*one reduction group.*merge at "
                                              r"cut_through switch 4, which does not reduce")


def test_reduce_scatter_unicast_and_double_count():
    p = Problem(star(), Collective("reduce_scatter", 1, 1))
    ok(p, rs_unicast(p))
    t = t_route(p, 2)
    reject(p, rs_unicast(p) + [(1, 0, 1, 3 * t, 4 * t, "reduce", "0>4>1")],
           r"row 12 .*counts the contribution of NPU\(s\) 0 twice at NPU 1")
    # a reduction group whose members carry the same contribution double counts too
    pr = Problem(star(reduce=True), Collective("reduce_scatter", 1, 1))
    rows = rs_reduction_groups(pr) + [(0, 1, 2, 4 * t, 5 * t, "copy", "1>4>2"),
                                      (0, 1, 0, 5 * t, 6 * t, "reduce", "1>4>0"),
                                      (0, 2, 0, 5 * t, 6 * t, "reduce", "2>4>0")]
    reject(pr, rows, "twice at NPU 0")


def test_all_to_all_through_a_switch():
    p = Problem(star(), Collective("all_to_all", 1, 1))
    t = t_route(p, 2)
    rows = [(s * 4 + (s + r) % 4, s, (s + r) % 4, (r - 1) * t, r * t, "copy", f"{s}>4>{(s + r) % 4}")
            for r in range(1, 4) for s in range(4)]
    assert ok(p, rows).collective_time_us == pytest.approx(3 * t)
    reject(p, rows[:-1], r"postcondition unmet: NPU 2 never receives chunk 14 \(1 \(NPU, chunk\) pairs missing\)")


def test_all_reduce_on_a_relay_like_store_forward_switch():
    # a store_forward switch with multicast and reduce holds and forwards anything: reduce in, copy out
    p = Problem(star(mode="store_forward", multicast=True, reduce=True), Collective("all_reduce", 1, 1))
    t = t_route(p, 1)
    rows = [(c, j, 4, c * t, (c + 1) * t, "reduce") for c in range(4) for j in range(4)]
    rows += [(c, 4, k, (c + 1) * t, (c + 2) * t, "copy") for c in range(4) for k in range(4)]
    assert ok(p, rows).collective_time_us == pytest.approx(5 * t)


# ----------------------------------------------------------------------------------------- rule 1
def test_rule1_endpoints_and_routes():
    p = Problem(star(), Collective("all_gather", 1, 1))
    t = t_route(p, 2)
    rows = ag_unicast(p)
    bad = list(rows)
    bad[0] = (0, 0, 4, 0.0, t, "copy", "")
    reject(p, bad, r"row 0 .*dst 4 is a cut_through switch, which is never a row's endpoint")
    bad[0] = (0, 0, 1, 0.0, t, "copy", "")
    reject(p, bad, r"row 0 .*unknown link 0->1")
    bad[0] = (0, 0, 1, 0.0, t, "copy", "2>4>1")
    reject(p, bad, r"route '2>4>1' does not run from src 0 to dst 1")
    bad[0] = (0, 0, 1, 0.0, t, "copy", "0>x>1")
    reject(p, bad, r"route '0>x>1' is not node ids joined by '>'")
    bad[0] = (0, 0, 1, 0.0, t, "copy", "0>9>1")
    reject(p, bad, r"route '0>9>1' has node 9 out of range 0..4")
    bad[0] = (0, 0, 1, 0.0, t, "copy", "0>4>2>4>1")
    reject(p, bad, r"visits node 4 twice")
    bad[0] = (0, 0, 9, 0.0, t, "copy", "")
    reject(p, bad, r"dst id out of range 0..4")
    ok(p, rows)


def test_rule1_interior_nodes_and_links():
    p = Problem(leaf_spine(), Collective("all_gather", 1, 1))
    t = t_route(p, 4, bw=25.0)
    reject(p, [(0, 0, 2, 0.0, t, "copy", "0>4>5>2")], r"route '0>4>5>2' has no link 4->5")
    reject(p, [(0, 0, 2, 0.0, t, "copy", "0>4>6>2")], r"has no link 6->2")
    sf = Problem(star(mode="store_forward"), Collective("all_gather", 1, 1))
    reject(sf, [(0, 0, 1, 0.0, t, "copy", "0>4>1")],
           r"crosses store_forward switch 4, but only cut_through switches may be interior nodes")


def test_point_to_point_topology_with_routes():
    p = Problem(ring(3, bidirectional=False), Collective("all_gather", 1, 3))
    t = float(p.link_time_us[0])
    rows = [(0, 0, 1, 0, t, "copy", "0>1"), (1, 1, 2, 0, t, "copy", ""), (2, 2, 0, 0, t, "copy", "2>0"),
            (2, 0, 1, t, 2 * t, "copy", ""), (0, 1, 2, t, 2 * t, "copy", "1>2"), (1, 2, 0, t, 2 * t, "copy", "")]
    v = ok(p, rows)
    assert v.collective_time_us == pytest.approx(2 * t) and v.link_utilization == pytest.approx(1.0)
    rows[0] = (0, 0, 2, 0, 2 * t, "copy", "0>1>2")
    reject(p, rows, r"route '0>1>2' crosses NPU 1, but only cut_through switches may be interior nodes")


# ----------------------------------------------------------------------------------------- rule 2
def test_rule2_duration_of_a_route_is_latencies_plus_slowest_link():
    p = Problem(leaf_spine(), Collective("all_gather", 1, 1))
    t = t_route(p, 4, bw=25.0)
    assert t == pytest.approx(4 * LAT + p.chunk_bytes / (25.0 * 2**30 / 1e6))
    row = (0, 0, 2, 0.0, t, "copy", "0>4>6>5>2")
    reject(p, [row], "postcondition unmet")   # the duration is accepted, the rest is missing
    reject(p, [(0, 0, 2, 0.0, t * (1 - 1e-6), "copy", "0>4>6>5>2")],
           r"row 0 .*lasts .* shorter than its route's time \(latencies 2.000000 µs \+ the chunk at the slowest "
           r"link's 25 GiB/s\)")
    # one link: exactly the link time of the point-to-point model
    sf = Problem(star(mode="store_forward", multicast=True), Collective("broadcast", 1, 1))
    t1 = float(sf.link_time_us[0])
    assert t1 == t_route(sf, 1)
    rows = [(0, 0, 4, 0.0, t1, "copy")] + [(0, 4, k, t1, 2 * t1, "copy") for k in (1, 2, 3)]
    assert ok(sf, rows).link_busy_us == pytest.approx(4 * t1)
    rows[0] = (0, 0, 4, 0.0, 0.5 * t1, "copy")
    reject(sf, rows, r"row 0 .*shorter than the link time")


# ----------------------------------------------------------------------------------------- rule 3
def leaf_spine_all_gather(p, t):
    """Each NPU multicasts its chunk: through its leaf to its neighbour, over the spine to the other leaf."""
    rows = []
    for j in range(4):
        leaf, other = (4, 5) if j < 2 else (5, 4)
        mate = j ^ 1
        far = (2, 3) if j < 2 else (0, 1)
        rows.append((j, j, mate, j * t, (j + 1) * t, "copy", f"{j}>{leaf}>{mate}"))
        rows += [(j, j, k, j * t, (j + 1) * t, "copy", f"{j}>{leaf}>6>{other}>{k}") for k in far]
    return rows


def test_rule3_leaf_spine_multicast_tree():
    p = Problem(leaf_spine(multicast=True), Collective("all_gather", 1, 1))
    t = t_route(p, 4, bw=25.0)
    v = ok(p, leaf_spine_all_gather(p, t))
    assert v.collective_time_us == pytest.approx(4 * t)
    # per group, each link once at the longest route time of the rows on it: NPU->leaf, leaf->spine,
    # spine->leaf, leaf->2 NPUs at t; leaf->mate at the two-hop time (the busy time is the work, as without
    # switches, not the interval the row reserves)
    assert v.link_busy_us == pytest.approx(4 * (5 * t + t_route(p, 2)))
    plain = Problem(leaf_spine(), Collective("all_gather", 1, 1))
    reject(plain, leaf_spine_all_gather(plain, t), r"branch at cut_through switch 4, which has no multicast")


def test_rule3_shared_oversubscribed_uplink():
    # two unicast transfers from leaf 4 to leaf 5 cannot share the uplink 4->6; one after the other they can
    p = Problem(leaf_spine(), Collective("gather", 1, 1, root=2))
    t = t_route(p, 4, bw=25.0)
    t2 = t_route(p, 2)
    rows = [(0, 0, 2, 0.0, t, "copy", "0>4>6>5>2"), (1, 1, 2, t, 2 * t, "copy", "1>4>6>5>2"),
            (3, 3, 2, 0.0, t2, "copy", "3>5>2")]
    reject(p, rows, r"overlaps row \d .* on link 5->2")
    rows[2] = (3, 3, 2, 2 * t, 2 * t + t2, "copy", "3>5>2")
    assert ok(p, rows).collective_time_us == pytest.approx(2 * t + t2)
    rows[1] = (1, 1, 2, 0.5 * t, 1.5 * t, "copy", "1>4>6>5>2")
    reject(p, rows, r"row 1 .*overlaps row 0 .* on link 4->6")


def test_rule3_group_routes_must_form_a_tree():
    # two routes of one multicast group sharing a link with different routes up to it are two packets on it
    edges = [(0, 3, BW, LAT), (0, 4, BW, LAT), (3, 4, BW, LAT), (4, 1, BW, LAT), (4, 2, BW, LAT),
             (1, 0, BW, LAT), (2, 0, BW, LAT)]
    sw = Switch("cut_through", multicast=True)
    p = Problem(Topology.from_edges(3, edges, switches=[sw, sw]), Collective("broadcast", 1, 1, root=0))
    t = t_route(p, 3)
    rows = [(0, 0, 1, 0.0, t, "copy", "0>3>4>1"), (0, 0, 2, 0.0, t, "copy", "0>4>1")]
    reject(p, rows, r"route '0>4>1' does not run from src 0 to dst 2")
    rows[1] = (0, 0, 1, 0.0, t, "copy", "0>4>1")
    reject(p, rows, r"overlaps .* on link 4->1 \(one multicast group, but their routes do not agree up to this "
                    r"link\)")
    rows = [(0, 0, 1, 0.0, t, "copy", "0>3>4>1"), (0, 0, 2, 0.0, t, "copy", "0>3>4>2")]
    assert ok(p, rows).link_busy_us == pytest.approx(4 * t)   # 0->3, 3->4 once; 4->1, 4->2
    reject(p, rows + [rows[0]], r"row 2 .* duplicates row 0 .*same chunk, times and route")


def test_rule3_group_members_need_identical_times():
    p = Problem(star(multicast=True), Collective("broadcast", 1, 1, root=0))
    t = t_route(p, 2)
    rows = [(0, 0, k, 0.0, t, "copy", f"0>4>{k}") for k in (1, 2, 3)]
    ok(p, rows)
    rows[2] = (0, 0, 3, 0.0, 1.5 * t, "copy", "0>4>3")
    reject(p, rows, r"overlaps .* on link 0->4")


# ----------------------------------------------------------------------------------------- rules 4, 5
def test_rule4_non_causal_forwarding_through_a_fabric():
    p = Problem(leaf_spine(), Collective("all_gather", 1, 1))
    t = t_route(p, 2)
    rows = [(0, 1, 2, 0.0, t_route(p, 4, 25.0), "copy", "1>4>6>5>2")]
    reject(p, rows, r"row 0 .*non-causal: NPU 1 does not hold chunk 0 at 0.000000 µs \(never receives it\)")
    rows = [(0, 0, 1, 0.0, t, "copy", "0>4>1"), (0, 1, 0, 0.5 * t, 1.5 * t, "copy", "1>4>0")]
    reject(p, rows, r"row 1 .*NPU 1 does not hold chunk 0 at .* \(receives it only at")


def sf_broadcast(p, ups):
    """Broadcast from NPU 0 over store_forward switch 4: ``ups`` copies up, then one copy down per NPU."""
    t = t_route(p, 1)
    rows = [(0, 0, 4, k * t, (k + 1) * t, "copy") for k in range(ups)]
    rows += [(0, 4, k, k * t, (k + 1) * t, "copy") for k in (1, 2, 3)]
    return rows


@pytest.mark.parametrize("path", ["copies", "general"])
def test_rule5_fifo_forwarding_through_a_store_forward_switch(path, monkeypatch):
    if path == "general":  # the event replay must reach the same verdicts as the vectorized one
        monkeypatch.setattr(replay, "_replay_copies", replay._replay_general)
    p = Problem(star(mode="store_forward"), Collective("broadcast", 1, 1, root=0))
    t = t_route(p, 1)
    # three copies go up, each leaves as soon as it arrived
    assert ok(p, sf_broadcast(p, 3)).collective_time_us == pytest.approx(4 * t)
    # one copy up, three down: the second leaves after only one arrived
    reject(p, sf_broadcast(p, 1), r"row 2 .*non-causal: store_forward switch 4 has no multicast.* 2nd outgoing")
    # a copy may not leave before the copy it forwards has arrived
    rows = sf_broadcast(p, 3)
    rows[3] = (0, 4, 1, 0.5 * t, 1.5 * t, "copy")
    reject(p, rows, r"row 3 .*non-causal: store_forward switch 4 has no multicast.*1st")
    # with multicast it acts as a node: one incoming copy may leave on every port at once
    mp = Problem(star(mode="store_forward", multicast=True), Collective("broadcast", 1, 1, root=0))
    rows = [(0, 0, 4, 0.0, t, "copy")] + [(0, 4, k, t, 2 * t, "copy") for k in (1, 2, 3)]
    assert ok(mp, rows).collective_time_us == pytest.approx(2 * t)
    reject(p, rows, r"row 2 .*store_forward switch 4 has no multicast")
    # ... but it holds nothing before a copy arrives
    rows[1] = (0, 4, 1, 0.5 * t, 1.5 * t, "copy")
    reject(mp, rows, r"row 1 .*non-causal: store_forward switch 4 (does not hold|holds no part of) chunk 0")


def test_rule5_one_packet_per_link_of_a_multicast_group_leaving_a_fifo_switch():
    # store_forward switch 3 (no multicast) -> cut_through multicast switch 4 -> NPUs 1, 2: one packet
    edges = [(0, 3, BW, LAT), (3, 4, BW, LAT), (4, 1, BW, LAT), (4, 2, BW, LAT), (1, 0, BW, LAT),
             (2, 0, BW, LAT)]
    topo = Topology.from_edges(3, edges, switches=[Switch("store_forward"), Switch("cut_through", multicast=True)])
    p = Problem(topo, Collective("broadcast", 1, 1, root=0))
    t1, t2 = t_route(p, 1), t_route(p, 2)
    rows = [(0, 0, 3, 0.0, t1, "copy"), (0, 3, 1, t1, t1 + t2, "copy", "3>4>1"), (0, 3, 2, t1, t1 + t2, "copy", "3>4>2")]
    assert ok(p, rows).collective_time_us == pytest.approx(t1 + t2)
    rows[2] = (0, 3, 2, t1 + t2, t1 + 2 * t2, "copy", "3>4>2")   # a second packet: needs a second copy
    reject(p, rows, r"row 2 .*store_forward switch 3 has no multicast.*2nd outgoing")


def sf_reduce_rows(p, outs):
    """Reduce to NPU 0 over store_forward switch 4: NPUs 1-3 send up at once, ``outs`` reduce rows go down."""
    t = t_route(p, 1)
    return ([(0, j, 4, 0.0, t, "reduce") for j in (1, 2, 3)]
            + [(0, 4, 0, k * t, (k + 1) * t, "reduce") for k in range(1, outs + 1)])


def test_rule5_reduce_packets_through_a_store_forward_switch():
    p = Problem(star(mode="store_forward"), Collective("reduce", 1, 1, root=0))
    # without reduce every packet is forwarded unchanged: three go down
    assert ok(p, sf_reduce_rows(p, 3)).collective_time_us == pytest.approx(4 * t_route(p, 1))
    reject(p, sf_reduce_rows(p, 2), r"postcondition unmet: NPU 0, chunk 0 lacks the contribution\(s\) of NPU\(s\) 3")
    reject(p, sf_reduce_rows(p, 4), r"row 6 .*store_forward switch 4 has no reduce.*4th outgoing one, but 3 arrived")
    # with reduce it sends its partial sum: one row carries all three
    rp = Problem(star(mode="store_forward", reduce=True), Collective("reduce", 1, 1, root=0))
    assert ok(rp, sf_reduce_rows(rp, 1)).collective_time_us == pytest.approx(2 * t_route(rp, 1))
    reject(p, sf_reduce_rows(p, 1), r"NPU 0, chunk 0 lacks the contribution\(s\) of NPU\(s\) 2, 3")
    # it combines and drains its buffer: a second packet carries nothing, so nothing is counted twice
    assert ok(rp, sf_reduce_rows(rp, 2)).valid


def test_rule5_reduction_group_into_a_fifo_switch_is_one_packet():
    # NPUs 1, 2 merge at cut_through reducing switch 3 into store_forward switch 4 (no reduce), then NPU 0
    edges = [(1, 3, BW, LAT), (2, 3, BW, LAT), (3, 4, BW, LAT), (4, 0, BW, LAT), (0, 1, BW, LAT), (0, 2, BW, LAT)]
    topo = Topology.from_edges(3, edges, switches=[Switch("cut_through", reduce=True), Switch("store_forward")])
    p = Problem(topo, Collective("reduce", 1, 1, root=0))
    t1, t2 = t_route(p, 1), t_route(p, 2)
    rows = [(0, 1, 4, 0.0, t2, "reduce", "1>3>4"), (0, 2, 4, 0.0, t2, "reduce", "2>3>4"),
            (0, 4, 0, t2, t2 + t1, "reduce")]
    assert ok(p, rows).collective_time_us == pytest.approx(t1 + t2)
    reject(p, rows + [(0, 4, 0, t2 + t1, t2 + 2 * t1, "reduce")], r"row 3 .*2nd outgoing one, but 1 arrived")
    # the members merged into one packet may not carry the same contribution
    dup = [(0, 1, 4, 0.0, t2, "reduce", "1>3>4"), (0, 1, 4, 0.0, t2, "reduce", "1>3>4")]
    reject(p, dup, r"row 1 .*duplicates row 0")


# ----------------------------------------------------------------------------------------- rule 6, misc
def test_rule6_postcondition_over_npus_only():
    # the switch is in no postcondition: it never "receives" anything it would need
    p = Problem(star(mode="store_forward", multicast=True), Collective("all_gather", 1, 1))
    t = t_route(p, 1)
    rows = [(j, j, 4, j * t, (j + 1) * t, "copy") for j in range(4)]
    rows += [(j, 4, k, (j + 1) * t, (j + 2) * t, "copy") for j in range(4) for k in range(4) if k != j]
    assert ok(p, rows).collective_time_us == pytest.approx(5 * t)
    reject(p, rows[:-1], r"postcondition unmet: NPU 2 never receives chunk 3")


def test_csv_round_trip_of_a_routed_schedule(tmp_path):
    p = Problem(leaf_spine(multicast=True), Collective("all_gather", 1, 1))
    t = t_route(p, 4, bw=25.0)
    s = Schedule.from_rows(leaf_spine_all_gather(p, t))
    s.to_csv(tmp_path / "s.csv")
    back = Schedule.from_csv(tmp_path / "s.csv")
    assert back.route is not None and set(back.route) >= {"0>4>1", "0>4>6>5>2"}
    assert verify(p, back).collective_time_us == pytest.approx(4 * t)
    assert check(p, back).valid


def test_fault_on_a_route_link():
    p = Problem(leaf_spine(), Collective("gather", 1, 1, root=2))
    t = t_route(p, 4, bw=25.0)
    t2 = t_route(p, 2)
    rows = [(0, 0, 2, 0.0, t, "copy", "0>4>6>5>2"), (1, 1, 2, t, 2 * t, "copy", "1>4>6>5>2"),
            (3, 3, 2, 2 * t, 2 * t + t2, "copy", "3>5>2")]
    s = Schedule.from_rows(rows)
    assert verify(p, s, Fault(3 * t, links=((4, 6),))).valid
    with pytest.raises(VerificationError, match=r"row 1 .*link 4->6 fails at .* before this transfer ends"):
        verify(p, s, Fault(1.5 * t, links=((4, 6),)))
    # a failed NPU needs nothing, and loses its links to the switch
    bp = Problem(star(multicast=True), Collective("broadcast", 1, 1, root=0))
    t = t_route(bp, 2)
    rows = [(0, 0, k, 0.0, t, "copy", f"0>4>{k}") for k in (1, 2)]
    assert verify(bp, Schedule.from_rows(rows), Fault(0.0, npus=(3,))).valid
    reject(bp, rows, "postcondition unmet: NPU 3 never receives chunk 0")
    with pytest.raises(VerificationError, match=r"row 1 .*link 4->2 fails at 0.500000 µs"):
        verify(bp, Schedule.from_rows(rows), Fault(0.5, npus=(2, 3)))


def test_point_to_point_behaviour_unchanged():
    p = Problem(ring(3, bidirectional=False), Collective("all_gather", 1, 3))
    t = float(p.link_time_us[0])
    rows = [(0, 0, 1, 0, t, "copy"), (1, 1, 2, 0, t, "copy"), (2, 2, 0, 0, t, "copy"),
            (2, 0, 1, t, 2 * t, "copy"), (0, 1, 2, t, 2 * t, "copy"), (1, 2, 0, t, 2 * t, "copy")]
    a = verify(p, Schedule.from_rows(rows))
    b = verify(p, Schedule.from_rows([r + ("",) for r in rows]))                 # empty routes: the table replay
    c = verify_fabric(p, Schedule.from_rows([r + (f"{r[1]}>{r[2]}",) for r in rows]))
    assert a == b == c
    bad = list(rows)
    bad[3] = (1, 0, 1, t, 2 * t, "copy")
    with pytest.raises(VerificationError, match=r"row 3 .*non-causal: NPU 0 does not hold chunk 1"):
        verify(p, Schedule.from_rows(bad))


def test_all_gather_scale_smoke():
    # 16 NPUs around one cut_through switch, 64 chunks each: 15 * 1024 rows replay quickly on both paths
    n, K = 16, 64
    p = Problem(star(n), Collective("all_gather", K, 16))
    t = t_route(p, 2)
    rows = [(j + n * k, j, (j + r) % n, ((r - 1) * K + k) * t, ((r - 1) * K + k + 1) * t, "copy",
             f"{j}>{n}>{(j + r) % n}") for r in range(1, n) for k in range(K) for j in range(n)]
    v = ok(p, rows)
    assert v.num_transfers == 15 * K * n and v.link_utilization == pytest.approx(1.0)
