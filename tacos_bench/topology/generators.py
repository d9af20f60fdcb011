"""Topology generators.

Every generator returns a :class:`~tacos_bench.topology.Topology` whose links are
directed; "bidirectional" means one link per direction with the same bandwidth
and latency. Grid node ids follow ``id = z*X*Y + y*X + x``.

Families: :func:`ring`, :func:`fully_connected`, :func:`grid` (:func:`mesh2d`,
:func:`mesh3d`, :func:`torus2d`, :func:`torus3d`, :func:`hetero_mesh2d`),
:func:`hypercube`, :func:`switch` (one switch unwound into links),
:func:`dragonfly` and :func:`hetero_cluster` (fully connected servers on a
2-D torus of servers). Names and configs: :mod:`tacos_bench.topology.named`.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from ..errors import TopologyError
from .model import Topology

__all__ = ["DEFAULT_BW", "DEFAULT_LAT", "MAX_NPUS", "MAX_LINKS", "ring", "fully_connected", "grid", "mesh2d",
           "mesh3d", "torus2d", "torus3d", "hypercube", "switch", "dragonfly", "hetero_cluster", "hetero_mesh2d",
           "three_tier", "unequal_servers", "random_directed"]

DEFAULT_BW = 50.0   # GiB/s
DEFAULT_LAT = 0.5   # µs


def _check_positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise TopologyError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# Guards against a typo such as mesh100000x100000 exhausting memory; far above any topology we simulate.
MAX_NPUS = 10_000_000
MAX_LINKS = 100_000_000


def _check_size(what: str, npus: int, links: int) -> None:
    if npus > MAX_NPUS or links > MAX_LINKS:
        raise TopologyError(f"{what} would have {npus:,} NPUs and {links:,} links; the limits are "
                            f"{MAX_NPUS:,} NPUs and {MAX_LINKS:,} links")


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
    _check_size(f"ring{n}", n, 2 * n)
    pairs = {(i, (i + 1) % n) for i in range(n)}
    if bidirectional:
        pairs |= {((i + 1) % n, i) for i in range(n)}
    kind = "ring" if bidirectional else "uniring"
    return _from_pairs(n, sorted(pairs), bw, lat, f"{kind}{n}", kind=kind)


def fully_connected(n: int, bw: float = DEFAULT_BW, lat: float = DEFAULT_LAT) -> Topology:
    """Every ordered pair of distinct NPUs gets a link (``n*(n-1)`` links)."""
    n = _check_positive_int("fully-connected size", n, 2)
    _check_size(f"fc{n}", n, n * (n - 1))
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
    n = math.prod(dims)
    _check_size("grid " + "x".join(map(str, dims)), n, 2 * nd * n)
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
    _check_size(f"hypercube{n}", n, n * (n.bit_length() - 1))
    if n & (n - 1):
        raise TopologyError(f"hypercube size must be a power of two, got {n}")
    d = n.bit_length() - 1
    pairs = [(u, u ^ (1 << k)) for u in range(n) for k in range(d)]
    return _from_pairs(n, pairs, bw, lat, f"bhypercube{n}", kind="hypercube")


def _check_bw_lat(what: str, bw, lat) -> None:
    # Topology would reject these too, but only per link; naming the parameter is clearer.
    if not (isinstance(bw, (int, float, np.integer, np.floating)) and np.isfinite(bw) and bw > 0):
        raise TopologyError(f"{what} bandwidth must be a finite number > 0 GiB/s, got {bw!r}")
    if not (isinstance(lat, (int, float, np.integer, np.floating)) and np.isfinite(lat) and lat >= 0):
        raise TopologyError(f"{what} latency must be a finite number >= 0 µs, got {lat!r}")


def switch(n: int, bw: float = DEFAULT_BW, lat: float = DEFAULT_LAT) -> Topology:
    """A single non-blocking switch joining ``n`` NPUs, unwound into point-to-point links.

    The link-level model has no switch node, so the switch becomes a fully
    connected graph whose links share each NPU's port:

    * every ordered pair ``u -> v`` gets a link of bandwidth ``bw / (n-1)``, so
      the ``n-1`` out-links of an NPU together inject exactly the port bandwidth
      ``bw`` and its ``n-1`` in-links together eject exactly ``bw``;
    * every link has latency ``2*lat`` (NPU -> switch -> NPU, two hops of
      ``lat`` each).

    This is conservative for a schedule that talks to one peer at a time (it
    then uses only ``1/(n-1)`` of its port) and exact for the all-to-all
    traffic of All-Gather/Reduce-Scatter, where all links are busy together.

    Parameters
    ----------
    n : int
        Number of NPUs (>= 2).
    bw : float
        Per-NPU port bandwidth, GiB/s.
    lat : float
        Latency of one hop (NPU to switch), µs.

    Examples
    --------
    >>> t = switch(5, bw=100.0, lat=0.5)
    >>> t.num_links, float(t.bw_GiBps[0]), float(t.lat_us[0])
    (20, 25.0, 1.0)
    """
    n = _check_positive_int("switch size", n, 2)
    _check_size(f"switch{n}", n, n * (n - 1))
    _check_bw_lat("switch port", bw, lat)
    pairs = [(u, v) for u in range(n) for v in range(n) if u != v]
    return _from_pairs(n, pairs, float(bw) / (n - 1), 2.0 * float(lat), f"switch{n}",
                       kind="switch", port_bw_GiBps=float(bw), hop_lat_us=float(lat))


def dragonfly(groups: int, routers_per_group: int, intra_bw: float = DEFAULT_BW, intra_lat: float = DEFAULT_LAT,
              inter_bw: float = DEFAULT_BW / 2, inter_lat: float = 2 * DEFAULT_LAT) -> Topology:
    """DragonFly: fully connected groups, one global link pair between every two groups.

    Each router is one NPU: ``npu = group * routers_per_group + router``.
    Inside a group every ordered pair of routers is linked (``intra_bw``,
    ``intra_lat``). Every unordered pair of groups ``{g, h}`` is joined by one
    bidirectional global link (``inter_bw``, ``inter_lat``).

    Which router holds a global link (the "consecutive" arrangement): group
    ``g`` numbers its ``groups-1`` peer groups ``h != g`` in increasing order,
    ``k = h if h < g else h - 1``, and connects peer ``k`` from router
    ``k mod routers_per_group``. Global links are thus spread round-robin, so
    each router holds ``ceil`` or ``floor`` of ``(groups-1)/routers_per_group``
    global links; with ``groups = routers_per_group + 1`` (the balanced
    ``g = a*h + 1`` DragonFly with ``h = 1``) every router holds exactly one.

    Parameters
    ----------
    groups : int
        Number of groups (>= 1).
    routers_per_group : int
        Routers (NPUs) per group (>= 1); ``groups * routers_per_group >= 2``.
    intra_bw, intra_lat : float
        Local (intra-group) link bandwidth (GiB/s) and latency (µs).
    inter_bw, inter_lat : float
        Global (inter-group) link bandwidth (GiB/s) and latency (µs).

    Examples
    --------
    >>> t = dragonfly(4, 4)
    >>> t.num_npus, t.num_links   # 4 groups * 4*3 local + 6 group pairs * 2 directions
    (16, 60)
    >>> t.has_link(0, 4), t.has_link(4, 0)   # group 0 router 0 <-> group 1 router 0
    (True, True)
    """
    g = _check_positive_int("dragonfly groups", groups)
    a = _check_positive_int("dragonfly routers_per_group", routers_per_group)
    if g * a < 2:
        raise TopologyError("dragonfly needs at least 2 NPUs (groups * routers_per_group >= 2)")
    _check_size(f"dragonfly{g}x{a}", g * a, g * a * (a - 1) + g * (g - 1))
    _check_bw_lat("dragonfly intra-group", intra_bw, intra_lat)
    _check_bw_lat("dragonfly inter-group", inter_bw, inter_lat)
    src, dst, bw, lat = [], [], [], []
    for grp in range(g):
        base = grp * a
        for r in range(a):
            for q in range(a):
                if r != q:
                    src.append(base + r)
                    dst.append(base + q)
    n_local = len(src)

    def port(grp: int, peer: int) -> int:
        k = peer if peer < grp else peer - 1
        return grp * a + k % a

    for grp in range(g):
        for peer in range(grp + 1, g):
            u, v = port(grp, peer), port(peer, grp)
            src += [u, v]
            dst += [v, u]
    n_global = len(src) - n_local
    bw = np.concatenate([np.full(n_local, float(intra_bw)), np.full(n_global, float(inter_bw))])
    lat = np.concatenate([np.full(n_local, float(intra_lat)), np.full(n_global, float(inter_lat))])
    return Topology(g * a, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), bw, lat,
                    name=f"dragonfly{g}x{a}",
                    meta={"kind": "dragonfly", "groups": g, "routers_per_group": a})


def hetero_cluster(servers_x: int, servers_y: int, npus_per_server: int, intra_bw: float = 150.0,
                   intra_lat: float = 0.25, inter_bw: float | Sequence[float] = 25.0,
                   inter_lat: float | Sequence[float] = 2.0, name: str | None = None) -> Topology:
    """Two-tier heterogeneous cluster: fully connected servers on a 2-D torus of servers.

    Numbering: ``npu = server * npus_per_server + local`` with
    ``server = sy * servers_x + sx``.

    * Scale-up tier: inside a server every ordered pair of NPUs is linked
      (``intra_bw``, ``intra_lat``), e.g. NVLink/NVSwitch-class.
    * Scale-out tier: NPU ``local`` of a server links, in both directions, to
      NPU ``local`` of each of the server's torus neighbours (``sx±1``,
      ``sy±1`` with wrap-around), i.e. one rail per local index
      (``inter_bw``, ``inter_lat``; may be given per torus dimension
      ``(x, y)``). A torus dimension of size 2 gives one neighbour per
      direction, size 1 none (as in :func:`grid`).

    With ``8 x 8`` servers of 8 NPUs (``hetero512``) every NPU has
    ``7 + 4 = 11`` out-links, ``512 * 11 = 5632`` directed links in all.

    Examples
    --------
    >>> t = hetero_cluster(8, 8, 8)
    >>> t.num_npus, t.num_links
    (512, 5632)
    >>> float(t.bw_GiBps[t.link_id(0, 1)]), float(t.bw_GiBps[t.link_id(0, 8)])  # same server, next server
    (150.0, 25.0)
    """
    sx = _check_positive_int("hetero servers_x", servers_x)
    sy = _check_positive_int("hetero servers_y", servers_y)
    p = _check_positive_int("hetero npus_per_server", npus_per_server)
    n = sx * sy * p
    _check_size(f"hetero{sx}x{sy}x{p}", n, n * (p - 1) + 4 * n)
    if n < 2:
        raise TopologyError("hetero cluster needs at least 2 NPUs")
    _check_bw_lat("hetero intra-server", intra_bw, intra_lat)
    servers = sx * sy
    # Intra-server: the fully connected pattern of one server, offset per server.
    lu, lv = np.nonzero(~np.eye(p, dtype=bool))
    off = (np.arange(servers) * p)[:, None]
    intra_src = (off + lu[None, :]).ravel()
    intra_dst = (off + lv[None, :]).ravel()
    parts_s, parts_d = [intra_src], [intra_dst]
    parts_b, parts_l = [np.full(intra_src.size, float(intra_bw))], [np.full(intra_src.size, float(intra_lat))]
    if servers > 1:
        # The server graph is exactly a 2-D torus; grid() already handles size-1/size-2 dimensions.
        stor = grid([sx, sy], wrap=True, bw=inter_bw, lat=inter_lat)
        local = np.arange(p)[None, :]
        parts_s.append((stor.src.astype(np.int64)[:, None] * p + local).ravel())
        parts_d.append((stor.dst.astype(np.int64)[:, None] * p + local).ravel())
        parts_b.append(np.repeat(stor.bw_GiBps, p))
        parts_l.append(np.repeat(stor.lat_us, p))
    return Topology(n, np.concatenate(parts_s), np.concatenate(parts_d), np.concatenate(parts_b),
                    np.concatenate(parts_l), name=name or f"hetero{sx}x{sy}x{p}",
                    meta={"kind": "hetero", "servers_x": sx, "servers_y": sy, "npus_per_server": p})


def hetero_mesh2d(x: int, y: int, bw: Sequence[float] = (50.0, 100.0),
                  lat: float | Sequence[float] = DEFAULT_LAT) -> Topology:
    """2-D mesh whose X and Y links differ: ``bw = (bw_x, bw_y)`` GiB/s (``lat`` may be per dimension too).

    Examples
    --------
    >>> t = hetero_mesh2d(4, 4)
    >>> float(t.bw_GiBps[t.link_id(0, 1)]), float(t.bw_GiBps[t.link_id(0, 4)])
    (50.0, 100.0)
    """
    return grid([x, y], wrap=False, bw=list(bw), lat=list(lat) if isinstance(lat, (list, tuple)) else lat,
                name=f"hetero_mesh{x}x{y}")


def three_tier(pods: int, servers: int, npus_per_server: int, intra: tuple[float, float] = (150.0, 0.25),
               pod: tuple[float, float] = (50.0, 1.0), spine: tuple[float, float] = (12.5, 3.0),
               spine_links: str = "full", name: str | None = None) -> Topology:
    """Three-tier cluster: servers inside pods inside a spine, one rail per local NPU index.

    Numbering: ``npu = (pod * servers + server) * npus_per_server + local``.

    * Server tier: the NPUs of a server are fully connected (``intra = (bw, lat)``).
    * Pod tier: NPU ``local`` of a server links both ways to NPU ``local`` of every other server of its
      pod (``pod``), a rail-optimized leaf.
    * Spine tier: NPU ``local`` of server ``s`` of a pod links both ways to NPU ``local`` of server ``s``
      of every other pod (``spine_links="full"``) or of the two neighbouring pods (``"ring"``).

    Examples
    --------
    >>> t = three_tier(4, 4, 8)
    >>> t.num_npus, t.num_links
    (128, 1664)
    >>> [float(t.bw_GiBps[t.link_id(0, x)]) for x in (1, 8, 32)]   # server, pod, spine
    [150.0, 50.0, 12.5]
    """
    P = _check_positive_int("three_tier pods", pods)
    S = _check_positive_int("three_tier servers", servers)
    n = _check_positive_int("three_tier npus_per_server", npus_per_server)
    if spine_links not in ("full", "ring"):
        raise TopologyError(f"three_tier spine_links must be full or ring, got {spine_links!r}")
    for what, (b, l) in (("intra", intra), ("pod", pod), ("spine", spine)):
        _check_bw_lat(f"three_tier {what}", b, l)
    N = P * S * n
    if N < 2:
        raise TopologyError("three_tier needs at least 2 NPUs")
    _check_size(f"three_tier{P}x{S}x{n}", N, N * (n + S + P))

    def nid(p, s, i):
        return (p * S + s) * n + i

    edges = []
    for p in range(P):
        peers = [q for q in range(P) if q != p] if spine_links == "full" else sorted({(p + 1) % P, (p - 1) % P} - {p})
        for s in range(S):
            for i in range(n):
                u = nid(p, s, i)
                edges += [(u, nid(p, s, j), *intra) for j in range(n) if j != i]
                edges += [(u, nid(p, s2, i), *pod) for s2 in range(S) if s2 != s]
                edges += [(u, nid(q, s, i), *spine) for q in peers]
    nm = name or (f"three_tier{P}x{S}x{n}" + ("" if spine_links == "full" else "_ring"))
    return Topology.from_edges(N, edges, name=nm, kind="three_tier", pods=P, servers=S, npus_per_server=n)


def unequal_servers(sizes: Sequence[int], intra: tuple[float, float] = (150.0, 0.25),
                    inter: tuple[float, float] = (25.0, 2.0), name: str | None = None) -> Topology:
    """Servers of unequal size on a bidirectional ring of servers, rails where they exist.

    Server ``s`` has ``sizes[s]`` fully connected NPUs (``intra``); NPU ``i`` of a server links both ways
    to NPU ``i`` of each neighbouring server on the ring that has an NPU ``i`` (``inter``).

    Examples
    --------
    >>> t = unequal_servers([4, 8, 6, 2])
    >>> t.num_npus, t.has_link(4 + 7, 0)    # NPU 7 of server 1 has no rail: server 0 has 4 NPUs
    (20, False)
    """
    sz = [_check_positive_int("unequal_servers size", x) for x in sizes]
    if len(sz) < 2:
        raise TopologyError("unequal_servers needs at least 2 servers")
    _check_bw_lat("unequal_servers intra", *intra)
    _check_bw_lat("unequal_servers inter", *inter)
    base = np.concatenate([[0], np.cumsum(sz)]).astype(np.int64)
    S = len(sz)
    edges = []
    for s in range(S):
        for i in range(sz[s]):
            edges += [(base[s] + i, base[s] + j, *intra) for j in range(sz[s]) if j != i]
            for s2 in sorted({(s + 1) % S, (s - 1) % S} - {s}):
                if i < sz[s2]:
                    edges.append((base[s] + i, base[s2] + i, *inter))
    return Topology.from_edges(int(base[-1]), edges, name=name or "unequal" + "-".join(map(str, sz)),
                               kind="unequal_servers", sizes=sz)


def random_directed(n: int, out_degree: int = 3, seed: int = 0, bws: Sequence[float] = (25.0, 50.0, 100.0),
                    lats: Sequence[float] = (0.5, 1.0, 2.0), name: str | None = None) -> Topology:
    """A random asymmetric, heterogeneous, strongly connected directed graph, from ``seed``.

    A directed cycle through a seeded permutation of the NPUs makes it strongly connected; every NPU then
    gets links to random other NPUs until it has ``out_degree`` out-links (never a link in both
    directions by construction, so ``u->v`` and ``v->u`` differ in presence, bandwidth and latency). Each
    link draws its bandwidth from ``bws`` and its latency from ``lats``.

    Examples
    --------
    >>> t = random_directed(16, 3, seed=1)
    >>> t.num_npus, t.num_links, t.is_symmetric
    (16, 48, False)
    >>> bool(np.array_equal(t.dst, random_directed(16, 3, seed=1).dst))
    True
    """
    n = _check_positive_int("random_directed n", n, 2)
    k = _check_positive_int("random_directed out_degree", out_degree)
    if k > n - 1:
        raise TopologyError(f"random_directed: out_degree {k} needs more than {n} NPUs")
    for b in bws:
        _check_bw_lat("random_directed", b, min(lats))
    rng = np.random.default_rng(int(seed))
    perm = rng.permutation(n)
    links = {(int(perm[i]), int(perm[(i + 1) % n])) for i in range(n)}
    for u in range(n):
        others = [v for v in rng.permutation(n).tolist() if v != u]
        for v in others:
            if sum(1 for a, _ in links if a == u) >= k:
                break
            if (u, v) not in links and (v, u) not in links:
                links.add((u, v))
    pairs = sorted(links)
    bw = rng.choice(np.asarray(bws, float), size=len(pairs))
    lat = rng.choice(np.asarray(lats, float), size=len(pairs))
    return Topology(n, np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), bw, lat,
                    name=name or f"random{n}d{k}s{int(seed)}", meta={"kind": "random_directed", "seed": int(seed)})
