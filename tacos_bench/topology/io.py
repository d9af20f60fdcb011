"""Topology files: TACOS-style edge lists, JSON and GraphML.

:func:`load_topology` and :func:`save_topology` pick the format from the file
extension:

``.json``
    ``{"name": "...", "num_npus": N, "links": [{"src": 0, "dst": 1,
    "bw_GiBps": 50.0, "lat_us": 0.5}, ...]}`` (``name`` and ``meta`` optional).
``.graphml``
    Read and written through networkx; every edge carries ``bw`` (GiB/s) and
    ``lat`` (µs) attributes. An undirected graph means both directions. Node
    ids that are the integers ``0..N-1`` are kept, other labels are renumbered
    in sorted order (the labels are kept in ``meta["node_labels"]``).
anything else (``.txt``, ``.edges``, ``.el``, ...)
    The TACOS-compatible edge list::

        # comments (whole-line or trailing) and blank lines are ignored
        4                 # first non-comment line: number of NPUs N
        0 1 50.0 0.5      # one directed link per line: src dst bw_GiBps lat_us
        1 0 50.0 0.5

    Commas are accepted as separators too. A ``# name: NAME`` comment sets the
    topology name (otherwise the file stem is used).

Every problem in a file raises :class:`~tacos_bench.errors.TopologyFileError`
naming the file, the line (1-based) and/or field: missing file, bad ``N``,
wrong field count, non-numeric value, id out of range, self-loop,
non-positive bandwidth, negative latency, duplicate link, and a disconnected
topology (naming the NPUs cut off).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ..errors import TopologyError, TopologyFileError
from .model import Topology

__all__ = ["EDGE_LIST", "JSON", "GRAPHML", "FORMATS", "MAX_NPUS", "load_topology", "save_topology"]

EDGE_LIST = "edges"
JSON = "json"
GRAPHML = "graphml"
FORMATS = (EDGE_LIST, JSON, GRAPHML)

_LINK_FIELDS = ("src", "dst", "bw_GiBps", "lat_us")

# A guard against a typo such as N = 1000000000000 allocating terabytes; far above any topology we simulate.
MAX_NPUS = 10_000_000
_NAME_RE = re.compile(r"^\s*#\s*name\s*:\s*(\S.*?)\s*$")


def _format_of(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise TopologyError(f"unknown topology file format {fmt!r}; valid: {', '.join(FORMATS)}")
        return fmt
    ext = path.suffix.lower()
    if ext == ".json":
        return JSON
    if ext == ".graphml":
        return GRAPHML
    return EDGE_LIST


def _read_text(path: Path) -> str:
    if not path.exists():
        raise TopologyFileError(path, "no such file")
    if path.is_dir():
        raise TopologyFileError(path, "is a directory, expected a topology file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TopologyFileError(path, f"not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise TopologyFileError(path, f"cannot read: {e.strerror or e}") from None


# ---------------------------------------------------------------------------------------------- validation
def _check_links(path, n: int, src, dst, bw, lat, where) -> None:
    """Vectorized checks of parsed links; ``where(i, field)`` returns (line, field) for link ``i``."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    bw = np.asarray(bw, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    for name, ids in (("src", src), ("dst", dst)):
        bad = np.flatnonzero((ids < 0) | (ids >= n))
        if bad.size:
            i = int(bad[0])
            line, field = where(i, name)
            raise TopologyFileError(path, f"NPU id {int(ids[i])} out of range 0..{n - 1} (N = {n})",
                                    line=line, field=field)
    bad = np.flatnonzero(src == dst)
    if bad.size:
        i = int(bad[0])
        line, field = where(i, "dst")
        raise TopologyFileError(path, f"self-loop {int(src[i])}->{int(dst[i])}", line=line, field=field)
    bad = np.flatnonzero(~(bw > 0) | ~np.isfinite(bw))
    if bad.size:
        i = int(bad[0])
        line, field = where(i, "bw_GiBps")
        raise TopologyFileError(path, f"bandwidth must be a finite number > 0 GiB/s, got {bw[i]:g}",
                                line=line, field=field)
    bad = np.flatnonzero(~(lat >= 0) | ~np.isfinite(lat))
    if bad.size:
        i = int(bad[0])
        line, field = where(i, "lat_us")
        raise TopologyFileError(path, f"latency must be a finite number >= 0 µs, got {lat[i]:g}",
                                line=line, field=field)
    key = src * n + dst
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if dup.size:
        first, second = int(order[dup[0]]), int(order[dup[0] + 1])
        line, field = where(second, None)
        line0, field0 = where(first, None)
        also = f" (first defined on line {line0})" if line0 is not None else f" (first defined as {field0})"
        raise TopologyFileError(path, f"duplicate link {int(src[second])}->{int(dst[second])}{also}",
                                line=line, field=field)


def _finish(path, topo: Topology, require_connected: bool) -> Topology:
    if require_connected:
        try:
            topo.check_strongly_connected()
        except TopologyError as e:
            raise TopologyFileError(path, str(e)) from None
    return topo


def _build(path, n, src, dst, bw, lat, name, meta, where) -> Topology:
    _check_links(path, n, src, dst, bw, lat, where)
    try:
        return Topology(n, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                        np.asarray(bw, dtype=np.float64), np.asarray(lat, dtype=np.float64), name=name, meta=meta)
    except TopologyError as e:  # defensive: _check_links covers Topology's checks
        raise TopologyFileError(path, str(e)) from None


# ---------------------------------------------------------------------------------------------- edge list
_SIGNED_INT = re.compile(r"[+-]?[0-9]+")


def _parse_int(tok: str) -> int:
    # int() alone would accept "1_000" and non-ASCII digits; ids must be plain decimal integers.
    if (tok.isascii() and tok.isdigit()) or _SIGNED_INT.fullmatch(tok):
        return int(tok)
    raise ValueError(tok)


def _parse_float(tok: str) -> float:
    v = float(tok)
    if v != v:  # NaN
        raise ValueError(tok)
    return v


def _load_edge_list(path: Path, require_connected: bool) -> Topology:
    text = _read_text(path)
    name = None
    n = None
    src, dst, bw, lat, lines = [], [], [], [], []
    # The hot loop parses ~200K lines/s; kept lean because it is pure Python (exact line numbers in errors).
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if "#" in raw:
            if name is None:
                m = _NAME_RE.match(raw)
                if m:
                    name = m.group(1)
                    continue
            raw = raw.split("#", 1)[0]
        toks = raw.replace(",", " ").split()
        if not toks:
            continue
        if n is None:
            if len(toks) != 1:
                raise TopologyFileError(
                    path, f"first non-comment line must be the NPU count N alone, got {len(toks)} fields "
                          f"{' '.join(toks)!r}", line=lineno, field="N")
            try:
                n = _parse_int(toks[0])
            except ValueError:
                raise TopologyFileError(path, f"NPU count N must be an integer, got {toks[0]!r}",
                                        line=lineno, field="N") from None
            if not 1 <= n <= MAX_NPUS:
                raise TopologyFileError(path, f"NPU count N must be in 1..{MAX_NPUS:,}, got {n}",
                                        line=lineno, field="N")
            continue
        if len(toks) != 4:
            raise TopologyFileError(path, f"expected 4 fields 'src dst bw_GiBps lat_us', got {len(toks)}: "
                                          f"{' '.join(toks)!r}", line=lineno)
        ts, td, tb, tl = toks
        fname = "src"
        try:
            s_ = _parse_int(ts)
            fname = "dst"
            d_ = _parse_int(td)
            fname = "bw_GiBps"
            b_ = _parse_float(tb)
            fname = "lat_us"
            l_ = _parse_float(tl)
        except ValueError:
            tok = toks[_LINK_FIELDS.index(fname)]
            kind = "an integer NPU id" if fname in ("src", "dst") else "a number"
            raise TopologyFileError(path, f"{fname} must be {kind}, got {tok!r}", line=lineno, field=fname) from None
        # Range checked here, not vectorized, because a huge id would overflow int64.
        if not (0 <= s_ < n and 0 <= d_ < n):
            fname, v = ("src", s_) if not 0 <= s_ < n else ("dst", d_)
            raise TopologyFileError(path, f"NPU id {v} out of range 0..{n - 1} (N = {n})", line=lineno, field=fname)
        src.append(s_)
        dst.append(d_)
        bw.append(b_)
        lat.append(l_)
        lines.append(lineno)
    if n is None:
        raise TopologyFileError(path, "no NPU count: the first non-comment line must be N", field="N")
    topo = _build(path, n, src, dst, bw, lat, name or path.stem, {"path": str(path)},
                  lambda i, f: (lines[i], f))
    return _finish(path, topo, require_connected)


def _save_edge_list(topo: Topology, path: Path) -> None:
    name = " ".join(topo.name.split()) or "custom"  # one line, or the comment would break the file
    out = [f"# name: {name}",
           f"# tacos-bench topology: {topo.num_npus} NPUs, {topo.num_links} directed links",
           "# first line: N; then one directed link per line: src dst bw_GiBps lat_us",
           str(topo.num_npus)]
    # repr() of a Python float is the shortest string that round-trips exactly.
    out += [f"{s} {d} {b!r} {l!r}" for s, d, b, l in topo.edges()]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------- JSON
def _load_json(path: Path, require_connected: bool) -> Topology:
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyFileError(path, f"invalid JSON: {e.msg} (column {e.colno})", line=e.lineno) from None
    if not isinstance(doc, dict):
        raise TopologyFileError(path, f"top level must be an object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - {"name", "num_npus", "links", "meta"})
    if unknown:
        raise TopologyFileError(path, f"unknown key(s) {', '.join(map(repr, unknown))}; "
                                      "valid: name, num_npus, links, meta", field=unknown[0])
    if "num_npus" not in doc:
        raise TopologyFileError(path, "missing the NPU count", field="num_npus")
    n = doc["num_npus"]
    if isinstance(n, bool) or not isinstance(n, int):
        raise TopologyFileError(path, f"must be an integer, got {n!r}", field="num_npus")
    if not 1 <= n <= MAX_NPUS:
        raise TopologyFileError(path, f"must be in 1..{MAX_NPUS:,}, got {n}", field="num_npus")
    links = doc.get("links", [])
    if not isinstance(links, list):
        raise TopologyFileError(path, f"must be a list of link objects, got {type(links).__name__}", field="links")
    cols = {f: [] for f in _LINK_FIELDS}
    for i, link in enumerate(links):
        if not isinstance(link, dict):
            raise TopologyFileError(path, f"link must be an object with keys {', '.join(_LINK_FIELDS)}, "
                                          f"got {link!r}", field=f"links[{i}]")
        extra = sorted(set(link) - set(_LINK_FIELDS))
        if extra:
            raise TopologyFileError(path, f"unknown key(s) {', '.join(map(repr, extra))}; valid: "
                                          f"{', '.join(_LINK_FIELDS)}", field=f"links[{i}].{extra[0]}")
        for f in _LINK_FIELDS:
            if f not in link:
                raise TopologyFileError(path, "missing", field=f"links[{i}].{f}")
            v = link[f]
            if f in ("src", "dst"):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TopologyFileError(path, f"must be an integer NPU id, got {v!r}", field=f"links[{i}].{f}")
                if not 0 <= v < n:
                    raise TopologyFileError(path, f"NPU id {v} out of range 0..{n - 1} (N = {n})",
                                            field=f"links[{i}].{f}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TopologyFileError(path, f"must be a number, got {v!r}", field=f"links[{i}].{f}")
            cols[f].append(v)
    name = doc.get("name") or path.stem
    if not isinstance(name, str):
        raise TopologyFileError(path, f"must be a string, got {name!r}", field="name")
    meta = doc.get("meta") or {}
    if not isinstance(meta, dict):
        raise TopologyFileError(path, f"must be an object, got {type(meta).__name__}", field="meta")
    meta = {**meta, "path": str(path)}
    topo = _build(path, n, cols["src"], cols["dst"], cols["bw_GiBps"], cols["lat_us"], name, meta,
                  lambda i, f: (None, f"links[{i}]" + (f".{f}" if f else "")))
    return _finish(path, topo, require_connected)


def _json_meta(meta: dict) -> dict:
    out = {}
    for k, v in meta.items():
        if k == "path":
            continue  # where the topology was loaded from is not part of the topology
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[str(k)] = v
    return out


def _save_json(topo: Topology, path: Path) -> None:
    doc = {"name": topo.name, "num_npus": topo.num_npus,
           "links": [{"src": s, "dst": d, "bw_GiBps": b, "lat_us": l} for s, d, b, l in topo.edges()]}
    meta = _json_meta(topo.meta)
    if meta:
        doc["meta"] = meta
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------- GraphML
def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _load_graphml(path: Path, require_connected: bool) -> Topology:
    import xml.etree.ElementTree as ET

    import networkx as nx

    _read_text(path)  # uniform missing-file / encoding errors
    try:
        g = nx.read_graphml(path)
    except ET.ParseError as e:
        line = e.position[0] if getattr(e, "position", None) else None
        raise TopologyFileError(path, f"invalid GraphML/XML: {_one_line(e)}", line=line) from None
    except Exception as e:  # noqa: BLE001 - the XML/GraphML stack raises many types (LookupError, KeyError, ...)
        raise TopologyFileError(path, f"invalid GraphML: {type(e).__name__}: {_one_line(e)}") from None
    if g.number_of_nodes() == 0:
        raise TopologyFileError(path, "graph has no nodes")
    nodes = list(g.nodes)
    # GraphML stores node ids as strings; ids that are all decimal integers keep their numeric meaning.
    if all(isinstance(v, str) and re.fullmatch(r"\d+", v) for v in nodes):
        g = nx.relabel_nodes(g, {v: int(v) for v in nodes})
    for u, v, data in g.edges(data=True):
        for attr in ("bw", "lat"):
            if attr not in data:
                raise TopologyFileError(path, f"edge {u}->{v} has no '{attr}' attribute "
                                              "(edges need bw in GiB/s and lat in µs)", field=attr)
            x = data[attr]
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                try:
                    x = float(x)
                except (TypeError, ValueError):
                    raise TopologyFileError(path, f"edge {u}->{v}: {attr} must be a number, got {data[attr]!r}",
                                            field=attr) from None
    name = g.graph.get("name") or path.stem
    try:
        topo = Topology.from_networkx(g, name=str(name))
    except TopologyError as e:
        raise TopologyFileError(path, str(e)) from None
    topo.meta["path"] = str(path)
    return _finish(path, topo, require_connected)


def _save_graphml(topo: Topology, path: Path) -> None:
    import networkx as nx

    nx.write_graphml(topo.to_networkx(), path)


# ---------------------------------------------------------------------------------------------- public API
def load_topology(path: str | os.PathLike, fmt: str | None = None, *, require_connected: bool = True) -> Topology:
    """Read a topology file; the format follows the extension (see the module docstring).

    Parameters
    ----------
    path : str or path-like
    fmt : {"edges", "json", "graphml"}, optional
        Override the extension-based choice.
    require_connected : bool
        Reject topologies in which some NPU cannot reach or be reached by all
        others (a collective needs every pair connected).

    Raises
    ------
    TopologyFileError
        Naming the file, the line and/or field of the first problem.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "pair.txt"
    >>> _ = p.write_text("2\\n0 1 50 0.5\\n1 0 25 1.0  # slower way back\\n")
    >>> t = load_topology(p)
    >>> t.num_npus, t.num_links, float(t.bw_GiBps[1])
    (2, 2, 25.0)
    """
    path = Path(path)
    kind = _format_of(path, fmt)
    if kind == JSON:
        return _load_json(path, require_connected)
    if kind == GRAPHML:
        return _load_graphml(path, require_connected)
    return _load_edge_list(path, require_connected)


def save_topology(topo: Topology, path: str | os.PathLike, fmt: str | None = None) -> Path:
    """Write ``topo`` to ``path`` in the format given by the extension (or ``fmt``); returns the path.

    Bandwidths and latencies are written with full precision, so
    ``load_topology(save_topology(t, p))`` reproduces ``t``'s arrays exactly.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from tacos_bench.topology.generators import ring
    >>> p = save_topology(ring(4), pathlib.Path(tempfile.mkdtemp()) / "ring4.json")
    >>> load_topology(p).num_links
    8
    """
    path = Path(path)
    kind = _format_of(path, fmt)
    try:
        if kind == JSON:
            _save_json(topo, path)
        elif kind == GRAPHML:
            _save_graphml(topo, path)
        else:
            _save_edge_list(topo, path)
    except OSError as e:
        raise TopologyFileError(path, f"cannot write: {e.strerror or e}") from None
    return path
