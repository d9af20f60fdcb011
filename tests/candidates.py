"""What a portfolio backend's result says of its candidates (solvers.portfolio), for the tests."""


def tried(result) -> dict:
    """``{name: makespan_us}`` of every candidate that ran (the last phase's on a composed collective)."""
    return {t["name"]: t["makespan_us"] for t in result.candidates_tried}


def skipped(result) -> dict:
    """``{name: reason}`` of every candidate that did not run."""
    return {s["name"]: s["reason"] for s in result.candidates_skipped}
