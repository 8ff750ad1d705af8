"""What a history's rows mean, as pure functions of them: who may keep a partition at a snapshot,
and the guards and effects of the spec's actions on what the harness observed (the `commands` and
`insert_refusals` tables). The in-process oracle (checkers/oracle.py) judges with them, the Spark
job (checkers/spark/) reads the keepers with them; nothing here reads Keeper or imports the
protocol, so the Spark job can ship without it.

The write path a refused INSERT try met (`write_path_open`). The spec writes a sub-block of
partition p through ReplicaForwardInsert and ReplicaWriteInsert: the receiver's map names p's
owners, and an owner whose map is Keeper's writes it. So a refusal is justified when, before or
after the try, one of these did not hold; `receiver_writable` is recorded for the reader, not
judged:

- p was assigned, at the same znode version before and after, and the receiver's map held it
  at that version (a stale map refuses, and a forward on it may reach a former owner). The
  receiver itself need not be writable: with the partition in its map it routes without Keeper,
  and a read-only receiver that owns it hands the sub-block to another owner (route_insert, as
  a Distributed INSERT does). A try whose receiver had no map entry (it reads Keeper first,
  and allocates a new partition) is left unjudged, as is a stale one;
- some owner was writable before and after, and every writable owner's map was at that version,
  or held no entry of p yet (it loads one before it writes). A forward may go to any writable
  owner of the receiver's map (spec ReplicaForwardInsert chooses), and one whose map is stale
  refuses the write (its version check fails; the client retries): a refusal the spec allows.

Or p was not assigned before nor after the try, the receiver was writable and at least
replication_factor replicas were active both times (`active_replicas`): the spec's allocation
(ReplicaChooseOwners, then ReplicaCreateAssignment or, if another allocator won, its adoption)
was enabled, so a refusal breaks the invariant too. With a placement declared (fault domains)
`active_replicas` is not recorded and such a try is left unjudged: the domains decide there.
"""

from __future__ import annotations

from history.schema import REFUSAL_SIDES

# A command's outcome (table commands).
ACCEPTED, REFUSED, RAISED = "accepted", "refused", "raised"
# The spec's MigrationsInFlight states; a migration in any other state has ended (or never began).
IN_FLIGHT = ("clone", "switched", "cancelling")
# StartMigration's mig[p].st \in {"none", "done", "cancelled"}: a partition free to migrate.
STARTABLE = ("none", "done", "cancelled")
# The states of a migration that has ended (the spec's mig[p].st).
MIGRATION_ENDED = ("done", "cancelled")
# MigrationOutcomeInv: the states that say the SWITCH happened, and those that say it has not or never will.
SWITCHED = ("switched", "done")
NOT_SWITCHED = ("clone", "cancelling", "cancelled")
# The spec's Leaver(p) while mig[p].st is one of these: the source after SWITCH, the target after CANCEL.
LEAVER = {"switched": "src", "cancelling": "dst"}


def keepers_at(assignments, migrations=()) -> dict[tuple[int, str], set[str]]:
    """(snapshot_step, partition_id) -> who may hold the partition at that snapshot: the spec's
    Keepers(asg[p]) (owners, the CLONE target, the leaving replica: rows of `assignments`) and,
    for rows of `migrations` given, its Leaver while the migration is switched or cancelling (a
    history without that table names its leavers in leaving_replica only). PR #102244's histories
    name their `:cloning` targets comma-separated. A partition with no assignment row at a
    snapshot has no keeper there. Sized by snapshots x partitions."""
    out: dict[tuple[int, str], set[str]] = {}
    for a in assignments:
        out.setdefault((a["snapshot_step"], a["partition_id"]), set()).update(
            x for x in [*a["owners"], *(a.get("clone_target") or "").split(","), a["leaving_replica"]] if x)
    for m in migrations:
        leaver = m[LEAVER[m["state"]]] if m["state"] in LEAVER else None
        if leaver:
            out.setdefault((m["snapshot_step"], m["partition_id"]), set()).add(leaver)
    return out


def reassign_allowed(c: dict) -> bool:
    """AdminReassign(p, src, dst) = dst \\in active /\\ StartMigration(p, src, dst), on what was
    observed (a row of `commands`). The reference's limit of migrations in flight (max_concurrent)
    is StartMigration's Cardinality(MigrationsInFlight) < MaxConcurrentMigrations: a refusal at
    the limit is justified."""
    owners = c["owners"]
    return (owners is not None and c["migration_state"] in STARTABLE and c["src"] in owners
            and c["dst"] not in owners and bool(c["src_active"]) and bool(c["dst_active"])
            and c["in_flight"] < c["max_in_flight"])


def cancel_allowed(c: dict) -> bool:
    """CoordinatorCancel(p): mig[p].st = "clone" /\\ mig[p].src # None /\\ mig[p].coord \\in active."""
    return c["migration_state"] == "clone" and c["migration_src"] is not None and bool(c["coordinator_active"])


def effect_expected(c: dict) -> dict | None:
    """The `_after` columns a command must leave, as column -> value (a column not named may hold
    anything): AdminReassign's mig' = [st |-> "clone", src |-> src, dst |-> dst] and asg' with
    target dst, owners unchanged; CoordinatorCancel's st' = "cancelling" of the same src -> dst
    and asg' with no target, leaving = dst, owners unchanged; a refused command leaves the
    migration state, source and owners it found (its dst, target and leaver are not observed
    before). None when not judged: the command raised, or the history predates the `_after`
    columns."""
    if c.get("migration_state_after") is None or c["outcome"] not in (ACCEPTED, REFUSED):
        return None
    if c["outcome"] == REFUSED:
        return {"migration_state_after": c["migration_state"], "migration_src_after": c["migration_src"],
                "owners_after": c["owners"]}
    if c["command"] == "REASSIGN":
        return {"migration_state_after": "clone", "migration_src_after": c["src"], "migration_dst_after": c["dst"],
                "owners_after": c["owners"], "target_after": c["dst"]}
    return {"migration_state_after": "cancelling", "migration_src_after": c["migration_src"],
            "migration_dst_after": c["dst"], "owners_after": c["owners"], "target_after": None,
            "leaving_after": c["dst"]}


def write_path_open(r: dict, rf: int) -> bool:
    """ReplicaForwardInsert / ReplicaWriteInsert enabled for the sub-block on both views, whichever
    writable owner the router picks, or the allocation of an unassigned partition (a row of
    `insert_refusals`; `rf` the run's replication_factor): then its refusal breaks
    InsertRefusalsFollowGuardsInv."""
    if allocation_open(r, rf):
        return True
    v = r["keeper_version_before"]
    writable = {x: set(r[f"writable_owners_{x}"] or ()) for x in REFUSAL_SIDES}
    return (v is not None and r["keeper_version_after"] == v
            and all(r[f"receiver_map_version_{x}"] == v and not writable[x] & set(r[f"stale_owners_{x}"] or ())
                    for x in REFUSAL_SIDES)
            and bool(writable["before"] & writable["after"]))


def allocation_open(r: dict, rf: int) -> bool:
    """The partition unassigned on both views, the receiver writable and at least `rf` replicas
    active on both (an older history, without active_replicas, is not judged by this)."""
    return all(r[f"keeper_version_{x}"] is None and r[f"receiver_writable_{x}"] == 1
               and r.get(f"active_replicas_{x}") is not None and r[f"active_replicas_{x}"] >= rf
               for x in REFUSAL_SIDES)
