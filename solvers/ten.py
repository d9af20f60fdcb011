"""Discretized time-expanded network (TEN) shared by the exact backends.

The exact solvers (:mod:`solvers.milp`, :mod:`solvers.cpsat`) do not work in
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

Model reduction used by both backends (All-Gather): each NPU other than the
owner receives each chunk **exactly once**. Any valid plan stays valid when
later duplicate deliveries are dropped (the receiver already held the chunk,
earlier), so this loses no optimal solution while making "holds" implicit:
NPU ``v`` holds chunk ``c`` at step ``k`` iff it owns it or one of its receipts
arrives by ``k``; holds are therefore monotone by construction.

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.generators import torus2d
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

from tacos_bench.collective import ALL_GATHER
from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem
from tacos_bench.schedule import COPY, Schedule

# Relative slack when rounding link times up to steps: a link time that is an
# exact multiple of tau up to float noise must not get an extra step.
ROUND_TOL = 1e-9
UNREACHABLE = np.iinfo(np.int64).max // 4


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
    """A step-discretized view of an All-Gather problem.

    Build it with :meth:`build`; the constructor takes already-checked fields.

    Attributes
    ----------
    problem : Problem
        The All-Gather problem.
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
        """Discretize ``problem`` (an All-Gather).

        Parameters
        ----------
        problem : Problem
            Must be an All-Gather (Reduce-Scatter / All-Reduce go through
            :func:`solvers.compose.solve_collective`).
        time_step_us : float, optional
            ``tau``; default the fastest link's chunk time.
        horizon_steps : int, optional
            ``H``; default the makespan of :meth:`list_schedule` (always feasible).
        """
        if problem.kind != ALL_GATHER:
            raise SolverError(f"the time-expanded network models all_gather only, got {problem.kind}")
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
        """True when every link time is a whole number of steps (TEN optimum = continuous optimum)."""
        t = np.asarray(self.problem.link_time_us)
        return bool(np.all(np.abs(self.link_steps * self.tau_us - t) <= ROUND_TOL * np.maximum(1.0, t)))

    @cached_property
    def owner(self) -> np.ndarray:
        """Owner NPU of each chunk."""
        return np.arange(self.num_chunks, dtype=np.int64) % self.num_npus

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
        """``(C, N)``: first step at which chunk ``c`` can be at NPU ``v``."""
        return self.dist_steps[self.owner]

    # ------------------------------------------------------------------ bounds
    def lower_bound_steps(self) -> int:
        """A valid lower bound on the TEN makespan (steps).

        The larger of the distance bound (the farthest (owner, NPU) pair) and
        the ingress bound (NPU ``v`` must receive every chunk it does not own;
        in-link ``l`` delivers at most ``floor(T / d_l)`` chunks by step ``T``).
        """
        dist_lb = int(self.earliest_step().max())
        topo = self.problem.topology
        need = self.num_chunks - self.problem.collective.chunks_per_npu
        ingress_lb = 0
        if need > 0:
            for v in range(self.num_npus):
                d_in = self.link_steps[topo.in_order[topo.in_ptr[v]:topo.in_ptr[v + 1]]]
                T = int(math.ceil(need / np.sum(1.0 / d_in)))  # start below the answer
                while np.sum(T // d_in) < need:
                    T += 1
                ingress_lb = max(ingress_lb, T)
        return max(dist_lb, ingress_lb, 1 if need > 0 else 0)

    # ------------------------------------------------------------------ model variables
    def send_vars(self) -> SendVars:
        """All sends that can be part of a plan within the horizon.

        Pruned: a chunk never goes to its owner; it cannot leave ``u`` before
        its shortest-path step to ``u``; it must arrive by ``H``.
        """
        topo = self.problem.topology
        C, L, H = self.num_chunks, topo.num_links, self.horizon
        earliest = self.earliest_step()                      # (C, N)
        kmin = earliest[:, topo.src]                          # (C, L)
        kmax = H - self.link_steps[None, :]                   # (1, L)
        ok = self.owner[:, None] != topo.dst[None, :]
        count = np.where(ok, np.maximum(0, kmax - kmin + 1), 0).ravel()
        cc, ll = np.divmod(np.repeat(np.arange(C * L, dtype=np.int64), count), L)
        first = np.repeat(kmin.ravel(), count)
        offs = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        k = first + offs
        order = np.lexsort((k, ll, cc))  # by chunk, link, step
        cc, ll, k = cc[order], ll[order], k[order]
        return SendVars(cc, ll, k, k + self.link_steps[ll], topo.src[ll], topo.dst[ll])

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
        have[np.arange(C), self.owner] = 0
        np.minimum.at(have, (chunk, topo.dst[link]), arrive)
        late = have[chunk, topo.src[link]] > step
        if np.any(late):
            i = int(np.flatnonzero(late)[0])
            raise SolverError(f"TEN plan: chunk {chunk[i]} leaves NPU {topo.src[link[i]]} at step {step[i]} "
                              f"before it arrives there")
        order = np.lexsort((step, link))
        ls, ks = link[order], step[order]
        clash = (ls[1:] == ls[:-1]) & (ks[1:] < ks[:-1] + self.link_steps[ls[:-1]])
        if np.any(clash):
            i = int(order[np.flatnonzero(clash)[0] + 1])
            raise SolverError(f"TEN plan: link {topo.src[link[i]]}->{topo.dst[link[i]]} carries two chunks "
                              f"at step {step[i]}")
        if np.any(have >= UNREACHABLE):
            c, v = np.argwhere(have >= UNREACHABLE)[0]
            raise SolverError(f"TEN plan: NPU {v} never receives chunk {c}")

    def to_schedule(self, chunk, link, step) -> Schedule:
        """Continuous schedule of a TEN plan, retimed as soon as possible in plan order.

        Later duplicate deliveries of a chunk to an NPU are dropped. Start
        times are never later than ``step * tau`` (see module docstring).
        """
        chunk = np.asarray(chunk, np.int64)
        link = np.asarray(link, np.int64)
        step = np.asarray(step, np.int64)
        self.check_plan(chunk, link, step)
        topo = self.problem.topology
        t = np.asarray(self.problem.link_time_us, dtype=np.float64)
        arrive = step + self.link_steps[link]
        # First receipt per (chunk, dst) only; earliest arrival wins.
        key = chunk * self.num_npus + topo.dst[link]
        o = np.lexsort((step, arrive, key))
        first = np.ones(len(o), dtype=bool)
        first[1:] = key[o][1:] != key[o][:-1]
        keep = o[first]
        keep = keep[topo.dst[link[keep]] != self.owner[chunk[keep]]]
        chunk, link, step = chunk[keep], link[keep], step[keep]
        # the plan's order on each link and its causality survive the replay (solvers.compose.retime)
        from .compose import retime

        tau = self.tau_us
        plan = Schedule(chunk, topo.src[link], topo.dst[link], step * tau, (step + self.link_steps[link]) * tau,
                        np.full(len(chunk), COPY, np.int8))
        return retime(self.problem, plan, link_free=np.zeros(topo.num_links),
                      chunk_ready=np.zeros(self.num_chunks)).sorted()

    def from_schedule(self, schedule: Schedule):
        """Snap a valid continuous All-Gather schedule onto the TEN (for warm starts).

        Transfers are replayed in start-time order, each starting at the first
        step at which its sender holds the chunk and its link is free; later
        duplicate deliveries are dropped. The result is a TEN plan
        ``(chunk, link, step)`` whose makespan may exceed the continuous one
        (durations round up).
        """
        topo = self.problem.topology
        link = topo.link_ids(schedule.src, schedule.dst)
        if np.any(link < 0):
            raise SolverError("warm-start schedule uses a link the topology does not have")
        order = np.lexsort((schedule.end_us, schedule.start_us))
        n, C = self.num_npus, self.num_chunks
        held = np.full((C, n), UNREACHABLE, dtype=np.int64)
        held[np.arange(C), self.owner] = 0
        link_free = np.zeros(topo.num_links, dtype=np.int64)
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
        if np.any(held >= UNREACHABLE):
            raise SolverError("warm-start schedule does not complete the All-Gather")
        return (np.asarray(out_c, np.int64), np.asarray(out_l, np.int64), np.asarray(out_k, np.int64))

    def list_schedule(self):
        """A simple always-feasible TEN plan (an upper bound for the horizon).

        Step by step, every idle link sends a chunk its source holds and its
        destination neither holds nor is already receiving, rarest chunk first
        (ties: lowest id). Each step makes progress while the All-Gather is
        unfinished (on a strongly connected topology some idle link always has
        such a chunk), so this terminates.
        """
        topo = self.problem.topology
        n, C, L = self.num_npus, self.num_chunks, topo.num_links
        d = self.link_steps
        has = np.zeros((n, C), dtype=bool)          # holds at the current step
        coming = np.zeros((n, C), dtype=bool)       # holds or is receiving
        has[self.owner, np.arange(C)] = True
        coming |= has
        link_free = np.zeros(L, dtype=np.int64)
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
            if k > 10 * total * int(d.max()) + 10:  # cannot happen on a strongly connected topology
                raise SolverError("TEN list schedule did not terminate")
        return (np.asarray(out_c, np.int64), np.asarray(out_l, np.int64), np.asarray(out_k, np.int64))

    def describe(self) -> str:
        return (f"TEN tau={self.tau_us:g} µs, link steps {int(self.link_steps.min())}-{int(self.link_steps.max())}, "
                f"horizon {self.horizon} steps, exact={self.exact}")
