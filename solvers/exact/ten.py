"""Discretized time-expanded network (TEN) shared by the exact backends.

The exact solvers (:mod:`solvers.exact.milp`, :mod:`solvers.exact.cpsat`) do not work in
continuous time. They work on a grid of time steps of length ``tau``:

* ``tau`` defaults to the chunk time of the fastest link (configurable);
* link ``l`` is busy for ``d_l = ceil(t_l / tau)`` whole steps per chunk, where
  ``t_l`` is its true chunk time (:attr:`Problem.link_time_us`): rounding is
  always **up**, so a step-level plan never asks a link to be faster than it is;
* a send on link ``l`` at step ``k`` arrives at step ``k + d_l``, and the receiver
  may forward the chunk from that step on;
* the horizon is ``H`` steps: every arrival happens at a step ``<= H``.

Mapping back to real time
-------------------------
A TEN plan is a set of sends ``(chunk, link, step)``. :meth:`TimeExpandedNetwork.to_schedule`
turns it into a continuous :class:`~tacos_bench.schedule.Schedule` by replaying
it as soon as possible while keeping the plan's order: a transfer starts when
both its link is free (previous transfer on that link, in step order, has ended)
and its sender holds the chunk, and ends ``t_l`` later (the true link time).
Because ``t_l <= d_l * tau``, induction over steps shows every transfer then
starts no later than ``k * tau``, so the continuous makespan is at most the TEN
makespan ``H* * tau``; the schedule is valid by construction (durations are the
true link times, each link serves its sends one after another, every send
starts after its sender's arrival) and passes :func:`tacos_bench.verify.verify`.

What "optimal" means
--------------------
An exact backend proves the plan optimal **on the TEN** (fewest steps). When
every link time is a whole multiple of ``tau`` (:attr:`TimeExpandedNetwork.exact`,
e.g. any homogeneous topology) the TEN loses nothing: any continuous schedule
can be snapped down to step boundaries, so the TEN optimum times ``tau`` is the
continuous optimum. Otherwise rounding up may hide a faster continuous
schedule; the retimed continuous schedule is then only ever as fast as or
faster than the TEN objective, never slower. A smaller ``tau`` narrows the gap
at the price of a larger model.

Every copy collective
---------------------
The network serves every copy collective (all_gather, broadcast, gather,
scatter, all_to_all): chunk ``c`` starts at ``problem.sources[c]`` and must
reach ``problem.destinations[c]`` (``-1``: every NPU). A *multicast* chunk
(every NPU needs it) may be copied along a tree; a *unicast* chunk (one
destination) need only reach its destination, possibly relayed by other NPUs.
Reducing collectives are mirrored copy collectives (:mod:`solvers.compose`).

Late NPUs
---------
With ``collective.release_us`` a late NPU neither sends nor receives before it joins, and its own data exists
only from then: a link of a late NPU has no send variable at a step that starts before the release
(:attr:`TimeExpandedNetwork.release_steps`, the release rounded **up** to whole steps), which is all a copy
collective needs (a chunk whose source is late can only leave over those links). The earliest steps
(:meth:`TimeExpandedNetwork.earliest_step`) wait for the releases on the way, the list schedules and the
replay to real time keep each link idle until its release. The TEN optimum is the problem's only when every
release is a whole number of steps too (:attr:`TimeExpandedNetwork.exact`).

Model reduction used by both backends: each NPU receives each chunk **at most
once** (exactly once where it needs it). Any valid plan stays valid when later
duplicate deliveries are dropped (the receiver already held the chunk,
earlier), so this loses no optimal solution while making "holds" implicit:
NPU ``v`` holds chunk ``c`` at step ``k`` iff it is the source or one of its
receipts arrives by ``k``; holds are therefore monotone by construction. A
unicast chunk moreover needs only the chain of sends that brings it to its
destination (:meth:`TimeExpandedNetwork.prune_plan` drops the rest): a simple
path in time.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import torus2d
>>> ten = TimeExpandedNetwork.build(Problem(torus2d(4, 4), Collective("all_gather")))
>>> ten.exact, int(ten.link_steps.max()), ten.lower_bound_steps()
(True, 1, 4)
>>> c, l, k = ten.list_schedule()
>>> sched = ten.to_schedule(c, l, k)
>>> from tacos_bench.verify import verify
>>> verify(ten.problem, sched).collective_time_us <= ten.plan_makespan_steps(l, k) * ten.tau_us
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

from .continuous import dijkstra_arcs

# Relative slack when rounding link times up to steps: a link time that is an
# exact multiple of tau up to float noise must not get an extra step.
ROUND_TOL = 1e-9
UNREACHABLE = np.iinfo(np.int64).max // 4


def _min_steps(d: np.ndarray, count: int, weighted: bool = False) -> int:
    """Fewest steps ``T`` in which links of ``d`` steps each can carry ``count`` chunks.

    A link of ``d_l`` steps completes at most ``floor(T / d_l)`` sends by step ``T``. Unweighted, ``count``
    is a number of sends; weighted, a number of busy link-steps (``d_l`` per send).
    """
    if count <= 0:
        return 0
    d = np.asarray(d, dtype=np.int64)
    if d.size == 0:
        return UNREACHABLE
    w = d if weighted else np.ones_like(d)
    # floor(T/d) <= T/d puts the answer at or above count / rate; start a step below that, so float
    # rounding of the rate can never start above the answer
    T = max(0, int(count / float(np.sum(w / d))) - 1)
    while int(np.sum(w * (T // d))) < count:
        T += 1
    return T


@dataclass(frozen=True, eq=False)
class SendVars:
    """Candidate sends of a TEN model after pruning, as parallel arrays.

    Variable ``i`` means "chunk ``chunk[i]`` leaves on link ``link[i]`` at step
    ``step[i]`` and arrives at ``arrive[i]``".
    """

    chunk: np.ndarray
    link: np.ndarray
    step: np.ndarray
    arrive: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    def __len__(self) -> int:
        return int(self.chunk.shape[0])


@dataclass(frozen=True, eq=False)
class TimeExpandedNetwork:
    """A step-discretized view of a copy-collective problem.

    Build it with :meth:`build`; the constructor takes already-checked fields.

    Attributes
    ----------
    problem : Problem
        The copy-collective problem (all_gather, broadcast, gather, scatter, all_to_all).
    tau_us : float
        Step length in µs.
    link_steps : ndarray of int64
        ``d_l``: steps one chunk occupies link ``l`` (>= 1).
    horizon : int
        ``H``: last step at which an arrival may happen.
    """

    problem: Problem
    tau_us: float
    link_steps: np.ndarray
    horizon: int
    meta: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, problem: Problem, time_step_us: float | None = None,
              horizon_steps: int | None = None) -> "TimeExpandedNetwork":
        """Discretize ``problem`` (a copy collective).

        Parameters
        ----------
        problem : Problem
            A copy collective (reducing ones go through their mirror,
            :func:`solvers.compose.solve_collective`).
        time_step_us : float, optional
            ``tau``; default the fastest link's chunk time.
        horizon_steps : int, optional
            ``H``; default the makespan of :meth:`list_schedule` (always feasible).
        """
        if not problem.collective.copies:
            raise SolverError(f"the time-expanded network models copy collectives only, got {problem.kind} "
                              "(solve it through solvers.compose.solve_collective)")
        t = np.asarray(problem.link_time_us, dtype=np.float64)
        if time_step_us is None:
            tau = float(t.min())
        else:
            try:
                tau = float(time_step_us)
            except (TypeError, ValueError):
                raise SolverError(f"time_step_us must be a positive number, got {time_step_us!r}")
            if not (tau > 0) or not math.isfinite(tau):
                raise SolverError(f"time_step_us must be a positive number, got {time_step_us!r}")
        steps = np.maximum(1, np.ceil(t / tau - ROUND_TOL)).astype(np.int64)
        if steps.max() > 100_000:
            raise SolverError(f"time_step_us={tau:g} is too small: a link would span {int(steps.max())} steps")
        steps.setflags(write=False)
        ten = cls(problem, tau, steps, 0)
        if horizon_steps is None:
            _, l, k = ten.list_schedule()
            H = ten.plan_makespan_steps(l, k)
        else:
            if isinstance(horizon_steps, bool) or not isinstance(horizon_steps, (int, np.integer)) or horizon_steps < 1:
                raise SolverError(f"horizon_steps must be a positive integer, got {horizon_steps!r}")
            H = int(horizon_steps)
        return ten.with_horizon(H)

    def with_horizon(self, horizon: int) -> "TimeExpandedNetwork":
        """Same discretization, another horizon (cached distances are recomputed cheaply)."""
        return TimeExpandedNetwork(self.problem, self.tau_us, self.link_steps, int(horizon), dict(self.meta))

    # ------------------------------------------------------------------ views
    @property
    def num_npus(self) -> int:
        return self.problem.num_npus

    @property
    def num_chunks(self) -> int:
        return self.problem.num_chunks

    @property
    def exact(self) -> bool:
        """True when every link time, and every late NPU's release, is a whole number of steps (TEN optimum =
        continuous optimum)."""
        t = np.asarray(self.problem.link_time_us)
        r = self.problem.link_release_us()
        return bool(np.all(np.abs(self.link_steps * self.tau_us - t) <= ROUND_TOL * np.maximum(1.0, t))
                    and np.all(np.abs(self.release_steps * self.tau_us - r) <= ROUND_TOL * np.maximum(1.0, r)))

    @cached_property
    def release_steps(self) -> np.ndarray:
        """Per link, the first step at which it may start a send: the later release of its two ends
        (``collective.release_us``) rounded up to whole steps (0 without late NPUs)."""
        r = self.problem.link_release_us() / self.tau_us
        steps = np.where(r > 0, np.ceil(r - ROUND_TOL), 0).astype(np.int64)
        steps.setflags(write=False)
        return steps

    @cached_property
    def source(self) -> np.ndarray:
        """NPU holding each chunk at step 0 (``problem.sources``)."""
        return np.asarray(self.problem.sources, dtype=np.int64)

    @property
    def owner(self) -> np.ndarray:
        """All-Gather name of :attr:`source`."""
        return self.source

    @cached_property
    def destination(self) -> np.ndarray:
        """NPU that must receive each chunk (``-1``: every NPU; ``problem.destinations``)."""
        return np.asarray(self.problem.destinations, dtype=np.int64)

    @property
    def unicast(self) -> bool:
        """Every chunk has one destination (gather, scatter, all_to_all)."""
        return bool(np.all(self.destination >= 0))

    @cached_property
    def need(self) -> np.ndarray:
        """``(C, N)`` bool: NPU ``v`` must end up holding chunk ``c`` and does not hold it at step 0."""
        C, n = self.num_chunks, self.num_npus
        need = np.zeros((C, n), dtype=bool)
        multi = self.destination < 0
        need[multi] = True
        uni = np.flatnonzero(~multi)
        need[uni, self.destination[uni]] = True
        need[np.arange(C), self.source] = False
        need.setflags(write=False)
        return need

    @cached_property
    def dist_steps(self) -> np.ndarray:
        """``dist[u, v]``: fewest steps for a chunk to travel from ``u`` to ``v`` (Floyd-Warshall)."""
        n = self.num_npus
        topo = self.problem.topology
        d = np.full((n, n), UNREACHABLE, dtype=np.int64)
        np.fill_diagonal(d, 0)
        np.minimum.at(d, (topo.src, topo.dst), self.link_steps)
        for k in range(n):
            np.minimum(d, d[:, k, None] + d[None, k, :], out=d)
        d.setflags(write=False)
        return d

    def earliest_step(self) -> np.ndarray:
        """``(C, N)``: first step at which chunk ``c`` can be at NPU ``v`` (with late NPUs, waiting on the way
        for each link's release: :attr:`release_dist_steps`)."""
        if not self.release_steps.any():
            return self.dist_steps[self.source]
        return self.release_dist_steps[self.source]

    @cached_property
    def release_dist_steps(self) -> np.ndarray:
        """``(N, N)``: the earliest step a chunk held by ``u`` at step 0 can be at ``v`` when link ``l`` starts no
        send before ``release_steps[l]`` (Dijkstra: arriving later at a link never arrives earlier beyond it, so
        the labels settle in order); :attr:`dist_steps` without late NPUs."""
        n, topo = self.num_npus, self.problem.topology
        d, rel, dst = self.link_steps.tolist(), self.release_steps.tolist(), topo.dst.tolist()
        arcs = [[(dst[li], d[li], rel[li]) for li in range(int(topo.out_ptr[u]), int(topo.out_ptr[u + 1]))]
                for u in range(n)]
        E = np.array([dijkstra_arcs(n, arcs, s) for s in range(n)], dtype=np.float64)
        E = np.where(np.isfinite(E), E, UNREACHABLE).astype(np.int64)
        E.setflags(write=False)
        return E

    def latest_step(self) -> np.ndarray:
        """``(C, N)``: last step at which chunk ``c`` may reach NPU ``v`` and still be of use by the horizon.

        A multicast chunk is needed at ``v`` itself (``H``); a unicast chunk must still travel on to its
        destination ``t`` (``H - dist[v, t]``, very negative where ``t`` is unreachable from ``v``).
        """
        C, n, H = self.num_chunks, self.num_npus, self.horizon
        late = np.full((C, n), H, dtype=np.int64)
        uni = np.flatnonzero(self.destination >= 0)
        if uni.size:
            late[uni] = H - self.dist_steps[:, self.destination[uni]].T
        return late

    # ------------------------------------------------------------------ bounds
    def lower_bound_steps(self) -> int:
        """A valid lower bound on the TEN makespan (steps).

        The largest of

        * the distance bound: the farthest (source, NPU that needs the chunk) pair;
        * the ingress bound: NPU ``v`` must receive every chunk it needs; in-link
          ``l`` delivers at most ``floor(T / d_l)`` chunks by step ``T``;
        * the egress bound: each chunk some other NPU needs leaves its source at
          least once, on out-links with the same capacity;
        * the link-count bound: every needed (chunk, NPU) pair takes one send of
          its own, ``sum_l floor(T / d_l)`` in all;
        * unicast chunks only, the load bound: chunk ``c`` keeps links busy for at
          least ``dist[s_c, t_c]`` steps in all, out of ``sum_l d_l floor(T / d_l)``.
        """
        need = self.need
        if not need.any():
            return 0
        topo = self.problem.topology
        d = self.link_steps
        lb = max(1, int(self.earliest_step()[need].max()))
        wanted = need.sum(axis=0)
        for v in np.flatnonzero(wanted):
            lb = max(lb, _min_steps(d[topo.in_order[topo.in_ptr[v]:topo.in_ptr[v + 1]]], int(wanted[v])))
        leaving = np.bincount(self.source[need.any(axis=1)], minlength=self.num_npus)
        for u in np.flatnonzero(leaving):
            lb = max(lb, _min_steps(d[topo.out_ptr[u]:topo.out_ptr[u + 1]], int(leaving[u])))
        lb = max(lb, _min_steps(d, int(need.sum())))
        uni = np.flatnonzero((self.destination >= 0) & need.any(axis=1))
        if uni.size:
            hops = int(self.dist_steps[self.source[uni], self.destination[uni]].sum())
            lb = max(lb, _min_steps(d, hops, weighted=True))
        return lb

    def load_slack_steps(self) -> int | None:
        """Link-steps to spare within the horizon beyond the shortest paths of the unicast chunks.

        By step ``H`` link ``l`` completes at most ``floor(H / d_l)`` sends of
        ``d_l`` steps each, so all links together offer ``sum_l d_l floor(H / d_l)``
        link-steps; each unicast chunk takes at least ``dist[s_c, t_c]`` of them.
        A chunk's path can therefore exceed its shortest path by at most the
        difference (negative: the horizon is too short). ``None`` when there is
        no unicast chunk to move.
        """
        uni = np.flatnonzero((self.destination >= 0) & self.need.any(axis=1))
        if uni.size == 0:
            return None
        d = self.link_steps
        cap = int(np.sum(d * (self.horizon // d)))
        return cap - int(self.dist_steps[self.source[uni], self.destination[uni]].sum())

    # ------------------------------------------------------------------ model variables
    def send_var_count(self) -> int:
        """How many sends :meth:`send_vars` would return, without building them (a model's size before it is
        built)."""
        _, count = self._send_windows()
        return int(count.sum())

    def send_vars(self) -> SendVars:
        """All sends that can be part of a plan within the horizon.

        Pruned: a chunk never goes back to its source, never leaves its one
        destination, and is not sent at all when no NPU needs it; it cannot
        leave ``u`` before its shortest-path step to ``u``; it must arrive at
        ``v`` by :meth:`latest_step` (``H`` for multicast chunks; for unicast
        chunks early enough to still reach the destination by ``H``, so a
        relay is only considered within the chunk's reachable window), and a
        unicast chunk's detour over a link may not exceed the load slack
        (:meth:`load_slack_steps`).
        """
        topo = self.problem.topology
        C, L = self.num_chunks, topo.num_links
        kmin, count = self._send_windows()
        cc, ll = np.divmod(np.repeat(np.arange(C * L, dtype=np.int64), count), L)
        first = np.repeat(kmin.ravel(), count)
        offs = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        k = first + offs
        order = np.lexsort((k, ll, cc))  # by chunk, link, step
        cc, ll, k = cc[order], ll[order], k[order]
        return SendVars(cc, ll, k, k + self.link_steps[ll], topo.src[ll], topo.dst[ll])

    def _send_windows(self) -> tuple[np.ndarray, np.ndarray]:
        """Per (chunk, link): the first step a send may start, and how many steps it may start at (0: none)."""
        topo = self.problem.topology
        kmin = np.maximum(self.earliest_step()[:, topo.src], self.release_steps[None, :])   # (C, L)
        kmax = self.latest_step()[:, topo.dst] - self.link_steps[None, :]  # (C, L)
        ok = (self.source[:, None] != topo.dst[None, :]) & self.need.any(axis=1)[:, None]
        uni = self.destination >= 0
        ok &= ~(uni[:, None] & (topo.src[None, :] == self.destination[:, None]))
        slack = self.load_slack_steps()
        if slack is not None:
            # a unicast chunk sent on u->v travels at least dist[s,u] + d + dist[v,t]; what that adds to
            # its shortest path comes out of the load slack shared by all chunks
            D = self.dist_steps
            s_, t_ = self.source[uni], self.destination[uni]
            detour = D[s_][:, topo.src] + self.link_steps[None, :] + D[:, t_].T[:, topo.dst] - D[s_, t_][:, None]
            ok[uni] &= detour <= slack
        return kmin, np.where(ok, np.maximum(0, kmax - kmin + 1), 0).ravel()

    # ------------------------------------------------------------------ plans
    def plan_makespan_steps(self, link, step) -> int:
        """Arrival step of the last send of a plan (0 for an empty plan)."""
        link = np.asarray(link, dtype=np.int64)
        if link.size == 0:
            return 0
        return int(np.max(np.asarray(step, dtype=np.int64) + self.link_steps[link]))

    def check_plan(self, chunk, link, step) -> None:
        """Raise :class:`SolverError` if a plan breaks a TEN rule (a solver bug, not user error)."""
        chunk = np.asarray(chunk, np.int64)
        link = np.asarray(link, np.int64)
        step = np.asarray(step, np.int64)
        topo = self.problem.topology
        n, C = self.num_npus, self.num_chunks
        arrive = step + self.link_steps[link]
        have = np.full((C, n), UNREACHABLE, dtype=np.int64)
        have[np.arange(C), self.source] = 0
        np.minimum.at(have, (chunk, topo.dst[link]), arrive)
        late = have[chunk, topo.src[link]] > step
        if np.any(late):
            i = int(np.flatnonzero(late)[0])
            raise SolverError(f"TEN plan: chunk {chunk[i]} leaves NPU {topo.src[link[i]]} at step {step[i]} "
                              f"before it arrives there")
        early = step < self.release_steps[link]
        if np.any(early):
            i = int(np.flatnonzero(early)[0])
            raise SolverError(f"TEN plan: link {topo.src[link[i]]}->{topo.dst[link[i]]} sends at step {step[i]}, "
                              f"before its late NPU joins (step {self.release_steps[link[i]]})")
        order = np.lexsort((step, link))
        ls, ks = link[order], step[order]
        clash = (ls[1:] == ls[:-1]) & (ks[1:] < ks[:-1] + self.link_steps[ls[:-1]])
        if np.any(clash):
            i = int(order[np.flatnonzero(clash)[0] + 1])
            raise SolverError(f"TEN plan: link {topo.src[link[i]]}->{topo.dst[link[i]]} carries two chunks "
                              f"at step {step[i]}")
        missing = (have >= UNREACHABLE) & self.need
        if np.any(missing):
            c, v = np.argwhere(missing)[0]
            raise SolverError(f"TEN plan: NPU {v} never receives chunk {c}")

    def prune_plan(self, chunk, link, step) -> np.ndarray:
        """Indices (sorted) of the sends of a causal plan that matter.

        The first receipt of each (chunk, NPU) only, none back into the
        chunk's source; for a unicast chunk only the chain of first receipts
        that ends at its destination (walked back from there; every hop of the
        walk arrives strictly earlier, so it ends at the source). Dropping the
        rest keeps a plan valid and its makespan no larger.
        """
        chunk = np.asarray(chunk, np.int64)
        link = np.asarray(link, np.int64)
        step = np.asarray(step, np.int64)
        if chunk.size == 0:
            return np.zeros(0, np.int64)
        topo = self.problem.topology
        n = self.num_npus
        dst = topo.dst[link]
        key = chunk * n + dst
        o = np.lexsort((step, step + self.link_steps[link], key))  # earliest arrival first
        first = np.ones(len(o), dtype=bool)
        first[1:] = key[o][1:] != key[o][:-1]
        keep = o[first]
        keep = keep[dst[keep] != self.source[chunk[keep]]]
        uni = self.destination[chunk[keep]] >= 0
        if np.any(uni):
            recv = {(int(chunk[i]), int(dst[i])): int(i) for i in keep[uni].tolist()}
            on_path = []
            for c in np.unique(chunk[keep[uni]]).tolist():
                i = recv.get((c, int(self.destination[c])))
                while i is not None:
                    on_path.append(i)
                    u = int(topo.src[link[i]])
                    i = None if u == self.source[c] else recv.get((c, u))
            keep = np.concatenate([keep[~uni], np.asarray(on_path, np.int64)])
        return np.sort(keep)

    def to_schedule(self, chunk, link, step) -> Schedule:
        """Continuous schedule of a TEN plan, retimed as soon as possible in plan order.

        Sends that do not matter are dropped first (:meth:`prune_plan`). Start
        times are never later than ``step * tau`` (see module docstring).
        """
        chunk = np.asarray(chunk, np.int64)
        link = np.asarray(link, np.int64)
        step = np.asarray(step, np.int64)
        self.check_plan(chunk, link, step)
        topo = self.problem.topology
        keep = self.prune_plan(chunk, link, step)
        chunk, link, step = chunk[keep], link[keep], step[keep]
        # the plan's order on each link and its causality survive the replay (solvers.compose.retime)
        from ..compose import retime

        tau = self.tau_us
        plan = Schedule(chunk, topo.src[link], topo.dst[link], step * tau, (step + self.link_steps[link]) * tau,
                        np.full(len(chunk), COPY, np.int8))
        return retime(self.problem, plan, link_free=self.problem.link_release_us(),
                      chunk_ready=np.zeros(self.num_chunks)).sorted()

    def from_schedule(self, schedule: Schedule):
        """Snap a valid continuous schedule of the collective onto the TEN (for warm starts).

        Transfers are replayed in start-time order, each starting at the first
        step at which its sender holds the chunk and its link is free; later
        duplicate deliveries are dropped, and so (:meth:`prune_plan`) are
        unicast sends off the chunk's path to its destination. The result is a
        TEN plan ``(chunk, link, step)`` whose makespan may exceed the
        continuous one (durations round up).
        """
        topo = self.problem.topology
        link = topo.link_ids(schedule.src, schedule.dst)
        if np.any(link < 0):
            raise SolverError("warm-start schedule uses a link the topology does not have")
        order = np.lexsort((schedule.end_us, schedule.start_us))
        n, C = self.num_npus, self.num_chunks
        held = np.full((C, n), UNREACHABLE, dtype=np.int64)
        held[np.arange(C), self.source] = 0
        link_free = self.release_steps.copy()
        d = self.link_steps.tolist()
        out_c, out_l, out_k = [], [], []
        ch, lk = schedule.chunk.tolist(), link.tolist()
        src_l, dst_l = topo.src.tolist(), topo.dst.tolist()
        for i in order.tolist():
            c, li = ch[i], lk[i]
            if held[c, dst_l[li]] < UNREACHABLE:
                continue  # receiver already has it: redundant delivery
            h = held[c, src_l[li]]
            if h >= UNREACHABLE:
                raise SolverError(f"warm-start schedule is not causal: chunk {c} leaves NPU {src_l[li]} "
                                  f"before reaching it")
            k = max(int(h), int(link_free[li]))
            link_free[li] = k + d[li]
            held[c, dst_l[li]] = k + d[li]
            out_c.append(c)
            out_l.append(li)
            out_k.append(k)
        if np.any((held >= UNREACHABLE) & self.need):
            raise SolverError(f"warm-start schedule does not complete the {self.problem.kind}")
        plan = (np.asarray(out_c, np.int64), np.asarray(out_l, np.int64), np.asarray(out_k, np.int64))
        keep = self.prune_plan(*plan)
        return tuple(a[keep] for a in plan)

    def list_schedule(self):
        """A simple always-feasible TEN plan (an upper bound for the horizon).

        Multicast chunks: step by step, every idle link sends a chunk its
        source holds and its destination neither holds nor is already
        receiving, rarest chunk first (ties: lowest id). Each step makes
        progress while the collective is unfinished (on a strongly connected
        topology some idle link always has such a chunk), so this terminates.
        Unicast chunks: :meth:`_route_list_schedule`.
        """
        if self.unicast:
            return self._route_list_schedule()
        topo = self.problem.topology
        n, C, L = self.num_npus, self.num_chunks, topo.num_links
        d = self.link_steps
        has = np.zeros((n, C), dtype=bool)          # holds at the current step
        coming = np.zeros((n, C), dtype=bool)       # holds or is receiving
        has[self.source, np.arange(C)] = True
        coming |= has
        link_free = self.release_steps.copy()          # a late NPU's links are idle until it joins
        arrivals: dict[int, list[tuple[int, int]]] = {}
        out_c, out_l, out_k = [], [], []
        src, dst = topo.src, topo.dst
        k = 0
        total = n * C
        while int(coming.sum()) < total or arrivals:
            for v, c in arrivals.pop(k, []):
                has[v, c] = True
            holders = has.sum(axis=0)
            for li in np.flatnonzero(link_free <= k).tolist():
                cand = has[src[li]] & ~coming[dst[li]]
                if not cand.any():
                    continue
                idx = np.flatnonzero(cand)
                c = int(idx[np.argmin(holders[idx])])
                coming[dst[li], c] = True
                link_free[li] = k + d[li]
                arrivals.setdefault(k + int(d[li]), []).append((int(dst[li]), c))
                out_c.append(c)
                out_l.append(li)
                out_k.append(k)
            k += 1
            if k > 10 * total * int(d.max()) + 10 + int(link_free.max()):  # cannot happen on a strongly connected topology
                raise SolverError("TEN list schedule did not terminate")
        return (np.asarray(out_c, np.int64), np.asarray(out_l, np.int64), np.asarray(out_k, np.int64))

    def _route_list_schedule(self):
        """Always-feasible plan for unicast chunks: store-and-forward along shortest paths.

        Step by step, every idle out-link of an NPU sends, of the chunks
        waiting there, the one with the longest remaining distance among those
        for which the link is a first hop of a shortest path to the destination
        (ties: lowest id). A waiting chunk always has such a link; if all of
        them are busy they carry other chunks, so every step makes progress,
        and every hop shortens the chunk's remaining distance: this terminates.
        """
        topo = self.problem.topology
        n, L = self.num_npus, topo.num_links
        d = self.link_steps.tolist()
        D = self.dist_steps
        dest = self.destination
        dst_l = topo.dst.tolist()
        waiting: list[list[int]] = [[] for _ in range(n)]
        pending = 0
        for c in np.flatnonzero(self.need.any(axis=1)).tolist():
            waiting[int(self.source[c])].append(c)
            pending += 1
        link_free = self.release_steps.tolist()        # a late NPU's links are idle until it joins
        arrivals: dict[int, list[tuple[int, int]]] = {}
        out_c, out_l, out_k = [], [], []
        out_ptr = topo.out_ptr.tolist()
        k = 0
        limit = 10 * (pending + 1) * n * int(self.link_steps.max()) + 10 + max(link_free, default=0)
        while pending:
            for v, c in arrivals.pop(k, []):
                if v == dest[c]:
                    pending -= 1
                else:
                    waiting[v].append(c)
            for u in range(n):
                if not waiting[u]:
                    continue
                left = D[u]
                waiting[u].sort(key=lambda c: (-int(left[dest[c]]), c))
                for li in range(out_ptr[u], out_ptr[u + 1]):
                    if link_free[li] > k:
                        continue
                    v = dst_l[li]
                    for pos, c in enumerate(waiting[u]):
                        if D[u, dest[c]] == d[li] + D[v, dest[c]]:
                            del waiting[u][pos]
                            link_free[li] = k + d[li]
                            arrivals.setdefault(k + d[li], []).append((v, c))
                            out_c.append(c)
                            out_l.append(li)
                            out_k.append(k)
                            break
            k += 1
            if k > limit:  # cannot happen on a strongly connected topology
                raise SolverError("TEN routing list schedule did not terminate")
        return (np.asarray(out_c, np.int64), np.asarray(out_l, np.int64), np.asarray(out_k, np.int64))

    def describe(self) -> str:
        return (f"TEN tau={self.tau_us:g} µs, link steps {int(self.link_steps.min())}-{int(self.link_steps.max())}, "
                f"horizon {self.horizon} steps, exact={self.exact}")
