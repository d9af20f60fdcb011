"""Topologies: the model, generators, named topologies, transforms, file I/O and link tiers.

- :mod:`~tacos_bench.topology.model`: :class:`Topology` (NPUs, directed links, bandwidth GiB/s, latency µs;
  immutable, CSR arrays for the hot loops);
- :mod:`~tacos_bench.topology.generators`: rings, meshes, tori, switches, clusters, random graphs;
- :mod:`~tacos_bench.topology.named`: topologies by name (``mesh4x4``, ``hetero512``) and from a ``topo`` config;
- :mod:`~tacos_bench.topology.transforms`: failed links and NPUs, subsets, reversal;
- :mod:`~tacos_bench.topology.relabel`: isomorphic copies under a renaming of the NPUs (label-independence checks);
- :mod:`~tacos_bench.topology.io`: edge-list, JSON and GraphML files;
- :mod:`~tacos_bench.topology.tiers`: groups of faster links (servers, pods), shared by the greedy and the bounds.

The earlier module paths ``tacos_bench.topology.generators``, ``tacos_bench.topology.named``, ``tacos_bench.topology.transforms`` and
``tacos_bench.topology.io`` still work (they re-export these modules).

Examples
--------
>>> from tacos_bench.topology import Topology, named_topology
>>> t = named_topology("torus4x4")
>>> isinstance(t, Topology), t.num_npus, t.num_links
(True, 16, 64)
"""

from .model import (CUT_THROUGH, FABRIC, NETWORK_KINDS, POINT_TO_POINT, STORE_FORWARD, SWITCH_MODES, Switch, Topology,
                    fmt_ids, network_kind)
from .named import build_topology, named_topology

__all__ = ["CUT_THROUGH", "FABRIC", "NETWORK_KINDS", "POINT_TO_POINT", "STORE_FORWARD", "SWITCH_MODES", "Switch",
           "Topology", "build_topology", "fmt_ids", "named_topology", "network_kind"]
