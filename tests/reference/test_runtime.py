"""The live cluster: replica threads interleave steps in an order nobody chose while the test
inserts, queries, crashes a replica and rebalances. Afterwards the history must be exact."""

import contextlib
import random
import threading
import time

import pytest

from checkers.oracle import violations
from reference.cluster import Cluster
from reference.runtime import LiveCluster, Membership
from reference.workload import blocks


def wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_live_cluster_with_a_crash_and_a_rebalance(connect, tmp_path):
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3", "r4"), seed=5, fault_rate=0.05)
    rng = random.Random(5)
    work = blocks(rng, 24, 5, months=2)
    try:
        with LiveCluster(c) as live:
            for i, (block_id, rows) in enumerate(work):
                live.insert(rows, block_id)
                if i == 6:
                    live.crash("r2")  # whatever r2 was doing (coordinating, fetching) stops here
                if i == 12:
                    live.restart("r2")
                if i % 4 == 3:
                    live.query()
            with live.lock:
                c.add_replica("r5")
            live._start_thread("r5")
            started = live.rebalance_started()
            assert started, "a fifth replica with no partitions must get some"
            for _ in range(3):
                live.query()
            wait_for(lambda: not live.migrations_in_flight() and not live.rebalance_started())
            assert live.steps > 100
        c.settle()  # threads stopped: finish what is queued, deterministically
        c.query(at="r5")
        c.snapshot()
        assert violations(c.history, 2) == []
        assert any(x["replica"] == "r5" for x in c.history.tables["parts"])
    finally:
        c.close()


def _row(row_id: int, bucket: int) -> dict:
    return {"date": "2024-01-05", "user_id": bucket, "row_id": row_id, "event": "view"}   # partition 202401-<bucket>

@contextlib.contextmanager
def _held_in_a_long_step(rep):
    """`rep` busy in one step (a fetch of a large part, say) until the block ends."""
    held, release = threading.Event(), threading.Event()

    def long_step():
        with rep.lock:
            held.set()
            release.wait(120)
    stepper = threading.Thread(target=long_step)
    stepper.start()
    assert held.wait(30)
    try:
        yield
    finally:
        release.set()
        stepper.join()


def _answer_in_a_thread(send) -> list:
    """send() from a client thread; its answer, [] if it has not come in 60 s (a bound on a hang,
    not a speed target: the long step lasts 120 s)."""
    answered: list = []
    _in_thread(lambda: answered.append(send())).join(60)
    return answered



def test_an_insert_waits_only_for_the_replicas_it_works_at(connect, tmp_path):
    """No cluster-wide lock on the INSERT path: with the replica that neither receives nor owns
    the partition held in one long step, an INSERT sent to an owner is answered."""
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=7)
    try:
        with LiveCluster(c) as live:
            assert live.insert([_row(0, 0)], "first") == {"202401-0": "ok"}   # allocates the partition
            with live.lock:
                owners = c.replicas["r1"].replica_refresh_cache("202401-0").owners
            busy = next(r for r in sorted(c.replicas) if r not in owners)
            with _held_in_a_long_step(c.replicas[busy]):
                answered = _answer_in_a_thread(lambda: live.insert([_row(1, 0)], "second", at=owners[0]))
                assert answered == [{"202401-0": "ok"}], f"the INSERT waited for {busy}, which it does not write at"
        c.settle()
        c.snapshot()
        assert violations(c.history, 2) == []
    finally:
        c.close()


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_membership_readers_share_and_a_writer_waits_for_them():
    m, events = Membership(), []
    entered, leave = threading.Event(), threading.Event()

    def reader():
        with m.shared():
            with m.shared():   # re-entered by the thread that holds it
                entered.set()
                leave.wait(30)
            events.append("reader out")
    r = _in_thread(reader)
    assert entered.wait(30)
    with m.shared():   # another reader is let in beside it
        events.append("second reader")

    def writer():
        with m.exclusive():
            with m.exclusive():
                events.append("writer")
    w = _in_thread(writer)
    w.join(0.3)
    assert w.is_alive(), "the writer went in while a reader held the membership"
    leave.set()
    r.join(30)
    w.join(30)
    assert events == ["second reader", "reader out", "writer"]


def test_membership_lets_a_waiting_writer_in_before_new_readers():
    """Writer-preferring: a steady stream of INSERTs (readers) does not put a crash off for ever."""
    m, order = Membership(), []
    first_in, first_out = threading.Event(), threading.Event()

    def first_reader():
        with m.shared():
            first_in.set()
            first_out.wait(30)
    r1 = _in_thread(first_reader)
    assert first_in.wait(30)

    def writer():
        with m.exclusive():
            order.append("writer")
    w = _in_thread(writer)
    while not m._writers_waiting:   # the writer is queued behind the first reader
        time.sleep(0.01)

    def late_reader():
        with m.shared():
            order.append("late reader")
    r2 = _in_thread(late_reader)
    r2.join(0.3)
    assert r2.is_alive(), "a new reader went in ahead of a waiting writer"
    first_out.set()
    for t in (r1, w, r2):
        t.join(30)
    assert order == ["writer", "late reader"]


def test_membership_held_shared_cannot_be_taken_exclusively():
    m = Membership()
    with m.shared(), pytest.raises(RuntimeError, match="held shared by this thread"):
        with m.exclusive():
            pass
    with m.exclusive(), m.shared():   # the writer may read
        pass


def test_an_insert_does_not_wait_past_its_deadline_for_a_busy_replica(connect, tmp_path):
    """The deadline bounds the wait for a replica's lock too (protocol/insert.py _working_at): an
    INSERT sent to an owner held in a long step answers `failed`, nothing written, while that step
    goes on, rather than after it."""
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=7)
    try:
        with LiveCluster(c) as live:
            assert live.insert([_row(0, 0)], "first") == {"202401-0": "ok"}
            with live.lock:
                owners = c.replicas["r1"].replica_refresh_cache("202401-0").owners
            with _held_in_a_long_step(c.replicas[owners[0]]):
                answered = _answer_in_a_thread(lambda: live.insert([_row(1, 0)], "second", deadline=1.0, at=owners[0]))
                assert answered == [{"202401-0": "failed"}]   # without the deadline it waits for the step
        c.settle()
        c.snapshot()
        assert 1 not in {x["row_id"] for x in c.history.tables["parts"]}   # nothing of it was written
        assert violations(c.history, 2) == []
    finally:
        c.close()


def test_an_insert_and_a_query_do_not_wait_past_their_deadlines_for_the_membership(connect, tmp_path):
    """Found by the fault suite's stall rows: while Keeper could create no session, the replica
    threads took turns re-opening the administrator's session with the membership held
    exclusively, and every INSERT and query queued behind them for good. Now an INSERT that cannot
    get in by its deadline answers `failed` (it reached no replica), a query fails, both recorded;
    and the session is opened outside the membership (LiveCluster._reconnect_admin)."""
    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=7)
    try:
        with LiveCluster(c) as live:
            assert live.insert([_row(0, 0)], "first") == {"202401-0": "ok"}
            held, release = threading.Event(), threading.Event()

            def membership_change():   # a crash or a restart that takes long
                with live.lock:
                    held.set()
                    release.wait(120)
            changer = _in_thread(membership_change)
            assert held.wait(30)
            try:
                answered = _answer_in_a_thread(lambda: live.insert([_row(1, 0)], "second", deadline=0.5))
                assert answered == [{"202401-0": "failed"}]   # without the deadline it waits for the change
                assert _answer_in_a_thread(lambda: live.query(deadline=0.5)) == [None]
            finally:
                release.set()
                changer.join(30)
            assert live.insert([_row(2, 0)], "third", deadline=5.0) == {"202401-0": "ok"}
        c.settle()
        c.snapshot()
        assert {x["status"] for x in c.history.tables["inserts"] if x["block_id"] == "second"} == {"failed"}
        assert [q["status"] for q in c.history.tables["queries"]] == ["failed"]
        assert 1 not in {x["row_id"] for x in c.history.tables["parts"]}
        assert violations(c.history, 2) == []
    finally:
        c.close()
