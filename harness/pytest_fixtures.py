"""pytest fixtures shared by every test folder: real ZooKeeper servers, chrooted clients, Spark.

One standalone server serves the whole run (start-up costs ~1 s); every test gets its own
chroot under it, so tests never see each other's znodes. ``ZK_HOSTS`` swaps the local server
for an external ensemble.
"""

from __future__ import annotations

import uuid

import pytest

from .zookeeper import ZooKeeperEnsemble, ZooKeeperServer, external_hosts


@pytest.fixture(scope="session")
def zk_server_hosts():
    """``host:port`` of a ZooKeeper server for this test run (started here unless ZK_HOSTS is set)."""
    hosts = external_hosts()
    if hosts:
        yield hosts
        return
    with ZooKeeperServer() as server:
        yield server.hosts


@pytest.fixture
def zk_chroot(zk_server_hosts):
    """A connection string chrooted to a fresh, empty namespace; the namespace is deleted after."""
    from kazoo.client import KazooClient

    path = f"/tests/{uuid.uuid4().hex[:12]}"
    root = KazooClient(hosts=zk_server_hosts, timeout=10)
    root.start(timeout=15)
    root.ensure_path(path)
    try:
        yield f"{zk_server_hosts}{path}"
    finally:
        root.delete(path, recursive=True)
        root.stop()
        root.close()


@pytest.fixture
def zk_client(zk_chroot):
    """A started kazoo client inside this test's own namespace."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_chroot, timeout=10)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def zk_ensemble():
    """A 3-server loopback ensemble whose members tests may stop and start."""
    with ZooKeeperEnsemble(size=3) as ensemble:
        yield ensemble


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (start-up costs 4-10 s)."""
    from .spark import spark_session

    session = spark_session("tests")
    yield session
    session.stop()
