"""What an explorable's frames are made of: text extents (clipping, the smallest text), the book's
palette and indexed PNGs, and the HTML of its kernel-free controls."""

from __future__ import annotations

import functools
import html
import io
import math
from typing import Sequence
from matplotlib.figure import Figure  # drawn without pyplot: no backend, no global state

from .explorable_sliders import Slider


# ------------------------------------------------------------------ helpers
def _static_range(s: Slider) -> str:
    """A range input for an ordered quantity (its value printed beside it)."""
    return (f'<label class="isolab-slider"><span class="isolab-slider-name">{html.escape(s.text)}</span>'
            f'<input type="range" min="0" max="{len(s.values) - 1}" step="1" value="{s.default_index}" '
            f'data-name="{s.name}" aria-label="{html.escape(s.text)}">'
            f'<output>{html.escape(s.format(s.default))}</output></label>')


def _static_toggle(s: Slider) -> str:
    """A group of toggle buttons for a categorical choice: each a real ``<button>`` (in
    the tab order, pressed with Enter or Space; the arrow keys step through the group),
    the chosen one marked ``aria-pressed="true"``."""
    buttons = "".join(
        f'<button type="button" class="isolab-toggle-button" data-index="{i}" '
        f'aria-pressed="{str(i == s.default_index).lower()}">{html.escape(s.format(v))}</button>'
        for i, v in enumerate(s.values))
    return (f'<div class="isolab-toggle" role="group" aria-label="{html.escape(s.text)}" data-name="{s.name}" '
            f'data-index="{s.default_index}"><span class="isolab-slider-name">{html.escape(s.text)}</span>'
            f'{buttons}</div>')


def _live_control(widgets, s: Slider):
    """The live control of one slider: ``ToggleButtons`` for a categorical choice, a
    ``SelectionSlider`` otherwise (both exist, with these arguments, in ipywidgets 7.7
    as Colab ships it and in 8.x)."""
    options = [(s.format(v), v) for v in s.values]
    if s.is_toggle:
        return widgets.ToggleButtons(options=options, value=s.default, description=s.text,
                                     style={"description_width": "initial", "button_width": "auto"})
    return widgets.SelectionSlider(options=options, value=s.default, description=s.text, continuous_update=True,
                                   style={"description_width": "initial"}, layout=widgets.Layout(width="320px"))


def _renderer(fig: Figure):
    """An Agg renderer for ``fig``, with the figure drawn on it (so that extents are known)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    fig.draw(renderer)
    return renderer


def drawn_texts(fig: Figure) -> list:
    """Every non-empty text a draw of ``fig`` puts on the canvas, with its extent in
    display pixels: ``[(text, bbox)]``. Texts that exist but are not drawn (the labels of
    ticks outside the view, invisible artists) are left out."""
    from matplotlib.text import Text

    drawn: list = []
    original = Text.draw

    def spy(text, renderer):
        if text.get_visible() and text.get_text().strip():
            drawn.append(text)
        return original(text, renderer)

    Text.draw = spy
    try:
        renderer = _renderer(fig)
    finally:
        Text.draw = original
    seen, out = set(), []
    for text in drawn:
        if id(text) not in seen:
            seen.add(id(text))
            out.append((text, text.get_window_extent(renderer)))
    return out


def clipped_texts(fig: Figure, strips: Sequence[float] | None = None, *, tol: float = 0.5) -> list[str]:
    """Every title, label, tick label or annotation of ``fig`` that a reader would see
    cut: one that runs off the figure, one cut by the box it is clipped to (its axes),
    and, given the page's ``strips`` (cuts as fractions of the width), one that straddles
    a cut. Empty when all text shows whole. ``tol`` is in display pixels."""
    width, height = fig.bbox.width, fig.bbox.height
    problems = []
    for text, box in drawn_texts(fig):
        label = " ".join(text.get_text().split())[:40]
        sides = [side for side, out in (("left", box.x0 < -tol), ("right", box.x1 > width + tol),
                                        ("bottom", box.y0 < -tol), ("top", box.y1 > height + tol)) if out]
        if sides:
            problems.append(f"{label!r} runs off the figure ({', '.join(sides)})")
            continue
        clip = text.get_clip_box() if text.get_clip_on() else None
        if clip is not None and (box.x0 < clip.x0 - tol or box.x1 > clip.x1 + tol or box.y0 < clip.y0 - tol
                                 or box.y1 > clip.y1 + tol):
            problems.append(f"{label!r} is cut by its axes")
            continue
        if strips:
            cuts = [c * width for c in strips[1:-1]]
            crossed = [c for c in cuts if box.x0 < c - tol and box.x1 > c + tol]
            if crossed:
                problems.append(f"{label!r} straddles the phone layout's cut at {crossed[0] / width:.3f} of the width")
    return problems


def smallest_text(fig: Figure) -> float:
    """The font size in points of the smallest visible, non-empty text of ``fig``
    (infinity when it has none)."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else math.inf


@functools.lru_cache(maxsize=1)
def book_colors() -> tuple[tuple[int, int, int], ...]:
    """The book's own colours as 8-bit RGB: every optimizer's and every role's, and the
    darker forms their text takes (``style.text_color``)."""
    import matplotlib.colors

    from isolab.book.figures import style  # imported here: style imports this module

    named = [look.color for look in style.OPTIMIZERS.values()] + list(style.ROLES.values())
    named += [style.text_color(c) for c in named]
    out = []
    for c in named:
        rgb = tuple(int(round(255 * v)) for v in matplotlib.colors.to_rgb(c))
        if rgb not in out:
            out.append(rgb)
    return tuple(out)


#: Pixels of one of the book's colours a frame must hold for the palette to keep it exactly.
_KEEP_PIXELS = 20


def palette_png(image, colors: int) -> bytes:
    """``image`` as a palette PNG: the book's colours that it holds (at least a few
    pixels of each, exactly), plus ``colors`` colours fitted to the image by median cut
    for everything else; every pixel takes the nearest palette colour (no dithering).

    A fitted palette alone gives its entries to what covers the most pixels, so two
    thin curves of similar weight (Iso's green and IsoAdam's wine, say) can share one
    averaged entry; keeping the book's colours exact keeps every optimizer its own."""
    import numpy as np
    from PIL import Image

    image = image.convert("RGB")
    pixels = np.asarray(image, dtype=np.uint32)
    codes = (pixels[..., 0] << 16) | (pixels[..., 1] << 8) | pixels[..., 2]
    wanted = np.array([(r << 16) | (g << 8) | b for r, g, b in book_colors()], dtype=np.uint32)
    found, counts = np.unique(codes[np.isin(codes, wanted)], return_counts=True)
    kept = [(int(c) >> 16, (int(c) >> 8) & 255, int(c) & 255) for c, n in zip(found, counts) if n >= _KEEP_PIXELS]
    fitted = image.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    entries = fitted.getpalette()
    palette = list(kept)
    for _, i in sorted(fitted.getcolors(256), reverse=True):          # the most used first
        rgb = tuple(entries[3 * i:3 * i + 3])
        if rgb not in palette and len(palette) < 256:
            palette.append(rgb)
    flat = [v for rgb in palette for v in rgb]
    holder = Image.new("P", (1, 1))
    holder.putpalette(flat + flat[:3] * (256 - len(palette)))   # unused entries repeat the first colour
    quantized = image.quantize(palette=holder, dither=Image.Dither.NONE)
    out = io.BytesIO()
    quantized.save(out, format="PNG", optimize=True)
    return out.getvalue()
