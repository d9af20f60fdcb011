"""The canonical problem handed to every solver backend."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .collective import ALL_GATHER, Collective
from .cost import link_time_us
from .errors import CollectiveError, TopologyError
from .topology import Topology


# The slowest chunk time a link may have: 10^12 µs (11.6 days). A makespan sums thousands of them and the
# verifier compares times to a relative 1e-9, both of which float64 holds far below 1e300; a latency of 1e308
# would overflow the first sum into inf.
MAX_LINK_TIME_US = 1e12
# The widest ratio of the slowest to the fastest link time: a makespan of many slow links must still resolve a
# fast link's time (float64 keeps 16 digits; the verifier's tolerance is a fraction of the fastest link).
MAX_LINK_TIME_SPREAD = 1e9


@dataclass(frozen=True, eq=False)
class Problem:
    """A topology plus a collective: everything a solver needs, in one object.

    Construction validates that the collective is possible: the topology must be
    strongly connected and a chunk must hold at least one byte.

    Examples
    --------
    >>> from tacos_bench.topology.generators import ring
    >>> p = Problem(ring(4, bidirectional=False), Collective("all_gather", 1, 1024))
    >>> p.num_chunks, p.chunk_bytes
    (4, 268435456)
    >>> round(float(p.link_time_us[0]), 2)
    5000.5
    """

    topology: Topology
    collective: Collective

    def __post_init__(self):
        self.topology.check_strongly_connected()
        demand = self.collective.demand
        if demand is not None and demand.num_npus != self.topology.num_npus:
            raise CollectiveError(f"the {self.collective.kind} demand is on {demand.num_npus} NPUs; topology "
                                  f"{self.topology.name!r} has {self.topology.num_npus}")
        if self.collective.rooted and self.collective.root >= self.topology.num_npus:
            raise CollectiveError(f"collective.root={self.collective.root} is out of range: topology "
                                  f"{self.topology.name!r} has NPUs 0..{self.topology.num_npus - 1}")
        late = [v for v, _ in self.collective.release if v >= self.topology.num_npus]
        if late:
            raise CollectiveError(f"collective.release_us: NPU {late[0]} is not an NPU of {self.topology.name!r} "
                                  f"(NPUs 0..{self.topology.num_npus - 1})")
        if self.chunk_bytes < 1:
            raise CollectiveError(
                f"collective.buffer_mib={self.collective.buffer_mib:g} is too small for "
                f"{self.num_chunks} chunks (chunk size would be 0 bytes)"
            )
        lt = self.link_time_us
        bad = np.flatnonzero(~np.isfinite(lt) | (lt > MAX_LINK_TIME_US) | (lt <= 0))
        if bad.size:
            i = int(bad[0])
            t = self.topology
            what = ("would take forever" if not np.isfinite(lt[i]) else
                    f"would take {lt[i]:.3g} µs, more than the {MAX_LINK_TIME_US:.0e} µs that schedule times keep "
                    "exact (sums of such times overflow)" if lt[i] > 0 else
                    "would take no time at all (the bandwidth overflows a float)")
            raise TopologyError(
                f"link {int(t.src[i])}->{int(t.dst[i])}: a {self.chunk_bytes}-byte chunk {what} "
                f"(bw {t.bw_GiBps[i]:g} GiB/s, lat {t.lat_us[i]:g} µs)")
        if lt.size and lt.max() > MAX_LINK_TIME_SPREAD * lt.min():
            t = self.topology
            lo, hi = int(np.argmin(lt)), int(np.argmax(lt))
            raise TopologyError(
                f"link times {lt.max() / lt.min():.2g}x apart: a {self.chunk_bytes}-byte chunk crosses "
                f"{int(t.src[lo])}->{int(t.dst[lo])} in {lt[lo]:.3g} µs and {int(t.src[hi])}->{int(t.dst[hi])} in "
                f"{lt[hi]:.3g} µs; more than {MAX_LINK_TIME_SPREAD:.0e}x apart, one float time cannot hold both "
                "(check the bandwidth and latency units: GiB/s, µs)")

    @property
    def num_npus(self) -> int:
        return self.topology.num_npus

    @property
    def num_links(self) -> int:
        return self.topology.num_links

    @property
    def num_chunks(self) -> int:
        return self.collective.num_chunks(self.num_npus)

    @property
    def chunk_bytes(self) -> int:
        return self.collective.chunk_bytes(self.num_npus)

    @property
    def kind(self) -> str:
        return self.collective.kind

    @cached_property
    def link_time_us(self) -> np.ndarray:
        """Per-link time (µs) for one chunk, in link-id order."""
        with np.errstate(over="ignore", divide="ignore"):  # overflow to inf is reported by __post_init__
            t = link_time_us(self.topology.bw_GiBps, self.topology.lat_us, self.chunk_bytes)
        t.setflags(write=False)
        return t

    @cached_property
    def release_us(self) -> np.ndarray:
        """When each NPU joins (µs; 0 for all but the stragglers of ``collective.release``)."""
        r = np.zeros(self.num_npus)
        for v, t in self.collective.release:
            r[v] = t
        r.setflags(write=False)
        return r

    @property
    def has_release(self) -> bool:
        """Some NPU joins after 0."""
        return any(t > 0 for _, t in self.collective.release)

    def without_release(self) -> "Problem":
        """The same problem with every NPU present from 0."""
        return Problem(self.topology, self.collective.without_release()) if self.collective.release else self

    def link_release_us(self) -> np.ndarray:
        """Per link, the earliest time it may carry anything: the later release of its two ends (a switch is
        present from 0)."""
        n = self.num_npus
        r = np.concatenate([self.release_us, np.zeros(self.topology.num_nodes - n)])
        return np.maximum(r[self.topology.src], r[self.topology.dst])

    @cached_property
    def sources(self) -> np.ndarray:
        """The NPU holding each chunk before the collective (``-1``: every NPU contributes to it)."""
        s = self.collective.sources(self.num_npus)
        s.setflags(write=False)
        return s

    @cached_property
    def destinations(self) -> np.ndarray:
        """The one NPU that must hold each chunk after (``-1``: every NPU)."""
        d = self.collective.destinations(self.num_npus)
        d.setflags(write=False)
        return d

    @cached_property
    def demand(self):
        """The chunk table (:class:`tacos_bench.demand.Demand`): the collective's own, or its named rule's."""
        from .demand import of_collective

        return self.collective.demand if self.collective.demand is not None else of_collective(self.collective,
                                                                                                  self.num_npus)

    def with_collective(self, kind: str) -> "Problem":
        """Same topology and sizes, another collective kind."""
        return Problem(self.topology, replace(self.collective, kind=kind))

    def mirror(self) -> "Problem":
        """The copy problem whose time-reversed schedule is this reducing one: the mirrored collective
        (Reduce-Scatter: All-Gather, Reduce: Broadcast, same root) on the reversed topology."""
        return Problem(self.topology.reversed(), self.collective.mirror())

    def reversed_all_gather(self) -> "Problem":
        """The All-Gather on the reversed topology (Reduce-Scatter's and All-Reduce's first phase mirrored)."""
        return Problem(self.topology.reversed(), replace(self.collective, kind=ALL_GATHER))

    def describe(self) -> str:
        return f"{self.collective.label()} on {self.topology.summary()}; chunk {self.chunk_bytes} B"
