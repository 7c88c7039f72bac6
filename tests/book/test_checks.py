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
