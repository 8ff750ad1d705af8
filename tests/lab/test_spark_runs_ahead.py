"""lab/spark_runs.py makes its runs in a process of its own, ahead of the checks: a check that
fails must not wait for the runs not made yet (the whole small scale's are about two minutes)."""

import time

import pytest

from lab.spark_runs import _runs_ahead


def test_the_runs_not_made_yet_are_dropped_when_a_check_fails():
    with pytest.raises(RuntimeError, match="a check failed"):
        with _runs_ahead() as ahead:
            made = [ahead.submit(time.sleep, 0.5) for _ in range(10)]
            made[0].result()
            raise RuntimeError("a check failed")
    # one worker: the first has run; the executor hands the worker a few more ahead (three here),
    # which run out; the rest are never started
    assert made[0].done() and not made[0].cancelled()
    assert sum(f.cancelled() for f in made) >= 5


def test_the_runs_come_back_in_the_order_they_were_asked_for():
    with _runs_ahead() as ahead:
        made = [ahead.submit(divmod, n, 3) for n in range(6)]
        assert [f.result() for f in made] == [divmod(n, 3) for n in range(6)]
