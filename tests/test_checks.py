"""isolab.checks: a section's checks printed as claim, measured, expected."""

import numpy as np
import pytest

from isolab.checks import Check, format_report, report


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
