pytest_plugins = ["harness.pytest_fixtures"]

import pytest

from protocol.keeper import MemoryEnsemble


@pytest.hookimpl(tryfirst=True)   # before -m deselects by marker
def pytest_collection_modifyitems(items):
    """A `faults` test (members of the ZooKeeper ensemble killed, the whole ensemble down) takes
    longer than `make test`'s budget allows: it is also `long`, so `make check`'s long-tests stage
    runs it, and `make faults` runs the fault suite alone."""
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(pytest.mark.long)


# Every Keeper-using test of the protocol, the history and the drivers runs on both backends.
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
        from protocol.keeper.zookeeper import ZooKeeperKeeper

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
