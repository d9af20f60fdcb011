"""The statistics of the baselines (``bfs``, ``ring``, ``direct``, ``rhd``, ``dbt``, ``pairwise``, ``bruck``,
``binomial``, ``chain``, ``nvls``, ``sharp``): record fields ``s_<name>``.

Every baseline may report ``transfers`` and ``note``; each algorithm adds its own layout (``ring_*``, ``rhd_*``,
...). On a switched fabric an algorithm with a copy phase runs on the fabric's logical topology and reports only
``fabric`` and ``all_reduce`` (:func:`solvers.baselines.fabric.solve_on_fabric`); ``dbt`` never runs there, and
``nvls`` and ``sharp`` schedule the fabric themselves.

Examples
--------
>>> sorted(RING_STATS.stats)[:3]
['all_reduce', 'fabric', 'note']
>>> BRUCK_STATS.lookup("pairwise_rounds") is None
True
"""

from __future__ import annotations

from ..stats import COMMON, Stat, StatsSchema

# the baselines compile nothing of their own, so of the common statistics only the transfers
_TRANSFERS = COMMON.stats["transfers"]

# what every baseline may report (solvers.baselines.common.BaselineSolver)
_ANY = StatsSchema(
    _TRANSFERS,
    Stat("note", str, "", "why nothing was scheduled (a single NPU)"),
)
# a baseline with a copy phase on a switched fabric, in place of its own (solvers.baselines.fabric.solve_on_fabric)
_ON_FABRIC = StatsSchema(
    Stat("fabric", str, "", "a switched fabric: how the algorithm ran on it (on the logical topology, its "
                            "transfers placed on the hops)"),
    Stat("all_reduce", str, "", "a switched fabric: how an All-Reduce joined its phases (barrier)"),
)
BASE = StatsSchema(include=(_ANY, _ON_FABRIC))

BFS_STATS = StatsSchema(_TRANSFERS)

RING_STATS = StatsSchema(
    Stat("ring_embedding", str, "", "hamiltonian (every ring step a link) or multi-hop (steps routed over "
                                    "shortest paths)"),
    Stat("ring_search", str, "", "how the ring was found: trivial, identity, gray-code, grid-snake, dfs; "
                                 "without a Hamiltonian cycle none (none exists) or search-capped"),
    Stat("ring_search_expansions", int, "", "DFS expansions of the Hamiltonian-cycle search"),
    Stat("ring_directions", int, "", "ring directions used (2: each chunk goes half-way each way round)"),
    Stat("ring_max_hops", int, "", "links of the longest ring step"),
    Stat("ring_total_hops", int, "", "links around the ring"),
    include=(BASE,),
)

DIRECT_STATS = StatsSchema(
    Stat("direct_fully_connected", bool, "", "every NPU has a link to every other (Direct's assumption)"),
    include=(BASE,),
)

RHD_STATS = StatsSchema(
    Stat("rhd_phases", int, "", "halving / doubling phases (log2 of the core NPUs)"),
    Stat("rhd_core_npus", int, "", "NPUs in the power-of-two core"),
    Stat("rhd_folded_npus", int, "", "NPUs folded into a core neighbour (N minus the core)"),
    Stat("rhd_multi_hop_exchanges", int, "", "partner exchanges that are not one link (routed over shortest paths)"),
    Stat("rhd_phase_sync", bool, "", "pairs waited for each phase to end (phase_sync)"),
    include=(BASE,),
)

DBT_STATS = StatsSchema(
    *(Stat(f"dbt_tree{t}_{name}", int, "", f"tree {t}: {doc}") for t in (0, 1) for name, doc in (
        ("root", "its root NPU"),
        ("multi_hop_edges", "tree edges that are not links both ways (routed over shortest paths)"),
        ("chunks", "chunks it carries (every other chunk)"))),
    include=(_ANY,),
)

PAIRWISE_STATS = StatsSchema(
    Stat("pairwise_rounds", int, "", "exchange rounds (N - 1)"),
    Stat("pairwise_sync", bool, "", "a round waited for the NPU's previous send and receive (sync)"),
    Stat("pairwise_multi_hop_messages", int, "", "messages that are not one link (routed over shortest paths)"),
    include=(BASE,),
)

BRUCK_STATS = StatsSchema(
    Stat("bruck_rounds", int, "", "rounds (ceil(log2 N))"),
    Stat("bruck_sync", bool, "", "a round waited for the NPU's previous send and receive (sync)"),
    Stat("bruck_multi_hop_messages", int, "", "messages that are not one link (routed over shortest paths)"),
    include=(BASE,),
)

BINOMIAL_STATS = StatsSchema(
    Stat("binomial_depth", int, "", "depth of the binomial tree (edges)"),
    Stat("binomial_multi_hop_edges", int, "", "tree edges that are not one link (routed over shortest paths)"),
    Stat("binomial_order", str, "", "how virtual ranks were assigned: distance or rank (order)"),
    include=(BASE,),
)

CHAIN_STATS = StatsSchema(
    Stat("chain_multi_hop_steps", int, "", "chain steps that are not one link (routed over shortest paths)"),
    Stat("chain_hops", int, "", "links along the chain"),
    include=(BASE,),
)

FAST_STATS = StatsSchema(
    Stat("fast_servers", int, "", "servers (groups of the fastest links)"),
    Stat("fast_steps", int, "", "Birkhoff-von Neumann steps (one-to-one server matchings) of the last phase"),
    Stat("fast_cross_deliveries", int, "", "(chunk, destination) deliveries between servers"),
    Stat("fast_balanced_deliveries", int, "", "of those, handed to another NPU of the source server to cross "
                                             "(intra-server balancing)"),
    Stat("fast_inside_deliveries", int, "", "(chunk, destination) deliveries inside a server"),
    include=(BASE,),
)

DEEPEP_STATS = StatsSchema(
    Stat("deepep_servers", int, "", "servers (groups of the fastest links)"),
    Stat("deepep_rdma_messages", int, "", "chunks sent across a server pair (once per chunk and server)"),
    Stat("deepep_nvlink_forwards", int, "", "forwards inside the destination server from the rail NPU"),
    include=(BASE,),
)

IN_SWITCH_STATS = StatsSchema(
    Stat("algorithm", str, "", "the in-network algorithm (nvls: in-switch reduce and multicast; sharp: "
                               "through the leaf-spine tree)"),
    include=(_ANY,),
)
