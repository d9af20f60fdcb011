"""A chunk priority of your own for the TACOS matcher, loaded by import path.

    PYTHONPATH=examples python run.py solver=greedy topo=torus8x8 collective.chunks_per_npu=4 \
        solver.chunk_order=my_priority:far_owner_first

The matcher calls ``score(chunk, receiver, sender, holders, owner, now_us)`` inside its compiled kernel for every
(chunk, free in-link) candidate and matches the smallest scores first (ties at random): write it in numba's
subset of Python (plain arithmetic; ids and counts are int64, the time float64). See
solvers/greedy/priority.py for the details.
"""


def far_owner_first(chunk, receiver, sender, holders, owner, now_us):
    """Chunks that started far from the receiver first (by NPU id distance on a ring of ids), then the rarest."""
    n = 64
    d = abs(owner - receiver)
    d = min(d, n - d)
    return -float(d) * 1000.0 + float(holders)


def rarest_then_lowest_id(chunk, receiver, sender, holders, owner, now_us):
    """The fewest holders first, then the lowest chunk id (deterministic among equally rare chunks)."""
    return float(holders) * 1e9 + float(chunk)
