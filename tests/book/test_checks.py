"""isolab.book.checks: a section's checks shown as one verdict; a failed claim of the book raises."""

import numpy as np
import pytest

from isolab.book.checks import Check, ClaimFailed, Report, format_report, refuted, report, reproduced


def test_the_text_form_is_the_verdict_then_claim_measured_expected(capsys):
    report([Check("a short claim", "0.13", "> 0.01", True), Check("a longer claim", "2e-12", "< 1e-10", True)],
           title="§1.1")
    assert capsys.readouterr().out.splitlines() == [
        "✓ §1.1: 2 claims hold",
        "  ✓ a short claim",
        "      measured 0.13; expected > 0.01",
        "  ✓ a longer claim",
        "      measured 2e-12; expected < 1e-10",
    ]


def test_one_claim_is_its_own_verdict_and_a_refuted_source_claim_reads_as_its_verdict():
    shown = Report([Check("the gap is small", "< 1e-12", "< 1e-12", True),
                    refuted("the paper", "Iso is best at 40 layers", "IsoAdam 4.05", "Iso", False)])
    first = shown.text().splitlines()[0]
    assert first == "✓ the gap is small; the paper: Iso is best at 40 layers — refuted"
    assert "  ✗ the paper: Iso is best at 40 layers — refuted" in shown.text().splitlines()
    assert "NO" not in shown.text() and "yes" not in shown.text()
    assert Report([reproduced("the blog", "x", "1", "1", True)]).text().startswith("the blog: x — reproduced")


def test_a_failed_claim_of_the_book_raises_naming_it_and_prints_the_table(capsys):
    with pytest.raises(ClaimFailed, match=r"the book's claim does not hold: a longer claim \(measured 2e-12; "
                                          r"expected < 1e-14\)"):
        report([Check("a short claim", "0.13", "> 0.01", True), Check("a longer claim", "2e-12", "< 1e-14", False)])
    assert "✗ a longer claim" in capsys.readouterr().out


def test_a_source_claim_that_changes_its_verdict_raises():
    with pytest.raises(ClaimFailed, match="the book says 'the paper: Iso is best' is refuted, but here it holds"):
        report([refuted("the paper", "Iso is best", "Iso 3.1", "Iso", True)])
    with pytest.raises(ClaimFailed, match="is reproduced, but here it fails"):
        report([reproduced("the paper", "Iso is best", "Adam 3.1", "Iso", False)])


def test_the_html_form_folds_the_claims_under_the_verdict_and_escapes_them():
    page = Report([Check("a < b & c", "1", "> 0", True), Check("d", "2", "2", True)])._repr_html_()
    assert page.startswith('<details class="isolab-checks"><summary>✓ 2 claims hold</summary>')
    assert "a &lt; b &amp; c" in page and page.endswith("</details>")


def test_report_accepts_numpy_booleans_and_rejects_other_rows():
    assert "✓" in format_report([Check("c", "1", "1", np.bool_(True))])
    with pytest.raises(TypeError, match="Check rows"):
        format_report([("claim", "1", "1", True)])
    with pytest.raises(TypeError, match="must be a bool"):
        format_report([Check("claim", "1", "1", 1)])
    with pytest.raises(ValueError, match="at least one"):
        format_report([])
    with pytest.raises(ValueError, match="kind must be one of"):
        format_report([Check("claim", "1", "1", True, "maybe")])


def test_same_prints_the_tolerance_not_the_noise():
    import torch

    from isolab.book.checks import same

    ok = same("x", torch.ones(3), torch.ones(3) + 1e-15)
    assert ok.holds and ok.measured == "largest gap < 1e-12"
    bad = same("x", torch.ones(3), torch.ones(3) + 1e-3)
    assert not bad.holds and "1.0e-03" in bad.measured
    wrong = same("x", torch.ones(3), torch.ones(3, 1))
    assert not wrong.holds and "shapes" in wrong.measured


def test_close_is_relative_to_the_size_of_what_it_compares():
    import torch

    from isolab.book.checks import close, rel_gap

    big = torch.tensor([1e6, 2e6], dtype=torch.float64)
    assert close("x", big, big + 1e-4, rtol=1e-9).holds            # an absolute 1e-4 on 1e6 is 5e-11 relative
    assert not close("x", big, big * (1 + 1e-6), rtol=1e-9).holds
    assert close("x", big, big, rtol=1e-9).measured == "relative gap < 1e-09"
    assert rel_gap(torch.zeros(2), torch.zeros(2)) == 0.0
    assert not close("x", big, big[:1], rtol=1).holds


def test_within_agrees_and_gap():
    from isolab.book.checks import agrees, gap, within

    assert gap([1.0, 2.0], [1.5, 2.0]) == 0.5
    assert within("d", 1e-13, 1e-12) == ("d", "difference below 1e-12", "<= 1e-12", True, "claim")
    assert not within("d", 1e-3, 1e-12).holds and "1.0e-03" in within("d", 1e-3, 1e-12).measured
    assert agrees("v", 0.12345, 0.12345) == ("v", "0.1235", "0.1235", True, "claim")
    assert not agrees("v", 0.1, 0.2).holds


def test_an_unresolved_source_claim_reads_as_such_and_raises_once_the_evidence_decides():
    from isolab.book.checks import unresolved

    shown = Report([unresolved("the paper", "IsoAdam beats Muon", "[-0.01, +0.02]", "contains 0", True)])
    assert shown.text().splitlines()[1] == "  ? the paper: IsoAdam beats Muon — unresolved"
    with pytest.raises(ClaimFailed, match="is unresolved, but here the evidence decides it"):
        report([unresolved("the paper", "IsoAdam beats Muon", "[-0.03, -0.01]", "contains 0", False)])


# ---------------------------------------------------------------- audit: one panel per section
from isolab.book.checks import Audit, ascii_maths, audit, cannot_fail, illustration, unresolved  # noqa: E402


def test_an_audit_names_its_section_counts_its_claims_and_lists_illustrations_apart(capsys):
    audit(r"§1.2 A gradient step moves the features by $-\eta XX^\top G$", [
        illustration(r"$0 \le \cos \le 1$ on this batch", "0.857", "in [0, 1]", True),
        Check(r"one SGD step moves $Y$ by $-\eta XX^\top G$", "largest gap < 1e-13", "< 1e-13", True),
        Check(r"the library agrees", "largest gap < 1e-13", "< 1e-13", True),
    ])
    assert capsys.readouterr().out.splitlines() == [
        r"✓ §1.2 A gradient step moves the features by $-\eta XX^\top G$ — 2 claims · 1 illustration",
        r"  ✓ one SGD step moves $Y$ by $-\eta XX^\top G$",
        "      measured largest gap < 1e-13; expected < 1e-13",
        "  ✓ the library agrees",
        "      measured largest gap < 1e-13; expected < 1e-13",
        r"  · $0 \le \cos \le 1$ on this batch — illustration",
        "      measured 0.857; expected in [0, 1]",
    ]


def test_a_section_that_checks_a_source_counts_every_verdict():
    shown = Audit("§10.7 The paper's claims at 40 layers, one by one", [
        reproduced("the paper", "IsoAdam's best rate is near Adam's", "x1.2", "within x2", True),
        refuted("the paper", "Iso is best at 40 layers", "IsoAdam 4.05", "Iso", False),
        Check("the ranking holds on every seed", "20 of 20", "20 of 20", True)])
    assert shown.verdict() == ("✓ §10.7 The paper's claims at 40 layers, one by one — 1 claim · 1 reproduced · "
                               "1 refuted · 0 unresolved")
    assert Audit("§10.9 Whether IsoAdam beats Muon is open", [
        unresolved("the paper", "IsoAdam beats Muon", "[-0.01, +0.02]", "contains 0", True)]).counts() == (
        "0 reproduced · 0 refuted · 1 unresolved")


@pytest.mark.parametrize("title", ["3 claims hold", "§1.2", "§1.2 2 claims hold here", "1.2 The gradient is XᵀG",
                                   "§1.2 short", "The step, §1.2, is exact"])
def test_an_audit_title_is_a_section_and_a_statement(title):
    with pytest.raises(ValueError, match="title"):
        Audit(title, [Check("c", "1", "1", True)])


@pytest.mark.parametrize("text", ["X^T G", "||x||^2 + 1", "sqrt(d_in/b)", "dy = -eta g", "cos <= 1",
                                  "XXᵀ is the Gram matrix", "‖x‖ grows", "kappa = 100", "isolab's feature_change",
                                  "a lone $ sign"])
def test_ascii_maths_is_found_outside_dollars(text):
    assert ascii_maths(text), text


@pytest.mark.parametrize("text", [r"$X^\top G$", r"$\|x\|^2 + 1$ for one sample", r"near $\sqrt{d_{in}/b}$",
                                  r"$\kappa = 100$, turned by 45°", "the bias does not help", r"a price of \$5"])
def test_latex_between_dollars_is_not_ascii_maths(text):
    assert ascii_maths(text) == [], ascii_maths(text)


def test_an_audit_refuses_ascii_maths_in_a_claim_or_its_title():
    with pytest.raises(ValueError, match=r"'X\^T G is exact'.*caret"):
        Audit("§1.1 The weight gradient is exact", [Check("X^T G is exact", "1", "1", True)])
    with pytest.raises(ValueError, match="title: a caret"):
        Audit("§1.1 The weight gradient is X^T G", [Check("exact", "1", "1", True)])


@pytest.mark.parametrize("row, vacuous", [
    (Check("the step's cos is at most 1", "0.857", "< 1", True), True),
    (Check("the step is downhill", "cos = 0.857", "between 0 and 1", True), True),
    (Check("the gap is measured", "0.3", "≥ 0", True), True),
    (Check("nearly steepest", "cos = 0.992", "> 0.95", True), False),
    (Check("Iso beats Adam", "ratio 0.8", "< 1", True), False),
    (Check("Adam's gap is percent-level", "0.13", "> 0.01", True), False),
    (illustration("a cosine is at most 1", "cos = 0.4", "< 1", True), False),
])
def test_cannot_fail_sees_bounds_every_value_meets(row, vacuous):
    assert bool(cannot_fail(row)) is vacuous


def test_an_audit_refuses_a_claim_that_cannot_fail_but_shows_it_as_an_illustration():
    with pytest.raises(ValueError, match="cannot fail.*illustration"):
        Audit("§1.3 The step is never uphill", [Check("downhill: cos between 0 and 1", "0.8", "< 1", True)])
    shown = Audit("§1.3 The step is never uphill", [illustration("downhill: cos below 1", "0.8", "< 1", True)])
    assert shown.verdict() == "✓ §1.3 The step is never uphill — 1 illustration"


def test_a_failed_claim_or_illustration_raises_naming_it_and_its_section(capsys):
    with pytest.raises(ClaimFailed, match=r"§1\.5 The ratio sets it: 1 of 2 checks fail:\nthe book's claim does "
                                          r"not hold: widths agree \(measured 0\.09; expected < 0\.05\)"):
        audit("§1.5 The ratio sets it", [Check("widths agree", "0.09", "< 0.05", False),
                                          Check("it falls", "4 of 4", "4 of 4", True)])
    assert capsys.readouterr().out.startswith("✗ §1.5 The ratio sets it — 1 of 2 checks fail")
    with pytest.raises(ClaimFailed, match="an illustration fails, so the code that computes it is wrong"):
        audit("§1.3 The step is never uphill", [illustration("cos at most 1", "1.2", "≤ 1", False)])


def test_the_panel_typesets_maths_escapes_text_and_keeps_numbers_whole():
    page = Audit(r"§1.2 The move is $-\eta XX^\top G$ & exact", [
        Check(r"$a < b$ and <b>", "gap < 1e-13", "< 1e-13", True)], table="k   cos\n1   0.9")._repr_html_()
    assert page.startswith('<details class="isolab-audit"><summary>')
    assert r'<span class="math notranslate nohighlight">\(-\eta XX^\top G\)</span> &amp; exact' in page
    assert r'<span class="math notranslate nohighlight">\(a &lt; b\)</span> and &lt;b&gt;' in page
    assert '<span class="isolab-number">1e-13</span>' in page
    assert '<pre class="isolab-audit-table">k   cos\n1   0.9</pre>' in page
    assert "— 1 claim</span></summary>" in page and "The code" not in page   # no cell, no code


def test_the_panel_shows_the_code_of_the_cell_that_called_it(capsys, monkeypatch):
    """IPython keeps each cell's source in linecache (no modification time); the panel
    shows the cell that called audit, however deep the call."""
    import linecache

    shown = []
    cell = ('gap = 0.0\n'
            'def section():\n'
            '    audit("§1.1 The weight gradient is exact", [Check("exact", f"{gap}", "0.0", gap == 0)])\n'
            'section()\n')
    name = "/tmp/ipykernel_0/cell_for_test.py"
    monkeypatch.setitem(linecache.cache, name, (len(cell), None, cell.splitlines(keepends=True), name))
    import isolab.book.checks as checks

    original = checks.Audit

    class Kept(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            shown.append(self)

    monkeypatch.setattr(checks, "Audit", Kept)
    exec(compile(cell, name, "exec"), {"audit": checks.audit, "Check": Check})
    assert shown[0].code == cell.rstrip("\n")
    page = shown[0]._repr_html_()
    assert '<p class="isolab-audit-heading">The code</p><div class="highlight-python notranslate">' in page
    assert "section" in page and "gap" in page


def test_an_audit_in_a_kernel_shows_its_cell_and_prints_the_same_text(tmp_path):
    """Run by nbclient as the book build and nbval run it: the panel's HTML holds the
    cell's own code, and its text is the verdict and the claims."""
    import nbformat
    from nbclient import NotebookClient

    source = ('from isolab.book.checks import Check, audit\n'
              'value = 2 + 2\n'
              'audit(r"§9.9 Two and two make $4$", [Check("the sum is four", f"{value}", "4", value == 4)])')
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert len(outputs) == 1 and outputs[0].output_type == "display_data"
    assert outputs[0].data["text/plain"].splitlines()[0] == "✓ §9.9 Two and two make $4$ — 1 claim"
    html = outputs[0].data["text/html"]
    assert "value</span> <span class=\"o\">=</span> <span class=\"mi\">2</span>" in html
