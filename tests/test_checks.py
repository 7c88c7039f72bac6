"""isolab.checks: a section's checks printed as claim, measured, expected."""

import numpy as np
import pytest

from isolab.checks import Check, decade, format_report, report


def test_report_aligns_columns_and_says_whether_each_claim_holds(capsys):
    report([Check("a short claim", "0.13", "> 0.01", True), Check("a much longer claim here", "2e-12", "< 1e-10", False)],
           title="Section 1")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Section 1"
    assert lines[1].split() == ["claim", "measured", "expected", "holds"]
    assert lines[2].startswith("a short claim ") and lines[2].endswith("  yes")
    assert lines[3].endswith("  NO")
    assert len({len(line) for line in lines[1:3]}) == 1 or lines[1].index("measured") < len(lines[2])
    # the measured column is right-aligned to one edge
    assert lines[2].index("0.13") + 4 == lines[3].index("2e-12") + 5


def test_report_accepts_numpy_booleans_and_rejects_other_rows():
    assert "yes" in format_report([Check("c", "1", "1", np.bool_(True))])
    with pytest.raises(TypeError, match="Check rows"):
        format_report([("claim", "1", "1", True)])
    with pytest.raises(TypeError, match="must be a bool"):
        format_report([Check("claim", "1", "1", 1)])
    with pytest.raises(ValueError, match="at least one"):
        format_report([])


@pytest.mark.parametrize("value, text", [(4.7e-12, "1e-12"), (9.99e-3, "1e-03"), (1.0, "1e+00"), (250.0, "1e+02"),
                                         (-3e-5, "-1e-05"), (0.0, "0"), (float("nan"), "nan")])
def test_decade(value, text):
    assert decade(value) == text
