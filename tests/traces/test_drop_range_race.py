"""18.16's DROP_RANGE racing a fetch, in the order ZooKeeper wrote it (make check, 2026-11-30:
a real run's trace rejected at the fetch). executeDropRange's removePartProducingOpsInRange takes
the partition's queue entries out one request after another, an entry that is executing among
them, and waits for that fetch, which then registers its part after its entry is gone; then the
drop takes the parts away. The spec's DROP step takes the entries and the parts at once, so the
fetch is a step before it, and the translator must put it before the first removal of the batch,
which the spec takes for the drop's execution.

A transaction log written by hand, two replicas and two INSERTs into one partition, so that the
race is there on every run (a real run has it when the timing falls so)."""

from datetime import datetime, timezone

import pytest

from harness.zk_txnlog import Op, Txn
from protocol.cleanup_thread import CleanupSettings
from protocol.log_entry import DROP_RANGE, GET_PART, LogEntry, drop_range_name
from traces.keeper_trace import read_trace
from traces.validate import validate

ROOT = "/t"
R1, R2 = 0x11, 0x22   # the replicas' sessions
P = "202402"


def _log(n: int) -> str:
    return f"{ROOT}/log/log-{n:010d}"


def _q(n: int) -> str:
    return f"{ROOT}/replicas/r2/queue/queue-{n:010d}"


def _get(block: int) -> bytes:
    return LogEntry(GET_PART, f"{P}_{block}_{block}_0", source_replica="r1", block_id=f"{P}_b{block}").format()


DROP = LogEntry(DROP_RANGE, drop_range_name(P, 1), source_replica="r1").format()


def _txns(fetch_after_removal: bool) -> list[Txn]:
    ops = [  # (session, ops)
        (R1, [Op("create", f"{ROOT}/replicas/r1/is_active", ephemeral=True)]),
        (R2, [Op("create", f"{ROOT}/replicas/r2/is_active", ephemeral=True)]),
    ]
    for b in (0, 1):   # r1's INSERTs: hash, log entry, its part
        ops.append((R1, [Op("create", f"{ROOT}/blocks/{P}_b{b}", b""), Op("create", _log(b), _get(b)),
                         Op("create", f"{ROOT}/replicas/r1/parts/{P}_{b}_{b}_0", b"")]))
    ops.append((R2, [Op("setData", f"{ROOT}/replicas/r2/log_pointer", b"2", version=1),
                     Op("create", _q(0), _get(0)), Op("create", _q(1), _get(1))]))
    ops.append((R1, [Op("delete", f"{ROOT}/blocks/{P}_b0"), Op("delete", f"{ROOT}/blocks/{P}_b1"),
                     Op("create", _log(2), DROP)]))
    ops.append((R2, [Op("setData", f"{ROOT}/replicas/r2/log_pointer", b"3", version=2), Op("create", _q(2), DROP)]))
    fetch = (R2, [Op("create", f"{ROOT}/replicas/r2/parts/{P}_0_0_0", b"")])
    if not fetch_after_removal:
        ops += [fetch, (R2, [Op("delete", _q(0))])]
    # the drop's execution: queue-1 and queue-0 removed, the fetch of queue-0 commits, the parts go
    ops += [(R2, [Op("delete", _q(1))])]
    if fetch_after_removal:
        ops += [(R2, [Op("delete", _q(0))]), fetch]
    ops += [(R2, [Op("delete", f"{ROOT}/replicas/r2/parts/{P}_0_0_0")]), (R2, [Op("delete", _q(2))])]
    at = datetime(2026, 11, 30, tzinfo=timezone.utc)
    setup = [Txn(1, R1, 0, at, "create", (Op("create", f"{ROOT}/replicas/r1/log_pointer", b"0"),)),
             Txn(2, R2, 0, at, "create", (Op("create", f"{ROOT}/replicas/r2/log_pointer", b"0"),))]
    return setup + [Txn(3 + n, s, n, at, "multi" if len(o) > 1 else o[0].type, tuple(o))
                    for n, (s, o) in enumerate(ops)]


@pytest.mark.tlc
@pytest.mark.parametrize("fetch_after_removal", [False, True], ids=["fetch_first", "fetch_after_its_removal"])
def test_a_fetch_a_drop_range_waited_for_is_a_behaviour_of_the_spec(fetch_after_removal, tmp_path):
    trace = read_trace(_txns(fetch_after_removal), ROOT, ["r1", "r2"])
    assert not [e for e in trace.events if e.a == "unmapped"], [e.why for e in trace.events]
    fetch = next(n for n, e in enumerate(trace.events) if e.a == "execute" and e.part is not None and e.r == "r2")
    removals = [n for n, e in enumerate(trace.events) if e.a == "execute" and e.part is None and e.r == "r2"]
    assert fetch < removals[0], [e.why for e in trace.events]   # the fetch before the drop's first removal
    v = validate(trace, CleanupSettings(min_logs_to_keep=2, max_logs_to_keep=6, dedup_window=8), workdir=tmp_path)
    assert v.accepted, v.summary()
