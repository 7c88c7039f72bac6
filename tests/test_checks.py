"""isolab.book.checks: a section's checks printed as claim, measured, expected."""

import numpy as np
import pytest

from isolab.book.checks import Check, format_report, report


def test_report_says_claim_measured_expected_and_whether_each_claim_holds(capsys):
    report([Check("a short claim", "0.13", "> 0.01", True), Check("a longer claim", "2e-12", "< 1e-10", False)],
           title="Section 1")
    assert capsys.readouterr().out.splitlines() == [
        "Section 1",
        "yes  a short claim",
        "     measured 0.13; expected > 0.01",
        "NO   a longer claim",
        "     measured 2e-12; expected < 1e-10",
    ]


def test_report_accepts_numpy_booleans_and_rejects_other_rows():
    assert "yes" in format_report([Check("c", "1", "1", np.bool_(True))])
    with pytest.raises(TypeError, match="Check rows"):
        format_report([("claim", "1", "1", True)])
    with pytest.raises(TypeError, match="must be a bool"):
        format_report([Check("claim", "1", "1", 1)])
    with pytest.raises(ValueError, match="at least one"):
        format_report([])


def test_same_prints_the_tolerance_not_the_noise():
    import torch

    from isolab.book.checks import same

    ok = same("x", torch.ones(3), torch.ones(3) + 1e-15)
    assert ok.holds and ok.measured == "largest gap < 1e-12"
    bad = same("x", torch.ones(3), torch.ones(3) + 1e-3)
    assert not bad.holds and "1.0e-03" in bad.measured
    wrong = same("x", torch.ones(3), torch.ones(3, 1))
    assert not wrong.holds and "shapes" in wrong.measured


def test_within_agrees_and_gap():
    from isolab.book.checks import agrees, gap, within

    assert gap([1.0, 2.0], [1.5, 2.0]) == 0.5
    assert within("d", 1e-13, 1e-12) == ("d", "difference below 1e-12", "<= 1e-12", True)
    assert not within("d", 1e-3, 1e-12).holds and "1.0e-03" in within("d", 1e-3, 1e-12).measured
    assert agrees("v", 0.12345, 0.12345) == ("v", "0.1235", "0.1235", True)
    assert not agrees("v", 0.1, 0.2).holds
