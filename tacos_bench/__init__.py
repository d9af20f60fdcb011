"""tacos-bench: synthesize and compare collective-communication algorithms.

Units everywhere: bandwidth GiB/s, latency µs, time µs.
"""

from .collective import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Collective
from .errors import TacosError
from .problem import Problem
from .schedule import Schedule
from .topology import Topology

__version__ = "0.1.0"

__all__ = ["ALL_GATHER", "ALL_REDUCE", "REDUCE_SCATTER", "Collective", "Problem", "Schedule",
           "TacosError", "Topology", "__version__"]

