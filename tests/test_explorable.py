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
    assert f"width: {4 * DISPLAY_DPI}px" in html_text
    from PIL import Image
    images, _ = e.frames()
    assert Image.open(io.BytesIO(images[0])).size[0] >= 2 * 4 * DISPLAY_DPI - 1


def test_the_website_build_refuses_a_broken_promise(monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "static")
    e = _promising(lambda t, k: t, constant(atol=0.5))
    with pytest.raises(AssertionError, match="stays put"):
        e.show()
