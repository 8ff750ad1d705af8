"""`make bench`, section keeper: ZooKeeper writes per INSERT of a real ClickHouse and of the
reference, side by side, from one run on one ZooKeeper server, counted exactly from the server's
transaction log (harness/zk_txnlog.py), not by the clients.

Two replicas of each (the reference with replication_factor 2: every replica keeps every
partition, as plain replication; and, for selective mode's own cost, 2 of 4), background merges
off so nothing else writes. For each INSERT: the writing replica's requests and ops (a multi is
one request, its sub-ops each an op), and every session's until every replica has the part.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agreement.clickhouse_side import ClickHouseSide
from agreement.reference_side import ReferenceSide
from agreement.scenario import Insert, Settings, Sync
from harness.zk_txnlog import count_writes, read_txnlog, total_writes

CASES = (("existing partition", ("2024-01-15", 21, "b")), ("new partition", ("2024-02-01", 3, "c")))


def _measure(zk, side, writer_session, settle) -> list[dict]:
    side.apply(Insert((("2024-01-15", 21, "a"),)))   # the first partition exists before we count
    settle()
    out = []
    for case, row in CASES:
        first = zk.last_zxid() + 1
        side.apply(Insert((row,)))
        after_insert = zk.last_zxid()
        settle()
        txns = read_txnlog(zk.data_dir, first, zk.last_zxid())
        mine = count_writes(t for t in txns if t.zxid <= after_insert).get(writer_session())
        everyone = total_writes(txns)
        out.append({"case": case, "insert_requests": mine.requests if mine else 0, "insert_ops": mine.ops if mine else 0,
                    "insert_kinds": dict(mine.by_type) if mine else {},
                    "settled_requests": everyone.requests, "settled_ops": everyone.ops})
    return out


def bench_keeper() -> dict:
    from harness.clickhouse import ClickHouseCluster
    from harness.zookeeper import ZooKeeperServer
    from protocol.keeper.zookeeper import ZooKeeperKeeper

    results = {}
    with ZooKeeperServer() as zk, tempfile.TemporaryDirectory(prefix="bench-keeper-") as folder:
        keeper = ZooKeeperKeeper(zk.hosts)
        with ClickHouseCluster(zk.hosts, ["r1", "r2"]) as ch:
            real = ClickHouseSide(ch, keeper, "t", "/clickhouse/tables/real", Settings())
            real.create()
            owner = lambda: keeper.exists("/clickhouse/tables/real/replicas/r1/is_active").ephemeral_owner  # noqa: E731
            results["clickhouse"] = _measure(zk, real, owner, real.sync)
            results["clickhouse_version"] = ch.version()
        for name, replicas in (("reference", ("r1", "r2")), ("reference_selective", ("r1", "r2", "r3", "r4"))):
            ref = ReferenceSide(lambda: ZooKeeperKeeper(zk.hosts), Path(folder) / name, f"/clickhouse/tables/{name}",
                                Settings(), replicas)
            if len(replicas) > 2:   # 2 of 4: selective mode proper
                ref.c.table = type(ref.c.table)(ref.c.table.name, ref.c.table.columns, ref.c.table.partition_by,
                                                ref.c.table.order_by, replication_factor=2)
            results[name] = _measure(zk, ref, lambda: ref.c.replicas["r1"].keeper.session_id, lambda: ref.apply(Sync()))
            ref.close()
        keeper.close()
    return results


def keeper_markdown(r: dict, command: str) -> str:
    names = {"clickhouse": f"ClickHouse {r['clickhouse_version']} (plain replication, 2 replicas)",
             "reference": "reference, replication_factor 2 of 2 (plain)",
             "reference_selective": "reference, replication_factor 2 of 4 (selective)"}
    lines = ["## ZooKeeper writes per INSERT: a real ClickHouse and the reference", "",
             f"Produced by `{command}`. One one-row INSERT at r1, counted from the ZooKeeper server's "
             "transaction log (`harness/zk_txnlog.py`): *INSERT* is r1's session while the INSERT runs "
             "(a multi is one request; its sub-ops are ops; with 2 of 4 the owners may be other replicas, which "
             "write in its place); *until settled* is every session until every owner has the part. Same "
             "ZooKeeper server, same run.", "",
             "| system | case | INSERT requests | INSERT ops | until settled: requests | until settled: ops |",
             "|---|---|---|---|---|---|"]
    for key in ("clickhouse", "reference", "reference_selective"):
        for m in r[key]:
            lines.append(f"| {names[key]} | {m['case']} | {m['insert_requests']} | {m['insert_ops']} | "
                         f"{m['settled_requests']} | {m['settled_ops']} |")
    ch, ref = r["clickhouse"][0], r["reference"][0]
    lines += ["", f"INSERT into an existing partition: ClickHouse {ch['insert_requests']} requests / {ch['insert_ops']} ops "
                  f"(`{ch['insert_kinds']}`), the reference {ref['insert_requests']} / {ref['insert_ops']} "
                  f"(`{ref['insert_kinds']}`). Read off the log: 18.16 takes its block number as an "
                  "\"abandonable lock\" (a multi checking the block id and creating `temp/abandonable_lock-N`, then "
                  "a separate create of `block_numbers/{p}/block-N`), and its commit multi also checks `/columns` "
                  "and registers the part as three znodes (the part, its `columns`, its `checksums`). The reference "
                  "takes today's lock (one ephemeral `block_numbers/{p}/block-N` inside the checking multi, "
                  "`EphemeralLockInZooKeeper`), registers a part as one znode, and checks the assignment's version "
                  "in both multis (F4). The section above counts the reference's own client requests on the "
                  "in-memory keeper.", ""]
    return "\n".join(lines)
