"""Topology files (edge list, JSON, GraphML): re-exported from :mod:`tacos_bench.topology.io`, where it lives (this path is kept for scripts)."""

from .topology.io import *  # noqa: F401,F403
from .topology.io import __all__  # noqa: F401
