"""The old home of the switched fabric's bounds, kept so that its imports still work: they live in
:mod:`tacos_bench.bounds.fabric` (and :func:`tacos_bench.bounds.lower_bounds` picks them on a fabric)."""

from .bounds.fabric import fabric_lower_bounds, lead_lag_us, occupancy_us

__all__ = ["fabric_lower_bounds", "lead_lag_us", "occupancy_us"]
