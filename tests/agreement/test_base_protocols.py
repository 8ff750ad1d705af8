"""The base protocol's two parameter sets (issue 36) held to what they name: 18.16's to the
running server's system.merge_tree_settings; 26.x's is read from master's source
(protocol/cleanup_thread.py says where) and has no server here."""

import pytest

from protocol.cleanup_thread import BASE_PROTOCOLS

pytestmark = pytest.mark.zookeeper

# CleanupSettings' fields and the MergeTree setting each one is.
SETTINGS = {"min_logs_to_keep": "min_replicated_logs_to_keep", "max_logs_to_keep": "max_replicated_logs_to_keep",
            "dedup_window": "replicated_deduplication_window",
            "dedup_window_seconds": "replicated_deduplication_window_seconds",
            "old_parts_lifetime": "old_parts_lifetime"}


@pytest.mark.clickhouse
def test_the_18_16_set_is_what_the_running_server_says(clickhouse_cluster):
    c = clickhouse_cluster(["r1"])
    if not c.version().startswith("18.16."):
        pytest.skip(f"CLICKHOUSE_BIN is {c.version()}, not 18.16: its defaults are another release's")
    names = ", ".join(f"'{s}'" for s in SETTINGS.values())
    rows = c.query("r1", f"SELECT name, value FROM system.merge_tree_settings WHERE name IN ({names})")
    server = dict(line.split("\t") for line in rows.splitlines())
    preset = BASE_PROTOCOLS["18.16"]
    assert {s: float(server[s]) for s in SETTINGS.values()} == \
        {s: float(getattr(preset, field)) for field, s in SETTINGS.items()}


def test_the_two_sets_differ_where_the_releases_do():
    old, new = BASE_PROTOCOLS["18.16"], BASE_PROTOCOLS["26.x"]
    # 26.x keeps 100 times the hashes for one 168th of the time, and ten times fewer log entries.
    assert (new.dedup_window, new.dedup_window_seconds) == (100 * old.dedup_window, old.dedup_window_seconds / 168)
    assert (new.min_logs_to_keep, new.max_logs_to_keep) == (old.min_logs_to_keep // 10, old.max_logs_to_keep // 10)
