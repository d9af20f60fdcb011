"""Exporters: MSCCL-IR XML (round-tripped through the independent checker in
``tacos_bench/export/msccl_check.py``), versioned JSON, Chakra traces, run directories and
the command line."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tacos_bench.export.msccl_check import MscclCheckError, check_msccl_xml, parse_algo
from tacos_bench import Collective, Problem, Schedule
from tacos_bench.errors import TacosError, VerificationError
from tacos_bench.export import (ExportError, chunk_of_index, export_json, export_msccl, export_to_file, load_json,
                                load_run, msccl_index)
from tacos_bench.topology.generators import grid, ring

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_XML = Path("/work/shared/reference/msccl_minimal_allgather2.xml")
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
COLL = {"all_gather": "allgather", "reduce_scatter": "reducescatter", "all_reduce": "allreduce"}


def _solvers():
    names = ["bfs"]  # required: the trivial backend must always be there
    if importlib.util.find_spec("solvers.greedy") is not None:
        names.append("greedy")
    return names


TOPOLOGIES = {
    "ring8": lambda: ring(8),
    "mesh4x4": lambda: grid([4, 4], wrap=False),
    "torus4x4": lambda: grid([4, 4], wrap=True),
    "hetero4x4": lambda: grid([4, 4], wrap=False, bw=[50, 100], name="hetero4x4"),
}

_CACHE: dict = {}


def solved(solver: str, topo: str, kind: str, cpn: int = 1) -> tuple[Problem, Schedule]:
    key = (solver, topo, kind, cpn)
    if key not in _CACHE:
        from solvers import get_solver

        problem = Problem(TOPOLOGIES[topo](), Collective(kind, cpn, 64))
        result = get_solver(solver).solve(problem, seed=0)
        assert result.schedule is not None, result.message
        _CACHE[key] = (problem, result.schedule)
    return _CACHE[key]


def two_rank_problem(kind="all_gather"):
    p = Problem(ring(2), Collective(kind, 1, 1))
    t = float(p.link_time_us[0])
    op = "copy" if kind == "all_gather" else "reduce"
    return p, Schedule.from_rows([(0, 1, 0, 0.0, t, op), (1, 0, 1, 0.0, t, op)] if kind != "all_gather"
                                 else [(0, 0, 1, 0.0, t, op), (1, 1, 0, 0.0, t, op)])


# ------------------------------------------------------------------------------------------------ checker
def test_checker_accepts_the_reference_xml():
    rep = check_msccl_xml(REFERENCE_XML.read_text(), expect_coll="allgather", expect_ngpus=2)
    assert rep.variants == ["inplace"] and rep.num_steps == 4 and rep.messages == 2


def _two_gpu_xml(first: str) -> str:
    """The reference All-Gather, with each rank doing ``first`` ("s" or "r") before the other step."""
    steps = {"s": '<step s="{i}" type="s" srcbuf="o" srcoff="{me}" dstbuf="o" dstoff="{me}" cnt="1" '
                  'depid="-1" deps="-1" hasdep="0"/>',
             "r": '<step s="{i}" type="r" srcbuf="o" srcoff="{peer}" dstbuf="o" dstoff="{peer}" cnt="1" '
                  'depid="-1" deps="-1" hasdep="0"/>'}
    order = (first, "r" if first == "s" else "s")
    gpus = []
    for me in (0, 1):
        body = "\n".join("      " + steps[t].format(i=i, me=me, peer=1 - me) for i, t in enumerate(order))
        gpus.append(f'  <gpu id="{me}" i_chunks="0" o_chunks="2" s_chunks="0">\n'
                    f'    <tb id="0" send="{1 - me}" recv="{1 - me}" chan="0">\n{body}\n    </tb>\n  </gpu>')
    return ('<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" '
            'inplace="1" outofplace="0" minBytes="0" maxBytes="0">\n' + "\n".join(gpus) + "\n</algo>\n")


def test_checker_detects_deadlock():
    check_msccl_xml(_two_gpu_xml("s"))
    with pytest.raises(MscclCheckError, match="deadlock"):
        check_msccl_xml(_two_gpu_xml("r"))   # both ranks receive first: each waits for the other forever


@pytest.mark.parametrize("attr", ["outofplace", "minBytes", "maxBytes", "nchunksperloop"])
def test_checker_requires_every_algo_attribute(attr):
    text = re.sub(rf' {attr}="[^"]*"', "", REFERENCE_XML.read_text(), count=1)
    with pytest.raises(MscclCheckError, match=attr):
        check_msccl_xml(text)


def test_checker_rejects_runtime_parser_pitfalls():
    text = REFERENCE_XML.read_text()
    with pytest.raises(MscclCheckError, match="declaration"):
        check_msccl_xml('<?xml version="1.0"?>\n' + text)
    with pytest.raises(MscclCheckError, match="tab"):
        check_msccl_xml(text.replace("  <gpu", "\t<gpu"))
    gaps = text.replace('<tb id="0" send="1" recv="1" chan="0">', '<tb id="1" send="1" recv="1" chan="0">', 1)
    with pytest.raises(MscclCheckError, match="contiguous"):
        check_msccl_xml(gaps)


# ------------------------------------------------------------------------------------------------ MSCCL round trip
@pytest.mark.parametrize("solver", _solvers())
@pytest.mark.parametrize("topo", list(TOPOLOGIES))
@pytest.mark.parametrize("kind", KINDS)
def test_msccl_round_trip(solver, topo, kind):
    problem, schedule = solved(solver, topo, kind)
    n = problem.num_npus
    for inplace in (True, False):
        xml = export_msccl(problem, schedule, inplace=inplace)
        rep = check_msccl_xml(xml, expect_coll=COLL[kind], expect_ngpus=n)
        assert rep.variants == ["inplace" if inplace else "outofplace"]
        assert rep.messages == len(schedule)   # one message per transfer, each received
        assert rep.max_steps_per_tb <= 64
        types = set(rep.step_types)
        assert "s" in types
        assert ("rrc" in types) == (kind != "all_gather")
        assert ("cpy" in types) == (kind == "all_gather" and not inplace)
        algo = parse_algo(xml)
        assert algo.nchunksperloop == n
        for gpu in algo.gpus:
            assert [tb.id for tb in gpu.tbs] == list(range(len(gpu.tbs)))


@pytest.mark.parametrize("kind", KINDS)
def test_msccl_splits_long_links_over_channels(kind):
    problem, schedule = solved("bfs", "torus4x4", kind, cpn=4)
    xml = export_msccl(problem, schedule, inplace=False, max_steps_per_tb=8)
    rep = check_msccl_xml(xml, max_steps=8)
    assert rep.nchannels > 1 and rep.max_steps_per_tb <= 8
    unsplit = check_msccl_xml(export_msccl(problem, schedule, inplace=False))
    assert unsplit.nchannels < rep.nchannels


def test_msccl_steps_follow_schedule_time_order():
    problem, schedule = solved("bfs", "mesh4x4", "all_gather", cpn=2)
    n, cpn = problem.num_npus, 2
    algo = parse_algo(export_msccl(problem, schedule, inplace=True))
    sched = schedule.sorted()
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            if tb.recv < 0:
                continue
            got = [int(chunk_of_index(st.dstoff, n, cpn)) for st in tb.steps if st.type == "r"]
            on_link = (sched.src == tb.recv) & (sched.dst == gpu.id)
            want = sched.chunk[on_link][np.argsort(sched.end_us[on_link], kind="stable")].tolist()
            assert got == want


def test_msccl_buffer_mapping_all_gather_in_place():
    problem, schedule = solved("bfs", "ring8", "all_gather", cpn=2)
    n, cpn = 8, 2
    algo = parse_algo(export_msccl(problem, schedule, inplace=True))
    assert all(g.i_chunks == 0 and g.o_chunks == n * cpn for g in algo.gpus)
    # A rank's own chunks are sent straight from output[rank*cpn + k], with nothing to wait for.
    for gpu in algo.gpus:
        own = {gpu.id * cpn + k for k in range(cpn)}
        for tb in gpu.tbs:
            for st in tb.steps:
                if st.type == "s" and st.srcoff in own:
                    assert st.srcbuf == "o" and st.depid == -1


def test_msccl_reduce_scatter_in_place_writes_only_own_slice():
    problem, schedule = solved("bfs", "torus4x4", "reduce_scatter", cpn=2)
    cpn = 2
    algo = parse_algo(export_msccl(problem, schedule, inplace=True))
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                if st.type in ("r", "rrc") and st.dstbuf == "i":
                    assert gpu.id * cpn <= st.dstoff < (gpu.id + 1) * cpn


def test_chunk_index_mapping_is_a_bijection():
    n, cpn = 5, 3
    idx = msccl_index(np.arange(n * cpn), n, cpn)
    assert sorted(idx.tolist()) == list(range(n * cpn))
    assert chunk_of_index(idx, n, cpn).tolist() == list(range(n * cpn))
    assert msccl_index(7, n, cpn) == (7 % n) * cpn + 7 // n


# ------------------------------------------------------------------------------------------------ tampering
def _export_lines(kind="all_reduce"):
    problem, schedule = solved("bfs", "torus4x4", kind)
    return export_msccl(problem, schedule, inplace=True).splitlines()


def test_checker_rejects_a_dropped_receive():
    lines = _export_lines()
    # The last step of a receiving threadblock that nobody waits for: dropping it leaves all numbering intact.
    for i, line in enumerate(lines):
        if re.search(r'type="(r|rrc)"', line) and 'hasdep="0"' in line and lines[i + 1].strip() == "</tb>":
            break
    else:
        pytest.fail("no droppable receive found")
    tampered = "\n".join(lines[:i] + lines[i + 1:])
    with pytest.raises(MscclCheckError, match="never received|postcondition|deadlock"):
        check_msccl_xml(tampered)


def test_checker_rejects_missing_dependencies_as_races():
    lines = [re.sub(r'depid="\d+" deps="\d+"', 'depid="-1" deps="-1"', ln)
             for ln in _export_lines() if 'type="nop"' not in ln]
    renumbered, k = [], 0
    for ln in lines:
        if "<tb " in ln:
            k = 0
        if "<step " in ln:
            ln = re.sub(r's="\d+"', f's="{k}"', ln, count=1)
            k += 1
        renumbered.append(ln)
    with pytest.raises(MscclCheckError, match="race|uninitialized|postcondition"):
        check_msccl_xml("\n".join(renumbered))


def test_checker_rejects_a_misdirected_receive():
    lines = _export_lines("all_gather")
    i = next(i for i, ln in enumerate(lines) if 'type="r"' in ln)
    m = re.search(r'dstoff="(\d+)"', lines[i])
    wrong = (int(m.group(1)) + 1) % 16
    lines[i] = lines[i].replace(m.group(0), f'dstoff="{wrong}"')
    with pytest.raises(MscclCheckError):
        check_msccl_xml("\n".join(lines))


def test_checker_rejects_too_many_steps():
    lines = _export_lines("all_gather")
    with pytest.raises(MscclCheckError, match="steps"):
        check_msccl_xml("\n".join(lines), max_steps=2)


# ------------------------------------------------------------------------------------------------ bad input
def test_export_refuses_an_invalid_schedule():
    problem, schedule = two_rank_problem()
    early = Schedule(schedule.chunk, schedule.src, schedule.dst, schedule.start_us, schedule.end_us / 2,
                     schedule.op)
    with pytest.raises(VerificationError):
        export_msccl(problem, early)
    with pytest.raises(VerificationError):
        export_json(problem, early)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_steps_per_tb": 0}, "max_steps_per_tb"),
    ({"max_steps_per_tb": 65}, "max_steps_per_tb"),
    ({"proto": "Fast"}, "proto"),
    ({"min_bytes": -1}, "min_bytes"),
    ({"min_bytes": 10, "max_bytes": 5}, "max_bytes"),
])
def test_export_msccl_bad_options(kwargs, match):
    problem, schedule = two_rank_problem()
    with pytest.raises(ExportError, match=match):
        export_msccl(problem, schedule, **kwargs)


def test_export_msccl_header_and_name():
    problem, schedule = two_rank_problem("reduce_scatter")
    xml = export_msccl(problem, schedule, name='my "algo"', proto="LL", inplace=False, min_bytes=1024,
                       max_bytes=1 << 20)
    head = xml.splitlines()[0]
    assert head == ('<algo name="my__algo_" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" '
                    'coll="reducescatter" inplace="0" outofplace="1" minBytes="1024" maxBytes="1048576">')
    check_msccl_xml(xml)


# ------------------------------------------------------------------------------------------------ JSON
@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip(kind):
    problem, schedule = solved("bfs", "hetero4x4", kind)
    text = export_json(problem, schedule, record={"solver": "bfs", "seed": 0, "collective_time_us": float("nan")})
    doc = json.loads(text)
    assert doc["schema_version"] == 1 and doc["schema"] == "tacos-bench/schedule"
    assert doc["run"] == {"solver": "bfs", "seed": 0, "collective_time_us": None}
    assert doc["summary"]["num_transfers"] == len(schedule)
    assert len(doc["topology"]["links"]) == problem.num_links
    p2, s2 = load_json(text)
    assert p2.num_npus == problem.num_npus and p2.kind == problem.kind and p2.chunk_bytes == problem.chunk_bytes
    np.testing.assert_array_equal(p2.topology.bw_GiBps, problem.topology.bw_GiBps)
    a, b = schedule.sorted(), s2.sorted()
    for col in ("chunk", "src", "dst", "start_us", "end_us", "op"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))


def test_json_rejects_unknown_schema_version(tmp_path):
    problem, schedule = two_rank_problem()
    doc = json.loads(export_json(problem, schedule))
    doc["schema_version"] = 99
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ExportError, match="schema_version"):
        load_json(path)


# ------------------------------------------------------------------------------------------------ Chakra
def _read_varint(fh):
    shift = result = 0
    while True:
        b = fh.read(1)
        if not b:
            return None
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return result
        shift += 7


def _read_et(path):
    from chakra.schema.protobuf import et_def_pb2 as pb

    with open(path, "rb") as fh:
        size = _read_varint(fh)
        meta = pb.GlobalMetadata()
        meta.ParseFromString(fh.read(size))
        nodes = []
        while (size := _read_varint(fh)) is not None:
            node = pb.Node()
            node.ParseFromString(fh.read(size))
            nodes.append(node)
    return meta, nodes


def _attrs(node):
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def simulate_chakra(problem, schedule, paths):
    """Dataflow replay of per-rank traces; sends run as early as their dependencies allow."""
    from chakra.schema.protobuf import et_def_pb2 as pb

    n, C = problem.num_npus, problem.num_chunks
    rows = schedule.sorted()
    chunk_of_tag = rows.chunk.tolist()          # contract: comm_tag = row in canonical order
    traces = [_read_et(p)[1] for p in paths]
    state = [[problem.collective.initial_state(v, c, n) for c in range(C)] for v in range(n)]
    reduce_of = {}                               # (rank, recv id) -> comp node
    for v, nodes in enumerate(traces):
        ids = [nd.id for nd in nodes]
        assert ids == list(range(len(nodes)))
        for nd in nodes:
            if nd.type == pb.COMP_NODE:
                recvs = [d for d in nd.data_deps if nodes[d].type == pb.COMM_RECV_NODE]
                assert len(recvs) == 1
                reduce_of[(v, recvs[0])] = nd.id
    sends = Counter()
    recvs = Counter()
    for v, nodes in enumerate(traces):
        for nd in nodes:
            a = _attrs(nd)
            if nd.type == pb.COMM_SEND_NODE:
                sends[(v, a["comm_dst"], a["comm_tag"], a["comm_size"])] += 1
            elif nd.type == pb.COMM_RECV_NODE:
                recvs[(a["comm_src"], v, a["comm_tag"], a["comm_size"])] += 1
    assert sends == recvs and max(sends.values()) == 1 and sum(sends.values()) == len(schedule)

    done = [set() for _ in range(n)]
    mailbox = {}
    pending_reduce = {}
    left = sum(len(t) for t in traces)
    while left:
        progress = False
        for prefer in (pb.COMM_SEND_NODE, pb.COMP_NODE, pb.COMM_RECV_NODE):
            for v, nodes in enumerate(traces):
                for nd in nodes:
                    if nd.id in done[v] or nd.type != prefer or not all(d in done[v] for d in nd.data_deps):
                        continue
                    a = _attrs(nd)
                    if nd.type == pb.COMM_SEND_NODE:
                        c = chunk_of_tag[a["comm_tag"]]
                        assert state[v][c], f"rank {v} sends chunk {c} before holding any of it"
                        mailbox[(v, a["comm_dst"], a["comm_tag"])] = state[v][c]
                    elif nd.type == pb.COMM_RECV_NODE:
                        key = (a["comm_src"], v, a["comm_tag"])
                        if key not in mailbox:
                            continue
                        val, c = mailbox.pop(key), chunk_of_tag[a["comm_tag"]]
                        if (v, nd.id) in reduce_of:
                            pending_reduce[(v, reduce_of[(v, nd.id)])] = (c, val)
                        else:
                            state[v][c] = val
                    else:
                        c, val = pending_reduce.pop((v, nd.id))
                        assert not state[v][c] & val, f"rank {v} counts a contribution to chunk {c} twice"
                        state[v][c] |= val
                    done[v].add(nd.id)
                    left -= 1
                    progress = True
            if progress:
                break
        assert progress, "Chakra traces deadlock"
    for v in range(n):
        for c in range(C):
            req = problem.collective.required_state(v, c, n)
            assert req is None or state[v][c] == req, f"rank {v} chunk {c}: {state[v][c]:b}"


@pytest.mark.parametrize("kind", KINDS)
def test_chakra_round_trip(kind, tmp_path):
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from tacos_bench.export import export_chakra

    problem, schedule = solved("bfs", "mesh4x4", kind)
    paths = export_chakra(problem, schedule, tmp_path / "algo")
    assert [p.name for p in paths] == [f"algo.{r}.et" for r in range(problem.num_npus)]
    meta, _ = _read_et(paths[0])
    assert {a.name: getattr(a, a.WhichOneof("value")) for a in meta.attr}["collective"] == COLL[kind]
    simulate_chakra(problem, schedule, paths)


def test_chakra_simulation_catches_a_missing_dependency(tmp_path):
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from chakra.src.third_party.utils.protolib import encodeMessage

    from tacos_bench.export import export_chakra

    problem, schedule = solved("bfs", "ring8", "all_gather")
    paths = export_chakra(problem, schedule, tmp_path / "algo")
    meta, nodes = _read_et(paths[3])
    relay = next(nd for nd in nodes if nd.type == 5 and nd.data_deps)
    del relay.data_deps[:]
    with open(paths[3], "wb") as fh:
        encodeMessage(fh, meta)
        for nd in nodes:
            encodeMessage(fh, nd)
    with pytest.raises(AssertionError):
        simulate_chakra(problem, schedule, paths)


# ------------------------------------------------------------------------------------------------ run dirs, CLI
def make_run_dir(tmp_path, kind="all_reduce", topo="hetero4x4"):
    from tacos_bench.topology.io import save_topology
    from tacos_bench.rundir import write_record

    problem, schedule = solved("bfs", topo, kind)
    d = tmp_path / "run"
    d.mkdir()
    schedule.to_csv(d / "schedule.csv")
    save_topology(problem.topology, d / "topology.txt")
    write_record(d, {"solver": "bfs", "topology": problem.topology.name, "collective": kind,
                     "num_npus": problem.num_npus, "num_links": problem.num_links, "chunks_per_npu": 1,
                     "chunk_bytes": problem.chunk_bytes, "buffer_mib": 64.0, "seed": 0, "status": "feasible",
                     "valid": True, "collective_time_us": schedule.makespan_us, "topology_file": "topology.txt",
                     "schedule_file": "schedule.csv"})
    return d, problem, schedule


def test_load_run_rebuilds_the_problem(tmp_path):
    d, problem, schedule = make_run_dir(tmp_path)
    p2, s2, rec = load_run(d)
    assert p2.kind == problem.kind and p2.chunk_bytes == problem.chunk_bytes and rec["solver"] == "bfs"
    np.testing.assert_array_equal(p2.link_time_us, problem.link_time_us)
    assert len(s2) == len(schedule)


def test_load_run_rejects_mismatched_record(tmp_path):
    d, _, _ = make_run_dir(tmp_path)
    rec = json.loads((d / "result.json").read_text())
    rec["chunk_bytes"] = 12345
    (d / "result.json").write_text(json.dumps(rec))
    with pytest.raises(ExportError, match="chunk_bytes"):
        load_run(d)
    with pytest.raises(ExportError, match="not a directory"):
        load_run(tmp_path / "nowhere")


def test_cli_msccl_json_chakra(tmp_path):
    from tacos_bench.export.__main__ import main

    d, problem, schedule = make_run_dir(tmp_path)
    out = tmp_path / "algo.xml"
    assert main(["msccl", str(d), "-o", str(out), "--out-of-place"]) == 0
    assert check_msccl_xml(out.read_text(), expect_coll="allreduce").variants == ["outofplace"]
    algo_dir = tmp_path / "algos"
    assert main(["msccl", str(d), "--algo-dir", str(algo_dir), "--name", "hx"]) == 0
    files = sorted(p.name for p in algo_dir.iterdir())
    assert files == ["hx-inplace.xml", "hx-outofplace.xml"]
    for f in algo_dir.iterdir():
        check_msccl_xml(f.read_text())
    assert main(["json", str(d)]) == 0
    assert load_json(d / "schedule.json")[0].num_npus == 16
    if importlib.util.find_spec("chakra") is not None:
        assert main(["chakra", str(d), "-o", str(tmp_path / "et" / "ar")]) == 0
        assert len(list((tmp_path / "et").glob("ar.*.et"))) == 16


def test_cli_module_entry_point_and_errors(tmp_path, capfd):
    d, _, _ = make_run_dir(tmp_path, kind="all_gather", topo="ring8")
    proc = subprocess.run([sys.executable, "-m", "tacos_bench.export", "msccl", str(d), "-o", "-"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    check_msccl_xml(proc.stdout, expect_coll="allgather", expect_ngpus=8)
    bad = subprocess.run([sys.executable, "-m", "tacos_bench.export", "msccl", str(tmp_path / "missing")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error:")


def test_export_to_file_formats(tmp_path):
    problem, schedule = solved("bfs", "ring8", "reduce_scatter")
    msccl_dir = export_to_file("msccl", problem, schedule, tmp_path)
    xmls = sorted(msccl_dir.glob("*.xml"))
    assert len(xmls) == 2
    assert {tuple(check_msccl_xml(p.read_text()).variants) for p in xmls} == {("inplace",), ("outofplace",)}
    assert export_to_file("json", problem, schedule, tmp_path).name == "schedule.json"
    with pytest.raises(TacosError, match="unknown export format"):
        export_to_file("yaml", problem, schedule, tmp_path)
