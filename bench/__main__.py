"""`make bench` / `python -m bench [NAME...]`: run the benchmarks and print their tables."""

from __future__ import annotations

import importlib
import logging
import sys

ALL = (
    "speedup",
    "runtimes",
    "accuracy",
    "activations",
    "isa",
    "trust",
    "overhead",
    "scaling",
    "gate",
    "gate_interference",
    "gpu",
    "deep_compression",
    "families",
    "prune",
    "lm",
    "tune",
)


def main(names: list[str]) -> None:
    logging.basicConfig(level=logging.ERROR)
    for name in names or ALL:
        if name not in ALL:
            sys.exit(f"unknown benchmark {name!r}; choose from {', '.join(ALL)}")
        importlib.import_module(f"bench.{name}").run()


if __name__ == "__main__":
    main(sys.argv[1:])
