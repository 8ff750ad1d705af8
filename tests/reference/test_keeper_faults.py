"""The Keeper layer under ZooKeeper faults (issue 15, first step), on real ZooKeeper: a
ConnectionLoss inside a multi before and after it applies, a leader and a follower killed, the
whole ensemble down, a session expired, while the live runtime inserts and migrates.

Every test asserts that no replica thread died and that the history is exact (no acknowledged
row lost, none duplicated: checkers/oracle.py's `violations`).
"""

from __future__ import annotations

import random
import time

import pytest
from kazoo.exceptions import ConnectionLoss

from checkers.oracle import violations
from lab.faults import LosingKeeper
from protocol.keeper import Create, Delete, KeeperUnavailableError, MultiError, NoNodeError, SetData
from protocol.keeper.zookeeper import ZooKeeperKeeper
from protocol.layout import Layout
from protocol.migration import read_migration
from reference.cluster import Cluster
from reference.runtime import LiveCluster
from reference.workload import blocks

pytestmark = pytest.mark.zookeeper

RF = 2


def _log_entries(k, path="/log"):
    return [n for n in k.get_children(path)]


@pytest.mark.parametrize("where", ["before", "after"])
def test_connection_loss_inside_a_multi_is_resolved_by_reading_back(zk_chroot, where):
    """The commit multi of an INSERT (a block id, a sequential log entry, a part, an ephemeral
    sequential lock released) loses its connection before or after ZooKeeper applies it: the
    retry applies it exactly once and returns the paths it made."""
    k = LosingKeeper(zk_chroot)
    try:
        for p in ("/log", "/blocks", "/parts", "/numbers"):
            k.create(p)
        lock = k.create("/numbers/block-", b"r1", ephemeral=True, sequential=True)
        k.create("/log/log-", b"an older entry", sequential=True)
        k.plan = [where]
        out = k.multi([Create("/blocks/b1", b"part_1"), Create("/log/log-", b"get part_1", sequential=True),
                       Create("/parts/part_1", b""), Delete(lock)])
        assert k.injected == [(where, "commit_async")]
        assert _log_entries(k) == ["log-0000000000", "log-0000000001"]
        assert out[1] == "/log/log-0000000001" and out[0] == "/blocks/b1"
        assert k.get("/log/log-0000000001")[0] == b"get part_1"
        assert k.exists(lock) is None
        # A multi of sequential creates only (a queue entry per fetch): found by value.
        k.plan = [where]
        out = k.multi([Create("/log/log-", b"fetch a", sequential=True), Create("/log/log-", b"fetch b", sequential=True)])
        assert out == ["/log/log-0000000002", "/log/log-0000000003"]
        assert len(_log_entries(k)) == 4
        # The lock multi of an INSERT: a check-not-exists create+delete leaves nothing to read;
        # the ephemeral sequential lock, held by this session, is the witness.
        k.plan = [where]
        out = k.multi([Create("/blocks/b2", b""), Delete("/blocks/b2"),
                       Create("/numbers/block-", b"r1", ephemeral=True, sequential=True)])
        assert k.get_children("/numbers") == [out[-1].rsplit("/", 1)[1]]
        # A versioned set (log_pointer) with a sequential queue entry (the pull multi).
        k.create("/ptr", b"0")
        k.plan = [where]
        out = k.multi([SetData("/ptr", b"1", 0), Create("/log/log-", b"queued", sequential=True)])
        assert out[0].version == 1 and k.get("/ptr")[0] == b"1" and len(_log_entries(k)) == 5
        # Plain requests: a sequential create, a versioned set, a delete.
        k.plan = [where]
        assert k.create("/log/log-", b"alone", sequential=True) == "/log/log-0000000005"
        k.plan = [where]
        assert k.set("/ptr", b"2", 1).version == 2
        k.plan = [where]
        k.delete("/ptr")
        assert k.exists("/ptr") is None and len(_log_entries(k)) == 6
    finally:
        k.close()


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_unversioned_set_of_a_missing_node_is_refused_even_after_a_lost_sending(zk_chroot, where):
    """A replica publishes its map's version with an unversioned set and creates the node on
    NoNode (Replica.learn). A set cannot create or remove a node, so a NoNode met after a lost
    first sending is the node's state, not a conflict with that sending: refused, not "unknown"
    (which, raised from a settle, failed test_connection_loss_inside_multis_under_the_live_runtime
    about once in four fresh clones)."""
    k = LosingKeeper(zk_chroot)
    try:
        k.plan = [where]
        with pytest.raises(NoNodeError):
            k.set("/map_version", b"1")
        assert k.injected == [(where, "set_async")]
        # On a node that exists the set is sent again (applied once or twice: the same value).
        k.create("/map_version", b"1")
        k.plan = [where]
        k.set("/map_version", b"2")
        assert k.get("/map_version")[0] == b"2" and len(k.injected) == 2
    finally:
        k.close()


class OvertakenKeeper(ZooKeeperKeeper):
    """Its next write is applied, then `overtake` runs (another client writes the same nodes, as
    the live runtime's threads do), then the answer is lost (ConnectionLoss)."""

    def __init__(self, hosts: str, **kw):
        super().__init__(hosts, **kw)
        self.overtake = None

    def _send(self, stop, async_fn, *args, **kwargs):
        if self.overtake is not None and getattr(async_fn, "__name__", "") in LosingKeeper.WRITES:
            overtake, self.overtake = self.overtake, None
            super()._send(stop, async_fn, *args, **kwargs)
            overtake()
            raise ConnectionLoss("injected: the answer lost after another client overtook the write")
        return super()._send(stop, async_fn, *args, **kwargs)


def test_a_lost_write_overtaken_before_its_read_back_is_unknown_not_refused(zk_chroot):
    """The read-back's witness (our value, at our version) is gone once another client wrote the
    node after us: the write is sent again and conflicts, maybe with itself. That is an unknown
    outcome (an operator looks), not a refusal (a REASSIGN refused although it was applied)."""
    k, other = OvertakenKeeper(zk_chroot), ZooKeeperKeeper(zk_chroot)
    try:
        k.create("/asg", b"v0")
        k.overtake = lambda: other.set("/asg", b"theirs", 1)
        with pytest.raises(KeeperUnavailableError) as unknown:
            k.set("/asg", b"ours", 0)
        assert unknown.value.outcome_unknown and other.get("/asg")[0] == b"theirs"
        # A multi whose witness is a created node that another client rewrote (the migration
        # znode a CLONE's fetch moved on): the same.
        k.overtake = lambda: other.set("/mig", b"fetched")
        with pytest.raises(KeeperUnavailableError) as unknown:
            k.multi([SetData("/asg", b"clone", 2), Create("/mig", b"clone")])
        assert unknown.value.outcome_unknown and other.get("/asg")[0] == b"clone"
        # A conflict at the first sending is still the refusal it is.
        with pytest.raises(MultiError):
            k.multi([SetData("/asg", b"late", 2), Create("/mig2", b"x")])
    finally:
        k.close()
        other.close()


def test_connection_loss_inside_multis_under_the_live_runtime(zk_chroot, tmp_path):
    """Every replica's writes lose their connection at random (5%), before or after they apply,
    while the live runtime inserts and migrates: no thread dies, no entry is written twice, the
    history is exact."""
    n = [0]

    def connect():
        n[0] += 1
        return LosingKeeper(zk_chroot, rate=0.05, seed=n[0])

    c = Cluster(connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=11)
    try:
        with LiveCluster(c, refresh_interval=0.5) as live:
            _inserts_with_a_migration(live, c, random.Random(11), 12)
            _settle_live(live, c)
            assert live.threads_alive() == ["r1", "r2", "r3"]
        injected = [x for rep in c.replicas.values() for x in rep.keeper.injected]
        assert {w for w, _ in injected} == {"before", "after"}, injected
        _check_history(c)
        # A sequential create applied once: no two log entries with the same text.
        texts = [c.admin.get(f"{c.layout.log}/{e}")[0] for e in c.admin.get_children(c.layout.log)]
        assert len(texts) == len(set(texts))
    finally:
        c.close()


# --- the live runtime on a real ensemble ----------------------------------------------------------

def _wait_for(cond, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if cond():
                return time.monotonic() - t0
        except KeeperUnavailableError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def _inserts_with_a_migration(live: LiveCluster, c: Cluster, rng: random.Random, n: int, during=None,
                              first_row_id: int = 0, migrations: int = 2) -> list[dict]:
    """`n` INSERT blocks; after the first third, REASSIGN PARTITION moves `migrations` partitions
    to the replica that does not own them (migrations in CLONE while the rest is inserted), and
    `during(i)` is called before each later insert."""
    statuses = []
    for i, (block_id, rows) in enumerate(blocks(rng, n, 3, months=1, first_row_id=first_row_id)):
        if i == n // 3:
            with live.lock:
                partitions = c.admin.get_children(c.layout.assignments)[:migrations]
                moves = {p: next(r for r in sorted(c.replicas) if r not in c.replicas["r1"].replica_refresh_cache(p).owners)
                         for p in partitions}
            for p, dst in moves.items():
                _reassign(live, c, p, dst)
            with live.lock:   # started (the replica threads may have carried one to its end already)
                assert {p: read_migration(c.admin, c.layout, p)[0]["dst"] for p in moves} == moves
        if during and i >= n // 3:
            during(i)
        statuses.append(live.insert(rows, block_id))
    return statuses


def _reassign(live: LiveCluster, c: Cluster, partition: str, dst: str, tries: int = 5) -> None:
    """REASSIGN as an operator sends it: an answer lost to a Keeper fault (outcome unknown: its
    multi was sent again and conflicted, maybe with itself, while the replica threads moved the
    migration on) is looked up, and the command sent again only if it did not happen."""
    for _ in range(tries):
        try:
            live.reassign(partition, dst)
            return
        except KeeperUnavailableError as e:
            with live.lock:
                mig, _ = read_migration(c.admin, c.layout, partition)
            if mig and mig["dst"] == dst:
                print(f"REASSIGN {partition} -> {dst}: {e}; it had been applied")
                return
    raise AssertionError(f"REASSIGN {partition} -> {dst} not applied in {tries} tries")


def _settle_live(live: LiveCluster, c: Cluster, timeout: float = 40.0) -> float:
    """Until every migration is done; returns how long that took."""
    return _wait_for(lambda: not live.migrations_in_flight(), timeout, "migrations finished")


def statuses_summary(statuses) -> dict:
    out: dict = {}
    for st in statuses:
        for v in st.values():
            out[v] = out.get(v, 0) + 1
    return out


def _check_history(c: Cluster) -> None:
    c.settle()
    c.query()
    c.snapshot()
    assert violations(c.history, RF) == []
    acked = [x for x in c.history.tables["inserts"] if x["status"] == "ok"]
    assert acked, "some inserts must have been acknowledged"


def _cluster(hosts: str, tmp_path, seed: int, retry_deadline: float = 5.0) -> Cluster:
    return Cluster(lambda: ZooKeeperKeeper(hosts, retry_deadline=retry_deadline), tmp_path / "data",
                   replicas=("r1", "r2", "r3"), seed=seed)


@pytest.mark.parametrize("member", ["leader", pytest.param("follower", marks=pytest.mark.faults)])
def test_live_runtime_survives_a_killed_ensemble_member(zk_ensemble, zk_ensemble_chroot, tmp_path, member):
    """kill -9 of the ensemble's leader (or of a follower) during inserts and a migration in
    CLONE, restarted 2 s later: the sessions survive, every thread keeps running, the
    migrations finish, nothing acknowledged is lost or duplicated."""
    c = _cluster(zk_ensemble_chroot, tmp_path, seed=3)
    killed = []

    def during(i):
        if not killed:
            leader = zk_ensemble.leader()
            victim = leader if member == "leader" else next(m for m in zk_ensemble.modes() if m != leader)
            zk_ensemble.stop_member(victim)
            killed.append((victim, time.monotonic()))
        elif len(killed) == 1:
            # Down for 2 s whatever the pace: a follower's loss slows nothing, and a fast machine
            # ran the inserts out before 2 s had passed (the member never came back).
            time.sleep(max(0.0, 2.0 - (time.monotonic() - killed[0][1])))
            zk_ensemble.start_member(killed[0][0])
            killed.append("restarted")

    try:
        with LiveCluster(c, refresh_interval=0.5) as live:
            statuses = _inserts_with_a_migration(live, c, random.Random(3), 12, during)
            assert killed and killed[-1] == "restarted"
            settled = _settle_live(live, c)
            print(f"\n{member} killed: inserts {statuses_summary(statuses)}, migrations done {settled:.1f} s after "
                  f"the last insert; Keeper errors survived {len(live.keeper_errors)}, recoveries "
                  f"{[round(t, 2) for _, t in live.recoveries]}")
            assert live.threads_alive() == ["r1", "r2", "r3"]
            assert live.reestablished == []   # a member's death expires no session
        assert sum(s == "ok" for st in statuses for s in st.values()) > 0
        _check_history(c)
    finally:
        c.close()


@pytest.mark.faults
def test_live_runtime_survives_the_whole_ensemble_down(zk_ensemble, zk_ensemble_chroot, tmp_path):
    """Every member killed for ~4 s during inserts and a migration: a write in that time is
    refused with KeeperUnavailableError (the replica is read-only), the replica threads wait and
    come back by themselves when the ensemble does, the migrations finish, the history is exact."""
    c = _cluster(zk_ensemble_chroot, tmp_path, seed=4, retry_deadline=1.5)
    rng = random.Random(4)
    try:
        with LiveCluster(c, refresh_interval=0.5) as live:
            _inserts_with_a_migration(live, c, rng, 9)
            for m in list(zk_ensemble.modes()):
                zk_ensemble.stop_member(m)
            down = time.monotonic()
            # Keeper is gone: an INSERT is refused, with one named error, within the retry deadline.
            rep = c.replicas["r1"]
            owned = next(p for p, a in sorted(rep.cache.items()) if "r1" in a.owners)
            rows = next(blocks(random.Random(99), 1, 4, months=2, first_row_id=10_000))[1]
            with live.lock, pytest.raises(KeeperUnavailableError):
                rep.replica_write_insert(owned, rows, "outage-block")
            refused_in = time.monotonic() - down
            b, r = next(blocks(rng, 1, 4, months=2, first_row_id=20_000))
            assert set(live.insert(r, b).values()) == {"failed"}
            time.sleep(max(0.0, 4.0 - (time.monotonic() - down)))
            zk_ensemble.start()
            back = time.monotonic()
            more = blocks(rng, 50, 4, months=2, first_row_id=30_000)

            def acknowledged():
                b, r = next(more)
                return set(live.insert(r, b).values()) == {"ok"}
            # Back by itself: the next INSERT is acknowledged, with no call to bring anything back.
            ok = _wait_for(acknowledged, 20, "an insert acknowledged after the outage")
            _settle_live(live, c)
            assert live.threads_alive() == ["r1", "r2", "r3"]
            assert live.keeper_errors, "the replica threads must have met the outage"
            print(f"\nwrite refused after {refused_in:.2f} s; first insert acknowledged {ok:.2f} s after the "
                  f"ensemble was back ({time.monotonic() - back:.1f} s to settle); replicas recovered in "
                  f"{max(t for _, t in live.recoveries):.2f} s at most")
        _check_history(c)
    finally:
        c.close()


def test_live_runtime_re_establishes_an_expired_session(zk_ensemble, zk_ensemble_chroot, tmp_path):
    """One replica's session is expired from the server side during inserts and a migration:
    its own thread opens a new session, creates is_active again and reloads its map before it
    serves; no thread dies and the history is exact."""
    c = _cluster(zk_ensemble_chroot, tmp_path, seed=5)
    layout = Layout(c.layout.root)
    expired, known = [], set()

    def during(i):
        if not expired:
            rows = next(blocks(random.Random(99), 1, 3, months=1, first_row_id=10_000))[1]
            with live.lock:   # r2's thread cannot re-establish it while this holds the lock
                rep = c.replicas["r2"]
                owned = next(p for p, a in sorted(rep.cache.items()) if "r2" in a.owners)
                expired.append(rep.keeper.session_id)
                known.update(c.admin.get_children(layout.assignments))
                rep.keeper.expire_session()
                _wait_for(lambda: rep.keeper.expired, 15, "r2's session expired")
                # Read-only until its thread re-establishes it: a write is refused with one named error.
                with pytest.raises(KeeperUnavailableError, match="read-only"):
                    rep.replica_write_insert(owned, rows, "while-expired")
            t = time.monotonic()
            _wait_for(lambda: "r2" in live.reestablished, 20, "r2 re-established")
            expired.append(time.monotonic() - t)

    try:
        with LiveCluster(c, refresh_interval=0.5) as live:
            _inserts_with_a_migration(live, c, random.Random(5), 12, during)
            settled = _settle_live(live, c)
            assert live.threads_alive() == ["r1", "r2", "r3"]
            print(f"\nr2 re-established {expired[1]:.2f} s after its expiry was seen; migrations done {settled:.1f} s "
                  f"after the last insert")
            with live.lock:
                rep = c.replicas["r2"]
                assert rep.keeper.session_id != expired[0]
                assert c.admin.exists(layout.is_active("r2")).ephemeral_owner == rep.keeper.session_id
                assert known <= set(rep.cache)   # the map reloaded: every partition it had before
        _check_history(c)
    finally:
        c.close()


def test_a_map_version_keeper_did_not_take_is_published_at_the_next_refresh(zk_chroot, tmp_path):
    """Found by the fault suite (full outage in CLONE): a refresh put a new assignment version in
    the map, Keeper went away before the version was published, and no later refresh published it
    (the map had not changed since): CLEANUP waited for that map for good."""
    c = Cluster(lambda: LosingKeeper(zk_chroot, retry_deadline=0.3), tmp_path / "data", replicas=("r1", "r2"), seed=2)
    try:
        c.load(blocks(random.Random(2), 3, 3, months=1))
        c.settle()
        p = c.admin.get_children(c.layout.assignments)[0]
        data, stat = c.admin.get(c.layout.assignment(p))
        c.admin.set(c.layout.assignment(p), data, stat.version)   # a new version of the same assignment
        rep = c.replicas["r2"]
        rep.keeper.plan = ["before"] * 1000   # every write lost until the retry deadline passes
        with pytest.raises(KeeperUnavailableError):
            rep.replica_refresh_cache(p)
        assert rep.cache[p].version == stat.version + 1
        rep.keeper.plan = []
        rep.replica_refresh_cache(p)
        assert int(c.admin.get(c.layout.map_version("r2", p))[0]) == stat.version + 1
    finally:
        c.close()
