"""The drivers' end-to-end tests that take minutes on a real ZooKeeper."""

import pytest

# The real-ZooKeeper runs of these end-to-end tests take one to two and a half minutes each and
# repeat their in-memory runs on a real server; `make test` runs the in-memory ones (and every
# other reference test on ZooKeeper), `make check` (harness/long_tests.py) both.
LONG_ON_ZOOKEEPER = {"test_live_cluster_with_a_crash_and_a_rebalance", "test_rfc_table_on_ten_replicas_rebalanced_to_twelve"}


@pytest.hookimpl(tryfirst=True)   # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if item.originalname in LONG_ON_ZOOKEEPER and item.name.endswith("[zookeeper]"):
            item.add_marker(pytest.mark.long)
