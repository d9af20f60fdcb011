"""Pieces the greedy kernels share (:mod:`~solvers.greedy._kernel_classic`, :mod:`~solvers.greedy._kernel_scale`,
:mod:`~solvers.greedy._kernel_tiered`, :mod:`~solvers.greedy._kernel_unicast`, :mod:`~solvers.greedy._kernel_routed`).

* bit intrinsics (``popcount``, ``ctz``, the r-th set bit) and bitset membership;
* the random stream: splitmix64, fully determined by its seed, and two ways to
  draw below ``n`` (modulo, and multiply-shift without a division);
* the event queue: links of equal chunk time end in the order they start, so
  each time class is a FIFO ring of transfers and a small index heap
  (:mod:`tacos_bench.graph`) orders the class heads; a homogeneous topology has
  one class and no heap work at all;
* the status codes a kernel returns between slices, and the time tolerances of the event loops.
"""

from __future__ import annotations

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
def class_open(r_size, cheap, cpos, csize, chead, cprio, kc, end_t):
    """A transfer of time class ``kc`` ending at ``end_t`` is about to join its ring: an empty class
    enters the heap keyed by that end."""
    if r_size[kc] == 0:
        chead[kc] = end_t
        index_push(cheap, cpos, csize, chead, cprio, kc)


@njit(cache=True, inline="always")
def ring_slot(r_off, r_cap, r_head, r_size, kc):
    """Reserve the slot after the last entry of class ``kc``'s ring (the caller fills it)."""
    s = r_head[kc] + r_size[kc]
    if s >= r_cap[kc]:
        s -= r_cap[kc]
    r_size[kc] += 1
    return r_off[kc] + s


@njit(cache=True, inline="always")
def ring_pop(r_off, r_cap, r_head, r_size, kc):
    """Take the first entry of class ``kc``'s ring; returns its slot."""
    s = r_off[kc] + r_head[kc]
    h = r_head[kc] + 1
    r_head[kc] = 0 if h == r_cap[kc] else h
    r_size[kc] -= 1
    return s


@njit(cache=True, inline="always")
def class_advance(q_end, r_off, r_head, r_size, cheap, cpos, csize, chead, cprio, kc):
    """After popping from class ``kc``'s ring: leave the heap when empty, else re-key by the new head."""
    if r_size[kc] == 0:
        index_remove(cheap, cpos, csize, chead, cprio, kc)
    else:
        chead[kc] = q_end[r_off[kc] + r_head[kc]]
        sift_down(cheap, cpos, chead, cprio, cpos[kc], csize[0])
