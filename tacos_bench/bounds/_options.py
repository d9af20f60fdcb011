"""The options of the point-to-point bounds (:func:`tacos_bench.bounds.lower_bounds`), checked once."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError


class _Opts:
    def __init__(self, distance_exact_max_npus, refine_max_npus, cut_max_npus, distance_samples, cut_sample_pins,
                 drain=True):
        for name, v in (("distance_exact_max_npus", distance_exact_max_npus), ("refine_max_npus", refine_max_npus),
                        ("cut_max_npus", cut_max_npus), ("distance_samples", distance_samples),
                        ("cut_sample_pins", cut_sample_pins)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"bounds option {name} must be an integer >= 0, got {v!r}")
        self.distance_exact_max_npus = int(distance_exact_max_npus)
        self.refine_max_npus = int(refine_max_npus)
        self.cut_max_npus = int(cut_max_npus)
        self.distance_samples = int(distance_samples)
        self.cut_sample_pins = int(cut_sample_pins)
        self.drain = bool(drain)
