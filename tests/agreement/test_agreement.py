"""The base protocol held to a real ClickHouse (Debian's clickhouse-server, or CLICKHOUSE_BIN):
each aspect's scenario on both systems, on one ZooKeeper, compared field by field. Every aspect
agrees, or differs only in what it states on purpose."""

import pytest

from agreement.aspects import ASPECTS
from agreement.compare import AGREE, ON_PURPOSE, run
from protocol.log_entry import LogEntry

pytestmark = [pytest.mark.clickhouse, pytest.mark.zookeeper]


@pytest.fixture(scope="module")
def cluster(zk_server_hosts, clickhouse_command):
    """Two replicas for the module: each aspect makes its own tables (own ZooKeeper paths)."""
    from harness.clickhouse import ClickHouseCluster
    with ClickHouseCluster(zk_server_hosts, ["r1", "r2"], session_timeout_ms=3000) as ch:   # CLICKHOUSE_BIN or Debian's
        yield ch


@pytest.fixture(scope="module")
def keeper(zk_server_hosts):
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    k = ZooKeeperKeeper(zk_server_hosts)
    yield k
    k.close()


@pytest.mark.parametrize("aspect", ASPECTS, ids=lambda a: a.name)
def test_aspect(aspect, cluster, keeper, zk_server_hosts, tmp_path):
    from protocol.keeper.zookeeper import ZooKeeperKeeper
    result = run(aspect, cluster, keeper, lambda: ZooKeeperKeeper(zk_server_hosts), tmp_path)
    for f in result.differing:
        print(f"{f}:\n  real:      {result.real[f]}\n  reference: {result.reference[f]}")
    assert result.verdict == (ON_PURPOSE if aspect.differs else AGREE), result.differing
    if aspect.differs:
        assert result.differing == list(aspect.compare)   # it does differ where it says, not by accident
    for text in result.texts:
        LogEntry.parse(text)   # every real entry reads with the reference's codec
