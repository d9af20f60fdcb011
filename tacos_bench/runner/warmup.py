"""Compile every numba kernel ahead of time into numba's on-disk cache.

    python -m tacos_bench.runner.warmup        # what `make install` runs after pip

numba compiles a kernel the first time a process calls it and caches the machine code next to the
sources; later processes load it in well under a second. Running this once at install time means no run,
benchmark or test ever pays for the compilation inside its own wall time. It solves tiny problems with
every backend so that each kernel (greedy counted/listed/scale, bounds, baselines, composition, the
compact verifier) is compiled exactly as the real runs call it.
"""

from __future__ import annotations

import sys
import time


def warm_all(verbose: bool = True) -> dict[str, float]:
    """Compile (or load) every kernel; returns the seconds per part."""
    from solvers import get_solver
    from solvers.greedy import warmup as greedy_warmup
    from tacos_bench import Collective, Problem
    from tacos_bench.bounds import lower_bounds
    from tacos_bench.topology.generators import hetero_cluster, ring

    parts: dict[str, float] = {}

    def part(name, fn):
        t0 = time.perf_counter()
        fn()
        parts[name] = time.perf_counter() - t0
        if verbose:
            print(f"  {name:<12} {parts[name]:6.1f} s", flush=True)

    het = hetero_cluster(2, 1, 2)
    part("greedy", greedy_warmup)

    def fabric():
        from solvers.greedy.fabric import warmup_fabric
        from tacos_bench.topology.fabrics import switched

        warmup_fabric()
        # unicast chunks (gather, scatter, all-to-all) have a kernel of their own
        get_solver("greedy_plus").solve(Problem(switched(3), Collective("all_to_all", 1, 1)))
        # a chunk table on a rail-optimized cluster: greedy_plus's candidates for tables (rail slots among them)
        from tacos_bench.moe import dispatch_demand, moe_routing
        from tacos_bench.topology.fabrics import rail_cluster

        demand = dispatch_demand(moe_routing(4, tokens_per_npu=2, hidden=8, experts=4, top_k=2, seed=0))
        get_solver("greedy_plus").solve(Problem(rail_cluster(2, 2), Collective("moe_dispatch", demand=demand)))

    part("fabric", fabric)

    def reserve():
        from solvers.greedy.reserve import warmup as reserve_warmup

        reserve_warmup()

    part("reserve", reserve)
    def bounds():
        import numpy as np

        from tacos_bench.bounds import _drain_infeasible

        for t in (ring(4), het):
            for k in ("all_gather", "all_reduce", "broadcast", "all_to_all"):
                lower_bounds(Problem(t, Collective(k, 1, 1)))
        # the drain bound's check for one makespan (the tests compare the search with it)
        one, ptr = np.ones(1), np.arange(2, dtype=np.int64)
        _drain_infeasible(1.0, 1.0, one, one, ptr, one, ptr, one)

    part("bounds", bounds)
    def flow():
        from tacos_bench.bounds.flow import lb_flow_us

        for method in ("lp", "garg_koenemann"):
            lb_flow_us(Problem(ring(4), Collective("all_to_all", 1, 1)), method=method)

    part("flow bound", flow)
    part("baselines", lambda: [get_solver(n).solve(Problem(het, Collective("all_reduce", 1, 1)))
                               for n in ("ring", "direct", "rhd", "dbt", "bfs")]
         + [get_solver(n).solve(Problem(het, Collective(k, 1, 1)))
            for n, k in (("pairwise", "all_to_all"), ("bruck", "all_to_all"), ("binomial", "scatter"),
                         ("chain", "broadcast"), ("direct", "all_to_all"))])

    def repair():
        from solvers.compose import warm_retime
        from solvers.repair import repair as run_repair
        from tacos_bench.faults import Fault

        warm_retime()
        for kind in ("all_gather", "all_to_all"):
            p = Problem(ring(4), Collective(kind, 1, 1))
            h = get_solver("greedy").solve(p).schedule
            run_repair(p, h, Fault(h.makespan_us / 2, links=((0, 1),)))

    part("repair", repair)

    def faulted():
        # a run through a fault builds its arrays from the surviving links (writable, where a topology's
        # are read-only), which numba compiles as other signatures of the same kernels; run the real
        # pipeline on a tiny torus so none of them compiles inside a run
        import tempfile

        from .pipeline import run_job

        def run(cfg, d):
            rec = run_job(cfg, d)
            if rec["status"] == "error":  # a warm-up that fails would leave the compile to the first real run
                raise RuntimeError(f"warm-up run failed: {rec.get('error')}")

        with tempfile.TemporaryDirectory() as d:
            fabric = {"kind": "named", "name": "leafspine2x2"}   # NPUs 0-3, leaves 4-5, spines 6-7
            for solver in ("greedy", "greedy_plus"):
                for kind in ("all_gather", "broadcast", "gather", "scatter", "all_to_all"):
                    run({"solver": {"name": solver}, "topo": {"kind": "torus", "dims": [3, 3]},
                         "collective": {"kind": kind, "buffer_mib": 1}, "seed": 0,
                         "fault": {"at_fraction": 0.5, "links": [[0, 1, "both"]]}}, d)
                for kind in ("all_gather", "scatter"):  # a switched fabric resumes on the fabric kernels
                    run({"solver": {"name": solver}, "topo": fabric, "collective": {"kind": kind, "buffer_mib": 1},
                         "seed": 0, "fault": {"at_fraction": 0.5, "links": [[4, 6, "both"]]}}, d)
                run({"solver": {"name": solver}, "topo": {"kind": "torus", "dims": [3, 3], "failed_links": [[0, 1]]},
                     "collective": {"kind": "all_to_all", "buffer_mib": 1}, "seed": 0}, d)
            run({"solver": {"name": "greedy"}, "topo": {"kind": "torus", "dims": [3, 3], "failed_npus": [4]},
                 "collective": {"kind": "all_gather", "buffer_mib": 1}, "seed": 0}, d)
            run({"solver": {"name": "greedy"}, "topo": {"kind": "torus", "dims": [3, 3]},
                 "collective": {"kind": "all_gather", "buffer_mib": 1}, "seed": 0,
                 "fault": {"at_fraction": 0.5, "npus": [4]}}, d)
        # survivors cut apart: repairability is then decided pair by pair
        from solvers.repair import repair as run_repair
        from tacos_bench.errors import TopologyError
        from tacos_bench.faults import Fault

        p = Problem(ring(4), Collective("all_gather", 1, 1))
        h = get_solver("greedy").solve(p).schedule
        try:
            run_repair(p, h, Fault(h.makespan_us / 2, links=((0, 1), (1, 0), (1, 2), (2, 1))))
        except TopologyError:
            pass

    part("faults", faulted)

    def compact():
        from solvers.greedy import greedy_all_gather
        from tacos_bench.verify import check

        p = Problem(ring(4), Collective("all_gather", 1, 1))
        check(p, greedy_all_gather(p, engine="scale", output="compact"))
        # wider chunk ids (more than 65,536 chunks) and two link speeds are other signatures
        p = Problem(ring(3), Collective("all_gather", 22_000, 64))
        check(p, greedy_all_gather(p, engine="scale", output="compact"))
        p = Problem(hetero_cluster(2, 2, 4), Collective("all_gather", 1, 1))
        check(p, greedy_all_gather(p, engine="scale"))
        p = Problem(hetero_cluster(4, 4, 8), Collective("all_gather", 1, 1))
        check(p, greedy_all_gather(p, engine="scale"))
        check(p, greedy_all_gather(p, engine="scale", output="compact"))
        # the tier decomposition (greedy_plus, hier at scale), in memory and streamed to disk
        from solvers.greedy.decomposition import hier_compact_all_gather

        p = Problem(hetero_cluster(2, 2, 4), Collective("all_gather", 1, 1))
        check(p, hier_compact_all_gather(p, in_memory=True))
        check(p, hier_compact_all_gather(p))
        # wider link ids (more than 65,536 links), and the search for an NPU left without a chunk
        from tacos_bench.compact import CompactSchedule
        from tacos_bench.schedule import Schedule
        from tacos_bench.topology.generators import fully_connected

        p = Problem(fully_connected(257), Collective("all_gather", 1, 1))
        t = float(p.link_time_us[0])
        check(p, CompactSchedule.from_schedule(p, Schedule.from_rows([(0, 0, 1, 0.0, t, "copy")])))

    part("compact", compact)
    return parts


def main() -> int:
    t0 = time.perf_counter()
    print("compiling the numba kernels into numba's cache (once per installation):", flush=True)
    warm_all()
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
