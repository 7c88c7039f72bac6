"""``python -m isolab.book.scaling --out results/scaling_gpu.json``: time Iso's and Muon's matrix
functions on this machine's best device and save the JSON Chapter 13 reads."""

from __future__ import annotations

import argparse
import json
import sys

from .timing import linalg_benchmark


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Time Iso's and Muon's matrix functions; save JSON.")
    p.add_argument("--out", default="results/scaling_gpu.json")
    p.add_argument("--widths", type=int, nargs="*", default=[256, 1024, 4096])
    p.add_argument("--device", default=None)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    report = linalg_benchmark(args.widths, args.device, args.repeats)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
