"""The report headers a client sees for a multi-turn request."""

from __future__ import annotations

from gateway.compress.compressor import Outcome
from gateway.core.prepare import report_headers


def test_a_reset_reports_its_expected_and_realised_saving() -> None:
    reset = Outcome([], "compressed", 9000, 3000, "forms", reset=True, resets=1, reset_saving=(1647.8, 214.1))
    assert report_headers(reset)["x-mixpr-reset-saving"] == "expected=1648; realised=214"
    assert "x-mixpr-reset-saving" not in report_headers(Outcome([], "compressed", 9000, 3000, "forms"))
