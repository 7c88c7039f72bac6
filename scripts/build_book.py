"""Build the book: execute every chapter and render the HTML site into _build/html.

Run through ``make book``, which first sets up the pinned environment in ``.venv``.

* Fails on any error in a chapter's cell and on any Sphinx warning (``-W``).
* Chapter outputs are cached by Jupyter Book, keyed on each notebook's code cells only.
  A change in the ``isolab`` library, in the saved ``results/`` the chapters load, in the
  script Chapter 13 runs, or in the pinned environment would therefore leave stale
  outputs; this script fingerprints them and clears the cache when the fingerprint
  changes, so every chapter runs again (``scripts/check_outputs.py`` compares the cached
  outputs with the committed ones).
* Sets ``ISOLAB_EXPLORABLE=static`` so explorable figures precompute their frames for
  the kernel-free website (see ``isolab/book/explorable.py``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"
FINGERPRINT = BUILD / ".isolab-fingerprint"


def library_fingerprint() -> str:
    """Hash of everything a chapter's execution depends on besides its own code."""
    digest = hashlib.sha256()
    # the library, the saved results chapters load, the script a chapter runs, the environment
    files = (sorted((ROOT / "isolab").rglob("*.py")) + sorted(p for p in (ROOT / "results").glob("*") if p.is_file())
             + [p for p in [ROOT / "scripts" / "train_ddp.py"] if p.exists()]
             + [ROOT / "requirements.txt", ROOT / "pyproject.toml"])
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def main() -> int:
    start = time.perf_counter()
    fingerprint = library_fingerprint()
    if CACHE.exists() and (not FINGERPRINT.exists() or FINGERPRINT.read_text() != fingerprint):
        print("isolab or the environment changed since the last build: clearing the execution cache")
        shutil.rmtree(CACHE)
    BUILD.mkdir(exist_ok=True)
    # Render every page afresh (stale pages of removed files must not survive); the
    # expensive part, executing the chapters, stays cached in CACHE.
    for stale in (BUILD / "html", BUILD / ".doctrees"):
        shutil.rmtree(stale, ignore_errors=True)
    env = dict(os.environ, ISOLAB_EXPLORABLE="static", PYDEVD_DISABLE_FILE_VALIDATION="1")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", str(ROOT), "--builder", "html", "-W", "--keep-going"]
    result = subprocess.run(command, cwd=ROOT, env=env)
    if result.returncode != 0:
        print("\nBook build FAILED (a cell error or a Sphinx warning; see above).", file=sys.stderr)
        return result.returncode
    FINGERPRINT.write_text(fingerprint)
    print(f"\nBook built in {time.perf_counter() - start:.0f} s. Open {BUILD / 'html' / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
