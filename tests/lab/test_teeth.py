"""The Spark job's teeth on racing histories (lab/teeth.py): with each broken-variant
switch on, a racing profile's history is refused with the invariant the switch breaks named;
the same profile and seed on the fixed protocol holds. The oracle must agree both ways. Each
history is checked through the job's library entry on one Spark session."""

import contextlib
import io

import pytest

from lab.spark_runs import checked_teeth
from lab.teeth import GAPS, NOT_YET, SIZE, TEETH
from protocol.bugs import DESIGNS
from pyspark_jobs.spark_check import check_folder
from reference.races import racing_history

pytestmark = pytest.mark.spark


def verdict(spark, run) -> set[str]:
    """The invariants the Spark job reports violated on the run's history."""
    with contextlib.redirect_stdout(io.StringIO()):
        r = check_folder(spark, run["history"], 3)
    return {name for name, x in r["invariants"].items() if not x["holds"]}


@pytest.fixture(scope="module")
def fixed_runs(tmp_path_factory):
    """One fixed-protocol run per (profile, seed) the table uses, shared by its cases."""
    cache = {}

    def get(profile, seed):
        if (profile, seed) not in cache:
            cache[profile, seed] = racing_history(tmp_path_factory.mktemp(f"fixed-{profile}-{seed}"), profile, seed,
                                                  **SIZE)
        return cache[profile, seed]
    return get


def test_every_switch_is_in_the_table_or_a_gap():
    # each in one list, the teeth's possibly on several rows (the racing runs are the RFC design's)
    listed = sorted({t.switch for t in TEETH}) + list(GAPS) + list(NOT_YET)
    assert sorted(listed) == sorted(DESIGNS["rfc"])
    assert len({(t.switch, t.profile, t.seed) for t in TEETH}) == len(TEETH)


# make check's spark-check stage checks these teeth's histories (lab/spark_runs.py, each switch's
# first row) with the same assertions: its long tests leave them to it, and check-thorough runs them.
IN_SPARK_CHECK = checked_teeth("small")


def marks(t) -> list:
    if not t.long:
        return []
    return [pytest.mark.long, pytest.mark.thorough] if (t.switch, t.profile, t.seed) in IN_SPARK_CHECK else [pytest.mark.long]


@pytest.mark.parametrize("tooth", [pytest.param(t, id=f"{t.switch}-{t.profile}-{t.seed}", marks=marks(t)) for t in TEETH])
def test_switch_caught_and_fixed_holds(spark, tmp_path, fixed_runs, tooth):
    broken = racing_history(tmp_path / "broken", tooth.profile, tooth.seed, frozenset({tooth.switch}), **SIZE)
    assert broken["oracle_violations"] > 0
    assert tooth.invariant in verdict(spark, broken)
    fixed = fixed_runs(tooth.profile, tooth.seed)
    assert fixed["oracle_violations"] == 0, fixed["oracle_sample"]
    assert verdict(spark, fixed) == set()
