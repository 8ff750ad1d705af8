"""ClickHouse's part moves between shards (seed 001; ALTER TABLE ... MOVE PART ... TO SHARD) as
spec/part_moves/PartMoves.tla's steps, on Keeper and on parts on disk: two shards, each a
replicated table of its own with its own log, and the orchestrator that moves a part from one to
the other while Distributed SELECTs read one replica of each. spec/part_moves/README.md cites the
ClickHouse files and commits each step follows; the names are the spec's.

What each step does in Keeper, as the orchestrator's code does it:
- `move_part` (MovePart): one multi pins the part's UUID in both shards' `pinned_part_uuids`
  (versions checked) and creates the task `part_moves_shard/task-N` in SYNC_SOURCE.
- `Orchestrator.issue` (Issue): the state's entry appended to its shard's log. Today's
  orchestrator ("current", PR #29043) creates a barrier znode `task-N/log_<STATE>` holding the
  entry's log name in the same multi, and a re-run finds it; 21.8's ("v21_8") keeps which entry
  it waits for in the running thread only (`Orchestrator.crash` loses it, and a re-run issues the
  entry again: F30, F31).
- `Orchestrator.advance` (Advance): once every replica of the shard has processed the entry
  (its `log_pointer` past it), the task's state set with the version read (CAS). The sleeps
  around SOURCE_DROP are steps that wait for nothing (the model's; the fix
  `delays_wait_for_queries` makes them wait for the queries that started before).
- `Orchestrator.kill` and `rollback_step` (Kill, RollbackStep): KILL PART_MOVE_TO_SHARD before
  SOURCE_DROP; the task walks back, an attached part dropped on the destination first.
- `ShardReplica.process` (Process): the replica's next entry. SYNC_PINNED_PART_UUIDS replaces
  its local copy of the pins (kept in memory, as ClickHouse's `pinned_part_uuids` member);
  CLONE_PART_FROM_SHARD fetches the part from a source replica into `detached/`; ATTACH_PART
  attaches the detached copy whose checksum matches under the entry's name (or fetches the part
  from a destination replica that has it; with neither, it stays queued: F30); DROP_PART of
  one part removes that part unless another active part covers it (F28); MERGE_PARTS and
  MUTATE_PART make a part with a UUID of its own.
- `assign_merge` (AssignMerge: OPTIMIZE ... FINAL of one part; the merge predicate reads the
  pins from Keeper and refuses a pinned part) and `assign_mutation` (MutateSource: the mutation
  path does not read the pins unless `mutations_respect_pins`).
- `DistributedQuery.read_shard` (QueryReadShard): one replica's active parts with their rows;
  with deduplication it reports the UUIDs of those in its local pins, and a UUID another shard
  reported first makes the initiator re-run this shard without it, once.

Simplified, and said so: a part's UUID is kept on its replica's disk beside it (ClickHouse's
`uuid.txt`) and a merged or mutated part's is derived from its shard and name (ClickHouse
carries it in the entry as `into_uuid`/`to_uuid`); the parts a shard starts with are written
on each of its replicas directly (replicated before the run) and no part is registered in
`replicas/{r}/parts` (fetches read a peer's disk, as the reference's fetches do).
"""

from protocol.part_moves.layout import (Layout, append_entry, create_shards, log_entries, new_block, processed,
                                        read_pins)
from protocol.part_moves.orchestrator import Orchestrator
from protocol.part_moves.query import DistributedQuery
from protocol.part_moves.shard_replica import (CannotExecute, ShardReplica, assign_merge, assign_mutation,
                                               derived_uuid)
from protocol.part_moves.states import ENDED, ENTRY_SHARD, FIXES, KILLABLE, SHARDS, STATES, VERSIONS, before
from protocol.part_moves.task import Task, active_task, move_part, read_task, tasks

__all__ = ["SHARDS", "STATES", "ENDED", "ENTRY_SHARD", "KILLABLE", "VERSIONS", "FIXES", "before", "Layout",
           "create_shards", "read_pins", "log_entries", "append_entry", "processed", "new_block", "Task", "read_task",
           "tasks", "active_task", "move_part", "Orchestrator", "ShardReplica", "CannotExecute", "assign_merge",
           "assign_mutation", "derived_uuid", "DistributedQuery"]
