"""The greedy's options and constants (``docs/greedy.md`` has their measured effect)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem

from ..options import SolverOptions, option


CHUNK_ORDERS = ("random", "rarest", "farthest", "oldest", "local_rarest")
LINK_TIEBREAKS = ("earliest_finish", "random", "lowest_id")
MATCHINGS = ("greedy", "maximum")
IMPORTS = ("all", "near", "group")
LINK_ORDERS = ("chunk_first", "fewest_first")

# tqdm shows the bar only once a run has lasted this long (seconds)
PROGRESS_DELAY_S = 2.0
# aim for kernel slices of about this long, so progress and Ctrl-C stay responsive
SLICE_TARGET_S = 0.25
# finished transfers are drained from the kernel in batches of at most this many rows
OUT_BUFFER_ROWS = 1 << 22
ENGINES = ("auto", "classic", "scale", "tiered", "unicast")
ROUTINGS = ("balanced", "adaptive")
RESUME_STRETCH = 1.0
# balanced routing tries several chunk orders while the routes have at most this many hops in all (1 try beyond)
ROUTE_WORK = 1 << 20
ROUTE_TRIES_MAX = 8
RESUME_TRIES, RESUME_PASSES = 2, 1
# the reservation resume of a unicast collective (reserve_resume) tries at most this many tie orders, and no
# more than RESUME_RESERVE_WORK over (chunks left x links) per order (a repair should stay quicker than a fresh
# synthesis: torus8x8 All-to-All 2 orders, 0.08 s)
RESUME_RESERVE_TRIES = 16
RESUME_RESERVE_WORK = 1 << 20
# initial holdings are deduplicated through a dense (NPU, chunk) table up to this size, else by sorting
DENSE_PAIRS_MAX = 1 << 26
PLUS_STRETCH = 0.5
# the default rule runs on the scale kernel (see docs/scale.md) from this many (NPU, chunk) pairs on
SCALE_MIN_PAIRS = 1 << 22
OUTPUTS = ("auto", "table", "compact")
# All-Gather schedules with more transfers than this come back as a CompactSchedule (tacos_bench.compact)
COMPACT_MIN_ROWS = 20_000_000
# event times are drained in blocks of this many
EVENT_BUFFER = 1 << 16
# the scale engine splits the NPUs into partitions with their own random streams, one thread each at most;
# the schedule depends on the number of partitions, never on the number of threads. Changing it changes the
# schedules (docs/scale.md).
SCALE_PARTITIONS = 2
# restart_work never asks for more runs than this
AUTO_RESTARTS_MAX = 4
# greedy_plus's relabelled copies (relabel_tries) run at most this many seeds each
RELABEL_RESTARTS = 2
# beyond the first, relabelled copies run only while NPUs x chunks x copies stays below this (small problems;
# hetero512 Broadcast of 8 chunks: 1 copy, 0.08 s; 3 copies would take 0.17 s)
RELABEL_WORK = 1 << 11
# greedy_plus's rarest candidate runs up to AUTO_RESTARTS_MAX seeds while NPUs x chunks x seeds stays below this
RAREST_WORK = 1 << 14
# the tiered kernel keeps per-receiver counters over every chunk: from this many (NPU, chunk) pairs on, the
# topology-aware rules run as the tier decomposition only (or, without one, as the TACOS rule on the scale engine)
TIERED_MAX_PAIRS = 1 << 25


# the work limits of the candidates (their budget options' defaults; solvers/greedy/candidates.py)
TREE_MAX_PAIRS = 1 << 14
RESERVE_WORK = 1 << 23
MULTICAST_WORK = 1 << 21
# the fabric portfolio (solvers/greedy/fabric_solver.py): measured on dgx_h100x128, the TACOS rule takes 247 s and
# ends 7.4x later than the rules (8.7 s), so beyond this many NPUs x chunks it is not a candidate
TACOS_CANDIDATE_MAX_PAIRS = 1 << 18
# candidate subset_trees keeps a bitset of candidate chunks per hop (hops x chunks / 8 bytes: 29 MB for the
# 64-GPU MoE dispatch, 262,144 chunks); its cost is per event and hop: MoE dispatch on dgx_h100x8 took 5.1 s at
# 64 NPUs x 16,384 chunks, 89 s at x 262,144 (2 cores)
SUBSET_TREE_MAX_PAIRS = 1 << 24
# the per-destination copies of a large table with multicast to subsets cost minutes (the 64-GPU MoE dispatch's
# 2.06 M deliveries: 27 s greedy, > 7 min with greedy_plus's rules); past this, subset_trees alone takes the table
PER_DESTINATION_MAX_DELIVERIES = 1 << 18
# the baselines on a fabric are candidates while the collective delivers at most this many (NPU, chunk) pairs
# (NPUs x chunks; chunks alone for the unicast collectives). Each baseline's transfers are placed on the hops by a
# Python loop (solvers/baselines/fabric.py), 20-90 µs a delivery: next to the greedy's Python loop of the unicast
# collectives (measured before their compiled kernel) that is 4-12 % (dgx_h100x4 ... dgx_h100x8 and leafspine4x8 / leafspine8x8 All-to-All), next to its
# compiled kernel of the others 0.2-7x at every size (leafspine4x8 All-Gather 0.15 s on 0.41 s, dgx_h100x4 0.30 s
# on 0.04 s; dgx_h100x16 1.1 s on 0.27 s, dgx_h100x32 4.3 s on 1.6 s). At this cap the baselines add at most about
# 1 s (leafspine4x8 All-Reduce, 4 chunks per NPU) and cover every 32-NPU case of the fabric study
BASELINE_CANDIDATE_MAX_DELIVERIES = 1 << 12
# a chunk table's baselines (FAST-like, DeepEP-like, direct) are built for tables, in Python: on the 32-GPU MoE
# layer of 4,096 tokens per GPU (dgx_h100x4, 1.0 M (chunk, destination) deliveries) each took 31-34 s and ended
# 1.41x behind candidate subset_trees (2 cores, with another job)
TABLE_BASELINE_MAX_DELIVERIES = 1 << 19
# the list schedule (solvers/list_schedule.py) runs while (NPU, chunk) receipts x hops over its runs stays within
# this: one run of dgx_h100x8 at 4 chunks per NPU is 1.4e7 (0.3-0.4 s), dgx_h100x16 at 1 chunk 4.6e7 (about 0.5 s);
# dgx_h100x16 at 4 chunks, 1.8e8, took 8.8 s before the lazy offers (about half now), so it stops below that
LIST_MAX_WORK = 1 << 26


# ---------------------------------------------------------------------------- options
@dataclass(frozen=True)
class GreedyOptions(SolverOptions):
    """Options of the greedy (``docs/greedy.md`` has their exact meaning and measured effect)."""

    candidates: tuple[str, ...] | None = option(
        None, doc="the portfolio's candidates that may run, by name, in the portfolio's order, and plug-ins as "
                  "module.path:Name run after them (null: every one whose switch option is on; python -m "
                  "solvers.describe lists them)")

    chunk_order: str = option("random", choices=CHUNK_ORDERS, plugin=True,
                              doc="order in which a destination's candidate chunks are matched (random = TACOS); "
                                  "or a user's score as module.path:function (solvers/greedy/priority.py)")
    link_tiebreak: str = option("earliest_finish", choices=LINK_TIEBREAKS,
                                doc="which free in-link carries a chosen chunk (earliest_finish = TACOS)")
    restarts: int = option(1, minimum=1, doc="best of this many runs, seeds derived from `seed`")
    restart_work: int = option(0, minimum=0,
                               doc="small problems get more restarts: up to 4 while NPUs x chunks x restarts <= "
                                   "restart_work (0: only `restarts`)")
    duplicates: bool = option(False, doc="a faster link may re-deliver a chunk in flight on a slower one")
    preempt: bool = option(False, doc="with duplicates, withdraw the slower in-flight copy")
    matching: str = option("greedy", choices=MATCHINGS,
                           doc="greedy (maximal, TACOS) or maximum (augmenting paths) matching per destination")
    window: int = option(0, minimum=0, doc="each link offers only its `window` earliest arrivals (0 = all)")
    progress: bool | None = option(None, doc="tqdm progress bar (null: only when stderr is a terminal)")
    imports: str = option("all", choices=IMPORTS,
                          doc="near: a link does not carry a chunk an NPU nearer its receiver holds or receives "
                              "(import once per near set); group: the same per group of faster links; all: TACOS")
    import_gate: float = option(0.0, minimum=0.0,
                                doc="the near rule applies only while the near in-links can drain their backlog: "
                                    "t_near + gate * backlog / rate < t_link (0: always)")
    link_order: str = option("chunk_first", choices=LINK_ORDERS,
                             doc="chunk_first (TACOS: a chunk, then a link) or fewest_first (the link with the "
                                 "fewest candidates picks first)")
    group_matching: bool = option(False, doc="cross-group links into one group are matched together (maximum "
                                             "matching per group)")
    decompose: bool = option(False, doc="All-Gather: also build the tier decomposition (each rail's All-Gather by "
                                        "the greedy, then one hop to every group peer; groups must be complete) "
                                        "and keep the faster schedule; the only candidate of the topology-aware "
                                        "rules beyond TIERED_MAX_PAIRS (NPUs x chunks)")
    broadcast_reserve_tries: int = option(0, minimum=0,
                                          doc="Broadcast and Reduce, while the schedule is above the lower bound: "
                                              "also route (chunk, NPU) requests by reservation, reordered by "
                                              "squeaky-wheel rounds, up to this many runs (0: off; fewer on large "
                                              "problems: MULTICAST_WORK), the faster kept")
    reserve_tries: int = option(0, minimum=0,
                                doc="Scatter and Gather: while the schedule is above a lower bound, also route the "
                                    "chunks one at a time, farthest first, each on its earliest-arrival path "
                                    "through the links already reserved, under up to this many random tie "
                                    "orders, the fastest kept (0: off)")
    rarest_candidate: bool = option(False, doc="All-Gather with topology-aware rules: also run TACOS with the "
                                               "globally rarest chunk first (chunk_order=rarest), with more seeds "
                                               "on small problems (RAREST_WORK), the faster kept")
    tacos_candidate: bool = option(False, doc="All-Gather with topology-aware rules: also run the TACOS rule once "
                                              "and keep the faster schedule")
    tree_candidate: bool = option(False, doc="All-Gather (and the phases of Reduce-Scatter, All-Reduce): also "
                                              "pack spanning trees by link load and run a greedy that sends each "
                                              "chunk along its tree first, the faster kept (up to TREE_MAX_PAIRS "
                                              "NPUs x chunks)")
    subset_tree_candidate: bool = option(False, doc="a chunk table that multicasts to subsets (MoE dispatch, "
                                                     "combine mirrored), on a switched fabric or point-to-point "
                                                     "links: also run multicast trees that only the chunk's "
                                                     "destinations (and relays toward them) receive, beside one "
                                                     "unicast copy per destination, the faster kept")
    baseline_candidates: bool = option(False, doc="switched fabrics, and chunk tables anywhere: also run every "
                                                  "registered baseline (the baselines family) that takes the "
                                                  "collective (or the table) on this network, "
                                                  "and keep the fastest schedule (greedy's own on ties; not "
                                                  "beyond BASELINE_CANDIDATE_MAX_DELIVERIES (NPU, chunk) "
                                                  "deliveries)")

    relabel_tries: int = option(0, minimum=0,
                                doc="Broadcast, Reduce, Scatter, Gather: while the schedule is above a lower "
                                    "bound, also run the greedy (one seed) on up to this many relabelled copies "
                                    "(NPUs numbered by hops from the root, then from its neighbours spread "
                                    "apart; later tries rotate them, then random labels), each mapped back, "
                                    "the fastest kept (0: off; more than 1 only on small problems with one "
                                    "link speed, relabel_work)")
    in_switch_candidate: bool = option(False, doc="All-Reduce on a switched fabric whose switches multicast and "
                                                  "reduce: also build the in-network pipeline (one switch: owner "
                                                  "changes interleaved; a tree of switches: SHARP-like), the "
                                                  "faster kept")
    list_candidate: bool = option(False, doc="copies to every NPU (All-Gather, Broadcast, their mirrors, "
                                             "All-Reduce): also run the list schedule over hops (links on "
                                             "point-to-point topologies; the transfer that completes first, the "
                                             "rarest chunk on ties, its tie rules in turn), the faster kept (up "
                                             "to list_max_work)")
    rails_candidate: bool = option(False, doc="All-Gather (Reduce-Scatter, All-Reduce) on a rail-optimized "
                                              "fabric: also run the rail decomposition first (each rail's "
                                              "All-Gather, each node spreading the rails' arrivals over its own "
                                              "switch as they land; solvers.greedy.rails), the faster kept, "
                                              "from rails_min_pairs NPUs x chunks on")
    group_tree_candidate: bool = option(False, doc="All-Reduce on a fabric of switch groups whose switches reduce "
                                                   "and multicast (DGX-like nodes): also reduce each chunk in "
                                                   "every group, combine it between groups on the positions that "
                                                   "free first (through a slow group when exactly one is slower) "
                                                   "and spread it again (solvers.greedy.group_trees), the faster "
                                                   "kept, up to group_tree_max_pairs chunks x groups; not on three "
                                                   "or more groups whose links out all run at one speed")
    rail_slot_candidate: bool = option(False, doc="a chunk table (MoE dispatch and combine, All-to-Allv) on a "
                                                  "rail-optimized fabric: also run it in NIC slots first (each "
                                                  "chunk across to a node once on its rail, the slots a matching "
                                                  "decomposition of each rail's crossings, then spread over the "
                                                  "node's switch; solvers.greedy.rail_tables), the faster kept")
    flow_candidate: bool = option(False, doc="Gather, Scatter, All-to-All on point-to-point links: also route "
                                             "each pair's chunks along the multicommodity-flow LP's paths and "
                                             "list-schedule them (candidate flow), the faster kept")
    # budgets: the work limits that decide whether (and how far) a candidate runs
    # 30,000 takes in random96d3s0 All-to-All (27,648: 1.009x the flow bound in 5.5 s, 1.416x without the candidate)
    flow_max_columns: int = option(30_000, minimum=0, doc="budget of candidate flow: the LP's commodities x "
                                                          "links (HiGHS: ~3 s at the default)")
    tiered_max_pairs: int = option(TIERED_MAX_PAIRS, minimum=1,
                                   doc="budget of the topology-aware rules on an All-Gather: from this many "
                                       "NPUs x chunks on, the tier decomposition runs instead (or, without one, "
                                       "the TACOS rule on the scale engine)")
    rarest_work: int = option(RAREST_WORK, minimum=1, doc="budget of candidate rarest: up to 4 seeds while NPUs x "
                                                          "chunks x seeds stays within it")
    tree_max_pairs: int = option(TREE_MAX_PAIRS, minimum=0, doc="budget of candidate trees: at most this many "
                                                                "NPUs x chunks")
    reserve_work: int = option(RESERVE_WORK, minimum=1, doc="budget of candidate reserve_scatter: runs while "
                                                            "chunks x links x runs stays within it (at least one)")
    relabel_work: int = option(RELABEL_WORK, minimum=1, doc="budget of candidate relabel: copies beyond the first "
                                                            "while NPUs x chunks x copies stays within it")
    broadcast_reserve_work: int = option(MULTICAST_WORK, minimum=1,
                                         doc="budget of candidate reserve_broadcast: (chunk, NPU) requests x links "
                                             "x runs (none when one run exceeds it)")
    subset_tree_max_pairs: int = option(SUBSET_TREE_MAX_PAIRS, minimum=0,
                                        doc="budget of candidate subset_trees: at most this many NPUs x chunks")
    per_destination_max_deliveries: int = option(PER_DESTINATION_MAX_DELIVERIES, minimum=0,
                                                 doc="budget of candidate rules on a fabric chunk table that "
                                                     "multicasts to subsets: at most this many per-destination "
                                                     "copies while subset_trees takes the table")
    tacos_max_pairs: int = option(TACOS_CANDIDATE_MAX_PAIRS, minimum=0,
                                  doc="budget of candidate tacos on a switched fabric: at most this many NPUs x "
                                      "chunks")
    list_max_work: int = option(LIST_MAX_WORK, minimum=0, doc="budget of candidate list: at most this many "
                                                              "(NPU, chunk) receipts x hops in all its runs (one "
                                                              "run at least; on a fabric both phases of an "
                                                              "All-Reduce)")
    group_tree_max_pairs: int = option(2048, minimum=0, doc="budget of candidate group_trees: at most this many "
                                                            "chunks x switch groups (about 1 ms each)")
    group_tree_search_work: int = option(0, minimum=0, doc="candidate group_trees with one slow switch group: "
                                                           "then search the healthy group combining each chunk "
                                                           "(hill climbing, one chunk at a time) for up to this "
                                                           "many chunks x groups placed in all (about 0.25 ms "
                                                           "each; 0: off)")
    rails_min_pairs: int = option(0, minimum=0, doc="candidate rails runs on problems of at least this many NPUs x "
                                                    "chunks (0: every size)")
    baseline_max_deliveries: int = option(BASELINE_CANDIDATE_MAX_DELIVERIES, minimum=0,
                                          doc="budget of the baseline candidates on a switched fabric: at most "
                                              "this many (NPU, chunk) deliveries")
    table_baseline_max_deliveries: int = option(TABLE_BASELINE_MAX_DELIVERIES, minimum=0,
                                                doc="budget of the baseline candidates on a chunk table: at most "
                                                    "this many (chunk, destination) deliveries")

    routing: str = option("balanced", choices=ROUTINGS,
                          doc="unicast data (gather, scatter, all_to_all): balanced = one shortest path per chunk "
                              "chosen to balance link load, then longest-remaining-route first on every link; "
                              "adaptive = any shortest path, each link takes its queue first in, first out")
    route_passes: int = option(2, minimum=0, doc="routing=balanced: rounds of rip-up and re-route after the first")
    route_stretch: float | None = option(None, minimum=0.0,
                                         doc="routing=balanced: a route may start with a detour off the shortest "
                                             "paths, up to (1 + stretch) x the shortest time, when that lowers "
                                             "its most loaded link (null: 0; greedy_plus: 0 and 0.5, the faster "
                                             "schedule kept; 1 when resuming after a fault)")

    detour_gap: float = option(0.01, minimum=0.0,
                               doc="routing=balanced with detours (greedy_plus, a route_stretch of 0.5 beside 0): "
                                   "the detour routing runs only while the shortest routes' most loaded link is "
                                   "more than this fraction above the flow LP's floor (0: unless at the floor)")
    reserve_resume: bool = option(True, doc="resuming a gather, scatter or all-to-all after a fault: also route "
                                            "the remainder by reservation from the state (each chunk from any "
                                            "holder once its copy is there, links busy until their in-flight "
                                            "transfers end; up to RESUME_RESERVE_TRIES tie orders) and keep the "
                                            "faster once placed")
    reversed_gather_resume: bool = option(True, doc="resuming a gather after a fault (routing=balanced): also "
                                                    "build the remainder time-reversed, as a scatter from the "
                                                    "root to each chunk's holder nearest it, and keep the "
                                                    "faster (false: the forward resume only)")

    def check(self) -> None:
        if ":" in self.chunk_order and self.tiered:
            raise SolverError(f"chunk_order={self.chunk_order} (a user's score) runs on the TACOS matcher: not with "
                              "the topology-aware rules (set imports=all, link_order=chunk_first, "
                              "group_matching=false)")
        if self.preempt and not self.duplicates:
            raise SolverError("greedy option preempt=true needs duplicates=true (only a duplicate can preempt)")
        if self.tiered:
            clash = [f"{k}={v}" for k, v, d in (("duplicates", self.duplicates, False), ("window", self.window, 0),
                                                ("matching", self.matching, "greedy")) if v != d]
            clash += [f"chunk_order={self.chunk_order}"] if self.chunk_order in ("farthest", "oldest") else []
            if clash:
                raise SolverError(f"greedy options {', '.join(clash)} do not combine with the topology-aware rules "
                                  "(imports, link_order, group_matching, chunk_order=local_rarest)")
        if self.import_gate > 0 and self.imports != "near":
            raise SolverError("greedy option import_gate needs imports=near")

    @property
    def tiered(self) -> bool:
        """Whether a topology-aware rule is on (the run then uses :mod:`solvers.greedy._kernel_tiered`)."""
        return (self.imports != "all" or self.link_order != "chunk_first" or self.group_matching
                or self.chunk_order == "local_rarest")


@dataclass(frozen=True)
class GreedyPlusOptions(GreedyOptions):
    """``greedy_plus``: the greedy with the best general topology-aware rules found (docs/greedy.md)."""

    chunk_order: str = option("local_rarest", choices=CHUNK_ORDERS, plugin=True,
                              doc="order in which candidate chunks are matched (local_rarest: rare at the receiver)")
    imports: str = option("near", choices=IMPORTS, doc="import once per near set (see greedy)")
    import_gate: float = option(0.5, minimum=0.0, doc="gate of the near rule (see greedy)")
    link_order: str = option("fewest_first", choices=LINK_ORDERS, doc="the link with the fewest candidates first")
    group_matching: bool = option(True, doc="maximum matching of the cross-group links into each group")
    # a pipelined broadcast's result depends on the seed (torus8x8, 8 chunks: 1.111x the bound for half the seeds,
    # 1.000x for the others, as CP-SAT proves); on problems this small, 4 seeds cost milliseconds
    restart_work: int = option(1 << 12, minimum=0, doc="more restarts on small problems (see greedy)")
    decompose: bool = option(True, doc="also build the tier decomposition, the faster kept (see greedy)")
    tacos_candidate: bool = option(True, doc="also run the TACOS rule once, the faster kept (see greedy)")
    # the fabric study: direct (dgx_h100x4 All-to-All), pairwise (leafspine4x8 All-to-All) and rhd (leafspine4x8
    # All-Gather, All-Reduce) were up to 8.3 % ahead of the rules on 12 of 150 cases (docs/studies/fabrics.md)
    baseline_candidates: bool = option(True, doc="switched fabrics and chunk tables: also run the baselines, the "
                                                 "fastest kept (see greedy)")
    # rail-optimized clusters (dgx_h100x4 ... dgx_h100x8, 1-4 chunks per NPU): the list schedule meets the lower
    # bound where the rules end 1.03-1.19x above it; the MI250X node All-Gather 1.002x where the rest end 1.168x
    # (docs/rails.md)
    list_candidate: bool = option(True, doc="also run the list schedule, the faster kept (see greedy)")
    # rail-optimized clusters: the bound from two kinds of small problems, 10-80 ms up to 128 GPUs, 1.7 s on the
    # 1,024-GPU dgx_h100x128 (1.00000x where the rules took 16.7 s for 1.002x; docs/rails.md)
    rails_candidate: bool = option(True, doc="also run the rail decomposition first, the faster kept (see greedy)")
    # MoE dispatch on dgx_h100x4 (16 tokens a GPU): 1.03-1.05x the bound at Gini 0.1-0.4, where the multicast
    # trees end 1.01-1.33x; the 64-GPU layer of 512 tokens 1.010x in about a second (docs/studies/moe.md)
    # a DGX-like node's NICs at half speed (dgx_h100x4, All-Reduce 1 GiB): 1.104x the bound (1.080x with the
    # search, below) where Reduce-Scatter then All-Gather ends 1.386x; two nodes with four of eight rails at half
    # speed 1.095x (1.151x) (docs/faults.md)
    group_tree_candidate: bool = option(True, doc="also run the group trees All-Reduce, the faster kept (see "
                                                  "greedy)")
    # the same node: the search takes it from 1.104x to 1.080x in 128 schedules (1.9 s; 2 chunks per NPU 1.152x ->
    # 1.114x); on the other slow-node cases of docs/faults.md it found nothing better
    group_tree_search_work: int = option(1 << 14, minimum=0, doc="search the roots of the group trees (see "
                                                                 "greedy)")
    rail_slot_candidate: bool = option(True, doc="also run chunk tables in NIC slots first, the faster kept "
                                                 "(see greedy)")
    subset_tree_candidate: bool = option(True, doc="chunk tables multicasting to subsets: also run multicast "
                                                   "trees, the faster kept (see greedy)")
    # the AMD MI250 node of ForestColl (links of multiplicity 1, 2, 4): the tiered rules trail the plain rarest
    # order by 6-8 % at 4 and 16 chunks per NPU (docs/peer_topologies.md)
    rarest_candidate: bool = option(True, doc="also run TACOS with the rarest chunk first, the faster kept "
                                              "(see greedy)")
    # the AMD MI250 node of ForestColl, 1 GiB: 64 chunks per NPU 1.011x ForestColl's throughput optimum (1.026x
    # without), 16 chunks 1.025x (1.051x); elsewhere it never won (meshes, tori, hetero clusters, DGX-1, NDv2)
    tree_candidate: bool = option(True, doc="spanning-tree candidate for All-Gather (see greedy)")
    # hetero64 Scatter/Gather: every root at the lower bound with 256 (1.104-1.156x on 9 of 64 roots without)
    reserve_tries: int = option(256, minimum=0, doc="reservation routing of Scatter and Gather (see greedy)")
    # hetero_mesh4x4 Broadcast and Reduce, 8 chunks: every root at the pipeline bound (1.077-1.0995x without; the
    # greedy leaves gaps on the in-links of the NPUs that limit the pipeline); at most 154 runs were needed
    broadcast_reserve_tries: int = option(800, minimum=0, doc="reservation routing of Broadcast and Reduce "
                                                              "(see greedy)")
    # torus4x4/torus8x8 Broadcast and Reduce, 8 chunks: every root at the pipeline bound for seeds 0-19 with 3
    # (with 1: for most seeds, but 7 of 64 roots with seeds 7, 11, 14, 18, 19; without: 1 of 16 and 7 of 64);
    # each copy costs about one more run (docs/greedy.md), so copies beyond the first obey relabel_work
    relabel_tries: int = option(3, minimum=0, doc="relabelled copies of a rooted problem (see greedy)")
    # switched8_nvls / leafspine SHARP-like All-Reduce: the in-network pipeline is the one at the bound there
    in_switch_candidate: bool = option(True, doc="in-network All-Reduce pipelines on fabrics (see greedy)")
    # random32d3s0 / random64d3s0 All-to-All: the shortest-path routing is 1.16x / 1.37x the flow bound
    # (docs/bounds.md, flow); the LP's paths bring it to (see docs/greedy.md)
    flow_candidate: bool = option(True, doc="flow-routed unicast candidate (see greedy)")


def restart_seeds(seed: int, restarts: int) -> np.ndarray:
    """The kernel seed of each restart, derived from ``seed`` (prefix-stable in ``restarts``).

    >>> restart_seeds(0, 3)[:2].tolist() == restart_seeds(0, 2).tolist()
    True
    """
    return np.random.SeedSequence(int(seed)).generate_state(restarts, dtype=np.uint64)


def restart_count(problem: Problem, opts: GreedyOptions) -> int:
    """How many runs: ``opts.restarts``, or more on a small problem with ``restart_work``.

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import torus2d
    >>> p = Problem(torus2d(8, 8), Collective("broadcast", 8))
    >>> restart_count(p, GreedyOptions()), restart_count(p, GreedyPlusOptions())
    (1, 4)
    """
    auto = opts.restart_work // max(problem.num_npus * problem.num_chunks, 1)
    return max(opts.restarts, min(AUTO_RESTARTS_MAX, auto))


