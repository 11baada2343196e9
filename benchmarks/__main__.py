"""``python -m benchmarks [NAME ...] [--repeats R] [--check] [--verbose]``: run
benchmarks, each announced on stderr (``[bench k/N] <name> | elapsed ... | ETA ...``)."""

from __future__ import annotations

import argparse
import datetime
import sys

from benchmarks import BENCHMARKS, format_table, machine_info, run_benchmark
from ncl_lightning.foundation.progress import Progress, quiet_lightning


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmarks (all by default) and print one table per benchmark.

    Returns:
        Exit status: 1 with ``--check`` when a goal was missed, else 0.
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the median is shown")
    parser.add_argument("--check", action="store_true", help="exit 1 if any goal is missed")
    parser.add_argument(
        "--verbose", action="store_true", help="keep Lightning's banners during training runs"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:  # before any work: 0 repeats would time nothing
        parser.error(f"--repeats must be an integer >= 1, got {args.repeats}")
    names = args.names or list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:  # before any work
        valid = ", ".join(BENCHMARKS)
        parser.error(f"unknown benchmark {', '.join(unknown)}; valid names: {valid}")

    print(f"# {datetime.date.today().isoformat()}  {machine_info()}")
    missed = False
    progress = Progress(len(names), "bench")
    with quiet_lightning(args.verbose):
        for name in names:
            with progress.unit(name):
                rows = run_benchmark(name, args.repeats)
            print(f"\n## {name}\n\n{format_table(rows)}", flush=True)
            missed |= any(row.met is False for row in rows)
    progress.finish()
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
