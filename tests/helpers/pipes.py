"""What the tests of the pipelined calls share (tests/store/test_pipe.py, test_router.py):
a job runner that runs a job inline, as the scheduler's Redis thread would off the loop,
and a wait on the asyncio loop."""

from __future__ import annotations

import asyncio
from typing import Any


def run_job_inline(fn: Any, done: Any) -> None:
    """``run_job`` of RedisPipe and PipeRouter: ``fn()`` at once, ``done(ok, value)``."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - handed to done, as the Redis thread does
        done(False, exc)
    else:
        done(True, value)


async def until(pred: Any, secs: float = 10.0) -> None:
    """Wait on the running loop until ``pred()``; AssertionError after ``secs``."""
    for _ in range(int(secs / 0.005)):
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")
