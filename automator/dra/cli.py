"""`gpu-automator dra-check --cluster FILE [--usage FILE] [--output text|json]` (docs/dra.md).

Exit status 0 whether or not there are findings; 2 when an input cannot be read (the message names the
file and the place). Fields that do not parse inside the objects are `unparsable` findings, not errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from steward_common.printable import printable

COMMAND = "dra-check"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `dra-check` on the `gpu-automator` subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND, help="check DRA capacity: claims against devices, and against measured GPU memory"
    )
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="FILE",
        help="List or multi-document YAML/JSON of ResourceSlices, ResourceClaims, DeviceClasses, Pods, Nodes",
    )
    parser.add_argument(
        "--usage",
        metavar="FILE",
        help="YAML containers: [{namespace, pod, container, gpu_uuid, memory_bytes}]",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    return parser


_T = TypeVar("_T")


def _read(name: str, reader: Callable[[Path], _T]) -> _T:
    """reader(Path(name)); nesting past the recursion limit or a number past Python's digit limit is bad
    input naming the file (exit 2), not a traceback."""
    from automator.dra.load import DraInputError

    try:
        return reader(Path(name))
    except (RecursionError, ValueError) as exc:
        raise DraInputError(f"{name}: refused: {str(exc) or type(exc).__name__}") from None


def run(args: argparse.Namespace) -> int:
    # Imported here: every other `gpu-automator` command (and `--help`) starts without the DRA readers.
    from automator.dra.checks import check
    from automator.dra.load import DraInputError, load_cluster_file, load_usage_file
    from automator.dra.report import json_text, to_text
    from steward_common.gc_pause import gc_paused

    try:
        with gc_paused():  # parsing a List makes many objects per item and no garbage cycles
            records = _read(args.cluster, load_cluster_file)
            usage = _read(args.usage, load_usage_file) if args.usage else []
            report = check(records, usage)
    except DraInputError as exc:
        print(f"gpu-automator: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json_text(report))
    else:
        print(to_text(report))
    return 0
