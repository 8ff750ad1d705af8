"""Fixtures for reference tests: every Keeper-using test runs on both backends."""

import pytest

from reference.keeper import MemoryEnsemble


@pytest.fixture(params=["memory", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def connect(request):
    """A factory of Keeper sessions on one fresh namespace, all closed after the test.
    `connect.expire(session)` expires a session from the server side."""
    sessions = []
    if request.param == "memory":
        ensemble = MemoryEnsemble()

        def make():
            sessions.append(ensemble.connect())
            return sessions[-1]

        make.expire = lambda k: ensemble.expire(k.session_id)
    else:
        from reference.keeper.zookeeper import ZooKeeperKeeper

        hosts = request.getfixturevalue("zk_chroot")

        def make():
            sessions.append(ZooKeeperKeeper(hosts))
            return sessions[-1]

        make.expire = lambda k: k.expire_session()
    yield make
    for s in sessions:
        try:
            s.close()
        except Exception:
            pass


@pytest.fixture
def make_cluster(connect, tmp_path):
    """make_cluster(bugs) -> (admin, {name: Replica}): r1..r3, P on r1 and r2, maps loaded."""
    from cluster_helpers import build_cluster

    return lambda bugs=frozenset(): build_cluster(connect, tmp_path, bugs)


# The real-ZooKeeper runs of these end-to-end tests take one to two and a half minutes each and
# repeat their in-memory runs on a real server; `make test` runs the in-memory ones (and every
# other reference test on ZooKeeper), `make check` (harness/long_tests.py) both.
LONG_ON_ZOOKEEPER = {"test_live_cluster_with_a_crash_and_a_rebalance", "test_the_checker_used_here_sees_a_lost_row",
                     "test_rfc_table_on_ten_replicas_rebalanced_to_twelve"}


@pytest.hookimpl(tryfirst=True)   # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if item.originalname in LONG_ON_ZOOKEEPER and item.name.endswith("[zookeeper]"):
            item.add_marker(pytest.mark.long)
