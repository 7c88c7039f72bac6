r"""Explorable figures: one plotting function, live sliders in Jupyter, frames on the web.

A chapter declares a figure once, as a function that draws on a Matplotlib figure from
named parameters, plus the grid of values each parameter may take::

    def draw(fig, kappa, batch):
        ax = fig.add_subplot()
        ...

    Explorable(draw, [Slider("kappa", [1, 10, 100], label="κ(Σ)"),
                      Slider("batch", [8, 64, 512])]).show()

:meth:`Explorable.show` picks how the figure reaches the reader:

* **live** (Jupyter, Colab): ipywidgets sliders; moving one redraws the figure at once.
* **static** (the website, which has no kernel): every combination of slider values is
  drawn at build time, and the page swaps precomputed frames as the reader moves the
  sliders (``book/_static/explorable.js``). The book build sets
  ``ISOLAB_EXPLORABLE=static``.
* **none**: build the object without displaying it (benchmarks and tests).

The mode comes from the ``ISOLAB_EXPLORABLE`` environment variable (``live`` when unset,
falling back to ``static`` if ipywidgets is missing).

**The main slider and the caption's promises.** An explorable names its *main* slider,
the quantity its caption is about, and can state what the caption promises as
:class:`Promise` objects: a sentence of the caption, a ``measure(**params)`` computed
with the figure's own computation, and a predicate that must hold for the measured
values along the main slider, at every setting of the other sliders::

    Explorable(
        draw,
        sliders,
        main="angle",
        caption="Turn θ: the cloud turns, and the cosine does not change with θ.",
        promises=[
            Promise("the cosine does not change with θ", mean_cosine, constant(atol=0.02))
        ],
    )

:meth:`Explorable.broken_promises` checks every promise over the whole grid; the website's
build does so for every explorable it draws (:meth:`Explorable.show` in static mode), and
the tests for Part I's figure modules call it, so a caption that says "watch X stay put"
fails when X moves.

**Sizes on the page.** The website shows a frame at :data:`DISPLAY_DPI` CSS pixels per
inch of figure, so text of ``p`` points lands at ``p · DISPLAY_DPI / 72`` CSS pixels: the
book's smallest text, 10 pt, at 12.5 px. A figure wider than the column
(:data:`COLUMN_PX`) would be shrunk by the browser and its text with it, so an explorable
asked for a wider ``figsize`` is drawn at the column's width (both sides scaled, the
fonts kept in points: the text grows relative to the figure instead of shrinking on
the page). Frames are drawn at ``static_dpi`` (twice :data:`DISPLAY_DPI`), so each has
twice the pixels of its width on the page and stays crisp on high-density screens. The
page's frame carries its figure width in inches and its smallest text in points as data
attributes, from which the browser test computes the text's size where it is shown.

**Phones.** On a narrow screen a figure drawn for the 672-px column shrinks, and its
text with it (10 pt lands at 6.4 CSS px at 390 px). An explorable whose panels sit side
by side declares ``narrow="panels"``: the page then shows the same frames cut into
vertical strips, one per panel (:meth:`Explorable.panel_strips`, found from the axes'
extents at the defaults), laid out in a wrapping row: at the column's width the strips
join into the whole figure, and on a phone each panel fills the column, stacked (no extra
frames, no extra bytes). A single-panel explorable needs no strips if it is drawn at most
:data:`NARROW_WIDTH_IN` inches wide (then its 10-pt text stays at 9 CSS px or more on a
390-px phone). :meth:`Explorable.clipped_text` checks, over the whole grid, that no title
or label runs off the figure, is cut by its axes, or (with ``narrow="panels"``) straddles
two strips.

**Sliders and toggles.** A :class:`Slider` whose values are names (strings, or
``True``/``False``) is a categorical choice: it becomes toggle buttons (ipywidgets
``ToggleButtons`` live, a group of buttons on the website), not a range slider.

**Colours of the website's frames.** Frames are palette PNGs (a fraction of the size of
full colour). The palette always holds the book's own colours that a frame uses (every
optimizer's, every role's, exactly), plus ``static_colors`` colours fitted to the frame
for the rest (antialiased edges, colour maps), so each optimizer drawn keeps its own
colour however small ``static_colors`` is.

**Alt text.** The website's image takes ``alt``, or the caption's first sentence.

Extreme slider values must never show a traceback or a blank figure. A drawing function
signals a combination it cannot show by raising :class:`FigureMessage`; the figure then
shows that message instead. In live mode any other exception is shown the same way (the
reader cannot fix it), but when frames are precomputed for the website an unexpected
exception fails the build, so bugs cannot hide behind a message.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import io
import itertools
import json
import math
import os
import textwrap
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from matplotlib.figure import Figure  # drawn without pyplot: no backend, no global state

from .explorable_frames import (  # noqa: F401  (part of this module's interface)
    _live_control,
    _renderer,
    _static_range,
    _static_toggle,
    book_colors,
    clipped_texts,
    drawn_texts,
    palette_png,
    smallest_text,
)
from .explorable_sliders import (  # noqa: F401  (part of this module's interface)
    BrokenPromise,
    FigureMessage,
    Promise,
    Slider,
    always,
    constant,
    nondecreasing,
    nonincreasing,
)

__all__ = [
    "Slider", "Explorable", "FigureMessage", "Promise", "constant", "nondecreasing", "nonincreasing",
    "always", "BrokenPromise", "MODE_VARIABLE", "DISPLAY_DPI", "COLUMN_PX", "MIN_TEXT_PX", "MIN_MAIN_VALUES",
    "registry", "shown", "first_sentence", "fit_to_column", "palette_png", "smallest_text", "drawn_texts",
    "clipped_texts", "NARROW_WIDTH_IN", "MIN_PHONE_TEXT_PX",
]

MODE_VARIABLE = "ISOLAB_EXPLORABLE"
_MODES = ("live", "static", "none")

#: Size budget of one precomputed figure on the website (all frames together).
MAX_STATIC_BYTES = 2_000_000
#: Upper bound on the number of frames one figure may ask for.
MAX_FRAMES = 400
#: How many frames a live widget keeps, so that revisiting a setting costs nothing.
LIVE_CACHE_FRAMES = 128
#: CSS pixels per inch of figure on the website (frames are drawn at twice this): 10 pt
#: text lands at 12.5 CSS px.
DISPLAY_DPI = 90
#: CSS pixels the book's column gives a frame at a 1280-px window (the 684-px column less
#: the explorable's border and padding, ``book/_static/explorable.css``).
COLUMN_PX = 672
#: The smallest figure text the website may show, in CSS pixels at the width shown.
MIN_TEXT_PX = 12
#: Fewest values of a main slider whose quantity varies continuously.
MIN_MAIN_VALUES = 9
#: The smallest figure text a 390-px phone may show, in CSS pixels.
MIN_PHONE_TEXT_PX = 9
#: CSS pixels a 390-px phone's column gives a frame (measured with the book's theme: the
#: viewport less the article's padding and the explorable's border and padding).
PHONE_COLUMN_PX = 350
#: The widest single-panel figure, in inches, whose 10-pt text stays at
#: :data:`MIN_PHONE_TEXT_PX` or more when shown :data:`PHONE_COLUMN_PX` wide.
NARROW_WIDTH_IN = math.floor(100 * 10 * PHONE_COLUMN_PX / (72 * MIN_PHONE_TEXT_PX)) / 100
#: A strip narrower than this (a colourbar, a legend column) joins its neighbour.
MIN_STRIP = 0.15
#: The layouts an explorable may declare for narrow screens.
NARROW_LAYOUTS = (None, "panels")

_REGISTRY: "weakref.WeakSet[Explorable]" = weakref.WeakSet()
_SHOWN: "list[Explorable]" = []


def registry() -> list["Explorable"]:
    """Every :class:`Explorable` alive in this process, oldest first."""
    return sorted(_REGISTRY, key=lambda e: e._serial)


def shown() -> list["Explorable"]:
    """Every :class:`Explorable` whose :meth:`~Explorable.show` ran in this process, in the
    order shown (whatever the mode). A chapter often writes ``ch01.figure().show()`` and
    keeps no reference; this list keeps one, so a benchmark can time what a reader sees."""
    return list(_SHOWN)


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to the first ``.``, ``!`` or ``?`` followed by a
    space or the end; decimals such as ``0.5`` do not end it)."""
    text = " ".join(str(text).split())
    for i, ch in enumerate(text):
        if ch in ".!?" and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text


def fit_to_column(figsize: tuple[float, float], column_px: float = COLUMN_PX,
                  display_dpi: float = DISPLAY_DPI) -> tuple[float, float]:
    """``figsize`` scaled down (both sides) so that the figure, shown at ``display_dpi``
    CSS pixels per inch, fits the column; unchanged when it already fits."""
    width, height = float(figsize[0]), float(figsize[1])
    if width <= 0 or height <= 0:
        raise ValueError(f"figsize must be positive, got {figsize!r}")
    scale = min(1.0, column_px / (width * display_dpi))
    return (round(width * scale, 4), round(height * scale, 4))


class Explorable:
    """A figure drawn by ``draw(fig, **params)`` over the grid spanned by ``sliders``.

    Parameters
    ----------
    draw:
        ``draw(fig, **params)`` adds axes to a blank Matplotlib ``fig`` and plots.
        It may raise :class:`FigureMessage` for combinations it cannot show. It should
        not call ``tight_layout``: the explorable lays the figure out once and reuses
        the margins, which keeps redraws fast.
    sliders:
        One :class:`Slider` per keyword argument of ``draw``.
    figsize, dpi:
        Size of the figure in inches (a width over the column's, :data:`COLUMN_PX` at
        :data:`DISPLAY_DPI`, is scaled down to it, see the module docstring; the size
        drawn is :attr:`figsize`, the one asked for :attr:`requested_figsize`) and its
        resolution live. Frames on the website use ``static_dpi`` and a palette of the
        book's colours plus ``static_colors`` colours fitted to each frame.
    caption:
        Optional text under the sliders.
    alt:
        The website image's alt text (default: the caption's first sentence).
    main:
        The name of the slider the caption is about (see the module docstring).
    promises:
        What the caption promises, as :class:`Promise` objects; each one's ``text`` must
        appear in ``caption``.
    narrow:
        ``"panels"`` to show the frames on narrow screens cut into one strip per panel,
        stacked (see *Phones* in the module docstring); ``None`` for a figure that reads
        at a phone's width as it is (a single panel at most :data:`NARROW_WIDTH_IN` wide).
    trains:
        Whether a redraw runs a training computation. The book's budget for a live
        redraw is 300 ms for such figures and 150 ms for the others
        (``benchmarks/bench_explorables.py`` reads :attr:`redraw_budget_ms`).
    """

    _counter = itertools.count()

    def __init__(
        self,
        draw: Callable[..., None],
        sliders: Sequence[Slider],
        *,
        figsize: tuple[float, float] = (9.0, 3.4),
        dpi: int = 90,
        static_dpi: int = 2 * DISPLAY_DPI,
        static_colors: int = 64,
        caption: str = "",
        alt: str | None = None,
        main: str | None = None,
        promises: Sequence[Promise] = (),
        trains: bool = False,
        narrow: str | None = None,
        max_frames: int = MAX_FRAMES,
        max_static_bytes: int = MAX_STATIC_BYTES,
    ) -> None:
        if not callable(draw):
            raise TypeError(f"draw must be callable, got {type(draw).__name__}")
        sliders = tuple(sliders)
        if not sliders:
            raise ValueError("an explorable needs at least one slider")
        names = [s.name for s in sliders]
        if len(set(names)) != len(names):
            raise ValueError(f"slider names must be unique, got {names}")
        n_frames = 1
        for s in sliders:
            n_frames *= len(s.values)
        if n_frames > max_frames:
            raise ValueError(
                f"the slider grid has {n_frames} combinations, more than max_frames={max_frames}; "
                "use fewer values per slider (every combination becomes a frame on the website)"
            )
        if main is not None and main not in names:
            raise ValueError(f"main={main!r} is not one of the sliders {names}")
        promises = tuple(promises)
        for promise in promises:
            if not isinstance(promise, Promise):
                raise TypeError(f"promises must be Promise objects, got {type(promise).__name__}: {promise!r}")
            if main is None:
                raise ValueError("promises are checked along the main slider: name it with main=...")
            if promise.text not in caption:
                raise ValueError(f"the promise {promise.text!r} does not appear in the caption {caption!r}")
        if narrow not in NARROW_LAYOUTS:
            raise ValueError(f"narrow must be one of {NARROW_LAYOUTS}, got {narrow!r}")
        self.narrow = narrow
        self._strips: tuple[float, ...] | None = None
        self.main = main
        self.promises = promises
        self.draw = draw
        self.sliders = sliders
        self.requested_figsize = (float(figsize[0]), float(figsize[1]))
        self.figsize = fit_to_column(figsize)
        self.dpi = dpi
        self.static_dpi = static_dpi
        if not 2 <= static_colors <= 256:
            raise ValueError(f"static_colors must be between 2 and 256, got {static_colors}")
        self.static_colors = static_colors
        self.caption = caption
        self.alt = (alt if alt is not None else first_sentence(caption)).strip() or (
            "Explorable figure: " + ", ".join(s.text for s in sliders))
        self.redraw_budget_ms = 300.0 if trains else 150.0
        self.max_static_bytes = max_static_bytes
        self.n_frames = n_frames
        self._figure = Figure(figsize=self.figsize, dpi=dpi)
        self._margins: dict[str, float] | None = None
        self.min_font_pt = math.inf   # the smallest text of the website's frames (set by frames())
        self._serial = next(self._counter)
        _REGISTRY.add(self)

    # ------------------------------------------------------- caption promises
    @property
    def main_slider(self) -> Slider | None:
        """The :class:`Slider` named by ``main`` (None if the explorable names none)."""
        return next((s for s in self.sliders if s.name == self.main), None)

    def broken_promises(self) -> list[BrokenPromise]:
        """Check every promise over the whole grid: for each setting of the other sliders,
        measure along the main slider and test. Returns where a promise fails (empty
        when the caption tells the truth everywhere)."""
        main = self.main_slider
        if main is None:
            return []
        others = [s for s in self.sliders if s is not main]
        broken = []
        for promise in self.promises:
            for combo in itertools.product(*(s.values for s in others)):
                setting = {s.name: v for s, v in zip(others, combo)}
                values = [promise.measure(**setting, **{main.name: v}) for v in main.values]
                if not promise.holds(values):
                    broken.append(BrokenPromise(promise, setting, values))
        return broken

    # ------------------------------------------------------------ narrow layout
    def panel_strips(self) -> tuple[float, ...] | None:
        """Where the page cuts the frames into panels on narrow screens: the cuts as
        fractions of the figure's width, ``(0, …, 1)``, or ``None`` unless ``narrow`` is
        ``"panels"``.

        Found once, at the defaults: each visible axes' extent with its labels and title
        (``get_tightbbox``); overlapping extents form one panel, a panel narrower than
        :data:`MIN_STRIP` of the figure (a colourbar) joins its neighbour, and each cut
        lies midway between two panels. Raises ``ValueError`` when the figure has only
        one panel (draw it narrower instead)."""
        if self.narrow != "panels":
            return None
        if self._strips is None:
            fig = self.render(strict=True)
            renderer = _renderer(fig)
            width = fig.bbox.width
            spans = sorted((ax.get_tightbbox(renderer).x0 / width, ax.get_tightbbox(renderer).x1 / width)
                           for ax in fig.axes if ax.get_visible())
            panels: list[list[float]] = []
            for x0, x1 in spans:
                if panels and x0 < panels[-1][1]:
                    panels[-1][1] = max(panels[-1][1], x1)
                else:
                    panels.append([x0, x1])
            i = 0
            while len(panels) > 1 and i < len(panels):
                if panels[i][1] - panels[i][0] < MIN_STRIP:
                    j = i - 1 if i > 0 else i + 1
                    panels[j] = [min(panels[i][0], panels[j][0]), max(panels[i][1], panels[j][1])]
                    del panels[i]
                    i = 0
                else:
                    i += 1
            if len(panels) < 2:
                raise ValueError("narrow='panels' needs panels side by side; this figure has one: draw it at most "
                                 f"{NARROW_WIDTH_IN} in wide instead (narrow=None)")
            cuts = [0.0] + [round(float(a[1] + b[0]) / 2, 4) for a, b in zip(panels, panels[1:])] + [1.0]
            self._strips = tuple(cuts)
        return self._strips

    def clipped_text(self, **params: Any) -> list[str]:
        """What is wrong with the text of the figure at ``params`` (missing ones at their
        defaults): :func:`clipped_texts`, with this explorable's strips."""
        fig = self.render(strict=True, **params)
        return clipped_texts(fig, self.panel_strips())

    def clipped_text_over_grid(self) -> list[str]:
        """:meth:`clipped_text` at every combination of slider values, each problem
        prefixed by its setting."""
        strips = self.panel_strips()
        found = []
        for combo in itertools.product(*(s.values for s in self.sliders)):
            params = {s.name: v for s, v in zip(self.sliders, combo)}
            fig = self.render(strict=True, **params)
            found += [f"{params}: {problem}" for problem in clipped_texts(fig, strips)]
        return found

    # ------------------------------------------------------------------ drawing
    def defaults(self) -> dict[str, Any]:
        """The parameters at every slider's default."""
        return {s.name: s.default for s in self.sliders}

    def _check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        unknown = set(params) - {s.name for s in self.sliders}
        if unknown:
            raise TypeError(f"unknown parameter(s) {sorted(unknown)}; sliders are {[s.name for s in self.sliders]}")
        return {**self.defaults(), **params}

    def render(self, *, strict: bool = False, **params: Any) -> Figure:
        """Draw the figure at ``params`` (missing ones at their defaults) and return it.

        A :class:`FigureMessage` becomes a message in the figure. Any other exception
        does too unless ``strict`` (then it propagates).
        """
        params = self._check_params(params)
        self._ensure_layout()
        fig = self._new_figure()
        fig.subplots_adjust(**self._margins)
        try:
            self.draw(fig, **params)
            if not fig.axes and not fig.texts:
                raise FigureMessage("nothing to show for these settings")
        except FigureMessage as message:
            self._show_message(str(message))
        except Exception as error:  # noqa: BLE001 - a reader must never see a traceback
            if strict:
                raise
            self._show_message(f"This setting cannot be drawn ({type(error).__name__}: {error}).")
        return self._figure  # a message replaces the figure

    def _ensure_layout(self) -> None:
        """Fit the axes to the figure once, at the defaults, and reuse the margins.

        ``tight_layout`` measures every label and costs as much as drawing, so it does
        not run on every redraw: the margins it finds at the defaults are stored and
        applied to each new figure, and fit the other
        settings, whose axes and labels differ only in their numbers. Laying out at the
        defaults (not at whichever setting is drawn first) gives the live figure and the
        website's frames the same margins. The layout engine is then removed, or every
        ``savefig`` would draw the figure twice.
        """
        if self._margins is not None:
            return
        fig = self._new_figure()
        try:
            self.draw(fig, **self.defaults())
            with warnings.catch_warnings():
                # A drawing that places its axes itself (a gridspec with its own margins)
                # is one tight_layout cannot fit: it warns and leaves those axes alone,
                # which is what such a drawing wants. The warning would reach the page.
                warnings.filterwarnings("ignore", message=".*not compatible with tight_layout")
                fig.tight_layout()
        except Exception:  # noqa: BLE001 - the real draw reports it
            pass
        fig.set_layout_engine(None)
        pars = fig.subplotpars
        self._margins = dict(left=pars.left, right=pars.right, bottom=pars.bottom, top=pars.top,
                             wspace=pars.wspace, hspace=pars.hspace)

    def _new_figure(self) -> Figure:
        """A blank figure for the next drawing. A new one, not ``fig.clear()``: clearing
        first clears every old Axes (resetting its ticks), which costs more than building
        the figure afresh, and a fresh figure cannot carry state from one setting to the
        next."""
        self._figure = Figure(figsize=self.figsize, dpi=self.dpi)
        return self._figure

    def _show_message(self, message: str) -> None:
        fig = self._new_figure()
        wrapped = "\n".join(textwrap.wrap(message, width=int(self.figsize[0] * 9)))
        fig.text(0.5, 0.5, wrapped, ha="center", va="center", fontsize=12, color="#7a2e00",
                 bbox=dict(boxstyle="round,pad=0.8", facecolor="#fff4e5", edgecolor="#e0a040"))

    def png(self, *, dpi: int | None = None, strict: bool = False, **params: Any) -> bytes:
        """The figure at ``params`` as PNG bytes."""
        fig = self.render(strict=strict, **params)
        buf = io.BytesIO()
        # light compression: a slider move should not wait for zlib's best effort
        # bbox_inches=None whatever the rc says: a tight box would draw twice and let the
        # frame size change from one setting to the next
        fig.savefig(buf, format="png", dpi=dpi or self.dpi, bbox_inches=None, pil_kwargs={"compress_level": 1})
        return buf.getvalue()

    # ------------------------------------------------------------ static frames
    def _frame_bytes(self, params: dict[str, Any]) -> bytes:
        """One frame for the website: a palette PNG (:func:`palette_png`), far smaller
        than full colour. Records the frame's smallest text in :attr:`min_font_pt`."""
        from PIL import Image

        raw = self.png(dpi=self.static_dpi, strict=True, **params)
        self.min_font_pt = min(self.min_font_pt, smallest_text(self._figure))
        return palette_png(Image.open(io.BytesIO(raw)), self.static_colors)

    def frames(self) -> tuple[list[bytes], dict[str, int]]:
        """Every frame of the grid: the distinct images and, for each combination of
        slider indices (key ``"i-j-k"``), which image it shows."""
        images: list[bytes] = []
        seen: dict[str, int] = {}
        index: dict[str, int] = {}
        self.min_font_pt = math.inf
        for combo in itertools.product(*(range(len(s.values)) for s in self.sliders)):
            params = {s.name: s.values[i] for s, i in zip(self.sliders, combo)}
            data = self._frame_bytes(params)
            digest = hashlib.sha1(data).hexdigest()
            if digest not in seen:
                seen[digest] = len(images)
                images.append(data)
            index["-".join(map(str, combo))] = seen[digest]
        return images, index

    def static_html(self) -> str:
        """Self-describing HTML for the website: sliders, an image, and the frames as
        JSON; ``book/_static/explorable.js`` wires them together."""
        images, index = self.frames()
        uris = ["data:image/png;base64," + base64.b64encode(b).decode("ascii") for b in images]
        payload = {
            "sliders": [
                {"name": s.name, "label": s.text, "values": [s.format(v) for v in s.values], "default": s.default_index}
                for s in self.sliders
            ],
            "frames": uris,
            "index": index,
        }
        data = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
        if len(data) > self.max_static_bytes:
            raise ValueError(
                f"the precomputed frames take {len(data) / 1e6:.2f} MB, over the budget of "
                f"{self.max_static_bytes / 1e6:.2f} MB; use fewer slider values or a smaller figure"
            )
        key = "-".join(str(s.default_index) for s in self.sliders)
        controls = "".join(_static_toggle(s) if s.is_toggle else _static_range(s) for s in self.sliders)
        caption = f'<p class="isolab-caption">{html.escape(self.caption)}</p>' if self.caption else ""
        font = f"{self.min_font_pt:g}" if math.isfinite(self.min_font_pt) else ""
        strips = self.panel_strips()
        narrow = f' data-strips="{",".join(f"{c:g}" for c in strips)}"' if strips else ""
        return (
            f'<div class="isolab-explorable" id="isolab-explorable-{self._serial}" '
            f'data-figure-width-in="{self.figsize[0]:g}" data-min-font-pt="{font}" '
            f'data-frame-dpi="{self.static_dpi:g}" data-display-width="{round(self.figsize[0] * DISPLAY_DPI)}"'
            f'{narrow}>'
            f'<div class="isolab-controls">{controls}</div>{caption}'
            f'<img class="isolab-frame" alt="{html.escape(self.alt)}" '
            f'style="width: {round(self.figsize[0] * DISPLAY_DPI)}px" src="{uris[index[key]]}">'
            f'<script type="application/json" class="isolab-explorable-data">{data}</script>'
            "</div>"
        )

    # --------------------------------------------------------------- live widget
    def widget(self):
        """An ipywidgets box: one control per parameter above the figure, a selection
        slider for an ordered quantity and toggle buttons for a categorical choice."""
        import ipywidgets as widgets

        image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        controls = {s.name: _live_control(widgets, s) for s in self.sliders}

        cache: "OrderedDict[tuple, bytes]" = OrderedDict()

        def redraw(_change=None) -> None:
            # A slider dragged back and forth revisits settings: keep the last frames drawn.
            params = {name: w.value for name, w in controls.items()}
            key = tuple(s.values.index(params[s.name]) for s in self.sliders)
            if key in cache:
                cache.move_to_end(key)
            else:
                cache[key] = self.png(**params)
                if len(cache) > LIVE_CACHE_FRAMES:
                    cache.popitem(last=False)
            image.value = cache[key]

        for w in controls.values():
            w.observe(redraw, names="value")
        redraw()
        children = [widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))]
        if self.caption:
            children.append(widgets.HTML(f"<em>{html.escape(self.caption)}</em>"))
        children.append(image)
        return widgets.VBox(children)

    # ------------------------------------------------------------------ display
    @staticmethod
    def mode() -> str:
        """``live``, ``static`` or ``none``, from ``$ISOLAB_EXPLORABLE`` (default live)."""
        mode = os.environ.get(MODE_VARIABLE, "live").strip().lower() or "live"
        if mode not in _MODES:
            raise ValueError(f"{MODE_VARIABLE} must be one of {_MODES}, got {mode!r}")
        if mode == "live":
            try:
                import ipywidgets  # noqa: F401
            except ImportError:
                return "static"
        return mode

    def show(self) -> None:
        """Display the figure the way the current mode asks for (see module docstring)."""
        from IPython.display import HTML, display

        mode = self.mode()
        _SHOWN.append(self)
        if mode == "live":
            display(self.widget())
        elif mode == "static":
            self.check_promises()  # the website's build fails on a caption that does not hold
            display(HTML(self.static_html()))

    def check_promises(self) -> None:
        """Raise ``AssertionError`` naming every place where a caption promise fails."""
        broken = self.broken_promises()
        if broken:
            raise AssertionError("the caption promises what the figure does not show:\n" + "\n".join(map(str, broken[:5])))


