"""A tiny text progress bar (no dependency), shown only for runs that take a while."""

from __future__ import annotations

import os
import sys
import time

__all__ = ["Progress"]


def _auto_enabled(stream) -> bool:
    flag = os.environ.get("ISOLAB_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false", "False")
    try:
        return stream.isatty()
    except Exception:  # pragma: no cover - exotic streams
        return False


class Progress:
    r"""``[#####.....] 512/1000 steps  3.1 s, ~2.9 s left  (label)`` on one line of ``stream``.

    ``enabled``: ``True`` (always, after ``delay`` seconds), ``False`` (never) or ``"auto"``
    (when ``stream`` is a terminal, or the environment variable ``ISOLAB_PROGRESS=1``;
    off in notebooks by default so that nbval's stderr comparison stays stable -- pass
    ``progress=True`` in a chapter cell to see it).  Nothing is printed before ``delay``
    seconds have passed or while the estimated total is below ``min_total`` seconds, so
    short runs stay silent.  Redraws at most every ``interval`` seconds.
    """

    def __init__(self, total: int, label: str = "", enabled="auto", stream=None, delay: float = 0.5,
                 min_total: float = 2.0, interval: float = 0.2, width: int = 24):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = _auto_enabled(self.stream) if enabled == "auto" else bool(enabled)
        self.total = max(int(total), 1)
        self.label = label
        self.delay, self.min_total, self.interval, self.width = delay, min_total, interval, width
        self.start = time.perf_counter()
        self._last = 0.0
        self._shown = False

    def update(self, done: int, note: str = "") -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = now - self.start
        if elapsed < self.delay or now - self._last < self.interval:
            return
        frac = min(max(done / self.total, 1e-9), 1.0)
        if not self._shown and elapsed / frac < self.min_total:
            return
        self._last = now
        self._shown = True
        filled = int(round(self.width * frac))
        left = elapsed / frac - elapsed
        text = (f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} steps "
                f"{elapsed:5.1f} s, ~{left:4.1f} s left {self.label} {note}")
        self.stream.write(text.ljust(90)[:120])
        self.stream.flush()

    def close(self, done: int | None = None, note: str = "") -> None:
        if self.enabled and self._shown:
            self._last = 0.0
            self.delay = 0.0
            self.update(self.total if done is None else done, note)
            self.stream.write("\n")
            self.stream.flush()
