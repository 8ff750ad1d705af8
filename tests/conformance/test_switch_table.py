"""The ci protocol machine catches every switch of the RFC's design on the spec's invariants
alone (no state graph to check its steps against), and holds with none: the switch table of
`python -m conformance --switch-table --profile ci` (conformance/switch_table.py), inside make test.

Each switch must fail an invariant it breaks: the one TLC reports on the switch's variant
(spec/FINDINGS.md), or another the same fault breaks on a longer walk (a CLONE that copies only
the source's parts also misses a DROP the source had applied: DropsAppliedInv; a CANCEL that
drops the target at once also drops a copy a running query reads: CleanupSafeInv)."""

import os

import pytest
from hypothesis import settings

os.environ.setdefault("CONFORMANCE_PROFILE", "ci")

from conformance.__main__ import PROTOCOL_SWITCHES  # noqa: E402
from conformance.machines import profile  # noqa: E402
from conformance.switch_table import protocol_row  # noqa: E402

BROKEN_BY = {
    "filter_with_stale_cache": {"OwnersCompleteInv", "QueryNoMissingInv"},
    "clone_from_source_only": {"OwnersCompleteInv", "DropsAppliedInv", "MutationsAppliedInv"},
    "insert_without_assignment_check": {"NoAckedBlockLostInv", "OwnersCompleteInv"},
    "route_to_clone_target": {"QueryNoMissingInv"},
    "source_stops_at_switch": {"QueryNoMissingInv", "OwnersCompleteInv"},
    "cancel_drops_target_at_once": {"NoForeignPartsInv", "CleanupSafeInv"},
    "clone_ignores_skipped_entries": {"MutationsAppliedInv", "DropsAppliedInv"},
    "serve_before_map_loaded": {"QueryNoMissingInv"},
    "switch_without_catchup": {"NoAckedBlockLostInv", "OwnersCompleteInv"},
    "cleanup_no_delay": {"CleanupSafeInv"},
    "filter_skips_global": {"GlobalEntriesAppliedInv"},
    "no_dedup": {"NoDuplicateRowsInv", "QueryNoDuplicateInv"},
}


def test_every_switch_the_machine_drives_is_in_the_table():
    assert set(BROKEN_BY) == set(PROTOCOL_SWITCHES)


def test_ci_machine_holds_with_no_switch_and_completes_migrations_with_traffic():
    r = protocol_row(None, profile())
    assert not r["caught"], r["walk"]
    # Most walks take a migration from CLONE to CLEANUP, and about half with an INSERT in CLONE and
    # a query around the SWITCH (the uniform machine: 1 of ~43 and none; the directed walks before
    # issue 18's weights and swarm: about a half and a quarter).
    assert r["migrations_completed"] * 2 >= r["walks"], r
    assert r["migrations_completed_with_writes_and_queries"] * 3 >= r["walks"], r


@pytest.mark.parametrize("switch", PROTOCOL_SWITCHES)
def test_ci_machine_catches_the_switch_on_invariants_alone(switch):
    # The ci profile's walks, up to 300 of them, stopping at the first that fails: derandomized
    # walks still differ from one process to another (str hashing orders the sets the rules pick
    # instances from), and F6, found at walk 57 of 60 by `python -m conformance --switch-table`,
    # was missed by 71 walks in a fresh clone's make test, where F7 was missed too.
    r = protocol_row(switch, settings(profile(), max_examples=300))
    assert r["caught"], f"{switch} not caught in {r['walks']} walks"
    assert r["invariant"] in BROKEN_BY[switch], r["walk"]
