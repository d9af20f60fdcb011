"""Switched fabrics: files with switches, the named real-cluster-like fabrics, relaying subsets (docs/fabrics.md,
docs/fabric_clusters.md)."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from omegaconf import OmegaConf

from tacos_bench.errors import CollectiveError, ConfigError, TopologyError, TopologyFileError
from tacos_bench.topology import Switch, Topology
from tacos_bench.topology import fabrics as fab
from tacos_bench.topology import generators as gen
from tacos_bench.topology.io import load_topology, save_topology
from tacos_bench.topology.named import build_topology, named_topology

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf" / "topo"
PEER = ROOT / "data" / "topologies" / "peer"


def same(a: Topology, b: Topology) -> bool:
    return (a.num_npus == b.num_npus and a.switches == b.switches and np.array_equal(a.src, b.src)
            and np.array_equal(a.dst, b.dst) and np.array_equal(a.bw_GiBps, b.bw_GiBps)
            and np.array_equal(a.lat_us, b.lat_us))


def mixed() -> Topology:
    """3 NPUs, a store-and-forward switch that reduces and a cut-through one that multicasts, odd floats."""
    edges = []
    for u in range(3):
        edges += [(u, 3, 50.0, 0.5), (3, u, 50.0, 0.5), (u, 4, 1 / 3, 0.1 + 0.2), (4, u, 1 / 3, 0.1 + 0.2)]
    edges += [(3, 4, 7.0, 0.0), (0, 1, 25.0, 1.0)]
    return Topology.from_edges(3, edges, name="mixed", switches=[Switch("store_forward", reduce=True),
                                                                 Switch("cut_through", multicast=True)])


FABRICS = {
    "mixed": mixed,
    "switched8_nvls": lambda: named_topology("switched8_nvls"),
    "dgx_h100x4_2to1": lambda: named_topology("dgx_h100x4_2to1"),
    "ndv2x2": lambda: named_topology("ndv2x2"),
    "leafspine4x8_2to1": lambda: named_topology("leafspine4x8_2to1"),
    "relay": lambda: build_topology({"kind": "ring", "dims": [8], "subset": [0, 2, 4, 6], "subset_mode": "relay"}),
}


# ---------------------------------------------------------------------------------------------- files
@pytest.mark.parametrize("ext", [".txt", ".json", ".graphml"])
@pytest.mark.parametrize("which", sorted(FABRICS))
def test_round_trip_with_switches(tmp_path, which, ext):
    t = FABRICS[which]()
    back = load_topology(save_topology(t, tmp_path / f"t{ext}"))
    assert same(t, back), which
    assert back.name == t.name and back.is_fabric


def test_edge_list_spells_switches(tmp_path):
    text = save_topology(mixed(), tmp_path / "m.txt").read_text().splitlines()
    body = [ln for ln in text if not ln.startswith("#")]
    assert body[:3] == ["3 2", "switch 3 store_forward reduce", "switch 4 cut_through multicast"]


def test_json_spells_switches(tmp_path):
    doc = json.loads(save_topology(mixed(), tmp_path / "m.json").read_text())
    assert doc["num_switches"] == 2
    assert doc["switches"][0] == {"id": 3, "mode": "store_forward", "multicast": False, "reduce": True}
    plain = json.loads(save_topology(gen.ring(4), tmp_path / "r.json").read_text())
    assert "num_switches" not in plain and "switches" not in plain   # point-to-point files unchanged


def test_switch_lines_default_and_anywhere(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("2 2   # two NPUs, two switches\n0 2 10 1\n2 0 10 1\n1 2 10 1\nswitch 3 multicast\n2 1 10 1\n"
                 "1 3 5 1\n3 1 5 1\n0 3 5 1\n3 0 5 1\n")
    t = load_topology(p)
    assert t.num_npus == 2 and t.num_switches == 2 and t.num_nodes == 4
    assert t.switch(2) == Switch() and t.switch(3) == Switch("cut_through", multicast=True)


def test_old_edge_lists_still_parse(tmp_path):
    p = tmp_path / "old.txt"
    p.write_text("# name: pair\n2\n0 1 50 0.5\n1 0 25 1.0\n")
    t = load_topology(p)
    assert (t.num_npus, t.num_switches, t.num_links, t.name) == (2, 0, 2, "pair")
    for f in sorted(PEER.glob("*.txt")):
        assert not load_topology(f).is_fabric, f


def file_err(tmp_path, text: str, name: str = "bad.txt") -> TopologyFileError:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TopologyFileError) as e:
        load_topology(p)
    msg = str(e.value)
    assert "\n" not in msg and name in msg
    return e.value


LINKS_2_1 = "0 2 1 1\n2 0 1 1\n1 2 1 1\n2 1 1 1\n"   # 2 NPUs on switch 2


@pytest.mark.parametrize("text,line,words", [
    ("2 1\n" + LINKS_2_1 + "switch 3\n", 6, ["switch id 3 out of range 2..2"]),
    ("2 1\n" + LINKS_2_1 + "switch -1\n", 6, ["switch id -1 out of range"]),
    ("2 1\nswitch 1 cut_through\n" + LINKS_2_1, 2, ["switch line for NPU id 1", "2..2"]),
    ("2 1\n" + LINKS_2_1 + "switch 2 cut_through fast\n", 6, ["unknown switch word 'fast'", "store_forward"]),
    ("2 1\nswitch 2 multicast\n" + LINKS_2_1 + "switch 2 reduce\n", 7, ["duplicate switch line for switch 2",
                                                                         "first on line 2"]),
    ("2 1\nswitch 2 cut_through store_forward\n" + LINKS_2_1, 2, ["two modes"]),
    ("2 1\nswitch 2 reduce reduce\n" + LINKS_2_1, 2, ["'reduce' given twice"]),
    ("2 1\nswitch\n" + LINKS_2_1, 2, ["needs the switch's id"]),
    ("2 1\nswitch x\n" + LINKS_2_1, 2, ["switch id must be an integer", "'x'"]),
    ("2\nswitch 2\n0 1 1 1\n1 0 1 1\n", 2, ["declares no switches", "N S"]),
    ("2 1\n0 3 1 1\n", 2, ["node id 3 out of range 0..2", "S = 1 switches"]),
    ("2 x\n0 1 1 1\n", 1, ["switch count S must be an integer", "'x'"]),
    ("2 -1\n0 1 1 1\n", 1, ["switch count S must be in 0.."]),
    ("2 1 1\n0 1 1 1\n", 1, ["got 3 fields"]),
])
def test_bad_edge_lists(tmp_path, text, line, words):
    err = file_err(tmp_path, text)
    assert err.line == line, str(err)
    for w in words:
        assert w in str(err), (w, str(err))


def test_switch_without_links_is_an_error(tmp_path):
    err = file_err(tmp_path, "2 2\n" + LINKS_2_1)
    assert "switch 3 has no links" in str(err)


def test_old_error_messages_kept(tmp_path):
    assert "NPU id 2 out of range 0..1 (N = 2)" in str(file_err(tmp_path, "2\n0 1 50 0.5\n1 2 50 0.5\n"))
    assert "4 fields" in str(file_err(tmp_path, "0 1 50 0.5\n1 0 50 0.5\n"))


def jdoc(**kw) -> str:
    doc = {"num_npus": 2, "num_switches": 1, "links": [{"src": s, "dst": d, "bw_GiBps": 1, "lat_us": 1}
                                                     for s, d in ((0, 2), (2, 0), (1, 2), (2, 1))]}
    doc.update(kw)
    return json.dumps(doc)


@pytest.mark.parametrize("doc,field,words", [
    (jdoc(switches=[{"id": 1}]), "switches[0].id", ["NPU id 1 listed as a switch"]),
    (jdoc(switches=[{"id": 5}]), "switches[0].id", ["switch id 5 out of range 2..2"]),
    (jdoc(switches=[{"id": 2, "mode": "wormhole"}]), "switches[0].mode", ["unknown switch mode 'wormhole'"]),
    (jdoc(switches=[{"id": 2, "multicast": "yes"}]), "switches[0].multicast", ["true or false"]),
    (jdoc(switches=[{"id": 2}, {"id": 2}]), "switches[1].id", ["duplicate entry for switch 2"]),
    (jdoc(switches=[{"id": 2, "ports": 4}]), "switches[0].ports", ["unknown key"]),
    (jdoc(num_switches=0, switches=[{"id": 2}]), "num_switches", ["num_switches is 0"]),
    (jdoc(num_switches=True), "num_switches", ["integer"]),
    (jdoc(links=[{"src": 0, "dst": 3, "bw_GiBps": 1, "lat_us": 1}]), "links[0].dst", ["node id 3 out of range"]),
])
def test_bad_json(tmp_path, doc, field, words):
    err = file_err(tmp_path, doc, "bad.json")
    assert err.field == field, str(err)
    for w in words:
        assert w in str(err), (w, str(err))


def test_json_switch_without_links(tmp_path):
    assert "switch 3 has no links" in str(file_err(tmp_path, jdoc(num_switches=2), "bad.json"))


def graphml_err(tmp_path, g) -> TopologyFileError:
    p = tmp_path / "bad.graphml"
    nx.write_graphml(g, p)
    with pytest.raises(TopologyFileError) as e:
        load_topology(p)
    assert "\n" not in str(e.value)
    return e.value


def _star(**switch_attrs) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node("s", **switch_attrs)
    for v in ("a", "b"):
        g.add_edge(v, "s", bw=1.0, lat=1.0)
        g.add_edge("s", v, bw=1.0, lat=1.0)
    return g


def test_bad_graphml(tmp_path):
    assert "unknown switch mode 'wormhole'" in str(graphml_err(tmp_path, _star(kind="switch", mode="wormhole")))
    assert "unknown kind 'router'" in str(graphml_err(tmp_path, _star(kind="router")))
    assert "no kind=\"switch\"" in str(graphml_err(tmp_path, _star(mode="cut_through")))


def test_graphml_labels_switches_after_npus(tmp_path):
    p = tmp_path / "star.graphml"
    nx.write_graphml(_star(kind="switch", mode="store_forward", multicast=True), p)
    t = load_topology(p)
    assert (t.num_npus, t.num_switches, t.meta["node_labels"]) == (2, 1, ["a", "b", "s"])
    assert t.switch(2) == Switch("store_forward", multicast=True)


def test_run_directory_topology_keeps_switches(tmp_path):
    from tacos_bench.rundir import TOPOLOGY_FILE

    t = named_topology("dgx_h100x4")
    assert same(load_topology(save_topology(t, tmp_path / TOPOLOGY_FILE)), t)


# ---------------------------------------------------------------------------------------------- named fabrics
# name: (NPUs, switches, directed links)
NAMED = {
    "switched8": (8, 1, 16), "switched8_sf": (8, 1, 16), "switched8_nvls": (8, 1, 16),
    "dgx_a100x4": (32, 16, 192), "dgx_h100x4": (32, 16, 192), "dgx_h100x4_2to1": (32, 14, 160),
    "dgx_h100x128": (1024, 264, 6144), "ndv2x2": (16, 3, 100), "mi250x_node": (8, 0, 24),
    "tpuv4_4x4x4": (64, 0, 384), "leafspine4x8_2to1": (32, 8, 96),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_fabric_builds(name):
    t = named_topology(name)
    assert (t.num_npus, t.num_switches, t.num_links) == NAMED[name]
    assert t.name == name and t.is_symmetric
    t.check_strongly_connected()
    assert "fabric" in t.meta
    assert all(lo < hi for r in t.meta["fabric"]["switch_ranges"].values() if r for lo, hi in [r])


def test_switched_modes_and_flags():
    assert named_topology("switched8").switches == (Switch("cut_through"),)
    assert named_topology("switched8_sf").switches == (Switch("store_forward"),)
    assert named_topology("switched8_nvls").switches == (Switch("cut_through", multicast=True, reduce=True),)
    t = named_topology("switched8")
    assert np.all(t.bw_GiBps == 50.0) and np.all(t.lat_us == 0.5)
    assert named_topology("switch8").num_switches == 0       # switch<N> keeps its unwound meaning


def _tier(t: Topology, tier: str) -> list[int]:
    lo, hi = t.meta["fabric"]["switch_ranges"][tier]
    return list(range(lo, hi))


def test_dgx_figures():
    a, h = named_topology("dgx_a100x4"), named_topology("dgx_h100x4")
    for t, nvl_gbps, nic_gbit, flags in ((a, 300, 200, False), (h, 450, 400, True)):
        nvs, leaves = _tier(t, "nvswitch"), _tier(t, "leaf")
        assert len(nvs) == 4 and len(leaves) == 8 and len(_tier(t, "spine")) == 4
        assert all(t.switch(s) == Switch("cut_through", flags, flags) for s in nvs)
        assert all(t.switch(s) == Switch("cut_through") for s in leaves + _tier(t, "spine"))
        # GPU 8k+g: NVSwitch of node k, leaf of rail g
        for u in (0, 13, 31):
            assert t.bw_GiBps[t.link_id(u, nvs[u // 8])] == pytest.approx(nvl_gbps * 1e9 / 2**30)
            assert t.bw_GiBps[t.link_id(leaves[u % 8], u)] == pytest.approx(nic_gbit / 8 * 1e9 / 2**30)
            assert sorted(t.out_neighbors(u).tolist()) == [nvs[u // 8], leaves[u % 8]]


def test_dgx_h100x128_is_1024_gpus():
    t = named_topology("dgx_h100x128")
    assert len(_tier(t, "nvswitch")) == 128 and len(_tier(t, "leaf")) == 8 and len(_tier(t, "spine")) == 128


def _uplink_ratio(t: Topology, leaf: int) -> float:
    down = sum(float(t.bw_GiBps[t.link_id(leaf, v)]) for v in t.out_neighbors(leaf).tolist() if v < t.num_npus)
    up = sum(float(t.bw_GiBps[t.link_id(leaf, v)]) for v in t.out_neighbors(leaf).tolist() if v >= t.num_npus)
    up_in = sum(float(t.bw_GiBps[t.link_id(v, leaf)]) for v in t.in_neighbors(leaf).tolist() if v >= t.num_npus)
    assert up == pytest.approx(up_in)
    return down / up


@pytest.mark.parametrize("t,ratio", [
    (named_topology("dgx_h100x4"), 1.0), (named_topology("dgx_h100x4_2to1"), 2.0),
    (named_topology("leafspine4x8_2to1"), 2.0), (fab.rail_cluster(6, 4, spines=3, oversubscription=3.0), 3.0),
    (fab.leaf_spine(3, 5, spines=4, oversubscription=1.5), 1.5),
])
def test_oversubscription(t, ratio):
    tier = "leaf"
    for leaf in _tier(t, tier):
        assert _uplink_ratio(t, leaf) == pytest.approx(ratio)


def test_rail_single_node_and_rail_only():
    t = fab.rail_cluster(1, 8)
    assert t.num_switches == 1 and t.num_links == 16
    r = fab.rail_cluster(4, 4, spines=0)       # rails meet only in the NVSwitches
    assert r.num_switches == 4 + 4 and r.meta["fabric"]["switch_ranges"]["spine"] is None
    r.check_strongly_connected()
    with pytest.raises(TopologyError, match="oversubscription"):
        fab.rail_cluster(2, 8, oversubscription=0)


def test_ndv2_nvlinks_match_the_peer_dgx1():
    t = named_topology("ndv2x2")
    peer = load_topology(PEER / "dgx1_sccl.txt")
    for node in (0, 1):
        for s, d, b, _ in peer.edges():
            assert t.bw_GiBps[t.link_id(8 * node + s, 8 * node + d)] == pytest.approx(b)
    hosts, ib = _tier(t, "host"), _tier(t, "infiniband")
    assert len(hosts) == 2 and len(ib) == 1
    assert t.bw_GiBps[t.link_id(hosts[0], ib[0])] == pytest.approx(12.5e9 / 2**30)   # 100 Gb/s


def test_mi250x_node_links():
    t = named_topology("mi250x_node")
    gbps = {(min(u, v), max(u, v)): round(b * 2**30 / 1e9) for u, v, b, _ in t.edges()}
    assert sorted(set(gbps.values())) == [50, 100, 200]
    assert [gbps[(2 * k, 2 * k + 1)] for k in range(4)] == [200] * 4        # the two GCDs of an MI250X
    per_gcd = [sum(v for (a, b), v in gbps.items() if g in (a, b)) for g in range(8)]
    assert per_gcd == [350] * 8                                            # 4 + 2 + 1 links of 50 GB/s
    two = fab.mi250x(2)
    assert two.num_switches == 1 and sorted(two.in_neighbors(16).tolist()) == [0, 2, 4, 6, 8, 10, 12, 14]


def test_tpuv4_is_a_torus():
    t = named_topology("tpuv4_4x4x4")
    assert np.all(t.out_degree() == 6)
    assert t.bw_GiBps[0] == pytest.approx(45e9 / 2**30)


@pytest.mark.parametrize("name", ["switched8", "switched8_sf", "switched8_nvls", "dgx_h100x4", "dgx_h100x4_2to1"])
def test_conf_topo_matches_the_name(name):
    from tacos_bench.runner.conf import TopoConf

    cfg = OmegaConf.merge(OmegaConf.structured(TopoConf), OmegaConf.load(CONF_DIR / f"{name}.yaml"))
    t = build_topology(cfg)
    assert t.name == name and same(t, named_topology(name))


@pytest.mark.parametrize("cfg,exc,words", [
    ({"kind": "switched", "dims": [8], "params": {"mode": "wormhole"}}, ConfigError, ["params.mode", "cut_through"]),
    ({"kind": "switched", "dims": [8], "params": {"multicast": "yes"}}, ConfigError, ["multicast", "true or false"]),
    ({"kind": "switched", "dims": [8, 2]}, ConfigError, ["dims", "[N]"]),
    ({"kind": "rail", "dims": [4, 8], "params": {"spines": -1}}, ConfigError, ["spines"]),
    ({"kind": "rail", "dims": [4, 8], "params": {"nvlink": 1}}, ConfigError, ["nvlink", "nvlink_GiBps"]),
    ({"kind": "rail", "dims": [4, 8, 2]}, ConfigError, ["[nodes, gpus_per_node]"]),
    ({"kind": "rail", "dims": [4, 8], "params": {"oversubscription": 0}}, ConfigError, ["oversubscription"]),
    ({"name": "dgx_h100x4", "kind": "named", "failed_links": [[0, 99]]}, TopologyError, ["unknown node id 99"]),
    ({"name": "dgx_h100x4", "kind": "named", "failed_links": [[0, 1]]}, TopologyError, ["no link 0->1"]),
])
def test_fabric_config_errors(cfg, exc, words):
    with pytest.raises(exc) as e:
        build_topology(cfg)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_rail_config_defaults_are_dgx_h100_without_flags():
    t = build_topology({"kind": "rail", "dims": [4]})
    h = fab.dgx_h100(4, nvls=False)
    assert np.array_equal(t.bw_GiBps, h.bw_GiBps) and np.array_equal(t.lat_us, h.lat_us)
    assert t.switches == h.switches


def test_failed_links_and_npus_on_a_fabric():
    t = build_topology({"name": "dgx_h100x4", "kind": "named", "failed_links": [[0, 32, "both"]]})
    assert t.num_links == 190 and not t.has_link(0, 32) and t.num_switches == 16
    t = build_topology({"name": "dgx_h100x4", "kind": "named", "failed_npus": [3]})
    assert t.num_npus == 31 and t.num_switches == 16 and t.meta["original_ids"][3] == 4
    t = build_topology({"name": "dgx_h100x4", "kind": "named", "subset": list(range(8))})   # node 0, induced
    assert t.num_npus == 8 and t.num_switches == 1 + 8 + 4    # the other nodes' NVSwitches have no links left
    t.check_strongly_connected()


# ---------------------------------------------------------------------------------------------- relay subsets
def test_relay_subset_on_ring8():
    cfg = {"kind": "ring", "dims": [8], "subset": [0, 2, 4, 6]}
    with pytest.raises(TopologyError, match="disconnected"):
        build_topology(cfg)                                    # induced: no two members are neighbours
    t = build_topology({**cfg, "subset_mode": "relay"})
    assert (t.num_npus, t.num_switches, t.num_links) == (4, 4, 16)
    assert t.switches == (Switch("store_forward", multicast=True, reduce=True),) * 4
    assert t.meta["node_labels"] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert t.meta["original_ids"] == [0, 2, 4, 6]
    assert t.has_link(0, 4) and t.has_link(4, 1) and not t.has_link(0, 1)   # 0 - relay 1 - 2
    t.check_strongly_connected()


def test_relay_with_failed_npus_and_on_a_fabric():
    t = build_topology({"kind": "ring", "dims": [8], "subset": [0, 2, 4, 6], "subset_mode": "relay",
                        "failed_npus": [7]})
    assert t.num_npus == 4 and t.meta["node_labels"] == [0, 2, 4, 6, 1, 3, 5]
    t.check_strongly_connected()                                # 6 -> 5 -> 4 ... -> 0 the long way
    f = build_topology({"name": "dgx_h100x4", "kind": "named", "subset": [0, 8, 16, 24], "subset_mode": "relay"})
    assert f.num_npus == 4 and f.num_switches == 28 + 16
    assert f.switch(4) == Switch("store_forward", multicast=True, reduce=True)        # old GPU 1
    assert f.switch(4 + 28) == Switch("cut_through", multicast=True, reduce=True)     # NVSwitch of node 0
    assert f.meta["node_labels"][:5] == [0, 8, 16, 24, 1] and f.meta["node_labels"][32] == 32


def test_relay_root_mapping():
    from tacos_bench.runner.stages import build_problem

    cfg = {"kind": "ring", "dims": [8], "subset": [0, 2, 4, 6], "subset_mode": "relay"}
    p = build_problem(cfg, {"kind": "broadcast", "root": 4})
    assert p.collective.root == 2 and p.num_npus == 4
    with pytest.raises(CollectiveError, match="not in topo.subset .*relay"):
        build_problem(cfg, {"kind": "broadcast", "root": 7})
    with pytest.raises(CollectiveError, match="not an NPU of ring8"):
        build_problem(cfg, {"kind": "broadcast", "root": 8})
    with pytest.raises(CollectiveError, match="not in topo.subset"):        # induced, above every member
        build_problem({"kind": "ring", "dims": [8], "subset": [0, 1, 2]}, {"kind": "broadcast", "root": 6})


def test_unknown_subset_mode_lists_relay():
    with pytest.raises(ConfigError, match="induced, relay"):
        build_topology({"kind": "ring", "dims": [4], "subset_mode": "magic"})
