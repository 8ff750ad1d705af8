"""Part moves between shards as PartMoves.tla's steps (protocol/part_moves/), on both Keeper
backends: the move goes through the code's states and leaves the part on the destination only;
today's orchestrator survives a crash by its barrier, 21.8's re-issues (F30's wedge, F31's
skipped wait); the merge predicate reads the pins and the mutation path does not (F28); the read
path's deduplication and its stale local pins (F25, F26); KILL's rollback."""

import pytest

from protocol.assignment import GuardFailed
from protocol.log_entry import ATTACH_PART, LogEntry
from protocol.part_moves import (FIXES, STATES, CannotExecute, DistributedQuery, Layout, Orchestrator,
                                 ShardReplica, active_task, assign_merge, assign_mutation, create_shards,
                                 log_entries, move_part, read_pins, tasks)
from protocol.parts import PartName, PartStore

MOVING = PartName("202401", 1, 1, 0)
OWN = PartName("202412", 1, 1, 0)
REPLICAS = {"src": ["s1", "s2"], "dst": ["d1", "d2"]}


@pytest.fixture
def shards(connect, tmp_path):
    """Two shards of two replicas; the source has MOVING (rows 1-2), the destination OWN (row 3)."""
    keeper = connect()
    layout = Layout("/pm")
    create_shards(keeper, layout, REPLICAS)
    reps = {r: ShardReplica(r, s, keeper, layout, PartStore(tmp_path / r)) for s, rs in REPLICAS.items() for r in rs}
    for r in REPLICAS["src"]:
        reps[r].write_part(MOVING, [{"row_id": 1, "value": 0}, {"row_id": 2, "value": 0}], "u-moving")
    for r in REPLICAS["dst"]:
        reps[r].write_part(OWN, [{"row_id": 3, "value": 0}], "u-own")
    return keeper, layout, reps


def _process_all(reps, names=None):
    for r in names or reps:
        while reps[r].pending():
            reps[r].process(reps)


def _drive(orch, reps, until: str, leader="s1", hold=()):
    """Issue and advance, every replica but `hold` processing in between, until the task is in `until`."""
    while (t := active_task(orch.keeper, orch.layout)) is not None and t.state != until:
        if t.state in ("SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH", "DESTINATION_ATTACH", "SOURCE_DROP") \
                and orch.issued(t) is None and not orch.drop_skips_wait(t, reps[leader]):
            orch.issue(reps[leader])
        _process_all(reps, [r for r in reps if r not in hold])
        orch.advance(reps[leader])
    return active_task(orch.keeper, orch.layout)


def _crash_after_entry(shards, state: str, version: str = "current"):
    """The move driven to `state`, its entry issued, and the orchestrating replica crashed before
    the state's CAS (the spec's OrchestratorCrash): (the orchestrator, the task in `state`)."""
    keeper, layout, reps = shards
    orch = Orchestrator(keeper, layout, version=version)
    move_part(keeper, layout, reps["s1"], MOVING)
    t = _drive(orch, reps, state)
    orch.issue(reps["s1"])
    orch.crash()
    return orch, t


def test_a_move_goes_through_the_codes_states_and_leaves_the_part_on_the_destination_only(shards):
    keeper, layout, reps = shards
    orch = Orchestrator(keeper, layout)
    move_part(keeper, layout, reps["s1"], MOVING)
    assert read_pins(keeper, layout, "src")[0] == read_pins(keeper, layout, "dst")[0] == {"u-moving"}
    with pytest.raises(GuardFailed):
        move_part(keeper, layout, reps["s1"], MOVING)   # pinned: a move of it is in flight
    seen = []
    while (t := active_task(keeper, layout)) is not None:
        seen.append(t.state)
        if orch.issued(t) is None and t.state in ("SYNC_SOURCE", "SYNC_DESTINATION", "DESTINATION_FETCH",
                                                   "DESTINATION_ATTACH", "SOURCE_DROP"):
            orch.issue(reps["s1"])
            with pytest.raises(GuardFailed):
                orch.advance(reps["s1"])   # not processed by every replica of the shard yet
        _process_all(reps)
        orch.advance(reps["s1"])
    assert seen == list(STATES[1:-1]) and tasks(keeper, layout)[0].state == "DONE"
    assert read_pins(keeper, layout, "src")[0] == read_pins(keeper, layout, "dst")[0] == frozenset()
    for r in REPLICAS["src"]:
        assert MOVING not in reps[r].active()
    attached = [n for n in reps["d1"].active() if n.partition == "202401"]
    assert len(attached) == 1 and attached == [n for n in reps["d2"].active() if n.partition == "202401"]
    assert reps["d1"].uuid_of(attached[0]) == "u-moving"   # the same UUID under a destination block number
    assert tasks(keeper, layout)[0].dst_part_name == str(attached[0])   # set with DESTINATION_ATTACH's advance
    types = [e.type for _, e in log_entries(keeper, layout, "dst")]
    assert types == ["SYNC_PINNED_PART_UUIDS", "CLONE_PART_FROM_SHARD", ATTACH_PART]
    log = layout.table("dst").log
    raw = keeper.get(f"{log}/{keeper.get_children(log)[1]}")[0]
    assert b"clone_part_from_shard\n202401_1_1_0\nsource_shard: /pm/src\n" in raw   # ClickHouse's text
    assert LogEntry.parse(raw).source_shard == "/pm/src"


@pytest.mark.parametrize("crash_in", ["SYNC_SOURCE", "DESTINATION_FETCH", "DESTINATION_ATTACH", "SOURCE_DROP"])
def test_todays_orchestrator_waits_on_its_barrier_after_a_crash(shards, crash_in):
    keeper, layout, reps = shards
    _, t = _crash_after_entry(shards, crash_in)
    shard = "src" if crash_in in ("SYNC_SOURCE", "SOURCE_DROP") else "dst"
    length = len(log_entries(keeper, layout, shard))
    after = Orchestrator(keeper, layout)   # another leader takes the task over from Keeper
    assert after.issued(active_task(keeper, layout)) is not None
    with pytest.raises(GuardFailed):
        after.issue(reps["s2"])            # the barrier is there: nothing issued twice
    assert len(log_entries(keeper, layout, shard)) == length
    assert _drive(after, reps, "DONE", leader="s2") is None and t is not None


def test_21_8s_orchestrator_reissues_attach_after_a_crash_and_the_move_wedges(shards):
    """F30: the second ATTACH_PART names a new block number; each replica's detached copy went to
    the first, no replica has the second part, and the move waits for good."""
    keeper, layout, reps = shards
    orch, _ = _crash_after_entry(shards, "DESTINATION_ATTACH", "v21_8")
    orch.issue(reps["s1"])                 # the re-run: a second ATTACH_PART
    attaches = [e for _, e in log_entries(keeper, layout, "dst") if e.type == ATTACH_PART]
    assert len(attaches) == 2 and attaches[0].new_part_name != attaches[1].new_part_name
    for r in REPLICAS["dst"]:
        reps[r].process(reps)              # the first attach, from the detached copy
        with pytest.raises(CannotExecute):
            reps[r].process(reps)          # the second: no copy, no replica has it
    with pytest.raises(GuardFailed):
        orch.advance(reps["s1"])
    assert active_task(keeper, layout).state == "DESTINATION_ATTACH"
    assert read_pins(keeper, layout, "dst")[0] == {"u-moving"}   # pinned, so unmergeable, for good


def test_21_8s_rerun_of_the_drop_skips_the_wait_and_the_pins_go_with_the_part_on_a_source_replica(shards):
    """F31's cause: the re-run's dropPart finds the part gone on its own replica and moves on; the
    pins go while s2 still has the part, the destination merges the moved part under a new UUID,
    and a query reading s2 and d1 counts its rows twice, deduplication on."""
    keeper, layout, reps = shards
    orch, _ = _crash_after_entry(shards, "SOURCE_DROP", "v21_8")
    reps["s1"].process(reps)                      # s1 dropped the part; s2 lags
    assert orch.drop_skips_wait(active_task(keeper, layout), reps["s1"])
    _drive(orch, reps, "DONE", hold=("s2",))
    assert MOVING in reps["s2"].active() and read_pins(keeper, layout, "src")[0] == frozenset()
    attached = max(reps["d1"].active(), key=lambda n: n.min_block)
    assign_merge(keeper, layout, reps["d1"], attached)
    reps["d1"].process(reps)
    q = DistributedQuery("q", None, dedup=True)
    q.read_shard(reps["s2"])
    q.read_shard(reps["d1"])
    assert q.status == "complete" and q.duplicated()[1] == 2 and q.duplicated()[2] == 2


def test_the_merge_predicate_reads_the_pins_and_the_mutation_path_does_not(shards):
    """F28's cause: a pinned part cannot be merged; it can be mutated, unless mutations_respect_pins."""
    keeper, layout, reps = shards
    move_part(keeper, layout, reps["s1"], MOVING)
    with pytest.raises(GuardFailed):
        assign_merge(keeper, layout, reps["s1"], MOVING)
    with pytest.raises(GuardFailed):
        assign_mutation(keeper, layout, reps["s1"], MOVING, respect_pins=True)
    entry = assign_mutation(keeper, layout, reps["s1"], MOVING, respect_pins=False)
    reps["s1"].process(reps)
    mutated = PartName.parse(entry.new_part_name)
    assert mutated in reps["s1"].active() and reps["s1"].uuid_of(mutated) != "u-moving"
    reps["s1"]._drop_part(MOVING)   # SOURCE_DROP's exact-name drop: the mutated part stays
    assert mutated in reps["s1"].active()


def test_deduplication_reads_a_moving_part_once_unless_a_replica_read_before_its_pin_sync(shards):
    """F25/F26: during the move, with the pins synced everywhere, the destination's report of the
    UUID re-runs its read without the part: each row once. Without deduplication, twice; with a
    source replica that read before its SYNC_PINNED_PART_UUIDS, twice."""
    keeper, layout, reps = shards
    orch = Orchestrator(keeper, layout, fixes=frozenset())
    move_part(keeper, layout, reps["s1"], MOVING)
    orch.issue(reps["s1"])
    reps["s1"].process(reps)                          # s1 synced its pins; s2 not yet
    stale = DistributedQuery("stale", "SYNC_SOURCE", dedup=True)
    stale.read_shard(reps["s2"])                      # reports nothing
    _drive(orch, reps, "SOURCE_DROP_PRE_DELAY")
    for name, dedup, twice in [("synced", True, False), ("no_dedup", False, True)]:
        q = DistributedQuery(name, "SOURCE_DROP_PRE_DELAY", dedup=dedup)
        q.read_shard(reps["s1"])
        q.read_shard(reps["d1"])
        assert q.status == "complete" and (q.duplicated()[1] == 2) is twice, name
    stale.read_shard(reps["d1"])
    assert stale.status == "complete" and stale.duplicated()[1] == 2


def test_kill_rolls_an_attached_part_back_and_cancels(shards):
    keeper, layout, reps = shards
    orch = Orchestrator(keeper, layout)
    move_part(keeper, layout, reps["s1"], MOVING)
    _drive(orch, reps, "DESTINATION_ATTACH")
    orch.issue(reps["s1"])
    _process_all(reps)
    orch.kill()
    while active_task(keeper, layout) is not None:
        try:
            orch.rollback_step(reps["s1"])
        except GuardFailed:
            _process_all(reps)
    assert tasks(keeper, layout)[0].state == "CANCELLED"
    assert read_pins(keeper, layout, "dst")[0] == frozenset()
    for r in REPLICAS["dst"]:
        assert [n.partition for n in reps[r].active()] == ["202412"]
    for r in REPLICAS["src"]:
        assert MOVING in reps[r].active()
    with pytest.raises(GuardFailed):
        Orchestrator(keeper, layout, version="v21_8").kill()   # 21.8 has no KILL


def test_an_unknown_fix_or_version_is_refused(shards):
    keeper, layout, _ = shards
    with pytest.raises(ValueError, match="unknown part-move fixes"):
        Orchestrator(keeper, layout, fixes=frozenset({"nope"}))
    with pytest.raises(ValueError, match="orchestrator version"):
        Orchestrator(keeper, layout, version="v20")
    assert set(FIXES) == {"sync_waits_for_queries", "delays_wait_for_queries", "mutations_respect_pins"}


def test_a_mutation_after_the_clone_fetched_the_part_wedges_the_attach(shards):
    """F28's second consequence: the UPDATE lands between the clone and the attach; ATTACH_PART
    carries the mutated part's checksum (the orchestrator's active part containing the name),
    which no destination replica's detached copy has, and no replica has the part to fetch."""
    keeper, layout, reps = shards
    orch = Orchestrator(keeper, layout, fixes=frozenset({"sync_waits_for_queries", "delays_wait_for_queries"}))
    move_part(keeper, layout, reps["s1"], MOVING)
    _drive(orch, reps, "DESTINATION_ATTACH")
    assign_mutation(keeper, layout, reps["s1"], MOVING, respect_pins=False)
    _process_all(reps, ["s1", "s2"])
    orch.issue(reps["s1"])
    for r in REPLICAS["dst"]:
        with pytest.raises(CannotExecute):
            reps[r].process(reps)
    with pytest.raises(GuardFailed):
        orch.advance(reps["s1"])
