"""Baseline algorithms as real schedules on the given topology (``docs/baselines.md``).

- :mod:`~solvers.baselines.classic`: Ring, Direct, Recursive Halving-Doubling, Double Binary Tree;
- :mod:`~solvers.baselines.collectives`: Pairwise exchange, Bruck, binomial tree, pipelined chain (rooted
  collectives and All-to-All); :mod:`~solvers.baselines.direct`: the Direct plans of those collectives;
- :mod:`~solvers.baselines.trivial`: the BFS-tree store-and-forward backend (``bfs``).

They time their plans with the list scheduler of :mod:`solvers.plan`.
"""

from .classic import (DirectSolver, DoubleBinaryTreeSolver, RecursiveHalvingDoublingSolver, RingLayout, RingSolver,
                      double_binary_tree, nccl_btree_parents, ring_layout)
from .collectives import BinomialSolver, BruckSolver, ChainSolver, PairwiseSolver
from .trivial import BfsTreeSolver

# what ``solvers.baselines`` offered as a module, kept for scripts
__all__ = ["BfsTreeSolver", "BinomialSolver", "BruckSolver", "ChainSolver", "DirectSolver", "DoubleBinaryTreeSolver",
           "PairwiseSolver", "RecursiveHalvingDoublingSolver", "RingLayout", "RingSolver", "double_binary_tree",
           "nccl_btree_parents", "ring_layout"]
