"""Convert real topologies from peers' repositories to our edge-list format, naming each source.

    python experiments/convert_peer_topologies.py [--out data/topologies/peer]
                                                  [--verify-against /work/.mirror]

Writes one edge list per topology (first line ``N``, then ``src dst bw_GiBps lat_us`` per directed link; the
source, its commit, the function and the unit conversion in ``#`` comments) and ``sources.json`` (the same
provenance plus each source's own published optimum / measured time, read by
``experiments/bench_peer_topologies.py``, ``tests/test_peer_topologies.py`` and ``docs/peer_topologies.md``).

Only point-to-point topologies are converted, exactly: our model has no switch nodes, and unwinding a switch
into direct links changes the problem (docs/peer_topologies.md lists what was left out and why).

Units. The sources give bandwidth in GB/s (10^9 bytes/s); ours is GiB/s (2^30 bytes/s), so every bandwidth is
multiplied by ``GB_TO_GIB = 10^9 / 2^30 = 0.931322574615478515625`` (50 GB/s = 46.566 GiB/s). Latency is
taken as the source gives it (µs; 0 where the source models bandwidth only).

The link data below are transcribed from the sources (data only, no code of theirs is kept here);
``--verify-against DIR`` re-reads each source file at the recorded commit from a git mirror
``DIR/<owner>+<name>/repo`` (``git show COMMIT:PATH``), extracts the literals with ``ast`` (nothing of theirs
is executed) and checks that the transcription and the conversion match them.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "data" / "topologies" / "peer"
GB_TO_GIB = 10**9 / 2**30     # GB/s -> GiB/s (exact in binary: 10^9 / 2^30 = 5^9 / 2^21)
GIB = 2**30                   # the benchmark's All-Gather output buffer: 1 GiB

# ---------------------------------------------------------------------------------------- transcriptions
# ForestColl, topologies.py: MI250_ADJ_MAT[b][c] = number of xGMI links between GCD b and GCD c; mi250_topology()
# adds both directions b->c and c->b with capacity MI250_ADJ_MAT[b][c] * xGMI_BW (xGMI_BW = 50, GB/s).
MI250_ADJ_MAT = [
    [0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0],
    [2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0],
    [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2],
    [0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0],
]
XGMI_GBPS = 50

# SCCL / MSCCL tools, msccl/topologies/nvidia.py: dgx1() links[dst][src] = number of NVLinks (symmetric).
# The per-NVLink bandwidth is not in SCCL's code: 25 GB/s is TE-CCL's teccl/topologies/dgx1.py
# (`speed = 25 / self.chunk_size`, the same matrix), NVLink 2.0 per direction.
DGX1_LINKS = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]
NVLINK_GBPS = 25

# TE-CCL, teccl/topologies/ndv2.py, NDv2.construct_topology, branch `chassis == 2`: two Azure NDv2 nodes
# (each a DGX-1-like hybrid cube-mesh of V100s). Entries are TACCL's beta profile codes; the matrix is
# transposed afterwards (`capacity = list(map(list, zip(*capacity)))`), so NDV2X2_CODES[dst][src] is link
# src -> dst: the two inter-node links are 0 -> 9 and 8 -> 1, one direction each.
NDV2X2_CODES = [
    [0, 23, 46, 46, 23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [23, 0, 46, 23, 0, 46, 0, 0, 107, 0, 0, 0, 0, 0, 0, 0],
    [46, 46, 0, 23, 0, 0, 23, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [46, 23, 23, 0, 0, 0, 0, 46, 0, 0, 0, 0, 0, 0, 0, 0],
    [23, 0, 0, 0, 0, 23, 46, 46, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 46, 0, 0, 23, 0, 46, 23, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 23, 0, 46, 46, 0, 23, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 46, 46, 23, 23, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 23, 46, 46, 23, 0, 0, 0],
    [107, 0, 0, 0, 0, 0, 0, 0, 23, 0, 46, 23, 0, 46, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 46, 46, 0, 23, 0, 0, 23, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 46, 23, 23, 0, 0, 0, 0, 46],
    [0, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 0, 23, 46, 46],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 46, 0, 0, 23, 0, 46, 23],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23, 0, 46, 46, 0, 23],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 46, 46, 23, 23, 0],
]
# the last assignment of each `conversion_map[code]` wins (the 43.47826 and 9.5238 lines are overwritten):
NDV2_GBPS = {23: 50.0, 46: 25.0, 107: 12.5}
# alpha: 1.3e-6 s on the 107 (InfiniBand) links, 0.7e-6 s on the NVLinks
NDV2_ALPHA_US = {23: 0.7, 46: 0.7, 107: 1.3}

# ---------------------------------------------------------------------------------------------- sources
FORESTCOLL = {"repo": "liangyuRain/ForestColl", "commit": "3c13aee84e2934672584bbfeea132d04e470531b",
              "commit_date": "2025-04-22"}
MSCCL_TOOLS = {"repo": "microsoft/msccl-tools", "commit": "030a750fc56e03fb863ffe48268672d84d4cdc7b",
               "commit_date": "2023-04-28", "also_known_as": "microsoft/sccl (same history; github redirects)"}
TECCL = {"repo": "microsoft/TE-CCL", "commit": "c128bf241e5b8bf6ce816b2fe5b8000baacb7c44",
         "commit_date": "2024-08-27"}


def _links_from_symmetric(mult, unit_gbps, lat_us=0.0):
    """Both directions of every pair with a nonzero multiplicity: (src, dst, GB/s, lat_us, multiplicity)."""
    n = len(mult)
    return [(b, c, mult[b][c] * unit_gbps, lat_us, mult[b][c]) for b in range(n) for c in range(n) if mult[b][c]]


def mi250_links():
    return _links_from_symmetric(MI250_ADJ_MAT, XGMI_GBPS)


def dgx1_links():
    # links[dst][src]: the link src -> dst has multiplicity DGX1_LINKS[dst][src]
    n = len(DGX1_LINKS)
    return [(s, d, DGX1_LINKS[d][s] * NVLINK_GBPS, 0.0, DGX1_LINKS[d][s])
            for s in range(n) for d in range(n) if DGX1_LINKS[d][s]]


def ndv2x2_links():
    n = len(NDV2X2_CODES)
    return [(s, d, NDV2_GBPS[NDV2X2_CODES[d][s]], NDV2_ALPHA_US[NDV2X2_CODES[d][s]], NDV2X2_CODES[d][s])
            for s in range(n) for d in range(n) if NDV2X2_CODES[d][s]]


def _us_for_gib(seconds_per_gb: float) -> float:
    """A time the source states for 10^9 bytes, scaled to 2^30 bytes (exact for a bandwidth-only time)."""
    return seconds_per_gb * GIB / 10**9 * 1e6


# Each source's own optimum or measured time for All-Gather. `us_1gib` is the figure for our problem (1 GiB
# output, the source's bandwidths); `value`/`unit` is what the source states.
TOPOLOGIES = {
    "mi250_forestcoll": {
        "title": "AMD MI250 node: 16 GCDs, xGMI",
        "npus": 16,
        "links_fn": mi250_links,
        "source": {**FORESTCOLL, "file": "topologies.py", "function": "mi250_topology(nnode=1)",
                   "data": "MI250_ADJ_MAT, xGMI_BW = 50"},
        "cross_check": {**TECCL, "file": "teccl/topologies/amd.py",
                        "function": "AMD.construct_topology (chassis = 1)",
                        "data": "adjacency_list, gpu_link = 50 / chunk_size: the same 56 links and bandwidths"},
        "code_label": "xGMI links:",
        "link_unit": "xGMI link, 50 GB/s each direction; a GCD pair has 1, 2 or 4 of them",
        "latency": "none in the source (bandwidth-only model): 0 µs",
        "published": [{
            "who": "ForestColl", "what": "throughput optimum (every cut, fluid: any number of chunks)",
            "value": 2400 / 7, "unit": "GB/s algorithmic bandwidth",
            "how": ("ForestColl's own OptimalBranchingsAlgo(mi250_topology(1), capacitated=True)"
                    ".binary_search() -> U = 0.14, k = 3, convertToRuntime = U / (k N) = 0.0029167 s per GB "
                    "(pipeline_allgather.py, same commit; the README's optimal-algbw recipe)"),
            "chunks_per_npu": None,
            "us_1gib": 2**30 / (2400 / 7 * 1e9) * 1e6,
            "us_nominal": 1 / (2400 / 7) * 1e6,  # 1 'unit' of data at the bandwidth numbers read as GiB/s
        }],
    },
    "dgx1_sccl": {
        "title": "NVIDIA DGX-1 (V100) hybrid cube-mesh: 8 GPUs, NVLink",
        "npus": 8,
        "links_fn": dgx1_links,
        "source": {**MSCCL_TOOLS, "file": "msccl/topologies/nvidia.py", "function": "dgx1()",
                   "data": "links (NVLink multiplicities, links[dst][src])"},
        "cross_check": {**TECCL, "file": "teccl/topologies/dgx1.py", "function": "DGX1.construct_topology",
                        "data": "the same matrix times speed = 25 / chunk_size: 25 GB/s per NVLink"},
        "code_label": "NVLinks:",
        "link_unit": "NVLink 2.0, 25 GB/s each direction; a GPU pair has 1 or 2 of them",
        "latency": "none in the source's topology (SCCL's alpha is per step, not per link): 0 µs",
        "published": [{
            "who": "SCCL", "what": "Allgather bandwidth lower bound, beta_bound = 7/6 (x per-GPU input / NVLink bw)",
            "value": 7 / 6, "unit": "beta (time of the per-GPU input over one NVLink)",
            "how": ("dgx1() in msccl/topologies/nvidia.py: `# self.beta_bound = Fraction(7,6)`; SCCL (Cai et al., "
                    "PPoPP 2021) synthesizes Allgather at this cost; 7/6 * (2^30 / 8 B) / (25e9 B/s)"),
            "chunks_per_npu": None,
            "us_1gib": 7 / 6 * (GIB / 8) / 25e9 * 1e6,
            "us_nominal": 7 / 6 * (1 / 8) / 25 * 1e6,
        }],
    },
    "ndv2x2_teccl": {
        "title": "Two Azure NDv2 nodes (2 x 8 V100, DGX-1-like), one InfiniBand link each way",
        "npus": 16,
        "links_fn": ndv2x2_links,
        "source": {**TECCL, "file": "teccl/topologies/ndv2.py", "function": "NDv2.construct_topology (chassis = 2)",
                   "data": "capacity codes 23/46/107 -> conversion_map 50/25/12.5 GB/s, alpha 0.7/1.3 µs"},
        "cross_check": None,
        "code_label": "capacity code",
        "link_unit": ("NVLink pairs at 50 GB/s (2 links) or 25 GB/s (1 link), 0.7 µs; inter-node 0 -> 9 and "
                      "8 -> 1 at 12.5 GB/s, 1.3 µs"),
        "latency": "as the source gives it: 0.7 µs NVLink, 1.3 µs InfiniBand",
        "published": [
            {"who": "TE-CCL", "what": "All-Gather, 1 GB output, 1 chunk per GPU (MILP, fastest-link epochs)",
             "value": 43750.0, "unit": "µs for 10^9 bytes",
             "how": ("teccl/examples/experiments/output_provided/NDv2_output/2_chassis/AllGather/Fast/1GB.json: "
                     "4-Collective_Finish_Time = 0.04375 s (35 epochs of 1.25 ms; alpha below the "
                     "alpha_threshold is taken as 0, so the figure is bandwidth-only)"),
             "chunks_per_npu": 1, "us_1gib": _us_for_gib(0.04375), "us_nominal": 43750.0},
            {"who": "TACCL (run by TE-CCL's authors)", "what": "All-Gather, 1 GB output",
             "value": 53766.7, "unit": "µs for 10^9 bytes",
             "how": ("teccl/examples/experiments_output/tables/individual_tables/TACCL_NDv2_2_chassis_AllGather.csv, "
                     "first row (1GB): TACCL Collective Time 53766.7 µs; scaled by 2^30/10^9 (approximate: TACCL's "
                     "time includes its own alphas)"),
             "chunks_per_npu": None, "us_1gib": _us_for_gib(0.0537667), "us_nominal": 53766.7},
        ],
    },
}

LEFT_OUT = [
    ("ForestColl a100_topology(n), mi250_topology(n >= 2)", "NVSwitch / InfiniBand switch nodes"),
    ("MSCCL tools dgx_a100(), generic hub_and_spoke(), star(non_blocking=False)", "switch constraints"),
    ("MSCCL tools amd4(), amd8()", "link weights without a stated unit"),
    ("TE-CCL DGX2 (2 chassis), NDv2 (4 chassis), AMD (2 chassis)", "switch nodes"),
    ("TACCL examples/topo/*.json", "profiles for its sketches (alpha/beta per message size), not a link list; "
     "its NDv2 node is the DGX-1 matrix above"),
]


# ---------------------------------------------------------------------------------------------- writing
def _fmt(x: float) -> str:
    return repr(float(x))


def edge_list_text(name: str, spec: dict) -> str:
    src = spec["source"]
    links = spec["links_fn"]()
    lines = [f"# name: {name}",
             f"# {spec['title']}",
             f"# source: https://github.com/{src['repo']} @ {src['commit']} ({src['commit_date']})",
             f"#   file {src['file']}, function {src['function']}; {src['data']}",
             f"# links: {spec['link_unit']}",
             f"# latency: {spec['latency']}",
             "# units: bandwidth GiB/s = source GB/s x 10^9 / 2^30 (GB_TO_GIB = 0.931322574615478515625); "
             "latency µs",
             "# written by experiments/convert_peer_topologies.py (do not edit by hand; re-run it)",
             "# trailing comment of each link: its bandwidth in the source's GB/s and the source's entry",
             str(spec["npus"])]
    for s, d, gbps, lat, code in links:
        lines.append(f"{s} {d} {_fmt(gbps * GB_TO_GIB)} {_fmt(lat)}  # {gbps:g} GB/s ({spec['code_label']} {code})")
    return "\n".join(lines) + "\n"


def sources_record() -> dict:
    out = {"units": {"GB_TO_GIB": GB_TO_GIB, "bandwidth": "GiB/s = GB/s x 10^9 / 2^30", "latency": "µs",
                     "buffer": "All-Gather output 1 GiB (2^30 bytes)"},
           "topologies": {}, "left_out": [{"what": a, "why": b} for a, b in LEFT_OUT]}
    for name, spec in TOPOLOGIES.items():
        links = spec["links_fn"]()
        out["topologies"][name] = {
            "file": f"{name}.txt", "title": spec["title"], "npus": spec["npus"], "links": len(links),
            "source": spec["source"], "cross_check": spec["cross_check"], "link_unit": spec["link_unit"],
            "latency": spec["latency"],
            "links_GBps": sorted({g for _, _, g, _, _ in links}),
            "published": spec["published"],
        }
    return out


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, spec in TOPOLOGIES.items():
        p = out / f"{name}.txt"
        p.write_text(edge_list_text(name, spec), encoding="utf-8")
        written.append(p)
    p = out / "sources.json"
    p.write_text(json.dumps(sources_record(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    written.append(p)
    return written


# ---------------------------------------------------------------------------- checking against the sources
class _Arith(ast.NodeVisitor):
    """Evaluate the arithmetic of a source expression (numbers, + - * / //, names given in ``env``)."""

    def __init__(self, env):
        self.env = env

    def visit_Constant(self, n):
        return n.value

    def visit_Name(self, n):
        return self.env[n.id]

    def visit_Attribute(self, n):
        return self.env[n.attr]

    def visit_BinOp(self, n):
        a, b = self.visit(n.left), self.visit(n.right)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
               ast.FloorDiv: lambda: a // b}
        return ops[type(n.op)]()

    def visit_List(self, n):
        return [self.visit(e) for e in n.elts]

    def visit_Dict(self, n):
        return {self.visit(k): self.visit(v) for k, v in zip(n.keys, n.values)}

    def generic_visit(self, n):
        raise ValueError(f"unexpected expression {ast.dump(n)[:80]}")


def _git_show(mirror_root: Path, src: dict, path: str) -> str | None:
    gitdir = mirror_root / src["repo"].replace("/", "+") / "repo"
    if not gitdir.exists():
        return None
    r = subprocess.run(["git", "--git-dir", str(gitdir), "show", f"{src['commit']}:{path}"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{src['repo']}: cannot read {path} at {src['commit']}: {r.stderr.strip()}")
    return r.stdout


def _assigns(tree, target: str):
    """Every ``target = value`` / ``target[k] = value`` in source order, as (key or None, value node)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Name) and t.id == target) or (
                        isinstance(t, ast.Attribute) and t.attr == target):   # x = ... or self.x = ...
                    yield None, node.value, node
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == target:
                    try:
                        key = ast.literal_eval(t.slice)
                    except ValueError:   # a computed key (adjacency_list[16 + i]): not a transcribed entry
                        key = ast.unparse(t.slice)
                    yield key, node.value, node


def _function(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def verify(mirror_root: Path) -> list[str]:
    """Compare the transcriptions with the source files; returns what was checked (raises on a mismatch)."""
    done = []

    def need(cond, what):
        if not cond:
            raise SystemExit(f"transcription differs from the source: {what}")
        done.append(what)

    text = _git_show(mirror_root, FORESTCOLL, "topologies.py")
    if text is not None:
        tree = ast.parse(text)
        mat = ast.literal_eval(next(v for _, v, _ in _assigns(tree, "MI250_ADJ_MAT")))
        bw = ast.literal_eval(next(v for _, v, _ in _assigns(tree, "xGMI_BW")))
        need(mat == MI250_ADJ_MAT and bw == XGMI_GBPS, "ForestColl MI250_ADJ_MAT and xGMI_BW")
    text = _git_show(mirror_root, MSCCL_TOOLS, "msccl/topologies/nvidia.py")
    if text is not None:
        fn = _function(ast.parse(text), "dgx1")
        need(ast.literal_eval(next(v for _, v, _ in _assigns(fn, "links"))) == DGX1_LINKS, "SCCL dgx1() links")
    text = _git_show(mirror_root, TECCL, "teccl/topologies/dgx1.py")
    if text is not None:
        fn = _function(ast.parse(text), "construct_topology")
        speed = _Arith({"chunk_size": 1}).visit(next(v for _, v, _ in _assigns(fn, "speed")))
        cap = _Arith({"speed": speed}).visit(next(v for k, v, _ in _assigns(fn, "capacity") if k is None))
        need(speed == NVLINK_GBPS and cap == [[m * NVLINK_GBPS for m in row] for row in DGX1_LINKS],
             "TE-CCL DGX1 capacity = SCCL dgx1() x 25 GB/s")
    text = _git_show(mirror_root, TECCL, "teccl/topologies/amd.py")
    if text is not None:
        fn = _function(ast.parse(text), "construct_topology")
        gpu_link = _Arith({"chunk_size": 1}).visit(next(v for _, v, _ in _assigns(fn, "gpu_link")))
        adj = {k: ast.literal_eval(v) for k, v, _ in _assigns(fn, "adjacency_list") if isinstance(k, int) and k < 16}
        mat = [[adj[i].get(j, 0) for j in range(16)] for i in range(16)]
        need(gpu_link == XGMI_GBPS and mat == MI250_ADJ_MAT, "TE-CCL AMD (1 chassis) = ForestColl MI250")
    text = _git_show(mirror_root, TECCL, "teccl/topologies/ndv2.py")
    if text is not None:
        fn = _function(ast.parse(text), "construct_topology")
        branch = next(n for n in ast.walk(fn) if isinstance(n, ast.If)
                      and isinstance(n.test, ast.Compare) and ast.unparse(n.test) == "chassis == 2")
        cap = ast.literal_eval(next(v for k, v, _ in _assigns(branch, "capacity") if k is None))
        conv = {}
        for k, v, _ in sorted(_assigns(fn, "conversion_map"), key=lambda x: x[2].lineno):
            if k is not None:
                conv[k] = _Arith({"chunk_size": 1}).visit(v)   # later assignments overwrite earlier ones
        transposed = "capacity = list(map(list, zip(*capacity)))" in ast.unparse(fn)
        alpha_src = ast.unparse(fn)
        need(cap == NDV2X2_CODES and transposed, "TE-CCL NDv2 2-chassis capacity codes (transposed)")
        need({k: v for k, v in conv.items() if k} == NDV2_GBPS, "TE-CCL conversion_map 23/46/107 -> 50/25/12.5")
        need("1.3 * pow(10, -6)" in alpha_src and "0.7 * pow(10, -6)" in alpha_src, "TE-CCL NDv2 alphas 1.3/0.7 µs")
    text = _git_show(mirror_root, TECCL,
                     "teccl/examples/experiments/output_provided/NDv2_output/2_chassis/AllGather/Fast/1GB.json")
    if text is not None:
        t = json.loads(text)["4-Collective_Finish_Time"]
        need(abs(t * 1e6 - TOPOLOGIES["ndv2x2_teccl"]["published"][0]["value"]) < 1e-6, "TE-CCL 1GB finish time")
    text = _git_show(mirror_root, TECCL,
                     "teccl/examples/experiments_output/tables/individual_tables/TACCL_NDv2_2_chassis_AllGather.csv")
    if text is not None:
        first = float(text.splitlines()[1].split(",")[0])
        need(first == TOPOLOGIES["ndv2x2_teccl"]["published"][1]["value"], "TACCL 1GB collective time")
    return done


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="directory for the edge lists and sources.json")
    ap.add_argument("--verify-against", default=None, metavar="DIR",
                    help="git mirrors DIR/<owner>+<name>/repo of the sources: check the transcriptions")
    args = ap.parse_args(argv)
    if args.verify_against:
        done = verify(Path(args.verify_against))
        print(f"checked against the sources ({len(done)}): " + "; ".join(done) if done
              else f"no source mirror found under {args.verify_against}: nothing checked")
    for p in write_all(Path(args.out)):
        print(f"wrote {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}")
    sys.path.insert(0, str(ROOT))
    from tacos_bench.topology.io import load_topology

    for name in TOPOLOGIES:
        t = load_topology(Path(args.out) / f"{name}.txt")
        t.check_strongly_connected()
        print(f"  {name}: {t.num_npus} NPUs, {t.num_links} directed links, "
              f"{sorted({round(float(b), 6) for b in t.bw_GiBps})} GiB/s")


if __name__ == "__main__":
    main()
