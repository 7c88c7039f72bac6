"""Where a chapter finds a saved result: the repository's ``results/`` folder, or (in a
Colab session, where only the package is installed) a copy fetched once from the book's
repository into ``~/.cache/isolab``."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

__all__ = ["REPOSITORY_RESULTS", "saved_result"]

#: The results folder of a checkout (``isolab/book/figures/saved.py`` -> ``results/``).
LOCAL = Path(__file__).resolve().parents[3] / "results"
#: Where the book's repository serves the same files.
REPOSITORY_RESULTS = "https://raw.githubusercontent.com/isolab-book/isolab/main/results/"


def saved_result(name: str, *, download: bool = True) -> Path:
    """The path of ``results/<name>``: the checkout's copy if there is one, else a cached
    download from :data:`REPOSITORY_RESULTS`. Raises ``FileNotFoundError`` naming the
    script to run when neither exists (offline, ``download=False``)."""
    local = LOCAL / name
    if local.exists():
        return local
    cache = Path(os.environ.get("ISOLAB_CACHE", Path.home() / ".cache" / "isolab")) / name
    if cache.exists():
        return cache
    if download:
        cache.parent.mkdir(parents=True, exist_ok=True)
        try:
            partial = cache.with_suffix(cache.suffix + ".part")
            urllib.request.urlretrieve(REPOSITORY_RESULTS + name, partial)
            partial.replace(cache)
            return cache
        except OSError as error:
            reason = f"downloading {REPOSITORY_RESULTS + name} failed ({error})"
    else:
        reason = "downloading is off"
    raise FileNotFoundError(f"results/{name} is not in this checkout and {reason}; "
                            "make it with the script named in the chapter (see book/running.md)")


def machine_note(dtype: str = "float64") -> str:
    """One line saved with a result: the torch version, the processor, the dtype, the date."""
    import platform
    import time

    import torch

    return (f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {dtype}, "
            f"{torch.get_num_threads()} thread(s), {time.strftime('%Y-%m-%d')}")


def write_result(description: str, name: str, compute, argv=None) -> Path:
    """The command line of a script that makes one saved result: ``compute()`` returns the
    arrays, written compressed to ``--out`` (default ``results/<name>``)."""
    import argparse
    import time

    import numpy as np

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=LOCAL / name)
    args = parser.parse_args(argv)
    start = time.time()
    data = compute()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **data)
    print(f"wrote {args.out} in {time.time() - start:.0f} s")
    return args.out


def split_jitter_check(argv) -> tuple:
    """``(seeds, rest)`` from a script's arguments: the jitter seeds after ``--jitter-check``
    (``None`` when the flag is absent) and the other arguments, for :func:`write_result`."""
    argv = list(argv)
    if "--jitter-check" not in argv:
        return None, argv
    i = argv.index("--jitter-check")
    seeds = []
    while i + 1 + len(seeds) < len(argv) and argv[i + 1 + len(seeds)].isdigit():
        seeds.append(int(argv[i + 1 + len(seeds)]))
    if not seeds:
        raise SystemExit(f"--jitter-check needs one or more jitter seeds (e.g. --jitter-check 1 2 3), got {argv[i + 1:]}")
    return seeds, argv[:i] + argv[i + 1 + len(seeds):]
