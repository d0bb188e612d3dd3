"""`gpu-automator dra-check --cluster FILE [--usage FILE] [--output text|json]` (docs/dra.md).

Exit status 0 whether or not there are findings; 2 when an input cannot be read (the message names the
file and the place). Fields that do not parse inside the objects are `unparsable` findings, not errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

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


def run(args: argparse.Namespace) -> int:
    # Imported here: every other `gpu-automator` command (and `--help`) starts without the DRA readers.
    from automator.dra.checks import check
    from automator.dra.load import DraInputError, load_cluster_file, load_usage_file
    from automator.dra.report import json_text, to_text
    from automator.objects.gc_pause import gc_paused

    try:
        with gc_paused():  # parsing a large List makes millions of objects and no garbage cycles
            records = load_cluster_file(Path(args.cluster))
            usage = load_usage_file(Path(args.usage)) if args.usage else []
            report = check(records, usage)
    except DraInputError as exc:
        print(f"gpu-automator: error: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json_text(report))
    else:
        print(to_text(report))
    return 0
