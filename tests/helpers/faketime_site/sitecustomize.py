"""Loaded (``PYTHONPATH``) by a crawler the clock-skew tests run under libfaketime
(:func:`procs.faketime_env`).

libfaketime 0.9.10 (Debian 12) and Python 3.11 disagree on two waits: with the monotonic
clock left true (``FAKETIME_DONT_FAKE_MONOTONIC=1``) every ``time.sleep()`` fails with
EINVAL (its ``clock_nanosleep`` on ``CLOCK_MONOTONIC`` with ``TIMER_ABSTIME``); with the
monotonic clock faked too, lock and event waits hang. So the monotonic clock stays true
and ``time.sleep`` waits on an event, which works. Only the wall clock is skewed, as on a
machine whose NTP is off. A harness fix: nothing in the package is changed.
"""

import threading
import time


def _sleep(secs: float) -> None:
    if secs < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(secs)


time.sleep = _sleep
