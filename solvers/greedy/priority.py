"""A user's chunk priority for the TACOS matcher, by import path (``solver.chunk_order=mypkg.mymod:score``).

At every event the matcher lists, for each destination with idle in-links, the chunks a free in-link's sender
holds and the destination still needs, and matches them in *chunk order*: the built-in orders are ``random``
(TACOS), ``rarest``, ``farthest`` and ``oldest``. A user's order is a function

``score(chunk, receiver, sender, holders, owner, now_us) -> float``

(``int64`` ids and count, ``float64`` time; :data:`SCORE_SIGNATURE`), called inside the compiled kernel where the
built-in orders are, once per (chunk, free in-link) candidate: a chunk's key is the smallest score over the
senders that can carry it, smaller keys are matched first, ties at random (seeded), NaN last. ``holders`` is the
number of NPUs that hold or are receiving the chunk, ``owner`` the NPU it started at, ``now_us`` the event time.
The function is compiled as a numba ``cfunc`` of that signature (a plain Python function in numba's subset, an
``@njit`` function, or a ``@cfunc(SCORE_SIGNATURE)`` object); the kernel takes it as a first-class function, so one
compiled kernel (cached on disk) serves every user's score at full speed.

It runs on the TACOS matcher's classic kernel, with any of its options (``link_tiebreak``, ``matching``,
``window``, ``duplicates``); not with the topology-aware rules (the tiered kernel) nor on unicast collectives
(which route chunks).

Examples
--------
>>> from tacos_bench import Collective, Problem
>>> from tacos_bench.topology.generators import torus2d
>>> from solvers import get_solver
>>> p = Problem(torus2d(4, 4), Collective("all_gather", 2, 16))
>>> r = get_solver("greedy").solve(p, chunk_order="solvers.greedy.priority:rarest_score")
>>> r.status, len(r.schedule) == 16 * 2 * 15
('feasible', True)
"""

from __future__ import annotations

import functools

from tacos_bench.errors import SolverError

PLUGIN_SEP = ":"


def is_plugin(order: str) -> bool:
    """Whether a ``chunk_order`` value names a user's function (``module.path:name``)."""
    return PLUGIN_SEP in str(order)


def signature():
    from numba import types

    return types.float64(types.int64, types.int64, types.int64, types.int64, types.int64, types.float64)


SCORE_SIGNATURE = "float64(int64, int64, int64, int64, int64, float64)"


def rarest_score(chunk, receiver, sender, holders, owner, now_us):
    """The ``rarest`` order as a user's score: the fewest holders first (the example, and a test of the path)."""
    return float(holders)


@functools.lru_cache(maxsize=None)
def load_score(path: str):
    """The compiled ``cfunc`` of the function at ``path`` (once per process).

    Raises
    ------
    SolverError
        When it cannot be imported, is not a function, or numba cannot compile it with the signature.
    """
    from numba import cfunc
    from numba.core.ccallback import CFunc
    from numba.core.dispatcher import Dispatcher

    from ..portfolio import import_function

    fn = import_function(path, "chunk_order")
    if isinstance(fn, CFunc):
        return fn
    py = fn.py_func if isinstance(fn, Dispatcher) else fn
    try:
        return cfunc(signature(), cache=False)(py)
    except Exception as e:  # noqa: BLE001 - numba's typing errors are long; the first line names the problem
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SolverError(f"chunk_order {path!r}: numba cannot compile it as score{SCORE_SIGNATURE}: {first}") \
            from None
