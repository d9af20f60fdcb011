"""The one cost model every component uses.

A chunk of ``chunk_bytes`` crosses a directed link of bandwidth ``bw_GiBps``
(GiB/s, 2**30 bytes) and latency ``lat_us`` (µs) in
``lat_us + chunk_bytes / (bw_GiBps * 2**30 / 1e6)`` µs. A link carries one chunk
at a time (store-and-forward) and a node may forward a chunk the instant it
arrives. This is the TACOS reference's model, so times are comparable with it.
"""

from __future__ import annotations

import numpy as np

BYTES_PER_GIB = 2**30
MIB = 2**20


def link_time_us(bw_GiBps, lat_us, chunk_bytes):
    """Time in µs for one chunk to cross a link (works on scalars and arrays).

    Examples
    --------
    >>> round(float(link_time_us(50.0, 0.5, 2**30 // 16)), 4)
    1250.5
    """
    bw = np.asarray(bw_GiBps, dtype=np.float64)
    return np.asarray(lat_us, dtype=np.float64) + chunk_bytes / (bw * BYTES_PER_GIB / 1e6)


def chunk_bytes_for(buffer_bytes: int, num_chunks: int) -> int:
    """Bytes per chunk: ``floor(buffer_bytes / num_chunks)`` (the reference's rule)."""
    return int(buffer_bytes) // int(num_chunks)
