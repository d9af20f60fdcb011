"""Topology generators (rings, meshes, tori, switches, clusters, random graphs): re-exported from :mod:`tacos_bench.topology.generators`, where it lives (this path is kept for scripts)."""

from .topology.generators import *  # noqa: F401,F403
from .topology.generators import __all__  # noqa: F401
