"""The command line shared by the row-count benchmarks: --quick, --rows N, --repeat K."""

from __future__ import annotations

import argparse
from typing import Callable


def parse_size_args(quick_rows: int, full_rows: int, *, repeat: int = 3,
                    extra: Callable[[argparse.ArgumentParser], None] | None = None) -> tuple[argparse.Namespace, int]:
    """Parse the benchmark's options; return them with the row count to use.

    --rows wins; otherwise --quick picks the development size and no flag the
    size the issue's figure is defined at. `extra` adds a benchmark's own flags.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help=f"{quick_rows:,} rows instead of {full_rows:,}")
    parser.add_argument("--rows", type=int, help="row count (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=repeat, help="rounds per figure; the best counts")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    return args, args.rows or (quick_rows if args.quick else full_rows)
