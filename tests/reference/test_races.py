"""Racing profiles (reference/races.py) and the replication lag they record (reference/lag.py):
the fixed protocol holds under them, unsynced reads are excused only what the spec excuses,
and a switch's history is refused by the in-process oracle."""

import pytest

from reference.__main__ import main
from reference.races import PROFILES, racing_history

SMALL = {"steps": 80, "blocks": 16}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_fixed_protocol_holds_under_each_profile(tmp_path, profile):
    run = racing_history(tmp_path, profile, 0, **SMALL)
    assert run["oracle_violations"] == 0, run["oracle_sample"]
    assert run["actions"].get("query", 0) > 0


def test_unsynced_queries_record_lag_and_without_it_r2_fails(tmp_path):
    """The lag rows are what stands between an unsynced read and a reported loss: drop them and
    the same history shows misses (so the excuse is used, and is all that is excused)."""
    from reference.keeper import MemoryEnsemble
    from reference.oracle import violations
    from reference.races import profile_of, race, racing_cluster
    c = racing_cluster(MemoryEnsemble().connect, tmp_path, profile_of("racing"), 0)
    try:
        race(c, profile_of("racing"), 0, **SMALL)
        c.snapshot()
        assert c.history.tables["query_lag"]
        assert violations(c.history, 2) == []
        c.history.tables["query_lag"] = []
        assert any("missed row" in p for p in violations(c.history, 2))
    finally:
        c.close()


@pytest.mark.parametrize("profile, seed, switch", [
    ("racing", 0, "filter_with_stale_cache"),
    ("leaving", 1, "restart_keeps_foreign_parts"),   # the down-leaver rule on the step clock
    ("allocating", 0, "blind_write"),                # the `rival` action's two allocators
])
def test_switch_refused_by_oracle(tmp_path, profile, seed, switch):
    """The same profile and seed holds without the switch (test_fixed_protocol_holds_under_each_profile
    runs seed 0; leaving 1 is checked here)."""
    run = racing_history(tmp_path / "broken", profile, seed, frozenset({switch}), **SMALL)
    assert run["oracle_violations"] > 0
    if seed:
        fixed = racing_history(tmp_path / "fixed", profile, seed, **SMALL)
        assert fixed["oracle_violations"] == 0, fixed["oracle_sample"]


def test_cli_profile(tmp_path, capsys):
    args = ["run", "--profile", "racing", "--replicas", "4", "--buckets", "4", "--blocks", "16", "--rows", "4",
            "--months", "3", "--steps", "80", "--history", str(tmp_path / "h")]
    assert main(args) == 0
    assert (tmp_path / "h" / "query_lag.parquet").exists()
    assert main(args[:-2] + ["--bug", "filter_with_stale_cache"]) == 1
    assert main(["run", "--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
