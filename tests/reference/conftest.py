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
