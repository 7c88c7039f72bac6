"""isolab.book.explorable: one plotting function, live sliders and precomputed frames."""

import base64
import io
import itertools
import json
import re

import pytest
from PIL import Image

from isolab.book.explorable import MODE_VARIABLE, Explorable, FigureMessage, Slider, registry


def draw_line(fig, slope, offset):
    ax = fig.add_subplot()
    if slope == 0:
        raise FigureMessage("a flat line teaches nothing: pick a slope")
    ax.plot([0, 1], [offset, offset + slope])
    ax.set_ylim(-3, 3)


def make(**kwargs):
    return Explorable(draw_line, [Slider("slope", [0, 1, 2]), Slider("offset", [-1, 1], default=-1)],
                      figsize=(3, 2), **kwargs)


def payload(html):
    match = re.search(r'<script type="application/json" class="isolab-explorable-data">(.*?)</script>', html, re.S)
    assert match, "no frame payload in the static HTML"
    return json.loads(match.group(1))


def decode(uri):
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


# ---------------------------------------------------------------- sliders
@pytest.mark.parametrize("kwargs, message", [
    (dict(name="not valid", values=[1, 2]), "identifier"),
    (dict(name="x", values=[1]), "at least two"),
    (dict(name="x", values=[1, 1]), "repeated"),
    (dict(name="x", values=[1, 2], default=3), "not one of its values"),
])
def test_slider_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Slider(**kwargs)


def test_slider_default_is_middle_value_and_format_falls_back():
    s = Slider("n", [1, 2, 3, 4, 5])
    assert s.default == 3 and s.default_index == 2
    assert Slider("k", ["a", "b"], fmt="{:.2f}").format("a") == "a"


# ------------------------------------------------------------ explorables
def test_explorable_validation():
    with pytest.raises(ValueError, match="max_frames"):
        Explorable(draw_line, [Slider("slope", list(range(30))), Slider("offset", list(range(30)))])
    with pytest.raises(ValueError, match="unique"):
        Explorable(draw_line, [Slider("slope", [1, 2]), Slider("slope", [3, 4])])
    with pytest.raises(TypeError, match="callable"):
        Explorable("draw", [Slider("slope", [1, 2])])
    with pytest.raises(TypeError, match="unknown parameter"):
        make().render(colour=3)


def test_figure_message_replaces_the_plot():
    fig = make().render(slope=0)
    assert not fig.axes
    assert "flat line" in fig.texts[0].get_text()


def test_unexpected_error_becomes_a_message_live_but_raises_when_strict():
    def broken(fig, x):
        raise ZeroDivisionError("boom")

    e = Explorable(broken, [Slider("x", [1, 2])])
    fig = e.render(x=1)
    assert "ZeroDivisionError: boom" in fig.texts[0].get_text()
    with pytest.raises(ZeroDivisionError):
        e.render(strict=True, x=1)
    with pytest.raises(ZeroDivisionError):
        e.static_html()


def test_a_blank_figure_is_reported_not_shown():
    e = Explorable(lambda fig, x: None, [Slider("x", [1, 2])])
    assert "nothing to show" in e.render(x=1).texts[0].get_text()


def test_png_is_a_valid_image_and_changes_with_parameters():
    e = make()
    a, b = e.png(slope=1), e.png(slope=2)
    assert Image.open(io.BytesIO(a)).format == "PNG"
    assert a != b


def test_static_html_covers_every_combination_with_deduplicated_frames():
    e = make()
    html = e.static_html()
    data = payload(html)
    assert [s["name"] for s in data["sliders"]] == ["slope", "offset"]
    assert data["sliders"][1]["default"] == 0
    assert set(data["index"]) == {f"{i}-{j}" for i, j in itertools.product(range(3), range(2))}
    # slope 0 shows the same message whatever the offset: one shared frame
    assert data["index"]["0-0"] == data["index"]["0-1"]
    assert len(data["frames"]) == 5
    for uri in data["frames"]:
        assert decode(uri).format == "PNG"
    default_uri = data["frames"][data["index"]["1-0"]]
    assert f'src="{default_uri}"' in html
    assert html.count('type="range"') == 2


def test_static_frames_respect_the_size_budget():
    with pytest.raises(ValueError, match="over the budget"):
        make(max_static_bytes=1000).static_html()


def test_widget_redraws_when_a_slider_moves():
    pytest.importorskip("ipywidgets")
    box = make().widget()
    sliders = box.children[0].children
    image = box.children[-1]
    before = image.value
    sliders[0].value = 2
    assert image.value != before
    assert bytes(image.value) == make().png(slope=2, offset=-1)


def test_widget_keeps_frames_it_has_drawn(monkeypatch):
    """Dragging a slider back to a setting shows the frame drawn before, without redrawing."""
    pytest.importorskip("ipywidgets")
    e = make()
    box = e.widget()
    slider, image = box.children[0].children[0], box.children[-1]
    first = bytes(image.value)
    slider.value = 2
    calls = []
    monkeypatch.setattr(e, "png", lambda **p: calls.append(p) or b"new")
    slider.value = e.sliders[0].default
    assert bytes(image.value) == first and calls == []
    slider.value = 0
    assert calls and bytes(image.value) == b"new"


def test_layout_is_fitted_at_the_defaults_whatever_is_drawn_first():
    a, b = make(), make()
    a.png(slope=2, offset=1)
    assert a.png(slope=1, offset=1) == b.png(slope=1, offset=1)


@pytest.mark.parametrize("value, mode", [("static", "static"), ("none", "none"), ("", "live"), ("LIVE", "live")])
def test_mode_comes_from_the_environment(monkeypatch, value, mode):
    monkeypatch.setenv(MODE_VARIABLE, value)
    assert Explorable.mode() == mode


def test_invalid_mode_is_rejected(monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "movie")
    with pytest.raises(ValueError, match=MODE_VARIABLE):
        Explorable.mode()


def test_show_displays_frames_in_static_mode(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.setenv(MODE_VARIABLE, "static")
    make().show()
    assert "isolab-explorable" in shown[0].data
    monkeypatch.setenv(MODE_VARIABLE, "none")
    make().show()
    assert len(shown) == 1


def test_shown_keeps_every_shown_explorable_in_order(monkeypatch):
    """A chapter writes ``build().show()`` and keeps no reference; the benchmark times what
    ``shown()`` kept."""
    import gc

    from isolab.book.explorable import shown

    monkeypatch.setenv(MODE_VARIABLE, "none")
    before = len(shown())
    make().show()
    hidden = make()  # built, never shown
    make().show()
    gc.collect()
    kept = shown()[before:]
    assert len(kept) == 2 and hidden not in kept
    assert kept[0]._serial < kept[1]._serial


def test_registry_lists_live_explorables_in_creation_order():
    a, b = make(), make()
    alive = registry()
    assert alive.index(a) < alive.index(b)


def test_margins_found_at_the_defaults_survive_clearing_and_no_layout_engine_remains():
    e = make()
    fig = e.render(slope=2, offset=1)
    assert fig.get_layout_engine() is None, "a layout engine makes every savefig draw twice"
    assert e._margins["left"] != 0.125 or e._margins["bottom"] != 0.11, "tight_layout margins were not kept"
    assert fig.subplotpars.left == pytest.approx(e._margins["left"])


def test_redraw_budget_depends_on_whether_the_figure_trains():
    assert make().redraw_budget_ms == 150
    assert make(trains=True).redraw_budget_ms == 300


# ---------------------------------------------------------------- main slider, promises
from isolab.book.explorable import Promise, constant, nondecreasing, nonincreasing, always  # noqa: E402


def _promising(measure, holds, text="the value stays put", caption=None, main="t"):
    def draw(fig, t, k):
        fig.add_subplot().plot([0, 1], [t, k])
    return Explorable(draw, [Slider("t", [0, 1, 2, 3]), Slider("k", [1, 2])], main=main,
                      caption=caption if caption is not None else f"Move t: {text}.",
                      promises=[Promise(text, measure, holds)])


def test_a_kept_promise_reports_nothing():
    e = _promising(lambda t, k: k, constant(atol=0))
    assert e.main_slider.name == "t" and e.broken_promises() == []


def test_a_broken_promise_names_where_it_breaks():
    e = _promising(lambda t, k: k * (1 + 0.1 * t), constant(atol=0.05))
    broken = e.broken_promises()
    assert [b.setting for b in broken] == [{"k": 1}, {"k": 2}]
    assert broken[0].values == [1.0, 1.1, 1.2, 1.3] and "stays put" in str(broken[0])


def test_predicates():
    assert nondecreasing()([1, 1, 2]) and not nondecreasing()([1, 0.9]) and nondecreasing(tol=0.2)([1, 0.9])
    assert nonincreasing()([3, 2, 2]) and not nonincreasing()([1, 2])
    assert constant(rtol=0.1)([10, 10.5]) and not constant(rtol=0.01)([10, 10.5])
    assert always(lambda v: v > 0, "positive")([1, 2]) and not always(lambda v: v > 0, "positive")([1, -1])
    assert "non-decreasing" in repr(nondecreasing())


def test_promises_need_a_main_slider_and_their_words_in_the_caption():
    with pytest.raises(ValueError, match="does not appear in the caption"):
        _promising(lambda t, k: 0, constant(), caption="Something else.")
    with pytest.raises(ValueError, match="name it with main"):
        _promising(lambda t, k: 0, constant(), main=None)
    with pytest.raises(ValueError, match="main='z' is not one of the sliders"):
        _promising(lambda t, k: 0, constant(), main="z")
    with pytest.raises(TypeError, match="Promise objects"):
        Explorable(lambda fig, t: None, [Slider("t", [0, 1])], main="t", promises=["it works"])


def test_website_frames_have_twice_the_pixels_of_their_display_width():
    from isolab.book.explorable import DISPLAY_DPI

    e = Explorable(lambda fig, t: fig.add_subplot().plot([0, 1], [0, t]), [Slider("t", [1, 2])], figsize=(4, 2))
    html_text = e.static_html()
    assert f"width: {4 * DISPLAY_DPI}px" in html_text   # 4 in fits the column: drawn as asked
    from PIL import Image
    images, _ = e.frames()
    assert Image.open(io.BytesIO(images[0])).size[0] >= 2 * 4 * DISPLAY_DPI - 1


def test_the_website_build_refuses_a_broken_promise(monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "static")
    e = _promising(lambda t, k: t, constant(atol=0.5))
    with pytest.raises(AssertionError, match="stays put"):
        e.show()


# ---------------------------------------------------------------- sizes, toggles, palette, alt text
from isolab.book.explorable import COLUMN_PX, DISPLAY_DPI, MIN_TEXT_PX, first_sentence, fit_to_column  # noqa: E402


def test_the_book_s_smallest_text_lands_at_twelve_css_pixels():
    """10 pt (the smallest text test_captions allows) at DISPLAY_DPI CSS px per inch."""
    assert 10 * DISPLAY_DPI / 72 >= MIN_TEXT_PX


def test_a_figure_wider_than_the_column_is_drawn_at_the_column_s_width():
    assert fit_to_column((4, 2)) == (4, 2)
    width, height = fit_to_column((9, 3.6))
    assert width * DISPLAY_DPI == pytest.approx(COLUMN_PX, abs=0.01) and height / width == pytest.approx(0.4, abs=1e-3)
    e = Explorable(lambda fig, t: fig.add_subplot().plot([0, t]), [Slider("t", [1, 2])], figsize=(9, 3.6))
    assert e.requested_figsize == (9, 3.6) and e.figsize == fit_to_column((9, 3.6))
    assert e.render().get_size_inches()[0] == pytest.approx(e.figsize[0])
    with pytest.raises(ValueError, match="positive"):
        fit_to_column((0, 2))


def test_the_page_frame_states_its_width_and_smallest_text():
    def draw(fig, t):
        ax = fig.add_subplot()
        ax.plot([0, t])
        ax.tick_params(labelsize=12)
        ax.set_title("title", fontsize=14)
        ax.text(0, 0, "small" if t == 2 else "", fontsize=10.5)   # only in the second frame

    e = Explorable(draw, [Slider("t", [1, 2])], figsize=(5, 2))
    html = e.static_html()
    assert 'data-figure-width-in="5"' in html and 'data-min-font-pt="10.5"' in html


@pytest.mark.parametrize("values, toggle", [(["Iso", "Muon"], True), ([False, True], True), ([1, 2], False),
                                            ([0.5, 1.0], False)])
def test_names_make_a_toggle_and_numbers_a_range(values, toggle):
    assert Slider("x", values).is_toggle is toggle
    assert Slider("x", values, toggle=not toggle).is_toggle is (not toggle)
    assert Slider("flag", [False, True]).format(True) == "on"


def _choice(**kwargs):
    def draw(fig, optimizer, k):
        fig.add_subplot().plot([0, k], **style_line(optimizer))
    return Explorable(draw, [Slider("optimizer", ["Iso", "IsoAdam", "Muon"], default="Iso"),
                             Slider("k", [1, 2, 3])], figsize=(3, 2), **kwargs)


def style_line(name):
    from isolab.book.figures import style
    return style.line(name)


def test_a_categorical_slider_is_a_group_of_buttons_on_the_page():
    html = _choice().static_html()
    group = re.search(r'<div class="isolab-toggle" role="group" aria-label="optimizer" data-name="optimizer" '
                      r'data-index="0">(.*?)</div>', html)
    assert group, html[:600]
    buttons = re.findall(r'<button type="button"[^>]*data-index="(\d)" aria-pressed="(true|false)">([^<]*)</button>',
                         group.group(1))
    assert buttons == [("0", "true", "Iso"), ("1", "false", "IsoAdam"), ("2", "false", "Muon")]
    assert html.count('type="range"') == 1                     # k stays a range slider


def test_a_categorical_slider_is_toggle_buttons_live():
    widgets = pytest.importorskip("ipywidgets")
    e = _choice()
    box = e.widget()
    toggle, slider = box.children[0].children
    image = box.children[-1]
    assert isinstance(toggle, widgets.ToggleButtons) and isinstance(slider, widgets.SelectionSlider)
    assert toggle.description == "optimizer" and list(toggle._options_labels) == ["Iso", "IsoAdam", "Muon"]
    before = bytes(image.value)
    toggle.value = "Muon"
    assert bytes(image.value) != before and bytes(image.value) == _choice().png(optimizer="Muon")


def test_frames_keep_every_optimizer_s_colour_with_a_small_palette():
    """Eight fitted colours would merge thin curves of similar weight; the book's own
    colours are kept exactly, so Iso and IsoAdam stay two colours."""
    import matplotlib.colors
    import numpy as np

    from isolab.book.figures import style

    def draw(fig, k):
        ax = fig.add_subplot()
        for i, name in enumerate(["SGD", "Adam", "Muon", "Iso", "IsoAdam", "SOAP", "Shampoo"]):
            ax.plot([0, 1], [i, i + k], **style.line(name, markers=False))

    e = Explorable(draw, [Slider("k", [1, 2])], figsize=(5, 2.5), static_colors=8)
    images, _ = e.frames()
    shown = {tuple(p) for p in np.asarray(Image.open(io.BytesIO(images[0])).convert("RGB")).reshape(-1, 3)}
    for name in ["SGD", "Adam", "Muon", "Iso", "IsoAdam", "SOAP", "Shampoo"]:
        rgb = tuple(round(255 * v) for v in matplotlib.colors.to_rgb(style.color(name)))
        assert rgb in shown, f"{name}'s colour {rgb} was lost to the palette"


@pytest.mark.parametrize("text, first", [
    ("Turn θ: the cloud turns. The cosine stays.", "Turn θ: the cloud turns."),
    ("A value of 0.5 is kept! Then more.", "A value of 0.5 is kept!"),
    ("No full stop", "No full stop"),
    ("  spaced \n  out.  Next", "spaced out."),
])
def test_first_sentence(text, first):
    assert first_sentence(text) == first


def test_the_page_image_s_alt_text_is_the_caption_s_first_sentence_or_alt():
    caption = "Move t: the line tilts. Nothing else moves."
    e = Explorable(lambda fig, t: fig.add_subplot().plot([0, t]), [Slider("t", [1, 2])], figsize=(3, 2),
                   caption=caption)
    assert 'alt="Move t: the line tilts."' in e.static_html()
    e = Explorable(lambda fig, t: fig.add_subplot().plot([0, t]), [Slider("t", [1, 2])], figsize=(3, 2),
                   caption=caption, alt="A line whose slope follows t.")
    assert 'alt="A line whose slope follows t."' in e.static_html()
    bare = Explorable(lambda fig, t: fig.add_subplot().plot([0, t]), [Slider("t", [1, 2], label="slope")])
    assert bare.alt == "Explorable figure: slope"


# ---------------------------------------------------------------- phones: panels as strips, clipped text
from isolab.book.explorable import MIN_STRIP, NARROW_WIDTH_IN, clipped_texts, drawn_texts  # noqa: E402


def draw_three(fig, t):
    axes = fig.subplots(1, 3)
    for i, ax in enumerate(axes):
        ax.plot([0, 1], [0, t * (i + 1)])
        ax.set(title=f"panel {i}", xlabel="x", ylabel="y")
    image = axes[2].imshow([[0, t], [t, 0]])
    fig.colorbar(image, ax=axes[2])


def test_panels_become_strips_each_holding_its_axes_and_a_colourbar_joins_its_panel():
    e = Explorable(draw_three, [Slider("t", [1, 2])], figsize=(7.4, 2.6), narrow="panels")
    cuts = e.panel_strips()
    assert len(cuts) == 4 and cuts[0] == 0 and cuts[-1] == 1 and list(cuts) == sorted(cuts)
    fig = e.render()
    for ax in fig.axes[:3]:
        box = ax.get_position()
        assert any(a <= box.x0 and box.x1 <= b for a, b in zip(cuts, cuts[1:])), (box, cuts)
    assert all(b - a >= MIN_STRIP for a, b in zip(cuts, cuts[1:]))
    html = e.static_html()
    assert f'data-strips="{",".join(f"{c:g}" for c in cuts)}"' in html
    assert 'data-frame-dpi="180"' in html and f'data-display-width="{round(7.4 * DISPLAY_DPI)}"' in html
    assert "data-strips" not in make().static_html()


def test_one_panel_cannot_be_cut_and_narrow_takes_known_layouts():
    with pytest.raises(ValueError, match="has one"):
        make(narrow="panels").panel_strips()
    with pytest.raises(ValueError, match="narrow must be one of"):
        make(narrow="stacked")
    assert make().panel_strips() is None
    assert 10 * 350 / (72 * NARROW_WIDTH_IN) >= 9     # a narrow single panel reads on a phone


def test_clipped_texts_finds_text_off_the_figure_cut_by_its_axes_or_across_a_strip():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.set_xticks([0, 0.5, 1, 5])
    ax.set_xlim(0, 1)                                   # 5 lies outside the view: not drawn
    fig.subplots_adjust(left=0.15, right=0.9, bottom=0.2, top=0.8)
    ax.set_title("a title far too long to fit the width of such a small figure, however it is laid out")
    ax.text(0.86, 0.5, "cut by the axes", clip_on=True, fontsize=8)
    fig.text(0.48, 0.02, "across the cut")
    problems = clipped_texts(fig, strips=(0, 0.5, 1))
    assert any("'a title far too long" in p and "runs off the figure" in p for p in problems), problems
    assert any("'cut by the axes' is cut by its axes" in p for p in problems), problems
    assert any("'across the cut' straddles" in p for p in problems), problems
    assert "5" not in [t.get_text() for t, _ in drawn_texts(fig)]
    fine = Figure(figsize=(4, 2))
    fine.add_subplot().set_title("short")
    fine.tight_layout()
    assert clipped_texts(fine) == []


def test_clipped_text_over_the_grid_names_the_setting():
    def draw(fig, t):
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1])
        ax.set_title("ok" if t == 1 else "a title grown far too long for its little figure, past its edge")

    e = Explorable(draw, [Slider("t", [1, 2], default=1)], figsize=(3, 2))
    assert e.clipped_text() == []
    found = e.clipped_text_over_grid()
    assert len(found) == 1 and found[0].startswith("{'t': 2}: 'a title grown far too long")
