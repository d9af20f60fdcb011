"""The statistics of the greedy family (``greedy``, ``greedy_plus``, ``hier``): record fields ``s_<name>``.

They are those of the winning candidate's run (its engine's counters; docs/greedy.md) and the notes every
candidate that ran adds; a composed collective reports each phase's under ``rs_`` / ``ag_``.
"""

from __future__ import annotations

from ..stats import COMMON, Stat, StatsSchema

# one run of the greedy (solvers.greedy.engine.greedy_all_gather) and the fabric kernel
RUN = StatsSchema(
    Stat("engine", str, "", "the kernel of the winning run: classic, scale, tiered, unicast, tiers (the tier "
                            "decomposition), trees, fabric"),
    Stat("output", str, "", "table, or compact (streamed to disk: very large All-Gathers)"),
    Stat("restarts", int, "", "runs asked for (restarts, or more on small problems with restart_work)"),
    Stat("restarts_run", int, "", "runs done (fewer when the time limit cut them)"),
    Stat("best_restart", int, "", "index of the fastest run"),
    Stat("best_seed", int, "", "kernel seed of the fastest run"),
    Stat("greedy_candidate", str, "", "a chunk table: the candidate of the greedy's own portfolio that won it "
                                      "(the table's portfolio is the greedy against the baselines)"),
    Stat("makespans_us", list, "µs", "every run's makespan"),
    Stat("events", int, "", "event times processed"),
    Stat("transfers_started", int, "", "transfers started (duplicates included)"),
    Stat("wasted_transfers", int, "", "duplicates=true: copies that arrived after another copy"),
    Stat("cancelled_transfers", int, "", "preempt=true: slower in-flight copies withdrawn"),
    Stat("wasted_link_time_us", float, "µs", "link time of the wasted copies"),
    Stat("cancelled_link_time_us", float, "µs", "link time of the withdrawn copies up to their withdrawal"),
    Stat("augmentations", int, "", "matching=maximum: augmenting paths found"),
    Stat("matchings", int, "", "per-destination (or per-group) matchings solved"),
    Stat("scanned", int, "", "candidate (chunk, link) pairs looked at"),
    Stat("candidates", int, "", "candidate chunks offered to the matchings"),
    Stat("draws", int, "", "random draws of the chunk order"),
    Stat("rejected_draws", int, "", "scale engine: draws of a chunk the receiver no longer needs"),
    Stat("probe_scans", int, "", "scale engine: scans of a candidate set after rejected draws"),
    Stat("match_rounds", int, "", "scale engine: matching rounds"),
    Stat("max_candidate_set", int, "", "scale engine: the largest candidate set"),
    Stat("stale_candidates", int, "", "scale engine: candidates dropped as already held"),
    Stat("candidate_groups", int, "", "scale engine: in-link groups (by link time) per destination"),
    Stat("threads", int, "", "scale engine: threads the kernel used"),
    Stat("gate_checks", int, "", "tiered rules: checks of the import gate"),
    Stat("gate_closed", int, "", "tiered rules: times the gate let a far link carry a near chunk"),
    Stat("deferred_links", int, "", "tiered rules: links left idle by the near rule at an event"),
    Stat("fallbacks", int, "", "tiered rules: matchings that fell back to any needed chunk"),
    Stat("near_classes", int, "", "tiered rules: near sets of NPUs"),
    Stat("near_max", int, "", "tiered rules: NPUs of the largest near set"),
    Stat("partitions", int, "", "tiered rules: partitions of the NPUs; scale engine: random-stream partitions"),
    Stat("groups", int, "", "tiered rules: groups of NPUs joined by faster links"),
    Stat("cross_group_links", int, "", "tiered rules: links between groups"),
    Stat("stale_queue_entries", int, "", "unicast engine (routing=adaptive): queue entries of chunks gone"),
    Stat("queue_pool", int, "", "unicast engine (routing=adaptive): queue slots allocated"),
    Stat("route_stretch", float, "", "unicast engine: the route stretch of the kept routing"),
    Stat("max_link_load_us", float, "µs", "routed engine: the most loaded link's busy time"),
    Stat("route_passes", int, "", "routed engine: rip-up and re-route rounds"),
    Stat("route_tries", int, "", "routed engine: chunk orders tried"),
    Stat("detours_skipped", bool, "", "routed engine: the shortest routes met the flow LP's link-load floor, so "
                                      "no detour routing ran"),
    Stat("chunk_order_used", str, "", "fabric: the chunk order of the kernel (random or rarest)"),
    Stat("list_rules", str, "", "candidate list: the tie rule kept in each phase (solvers.list_schedule.RULES)"),
)

# what the candidates add (solvers.greedy.candidates, solvers.greedy.fabric_solver)
NOTES = StatsSchema(
    Stat("stop_bound_us", float, "µs", "the portfolio's stop bound: a candidate does not start once a schedule "
                                       "meets it (an All-Gather's cheap bound; a rooted collective's pipeline "
                                       "bound; a fabric's lower bound)"),
    Stat("decomposition_s", float, "s", "time the tier decomposition took"),
    Stat("by_reversal", bool, "", "a Gather solved as the time-reversed Scatter on the reversed links"),
    Stat("relabel_us", list, "µs", "candidate relabel: each relabelled copy's makespan"),
    Stat("relabel_attempt", int, "", "candidate relabel: the copy it kept (null: none)"),
    Stat("relabel_stopped", str, "", "candidate relabel: why it stopped early"),
    Stat("reserve_runs", int, "", "candidate reserve_scatter / reserve_resume: reservation runs"),
    Stat("reserve_us", float, "µs", "candidate reserve_scatter / reserve_resume: its best makespan"),
    Stat("broadcast_reserve_runs", int, "", "candidate reserve_broadcast: reservation runs"),
    Stat("broadcast_reserve_us", float, "µs", "candidate reserve_broadcast: its best makespan"),
    Stat("broadcast_reserve_bound_us", float, "µs", "candidate reserve_broadcast: the bound its rounds aim at"),
    Stat("flow_lp_us", float, "µs", "candidate flow: the flow LP's value (the fluid bound its routes follow)"),
    Stat("fabric_ignores", str, "", "fabric: options of the point-to-point rules a fabric run does not read"),
    Stat("fabric_time_s", float, "s", "fabric: time of the whole portfolio"),
    Stat("group_trees_variant", str, "", "fabric All-Reduce: the variant of candidate group_trees' fastest "
                                         "schedule (priority, roots, exports_first)"),
    Stat("chosen", str, "", "a fabric resume: the rule of the kept run (rules or tacos)"),
    Stat("resume_runs", int, "", "a fabric resume: runs"),
    Stat("hier_groups", int, "", "hier: groups of NPUs"),
    Stat("hier_rails", int, "", "hier: rails (one NPU of each group)"),
    Stat("hier_group_size", int, "", "hier: NPUs per group"),
    Stat("hier_rail_time_us", float, "µs", "hier: the rail phase's time"),
    Stat("hier_rail_algorithm", str, "", "hier: the rail algorithm (greedy or ring)"),
    Stat("compact_skipped", str, "", "hier: why the compact decomposition did not run"),
)

GREEDY_STATS = StatsSchema(include=(COMMON, RUN, NOTES), phases=("rs", "ag"))
