"""Exact backends: the time-expanded network (TEN), the continuous-time model and their MILP/CP-SAT solvers."""
