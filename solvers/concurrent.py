"""Several collectives sharing one network (``collective=concurrent``, :mod:`tacos_bench.concurrent`), by any
backend that takes each part.

Each part is first solved alone on the whole network by the backend (its named collective when its group is every
NPU, else its chunk table), then the parts are combined by ``collective.mode``:

``sequential``
    one part after another, each shifted past the previous parts' end;
``priority``
    the first part exactly as it ran alone; the other parts' transfers, in their own order, each placed at the
    earliest time its data is there and its links are idle (in the first part's gaps too);
``joint``
    one schedule for all: every part's transfers, by the time they started alone, each placed as above (the
    parts contend for the links they share, first come first served), and each part in turn placed first; where
    every part is a copy table, the union table is also solved as one problem by the backend. The fastest of these
    and the sequential schedule is kept (``concurrent_plan`` says which), so joint is never slower than
    sequential.

A placed transfer keeps what it read alone: a copy leaves once one complete copy it could read is there (else
once every partial sum it read, as an All-Reduce's All-Gather leaves the owner once the reduction is complete), a
reduction once every arrival it read (each part's reductions send a chunk once, after all they wait for). Each
transfer holds every link of its route for its whole duration (a superset of what the verifier counts), so a
placement never overlaps another. The combined schedule is replayed by the verifier before it may be kept; the
record has each part's finish (``part_times_us``) and each part's lower bound alone (``part_bounds_us``).
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule, row_links



def solve_concurrent(backend, problem: Problem, opts, SolveResult):
    """``backend``'s schedule of a concurrent collective (module docstring), as a ``SolveResult`` (the class is
    passed in: solvers.base calls this module, which therefore does not import it back)."""
    from tacos_bench.bounds import part_problem

    t0 = time.perf_counter()
    info = problem.collective.demand.meta["parts"]
    alone, stats = [], {}
    for part in info.parts:
        sub = part_problem(problem, part)
        res = backend.solve(sub, opts)
        if res.schedule is None:
            return SolveResult(res.status, None, message=f"part {part.index} ({part.kind}): {res.message}",
                               stop_reason=res.stop_reason, solve_time_s=time.perf_counter() - t0)
        s = res.schedule.to_schedule()
        alone.append(Schedule(s.chunk + info.offsets[part.index], s.src, s.dst, s.start_us, s.end_us, s.op,
                              route=s.route))
    plans = {"sequential": _sequential(alone)}
    if info.mode == "priority":
        plans = {"priority": merge(problem, alone, priority=True)}
    elif info.mode == "joint":
        plans["joint"] = merge(problem, alone, priority=False)
        for i in range(1, len(alone)) if len(alone) > 1 else ():
            # each part in turn first: the interleaving by start times is not always the best
            order = [alone[i]] + alone[:i] + alone[i + 1:]
            plans[f"part {i} first"] = merge(problem, order, priority=True)
        if len(alone) > 1:
            plans["part 0 first"] = merge(problem, alone, priority=True)
        if problem.collective.copies:
            try:
                plans["union"] = backend.solve(Problem(problem.topology, _as_custom(problem)), opts).schedule
            except Exception:  # noqa: BLE001 - the union is one more candidate; the merged ones remain
                pass
    from tacos_bench.verify import check

    best, why = None, {}
    for name, sched in plans.items():
        if sched is None:
            continue
        sched = sched.to_schedule()
        ver = check(problem, sched)
        why[name] = ver.collective_time_us if ver.valid else f"rejected: {ver.message}"
        if ver.valid and (best is None or sched.makespan_us < best[1].makespan_us * (1 - 1e-12)):
            best = (name, sched)
    if best is None:
        return SolveResult("error", None, message=f"no combined schedule passed the verifier ({why})",
                           stop_reason="error", solve_time_s=time.perf_counter() - t0)
    name, sched = best
    stats.update(concurrent_plan=name, concurrent_plans_us=str({k: v for k, v in why.items()}),
                 part_times_us=part_times(problem, sched), transfers=len(sched))
    return SolveResult("feasible", sched, objective_us=sched.makespan_us, solve_time_s=time.perf_counter() - t0,
                       stats=stats, candidate=name)


def _as_custom(problem: Problem):
    from tacos_bench.collective import Collective

    return Collective("custom", demand=problem.collective.demand)


def part_times(problem: Problem, schedule: Schedule) -> list[float]:
    """Each part's finish: the last end of a transfer of its chunks (0 for a part with nothing to move)."""
    offsets = problem.collective.demand.meta["parts"].offsets
    part = np.searchsorted(np.asarray(offsets[1:]), schedule.chunk, side="right")
    out = np.zeros(len(offsets) - 1)
    np.maximum.at(out, part, schedule.end_us)
    return [float(x) for x in out]


def _sequential(alone: list[Schedule]) -> Schedule:
    out, t = [], 0.0
    for s in alone:
        out.append(s.shifted(t))
        t += s.makespan_us
    return Schedule.concat(out)


def merge(problem: Problem, alone: list[Schedule], priority: bool) -> Schedule:
    """The parts' schedules placed together (module docstring): ``priority`` keeps the first part as it ran."""
    topo = problem.topology
    units = []   # (key, part, row indices into the concatenation)
    cat = Schedule.concat(alone)
    part_of = np.concatenate([np.full(len(s), i) for i, s in enumerate(alone)]) if alone else np.zeros(0, int)
    # rows of one multicast copy share links, start and end: one unit
    groups: dict = {}
    for i, (c, s, st, en) in enumerate(zip(cat.chunk.tolist(), cat.src.tolist(), cat.start_us.tolist(),
                                          cat.end_us.tolist())):
        groups.setdefault((c, s, st, en, int(part_of[i])), []).append(i)
    for (c, s, st, en, p), rows in groups.items():
        units.append(((0 if priority and p == 0 else 1, st, p), p, rows))
    units.sort(key=lambda u: u[0])
    links = row_links(topo, cat)
    n = problem.num_npus
    C = problem.num_chunks
    # the arrivals each row read alone: at its sender, of its chunk, ended by its start
    arrivals: dict = {}
    for i, (c, d, en) in enumerate(zip(cat.chunk.tolist(), cat.dst.tolist(), cat.end_us.tolist())):
        arrivals.setdefault(d * C + c, []).append((en, i))
    for v in arrivals.values():
        v.sort()
    held_at_start = _initial_holders(problem)
    new_start = np.full(len(cat), np.nan)
    new_end = np.full(len(cat), np.nan)
    busy: dict[int, list] = {}
    tol = 1e-9 * max(1.0, float(cat.makespan_us) if len(cat) else 1.0)
    for _, p, rows in units:
        i0 = rows[0]
        c, u, st = int(cat.chunk[i0]), int(cat.src[i0]), float(cat.start_us[i0])
        dur = float(cat.end_us[i0] - cat.start_us[i0])
        read = [j for en, j in arrivals.get(u * C + c, []) if en <= st + tol]
        ends = [new_end[j] for j in read]
        if any(np.isnan(e) for e in ends):   # an arrival not placed yet: cannot happen in start order
            raise RuntimeError("merge order broke a dependency")
        copies = [e for e, j in zip(ends, read) if cat.op[j] == COPY]
        if cat.op[i0] == COPY and u < n and (u, c) in held_at_start:
            ready = 0.0
        elif cat.op[i0] == COPY and copies:
            ready = min(copies)        # one complete copy there is enough
        else:
            ready = max(ends) if ends else 0.0   # partial sums: all it read (a reduction's result: all of them)
        occ = np.unique(np.concatenate([links[j] for j in rows]))
        t = _earliest(busy, occ, ready, dur)
        for lid in occ.tolist():
            bisect.insort(busy.setdefault(lid, []), (t, t + dur))
        new_start[rows], new_end[rows] = t, t + dur
    return Schedule(cat.chunk, cat.src, cat.dst, new_start, new_end, cat.op, route=cat.route).sorted()


def _initial_holders(problem: Problem) -> set:
    d = problem.demand
    out = set()
    for c in range(d.num_chunks):
        if d.op[c] == COPY:
            out.add((int(d.source[c]), c))
    return out


def _earliest(busy: dict, links, ready: float, dur: float) -> float:
    """The earliest ``t >= ready`` at which ``[t, t + dur]`` overlaps no busy interval of ``links``."""
    t = ready
    moved = True
    while moved:
        moved = False
        for lid in links.tolist():
            iv = busy.get(lid)
            if not iv:
                continue
            k = bisect.bisect_left(iv, (t, t))
            for a, b in iv[max(0, k - 1):]:
                if a >= t + dur:
                    break
                if b > t and a < t + dur:
                    t = b
                    moved = True
    return t
