"""Pieces the greedy kernels share (:mod:`~solvers.greedy._kernel_classic`, :mod:`~solvers.greedy._kernel_scale`,
:mod:`~solvers.greedy._kernel_tiered`, :mod:`~solvers.greedy._kernel_unicast`, :mod:`~solvers.greedy._kernel_routed`).

* the named structures more than one kernel takes: the links (:class:`Links`), the output buffers
  (:class:`Transfers`) and the event queue (:class:`EventQueue`);
* bit intrinsics (``popcount``, ``ctz``, the r-th set bit) and bitset membership;
* the random stream: splitmix64, fully determined by its seed, and two ways to
  draw below ``n`` (modulo, and multiply-shift without a division);
* the event queue: links of equal chunk time end in the order they start, so
  each time class is a FIFO ring of transfers and a small index heap
  (:mod:`tacos_bench.graph`) orders the class heads; a homogeneous topology has
  one class and no heap work at all;
* the status codes a kernel returns between slices, and the time tolerances of the event loops.

The structures are named tuples: numba takes them as arguments (and builds them inside a kernel), and a field
read compiles to the same code as a tuple item, so the names cost nothing at run time. A parallel loop body
(``prange``) takes only arrays and scalars, so a kernel that runs one reads the fields it needs before the loop.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from tacos_bench.graph import index_push, index_remove, sift_down

# One set of codes for every kernel, so a caller never reads one kernel's code with another's meaning.
ST_DONE, ST_SLICE, ST_FLUSH, ST_STUCK, ST_EVFULL, ST_GROW = 0, 1, 2, 3, 4, 5

# Arrivals within this (relative) distance of the first one are handled as one event: link times are sums of
# floats, so equal times computed along different paths differ in the last bits.
EVENT_REL = 1e-12
# A link counts as on a shortest path when it is within this (relative) distance of one, for the same reason.
FORWARD_REL = 1e-9

TIE_EARLIEST, TIE_RANDOM, TIE_LOWEST = 0, 1, 2

U1 = np.uint64(1)
U0 = np.uint64(0)


class Links(NamedTuple):
    """The directed links of a topology, by link id, and the per-NPU lists of them (CSR)."""

    src: np.ndarray       # int64 [M]: sender of each link
    dst: np.ndarray       # int64 [M]: receiver of each link
    time: np.ndarray      # float64 [M]: time one chunk takes on the link (µs)
    in_ptr: np.ndarray    # int64 [N + 1]: in-links of v are in_order[in_ptr[v]:in_ptr[v + 1]]
    in_order: np.ndarray  # int64 [M]: link ids grouped by receiver
    out_ptr: np.ndarray   # int64 [N + 1]: out-links of u are the ids out_ptr[u] .. out_ptr[u + 1] - 1


class Transfers(NamedTuple):
    """A kernel's output buffers, one row per transfer."""

    chunk: np.ndarray
    link: np.ndarray      # link id
    start: np.ndarray     # start time (the scale kernel: start event index)
    end: np.ndarray       # end time (the scale kernel: end event index)


class EventQueue(NamedTuple):
    """Transfers in flight: one FIFO ring per link-time class in shared slot arrays, and an index heap of
    the classes keyed by the end of their first entry."""

    class_of: np.ndarray   # int64: time class of each link as the kernel addresses it (scale: by in-position)
    end: np.ndarray        # float64 [slots]: end time of the transfer in each slot
    entry: tuple           # the kernel's own named tuple of the other per-slot arrays (indexed like ``end``)
    ring_off: np.ndarray   # int64 [classes]: first slot of each class's ring
    ring_cap: np.ndarray   # int64 [classes]: slots of each ring
    ring_head: np.ndarray  # int64 [classes]: ring position of the first entry
    ring_size: np.ndarray  # int64 [classes]: entries in the ring
    heap: np.ndarray       # int64 [classes]: the non-empty classes, a heap on (head_end, prio)
    heap_pos: np.ndarray   # int64 [classes]: position of each class in ``heap``, -1 when absent
    heap_size: np.ndarray  # int64 [1]
    head_end: np.ndarray   # float64 [classes]: end time of each class's first entry (the heap key)
    prio: np.ndarray       # int64 [classes]: tie-break of equal keys


# ---------------------------------------------------------------------------- bits
@intrinsic
def popcount(typingctx, x):
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(64)])
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def ctz(typingctx, x):
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.cttz", [ir.IntType(64), ir.IntType(1)])
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])

    return sig, codegen


@njit(cache=True, inline="always")
def nth_bit(x, r):
    """Index of the ``r``-th (0-based) set bit of ``x``."""
    for _ in range(r):
        x &= x - U1
    return np.int64(ctz(x))


@njit(cache=True, inline="always")
def has_bit(row, c):
    """Bit ``c`` of the bitset ``row`` (uint64 words)."""
    return (row[c >> 6] >> np.uint64(c & 63)) & U1


# ---------------------------------------------------------------------------- random numbers
@njit(cache=True, inline="always")
def next_u64(rng):
    """splitmix64: tiny, portable, and fully determined by the seed."""
    z = rng[0] + np.uint64(0x9E3779B97F4A7C15)
    rng[0] = z
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def below(rng, n):
    """Uniform integer in ``[0, n)`` (n < 2**32 here, so the modulo bias is < 2**-32)."""
    return np.int64(next_u64(rng) % np.uint64(n))


@njit(cache=True, inline="always")
def shuffle(rng, a):
    """``a`` in a uniformly random order, in place (Fisher-Yates on the run's stream)."""
    for i in range(a.shape[0] - 1, 0, -1):
        j = below(rng, i + 1)
        a[i], a[j] = a[j], a[i]


@njit(cache=True, inline="always")
def below32(rng, n):
    """Uniform integer in ``[0, n)`` for n < 2**32 by multiply-shift (bias < n / 2**32, no division)."""
    return np.int64(((next_u64(rng) >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


# ---------------------------------------------------------------------------- event queue
@njit(cache=True, inline="always")
def class_open(q, kc, end_t):
    """A transfer of time class ``kc`` ending at ``end_t`` is about to join its ring: an empty class
    enters the heap keyed by that end."""
    if q.ring_size[kc] == 0:
        q.head_end[kc] = end_t
        index_push(q.heap, q.heap_pos, q.heap_size, q.head_end, q.prio, kc)


@njit(cache=True, inline="always")
def ring_slot(q, kc):
    """Reserve the slot after the last entry of class ``kc``'s ring (the caller fills it)."""
    r_cap, r_size = q.ring_cap, q.ring_size
    s = q.ring_head[kc] + r_size[kc]
    if s >= r_cap[kc]:
        s -= r_cap[kc]
    r_size[kc] += 1
    return q.ring_off[kc] + s


@njit(cache=True, inline="always")
def ring_pop(q, kc):
    """Take the first entry of class ``kc``'s ring; returns its slot."""
    r_head = q.ring_head
    s = q.ring_off[kc] + r_head[kc]
    h = r_head[kc] + 1
    r_head[kc] = 0 if h == q.ring_cap[kc] else h
    q.ring_size[kc] -= 1
    return s


@njit(cache=True, inline="always")
def class_advance(q, kc):
    """After popping from class ``kc``'s ring: leave the heap when empty, else re-key by the new head."""
    if q.ring_size[kc] == 0:
        index_remove(q.heap, q.heap_pos, q.heap_size, q.head_end, q.prio, kc)
    else:
        q.head_end[kc] = q.end[q.ring_off[kc] + q.ring_head[kc]]
        sift_down(q.heap, q.heap_pos, q.head_end, q.prio, q.heap_pos[kc], q.heap_size[0])


@njit(cache=True, inline="always")
def next_end(q):
    """End time of the earliest transfer in flight (the queue must not be empty)."""
    return q.head_end[q.heap[0]]
