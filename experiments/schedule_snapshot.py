"""A snapshot of schedule hashes: proof that a refactoring changed no schedule.

    python experiments/schedule_snapshot.py -o /tmp/before.json          # before the change
    python experiments/schedule_snapshot.py --check /tmp/before.json     # after it: exit 1 on any difference

Each entry is ``<hash>|<makespan µs>`` (or the refusal / status text), so ``--check`` also says which changed
schedules got faster or slower, and by how much (a snapshot written before makespans were kept compares by hash).

Every deterministic backend (the greedy family with its options, the baselines, the composed collectives,
the repair after a fault) solves a fixed grid of small problems; each schedule is written as ``schedule.csv``
bytes (the public format) and hashed. Exact backends are left out: their search is timed and multi-threaded,
so their schedules are not a function of the input alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

TOPOS = ("ring5", "mesh3x4", "torus4x4", "hetero2x2x4", "hetero_mesh4x4", "random12d3s1", "unequal2-3-4",
         "three_tier2x2x2", "hypercube8")
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "gather", "scatter", "all_to_all")
GREEDY_VARIANTS = (
    ("greedy", {}),
    ("greedy", {"chunk_order": "rarest", "matching": "maximum"}),
    ("greedy", {"restarts": 3}),
    ("greedy", {"imports": "near", "link_order": "fewest_first"}),
    ("greedy", {"duplicates": True, "preempt": True, "window": 2}),
    ("greedy_plus", {}),
    ("hier", {}),
)
BASELINES = ("bfs", "ring", "direct", "rhd", "dbt", "pairwise", "bruck", "binomial", "chain")


def _digest(schedule, problem) -> str:
    from tacos_bench.schedule import Schedule

    if not isinstance(schedule, Schedule):  # a compact schedule: hash its rows in the public format
        schedule = schedule.to_schedule()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "schedule.csv"
        schedule.to_csv(path)
        return f"{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}|{float(schedule.makespan_us):.6f}"


def _split(entry):
    """``(hash, makespan or None)`` of a snapshot entry."""
    if entry is None or "|" not in entry:
        return entry, None
    h, ms = entry.split("|", 1)
    try:
        return h, float(ms)
    except ValueError:
        return entry, None


def compare(ref: dict, snap: dict) -> dict:
    """The keys of ``snap`` against ``ref``: ``same``, ``faster`` / ``slower`` (with their ratios), ``other``
    (a refusal, a status, or a snapshot without makespans), ``missing`` (in one only)."""
    out = {"same": [], "faster": [], "slower": [], "other": [], "missing": []}
    for k in sorted(set(ref) | set(snap)):
        if k not in ref or k not in snap:
            out["missing"].append(k)
            continue
        (ha, ma), (hb, mb) = _split(ref[k]), _split(snap[k])
        if ha == hb:
            out["same"].append(k)
        elif ma is not None and mb is not None and mb < ma * (1 - 1e-9):
            out["faster"].append((k, mb / ma))
        elif ma is not None and mb is not None and mb > ma * (1 + 1e-9):
            out["slower"].append((k, mb / ma))
        else:
            out["other"].append(k)
    return out


def cases():
    """(key, solver, options, topology name, collective kwargs) of the grid."""
    for topo in TOPOS:
        for kind in KINDS:
            for cpn in (1, 2):
                coll = {"kind": kind, "chunks_per_npu": cpn, "buffer_mib": 16.0,
                        "root": 1 if kind in ("broadcast", "reduce", "gather", "scatter") else 0}
                for seed in (0, 1):
                    for solver, opts in GREEDY_VARIANTS:
                        tag = ",".join(f"{k}={v}" for k, v in sorted(opts.items()))
                        yield (f"{topo}|{kind}|{cpn}|{solver}[{tag}]|s{seed}", solver, {**opts, "seed": seed},
                               topo, coll)
                for solver in BASELINES:
                    yield f"{topo}|{kind}|{cpn}|{solver}", solver, {}, topo, coll


def snapshot() -> dict[str, str]:
    from solvers import get_solver
    from tacos_bench import Collective, Problem
    from tacos_bench.errors import TacosError
    from tacos_bench.topology.named import named_topology

    out: dict[str, str] = {}
    topos = {}
    for key, solver, opts, topo, coll in cases():
        t = topos.setdefault(topo, named_topology(topo))
        p = Problem(t, Collective(**coll))
        s = get_solver(solver)
        if not s.supports(p.kind):
            continue
        try:
            res = s.solve(p, **opts)
        except TacosError as e:  # a refusal is part of the behaviour too
            out[key] = "error: " + str(e).split("\n")[0]
            continue
        out[key] = _digest(res.schedule, p) if res.schedule is not None else f"status {res.status}"
    out.update(_engines())
    out.update(_repairs())
    out.update(_fabrics())
    out.update(_larger())
    return out


FABRICS = ("switched8", "switched8_nvls", "switched8_sf", "leafspine2x4_2to1", "leafspine2x4_sharp", "dgx_h100x2")
# greedy_plus with single candidates switched off: every option path of the portfolio
PLUS_VARIANTS = ({}, {"tacos_candidate": False, "rarest_candidate": False}, {"decompose": False, "tree_candidate": False},
                 {"baseline_candidates": False}, {"relabel_tries": 0, "reserve_tries": 0, "broadcast_reserve_tries": 0})


def _solve_digest(solver, opts, p) -> str:
    from solvers import get_solver
    from tacos_bench.errors import TacosError

    s = get_solver(solver)
    if not s.supports(p.kind):
        return "unsupported"
    try:
        res = s.solve(p, **opts)
    except TacosError as e:
        return "error: " + str(e).split("\n")[0]
    return _digest(res.schedule, p) if res.schedule is not None else f"status {res.status}"


def _fabrics() -> dict[str, str]:
    """Switched fabrics: the greedy family, its candidate switches, the baselines and a repair."""
    from solvers import get_solver
    from solvers.repair import repair
    from tacos_bench import Collective, Problem
    from tacos_bench.errors import TacosError
    from tacos_bench.faults import Fault
    from tacos_bench.topology.named import named_topology
    import numpy as np

    out = {}
    for topo in FABRICS:
        t = named_topology(topo)
        for kind in KINDS:
            for cpn in (1, 2):
                p = Problem(t, Collective(kind, cpn, 16.0, root=1 if kind in ("broadcast", "reduce", "gather",
                                                                             "scatter") else 0))
                for seed in (0, 1):
                    out[f"fabric|{topo}|{kind}|{cpn}|greedy|s{seed}"] = _solve_digest("greedy", {"seed": seed}, p)
                    for v in PLUS_VARIANTS:
                        tag = ",".join(f"{k}={x}" for k, x in sorted(v.items()))
                        out[f"fabric|{topo}|{kind}|{cpn}|greedy_plus[{tag}]|s{seed}"] = _solve_digest(
                            "greedy_plus", {**v, "seed": seed}, p)
                for b in BASELINES + ("nvls", "sharp"):
                    out[f"fabric|{topo}|{kind}|{cpn}|{b}"] = _solve_digest(b, {}, p)
        for kind in ("all_gather", "broadcast", "scatter", "all_to_all"):
            p = Problem(t, Collective(kind, 1, 16.0, root=1))
            for solver in ("greedy", "greedy_plus"):
                try:
                    healthy = get_solver(solver).solve(p).schedule
                    link = int(np.flatnonzero(t.src == 0)[0])   # NPU 0's first out-link (its switch port)
                    rep = repair(p, healthy, Fault(healthy.makespan_us / 2, links=((int(t.src[link]),
                                                                                      int(t.dst[link])),)), solver)
                    out[f"fabric_repair|{topo}|{kind}|{solver}"] = _digest(rep.schedule, p)
                except TacosError as e:
                    out[f"fabric_repair|{topo}|{kind}|{solver}"] = "error: " + str(e).split("\n")[0]
    return out


def _larger() -> dict[str, str]:
    """Problems on which greedy_plus's costlier candidates run (reservations, relabelled copies, trees, tiers),
    with its candidate switches one at a time."""
    from tacos_bench import Collective, Problem
    from tacos_bench.topology.named import named_topology

    out = {}
    for topo, kind, cpn, root in (("hetero64", "broadcast", 8, 5), ("hetero64", "scatter", 1, 5),
                                  ("hetero64", "gather", 1, 3), ("hetero64", "reduce", 8, 5),
                                  ("hetero_mesh4x4", "broadcast", 8, 5), ("hetero_mesh4x4", "all_gather", 4, 0),
                                  ("hetero64", "all_gather", 2, 0), ("hetero64", "all_reduce", 1, 0),
                                  ("torus8x8", "broadcast", 8, 7), ("random16d3s0", "reduce", 4, 1),
                                  ("random16d3s0", "all_to_all", 1, 0), ("hetero64", "all_to_all", 1, 0),
                                  ("three_tier2x2x2", "reduce_scatter", 2, 0)):
        p = Problem(named_topology(topo), Collective(kind, cpn, 64.0, root=root))
        for v in PLUS_VARIANTS:
            tag = ",".join(f"{k}={x}" for k, x in sorted(v.items()))
            out[f"larger|{topo}|{kind}|{cpn}|r{root}|greedy_plus[{tag}]"] = _solve_digest("greedy_plus", v, p)
        out[f"larger|{topo}|{kind}|{cpn}|r{root}|greedy"] = _solve_digest("greedy", {}, p)
    return out


def _engines() -> dict[str, str]:
    """The All-Gather engines and the compact output, which no option of a backend selects alone."""
    from solvers.greedy import GreedyPlusSolver, greedy_all_gather
    from tacos_bench import Collective, Problem
    from tacos_bench.topology.named import named_topology

    out = {}
    for topo in ("torus4x4", "hetero2x2x4", "random12d3s1", "three_tier2x2x2"):
        for cpn in (1, 3):
            p = Problem(named_topology(topo), Collective("all_gather", cpn, 16.0))
            for engine in ("classic", "scale", "tiered"):
                for output in ("table", "compact"):
                    if output == "compact" and engine != "scale":
                        continue
                    opts = GreedyPlusSolver.Options.parse({}) if engine == "tiered" else None
                    s = greedy_all_gather(p, seed=2, engine=engine, output=output, opts=opts)
                    out[f"engine|{topo}|{cpn}|{engine}|{output}"] = _digest(s, p)
    from solvers.greedy.decomposition import hier_compact_all_gather  # noqa: moved in the families refactor

    for topo in ("hetero2x2x4", "three_tier2x2x2"):
        p = Problem(named_topology(topo), Collective("all_gather", 2, 16.0))
        out[f"decomposition|{topo}"] = _digest(hier_compact_all_gather(p, in_memory=True), p)
    return out


def _repairs() -> dict[str, str]:
    from solvers import get_solver
    from solvers.repair import repair
    from tacos_bench import Collective, Problem
    from tacos_bench.faults import Fault
    from tacos_bench.topology.named import named_topology

    out = {}
    for topo in ("torus4x4", "hetero2x2x4"):
        for kind in ("all_gather", "gather", "scatter", "all_to_all", "broadcast"):
            p = Problem(named_topology(topo), Collective(kind, 1, 16.0, root=1))
            healthy = get_solver("greedy").solve(p).schedule
            rep = repair(p, healthy, Fault(healthy.makespan_us / 2, links=((0, 1),)))
            sched = getattr(rep, "schedule", rep)
            out[f"repair|{topo}|{kind}"] = _digest(sched, p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", help="write the snapshot (JSON) here")
    ap.add_argument("--check", help="compare with this snapshot; exit 1 on any difference")
    ap.add_argument("--against", help="with --check: compare this stored snapshot instead of taking one")
    a = ap.parse_args(argv)
    if a.against and not a.check:
        ap.error("--against needs --check")
    snap = {} if a.against else snapshot()
    if not a.against:
        print(f"{len(snap)} schedules hashed")
    if a.out:
        Path(a.out).write_text(json.dumps(snap, indent=0, sort_keys=True))
    if a.check:
        ref = json.loads(Path(a.check).read_text())
        if a.against:
            snap = json.loads(Path(a.against).read_text())
        c = compare(ref, snap)
        for k, r in c["slower"][:30]:
            print(f"slower: {k}: x{r:.4f}")
        for k, r in c["faster"][:30]:
            print(f"faster: {k}: x{r:.4f}")
        for k in (c["other"] + c["missing"])[:30]:
            print(f"differs: {k}: {ref.get(k)} -> {snap.get(k)}")
        diff = len(ref.keys() | snap.keys()) - len(c["same"])
        print(f"{diff} of {len(ref)} differ: {len(c['faster'])} faster, {len(c['slower'])} slower, "
              f"{len(c['other'])} otherwise (refusals, statuses, no makespan), {len(c['missing'])} in one only")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
