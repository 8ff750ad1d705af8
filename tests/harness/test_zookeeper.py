import os

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from harness.ports import port_is_free
from harness.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.zookeeper


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_standalone_server_serves_and_is_gone_after_stop():
    with ZooKeeperServer() as zk:
        port, pid = zk.port, zk.pid
        client = KazooClient(hosts=zk.hosts)
        client.start(timeout=15)
        client.create("/selective/config", b'{"replication_factor": 2}', makepath=True)
        assert client.get("/selective/config")[0] == b'{"replication_factor": 2}'
        client.stop()
        client.close()
        assert not port_is_free(port)
    assert port_is_free(port)
    assert not _process_alive(pid)


def test_server_is_stopped_when_the_body_raises():
    server = ZooKeeperServer()
    with pytest.raises(RuntimeError):
        with server:
            pid = server.pid
            raise RuntimeError("test failure inside the with block")
    assert not _process_alive(pid)
    assert port_is_free(server.port)


def test_each_test_has_its_own_namespace(zk_client, zk_chroot, zk_server_hosts):
    zk_client.create("/assignments/202401_0", b"replica1,replica3", makepath=True)
    namespace = zk_chroot[len(zk_server_hosts):]
    root = KazooClient(hosts=zk_server_hosts)
    root.start(timeout=15)
    try:
        assert root.exists("/assignments/202401_0") is None
        assert root.get(f"{namespace}/assignments/202401_0")[0] == b"replica1,replica3"
    finally:
        root.stop()
        root.close()


def test_create_twice_raises_node_exists(zk_client):
    zk_client.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        zk_client.create("/a", b"2")


@pytest.mark.slow
def test_ensemble_keeps_serving_with_one_member_stopped(zk_ensemble):
    client = KazooClient(hosts=zk_ensemble.hosts, timeout=10)
    client.start(timeout=20)
    try:
        client.create("/ensemble-test", b"before")
        leader = zk_ensemble.leader()
        assert leader is not None
        zk_ensemble.stop_member(leader)
        assert zk_ensemble.modes()[leader] is None
        client.retry(client.set, "/ensemble-test", b"after")  # ConnectionLoss while it reconnects is expected
        assert client.retry(client.get, "/ensemble-test")[0] == b"after"
        assert sum(1 for m in zk_ensemble.modes().values() if m) == 2
        zk_ensemble.start_member(leader)
        assert all(zk_ensemble.modes().values())
    finally:
        client.stop()
        client.close()
