"""What a replay reports, and the tolerances every replay applies."""

from __future__ import annotations

from dataclasses import dataclass

REL_TOL = 1e-9
TOL_LINK_FRACTION = 1e-3
# Above this many (NPU, chunk) pairs the All-Gather replay sorts instead of using dense arrays.

@dataclass(frozen=True)
class Verification:
    """Outcome of a replay."""

    valid: bool
    collective_time_us: float | None
    num_transfers: int
    link_busy_us: float = 0.0
    link_utilization: float | None = None
    message: str = ""
