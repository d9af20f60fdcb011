"""Synthesis speed on demands for per-iteration use (issue 33 item 8): one mixture-of-experts layer of
DeepSeek-V3's shape (4,096 tokens per GPU, hidden 7,168 in bf16, top-8 of 64 experts, one expert per GPU).

Cases:

- ``a2av_pairs``: the layer's per-pair byte matrix as All-to-Allv, one chunk per pair, ``solver=greedy`` on the
  64-GPU ``dgx_h100x8``;
- ``dispatch``: moe_dispatch itself (each token multicast to the GPUs of its experts) with ``greedy_plus``, its
  whole portfolio;
- ``dispatch_2s``: the same with ``solver.time_limit_s=2``, as per-iteration use would run it: the portfolio's first
  candidate that applies always runs (on a rail cluster ``rail_slots``), no other starts after the limit;
- ``a2av_512``: an All-to-Allv of the same per-pair shape on 512 GPUs (``dgx_h100x64``) with ``greedy``.

Each case calls the in-process API (:func:`tacos_bench.runner.synthesize`) once to compile and load the
kernels, then ``--repeat`` times; the table gives the median ``synthesis_time_s`` (the backend alone, as the
record defines it) and the wall time of the whole call with the verifier.

    python experiments/bench_demand.py [--repeat 3] [--cases a2av_pairs,dispatch,a2av_512]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tacos_bench.collective import Collective
from tacos_bench.demand import all_to_allv
from tacos_bench.moe import dispatch_demand, moe_routing
from tacos_bench.runner import synthesize
from tacos_bench.topology.named import named_topology


def layer_matrix(num_npus: int, seed: int = 0) -> tuple[np.ndarray, object]:
    """The per-pair byte matrix of one layer's dispatch (each token counted once per NPU it reaches)."""
    r = moe_routing(num_npus, experts=num_npus if num_npus > 64 else 64, seed=seed)
    return dispatch_demand(r).pair_bytes(), r


def cases(names: list[str]):
    if "a2av_pairs" in names or "dispatch" in names or "dispatch_2s" in names:
        topo = named_topology("dgx_h100x8")
        M, r = layer_matrix(topo.num_npus)
        if "a2av_pairs" in names:
            # one chunk per pair: the chunk is the largest pair's bytes
            yield "a2av_pairs", topo, Collective("all_to_allv", demand=all_to_allv(M, None, 1)), "greedy", {}
        if "dispatch" in names:
            yield "dispatch", topo, Collective("moe_dispatch", demand=dispatch_demand(r)), "greedy_plus", {}
        if "dispatch_2s" in names:
            yield ("dispatch_2s", topo, Collective("moe_dispatch", demand=dispatch_demand(r)), "greedy_plus",
                   {"time_limit_s": 2.0})
    if "a2av_512" in names:
        topo = named_topology("dgx_h100x64")
        M, _ = layer_matrix(topo.num_npus)
        yield "a2av_512", topo, Collective("all_to_allv", demand=all_to_allv(M, None, 1)), "greedy", {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="a2av_pairs,dispatch,dispatch_2s,a2av_512")
    args = ap.parse_args()
    print("| case | topology | NPUs | chunks | solver | options | winner | synthesis s (median) | call s with verify "
          "| time / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, topo, coll, solver, opts in cases(args.cases.split(",")):
        synthesize(topo, coll, solver=solver, **opts)      # compile and load the kernels
        syn, wall, out = [], [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = synthesize(topo, coll, solver=solver, **opts)
            wall.append(time.perf_counter() - t0)
            syn.append(out.record["synthesis_time_s"])
        assert out.valid, f"{name}: the verifier refused the schedule"
        bounded = synthesize(topo, coll, solver=solver, bounds=True, **opts).record
        ratio = bounded["collective_time_us"] / bounded["lower_bound_us"]
        shown = " ".join(f"{k}={v}" for k, v in opts.items())
        print(f"| {name} | {topo.name} | {topo.num_npus} | {out.record['num_chunks']} | {solver} | {shown} | "
              f"{out.record.get('candidate') or ''} | {statistics.median(syn):.3f} | {statistics.median(wall):.3f} | "
              f"{ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
