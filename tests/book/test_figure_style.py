"""The book's figure style: one distinguishable look per optimizer, for every reader."""

from __future__ import annotations

import itertools

import matplotlib
import numpy as np
import pytest

from isolab.book.figures import style

# Machado, Oliveira & Fernandes (2009), "A physiologically-based model for simulation of
# color vision deficiency", severity 1.0 (dichromacy); they act on linear RGB.
CVD = {
    "protan": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]),
    "deutan": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]),
    "tritan": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]),
}


def srgb_to_linear(c):
    c = np.asarray(c, dtype=float)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def linear_to_lab(rgb):
    M = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]])
    xyz = M @ np.clip(rgb, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def lab(hex_color, vision=None):
    rgb = srgb_to_linear(matplotlib.colors.to_rgb(hex_color))
    if vision is not None:
        rgb = CVD[vision] @ rgb
    return linear_to_lab(rgb)


#: CIE76 distance below which two line colours are hard to tell apart at a glance.
MIN_DELTA_E = 12.0


def test_lab_conversion_matches_known_values():
    assert np.allclose(lab("#ffffff"), [100, 0, 0], atol=0.05)
    assert np.allclose(lab("#ff0000"), [53.24, 80.09, 67.20], atol=0.1)


def test_simulation_merges_red_and_green_for_deutan_vision():
    """The simulation is doing its job: a red/green pair far apart in normal vision
    comes close for a deuteranope."""
    red, green = "#d62728", "#2ca02c"
    normal = np.linalg.norm(lab(red) - lab(green))
    deutan = np.linalg.norm(lab(red, "deutan") - lab(green, "deutan"))
    assert normal > 60 and deutan < normal / 3


@pytest.mark.parametrize("vision", [None, *CVD])
def test_every_pair_of_optimizers_is_distinguishable(vision):
    """Every pair differs in colour by a visible margin in normal vision and in simulated
    protan, deutan and tritan vision (markers and line styles differ as well, below)."""
    looks = list(style.OPTIMIZERS.values())
    close = []
    for a, b in itertools.combinations(looks, 2):
        distance = np.linalg.norm(lab(a.color, vision) - lab(b.color, vision))
        if distance < MIN_DELTA_E:
            close.append((a.name, b.name, round(distance, 1)))
    assert not close, f"optimizers hard to tell apart ({vision or 'normal'} vision): {close}"


def test_no_two_optimizers_share_marker_and_line_style():
    looks = list(style.OPTIMIZERS.values())
    pairs = [(a.name, b.name) for a, b in itertools.combinations(looks, 2) if (a.marker, a.linestyle) == (b.marker, b.linestyle)]
    assert not pairs, f"same marker and line style: {pairs}"


def test_nine_optimizers_named_the_book_way():
    assert list(style.OPTIMIZERS) == ["SGD", "SignSGD", "Adam", "Muon", "Shampoo", "SOAP", "K-FAC", "Iso", "IsoAdam"]
    assert style.look("isoadam").name == "IsoAdam" and style.look("kfac").name == "K-FAC"
    assert style.look("iso_adam").name == "IsoAdam"


def test_unknown_optimizer_names_what_was_passed():
    with pytest.raises(KeyError, match="Lion"):
        style.color("Lion")


def test_line_carries_the_look_and_accepts_overrides():
    kw = style.line("Muon", lw=3, label="Muon (ns)")
    assert kw["color"] == style.color("Muon") and kw["marker"] == "^" and kw["lw"] == 3 and kw["label"] == "Muon (ns)"
    assert "marker" not in style.line("Muon", markers=False)


def test_sequence_is_ordered_light_to_dark():
    colors = style.sequence(5)
    lightness = [linear_to_lab(srgb_to_linear(c[:3]))[0] for c in colors]
    assert all(a > b for a, b in zip(lightness, lightness[1:]))
    with pytest.raises(ValueError, match="n >= 1"):
        style.sequence(0)


def test_rc_meets_the_book_minimums():
    rc = style.rc()
    assert rc["font.size"] >= 10 and rc["xtick.labelsize"] >= 10 and rc["lines.linewidth"] >= 1.5
    assert rc["savefig.dpi"] >= 2 * rc["figure.dpi"]


def test_label_end_writes_at_the_last_finite_point():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    text = style.label_end(ax, [1, 2, 3], [1.0, 2.0, float("nan")], "Iso", optimizer="Iso")
    assert text.xy == (2.0, 2.0) and text.get_color() == style.color("Iso")
    assert style.label_end(ax, [1], [float("nan")], "none") is None


def test_colorbar_is_labelled():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    bar = style.colorbar(fig, ax.imshow(np.eye(3)), ax, "entry")
    assert bar.ax.get_ylabel() == "entry"


def test_chapter_figure_modules_take_colours_from_the_style():
    """isolab/book/figures/chNN.py name optimizers and roles; only style.py holds colours."""
    import re
    from pathlib import Path

    literal = re.compile(r"""["']#[0-9a-fA-F]{3,8}["']|\b(?:face|edge)?colou?rs?\s*=\s*["'](?!none["'])""")
    folder = Path(style.__file__).parent
    bad = {p.name: literal.findall(p.read_text()) for p in sorted(folder.glob("ch*.py"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"colour literals in chapter figure modules: {bad}"


def test_importing_the_library_does_not_import_the_book():
    """The library a training script imports (isolab, optim, nn, distributed, linalg) loads
    nothing of isolab.book, the chapters' code."""
    import subprocess
    import sys

    code = ("import isolab, isolab.optim, isolab.nn, isolab.distributed, isolab.linalg, sys; "
            "print(any(m.startswith('isolab.book') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_contrast_is_the_wcag_ratio():
    assert style.contrast("black", "white") == pytest.approx(21.0)
    assert style.contrast("#767676", "#FFFFFF") == pytest.approx(4.54, abs=0.01)  # the WCAG reference grey
    assert style.contrast("#CC6677", "white") == style.contrast("white", "#CC6677")


@pytest.mark.parametrize("color", ["#DDCC77", "#88CCEE", "#EE7733", "#CC6677", "#117733", "black"])
def test_text_color_reaches_the_contrast_and_keeps_the_hue(color):
    out = style.text_color(color)
    assert style.contrast(out, style.ROLES["background"]) >= 4.5
    rgb, new = np.asarray(matplotlib.colors.to_rgb(color)), np.asarray(matplotlib.colors.to_rgb(out))
    k = new.max() / rgb.max() if rgb.max() > 0 else 1.0
    assert np.allclose(new, k * rgb, atol=1e-9) and k <= 1  # darkened, same hue
    if style.contrast(color, "white") >= 4.5:
        assert out == color  # readable colours are left as they are


def test_spread_labels_keeps_order_gap_and_ceiling():
    values = [0.99, 0.85, 0.37, 0.10]
    pos = style.spread_labels(values, 0.2, upper=0.98)
    order = np.argsort(values)
    assert list(np.argsort(pos)) == list(order) and max(pos) <= 0.98
    assert np.diff(np.sort(pos)).min() >= 0.2 - 1e-12
    assert np.allclose(style.spread_labels([0.0, 1.0, 2.0], 0.5), [0.0, 1.0, 2.0])  # far apart: unchanged
    pos = style.spread_labels(np.array([-1.4, -1.3, -1.0, -11.0, -12.7, -15.6]), 0.9, upper=0.2)  # Chapter 8's
    top = np.sort(pos)
    assert np.all(np.diff(top) >= 0.9 - 1e-12) and top[-1] <= 0.2


@pytest.mark.parametrize("chapter", ["ch01", "ch02", "ch04", "ch06", "ch07", "ch09", "ch12"])
def test_heroes_write_no_text_too_light_to_read(chapter):
    """Every label of a chapter's opening figure reaches 4.5:1 against the page (the
    light end of the sequential map and the pale optimizer colours pass through
    :func:`style.text_color`)."""
    import importlib

    from matplotlib.text import Text

    fig = importlib.import_module(f"isolab.book.figures.{chapter}").hero()
    light = sorted({(t.get_text()[:25], round(style.contrast(t.get_color(), "white"), 2)) for t in fig.findobj(Text)
                    if t.get_visible() and t.get_text().strip() and style.contrast(t.get_color(), "white") < 4.5})
    assert not light, f"text under 4.5:1 contrast: {light[:6]}"
