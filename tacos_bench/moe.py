"""The traffic of one mixture-of-experts layer: dispatch (each token to the NPUs hosting its experts) and combine
(the experts' outputs back to the token's NPU), as chunk tables (:mod:`tacos_bench.demand`).

Every NPU holds ``tokens_per_npu`` tokens of ``hidden x dtype_bytes`` bytes; ``experts`` experts are placed over
the NPUs in contiguous blocks (expert ``e`` on NPU ``e * N // experts``; fewer experts than NPUs leave NPUs
without one); each token picks ``top_k`` distinct experts. The routing skew is set by ``gini``: expert
popularities are log-normal with the spread that makes the Gini coefficient of the tokens each expert receives
equal ``gini`` (calibrated by bisection on this seed's draws; the realized value is ``demand_gini``; measured
real-text routing spans 0.10-0.38, arXiv 2605.20982). Each token draws its experts by the Gumbel top-k trick
(sampling without replacement in proportion to popularity), from ``seed``.

*Dispatch* sends each token once to each NPU hosting one of its experts (other than its own): a copy chunk with
a subset of destinations; tokens of one NPU with the same destination set share chunks of ``chunk_bytes``
(default: one token). *Combine* reduces the experts' outputs into the token's NPU: a reduce chunk from the
hosting NPUs and the token's own (a zero contribution where it hosts none of them), its mirror being dispatch.

The defaults are DeepSeek-V3's layer shape (4,096 tokens per GPU, hidden 7,168 in bf16, top-8 of 64 experts).

Examples
--------
>>> r = moe_routing(8, tokens_per_npu=64, hidden=16, experts=8, top_k=2, gini=0.2, seed=1)
>>> round(r.gini, 2), r.experts_of.shape
(0.2, (512, 2))
>>> d = dispatch_demand(r)
>>> d.copies and not d.unicast, d.chunk_bytes
(True, 32)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .demand import COPY_OP, REDUCE_OP, Demand, gini as gini_of
from .errors import CollectiveError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
# the calibration stops within this of the asked Gini, measured on at most this many tokens
GINI_TOL = 2e-3
CALIBRATION_TOKENS = 1 << 15


@dataclass(frozen=True)
class MoeRouting:
    """Which experts each token picked: ``experts_of[t]`` (token ``t`` on NPU ``t // tokens_per_npu``), the
    hosting NPU of each expert ``host[e]``, and the token size."""

    num_npus: int
    tokens_per_npu: int
    token_bytes: int
    host: np.ndarray
    experts_of: np.ndarray
    gini: float

    @property
    def token_npu(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_npus), self.tokens_per_npu)

    def destination_masks(self) -> np.ndarray:
        """Per token, the bitmask (bits as uint64 words, shape ``[T, words]``) of NPUs hosting its experts."""
        n = self.num_npus
        words = (n + 63) // 64
        T = self.experts_of.shape[0]
        mask = np.zeros((T, words), np.uint64)
        hosts = self.host[self.experts_of]
        for j in range(hosts.shape[1]):
            h = hosts[:, j]
            np.bitwise_or.at(mask, (np.arange(T), h // 64), np.uint64(1) << (h % 64).astype(np.uint64))
        return mask


def moe_routing(num_npus: int, *, tokens_per_npu: int = 4096, hidden: int = 7168, dtype: str | int = "bf16",
                experts: int = 64, top_k: int = 8, gini: float = 0.2, seed: int = 0) -> MoeRouting:
    """Draw one layer's routing (module docstring); a one-line :class:`CollectiveError` on impossible sizes."""
    n = int(num_npus)
    dtype_bytes = DTYPE_BYTES.get(dtype, dtype) if isinstance(dtype, str) else int(dtype)
    if not isinstance(dtype_bytes, int) or dtype_bytes < 1:
        raise CollectiveError(f"collective.dtype must be one of {', '.join(DTYPE_BYTES)} or a byte count, got {dtype!r}")
    for name, v in (("tokens_per_npu", tokens_per_npu), ("hidden", hidden), ("experts", experts), ("top_k", top_k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise CollectiveError(f"collective.{name} must be a positive integer, got {v!r}")
    if top_k > experts:
        raise CollectiveError(f"collective.top_k={top_k} exceeds the {experts} experts")
    if not (0.0 <= float(gini) < 1.0) or not math.isfinite(float(gini)):
        raise CollectiveError(f"collective.gini must be in [0, 1), got {gini!r}")
    host = (np.arange(experts) * n) // experts
    T = n * int(tokens_per_npu)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x30E]))
    z = rng.standard_normal(experts)                 # the popularities' shape, scaled by sigma below
    # Gumbel noise: top-k of log(w) + g samples without replacement; drawn row block by row block (the same
    # stream as one (T, experts) draw, without its memory: 8 GiB at 512 GPUs of DeepSeek-V3's shape)
    def gumbel(rows: int) -> np.ndarray:
        return -np.log(-np.log(rng.random((rows, experts))))

    def route(sigma: float, g: np.ndarray) -> np.ndarray:
        keys = sigma * z[None, :] + g
        return np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]

    def gini_at(sigma: float, g: np.ndarray) -> float:
        return gini_of(np.bincount(route(sigma, g).ravel(), minlength=experts))

    # calibrate on a sample of the tokens (the first draws), then route them all
    g0 = gumbel(min(T, CALIBRATION_TOKENS))
    lo, hi = 0.0, 1.0
    while gini_at(hi, g0) < gini and hi < 64:
        lo, hi = hi, hi * 2
    sigma = lo
    if gini_at(lo, g0) < gini - GINI_TOL:
        for _ in range(60):
            sigma = 0.5 * (lo + hi)
            got = gini_at(sigma, g0)
            if abs(got - gini) <= GINI_TOL:
                break
            lo, hi = (sigma, hi) if got < gini else (lo, sigma)
    parts = [route(sigma, g0)]
    block = max(1, (1 << 25) // experts)
    for first in range(g0.shape[0], T, block):
        parts.append(route(sigma, gumbel(min(block, T - first))))
    chosen = np.concatenate(parts)
    got = gini_of(np.bincount(chosen.ravel(), minlength=experts))
    return MoeRouting(n, int(tokens_per_npu), int(hidden) * dtype_bytes, host, np.sort(chosen, axis=1), float(got))


def _groups(r: MoeRouting):
    """Tokens grouped by (NPU, destination set, the own NPU left out): each group's NPU, its set as CSR
    (``ptr``, ``ids``), and its token count."""
    masks = r.destination_masks()
    src = r.token_npu
    masks[np.arange(src.size), src // 64] &= ~(np.uint64(1) << (src % 64).astype(np.uint64))
    nonempty = masks.any(axis=1)
    key = np.concatenate([src[:, None].astype(np.uint64), masks], axis=1)[nonempty]
    uniq, count = np.unique(key, axis=0, return_counts=True)
    bits = np.unpackbits(uniq[:, 1:].astype("<u8").view(np.uint8), axis=1, bitorder="little")[:, :r.num_npus]
    row, ids = np.nonzero(bits)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=uniq.shape[0]))]).astype(np.int64)
    return uniq[:, 0].astype(np.int64), ptr, ids.astype(np.int64), count


def dispatch_demand(r: MoeRouting, chunk_bytes: int | None = None) -> Demand:
    """The dispatch chunk table (module docstring)."""
    return _table(r, chunk_bytes, combine=False)


def combine_demand(r: MoeRouting, chunk_bytes: int | None = None) -> Demand:
    """The combine chunk table (module docstring): the time-reversed mirror of dispatch, reducing."""
    return _table(r, chunk_bytes, combine=True)


def _repeat_sets(ptr: np.ndarray, ids: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR of the sets of groups ``g`` (one entry per chunk)."""
    counts = np.diff(ptr)[g]
    out_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pos = np.repeat(ptr[g], counts) + (np.arange(int(out_ptr[-1])) - np.repeat(out_ptr[:-1], counts))
    return out_ptr, ids[pos]


def _table(r: MoeRouting, chunk_bytes: int | None, combine: bool) -> Demand:
    cb = int(chunk_bytes) if chunk_bytes is not None else r.token_bytes
    if cb < 1:
        raise CollectiveError(f"collective.chunk_bytes must be a positive number of bytes, got {chunk_bytes}")
    src, gptr, gids, count = _groups(r)
    if combine:
        # every hosting NPU and the token's own contribute (a zero part where it hosts none of them)
        G = src.size
        counts = np.diff(gptr) + 1
        ptr2 = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        both = np.empty(int(ptr2[-1]), np.int64)
        rows = np.repeat(np.arange(G), np.diff(gptr))
        both[ptr2[rows] + (np.arange(gids.size) - np.repeat(gptr[:-1], np.diff(gptr)))] = gids
        both[ptr2[1:] - 1] = src
        # sorted ids within each set
        order = np.lexsort((both, np.repeat(np.arange(G), counts)))
        gptr, gids = ptr2, both[order]
    per = np.ceil(count * r.token_bytes / cb).astype(np.int64)
    pad = int(per.sum() * cb - count.sum() * r.token_bytes)
    C = int(per.sum())
    g = np.repeat(np.arange(src.size), per)
    own = src[g]
    sp, si = _repeat_sets(gptr, gids, g)
    one = np.arange(C + 1, dtype=np.int64)
    if not combine:
        return Demand(r.num_npus, cb, one, own, sp, si, np.full(C, COPY_OP, np.int8), padding_bytes=pad,
                      name="moe_dispatch", meta={"demand_gini": r.gini})
    return Demand(r.num_npus, cb, sp, si, one, own, np.full(C, REDUCE_OP, np.int8), padding_bytes=pad,
                  name="moe_combine", meta={"demand_gini": r.gini})
