"""Exports of every collective: MSCCL-IR XML (round-tripped through the independent checker), JSON and Chakra
round trips that carry the kind, root and per-chunk sources/destinations, ASTRA-sim for All-to-All, and the
one-line refusals of what a format cannot express.

The matrix is every collective x (ring(4), mesh2d(2, 3), torus2d(3, 3)) x root 0/2 x 1 and 2 chunks per NPU, on
the greedy's schedules (the root only changes the problem of broadcast, reduce, gather and scatter, so the other
collectives are solved once per root-free key).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from cli import astra_sim_missing

from tacos_bench import Collective, Problem, Schedule
from tacos_bench.collective import KINDS
from tacos_bench.errors import ExportError, TacosError
from tacos_bench.export import export_json, export_msccl, export_to_file, load_json, load_run
from tacos_bench.export.msccl import COLL_NAMES, lower_msccl
from tacos_bench.export.msccl_check import MscclCheckError, check_msccl_xml, parse_algo
from tacos_bench.topology.generators import mesh2d, ring, torus2d

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = {"ring4": lambda: ring(4), "mesh2x3": lambda: mesh2d(2, 3), "torus3x3": lambda: torus2d(3, 3)}
ROOTS = (0, 2)
CPNS = (1, 2)
ROOTED = ("broadcast", "reduce", "gather", "scatter")
CASES = [(k, t, r, c) for k in KINDS for t in TOPOLOGIES for r in ROOTS for c in CPNS]
IDS = ["-".join(map(str, case)) for case in CASES]
# nchunksperloop the runtime needs: N*K where it multiplies the count by N (or the count is everything), K where
# the count is the whole rooted buffer or one rank's share.
LOOP = {"all_gather": "nk", "reduce_scatter": "nk", "all_reduce": "nk", "all_to_all": "nk",
        "broadcast": "k", "reduce": "k", "gather": "k", "scatter": "k"}

_CACHE: dict = {}


def solved(kind: str, topo: str, root: int, cpn: int) -> tuple[Problem, Schedule]:
    """The greedy's verified schedule (cached; root ignored where it changes nothing)."""
    key = (kind, topo, root if kind in ROOTED else 0, cpn)
    if key not in _CACHE:
        from solvers import get_solver

        problem = Problem(TOPOLOGIES[topo](), Collective(kind, cpn, 1, root=key[2]))
        result = get_solver("greedy").solve(problem, seed=0)
        assert result.schedule is not None, result.message
        _CACHE[key] = (problem, result.schedule)
    return _CACHE[key]


def drop_one_send(xml: str) -> str:
    """``xml`` without one send step, renumbered so that only the missing message is wrong.

    Takes the first send nobody waits for (``hasdep="0"``), removes it with the ``nop`` steps that carry its extra
    dependencies, renumbers the later steps of its threadblock and every dependency pointing past it.
    """
    lines = xml.splitlines()
    gpu_of, tb_of = {}, {}
    gpu = tb = None
    for i, ln in enumerate(lines):
        if "<gpu " in ln:
            gpu = int(re.search(r' id="(\d+)"', ln).group(1))
        elif "<tb " in ln:
            tb = int(re.search(r' id="(\d+)"', ln).group(1))
        gpu_of[i], tb_of[i] = gpu, tb
    pick = next(i for i, ln in enumerate(lines) if 'type="s"' in ln and 'hasdep="0"' in ln)
    first = pick
    while 'type="nop"' in lines[first - 1]:
        first -= 1
    gone = pick - first + 1
    g, t = gpu_of[pick], tb_of[pick]
    index = int(re.search(r' s="(\d+)"', lines[first]).group(1))
    out = []
    for i, ln in enumerate(lines):
        if first <= i <= pick:
            continue
        if "<step " in ln and gpu_of[i] == g:
            if tb_of[i] == t and i > pick:
                ln = re.sub(r' s="(\d+)"', lambda m: f' s="{int(m.group(1)) - gone}"', ln, count=1)
            m = re.search(r'depid="(-?\d+)" deps="(-?\d+)"', ln)
            if int(m.group(1)) == t and int(m.group(2)) > index:
                ln = ln.replace(m.group(0), f'depid="{t}" deps="{int(m.group(2)) - gone}"')
        out.append(ln)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ MSCCL
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_msccl_every_collective_round_trip(case):
    kind, topo, root, cpn = case
    problem, schedule = solved(kind, topo, root, cpn)
    n = problem.num_npus
    rooted = kind in ROOTED
    for inplace in (True, False):
        xml = export_msccl(problem, schedule, inplace=inplace)
        # the root is inferred from the traffic, and must agree with the one we asked for
        rep = check_msccl_xml(xml, expect_coll=COLL_NAMES[kind], expect_ngpus=n)
        assert rep.variants == ["inplace" if inplace else "outofplace"]
        assert rep.messages == len(schedule)
        assert rep.root == (root if rooted else None)
        assert check_msccl_xml(xml, root=root).root == (root if rooted else None)
        algo = parse_algo(xml)
        assert algo.nchunksperloop == (n * cpn if LOOP[kind] == "nk" else cpn)
        if rooted:
            assert f"root{root}" in algo.attrs["name"]
            wrong = (root + 1) % n   # any other root fails the simulation (or its buffer rules)
            with pytest.raises(MscclCheckError):
                check_msccl_xml(xml, root=wrong)
        types = set(rep.step_types)
        assert ("rrc" in types) == problem.collective.reduces


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_msccl_checker_rejects_a_dropped_send(case):
    kind, topo, root, cpn = case
    problem, schedule = solved(kind, topo, root, cpn)
    for inplace in (True, False):
        tampered = drop_one_send(export_msccl(problem, schedule, inplace=inplace))
        parse_algo(tampered)   # still well-formed: the simulation, not the parser, must catch it
        # the receive waits forever, or pairs with the link's next message (a chunk mismatch)
        with pytest.raises(MscclCheckError, match="deadlock|never received|postcondition|chunk index|uninit"):
            check_msccl_xml(tampered, root=root)
        with pytest.raises(MscclCheckError):   # and without a root (inference may be what fails)
            check_msccl_xml(tampered)


@pytest.mark.parametrize("kind", ["all_to_all", "gather", "scatter"])
def test_msccl_relays_use_scratch_and_buffers_follow_the_runtime(kind):
    problem, schedule = solved(kind, "torus3x3", 2, 2)
    n, cpn, root = 9, 2, 2
    for inplace in (True, False):
        prog = lower_msccl(problem, schedule, inplace=inplace)
        assert sum(b[2] for b in prog.buffers) > 0      # relays exist on a torus, and go to scratch
        algo = parse_algo(export_msccl(problem, schedule, inplace=inplace))
        for g in algo.gpus:
            want = {("all_to_all", True): (n * cpn, 0), ("all_to_all", False): (n * cpn, n * cpn),
                    ("gather", True): (0, n * cpn), ("gather", False): (cpn, n * cpn if g.id == root else 0),
                    ("scatter", True): (n * cpn, 0), ("scatter", False): (n * cpn if g.id == root else 0, cpn)}
            assert (g.i_chunks, g.o_chunks) == want[(kind, inplace)]


def test_msccl_all_to_all_buffer_mapping():
    problem, schedule = solved("all_to_all", "ring4", 0, 2)
    n, K = 4, 2
    algo = parse_algo(export_msccl(problem, schedule, inplace=False))
    sched = schedule.sorted()
    transfers = set(zip(sched.chunk.tolist(), sched.src.tolist(), sched.dst.tolist()))
    firsts = finals = 0
    for g in algo.gpus:
        for tb in g.tbs:
            for st in tb.steps:
                if st.type == "s" and st.srcbuf == "i":    # leaves the sender's input, ordered by destination
                    d, k = divmod(st.srcoff, K)
                    assert ((g.id * n + d) * K + k, g.id, tb.send) in transfers
                    firsts += 1
                if st.type == "r" and st.dstbuf == "o":    # lands in the receiver's output, ordered by source
                    s_, k = divmod(st.dstoff, K)
                    assert ((s_ * n + g.id) * K + k, tb.recv, g.id) in transfers
                    finals += 1
    assert firsts == finals == n * (n - 1) * K              # every off-diagonal chunk leaves and lands once
    # in place, arrivals into slots whose chunk has not left yet wait in scratch and are copied in afterwards
    problem, schedule = solved("all_to_all", "torus3x3", 0, 2)
    prog = lower_msccl(problem, schedule, inplace=True)
    assert prog.stats()["step_types"].get("cpy", 0) > 0
    check_msccl_xml(export_msccl(problem, schedule, inplace=True))


def test_checker_rejects_a_non_root_writing_outside_its_share():
    problem, schedule = solved("gather", "ring4", 0, 1)
    xml = export_msccl(problem, schedule, inplace=True)
    lines = xml.splitlines()
    # a relay (non-root receiving into scratch) redirected into another rank's slot of the root's layout
    i = next(i for i, ln in enumerate(lines) if 'type="r"' in ln and 'dstbuf="s"' in ln)
    lines[i] = re.sub(r'dstbuf="s" dstoff="\d+"', 'dstbuf="o" dstoff="0"', lines[i])
    with pytest.raises(MscclCheckError, match="outside the slice"):
        check_msccl_xml("\n".join(lines) + "\n", root=0)
    problem, schedule = solved("reduce", "ring4", 0, 1)
    lines = export_msccl(problem, schedule, inplace=False).splitlines()
    i = next(i for i, ln in enumerate(lines) if 'type="rrc"' in ln and 'dstbuf="s"' in ln)
    lines[i] = re.sub(r'dstbuf="s" dstoff="\d+"', 'dstbuf="o" dstoff="0"', lines[i])
    with pytest.raises(MscclCheckError, match="outside"):
        check_msccl_xml("\n".join(lines) + "\n", root=0)


def test_checker_needs_a_root_it_can_tell():
    problem, schedule = solved("broadcast", "ring4", 2, 1)
    xml = export_msccl(problem, schedule)
    with pytest.raises(MscclCheckError, match="root=9 is not a gpu id"):
        check_msccl_xml(xml, root=9)
    # relabelled as a gather, every rank sends: no rank is the root
    with pytest.raises(MscclCheckError, match="cannot tell the root"):
        check_msccl_xml(xml.replace('coll="broadcast"', 'coll="gather"'))


def test_cli_exports_and_checks_a_rooted_run(tmp_path, capsys):
    from tacos_bench.export.__main__ import main
    from tacos_bench.topology.io import save_topology
    from tacos_bench.rundir import write_record

    problem, schedule = solved("scatter", "mesh2x3", 2, 2)
    d = tmp_path / "run"
    d.mkdir()
    schedule.to_csv(d / "schedule.csv")
    save_topology(problem.topology, d / "topology.txt")
    write_record(d, {"solver": "greedy", "topology": problem.topology.name, "collective": "scatter", "root": 2,
                     "num_npus": 6, "num_links": problem.num_links, "chunks_per_npu": 2,
                     "chunk_bytes": problem.chunk_bytes, "buffer_mib": 1.0, "seed": 0, "status": "feasible",
                     "valid": True, "collective_time_us": schedule.makespan_us, "topology_file": "topology.txt",
                     "schedule_file": "schedule.csv"})
    p2, _, _ = load_run(d)
    assert p2.collective.root == 2      # the record's root survives (root 0 would not verify)
    out = tmp_path / "scatter.xml"
    assert main(["msccl", str(d), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["check", str(out), "--root", "2"]) == 0
    assert "root 2" in capsys.readouterr().out
    assert main(["check", str(out), "--root", "1"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["json", str(d)]) == 0
    assert json.loads((d / "schedule.json").read_text())["collective"]["root"] == 2


# ------------------------------------------------------------------------------------------------ JSON
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_json_round_trip_carries_kind_root_and_chunks(case):
    kind, topo, root, cpn = case
    problem, schedule = solved(kind, topo, root, cpn)
    doc = json.loads(export_json(problem, schedule))
    c = doc["collective"]
    assert doc["schema_version"] == 1 and c["kind"] == kind
    assert c["root"] == (root if kind in ROOTED else None)
    assert c["sources"] == problem.sources.tolist() and c["destinations"] == problem.destinations.tolist()
    assert len(c["sources"]) == c["num_chunks"] == problem.num_chunks
    p2, s2 = load_json(doc)
    assert p2.kind == kind and p2.collective.root == problem.collective.root
    assert p2.chunk_bytes == problem.chunk_bytes and p2.num_chunks == problem.num_chunks
    a, b = schedule.sorted(), s2.sorted()
    for col in ("chunk", "src", "dst", "start_us", "end_us", "op"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    if kind in ROOTED:   # a document whose arrays disagree with its collective is refused
        doc["collective"]["sources"] = doc["collective"]["sources"][::-1]
        if doc["collective"]["sources"] != problem.sources.tolist():
            with pytest.raises(ExportError, match="sources"):
                load_json(doc)


def test_json_without_the_new_fields_still_loads():
    problem, schedule = solved("all_reduce", "ring4", 0, 1)
    doc = json.loads(export_json(problem, schedule))
    for key in ("root", "overlap", "sources", "destinations"):
        del doc["collective"][key]
    assert load_json(doc)[0].kind == "all_reduce"


# ------------------------------------------------------------------------------------------------ Chakra
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_chakra_round_trip_carries_kind_and_root(case, tmp_path):
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from test_export import _read_et, simulate_chakra

    from tacos_bench.export import export_chakra

    kind, topo, root, cpn = case
    problem, schedule = solved(kind, topo, root, cpn)
    paths = export_chakra(problem, schedule, tmp_path / "algo")
    meta, _ = _read_et(paths[0])
    attrs = {a.name: a for a in meta.attr}
    assert attrs["collective"].string_val == COLL_NAMES[kind]
    assert attrs["collective_kind"].string_val == kind
    assert attrs["root"].int64_val == (root if kind in ROOTED else -1)
    assert attrs["chunks_per_npu"].int64_val == cpn and attrs["num_chunks"].int64_val == problem.num_chunks
    assert list(attrs["chunk_sources"].int64_list.values) == problem.sources.tolist()
    assert list(attrs["chunk_destinations"].int64_list.values) == problem.destinations.tolist()
    simulate_chakra(problem, schedule, paths)   # matching, no deadlock, the postcondition


# ------------------------------------------------------------------------------------------------ ASTRA-sim
@pytest.mark.parametrize("kind", ["broadcast", "reduce", "gather", "scatter"])
def test_astra_sim_refuses_what_it_cannot_run_in_one_line(kind, tmp_path):
    from tacos_bench.export import export_astra_sim

    problem, schedule = solved(kind, "ring4", 2, 1)
    for call in (lambda: export_astra_sim(problem, schedule, tmp_path / "b"),
                 lambda: export_to_file("astra-sim", problem, schedule, tmp_path)):
        with pytest.raises(ExportError, match=f"cannot export {kind} to ASTRA-sim") as e:
            call()
        msg = str(e.value)
        assert isinstance(e.value, TacosError) and "\n" not in msg and "msccl, json or chakra" in msg
    assert not (tmp_path / "b").exists() and not (tmp_path / "astra-sim").exists()


_ASTRA_MISSING = astra_sim_missing()


@pytest.mark.skipif(_ASTRA_MISSING is not None, reason=f"ASTRA-sim run skipped: {_ASTRA_MISSING}")
@pytest.mark.parametrize("topo", list(TOPOLOGIES))
@pytest.mark.parametrize("cpn", CPNS)
def test_astra_sim_runs_all_to_all_at_our_time(topo, cpn, tmp_path):
    from tacos_bench.export.astra_sim import causal_depth, export_astra_sim, run_bundle
    from tacos_bench.verify import verify

    problem, schedule = solved("all_to_all", topo, 0, cpn)
    bundle = export_astra_sim(problem, schedule, tmp_path / "bundle")
    system = json.loads((bundle / "system.json").read_text())
    assert system["all-to-all-implementation-custom"] == ["chakra/algo"]
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["collective"]["comm_size"] == problem.chunk_bytes * problem.num_npus * cpn
    run = run_bundle(bundle, timeout=120)   # the binary: $ASTRA_SIM, else the workspace's prebuilt one
    assert len(run.finish_ns) == problem.num_npus
    ours = verify(problem, schedule).collective_time_us
    # ASTRA-sim truncates each hop to whole ns: within 1 ns per transfer on the longest chain
    assert abs(run.time_us - ours) * 1000 <= causal_depth(problem, schedule) + 1e-6
