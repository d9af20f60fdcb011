"""Portfolios: several algorithms behind one backend, as data, run by one runner.

A *candidate* is one algorithm that turns a problem into a schedule: the TACOS rule, the topology-aware
rules, a tier decomposition, spanning trees, a reservation router, a baseline, a repair plan. A backend such
as ``greedy_plus`` is a list of candidates; :func:`run_portfolio` runs them in order and owns what they share:

* whether a candidate applies (its ``applies`` says why not, recorded as a skip reason);
* stopping at a lower bound: once the best schedule so far meets the portfolio's *stop bound* (a valid lower
  bound, so that schedule is optimal) a candidate with ``stop_at_bound`` does not start;
* the deadline (``time_limit_s``): the first candidate always runs, no other starts after it;
* ties: the fastest schedule wins; a later one replaces it only when faster by more than :data:`TIE_REL`, or
  as fast and earlier in the portfolio's preference order;
* the record: the winner, every candidate tried (its name, seconds and makespan) and every one skipped (why).

The protocol (:class:`Candidate`) is small, so that a researcher's own algorithm plugs in by import path
(``solver.candidates=[rules,mypkg.mymod:MyCandidate]``, :func:`load_candidate`) and is run, timed, verified and
recorded like a built-in one. A plug-in's schedule is replayed by the independent verifier before it may win
(a built-in one is trusted here: the run's schedule is verified anyway, :mod:`tacos_bench.runner`).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import ring
>>> from solvers.baselines.trivial import bfs_all_gather
>>> class Bfs(Candidate):
...     name = "bfs"
...     def run(self, problem, ctx):
...         return bfs_all_gather(problem)
>>> class Never(Candidate):
...     name = "never"
...     def applies(self, problem, ctx):
...         return "it never applies"
>>> out = run_portfolio([Never(), Bfs()], Problem(ring(4), Collective("all_gather", 1, 4)), RunContext())
>>> out.winner, [t.name for t in out.tried], out.skipped
('bfs', ['bfs'], (('never', 'it never applies'),))
"""

from __future__ import annotations

import importlib
import inspect
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Sequence

from tacos_bench.errors import SolverError
from tacos_bench.problem import Problem

# a schedule replaces the best one only when faster by more than this fraction (float noise is no win)
TIE_REL = 1e-12
# a schedule meets the stop bound within this fraction (the bounds' arithmetic differs from the schedule's)
BOUND_REL = 1e-9

SKIP_AT_BOUND = "an earlier candidate meets the lower bound (optimal)"
SKIP_TIME_LIMIT = "time limit reached"


class Skip(Exception):
    """Raised by :meth:`Candidate.run` when it finds, once running, that it does not apply (the message says
    why); the portfolio records it as a skip, not as a failure."""


@dataclass
class RunContext:
    """What a candidate may read while it runs, and where it leaves its statistics.

    ``opts`` are the backend's parsed options; ``deadline`` a ``time.perf_counter()`` value after which no
    work should start (``None``: none); ``start`` the state a repair resumes from. ``best`` and
    ``best_name`` are the best schedule so far and its candidate; :meth:`stop_bound` the portfolio's lower
    bound (computed once, when first asked); ``found`` each candidate's makespan, ``run_stats`` each one's run
    statistics (the winner's become the backend's), ``notes`` the statistics every candidate adds (declared in
    its backend's statistics); ``points`` ``(perf_counter, makespan)`` of the anytime trace.
    """

    opts: Any = None
    deadline: float | None = None
    threads: int = 1
    output: str = "table"
    start: Any = None
    bound: Callable[[], float | None] | None = None
    best: Any = None
    best_name: str | None = None
    found: dict = field(default_factory=dict)
    run_stats: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    points: list = field(default_factory=list)
    _bound_value: list = field(default_factory=list, repr=False)

    @property
    def seed(self) -> int:
        return int(getattr(self.opts, "seed", 0) or 0)

    def stop_bound(self) -> float | None:
        """The portfolio's stop bound (µs; ``None`` without one), computed on first use."""
        if not self._bound_value:
            self._bound_value.append(self.bound() if self.bound is not None else None)
        return self._bound_value[0]

    def bound_known(self) -> bool:
        return bool(self._bound_value)

    def at_bound(self, makespan_us: float | None = None) -> bool:
        """Whether ``makespan_us`` (default: the best schedule's makespan) meets the stop bound."""
        ms = self.best.makespan_us if makespan_us is None and self.best is not None else makespan_us
        if ms is None:
            return False
        b = self.stop_bound()
        return b is not None and ms <= b * (1 + BOUND_REL)

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def point(self, makespan_us: float) -> None:
        """An anytime point: a schedule of this makespan exists now."""
        self.points.append((time.perf_counter(), float(makespan_us)))


class Candidate:
    """One algorithm of a portfolio (see the module docstring).

    Subclasses set ``name`` and implement :meth:`run`; :meth:`applies` returns ``None`` or why the candidate
    does not apply to ``problem`` under ``ctx.opts``. ``switch`` names the option that turns it on (a bool,
    or a count of tries where 0 is off) and ``budget`` the option that caps its work, so both show in
    ``python -m solvers.describe``; ``stop_at_bound=False`` runs it even after the bound is met (a first
    candidate that must always run). ``run`` returns a schedule, or ``None`` when it found none (say why in
    ``ctx.notes``), or raises :class:`Skip`.
    """

    name: ClassVar[str] = ""
    switch: ClassVar[str | None] = None
    budget: ClassVar[tuple[str, ...]] = ()
    stop_at_bound: ClassVar[bool] = True
    # a plug-in's schedules are replayed by the verifier before they may win
    trusted: ClassVar[bool] = True

    def switched_on(self, opts) -> str | None:
        """``None`` when the candidate's switch option is on (or it has none), else why it is off."""
        if self.switch is None or opts is None or not hasattr(opts, self.switch):
            return None
        value = getattr(opts, self.switch)
        return None if value else f"{self.switch}={_fmt(value)}"

    def applies(self, problem: Problem, ctx: RunContext) -> str | None:
        """``None``, or why this candidate does not apply."""
        return None

    def finish(self, schedule):
        """The winning schedule as the backend returns it (e.g. a table from an in-memory compact one)."""
        return schedule

    def run(self, problem: Problem, ctx: RunContext):
        raise NotImplementedError

    def warmup(self, problem: Problem, opts) -> float:
        """Load what :meth:`run` compiles (numba), outside any clock; the seconds spent."""
        return 0.0

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring."""
        doc = inspect.cleandoc(cls.__doc__ or "")
        return doc.split("\n\n")[0].replace("\n", " ").strip()

    def __repr__(self) -> str:
        return f"<candidate {self.name}>"


def _fmt(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@dataclass(frozen=True)
class Tried:
    """A candidate that ran: its name, seconds, and its schedule's makespan (``None``: it found none)."""

    name: str
    time_s: float
    makespan_us: float | None

    def as_dict(self) -> dict:
        return {"name": self.name, "time_s": round(self.time_s, 6),
                "makespan_us": None if self.makespan_us is None else float(self.makespan_us)}


@dataclass
class PortfolioResult:
    """The winning schedule of :func:`run_portfolio` and how it came about."""

    schedule: Any
    winner: str
    tried: tuple[Tried, ...]
    skipped: tuple[tuple[str, str], ...]
    stop_bound_us: float | None
    notes: dict
    points: list
    winner_stats: dict = field(default_factory=dict)

    @property
    def makespans(self) -> dict[str, float]:
        return {t.name: t.makespan_us for t in self.tried if t.makespan_us is not None}


def _better(ms: float, pref: int, best_ms: float, best_pref: int) -> bool:
    if ms < best_ms * (1 - TIE_REL):
        return True
    return ms <= best_ms * (1 + TIE_REL) and pref < best_pref


def run_portfolio(candidates: Sequence[Candidate], problem: Problem, ctx: RunContext, *,
                  prefer: Sequence[str] = (), measure: Callable[[Any], float] | None = None) -> PortfolioResult:
    """Run ``candidates`` in order on ``problem`` (see the module docstring) and return the best schedule.

    Parameters
    ----------
    candidates : sequence of Candidate
        In the order they run.
    problem : Problem
    ctx : RunContext
        Options, deadline and stop bound; ``ctx.notes`` and ``ctx.points`` are filled.
    prefer : sequence of str
        Tie order: on equal makespans the name earlier here wins (names not listed come after, in run order).
    measure : callable, optional
        What is compared (default: the schedule's makespan; a repair compares the time once placed after the
        fault). A schedule that stops being the best is released (``delete()``: a compact one's files).

    Raises
    ------
    SolverError
        When no candidate produced a schedule (each one's reason is in the message).
    """
    measure = measure or (lambda sched: float(sched.makespan_us))
    rank = {n: i for i, n in enumerate(prefer)}
    order = {c.name: len(prefer) + i for i, c in enumerate(candidates)}
    pref = {n: rank.get(n, order.get(n, len(prefer) + len(candidates))) for n in order}
    tried: list[Tried] = []
    skipped: list[tuple[str, str]] = []
    by_name = {c.name: c for c in candidates}
    best_ms = None
    for cand in candidates:
        reason = cand.switched_on(ctx.opts) or cand.applies(problem, ctx)
        if reason is None and ctx.best is not None and ctx.past_deadline():
            reason = SKIP_TIME_LIMIT
        if reason is None and cand.stop_at_bound and ctx.best is not None and ctx.at_bound(best_ms):
            reason = SKIP_AT_BOUND
        if reason is not None:
            skipped.append((cand.name, reason))
            continue
        t0 = time.perf_counter()
        points = len(ctx.points)
        try:
            sched = cand.run(problem, ctx)
        except Skip as e:
            skipped.append((cand.name, str(e)))
            continue
        dt = time.perf_counter() - t0
        if sched is not None and not cand.trusted:
            sched = _checked(cand, problem, sched, skipped)
            if sched is None:
                continue
        ms = None if sched is None else measure(sched)
        tried.append(Tried(cand.name, dt, ms))
        if sched is None:
            continue
        ctx.found[cand.name] = ms
        if len(ctx.points) == points:   # a candidate with runs of its own has added each run's end
            ctx.point(ms)
        if ctx.best is None or _better(ms, pref[cand.name], best_ms, pref[ctx.best_name]):
            if ctx.best is not None:
                ctx.best.delete()
            ctx.best, ctx.best_name, best_ms = sched, cand.name, ms
        else:
            sched.delete()
    if ctx.best is None:
        why = "; ".join(f"{n}: {r}" for n, r in skipped) or "every candidate returned no schedule"
        raise SolverError(f"no candidate produced a schedule ({why})")
    ctx.best = by_name[ctx.best_name].finish(ctx.best)
    return PortfolioResult(ctx.best, ctx.best_name, tuple(tried), tuple(skipped),
                           ctx.stop_bound() if ctx.bound_known() else None, ctx.notes, ctx.points,
                           dict(ctx.run_stats.get(ctx.best_name, {})))


def _checked(cand: Candidate, problem: Problem, sched, skipped: list):
    """A plug-in's schedule if the verifier accepts it, else ``None`` (the rejection is a skip reason)."""
    from tacos_bench.verify import check

    ver = check(problem, sched, fault=None) if getattr(sched, "storage", None) else None
    if ver is None:
        skipped.append((cand.name, f"returned {type(sched).__name__}, not a schedule"))
        return None
    if not ver.valid:
        skipped.append((cand.name, f"its schedule was rejected by the verifier: {ver.message}"))
        return None
    return sched


# ------------------------------------------------------------------------------------------ choosing candidates
def is_import_path(name: str) -> bool:
    """``module.path:Name`` names a plug-in (a built-in candidate's name has no colon)."""
    return ":" in name


def load_candidate(path: str) -> Candidate:
    """The candidate at ``module.path:Name`` (a :class:`Candidate` subclass or instance, or any object with
    ``name`` and ``run``); the module is imported from ``sys.path`` (the working directory included).

    Raises
    ------
    SolverError
        When the module or name cannot be found, or the object is not a candidate.
    """
    obj = _import_object(path, "candidate")
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as e:
            raise SolverError(f"candidate {path!r}: cannot instantiate {obj.__name__} without arguments ({e})") \
                from None
    if not callable(getattr(obj, "run", None)):
        raise SolverError(f"candidate {path!r} has no run(problem, ctx) method")
    if not isinstance(obj, Candidate):
        obj = _Adapted(obj)
    if not getattr(obj, "name", None):
        raise SolverError(f"candidate {path!r} has no name")
    return obj


class _Adapted(Candidate):
    """Any object with ``name`` and ``run`` (optionally ``applies``), as a :class:`Candidate`."""

    trusted = False

    def __init__(self, obj):
        self._obj = obj
        self.name = str(obj.name)
        self.stop_at_bound = bool(getattr(obj, "stop_at_bound", True))

    def applies(self, problem, ctx):
        f = getattr(self._obj, "applies", None)
        return None if f is None else f(problem, ctx)

    def run(self, problem, ctx):
        return self._obj.run(problem, ctx)


def _import_object(path: str, what: str):
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr:
        raise SolverError(f"{what} {path!r}: expected module.path:Name")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise SolverError(f"{what} {path!r}: cannot import module {mod_name!r} ({e})") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SolverError(f"{what} {path!r}: module {mod_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


def import_function(path: str, what: str):
    """The function at ``module.path:name`` (for options that take a user's function)."""
    obj = _import_object(path, what)
    if not callable(obj):
        raise SolverError(f"{what} {path!r} is not callable")
    return obj


def select(builtin: Sequence[Candidate], names: Iterable[str] | None, known: Iterable[str] = ()) -> list[Candidate]:
    """The candidates of a run: every built-in one (``names`` is ``None``), or those named, in the built-in
    order, with plug-ins (import paths) run after the built-in ones in the order given. ``known``: names of
    the backend's other portfolios (another network kind's), accepted and left out here.

    Raises
    ------
    SolverError
        On a name that is neither a candidate of the backend nor an import path.
    """
    if names is None:
        return list(builtin)
    names = list(names)
    every = [c.name for c in builtin] + [n for n in known if n not in {c.name for c in builtin}]
    # a built-in name may hold a colon too (baseline:rhd): names are looked up before import paths
    plugins = [n for n in names if n not in every and is_import_path(n)]
    unknown = [n for n in names if n not in every and not is_import_path(n)]
    if unknown:
        raise SolverError(f"unknown candidate(s) {', '.join(unknown)}; this backend's: {', '.join(every)} "
                          "(or a plug-in as module.path:Name)")
    chosen = set(names)
    return [c for c in builtin if c.name in chosen] + [load_candidate(n) for n in plugins]


def record_fields(results: Sequence[tuple[str | None, PortfolioResult]]) -> dict[str, Any]:
    """``candidate``, ``candidates_tried`` and ``candidates_skipped`` of one or more portfolio runs (the phases
    of a composed collective, each named ``phase``), as the record and the summary line show them.

    >>> r = PortfolioResult(None, "rules", (Tried("rules", 0.5, 10.0),), (("trees", "off"),), None, {}, [])
    >>> record_fields([(None, r)])["candidate"], record_fields([("rs", r), ("ag", r)])["candidate"]
    ('rules', 'rs:rules ag:rules')
    """
    if len(results) == 1 and results[0][0] is None:
        _, r = results[0]
        return {"candidate": r.winner, "candidates_tried": tuple(t.as_dict() for t in r.tried),
                "candidates_skipped": tuple({"name": n, "reason": why} for n, why in r.skipped)}
    tried, skipped = [], []
    for phase, r in results:
        tried += [{"phase": phase, **t.as_dict()} for t in r.tried]
        skipped += [{"phase": phase, "name": n, "reason": why} for n, why in r.skipped]
    return {"candidate": " ".join(f"{phase}:{r.winner}" for phase, r in results), "candidates_tried": tuple(tried),
            "candidates_skipped": tuple(skipped)}


def describe_candidates(cands: Sequence[Candidate], opts_cls=None) -> str:
    """A markdown table of a portfolio: each candidate's name, what it is, its switch and budget options with
    their defaults (``opts_cls``)."""
    defaults = opts_cls() if opts_cls is not None else None

    def opt(name):
        if name is None:
            return ""
        if defaults is None or not hasattr(defaults, name):
            return f"`{name}`"
        return f"`{name}`={json.dumps(getattr(defaults, name))}"

    rows = ["| candidate | what it is | switch | budget |", "|---|---|---|---|"]
    for c in cands:
        rows.append(f"| `{c.name}` | {c.summary()} | {opt(c.switch)} | {', '.join(opt(b) for b in c.budget)} |")
    return "\n".join(rows) + "\n"


def validate(candidate: Candidate, problem: Problem, opts, *, bound_us: float | None = None) -> Any:
    """Run ``candidate`` alone on ``problem`` and check what every candidate owes: a schedule the independent
    verifier accepts (or ``None``, or a :class:`Skip`), never faster than ``bound_us`` (a valid lower bound),
    the same schedule for the same seed. Returns the schedule (``None`` when it found none or skipped).

    The one validator every candidate's tests go through (a user's candidate too).

    >>> from tacos_bench import Collective, Problem
    >>> from tacos_bench.topology.generators import ring
    >>> from solvers.baselines.trivial import bfs_all_gather
    >>> class Bfs(Candidate):
    ...     name = "bfs"
    ...     def run(self, problem, ctx):
    ...         return bfs_all_gather(problem)
    >>> len(validate(Bfs(), Problem(ring(4), Collective("all_gather", 1, 4)), None))
    12

    Raises
    ------
    AssertionError
        Naming the candidate and what it broke.
    """
    from tacos_bench.verify import check

    def once():
        try:
            return candidate.run(problem, RunContext(opts=opts))
        except Skip:
            return None

    sched = once()
    if sched is None:
        return None
    sched = candidate.finish(sched)
    ver = check(problem, sched)
    assert ver.valid, (f"candidate {candidate.name} on {problem.kind} of {problem.topology.name}: rejected: "
                      f"{ver.message}")
    if bound_us is not None:
        assert ver.collective_time_us >= bound_us * (1 - BOUND_REL), \
            f"candidate {candidate.name}: {ver.collective_time_us} µs below the lower bound {bound_us} µs"
    again = candidate.finish(once())
    a, b = sched.to_schedule().sorted(), again.to_schedule().sorted()
    assert len(a) == len(b) and a.to_frame().equals(b.to_frame()), \
        f"candidate {candidate.name}: another schedule for the same seed"
    return sched
