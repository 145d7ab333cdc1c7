"""``ARBITER_SIGNAL_FLUSH_S`` that is not a finite number >= 0 (issue 40 item 3). Before: ``inf`` killed the
watcher thread with ``OverflowError`` and a SIGTERM never ended the process (the dispatching threads waited for
an end that never came); ``nan`` was taken as 0 s, the last flush was not waited for and every count of the
interval was dropped while the report named the setting ``=0``. Now such a value is refused with one warning
naming the variable and the value, the default (10 s) is used, a finite value past the most (3600 s) is capped
to it, and the process ends by the signal with every count written. Real processes, real SIGTERMs, real SQLite
files (docs/reliability.md, "Signals")."""
from __future__ import annotations

import signal
import sqlite3
import time

import pytest

from tests.store.test_signals import _ended, _start, _total


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "abc", "1e300"])
def test_a_signal_flush_setting_that_is_not_a_finite_number_is_refused_and_sigterm_still_ends_the_process(
        tmp_path, value):
    db = str(tmp_path / "registry.db")
    proc = _start("wait_for_signal", db, 500, ARBITER_SIGNAL_FLUSH_S=value)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, err = _ended(proc, 60)
    assert code == -signal.SIGTERM, err
    assert time.monotonic() - started < 30, err
    assert "OverflowError" not in err and "Traceback" not in err, err
    assert _total(db) == 500, err  # nan was 0 s: the last flush was not waited for, the 500 counts dropped
    warnings = [line for line in err.splitlines() if "ARBITER_SIGNAL_FLUSH_S" in line]
    assert len(warnings) == 1, err  # one warning, at the start, naming the variable and the value
    assert f"ARBITER_SIGNAL_FLUSH_S={value!r}" in warnings[0], err
    assert ("using the default, 10 s" if value != "1e300" else "using 3600") in warnings[0], err


def test_the_loss_report_names_the_setting_as_given_and_the_wait_it_gave(tmp_path):
    """The report of counts a locked registry did not take names the wait and ARBITER_SIGNAL_FLUSH_S as set
    (before: ``ARBITER_SIGNAL_FLUSH_S=0`` for a setting of ``nan``)."""
    db = str(tmp_path / "registry.db")
    proc = _start("wait_for_signal", db, 500, ARBITER_SIGNAL_FLUSH_S="0.5")
    locker = sqlite3.connect(db, timeout=30)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        proc.send_signal(signal.SIGTERM)
        code, err = _ended(proc, 30)
    finally:
        locker.rollback()
        locker.close()
    assert code == -signal.SIGTERM, err
    assert "SIGTERM: 500 dispatch count(s) not written" in err, err
    assert "The signal waited 0.5 s for them; ARBITER_SIGNAL_FLUSH_S sets how long (now '0.5')" in err, err
