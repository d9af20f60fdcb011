"""Command line: export a run directory written by ``run.py``.

::

    python -m tacos_bench.export msccl RESULT_DIR -o algo.xml [--out-of-place] [--proto Simple]
    python -m tacos_bench.export msccl RESULT_DIR --algo-dir DIR      # both variants, for MSCCL_ALGO_DIR
    python -m tacos_bench.export json RESULT_DIR -o schedule.json
    python -m tacos_bench.export chakra RESULT_DIR -o traces/algo     # traces/algo.<rank>.et
    python -m tacos_bench.export astra-sim RESULT_DIR -o DIR          # DIR/run.sh PATH/TO/AstraSim_...
    python -m tacos_bench.export check algo.xml [--fifo-capacity 1] [--root R]   # the independent checker

Bad input exits with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import TacosError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tacos_bench.export",
                                description="Export a verified tacos-bench schedule (a run.py output directory).")
    sub = p.add_subparsers(dest="format", required=True)

    m = sub.add_parser("msccl", help="MSCCL-IR XML for the MSCCL runtime")
    m.add_argument("result_dir", type=Path)
    where = m.add_mutually_exclusive_group()
    where.add_argument("-o", "--output", type=Path,
                       help="XML file to write (default: RESULT_DIR/<name>.xml); '-' prints it")
    where.add_argument("--algo-dir", type=Path,
                       help="write both the in-place and the out-of-place XML into this directory")
    m.add_argument("--out-of-place", action="store_true", help="write the out-of-place variant (default in-place)")
    m.add_argument("--proto", default="Simple", choices=("Simple", "LL", "LL128"))
    m.add_argument("--name", default=None, help="algorithm name (default derived from the run)")
    m.add_argument("--max-steps-per-tb", type=int, default=64,
                   help="steps per threadblock before a link is split over another channel (runtime max 64)")
    m.add_argument("--min-bytes", type=int, default=0, help="smallest message the runtime may use it for")
    m.add_argument("--max-bytes", type=int, default=0, help="largest message (0 = no limit)")

    j = sub.add_parser("json", help="versioned JSON of the schedule and problem")
    j.add_argument("result_dir", type=Path)
    j.add_argument("-o", "--output", type=Path, help="file to write (default RESULT_DIR/schedule.json); '-' prints")

    c = sub.add_parser("chakra", help="Chakra ET files (one per NPU) for ASTRA-sim's custom collectives")
    c.add_argument("result_dir", type=Path)
    c.add_argument("-o", "--output", type=Path,
                   help="file prefix: writes PREFIX.<rank>.et (default RESULT_DIR/chakra/algo)")
    c.add_argument("--reduce-time-us", type=int, default=0, help="duration of each reduction node (µs)")

    a = sub.add_parser("astra-sim", help="a directory that runs in ASTRA-sim as is (DIR/run.sh ASTRA_SIM_BINARY)")
    a.add_argument("result_dir", type=Path)
    a.add_argument("-o", "--output", type=Path, help="bundle directory (default RESULT_DIR/astra-sim)")
    a.add_argument("--network", default="auto", choices=("auto", "fully_connected", "ring", "switch"),
                   help="ASTRA-sim network: auto = Ring when exact, else FullyConnected; Switch for a fabric of "
                        "one store_forward switch")
    a.add_argument("--reduce-time-us", type=int, default=0, help="duration of each reduction node (µs)")
    a.add_argument("--pin", default="auto", choices=("auto", "on", "off"),
                   help="hold every send to its start in the schedule (auto: on for Switch, whose unpinned replay "
                        "sends in another order; off for Ring/FullyConnected, which replay exactly unpinned)")

    k = sub.add_parser("check", help="validate and simulate an MSCCL-IR XML file (tacos_bench.export.msccl_check)")
    k.add_argument("xml", type=Path)
    k.add_argument("--fifo-capacity", type=int, default=1,
                   help="messages a send may leave unread per channel (1: the strictest)")
    k.add_argument("--root", type=int, default=None,
                   help="root of a broadcast/reduce/gather/scatter XML (default: inferred from its traffic)")
    return p


def _check(args) -> int:
    from .msccl_check import MscclCheckError, check_msccl_xml

    try:
        report = check_msccl_xml(args.xml.read_text(), fifo_capacity=args.fifo_capacity, root=args.root)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (MscclCheckError, ValueError) as e:
        print(f"error: {args.xml}: {e}", file=sys.stderr)
        return 1
    root = f", root {report.root}" if report.root is not None else ""
    print(f"{args.xml}: ok ({', '.join(report.variants)}; {report.num_gpus} GPUs{root}, {report.num_tbs} "
          f"threadblocks, {report.num_steps} steps, {report.messages} messages)")
    return 0


def _write(text: str, path: Path | None) -> str:
    if path is not None and str(path) == "-":
        sys.stdout.write(text)
        return "<stdout>"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.format == "check":
        return _check(args)
    from . import export_chakra, export_json, export_msccl, export_msccl_dir, load_run
    from .common import safe_name
    from .msccl import _default_name

    try:
        problem, schedule, record = load_run(args.result_dir)
        if args.format == "msccl":
            opts = dict(proto=args.proto, max_steps_per_tb=args.max_steps_per_tb,
                        min_bytes=args.min_bytes, max_bytes=args.max_bytes)
            if args.algo_dir is not None:
                paths = export_msccl_dir(problem, schedule, args.algo_dir, name=args.name, **opts)
                print("\n".join(map(str, paths)))
                return 0
            inplace = not args.out_of_place
            name = safe_name(args.name) if args.name else _default_name(problem, inplace)
            xml = export_msccl(problem, schedule, name=name, inplace=inplace, **opts)
            out = args.output if args.output is not None else args.result_dir / f"{name}.xml"
            where = _write(xml, out)
        elif args.format == "json":
            out = args.output if args.output is not None else args.result_dir / "schedule.json"
            where = _write(export_json(problem, schedule, record=record), out)
        elif args.format == "astra-sim":
            from .astra_sim import export_astra_sim

            out = args.output if args.output is not None else args.result_dir / "astra-sim"
            where = str(export_astra_sim(problem, schedule, out, network=args.network,
                                         reduce_time_us=args.reduce_time_us, record=record, pin=args.pin))
        else:
            prefix = args.output if args.output is not None else args.result_dir / "chakra" / "algo"
            paths = export_chakra(problem, schedule, prefix, reduce_time_us=args.reduce_time_us)
            where = f"{paths[0].parent}/{Path(prefix).name}.<0..{len(paths) - 1}>.et"
    except TacosError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if where != "<stdout>":
        print(where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
