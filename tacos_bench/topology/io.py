"""Topology files: TACOS-style edge lists, JSON and GraphML.

:func:`load_topology` and :func:`save_topology` pick the format from the file
extension:

``.json``
    ``{"name": "...", "num_npus": N, "links": [{"src": 0, "dst": 1,
    "bw_GiBps": 50.0, "lat_us": 0.5}, ...]}`` (``name`` and ``meta`` optional). A switched fabric adds
    ``"num_switches": S`` and ``"switches": [{"id": 8, "mode": "cut_through", "multicast": true,
    "reduce": false}, ...]`` (a switch not listed gets the defaults: ``cut_through``, no multicast, no reduce).
``.graphml``
    Read and written through networkx; every edge carries ``bw`` (GiB/s) and
    ``lat`` (µs) attributes. An undirected graph means both directions. Node
    ids that are the integers ``0..N-1`` are kept, other labels are renumbered
    in sorted order (the labels are kept in ``meta["node_labels"]``). A switch is a node with
    ``kind="switch"`` and optional ``mode``, ``multicast``, ``reduce`` attributes; switches are numbered after
    the NPUs (integer ids ``0..N+S-1`` whose switches are ``N..N+S-1`` are kept).
anything else (``.txt``, ``.edges``, ``.el``, ...)
    The TACOS-compatible edge list::

        # comments (whole-line or trailing) and blank lines are ignored
        4                 # first non-comment line: number of NPUs N (or "N S": NPUs and switches)
        0 1 50.0 0.5      # one directed link per line: src dst bw_GiBps lat_us
        1 0 50.0 0.5

    Commas are accepted as separators too. A ``# name: NAME`` comment sets the
    topology name (otherwise the file stem is used). With a first line ``N S`` the nodes ``N .. N+S-1`` are
    switches: link lines may name them, and a line ``switch ID [cut_through|store_forward] [multicast]
    [reduce]`` sets one switch's behaviour (default ``cut_through``, no multicast, no reduce;
    docs/fabrics.md).

Every problem in a file raises :class:`~tacos_bench.errors.TopologyFileError`
naming the file, the line (1-based) and/or field: missing file, bad ``N`` or ``S``,
wrong field count, non-numeric value, id out of range, self-loop,
non-positive bandwidth, negative latency, duplicate link, a bad ``switch`` line (an NPU's id, an id out of
range, an unknown word, a second line for the same switch), a switch without links, and a disconnected
topology (naming the NPUs cut off).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ..errors import InputFileError, TopologyError, TopologyFileError
from ..inputs import read_input_text
from .model import CUT_THROUGH, SWITCH_MODES, Switch, Topology

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
    """The file's text: a regular file only (never ``/dev/zero`` or a FIFO, which would hang), capped in size,
    UTF-8 with an optional byte-order mark."""
    try:
        return read_input_text(path, "topology file")
    except InputFileError as e:
        raise TopologyFileError(path, e.reason) from None

# ---------------------------------------------------------------------------------------------- validation
def _range_msg(v: int, n: int, s: int) -> str:
    """The out-of-range message of a link endpoint: NPU ids without switches (as always), node ids with."""
    if s:
        return f"node id {v} out of range 0..{n + s - 1} (N = {n} NPUs + S = {s} switches)"
    return f"NPU id {v} out of range 0..{n - 1} (N = {n})"


def _check_links(path, n: int, src, dst, bw, lat, where, s: int = 0) -> None:
    """Vectorized checks of parsed links; ``where(i, field)`` returns (line, field) for link ``i``.

    ``n`` NPUs and ``s`` switches: endpoints range over ``0 .. n+s-1``.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    bw = np.asarray(bw, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    nodes = n + s
    for name, ids in (("src", src), ("dst", dst)):
        bad = np.flatnonzero((ids < 0) | (ids >= nodes))
        if bad.size:
            i = int(bad[0])
            line, field = where(i, name)
            raise TopologyFileError(path, _range_msg(int(ids[i]), n, s), line=line, field=field)
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
    key = src * nodes + dst
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


def _build(path, n, src, dst, bw, lat, name, meta, where, switches=()) -> Topology:
    _check_links(path, n, src, dst, bw, lat, where, len(switches))
    try:
        return Topology(n, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                        np.asarray(bw, dtype=np.float64), np.asarray(lat, dtype=np.float64), name=name, meta=meta,
                        switches=tuple(switches))
    except TopologyError as e:  # a switch without links; otherwise defensive (_check_links covers the rest)
        raise TopologyFileError(path, str(e)) from None


_SWITCH_WORDS = SWITCH_MODES + ("multicast", "reduce")
_SWITCH_SYNTAX = "'switch ID [cut_through|store_forward] [multicast] [reduce]'"


def _switch_from_words(words, problem) -> Switch:
    """A :class:`Switch` from the words after ``switch ID``; ``problem(message)`` raises the located error."""
    mode, flags = None, set()
    for w in words:
        if w in SWITCH_MODES:
            if mode is not None:
                problem(f"two modes {mode!r} and {w!r} for one switch; give one of {', '.join(SWITCH_MODES)}")
            mode = w
        elif w in ("multicast", "reduce"):
            if w in flags:
                problem(f"{w!r} given twice")
            flags.add(w)
        else:
            problem(f"unknown switch word {w!r}; valid: {', '.join(_SWITCH_WORDS)}")
    return Switch(mode or CUT_THROUGH, multicast="multicast" in flags, reduce="reduce" in flags)


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
    s = 0                      # switches: nodes n .. n+s-1
    switch_lines: dict[int, tuple[int, Switch]] = {}   # switch id -> (line, spec)
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
            if len(toks) > 2:
                raise TopologyFileError(
                    path, f"first non-comment line must be the NPU count N alone (or 'N S': NPUs and switches), "
                          f"got {len(toks)} fields {' '.join(toks)!r}", line=lineno, field="N")
            try:
                n = _parse_int(toks[0])
            except ValueError:
                raise TopologyFileError(path, f"NPU count N must be an integer, got {toks[0]!r}",
                                        line=lineno, field="N") from None
            if not 1 <= n <= MAX_NPUS:
                raise TopologyFileError(path, f"NPU count N must be in 1..{MAX_NPUS:,}, got {n}",
                                        line=lineno, field="N")
            if len(toks) == 2:
                try:
                    s = _parse_int(toks[1])
                except ValueError:
                    raise TopologyFileError(path, f"switch count S must be an integer, got {toks[1]!r}",
                                            line=lineno, field="S") from None
                if not 0 <= s <= MAX_NPUS:
                    raise TopologyFileError(path, f"switch count S must be in 0..{MAX_NPUS:,}, got {s}",
                                            line=lineno, field="S")
            continue
        if toks[0] == "switch":
            _parse_switch_line(path, toks, lineno, n, s, switch_lines)
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
        nodes = n + s
        if not (0 <= s_ < nodes and 0 <= d_ < nodes):
            fname, v = ("src", s_) if not 0 <= s_ < nodes else ("dst", d_)
            raise TopologyFileError(path, _range_msg(v, n, s), line=lineno, field=fname)
        src.append(s_)
        dst.append(d_)
        bw.append(b_)
        lat.append(l_)
        lines.append(lineno)
    if n is None:
        raise TopologyFileError(path, "no NPU count: the first non-comment line must be N", field="N")
    switches = [switch_lines[i][1] if i in switch_lines else Switch() for i in range(n, n + s)]
    topo = _build(path, n, src, dst, bw, lat, name or path.stem, {"path": str(path)},
                  lambda i, f: (lines[i], f), switches)
    return _finish(path, topo, require_connected)


def _parse_switch_line(path, toks, lineno: int, n: int, s: int, seen: dict) -> None:
    """``switch ID [cut_through|store_forward] [multicast] [reduce]``: checked and stored in ``seen``."""
    def problem(msg, field=None):
        raise TopologyFileError(path, msg, line=lineno, field=field)

    if len(toks) < 2:
        problem(f"a switch line needs the switch's id: {_SWITCH_SYNTAX}")
    try:
        sid = _parse_int(toks[1])
    except ValueError:
        problem(f"switch id must be an integer, got {toks[1]!r}", "switch")
    if s == 0:
        problem(f"switch line for id {sid}, but the first line declares no switches (write 'N S' there: "
                f"N NPUs, S switches)", "switch")
    if 0 <= sid < n:
        problem(f"switch line for NPU id {sid}: switches are the ids {n}..{n + s - 1} after the N = {n} NPUs",
                "switch")
    if not n <= sid < n + s:
        problem(f"switch id {sid} out of range {n}..{n + s - 1} (N = {n} NPUs + S = {s} switches)", "switch")
    spec = _switch_from_words(toks[2:], problem)
    if sid in seen:
        problem(f"duplicate switch line for switch {sid} (first on line {seen[sid][0]})", "switch")
    seen[sid] = (lineno, spec)


def _save_edge_list(topo: Topology, path: Path) -> None:
    name = " ".join(topo.name.split()) or "custom"  # one line, or the comment would break the file
    if topo.is_fabric:
        out = [f"# name: {name}",
               (f"# tacos-bench topology: {topo.num_npus} NPUs, {topo.num_switches} switches (ids {topo.num_npus}.."
                f"{topo.num_nodes - 1}), {topo.num_links} directed links"),
               "# first line: N S; then one line per switch: switch ID MODE [multicast] [reduce];",
               "# then one directed link per line: src dst bw_GiBps lat_us",
               f"{topo.num_npus} {topo.num_switches}"]
        out += [f"switch {topo.num_npus + i} {sw.spec()}" for i, sw in enumerate(topo.switches)]
    else:
        out = [f"# name: {name}",
               f"# tacos-bench topology: {topo.num_npus} NPUs, {topo.num_links} directed links",
               "# first line: N; then one directed link per line: src dst bw_GiBps lat_us",
               str(topo.num_npus)]
    # repr() of a Python float is the shortest string that round-trips exactly.
    out += [f"{s} {d} {b!r} {l!r}" for s, d, b, l in topo.edges()]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------- JSON
class _DuplicateKey(Exception):
    """A JSON object names one key twice (json.loads would keep the last silently)."""


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return out


def _load_json(path: Path, require_connected: bool) -> Topology:
    text = _read_text(path)
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise TopologyFileError(path, f"invalid JSON: {e.msg} (column {e.colno})", line=e.lineno) from None
    except _DuplicateKey as e:
        raise TopologyFileError(path, f"duplicate key {e.args[0]!r} in one JSON object (which one is meant?)",
                                field=e.args[0]) from None
    except RecursionError:
        # the decoder recurses once per bracket; a topology never nests more than four deep
        raise TopologyFileError(path, "invalid JSON: brackets nested too deeply (thousands of levels)") from None
    if not isinstance(doc, dict):
        raise TopologyFileError(path, f"top level must be an object, got {type(doc).__name__}")
    keys = ("name", "num_npus", "num_switches", "switches", "links", "meta")
    unknown = sorted(set(doc) - set(keys))
    if unknown:
        raise TopologyFileError(path, f"unknown key(s) {', '.join(map(repr, unknown))}; "
                                      f"valid: {', '.join(keys)}", field=unknown[0])
    if "num_npus" not in doc:
        raise TopologyFileError(path, "missing the NPU count", field="num_npus")
    n = doc["num_npus"]
    if isinstance(n, bool) or not isinstance(n, int):
        raise TopologyFileError(path, f"must be an integer, got {n!r}", field="num_npus")
    if not 1 <= n <= MAX_NPUS:
        raise TopologyFileError(path, f"must be in 1..{MAX_NPUS:,}, got {n}", field="num_npus")
    ns = doc.get("num_switches", 0)
    if isinstance(ns, bool) or not isinstance(ns, int):
        raise TopologyFileError(path, f"must be an integer, got {ns!r}", field="num_switches")
    if not 0 <= ns <= MAX_NPUS:
        raise TopologyFileError(path, f"must be in 0..{MAX_NPUS:,}, got {ns}", field="num_switches")
    switches = _json_switches(path, doc.get("switches", []), n, ns)
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
                if not 0 <= v < n + ns:
                    raise TopologyFileError(path, _range_msg(v, n, ns), field=f"links[{i}].{f}")
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
                  lambda i, f: (None, f"links[{i}]" + (f".{f}" if f else "")), switches)
    return _finish(path, topo, require_connected)


_JSON_SWITCH_KEYS = ("id", "mode", "multicast", "reduce")


def _json_switches(path, items, n: int, ns: int) -> list[Switch]:
    """The ``switches`` list of a JSON file: one object per switch that is not all defaults."""
    if not isinstance(items, list):
        raise TopologyFileError(path, f"must be a list of switch objects, got {type(items).__name__}",
                                field="switches")
    if items and ns == 0:
        raise TopologyFileError(path, f"{len(items)} switch(es) listed but num_switches is 0 or missing; "
                                      "switches are the ids num_npus .. num_npus+num_switches-1",
                                field="num_switches")
    specs: dict[int, tuple[int, Switch]] = {}
    for i, item in enumerate(items):
        where = f"switches[{i}]"
        if not isinstance(item, dict):
            raise TopologyFileError(path, f"switch must be an object with keys {', '.join(_JSON_SWITCH_KEYS)}, "
                                          f"got {item!r}", field=where)
        extra = sorted(set(item) - set(_JSON_SWITCH_KEYS))
        if extra:
            raise TopologyFileError(path, f"unknown key(s) {', '.join(map(repr, extra))}; valid: "
                                          f"{', '.join(_JSON_SWITCH_KEYS)}", field=f"{where}.{extra[0]}")
        if "id" not in item:
            raise TopologyFileError(path, "missing", field=f"{where}.id")
        sid = item["id"]
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise TopologyFileError(path, f"must be an integer switch id, got {sid!r}", field=f"{where}.id")
        if 0 <= sid < n:
            raise TopologyFileError(path, f"NPU id {sid} listed as a switch: switches are the ids {n}..{n + ns - 1} "
                                          f"after the num_npus = {n} NPUs", field=f"{where}.id")
        if not n <= sid < n + ns:
            raise TopologyFileError(path, f"switch id {sid} out of range {n}..{n + ns - 1} (N = {n} NPUs + "
                                          f"S = {ns} switches)", field=f"{where}.id")
        mode = item.get("mode", CUT_THROUGH)
        if mode not in SWITCH_MODES:
            raise TopologyFileError(path, f"unknown switch mode {mode!r}; valid: {', '.join(SWITCH_MODES)}",
                                    field=f"{where}.mode")
        for flag in ("multicast", "reduce"):
            if not isinstance(item.get(flag, False), bool):
                raise TopologyFileError(path, f"must be true or false, got {item[flag]!r}", field=f"{where}.{flag}")
        if sid in specs:
            raise TopologyFileError(path, f"duplicate entry for switch {sid} (first as switches[{specs[sid][0]}])",
                                    field=f"{where}.id")
        specs[sid] = (i, Switch(mode, multicast=item.get("multicast", False), reduce=item.get("reduce", False)))
    return [specs[j][1] if j in specs else Switch() for j in range(n, n + ns)]


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
    doc = {"name": topo.name, "num_npus": topo.num_npus}
    if topo.is_fabric:
        doc["num_switches"] = topo.num_switches
        doc["switches"] = [{"id": topo.num_npus + i, "mode": sw.mode, "multicast": sw.multicast, "reduce": sw.reduce}
                           for i, sw in enumerate(topo.switches)]
    doc["links"] = [{"src": s, "dst": d, "bw_GiBps": b, "lat_us": l} for s, d, b, l in topo.edges()]
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
    switch_nodes = _graphml_switches(path, g)
    try:
        if switch_nodes:
            topo = _fabric_from_graph(g, switch_nodes, str(name))
        else:
            topo = Topology.from_networkx(g, name=str(name))
    except TopologyError as e:
        raise TopologyFileError(path, str(e)) from None
    topo.meta["path"] = str(path)
    return _finish(path, topo, require_connected)


_GRAPHML_SWITCH_ATTRS = ("mode", "multicast", "reduce")


def _graphml_bool(path, node, attr, v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
        return v.strip().lower() in ("true", "1")
    if isinstance(v, (int, np.integer)) and v in (0, 1):
        return bool(v)
    raise TopologyFileError(path, f"node {node}: {attr} must be true or false, got {v!r}", field=attr)


def _graphml_switches(path, g) -> dict:
    """``{node: Switch}`` for the nodes with ``kind="switch"``; a bad attribute is an error naming the node."""
    out = {}
    for v, data in g.nodes(data=True):
        kind = data.get("kind")
        if kind is None or kind == "npu":
            stray = [a for a in _GRAPHML_SWITCH_ATTRS if a in data]
            if stray:
                raise TopologyFileError(path, f"node {v} has switch attribute(s) {', '.join(stray)} but no "
                                              "kind=\"switch\"", field=stray[0])
            continue
        if kind != "switch":
            raise TopologyFileError(path, f"node {v}: unknown kind {kind!r}; valid: switch, npu (or none)",
                                    field="kind")
        mode = data.get("mode", CUT_THROUGH)
        if mode not in SWITCH_MODES:
            raise TopologyFileError(path, f"node {v}: unknown switch mode {mode!r}; valid: {', '.join(SWITCH_MODES)}",
                                    field="mode")
        out[v] = Switch(mode, multicast=_graphml_bool(path, v, "multicast", data.get("multicast", False)),
                        reduce=_graphml_bool(path, v, "reduce", data.get("reduce", False)))
    return out


def _sorted_labels(nodes) -> list:
    try:
        return sorted(nodes)
    except TypeError:
        return sorted(nodes, key=str)


def _fabric_from_graph(g, switch_nodes: dict, name: str) -> Topology:
    """A switched fabric from a networkx graph: NPUs first (sorted), then the switches (sorted)."""
    npus = _sorted_labels([v for v in g.nodes if v not in switch_nodes])
    sws = _sorted_labels(list(switch_nodes))
    if not npus:
        raise TopologyError("graph has switches but no NPU")
    order = npus + sws
    index = {v: i for i, v in enumerate(order)}
    edges = []
    for u, v, data in g.edges(data=True):
        b, l = float(data["bw"]), float(data["lat"])
        edges.append((index[u], index[v], b, l))
        if not g.is_directed():
            edges.append((index[v], index[u], b, l))
    meta = {}
    if order != list(range(len(order))):
        meta["node_labels"] = [str(v) for v in order]
    return Topology.from_edges(len(npus), edges, name=name, switches=[switch_nodes[v] for v in sws], **meta)


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
