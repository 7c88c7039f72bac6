"""Compare the chapters' checked outputs with the committed ones, outside nbval.

``make test`` executes every chapter twice: once in the book build (the default
environment, with the machine's own kernels) and once under nbval in a perturbed
environment (ATen's scalar kernels, MKL's compatible code path, one thread) that stands
in for another CPU. nbval checks the second execution; this script checks the first,
by reading the build's execution cache, so a checked output that depends on the machine
fails on the machine that introduced it without a third execution.

Outputs are compared as nbval compares them with ``--nbval-lax``: only cells tagged
``nbval-check-output``, streams of the same name merged, every output field except
images, widget views, metadata and execution counts.

Usage::

    python scripts/check_outputs.py [book/ch01_*.ipynb ...]             # the build's cache
    python scripts/check_outputs.py --execute [book/ch01_*.ipynb ...]   # execute here, now

``--execute`` runs each chapter in a fresh kernel that inherits this process's
environment, so ``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1
python scripts/check_outputs.py --execute`` tries the committed outputs against another
set of kernels, and ``ISOLAB_JITTER=1e-6 ISOLAB_JITTER_SEED=7 python
scripts/check_outputs.py --execute`` against inputs perturbed by a rounding-sized amount
(``isolab.book.seeding``), which stands in for any CPU. ``--jobs 2`` executes two chapters
at a time. Exits 1 if any checked output differs (each difference is printed).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".jupyter_cache"
TAG = "nbval-check-output"
#: Output fields nbval does not compare (besides images, with --nbval-lax and no nbdime).
SKIPPED = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
           "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"}


def checked_cells(nb) -> list[int]:
    """Indices (over all cells) of the code cells whose outputs nbval compares."""
    return [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and TAG in cell.metadata.get("tags", [])]


def comparable(outputs) -> dict[str, list[str]]:
    """One cell's outputs as nbval compares them: streams of one name merged and keyed by
    that name, then every other field (every MIME type of ``data``) except the skipped
    ones, each key holding its values in order."""
    merged, streams = [], {}
    for out in outputs:
        if out.get("output_type") == "stream":
            if out["name"] in streams:
                streams[out["name"]][out["name"]] += out["text"]
                continue
            out = {out["name"]: out["text"]}
            streams[next(iter(out))] = out
        merged.append(out)
    fields: dict[str, list[str]] = defaultdict(list)
    for out in merged:
        for key, value in out.items():
            if key in SKIPPED:
                continue
            if key == "data":
                for mime, text in value.items():
                    if mime not in SKIPPED:
                        fields[mime].append(text if isinstance(text, str) else "".join(text))
            else:
                fields[key].append(value if isinstance(value, str) else "".join(map(str, value)))
    return dict(fields)


def differences(committed, executed, name: str) -> list[str]:
    """A readable report for each checked cell whose executed outputs differ."""
    if len(committed.cells) != len(executed.cells):
        return [f"{name}: the executed notebook has {len(executed.cells)} cells, the committed one {len(committed.cells)}"]
    report = []
    for i in checked_cells(committed):
        want, got = comparable(committed.cells[i].outputs), comparable(executed.cells[i].outputs)
        if want == got:
            continue
        lines = []
        keys = set(want) | set(got)
        if want.get("text/plain") != got.get("text/plain"):
            keys.discard("text/html")  # a check's verdict: its HTML repeats the text (still compared above)
        for key in sorted(keys):
            a = "".join(want.get(key, [])).splitlines()
            b = "".join(got.get(key, [])).splitlines()
            if a != b:
                lines += [f"  [{key}]"] + ["  " + d for d in difflib.unified_diff(a, b, "committed", "executed", lineterm="", n=0)]
        report.append(f"{name}, cell {i} (0-based over all cells):\n" + "\n".join(lines))
    return report


def from_cache(path: Path):
    """The build's executed copy of ``path``, from Jupyter Book's execution cache."""
    from jupyter_cache import get_cache

    if not CACHE.is_dir():
        raise SystemExit(f"no execution cache at {CACHE}: run `make book` first")
    nb = nbformat.read(path, as_version=4)
    try:
        _, merged = get_cache(str(CACHE)).merge_match_into_notebook(nb)
    except KeyError:
        raise SystemExit(f"{path.name} has no executed copy in {CACHE} (its code changed since the build): "
                         "run `make book` first") from None
    return merged


def execute(path: Path, keep_going: bool = False):
    """Execute ``path`` in a fresh kernel with this process's environment (with
    ``keep_going``, a cell that raises is recorded in its outputs and execution goes on)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("ISOLAB_EXPLORABLE", "none")
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=keep_going,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def _timed_execute(path: Path, keep_going: bool):
    start = time.perf_counter()
    return execute(path, keep_going), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", type=Path)
    parser.add_argument("--execute", action="store_true", help="execute the chapters now instead of reading the build's cache")
    parser.add_argument("--save", type=Path, help="write each executed notebook into this folder (to read its other outputs)")
    parser.add_argument("--jobs", type=int, default=1, help="with --execute, chapters executed at a time (one kernel each)")
    parser.add_argument("--keep-going", action="store_true",
                        help="with --execute, record a cell that raises as a difference and go on")
    args = parser.parse_args(argv)
    chapters = args.chapters or sorted((ROOT / "book").glob("ch*.ipynb"))
    source = "executed here" if args.execute else "the build's execution cache"
    print(f"checked outputs against {source}; ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '')!r} "
          f"MKL_CBWR={os.environ.get('MKL_CBWR', '')!r} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')!r} "
          f"ISOLAB_JITTER={os.environ.get('ISOLAB_JITTER', '')!r} ISOLAB_JITTER_SEED={os.environ.get('ISOLAB_JITTER_SEED', '')!r}")
    failures, total = [], 0
    if args.execute:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=max(1, args.jobs))
        runs = [pool.submit(_timed_execute, path, args.keep_going) for path in chapters]
    for k, path in enumerate(chapters):
        committed = nbformat.read(path, as_version=4)
        if args.execute:
            executed, seconds = runs[k].result()
        else:
            executed = from_cache(path)
        found = differences(committed, executed, path.name)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(executed, args.save / path.name)
        total += len(checked_cells(committed))
        failures += found
        print(f"{path.name}: {len(checked_cells(committed))} checked cells, {len(found)} differ"
              + (f" ({seconds:.0f} s)" if args.execute else ""), flush=True)
        for report in found:
            print(report, flush=True)
    print(f"{len(failures)} of {total} checked cells differ from the committed outputs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
