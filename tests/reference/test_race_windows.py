"""The windows a racing run opens (reference/windows.py) and the ones it forces on half the
seeds (reference/race_windows.py, issue 37): the `windows` profiles open each window they list
on at least half of seeds 0-3, a forced seed says what it forced, and a window opened at RF 1
is where a weakened SWITCH gate shows in the history."""

import pytest

from lab.teeth import SIZE
from lab.window_coverage import coverage, short
from reference.races import racing_history
from reference.windows import WINDOWS, forced


def test_the_windows_profiles_open_every_window_they_force_on_half_the_seeds():
    cov = coverage(["windows", "windows_rf1"], 4, say=lambda m: None)
    assert short(cov, 4) == []
    assert cov["windows"]["repair_racing_loss"]   # opened only where forced: a loss is drawn rarely


@pytest.mark.parametrize("seed", [0, 1])
def test_a_forced_seed_says_what_it_forced_and_the_others_force_nothing(tmp_path, seed):
    run = racing_history(tmp_path, "windows", seed, **SIZE)
    tried = {k.removeprefix("forced ").removesuffix(" missed") for k in run["actions"] if k.startswith("forced ")}
    assert tried == (set(WINDOWS) if forced(seed) else set())
    assert run["oracle_violations"] == 0


def test_a_query_the_clone_target_reads_itself_misses_rows_the_history_shows(tmp_path):
    """route_to_clone_target (F5) on the forced seed 0 of windows_rf1: the target pulled the
    partition's entries before it became one (skipped them), so its own copy lacks rows no lag
    excuses; the same run fixed holds."""
    broken = racing_history(tmp_path / "broken", "windows_rf1", 0, frozenset({"route_to_clone_target"}), **SIZE)
    fixed = racing_history(tmp_path / "fixed", "windows_rf1", 0, **SIZE)
    assert broken["actions"].get("forced query_at_clone_target") == 1
    assert "QueryNoMissingInv" in broken["oracle_invariants"] and fixed["oracle_violations"] == 0


def test_at_rf_1_a_switch_without_its_catch_up_loses_rows_the_history_shows(tmp_path):
    """switch_without_catchup (F23's gate dropped) on the seed-0 run of windows_rf1: the source's
    CLEANUP deletes the only copy of what the target had still queued; the same run fixed holds."""
    broken = racing_history(tmp_path / "broken", "windows_rf1", 0, frozenset({"switch_without_catchup"}), **SIZE)
    fixed = racing_history(tmp_path / "fixed", "windows_rf1", 0, **SIZE)
    assert "OwnersCompleteInv" in broken["oracle_invariants"] and fixed["oracle_violations"] == 0
