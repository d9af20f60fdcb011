"""Topology files: edge list, JSON, GraphML; round trips and malformed input."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

from tacos_bench import generators as gen
from tacos_bench.errors import TopologyError, TopologyFileError
from tacos_bench.topology.io import load_topology, save_topology
from tacos_bench.topology import Topology
from tacos_bench.topology.transforms import remove_npus


def same_arrays(a: Topology, b: Topology) -> bool:
    return (a.num_npus == b.num_npus and np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
            and np.array_equal(a.bw_GiBps, b.bw_GiBps) and np.array_equal(a.lat_us, b.lat_us))


def irregular() -> Topology:
    """Asymmetric, heterogeneous, with floats that do not print exactly in few digits."""
    rng = np.random.default_rng(3)
    edges = [(i, (i + 1) % 7, float(rng.uniform(1, 200)), float(rng.uniform(0, 3))) for i in range(7)]
    edges += [(0, 3, 1 / 3, 0.1 + 0.2), (5, 2, 1e-3, 0.0)]
    return Topology.from_edges(7, edges, name="irregular")


TOPOLOGIES = {
    "ring5": lambda: gen.ring(5),
    "uniring4": lambda: gen.ring(4, bidirectional=False),
    "switch8": lambda: gen.switch(8),                       # bw 50/7: needs full float precision
    "dragonfly4x4": lambda: gen.dragonfly(4, 4),
    "hetero2x2x4": lambda: gen.hetero_cluster(2, 2, 4),
    "hetero_mesh4x4": lambda: gen.hetero_mesh2d(4, 4),
    "irregular": irregular,
    "single": lambda: Topology(1, [], [], [], [], name="single"),
}


@pytest.mark.parametrize("ext", [".txt", ".edges", ".el", ".topo", ".json", ".graphml"])
@pytest.mark.parametrize("which", sorted(TOPOLOGIES))
def test_round_trip(tmp_path, which, ext):
    t = TOPOLOGIES[which]()
    p = save_topology(t, tmp_path / f"t{ext}")
    back = load_topology(p)
    assert same_arrays(t, back)
    assert back.name == t.name


def test_json_round_trip_keeps_meta(tmp_path):
    t = remove_npus(gen.mesh2d(3, 3), [4])
    back = load_topology(save_topology(t, tmp_path / "t.json"), require_connected=False)
    assert back.meta["original_ids"] == t.meta["original_ids"]


def test_edge_list_syntax(tmp_path):
    p = tmp_path / "pair.txt"
    p.write_text("# a comment\n\n  # indented comment\n3   # NPU count\n"
                 "0 1 50 0.5\n1,2,25.5,1e-1  # commas work\n\n2 0 10 0   \n")
    t = load_topology(p)
    assert t.num_npus == 3 and t.name == "pair"
    assert [tuple(e) for e in t.edges()] == [(0, 1, 50.0, 0.5), (1, 2, 25.5, 0.1), (2, 0, 10.0, 0.0)]


def test_format_override(tmp_path):
    p = save_topology(gen.ring(4), tmp_path / "ring.dat", fmt="json")
    assert json.loads(p.read_text())["num_npus"] == 4
    assert same_arrays(load_topology(p, fmt="json"), gen.ring(4))
    with pytest.raises(TopologyError, match="unknown topology file format"):
        load_topology(p, fmt="yaml")


def test_graphml_undirected_means_both_directions(tmp_path):
    g = nx.Graph()
    g.add_edge(0, 1, bw=40.0, lat=0.5)
    g.add_edge(1, 2, bw=20.0, lat=1.0)
    p = tmp_path / "u.graphml"
    nx.write_graphml(g, p)
    t = load_topology(p)
    assert t.num_links == 4 and t.is_symmetric
    assert t.bw_GiBps[t.link_id(2, 1)] == 20.0


def test_graphml_string_labels(tmp_path):
    g = nx.DiGraph()
    for u, v in [("b", "a"), ("a", "c"), ("c", "b")]:
        g.add_edge(u, v, bw=10.0, lat=0.1)
    p = tmp_path / "s.graphml"
    nx.write_graphml(g, p)
    t = load_topology(p)
    assert t.meta["node_labels"] == ["a", "b", "c"]
    assert t.has_link(1, 0) and t.has_link(0, 2) and t.has_link(2, 1)


def test_graphml_numeric_labels_keep_ids(tmp_path):
    # nodes written in a scrambled order, ids 0..10: numeric order must be kept (not "10" < "2")
    t = gen.ring(11)
    g = nx.DiGraph()
    g.add_nodes_from([7, 10, 2, 0, 1, 3, 4, 5, 6, 8, 9])
    for s, d, b, l in t.edges():
        g.add_edge(s, d, bw=b, lat=l)
    p = tmp_path / "r.graphml"
    nx.write_graphml(g, p)
    assert same_arrays(load_topology(p), t)


# ---------------------------------------------------------------------------------------------- malformed
def load_err(tmp_path, text: str, name: str = "bad.txt", **kw) -> TopologyFileError:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TopologyFileError) as e:
        load_topology(p, **kw)
    msg = str(e.value)
    assert "\n" not in msg and name in msg
    return e.value


def assert_where(err: TopologyFileError, line, field, *words):
    msg = str(err)
    assert err.line == line, msg
    assert err.field == field, msg
    if line is not None:
        assert f":{line}" in msg
    if field is not None:
        assert f"[{field}]" in msg
    for w in words:
        assert w in msg, (w, msg)


def test_missing_file(tmp_path):
    with pytest.raises(TopologyFileError) as e:
        load_topology(tmp_path / "nope.txt")
    assert "nope.txt" in str(e.value) and "no such file" in str(e.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(TopologyFileError, match="directory"):
        load_topology(tmp_path)


def test_binary_file(tmp_path):
    p = tmp_path / "bin.txt"
    p.write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(TopologyFileError, match="UTF-8"):
        load_topology(p)


def test_empty_file(tmp_path):
    assert_where(load_err(tmp_path, "# only comments\n\n"), None, "N", "NPU count")


def test_bad_n_not_integer(tmp_path):
    assert_where(load_err(tmp_path, "# hdr\nfour\n0 1 1 1\n"), 2, "N", "'four'")


def test_bad_n_float(tmp_path):
    assert_where(load_err(tmp_path, "4.0\n"), 1, "N", "integer")


def test_bad_n_zero(tmp_path):
    assert_where(load_err(tmp_path, "0\n"), 1, "N", "1..", "got 0")


def test_bad_n_extra_fields(tmp_path):
    # a file that forgot the N line: the first link is taken for N and rejected
    assert_where(load_err(tmp_path, "0 1 50 0.5\n1 0 50 0.5\n"), 1, "N", "4 fields")


def test_wrong_field_count(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5\n1 0 50\n"), 3, None, "expected 4 fields", "got 3")


def test_too_many_fields(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5 9\n"), 2, None, "got 5")


def test_non_numeric_src(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5\nx 0 50 0.5\n"), 3, "src", "'x'")


def test_float_npu_id(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1.0 50 0.5\n"), 2, "dst", "integer")


def test_non_numeric_bandwidth(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 fast 0.5\n"), 2, "bw_GiBps", "'fast'")


def test_non_numeric_latency(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 nan\n"), 2, "lat_us", "'nan'")


def test_id_out_of_range(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5\n1 2 50 0.5\n"), 3, "dst", "NPU id 2", "0..1")


def test_negative_id(tmp_path):
    assert_where(load_err(tmp_path, "2\n-1 1 50 0.5\n"), 2, "src", "NPU id -1")


def test_self_loop(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5\n1 1 50 0.5\n"), 3, "dst", "self-loop 1->1")


def test_zero_bandwidth(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5\n1 0 0 0.5\n"), 3, "bw_GiBps", "> 0")


def test_negative_bandwidth(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 -5 0.5\n1 0 5 0.5\n"), 2, "bw_GiBps", "> 0")


def test_infinite_bandwidth(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 inf 0.5\n1 0 5 0.5\n"), 2, "bw_GiBps", "finite")


def test_negative_latency(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 1 50 0.5\n1 0 50 -0.1\n"), 3, "lat_us", ">= 0")


def test_duplicate_link(tmp_path):
    err = load_err(tmp_path, "3\n0 1 50 0.5\n1 2 50 0.5\n# again:\n0 1 25 1\n1 0 1 1\n2 1 1 1\n")
    assert_where(err, 5, None, "duplicate link 0->1", "first defined on line 2")


def test_disconnected(tmp_path):
    err = load_err(tmp_path, "4\n0 1 50 0.5\n1 0 50 0.5\n2 3 50 0.5\n3 2 50 0.5\n")
    assert_where(err, None, None, "disconnected", "2, 3")


def test_disconnected_allowed_on_request(tmp_path):
    p = tmp_path / "two.txt"
    p.write_text("3\n0 1 50 0.5\n1 0 50 0.5\n")
    assert load_topology(p, require_connected=False).num_npus == 3


def test_no_links(tmp_path):
    assert_where(load_err(tmp_path, "3\n"), None, None, "disconnected")


# JSON ------------------------------------------------------------------------------------------------
def jdump(obj) -> str:
    return json.dumps(obj)


def link(s, d, b=50.0, l=0.5):
    return {"src": s, "dst": d, "bw_GiBps": b, "lat_us": l}


def test_json_invalid_syntax(tmp_path):
    assert_where(load_err(tmp_path, '{\n "num_npus": 2,\n "links": [\n}', "bad.json"), 4, None, "invalid JSON")


def test_json_not_an_object(tmp_path):
    assert_where(load_err(tmp_path, "[1, 2]", "bad.json"), None, None, "top level")


def test_json_missing_num_npus(tmp_path):
    assert_where(load_err(tmp_path, jdump({"links": []}), "bad.json"), None, "num_npus", "missing")


def test_json_bad_num_npus(tmp_path):
    assert_where(load_err(tmp_path, jdump({"num_npus": "4", "links": []}), "bad.json"), None, "num_npus", "integer")


def test_json_unknown_key(tmp_path):
    assert_where(load_err(tmp_path, jdump({"num_npus": 2, "edges": []}), "bad.json"), None, "edges", "unknown key")


def test_json_links_not_a_list(tmp_path):
    assert_where(load_err(tmp_path, jdump({"num_npus": 2, "links": {}}), "bad.json"), None, "links", "list")


def test_json_link_missing_field(tmp_path):
    doc = {"num_npus": 2, "links": [link(0, 1), {"src": 1, "dst": 0, "bw_GiBps": 5}]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, "links[1].lat_us", "missing")


def test_json_link_non_numeric(tmp_path):
    doc = {"num_npus": 2, "links": [link(0, 1), link(1, 0, b="50")]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, "links[1].bw_GiBps", "number")


def test_json_link_bool_id(tmp_path):
    doc = {"num_npus": 2, "links": [link(True, 0)]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, "links[0].src", "integer")


def test_json_id_out_of_range(tmp_path):
    doc = {"num_npus": 2, "links": [link(0, 1), link(1, 5)]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, "links[1].dst", "NPU id 5")


def test_json_self_loop_and_bad_values(tmp_path):
    for bad, field, word in [(link(1, 1), "links[1].dst", "self-loop"), (link(1, 0, b=0), "links[1].bw_GiBps", "> 0"),
                             (link(1, 0, l=-1), "links[1].lat_us", ">= 0")]:
        doc = {"num_npus": 2, "links": [link(0, 1), bad]}
        assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, field, word)


def test_json_duplicate(tmp_path):
    doc = {"num_npus": 2, "links": [link(0, 1), link(1, 0), link(0, 1, b=3)]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, "links[2]", "duplicate link 0->1", "links[0]")


def test_json_disconnected(tmp_path):
    doc = {"num_npus": 3, "links": [link(0, 1), link(1, 0), link(1, 2)]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, None, "disconnected", "NPU(s) 2")


# GraphML ---------------------------------------------------------------------------------------------
def test_graphml_invalid_xml(tmp_path):
    err = load_err(tmp_path, "<graphml>\n<graph>\n</graphml>", "bad.graphml")
    assert err.line == 3 and "invalid GraphML" in str(err)


def test_graphml_missing_attribute(tmp_path):
    g = nx.DiGraph()
    g.add_edge(0, 1, bw=5.0, lat=1.0)
    g.add_edge(1, 0, bw=5.0)
    p = tmp_path / "bad.graphml"
    nx.write_graphml(g, p)
    with pytest.raises(TopologyFileError) as e:
        load_topology(p)
    assert_where(e.value, None, "lat", "edge 1->0", "lat")


def test_graphml_bad_value(tmp_path):
    g = nx.DiGraph()
    g.add_edge(0, 1, bw="fast", lat=1.0)
    g.add_edge(1, 0, bw="5", lat=1.0)
    p = tmp_path / "bad.graphml"
    nx.write_graphml(g, p)
    with pytest.raises(TopologyFileError) as e:
        load_topology(p)
    assert_where(e.value, None, "bw", "'fast'")


def test_graphml_negative_bandwidth_and_disconnected(tmp_path):
    g = nx.DiGraph()
    g.add_edge(0, 1, bw=-5.0, lat=1.0)
    p = tmp_path / "neg.graphml"
    nx.write_graphml(g, p)
    with pytest.raises(TopologyFileError, match="bandwidth must be > 0"):
        load_topology(p)
    g = nx.DiGraph()
    g.add_edge(0, 1, bw=5.0, lat=1.0)
    g.add_node(2)
    p = tmp_path / "dis.graphml"
    nx.write_graphml(g, p)
    with pytest.raises(TopologyFileError, match="disconnected"):
        load_topology(p)


def test_graphml_empty_graph(tmp_path):
    p = tmp_path / "empty.graphml"
    nx.write_graphml(nx.DiGraph(), p)
    with pytest.raises(TopologyFileError, match="no nodes"):
        load_topology(p)


# fuzz: malformed input never escapes as a raw exception ----------------------------------------------
def _mutations(text: str, rng: np.random.Generator, count: int):
    junk = ["x", "-", "#", ",", " ", "\n", "1e309", "nan", "0", "99", "-1", "1.5", "\t", "\x00", "{", "]", '"']
    for _ in range(count):
        chars = list(text)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(0, len(chars)))
            op = rng.integers(0, 3)
            if op == 0:
                del chars[i]
            elif op == 1:
                chars.insert(i, junk[int(rng.integers(0, len(junk)))])
            else:
                chars[i] = junk[int(rng.integers(0, len(junk)))]
        yield "".join(chars)


@pytest.mark.filterwarnings("ignore:No key type:UserWarning")  # networkx, on mutated GraphML keys
@pytest.mark.parametrize("ext", [".txt", ".json", ".graphml"])
def test_fuzzed_files_raise_only_topology_file_errors(tmp_path, ext):
    rng = np.random.default_rng(11)
    good = save_topology(gen.ring(3), tmp_path / f"good{ext}").read_text()
    p = tmp_path / f"fuzz{ext}"
    outcomes = {"ok": 0, "error": 0}
    for text in _mutations(good, rng, 150):
        p.write_text(text)
        try:
            load_topology(p)
            outcomes["ok"] += 1
        except TopologyFileError as e:
            assert "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_huge_values_do_not_overflow(tmp_path):
    assert_where(load_err(tmp_path, "2\n0 99999999999999999999999 1 1\n"), 2, "dst", "out of range")
    assert_where(load_err(tmp_path, "1000000000000\n"), 1, "N", "1..")
    doc = {"num_npus": 2, "links": [link(0, 10**30)]}
    assert_where(load_err(tmp_path, jdump(doc), "bad.json"), None, "links[0].dst", "out of range")
    assert_where(load_err(tmp_path, jdump({"num_npus": 10**30}), "bad.json"), None, "num_npus", "1..")
