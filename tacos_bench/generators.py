"""Topology generators.

Every generator returns a :class:`~tacos_bench.topology.Topology` whose links are
directed; "bidirectional" means one link per direction with the same bandwidth
and latency. Grid node ids follow ``id = z*X*Y + y*X + x``.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from .errors import TopologyError
from .topology import Topology

DEFAULT_BW = 50.0   # GiB/s
DEFAULT_LAT = 0.5   # µs


def _check_positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise TopologyError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _from_pairs(n: int, pairs, bw: float, lat: float, name: str, **meta) -> Topology:
    pairs = np.asarray(list(pairs), dtype=np.int64).reshape(-1, 2)
    m = len(pairs)
    return Topology(n, pairs[:, 0], pairs[:, 1], np.full(m, float(bw)), np.full(m, float(lat)), name=name, meta=meta)


def ring(n: int, bidirectional: bool = True, bw: float = DEFAULT_BW, lat: float = DEFAULT_LAT) -> Topology:
    """Ring of ``n`` NPUs: ``i -> i+1`` (and ``i+1 -> i`` when bidirectional).

    Examples
    --------
    >>> ring(4, bidirectional=False).num_links
    4
    >>> ring(4).num_links
    8
    """
    n = _check_positive_int("ring size", n, 2)
    pairs = {(i, (i + 1) % n) for i in range(n)}
    if bidirectional:
        pairs |= {((i + 1) % n, i) for i in range(n)}
    kind = "ring" if bidirectional else "uniring"
    return _from_pairs(n, sorted(pairs), bw, lat, f"{kind}{n}", kind=kind)


def fully_connected(n: int, bw: float = DEFAULT_BW, lat: float = DEFAULT_LAT) -> Topology:
    """Every ordered pair of distinct NPUs gets a link (``n*(n-1)`` links)."""
    n = _check_positive_int("fully-connected size", n, 2)
    return _from_pairs(n, [(u, v) for u in range(n) for v in range(n) if u != v], bw, lat, f"fc{n}", kind="fc")


def grid(dims: Sequence[int], wrap: bool, bw: float | Sequence[float] = DEFAULT_BW,
         lat: float | Sequence[float] = DEFAULT_LAT, name: str | None = None) -> Topology:
    """Mesh (``wrap=False``) or torus (``wrap=True``) of any dimension.

    ``bw`` and ``lat`` may be given per dimension (heterogeneous grids). Node id
    of coordinate ``(x, y, z, ...)`` is ``x + X*(y + Y*(z + ...))``. A dimension
    of size 2 in a torus gets a single link per direction (no duplicate wrap
    link); a dimension of size 1 gets none.
    """
    dims = [_check_positive_int("grid dimension", d) for d in dims]
    nd = len(dims)
    bws = list(bw) if isinstance(bw, (list, tuple)) else [bw] * nd
    lats = list(lat) if isinstance(lat, (list, tuple)) else [lat] * nd
    if len(bws) != nd or len(lats) != nd:
        raise TopologyError(f"per-dimension bw/lat need {nd} values")
    n = int(np.prod(dims))
    strides = np.cumprod([1] + dims[:-1])
    src, dst, b, l = [], [], [], []
    coords = np.array(list(itertools.product(*[range(d) for d in reversed(dims)])))[:, ::-1]  # x fastest
    ids = coords @ strides
    for axis, size in enumerate(dims):
        if size == 1:
            continue
        c = coords[:, axis]
        for step in (+1, -1):
            nxt = c + step
            if wrap:
                if size == 2 and step == -1:
                    continue  # same neighbour as +1: one link per direction only
                nxt = nxt % size
                valid = np.ones(len(c), dtype=bool)
            else:
                valid = (nxt >= 0) & (nxt < size)
            nb = ids + (np.where(valid, nxt, c) - c) * strides[axis]
            src.append(ids[valid])
            dst.append(nb[valid])
            b.append(np.full(valid.sum(), float(bws[axis])))
            l.append(np.full(valid.sum(), float(lats[axis])))
    kind = ("torus" if wrap else "mesh") + f"{nd}d"
    if name is None:
        name = ("torus" if wrap else "mesh") + "x".join(map(str, dims))
    cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)  # noqa: E731
    return Topology(n, cat(src, np.int64), cat(dst, np.int64), cat(b, np.float64), cat(l, np.float64),
                    name=name, meta={"kind": kind, "dims": dims})


def mesh2d(x: int, y: int, bw=DEFAULT_BW, lat=DEFAULT_LAT) -> Topology:
    """2-D mesh ``x`` by ``y`` without wrap-around (``2*(2xy - x - y)`` links)."""
    return grid([x, y], wrap=False, bw=bw, lat=lat)


def mesh3d(x: int, y: int, z: int, bw=DEFAULT_BW, lat=DEFAULT_LAT) -> Topology:
    """3-D mesh without wrap-around (the TACOS reference's "Hypercube3D")."""
    return grid([x, y, z], wrap=False, bw=bw, lat=lat)


def torus2d(x: int, y: int, bw=DEFAULT_BW, lat=DEFAULT_LAT) -> Topology:
    """2-D torus with wrap-around links."""
    return grid([x, y], wrap=True, bw=bw, lat=lat)


def torus3d(x: int, y: int, z: int, bw=DEFAULT_BW, lat=DEFAULT_LAT) -> Topology:
    """3-D torus with wrap-around links."""
    return grid([x, y, z], wrap=True, bw=bw, lat=lat)


def hypercube(n: int, bw: float = DEFAULT_BW, lat: float = DEFAULT_LAT) -> Topology:
    """Binary hypercube of ``n = 2**d`` NPUs: ``u`` links to ``u xor 2**k``.

    Examples
    --------
    >>> hypercube(16).num_links
    64
    """
    n = _check_positive_int("hypercube size", n, 2)
    if n & (n - 1):
        raise TopologyError(f"hypercube size must be a power of two, got {n}")
    d = n.bit_length() - 1
    pairs = [(u, u ^ (1 << k)) for u in range(n) for k in range(d)]
    return _from_pairs(n, pairs, bw, lat, f"bhypercube{n}", kind="hypercube")
