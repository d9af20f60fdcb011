"""Topologies by name and from a topo config: re-exported from :mod:`tacos_bench.topology.named`, where it lives (this path is kept for scripts)."""

from .topology.named import *  # noqa: F401,F403
from .topology.named import __all__  # noqa: F401
