"""Re-check a schedule from the command line: ``python -m tacos_bench.verify RUN_DIR [--schedule CSV]``.

Rebuilds the run's problem from its directory (``result.json`` and the topology file it names, as the exporters
do) and replays ``schedule.csv`` -- or any schedule CSV given with ``--schedule``, e.g. one edited by hand or
written by another tool -- through the independent verifier. Prints the verified collective time (µs) and exits
0, or prints one line naming the offending row by its line in the CSV file (the header is line 1) and exits 2.
A run with a fault mid-collective is replayed with its failed links at its fault time (failed NPUs cannot be
rebuilt from the files and are refused).

Examples
--------
>>> from tacos_bench.verify.__main__ import main
>>> main(["/no/such/run"])          # the one-line error goes to stderr
2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import TacosError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tacos_bench.verify",
                                description="replay a run's schedule (or another CSV for its problem) through the "
                                            "verifier")
    p.add_argument("result_dir", type=Path, help="a run directory (result.json, schedule.csv, topology file)")
    p.add_argument("--schedule", type=Path, default=None,
                   help="a schedule CSV to check instead of the run's schedule.csv (same columns)")
    return p


def _fault(record: dict):
    """The record's fault (failed and slowed links), or None; a fault with failed NPUs is refused."""
    from ..faults import Fault

    if record.get("fault_at_us") is None:
        return None
    if record.get("fault_npus"):
        raise TacosError("the run had failed NPUs (fault.npus), which its files do not let the verifier rebuild")
    links = record.get("fault_failed_links") or []
    slow = record.get("fault_slow_links") or []
    if isinstance(slow, str):
        import json

        slow = json.loads(slow)
    if not links and not slow:
        raise TacosError("the run had a fault mid-collective whose failed links its record does not list; "
                         "re-check it with the library (tacos_bench.verify.verify(problem, schedule, fault))")
    return Fault(float(record["fault_at_us"]), tuple(tuple(map(int, x)) for x in links),
                 slow=tuple((int(u), int(v), float(f)) for u, v, f in slow))


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from ..rundir import SCHEDULE_FILE, load_run_problem
    from ..schedule import Schedule
    from . import verify

    try:
        problem, record = load_run_problem(args.result_dir)
        fault = _fault(record)
    except TacosError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = args.schedule if args.schedule is not None else \
        args.result_dir / str(record.get("schedule_file") or SCHEDULE_FILE)
    try:
        ver = verify(problem, Schedule.from_csv(path), fault)
    except TacosError as e:
        msg = str(e)
        print(f"error: {msg if msg.startswith(str(path)) else f'{path}: {msg}'}", file=sys.stderr)
        return 2
    if not ver.valid:
        print(f"error: {path}: {ver.message}", file=sys.stderr)
        return 2
    print(f"valid: {path}, collective_time_us={ver.collective_time_us!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
