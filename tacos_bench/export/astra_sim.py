"""A directory that runs a verified schedule in ASTRA-sim, as is.

ASTRA-sim (analytical network backend) runs a synthesized collective through
its *custom-collective* path: the workload holds one ``COMM_COLL_NODE`` per
NPU, and the system configuration points that collective at one Chakra trace
per NPU (:mod:`tacos_bench.export.chakra`), whose sends and receives ASTRA-sim
replays as a dataflow graph on its simulated network. :func:`export_astra_sim`
writes everything that takes::

    DIR/run.sh                 DIR/run.sh PATH/TO/AstraSim_Analytical_Congestion_Aware  (or set ASTRA_SIM)
    DIR/workload.<rank>.et     one COMM_COLL_NODE (ALL_GATHER / REDUCE_SCATTER / ALL_REDUCE / ALL_TO_ALL; a
                               chunk table: ALL_TO_ALL, the most general, whose custom path replays any traces)
    DIR/chakra/algo.<rank>.et  the synthesized schedule (sends, receives, reductions)
    DIR/system.json            "preferred-dataset-splits": 1, "<coll>-implementation-custom"
    DIR/network.yml            the exact embedding of the topology (FullyConnected, Ring or Switch)
    DIR/remote_memory.json     no memory expansion
    DIR/bundle.json            what was exported and the time tacos-bench's verifier measured

``run.sh`` changes into its own directory (ASTRA-sim resolves the trace
prefix in ``system.json`` against the working directory), so it runs from
anywhere; ASTRA-sim's log goes to stderr and the last line on stdout is the
collective time in µs: the largest ``sys[r] finished, T cycles`` over NPUs
(``T`` in ns). It exits non-zero when the simulator fails or when not every
NPU finished (ASTRA-sim itself exits 0 then).

**The binary.** ``run.sh`` and :func:`run_bundle` take the simulator's path, or read it from the environment
variable ``ASTRA_SIM``; :func:`run_bundle`, the tests and the ASTRA-sim study fall back on the prebuilt binary
of this project's workspace, ``shared/tools/astra-sim/bin/`` next to the clone (:func:`resolve_binary`). When it
cannot run, the message names the path that was resolved (:func:`binary_problem`).

**Network embedding.** This analytical backend has no arbitrary-graph
topology, and its congestion-aware binary takes one dimension of ``Ring``,
``FullyConnected`` or ``Switch``, each with a single bandwidth and latency.
A topology whose links all share one bandwidth and one latency embeds exactly
in ``FullyConnected(N)``: each of our links ``u -> v`` is ASTRA-sim's own
``u -> v`` link, one hop, and links the topology lacks are simply never used.
When every link joins ring neighbours (``v = u +- 1 mod N``, ``N >= 3``),
``Ring(N)`` is exact as well and is written instead (``network="auto"``).
Mixed link speeds (heterogeneous meshes, multi-tier clusters) have no exact
embedding and raise :class:`~tacos_bench.errors.ExportError`. ASTRA-sim's
``Switch(N)`` (every message NPU -> switch -> NPU, two store-and-forward hops
through one up-link and one down-link per NPU) is written only for a switched
fabric (docs/fabrics.md) of exactly that shape: one ``store_forward`` switch
without ``multicast`` or ``reduce``, joined both ways to every NPU, one
bandwidth and one latency. Its hops ``u -> s``, ``s -> v`` are paired into
NPU-to-NPU sends ``u -> v`` (first in, first out per chunk at the switch:
:func:`tacos_bench.export.fabric.npu_transfers`) before the traces are
written; ASTRA-sim routes each through its switch. Every other fabric raises
:class:`~tacos_bench.errors.ExportError`. tacos-bench's unwound switch
(``switch<N>``, a fully connected graph of per-pair links) is not this network
and keeps ``FullyConnected``. Left to itself, ASTRA-sim's ``Switch`` does not
replay a store-and-forward schedule (docs/export.md, "Switched fabrics"): a
link there is busy for the serialization only, and a send goes once its data
is there, so an NPU's up-link sends in the order the data arrives. So a
``Switch`` bundle is **pinned** by default (``pin``): every send also waits
for a ``COMP_NODE`` as long as its start in our schedule, and since Chakra
durations are whole µs the simulator runs 1000x slower (latency x 1000,
bandwidth / 1000) so that a trace µs is our ns; ``run.sh`` scales the time
back. A pinned replay is our schedule in ASTRA-sim's network: a send it could
not start on time (a shared port still busy, data not there) ends later.

**Units.** ASTRA-sim's ``bandwidth`` is in GB/s converted with 2^30, i.e.
GiB/s like ours; ``latency`` is in ns (ours is µs). It truncates each hop's
latency + serialization time to whole ns and charges 1 ns for a reduction
``COMP_NODE`` of duration 0, so its time differs from ``collective_time_us``
by at most 1 ns per transfer and per reduction on the longest dependency
chain (:func:`causal_depth`), provided the schedule starts every transfer as
early as its per-link order and data allow (the greedy does; a schedule with
idle slack finishes earlier in ASTRA-sim's as-soon-as-possible replay, unless
pinned). Pinned, each send starts within 0.5 ns of ours (a pin rounded to our
ns) and each hop is truncated to a simulator ns (a thousandth of ours).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..collective import DEMAND_KINDS
from ..problem import Problem
from ..schedule import REDUCE, Schedule
from ..topology.model import FABRIC, POINT_TO_POINT
from .common import ExportError, verified
from .fabric import npu_sends

# tacos-bench kind -> (Chakra CollectiveCommType name, system.json key stem)
ASTRA_COLLECTIVES = {
    "all_gather": ("ALL_GATHER", "all-gather"),
    "reduce_scatter": ("REDUCE_SCATTER", "reduce-scatter"),
    "all_reduce": ("ALL_REDUCE", "all-reduce"),
    "all_to_all": ("ALL_TO_ALL", "all-to-all"),
}

# Collectives ASTRA-sim's custom path cannot take (measured with the prebuilt binary, astra-sim 518bd51;
# Workload::issue_coll_comm): it runs a custom trace for ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and
# ALL_TO_ALL collective nodes only. The traces themselves exist for every collective (export_chakra).
UNSUPPORTED = {
    "broadcast": ("ASTRA-sim replays a BROADCAST collective node as a fixed delay (the node's runtime, "
                  "1 ns by default) and never runs a custom trace for it"),
    "reduce": ("ASTRA-sim rejects REDUCE collective nodes ('Unsupported collective comm type'); its custom "
               "path serves only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL"),
    "gather": ("ASTRA-sim rejects GATHER collective nodes ('Unsupported collective comm type'); its custom "
               "path serves only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL"),
    "scatter": ("ASTRA-sim rejects SCATTER collective nodes ('Unsupported collective comm type'); its custom "
                "path serves only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL"),
}

NETWORKS = ("auto", "fully_connected", "ring", "switch")
TRACE_PREFIX = "chakra/algo"      # relative to the bundle directory (ASTRA-sim resolves it against the cwd)
WORKLOAD_PREFIX = "workload"
BUNDLE_SCHEMA = "tacos-bench/astra-sim-bundle"
BUNDLE_VERSION = 1
PIN_TIME_SCALE = 1000   # a pinned bundle's simulator ns per our ns (Chakra durations are whole µs)
CLOCK_LIMIT_NS = 2**31 - 1   # a finish at this many simulator ns is the binary's 32-bit clock saturating
_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def astra_collective(kind: str) -> tuple[str, str]:
    """Chakra collective type and ``system.json`` key stem of a tacos-bench collective.

    Raises
    ------
    ExportError
        For a collective ASTRA-sim's custom-collective path cannot run (one line: why).

    Examples
    --------
    >>> astra_collective("all_reduce")
    ('ALL_REDUCE', 'all-reduce')
    >>> astra_collective("gather")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tacos_bench.errors.ExportError: cannot export gather to ASTRA-sim: ASTRA-sim rejects GATHER ...
    """
    if kind in ASTRA_COLLECTIVES:
        return ASTRA_COLLECTIVES[kind]
    if kind in DEMAND_KINDS:   # hosted by an ALL_TO_ALL node: its custom path replays whatever the traces hold
        return ASTRA_COLLECTIVES["all_to_all"]
    why = UNSUPPORTED.get(kind, "ASTRA-sim's custom path serves only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER "
                                "and ALL_TO_ALL")
    others = "; export it as msccl, json or chakra instead" if kind in UNSUPPORTED else ""
    raise ExportError(f"cannot export {kind} to ASTRA-sim: {why}{others}")


def _num(x: float) -> str:
    """A float as YAML reads it back exactly (``50.0``, ``7.142857142857143``)."""
    return repr(float(x))


def embed_network(topology, network: str = "auto") -> dict:
    """The exact ASTRA-sim network of ``topology``, as the fields of ``network.yml``.

    Parameters
    ----------
    topology : tacos_bench.topology.Topology
        Any topology; it embeds when all its links share one bandwidth and one latency. A switched
        fabric embeds only when it is exactly one ``store_forward`` switch without ``multicast`` or
        ``reduce``, joined both ways to every NPU and to nothing else: ASTRA-sim's ``Switch(N)``.
    network : {"auto", "fully_connected", "ring", "switch"}
        ``auto`` picks ``Switch`` for such a fabric, ``Ring`` when the topology's links all join ring
        neighbours and ``FullyConnected`` otherwise; ``ring`` and ``switch`` raise when not exact.

    Returns
    -------
    dict
        ``topology`` (``"FullyConnected"``, ``"Ring"`` or ``"Switch"``), ``npus_count``, ``bandwidth``
        (GiB/s, ASTRA-sim's "GB/s" with 2^30) and ``latency`` (ns).

    Raises
    ------
    ExportError
        Mixed link speeds (no exact embedding), no links, any other switched fabric, or an impossible
        ``network`` (one line: why).

    Examples
    --------
    >>> from tacos_bench.topology import Switch, Topology
    >>> from tacos_bench.topology.generators import mesh2d, ring
    >>> embed_network(ring(8))
    {'topology': 'Ring', 'npus_count': 8, 'bandwidth': 50.0, 'latency': 500.0}
    >>> embed_network(mesh2d(4, 4))["topology"]
    'FullyConnected'
    >>> e = [(i, 4, 50.0, 0.5) for i in range(4)] + [(4, i, 50.0, 0.5) for i in range(4)]
    >>> embed_network(Topology.from_edges(4, e, switches=[Switch("store_forward")]))
    {'topology': 'Switch', 'npus_count': 4, 'bandwidth': 50.0, 'latency': 500.0}
    """
    if network not in NETWORKS:
        raise ExportError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")
    return _EMBEDDINGS[topology.network_kind](topology, network)


def _embed_point_to_point(topology, network: str) -> dict:
    """``Ring(N)`` or ``FullyConnected(N)`` for NPUs joined by links of one speed (see :func:`embed_network`)."""
    n = int(topology.num_npus)
    if network == "switch":
        raise ExportError(f"topology {topology.name!r} has no switch node, so ASTRA-sim's Switch({n}) is not exact: it "
                          f"routes every message NPU -> switch -> NPU through one shared port per NPU, while "
                          f"{topology.name!r} links NPUs directly; use FullyConnected")
    if topology.num_links == 0 or n < 2:
        raise ExportError(f"topology {topology.name!r} has no links: nothing for ASTRA-sim to simulate")
    bw, lat = np.asarray(topology.bw_GiBps), np.asarray(topology.lat_us)
    if np.ptp(bw) != 0 or np.ptp(lat) != 0:
        spread = [f"{what} {a.min():g}-{a.max():g} {unit}" for what, a, unit in
                  (("bandwidth", bw, "GiB/s"), ("latency", lat, "µs")) if np.ptp(a) != 0]
        raise ExportError(
            f"topology {topology.name!r} has no exact ASTRA-sim network: its links mix speeds "
            f"({', '.join(spread)}) and ASTRA-sim's analytical network has one bandwidth and latency per "
            f"dimension and no arbitrary-graph topology")
    step = (np.asarray(topology.dst, np.int64) - np.asarray(topology.src, np.int64)) % n
    ring_ok = n >= 3 and bool(np.all((step == 1) | (step == n - 1)))
    if network == "ring" and not ring_ok:
        raise ExportError(f"topology {topology.name!r} is not a ring of NPUs 0..{n - 1} in order "
                          f"(a link joins non-neighbours), so Ring({n}) is not exact; use FullyConnected")
    kind = "Ring" if (ring_ok and network != "fully_connected") else "FullyConnected"
    return {"topology": kind, "npus_count": n, "bandwidth": float(bw[0]), "latency": float(lat[0]) * 1000.0}


SWITCH_FABRIC = ("ASTRA-sim takes a switched fabric only as its Switch(N): exactly one store_forward switch "
                 "without multicast or reduce, joined both ways to every NPU, one bandwidth and one latency, "
                 "no other links")


def _embed_switch(topology, network: str) -> dict:
    """``Switch(N)`` for a fabric of one plain store-and-forward switch (see :func:`embed_network`)."""
    n = int(topology.num_npus)

    def refuse(why: str):
        raise ExportError(f"topology {topology.name!r} has no exact ASTRA-sim network: {why}; {SWITCH_FABRIC}")

    if network not in ("auto", "switch"):
        refuse(f"it is a switched fabric, which network={network!r} cannot take")
    if topology.num_switches != 1:
        refuse(f"it has {topology.num_switches} switches")
    s = n
    sw = topology.switch(s)
    if sw.mode != "store_forward":
        refuse(f"switch {s} is {sw.mode}")
    if sw.multicast or sw.reduce:
        refuse(f"switch {s} has {' and '.join(w for w, on in (('multicast', sw.multicast), ('reduce', sw.reduce)) if on)}")
    src, dst = np.asarray(topology.src, np.int64), np.asarray(topology.dst, np.int64)
    other = np.flatnonzero((src != s) & (dst != s))
    if other.size:
        refuse(f"link {int(src[other[0]])}->{int(dst[other[0]])} does not touch switch {s}")
    for what, ends in (("to", src[dst == s]), ("from", dst[src == s])):
        ends = np.sort(ends)
        if not np.array_equal(ends, np.arange(n)):
            miss = sorted(set(range(n)) - set(ends.tolist()))
            refuse(f"NPU {miss[0]} has no link {what} switch {s}")
    bw, lat = np.asarray(topology.bw_GiBps), np.asarray(topology.lat_us)
    if np.ptp(bw) != 0 or np.ptp(lat) != 0:
        spread = [f"{what} {a.min():g}-{a.max():g} {unit}" for what, a, unit in
                  (("bandwidth", bw, "GiB/s"), ("latency", lat, "µs")) if np.ptp(a) != 0]
        refuse(f"its links mix speeds ({', '.join(spread)})")
    return {"topology": "Switch", "npus_count": n, "bandwidth": float(bw[0]), "latency": float(lat[0]) * 1000.0}


# the ASTRA-sim network of each network kind of topology
_EMBEDDINGS = {POINT_TO_POINT: _embed_point_to_point, FABRIC: _embed_switch}


def network_yaml(net: dict) -> str:
    """``network.yml`` text of :func:`embed_network`'s result.

    >>> print(network_yaml({'topology': 'Ring', 'npus_count': 8, 'bandwidth': 50.0, 'latency': 500.0}), end="")
    topology: [ Ring ]
    npus_count: [ 8 ]
    bandwidth: [ 50.0 ]  # GB/s, converted with 2^30 by ASTRA-sim: GiB/s
    latency: [ 500.0 ]  # ns
    """
    return (f"topology: [ {net['topology']} ]\n"
            f"npus_count: [ {int(net['npus_count'])} ]\n"
            f"bandwidth: [ {_num(net['bandwidth'])} ]  # GB/s, converted with 2^30 by ASTRA-sim: GiB/s\n"
            f"latency: [ {_num(net['latency'])} ]  # ns\n")


def system_config(kind: str, trace_prefix: str = TRACE_PREFIX) -> dict:
    """``system.json``: the custom implementation of ``kind`` and the settings it needs.

    ``preferred-dataset-splits`` must be 1: ASTRA-sim divides by zero without it (SIGFPE), and with
    more splits it waits for streams the custom path never creates and exits 0 unfinished.

    >>> system_config("all_gather")["all-gather-implementation-custom"]
    ['chakra/algo']
    """
    _, key = astra_collective(kind)
    return {"scheduling-policy": "FIFO", "preferred-dataset-splits": 1,
            f"{key}-implementation-custom": [str(trace_prefix)], "local-mem-bw": 50}


def causal_depth(problem: Problem, schedule: Schedule) -> int:
    """Transfers and reductions on the longest dependency chain of the exported traces.

    The Chakra traces make a send wait for the node that produced the value it forwards (the
    receive, or the reduction ``COMP_NODE`` after it) and for the previous send on its link, and a
    reduction wait for its receive and the previous partial sum; ASTRA-sim's time is the end of
    the longest such chain. It truncates each hop to whole ns (up to -1 ns per transfer) and
    charges 1 ns per reduction of duration 0 (+1 ns each), so for a schedule that starts every
    transfer as early as this order allows, ASTRA-sim's time lies within this many ns of ours.

    Examples
    --------
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(3), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0, t, "copy"), (0, 1, 2, t, 2 * t, "copy"),
    ...                         (1, 1, 2, 0, t, "copy"), (1, 2, 0, t, 2 * t, "copy"),
    ...                         (2, 2, 0, 0, t, "copy"), (2, 0, 1, t, 2 * t, "copy")])
    >>> causal_depth(p, s)   # two hops
    2
    >>> rs = Problem(ring(3), Collective("reduce_scatter", 1, 1))
    >>> s = Schedule.from_rows([(0, 1, 0, 0, t, "reduce"), (0, 2, 0, 0, t, "reduce"),
    ...                         (1, 0, 1, 0, t, "reduce"), (1, 2, 1, 0, t, "reduce"),
    ...                         (2, 0, 2, 0, t, "reduce"), (2, 1, 2, 0, t, "reduce")])
    >>> causal_depth(rs, s)  # one hop, then two reductions in a row at each owner
    3
    """
    # what the Chakra traces hold: NPU-to-NPU sends, store-and-forward hops paired (export_chakra); each hop is
    # one truncation, and a paired send waits only for the previous send to the same NPU
    x = npu_sends(problem, schedule, "ASTRA-sim")
    return _causal_depth(x.schedule, x.num_links.tolist(), x.send_keys())


def _causal_depth(schedule: Schedule, weights, keys) -> int:
    """:func:`causal_depth` of NPU-to-NPU rows: ``weights[t]`` truncations per transfer, each send after the
    previous one of its ``keys[t]`` (None: after none)."""
    from ..verify import REL_TOL

    order0 = np.lexsort((schedule.chunk, schedule.dst, schedule.src, schedule.end_us, schedule.start_us))
    sched = schedule.take(order0)
    T = len(sched)
    if T == 0:
        return 0
    o = order0.tolist()
    weight = [int(weights[i]) for i in o]
    key = [keys[i] for i in o]
    chunk, src, dst, op = sched.chunk.tolist(), sched.src.tolist(), sched.dst.tolist(), sched.op.tolist()
    tol = REL_TOL * max(1.0, abs(sched.makespan_us))
    times = np.concatenate([sched.end_us - tol, sched.start_us])      # arrivals before departures
    kinds = np.concatenate([np.zeros(T, np.int8), np.ones(T, np.int8)])
    ids = np.concatenate([np.arange(T), np.arange(T)])
    order = np.lexsort((ids, kinds, times)).tolist()
    value: dict[tuple[int, int], int] = {}     # (npu, chunk) -> depth of the node holding its value
    link: dict[tuple, int] = {}                # (src, dst) -> depth of the last send on the link
    depth = [0] * T
    best = 0
    for e in order:
        t = int(ids[e])
        if kinds[e]:
            k = key[t]
            d = weight[t] + max(value.get((src[t], chunk[t]), 0), link.get(k, 0) if k is not None else 0)
            depth[t] = d
            if k is not None:
                link[k] = d
        else:
            vk = (dst[t], chunk[t])
            # a reduction is one more node after its receive and the previous partial sum
            d = 1 + max(depth[t], value.get(vk, 0)) if op[t] == REDUCE else depth[t]
            value[vk] = d
            best = max(best, d)
    return max(best, max(depth))


def _workload_node(pb, kind: str, comm_bytes: int):
    ctype, _ = astra_collective(kind)
    node = pb.Node(id=0, name=f"tacos_{kind}", type=pb.COMM_COLL_NODE)
    node.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
    node.attr.append(pb.AttributeProto(name="comm_type", int64_val=pb.CollectiveCommType.Value(ctype)))
    node.attr.append(pb.AttributeProto(name="comm_size", int64_val=int(comm_bytes)))
    return node


def run_script(num_npus: int, comment: str = "", time_scale: int = 1) -> str:
    """The ``run.sh`` of a bundle of ``num_npus`` NPUs (bash; runs from any working directory); it prints
    the simulator's time divided by ``time_scale`` (see ``pin`` in :func:`export_astra_sim`)."""
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return f"""#!/usr/bin/env bash
# ASTRA-sim bundle written by tacos-bench (python -m tacos_bench.export astra-sim).
{head}#
# usage: run.sh PATH/TO/AstraSim_Analytical_Congestion_Aware      (or set ASTRA_SIM to it)
# Works from any directory. ASTRA-sim's log goes to stderr; the LAST line on stdout is the collective
# time in µs, the largest per-NPU "sys[r] finished, T cycles" (T in ns). Exit status: 2 bad usage,
# the simulator's own status if it fails, 3 if not every NPU finished (ASTRA-sim exits 0 then).
set -u
NPUS={int(num_npus)}
given="${{1:-${{ASTRA_SIM:-}}}}"
if [ -n "${{1:-}}" ]; then from="the argument"; else from="ASTRA_SIM"; fi
if [ -z "$given" ]; then
  echo "usage: $0 PATH/TO/AstraSim_Analytical_Congestion_Aware  (or set ASTRA_SIM to it)" >&2; exit 2
fi
# A relative path is relative to the caller's directory; the error names the absolute path it came to,
# so a path that only works next to some other checkout says where it looked.
case "$given" in
  */*) dir="$(cd "$(dirname -- "$given")" 2>/dev/null && pwd)"
       if [ -n "$dir" ]; then bin="$dir/$(basename -- "$given")"
       else case "$given" in /*) bin="$given" ;; *) bin="$PWD/$given" ;; esac; fi ;;
  *) bin="$(command -v -- "$given" || echo "$given (not found on PATH)")" ;;
esac
if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
  echo "error: not an executable ASTRA-sim binary: $bin ($from was '$given'); pass the binary's path or set" \
       "ASTRA_SIM=/path/to/AstraSim_Analytical_Congestion_Aware" >&2; exit 2
fi
here="$(cd "$(dirname -- "${{BASH_SOURCE[0]}}")" && pwd)"
tmp="$(mktemp -d "${{TMPDIR:-/tmp}}/tacos-astra-sim.XXXXXX")" || exit 2
trap 'rm -rf "$tmp"' EXIT
# system.json names the traces relative to this directory: ASTRA-sim resolves them against the cwd.
cd "$here" || exit 2
"$bin" --workload-configuration={WORKLOAD_PREFIX} --system-configuration=system.json \\
  --remote-memory-configuration=remote_memory.json --network-configuration=network.yml \\
  --logging-folder="$tmp/log" 2>&1 | tee "$tmp/out" >&2
rc=${{PIPESTATUS[0]}}
if [ "$rc" -ne 0 ]; then
  echo "error: ASTRA-sim exited with status $rc" >&2; exit "$rc"
fi
summary="$(sed -nE 's/.*sys\\[([0-9]+)\\] finished, ([0-9]+) cycles.*/\\1 \\2/p' "$tmp/out" | sort -n -u -k1,1 |
  awk '{{ n++; if (n == 1 || $2 > m) {{ m = $2; w = $1 }} }} END {{ printf "%d %d %d", n, m, w }}')"
read -r nfin ns worst <<< "$summary"
if [ "$nfin" -ne "$NPUS" ]; then
  echo "error: only $nfin of $NPUS NPUs finished" >&2; exit 3
fi
echo "ASTRA-sim: $nfin/$NPUS NPUs finished, the last (sys[$worst]) at $ns simulator ns; collective time in us:"
awk -v t="$ns" 'BEGIN {{ printf "%.{3 + len(str(int(time_scale))) - 1}f\\n", t / {1000 * int(time_scale)} }}'
"""


def export_astra_sim(problem: Problem, schedule: Schedule, out_dir: str | os.PathLike, *,
                     network: str = "auto", reduce_time_us: int = 0, record: dict | None = None,
                     pin: str = "auto") -> Path:
    """Write a directory that runs ``schedule`` in ASTRA-sim as is; returns it.

    Parameters
    ----------
    problem, schedule : Problem, Schedule
        A schedule the verifier accepts (it is replayed first; nothing is written otherwise).
    out_dir : path
        The bundle directory (created; files of an earlier bundle there are replaced).
    network : {"auto", "fully_connected", "ring"}
        See :func:`embed_network`.
    reduce_time_us : int
        Duration of each reduction ``COMP_NODE`` (whole µs; 0 costs ASTRA-sim 1 ns). Our cost model
        reduces in zero time, so a positive value makes ASTRA-sim's time longer than ours by design.
    record : dict, optional
        The run record; its solver, seed and status are copied into ``bundle.json``.
    pin : {"auto", "on", "off"}
        ``on`` holds every send back to its start in the schedule (a ``COMP_NODE`` of that duration it waits
        for) and runs the simulator :data:`PIN_TIME_SCALE` times slower (latency x 1000, bandwidth / 1000:
        Chakra durations are whole µs, so a trace µs is then our ns); the run script scales the time back.
        ``off`` lets each send go once its data and its previous send on the link are done. ``auto``: ``on``
        for ``Switch(N)``, whose replay otherwise reorders a store-and-forward schedule (see the module
        docstring), ``off`` for ``Ring``/``FullyConnected``, which replay the schedule exactly as they are.

    Raises
    ------
    ExportError
        An unsupported collective, a topology without an exact ASTRA-sim network, or a
        missing Chakra schema (``pip install --no-deps mlc-chakra==1.0.0``).
    VerificationError
        The schedule is invalid.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from tacos_bench import Collective, Problem, Schedule
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(2), Collective("all_gather", 1, 1))
    >>> t = float(p.link_time_us[0])
    >>> s = Schedule.from_rows([(0, 0, 1, 0.0, t, "copy"), (1, 1, 0, 0.0, t, "copy")])
    >>> d = export_astra_sim(p, s, pathlib.Path(tempfile.mkdtemp()) / "bundle")
    >>> sorted(x.name for x in d.iterdir())   # doctest: +NORMALIZE_WHITESPACE
    ['bundle.json', 'chakra', 'network.yml', 'remote_memory.json', 'run.sh', 'system.json',
     'workload.0.et', 'workload.1.et']
    >>> json.loads((d / "system.json").read_text())["all-gather-implementation-custom"]
    ['chakra/algo']
    """
    from .chakra import _chakra, export_chakra

    if not isinstance(problem, Problem):
        raise ExportError(f"expected a Problem, got {type(problem).__name__}")
    kind = problem.kind
    ctype, _ = astra_collective(kind)                 # reject before anything is written
    net = embed_network(problem.topology, network)
    if pin not in ("auto", "on", "off"):
        raise ExportError(f"pin must be 'auto', 'on' or 'off', got {pin!r}")
    pinned = pin == "on" or (pin == "auto" and net["topology"] == "Switch")
    scale = PIN_TIME_SCALE if pinned else 1
    pb, encode = _chakra()
    ver = verified(problem, schedule)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob(f"{WORKLOAD_PREFIX}.*.et"), *(out / "chakra").glob("algo.*.et")]:
        old.unlink()
    export_chakra(problem, schedule, out / TRACE_PREFIX, reduce_time_us=reduce_time_us,
                  pin_scale=scale if pinned else 0, idle_node=True)

    n = problem.num_npus
    comm_bytes = int(problem.chunk_bytes) * int(problem.num_chunks)
    if kind == "all_to_all":   # an NPU's send buffer, as for ASTRA-sim's own ALL_TO_ALL (it is N x N x K chunks)
        comm_bytes = int(problem.chunk_bytes) * n * int(problem.collective.chunks_per_npu)
    meta = pb.GlobalMetadata(version="0.0.4")
    node = _workload_node(pb, kind, comm_bytes)
    for rank in range(n):
        with open(out / f"{WORKLOAD_PREFIX}.{rank}.et", "wb") as fh:
            encode(fh, meta)
            encode(fh, node)
    (out / "system.json").write_text(json.dumps(system_config(kind), indent=2) + "\n")
    (out / "remote_memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}, indent=2) + "\n")
    (out / "network.yml").write_text(network_yaml(net if scale == 1 else {
        **net, "bandwidth": net["bandwidth"] / scale, "latency": net["latency"] * scale}))

    T = float(ver.collective_time_us)
    depth = causal_depth(problem, schedule)
    topo = problem.topology
    c = problem.collective
    note, manifest_extra = _BUNDLE_EXTRAS[topo.network_kind]
    comment = (f"{kind} on {topo.name}: {n} NPUs, {c.chunks_per_npu} chunk(s) per NPU of {problem.chunk_bytes} B, "
               f"{len(schedule)} transfers{note}\n"
               f"network: {net['topology']}({n}), {_num(net['bandwidth'])} GiB/s, {_num(net['latency'])} ns\n"
               f"tacos-bench verified collective_time_us: {T!r}")
    script = out / "run.sh"
    if pinned:
        comment += (f"\nevery send pinned to its start; the simulator runs {scale}x slower (network.yml: latency "
                    f"x {scale}, bandwidth / {scale}) and this script divides its time by {scale}")
    script.write_text(run_script(n, comment, time_scale=scale))
    script.chmod(0o755)
    manifest = {
        "schema": BUNDLE_SCHEMA, "schema_version": BUNDLE_VERSION,
        "units": {"time": "us", "bandwidth": "GiB/s", "latency": "ns (network.yml)", "size": "bytes"},
        "collective": {"kind": kind, "astra_sim_comm_type": ctype, "chunks_per_npu": int(c.chunks_per_npu),
                       "num_chunks": int(problem.num_chunks), "chunk_bytes": int(problem.chunk_bytes),
                       "comm_size": comm_bytes},
        "topology": {"name": topo.name, "num_npus": n, "num_links": int(topo.num_links)},
        "network": net,
        "trace_prefix": TRACE_PREFIX, "workload_prefix": WORKLOAD_PREFIX,
        "reduce_time_us": int(reduce_time_us),
        "pinned": pinned, "time_scale": scale,
        "num_transfers": len(schedule),
        "causal_depth": depth,
        "collective_time_us": T,
        "command": "./run.sh PATH/TO/AstraSim_Analytical_Congestion_Aware",
    }
    manifest.update(manifest_extra(problem, schedule))
    if record:
        manifest["run"] = {k: _plain(record.get(k)) for k in ("solver", "seed", "status", "collective_time_us",
                                                               "lower_bound_us", "run_id", "git_commit")
                           if k in record}
    (out / "bundle.json").write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n")
    return out


def _fabric_manifest(problem: Problem, schedule: Schedule) -> dict:
    """The bundle's ``fabric`` field: the traces hold one NPU-to-NPU send per pair of store-and-forward hops
    (u -> switch -> v)."""
    n = problem.num_npus
    x = npu_sends(problem, schedule, "ASTRA-sim")
    return {"fabric": {"switch": n, "mode": problem.topology.switch(n).mode, "num_rows": len(schedule),
                       "num_sends": len(x.schedule), "dropped_rows": int(x.dropped)}}


# per network kind of the topology: what run.sh says of the transfers, and what bundle.json adds
_BUNDLE_EXTRAS = {POINT_TO_POINT: ("", lambda problem, schedule: {}),
                  FABRIC: (" (store-and-forward hops, paired into NPU-to-NPU sends)", _fabric_manifest)}


def _plain(v):
    """A record value as strict JSON: non-finite numbers become None, numpy scalars Python ones."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    return v if v is None or isinstance(v, str) else str(v)


@dataclass(frozen=True)
class AstraSimRun:
    """What :func:`run_bundle` measured: the collective time and each NPU's finish (ns)."""

    time_us: float
    finish_ns: dict
    stdout: str
    stderr: str


def parse_finish_ns(log: str) -> dict:
    """Per-NPU finish times (ns) from ASTRA-sim's log lines ``sys[r] finished, T cycles``.

    >>> parse_finish_ns("[workload] [info] sys[1] finished, 17206 cycles, exposed communication 17206 cycles.")
    {1: 17206}
    """
    return {int(r): int(t) for r, t in _FINISHED.findall(log)}


ENV_VAR = "ASTRA_SIM"
BINARY_NAME = "AstraSim_Analytical_Congestion_Aware"


def default_binary() -> Path:
    """Where this project's workspace keeps the prebuilt simulator: ``shared/tools/astra-sim/bin/`` next to the
    clone (it exists only in such a workspace; elsewhere point ``ASTRA_SIM`` at a binary)."""
    return Path(__file__).resolve().parents[3] / "shared" / "tools" / "astra-sim" / "bin" / BINARY_NAME


def resolve_binary(binary: str | os.PathLike | None = None) -> Path:
    """The ASTRA-sim binary to run, as an absolute path (it may not exist: :func:`binary_problem`).

    ``binary`` if given, else ``$ASTRA_SIM``, else :func:`default_binary`; a bare name is looked up on ``PATH``
    and a relative path is relative to the working directory, as in ``run.sh``.

    >>> str(resolve_binary("/opt/astra-sim/bin/../bin/AstraSim_Analytical_Congestion_Aware"))
    '/opt/astra-sim/bin/AstraSim_Analytical_Congestion_Aware'
    """
    raw = os.fspath(binary) if binary is not None else os.environ.get(ENV_VAR) or os.fspath(default_binary())
    raw = os.path.expanduser(raw)
    if os.sep not in raw:
        raw = shutil.which(raw) or raw
    return Path(os.path.abspath(raw))


def _missing_libraries(path: Path) -> list[str]:
    if shutil.which("ldd"):
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False).stdout
        return [ln.split()[0] for ln in out.splitlines() if "not found" in ln]
    import ctypes

    try:  # the one library the prebuilt binary needs beyond the base system
        ctypes.CDLL("libprotobuf.so.32")
    except OSError:
        return ["libprotobuf.so.32"]
    return []


def binary_problem(binary: str | os.PathLike | None = None) -> str | None:
    """Why the ASTRA-sim binary (resolved by :func:`resolve_binary`) cannot run here, or None.

    The message names the path that was resolved, where it came from, and ``ASTRA_SIM``.
    """
    path = resolve_binary(binary)
    if binary is not None:
        origin = f"given as {os.fspath(binary)!r}"
    elif os.environ.get(ENV_VAR):
        origin = f"from {ENV_VAR}={os.environ[ENV_VAR]}"
    else:
        origin = f"{ENV_VAR} not set: the default location"
    raw = os.fspath(binary) if binary is not None else os.environ.get(ENV_VAR) or os.sep
    if os.sep not in raw and shutil.which(raw) is None:
        origin += ", not found on PATH either"
    if not path.is_file():
        why = f"no ASTRA-sim binary at {path} ({origin})"
    elif not os.access(path, os.X_OK):
        why = f"the ASTRA-sim binary at {path} ({origin}) is not executable"
    else:
        libs = _missing_libraries(path)
        if not libs:
            return None
        why = (f"the ASTRA-sim binary at {path} ({origin}) needs {', '.join(libs)}; Debian 12: apt-get install -y "
               "libprotobuf32")
    return f"{why}; set {ENV_VAR}=/path/to/{BINARY_NAME} to use another"


def run_bundle(bundle_dir: str | os.PathLike, binary: str | os.PathLike | None = None, *,
               timeout: float | None = None) -> AstraSimRun:
    """Run ``bundle_dir/run.sh binary`` and return the collective time it prints.

    ``binary`` defaults to ``$ASTRA_SIM``, then to the workspace's prebuilt simulator (:func:`resolve_binary`).

    Raises
    ------
    ExportError
        The binary cannot run (the message names the path resolved), the script failed (simulator error, not
        every NPU finished) or timed out; the message carries the script's last error line.
    """
    d = Path(bundle_dir)
    script = d / "run.sh"
    if not script.is_file():
        raise ExportError(f"{d}: no run.sh; is this an ASTRA-sim bundle?")
    why = binary_problem(binary)
    if why is not None:
        raise ExportError(why)
    binary = resolve_binary(binary)
    try:
        p = subprocess.run(["bash", str(script), str(binary)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExportError(f"{shlex.quote(str(script))} did not finish within {timeout:g} s") from None
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        raise ExportError(f"{script} exited with status {p.returncode}: {err[-1] if err else 'no output'}")
    try:
        t = float(lines[-1])
    except ValueError:
        raise ExportError(f"{script}: last line {lines[-1]!r} is not a time in µs") from None
    finish = parse_finish_ns(p.stderr)
    try:
        scale = int(json.loads((d / "bundle.json").read_text()).get("time_scale", 1))
    except (OSError, ValueError):
        scale = 1
    if finish and max(finish.values()) >= CLOCK_LIMIT_NS:
        # measured with the prebuilt binary: a pinned 1 GiB All-Gather on switched8_sf (22.5 ms, 2.25e10 simulator
        # ns) "finished" at 2147483647 cycles; an earlier build of it replayed the same bundle to our time
        raise ExportError(f"{script}: ASTRA-sim's clock stopped at {CLOCK_LIMIT_NS} ns (2^31 - 1), so its time is "
                          f"not the collective's" + (f" (this bundle is pinned and runs {scale}x slower: export it "
                                                     "with pin=off, or a shorter schedule)" if scale != 1 else ""))
    if scale != 1:
        finish = {r: ns / scale for r, ns in finish.items()}
    return AstraSimRun(time_us=t, finish_ns=finish, stdout=p.stdout, stderr=p.stderr)
