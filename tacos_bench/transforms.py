"""Topology transforms (failed links and NPUs, subsets, reversal): re-exported from :mod:`tacos_bench.topology.transforms`, where it lives (this path is kept for scripts)."""

from .topology.transforms import *  # noqa: F401,F403
from .topology.transforms import __all__  # noqa: F401
