"""The old home of the whole-chunk count bound, kept so that its imports still work: it lives in
:mod:`tacos_bench.bounds.load`."""

from .bounds.load import count_time_us

__all__ = ["count_time_us"]
