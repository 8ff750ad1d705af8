"""pytest fixtures shared by every test folder: real ZooKeeper servers, chrooted clients, real
ClickHouse replicas, Spark.

One standalone server serves the whole run (start-up costs ~1 s); every test gets its own
chroot under it, so tests never see each other's znodes. ``ZK_HOSTS`` swaps the local server
for an external ensemble. ClickHouse replicas a test asks for live in that test's chroot.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest

from harness.zookeeper import ZooKeeperEnsemble, ZooKeeperServer, external_hosts


@pytest.fixture(scope="session")
def zk_server():
    """The local ZooKeeper server of this run, for what needs its files (the transaction log)."""
    if external_hosts():
        pytest.skip(f"ZK_HOSTS={external_hosts()} names an external ensemble; its transaction log is not readable here")
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture(scope="session")
def zk_server_hosts(request):
    """``host:port`` of a ZooKeeper server for this test run (started here unless ZK_HOSTS is set)."""
    return external_hosts() or request.getfixturevalue("zk_server").hosts


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


@pytest.fixture
def zk_ensemble_chroot(zk_ensemble):
    """A connection string to the 3-server ensemble (every member), chrooted to a fresh namespace.
    Every member is running before the test and again after it (a test that stops members need
    not restart them on failure); the namespace is deleted after."""
    from kazoo.client import KazooClient

    zk_ensemble.start()   # starts only the members that are down, then waits for a quorum
    path = f"/tests/{uuid.uuid4().hex[:12]}"
    root = KazooClient(hosts=zk_ensemble.hosts, timeout=10)
    root.start(timeout=15)
    root.ensure_path(path)
    root.stop()
    root.close()
    try:
        yield f"{zk_ensemble.hosts}{path}"
    finally:
        zk_ensemble.start()
        root = KazooClient(hosts=zk_ensemble.hosts, timeout=10)
        root.start(timeout=15)
        root.delete(path, recursive=True)
        root.stop()
        root.close()


@pytest.fixture(scope="session")
def clickhouse_command():
    """The clickhouse-server command of this run; skips, saying how to install one, when there is none."""
    from harness.clickhouse import ClickHouseUnavailable, server_command, server_version

    try:
        command = server_command()
        server_version(command)
    except ClickHouseUnavailable as e:
        # Only a missing or unusable binary skips; `make setup` installs one, so CI never skips.
        pytest.skip(str(e))
    return command


@pytest.fixture
def clickhouse_cluster(clickhouse_command, zk_chroot):
    """Start real ClickHouse replicas in this test's own ZooKeeper namespace; stopped after the test.

    ``clickhouse_cluster(2)`` starts r1 and r2, ``clickhouse_cluster(["a", "b", "c"])`` names them;
    keyword arguments go to ``ClickHouseCluster`` (``shard``, ``start_timeout``...). A second call
    starts another cluster in the same namespace: give it other replica names or another shard.
    """
    from harness.clickhouse import ClickHouseCluster

    with contextlib.ExitStack() as clusters:
        def start(replicas: int | list[str] = 2, **kwargs) -> ClickHouseCluster:
            names = [f"r{i}" for i in range(1, replicas + 1)] if isinstance(replicas, int) else list(replicas)
            return clusters.enter_context(ClickHouseCluster(zk_chroot, names, **kwargs))

        yield start


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (start-up costs 4-10 s)."""
    from harness.spark import spark_session

    session = spark_session("tests")
    yield session
    session.stop()
