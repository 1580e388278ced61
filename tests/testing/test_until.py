"""`epochlog.testing.until`, the one bounded wait of the harness and the tests: it returns what
the check found, asks again after the errors of a process not ready yet, lets any other error
through at once, and when time runs out says what it waited for, the last error and the test's
own account of what it saw."""

from __future__ import annotations

import pytest

from epochlog.testing import WaitTimeout, until


def test_returns_the_first_answer_that_is_not_none_or_false() -> None:
    answers = iter([None, False, 0, 7])
    assert until(lambda: next(answers), "an answer", 5.0, interval_s=0) == 0


def test_asks_again_after_a_connection_error_or_a_failed_assertion() -> None:
    tries = iter([ConnectionRefusedError("refused"), AssertionError("not yet"), "ready"])

    def check() -> str:
        got = next(tries)
        if isinstance(got, BaseException):
            raise got
        return got

    assert until(check, "ready", 5.0, interval_s=0) == "ready"


def test_any_other_error_goes_through_at_once() -> None:
    def check() -> None:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        until(check, "never", 60.0)


def test_running_out_names_what_it_waited_for_the_last_error_and_the_detail() -> None:
    def check() -> None:
        raise ConnectionRefusedError("refused")

    with pytest.raises(WaitTimeout) as caught:
        until(check, "broker 2 to lead", 0.05, interval_s=0.01, detail=lambda: "ISR [1, 3]")
    text = str(caught.value)
    assert "waiting for broker 2 to lead" in text
    assert "ConnectionRefusedError: refused" in text and text.endswith("\nISR [1, 3]")
    assert isinstance(caught.value, AssertionError)  # a test's failure, as pytest shows it
