"""Run benchmarks: ``./dev bench`` (all) or ``./dev bench NAME [ARGS]``.

Each benchmark module has ``main(argv) -> dict`` and prints ratios measured side by side.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BENCHMARKS = [
    "python_read",
    "python_peers",
    "spark_read",
    "backfill_fusion",
    "isolation",
    "optimizer",
    "reader_memory",
    "metadata",
    "dataops",
    "branches",
    "sql_writes",
    "governance",
    "training_export",
    "training_stats",
    "training",
]


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("available:", ", ".join(BENCHMARKS))
        return 0
    names = [argv[0]] if argv else BENCHMARKS
    rest = argv[1:]
    for name in names:
        if name not in BENCHMARKS:
            print(
                f"unknown benchmark '{name}'; available: {', '.join(BENCHMARKS)}", file=sys.stderr
            )
            return 2
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        print(f"\n#### benchmark: {name}")
        module.main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
