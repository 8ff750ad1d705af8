"""A small in-process oracle over a History: the invariants of the PySpark job (pyspark_jobs/),
by the same names and the same meaning, for runs small enough to hold in memory. The command line
prints its verdict; the tests use it as a second, independent implementation of the checks the
Spark job makes at scale, and `tests/checkers/test_checkers_agree*.py` hold the two to each other
invariant by invariant.

Meanings are the spec's (spec/rfc/SelectiveReplication.tla): NoForeignPartsInv allows a replica to
keep a partition it owns, CLONEs into (the target), or is leaving until its CLEANUP (the source
after SWITCH, the target after CANCEL), and is judged at every snapshot of the history. The oracle once allowed owners only, and reported
"r1 keeps 202401-11 without owning it" for a source whose CLEANUP was still to come when the run
ended (issue 15); that history is kept in test_checkers_agree.py.

A row a DROP PARTITION removed (table `drops`) is owed as the spec's LiveAcked says: to no owner
after the drop, and to no query that started after it; a replica that still holds it at the end
breaks DropsAppliedInv (F8: a CLONE target kept a part the drop removed elsewhere).

NoLogicalErrorsInv: every row of the history's `errors` table (an exception no protocol refusal
explains, logged while the run went on) is a violation, as ClickHouse's CI fails a run whose
server threw a LOGICAL_ERROR ("a bug in ClickHouse"; debug builds abort on it). Without it a
mutant that makes a command or an INSERT raise leaves a history in which nothing happened, and
every other invariant holds vacuously.

CommandsFollowGuardsInv: every operator command of the optional `commands` table (REASSIGN,
CANCEL) was accepted exactly when its spec action's guard held on what the harness read from
Keeper before it (history/commands.py), so a command a broken guard refuses shows too; and
left in Keeper, read right after it, what its action writes: an accepted REASSIGN a CLONE of its
src -> dst, an accepted CANCEL "cancelling", a refused one the migration it found.

InsertRefusalsFollowGuardsInv: an INSERT try (optional table `insert_refusals`) was refused only
when the spec's write path of the sub-block it failed on was closed, before or after the try: a
read-only receiver, a stale or missing map, or no writable owner with a current map; for a
partition not yet assigned, a read-only receiver or fewer than replication_factor active replicas
(history/refusals.py). Without it a router that refuses writes it should forward or fail over
leaves a history in which the client simply retried.

CrashFailsQueriesInv: no query is answered complete though its receiver crashed while it ran
(optional table `crashes`), and none is failed by the crash of a replica that served it neither
as its receiver nor as a reader of a partition it had still to read (queries.failed_by,
pending_at): the spec's ReplicaCrash fails exactly the queries the replica served. Without it a
harness whose crash leaves such a query open (served_by's mutant `query.at != replica`) shows a
client served by a dead process, one whose crash fails every open query (`not query.done or`)
fails queries no broken connection touched, and every other invariant holds.

MutationsAppliedInv: the spec's, at every snapshot (tables log_mutations, queued_mutations and
metadata.log_pointer; `mutations_not_applied`): a keeper's part reflects every MUTATE_PART of its
partition below the keeper's log_pointer that overlaps it, or a mutation of the partition is
pending in its queue. A CLONE target that skipped a MUTATE_PART as no keeper, and was not given
it by the CLONE fetch, holds old data with nothing pending (F8, for mutations); in the reference
an owner re-selects an owed mutation for its own part later, so the settled end no longer shows it.

CancelHonouredInv: a CANCEL the coordinator accepted is carried out (spec CoordinatorCancel: the
migration goes to "cancelling", and only CLEANUP ends it, as "cancelled"). Without it a CANCEL
acknowledged and ignored (its state written under the wrong key) lets the CLONE SWITCH, and
every other invariant holds.

MigrationOutcomeInv: at every snapshot, a partition's migration state agrees with its assignment
(outcome_contradiction: switched or done, the source is no owner; clone, cancelling or cancelled,
the target is none; the leaving replica is the source while switched, the target while
cancelling, no one otherwise). The history does not record which replicas SYSTEM DROP REPLICA
removed, so the spec's clause "switched or done, the target is an owner unless removed" is judged
by TLC and conformance only. Without it a CLEANUP that records a switched migration as cancelled
breaks nothing else, nor one on a down leaver's behalf whose end is lost (the migration left
switched with no one leaving, until the leaver comes back and ends it).

RepairOutcomeProp: at every snapshot a partition has replication_factor owners, less its owners
SYSTEM DROP REPLICA removed so far (table replica_drops), plus its repairs' SWITCHes so far (table
repairs) (`owner_counts_off`). Without it a repair whose SWITCH moves the partition away from its
coordinator (repair_moves_coordinator) shows only at a settled end, in ReplicationFactorInv.

DownWaitBoundedProp: no migration waits on a down replica much longer than the down timeout
(run.down_timeout, in steps; a history without it, or with it null, is not judged). A
migration whose Leaver (the source after SWITCH, the target after CANCEL) is down, or a CLONE
whose coordinator is down, acts without it once it has been down for the timeout (CLEANUP on
its behalf, a take-over): seen so at every snapshot over a span of more than
down_timeout + DOWN_WAIT_GRACE steps (checkers/invariants.py, where the figures it is chosen
from are), it waited too long (`down_waits`). Down is what the
history can show: not among the snapshot's running replicas (table metadata). Unless a switched
migration's down source may hold the only copy of a part (F23's cost, `only_copies_down`).
"""

from __future__ import annotations

from collections import Counter

from checkers.invariants import DOWN_WAIT_GRACE
from history.record import History
from history.semantics import (ACCEPTED, LEAVER, MIGRATION_ENDED, NOT_SWITCHED, REFUSED, SWITCHED, allocation_open,
                               cancel_allowed, effect_expected, keepers_at, reassign_allowed, write_path_open)
from protocol.parts import PartName

INVARIANTS = ("OwnersCompleteInv", "NoDuplicateRowsInv", "QueryNoMissingInv", "QueryNoDuplicateInv",
              "ReplicationFactorInv", "NoForeignPartsInv", "AmbiguousInsertAtomicInv", "NoPhantomRowsInv", "DropsAppliedInv",
              "GlobalEntriesAppliedInv", "MigrationsEndProp", "NoLogicalErrorsInv",
              "CommandsFollowGuardsInv", "CancelHonouredInv", "DownWaitBoundedProp", "InsertRefusalsFollowGuardsInv",
              "MutationsAppliedInv", "MigrationOutcomeInv", "CrashFailsQueriesInv", "RepairOutcomeProp")


def check(history: History, rf: int) -> dict[str, list[str]]:
    """Per invariant, its failures in plain words ([] when it holds)."""
    t = history.tables
    out: dict[str, list[str]] = {name: [] for name in INVARIANTS}
    ok = {}    # row_id -> (partition, earliest ack_step)
    written = set()   # (partition, row_id) of every ok or unknown insert
    for x in t["inserts"]:
        if x["status"] == "ok":
            prev = ok.get(x["row_id"])
            ok[x["row_id"]] = (x["partition_id"], min(x["ack_step"], prev[1]) if prev else x["ack_step"])
        if x["status"] in ("ok", "unknown"):
            written.add((x["partition_id"], x["row_id"]))
    dropped: dict[tuple[str, int], int] = {}   # (partition, row_id) -> the step of the drop that removed it
    for x in t.get("drops", ()):
        key = (x["partition_id"], x["row_id"])
        dropped[key] = max(x["drop_step"], dropped.get(key, x["drop_step"]))
    lag: dict[str, set[int]] = {}   # rows a query is not owed by replication lag (history/lag.py)
    for x in t.get("query_lag", ()):
        lag.setdefault(x["query_id"], set()).add(x["row_id"])
    returned: dict[str, Counter] = {}
    for x in t["query_rows"]:
        returned.setdefault(x["query_id"], Counter())[x["row_id"]] += 1
        if (x["partition_id"], x["row_id"]) not in written:
            out["NoPhantomRowsInv"].append(f"{x['query_id']} returned row {x['row_id']} of {x['partition_id']}, "
                                           f"never inserted there")
    for q in t["queries"]:
        if q["status"] != "complete":
            continue
        got = returned.get(q["query_id"], Counter())
        out["QueryNoDuplicateInv"] += [f"{q['query_id']} read row {r} {n} times" for r, n in got.items() if n > 1]
        for r, (p, ack) in ok.items():
            wanted = q["partitions_requested"] is None or p in q["partitions_requested"]
            gone = dropped.get((p, r))
            if gone is not None and gone < q["start_step"]:
                continue   # removed by a drop before the query started: owed to it no more
            if ack < q["start_step"] and wanted and r not in got and r not in lag.get(q["query_id"], ()):
                out["QueryNoMissingInv"].append(f"{q['query_id']} missed row {r} of {p}, acknowledged at {ack}")

    # The final snapshot is the last one taken, whether or not any replica held a part then: a run
    # whose partitions were all dropped ends with no parts row, and its last snapshot with parts
    # (before the drops) is history, not its end state (the Spark job's is the last of `assignments`).
    final = max((x["snapshot_step"] for x in [*t["parts"], *t.get("assignments", ())]), default=None)
    held: dict[tuple[str, str], Counter] = {}
    for x in t["parts"]:
        if x["snapshot_step"] == final:
            held.setdefault((x["replica"], x["partition_id"]), Counter())[x["row_id"]] += 1
            if (x["partition_id"], x["row_id"]) not in written:
                out["NoPhantomRowsInv"].append(f"{x['replica']} holds row {x['row_id']} of {x['partition_id']}, "
                                               f"never inserted there")
    last = max((a["snapshot_step"] for a in t["assignments"]), default=None)
    final_asg = [a for a in t["assignments"] if a["snapshot_step"] == last]
    owners = {a["partition_id"]: list(a["owners"]) for a in final_asg}
    for (r, p), have in sorted(held.items()):
        out["DropsAppliedInv"] += [f"{r} holds row {row} of {p}, removed by the drop at step {dropped[p, row]}"
                                   for row in sorted(have) if (p, row) in dropped]
        out["NoDuplicateRowsInv"] += [f"{r} holds row {row} of {p} {n} times" for row, n in have.items() if n > 1]
    out["NoForeignPartsInv"] = foreign_parts(t)
    for p, os_ in sorted(owners.items()):   # the spec's Cardinality(asg[p].owners) = RF: more is a violation too
        if len(os_) != rf:
            out["ReplicationFactorInv"].append(f"{p} has owners {os_}, not {rf}")
    acked_in: dict[str, set[int]] = {}
    for r, (p, _) in ok.items():
        if (p, r) in dropped:
            continue   # the spec's LiveAcked: a dropped row is owed to no owner
        acked_in.setdefault(p, set()).add(r)
    for p, want in sorted(acked_in.items()):
        if not owners.get(p):
            out["OwnersCompleteInv"].append(f"{p} has {len(want)} acknowledged rows and no owner")
        complete = 0
        for o in owners.get(p, ()):
            missing = want - set(held.get((o, p), ()))
            if missing:
                out["OwnersCompleteInv"].append(f"{o} owns {p} and lacks {len(missing)} acknowledged rows")
            else:
                complete += 1
        if complete < rf:
            out["ReplicationFactorInv"].append(f"{p} is complete on {complete} owners, not {rf}")
    # The spec's GlobalEntriesAppliedInv at a settled end (every replica pulled the whole log):
    # applied + queued ALTER_METADATA = the table's metadata version, on every replica.
    meta = t.get("metadata", ())
    last_meta = max((m["snapshot_step"] for m in meta), default=None)
    for m in meta:
        if m["snapshot_step"] == last_meta and m["metadata_version"] + m["alters_queued"] != m["table_metadata_version"]:
            out["GlobalEntriesAppliedInv"].append(
                f"{m['replica']} applied {m['metadata_version']} and queued {m['alters_queued']} ALTER_METADATA "
                f"of the table's {m['table_metadata_version']}")
    out["MigrationsEndProp"] = migrations_not_ended(t, last)
    out["NoLogicalErrorsInv"] = logical_errors(t)
    out["CommandsFollowGuardsInv"] = commands_off_guard(t)
    out["CancelHonouredInv"] = cancels_ignored(t)
    out["DownWaitBoundedProp"] = down_waits_too_long(t)
    out["InsertRefusalsFollowGuardsInv"] = refusals_off_guard(t, rf)
    out["MutationsAppliedInv"] = mutations_not_applied(t)
    out["MigrationOutcomeInv"] = outcomes_contradicted(t)
    out["CrashFailsQueriesInv"] = queries_across_crashes(t)
    out["RepairOutcomeProp"] = owner_counts_off(t, rf)
    unknown: dict[str, set[int]] = {}
    for x in t["inserts"]:
        if x["status"] == "unknown":
            unknown.setdefault(x["insert_id"], set()).add(x["row_id"])
    for insert_id, ids in sorted(unknown.items()):
        p = insert_id.rsplit("/", 1)[1]
        for o in owners.get(p, ()):
            present = ids & set(held.get((o, p), ()))
            if present and present != ids:
                out["AmbiguousInsertAtomicInv"].append(
                    f"insert {insert_id} of unknown outcome is partly on {o}: {len(present)} of {len(ids)} rows")
    return out


def queries_across_crashes(t: dict) -> list[str]:
    """CrashFailsQueriesInv: a query answered complete though its receiver crashed while it ran
    (table `crashes`, strictly between its start and end steps: a crash does not tick the clock,
    so one at the start's step may precede the query and one at the end's step follows the
    answer); or one failed by a crash (queries.failed_by) of a replica that did not serve it,
    neither its receiver nor the reader of a partition it had still to read (queries.pending_at).
    The spec's ReplicaCrash fails exactly the queries the replica served: the client's connection
    and the query's pins were in that process, and no other query's. One line per query; a
    history without the tables (or the columns) recorded no crashes."""
    crashed: dict[str, list[int]] = {}
    for x in t.get("crashes", ()):
        crashed.setdefault(x["replica"], []).append(x["step"])
    out = []
    for q in t["queries"]:
        by = q.get("failed_by")
        if q["status"] == "failed" and by is not None and by != q.get("replica") and by not in (q.get("pending_at") or ()):
            out.append(f"{q['query_id']} at {q['replica']} failed by {by}'s crash, which served it neither as its "
                       f"receiver nor as the reader of a partition it had still to read "
                       f"({', '.join(q.get('pending_at') or ()) or 'none'})")
        if q["status"] != "complete" or q.get("end_step") is None:
            continue
        during = [s for s in crashed.get(q.get("replica"), ()) if q["start_step"] < s < q["end_step"]]
        if during:
            out.append(f"{q['query_id']} at {q['replica']} was answered complete at step {q['end_step']}, "
                       f"though {q['replica']} crashed at step {min(during)} after it started at {q['start_step']}")
    return out


def owner_counts_off(t: dict, rf: int) -> list[str]:
    """RepairOutcomeProp at every snapshot: a partition's owners number replication_factor, less
    one per SYSTEM DROP REPLICA of a replica that owned it (table replica_drops) up to the
    snapshot, plus one per repair SWITCH of it (table repairs) up to the snapshot. A drop does not
    tick the clock, so one at the snapshot's own step may or may not be in it: either count is
    accepted. A repair's SWITCH is stamped with the step it was applied at. One line per
    (snapshot, partition); a history without the tables dropped and repaired nothing."""
    drops: dict[str, list[int]] = {}
    for x in t.get("replica_drops", ()):
        drops.setdefault(x["partition_id"], []).append(x["step"])
    repairs: dict[str, list[int]] = {}
    for x in t.get("repairs", ()):
        repairs.setdefault(x["partition_id"], []).append(x["step"])
    out = []
    for a in sorted(t["assignments"], key=lambda a: (a["snapshot_step"], a["partition_id"])):
        s, p = a["snapshot_step"], a["partition_id"]
        n = len(set(a["owners"] or ()))
        repaired = sum(1 for x in repairs.get(p, ()) if x <= s)
        before = sum(1 for x in drops.get(p, ()) if x < s)
        upto = sum(1 for x in drops.get(p, ()) if x <= s)
        if not rf - upto + repaired <= n <= rf - before + repaired:
            maybe = f" (or {before} dropped: a drop at step {s} may follow the snapshot)" if before != upto else ""
            out.append(f"{p} has {n} owners at step {s}, not {rf} less {upto} dropped plus {repaired} repaired{maybe}")
    return out


def refusals_off_guard(t: dict, rf: int) -> list[str]:
    """InsertRefusalsFollowGuardsInv: each refused try whose write path was open before and after it."""
    return [f"{r['receiver']} refused {r['block_id']}'s {r['partition_id']} at step {r['step']} ({r['error']}) "
            + (f"though it was writable and {min(r['active_replicas_before'], r['active_replicas_after'])} replicas "
               f"were active to allocate the unassigned partition" if allocation_open(r, rf) else
               f"though it and owners {sorted(set(r['writable_owners_before']) & set(r['writable_owners_after']))} "
               f"were writable at the assignment's version {r['keeper_version_before']}") + f": {r['reason']}"
            for r in t.get("insert_refusals", ()) if write_path_open(r, rf)]


def foreign_parts(tables: dict) -> list[str]:
    """NoForeignPartsInv at every snapshot, not only the last: a foreign copy a replica drops when
    its map catches up or it restarts (F7: a CLONE target fetching after a naive CANCEL) is gone
    by the settled end. A replica that is down is in no snapshot (the spec's `r \notin active`:
    it drops what it no longer keeps when it comes back)."""
    keepers = keepers_at(tables["assignments"], tables.get("migrations", ()))
    held = sorted({(x["snapshot_step"], x["replica"], x["partition_id"]) for x in tables["parts"]})
    return [f"{r} keeps {p} at step {step} without owning, cloning into or leaving it"
            for step, r, p in held if r not in keepers.get((step, p), ())]


# outcome_contradiction's `leaving` when the assignment's leaving replica is not judged
UNJUDGED = object()


def expected_leaving(state: str, src: str | None, dst: str, stops_at_switch: bool = False) -> str | None:
    """The assignment's leaving replica while the migration is in `state`: the spec's
    ReplicationFactorInv role clause, with who leaves. The source from SWITCH to its CLEANUP (none
    under source_stops_at_switch, the RFC as written, which the spec exempts), the target from
    CANCEL to its CLEANUP; no one in a CLONE or once the migration ended."""
    if state == "switched":
        return None if stops_at_switch else src
    return dst if state == "cancelling" else None


def outcome_contradiction(state: str, src: str | None, dst: str, owners, gone=None, leaving=UNJUDGED,
                          stops_at_switch: bool = False) -> str | None:
    """MigrationOutcomeInv on one partition: why its migration's state contradicts its assignment,
    or None. From SWITCH on the source is no owner and the target is one (unless SYSTEM DROP
    REPLICA removed it since: `gone`; None when unknown, as in a history, and that clause is not
    judged); before SWITCH and after CANCEL the target is no owner. A replica becomes an owner
    again only through a later migration, which replaces the znode. `leaving`: the assignment's
    leaving replica, which must be expected_leaving's. Without that clause a CLEANUP whose end is
    lost (its state written under another key) leaves the migration switched with no one leaving
    until the leaver, back, ends it: no row and no owner is wrong meanwhile."""
    if state in SWITCHED:
        if src and src in owners:
            return f"{state}, yet its source {src} is still an owner"
        if gone is not None and dst not in owners and dst not in gone:
            return f"{state}, yet its target {dst} is no owner"
    elif state in NOT_SWITCHED and dst in owners:
        return f"{state}, yet its target {dst} is an owner"
    if leaving is not UNJUDGED:
        must = expected_leaving(state, src, dst, stops_at_switch)
        if leaving != must:
            return f"{state}, yet its assignment's leaving replica is {leaving or 'none'}, not {must or 'none'}"
    return None


def outcomes_contradicted(t: dict) -> list[str]:
    """MigrationOutcomeInv: one line per migration snapshot whose state its partition's assignment at
    the same snapshot (table assignments: owners, leaving_replica) contradicts. A history run with
    source_stops_at_switch (table run, bugs) owes no leaving replica after SWITCH, as the spec
    exempts it."""
    asg = {(a["snapshot_step"], a["partition_id"]): a for a in t.get("assignments", ())}
    stops = any("source_stops_at_switch" in (r.get("bugs") or ()) for r in t.get("run", ()))
    out = []
    for m in sorted(t.get("migrations", ()), key=lambda m: (m["snapshot_step"], m["partition_id"])):
        a = asg.get((m["snapshot_step"], m["partition_id"]))
        why = outcome_contradiction(m["state"], m["src"], m["dst"], (a["owners"] or ()) if a else (),
                                    leaving=a["leaving_replica"] if a else UNJUDGED, stops_at_switch=stops)
        if why:
            out.append(f"{m['partition_id']}'s migration {m['src'] or '(repair)'} -> {m['dst']} at step "
                       f"{m['snapshot_step']} is {why}")
    return out


def mutations_not_applied(t: dict) -> list[str]:
    """The spec's MutationsAppliedInv at every snapshot: a keeper (Keepers(asg[p])) holds a part
    whose data version (its mutation, or its first block: MergeTreePartInfo::getDataVersion) is
    below MutationsOwed, the highest mutation of a MUTATE_PART of its partition below the
    keeper's log_pointer whose block range overlaps the part's (table log_mutations), with no
    MUTATE_PART of the partition in its queue and no GET_PART of a part covering it mutated at
    least as far (table queued_mutations). A snapshot without the replica's log_pointer (an
    older history) is not judged. One line per (snapshot, replica, part)."""
    muts: dict[str, list[tuple[int, PartName]]] = {}
    for e in t.get("log_mutations", ()):
        muts.setdefault(e["partition_id"], []).append((e["log_index"], PartName.parse(e["new_part_name"])))
    if not muts:
        return []
    ptr = {(m["snapshot_step"], m["replica"]): m.get("log_pointer") for m in t.get("metadata", ())}
    pending: set[tuple[int, str, str]] = set()
    mutated_gets: dict[tuple[int, str], list[PartName]] = {}
    for q in t.get("queued_mutations", ()):
        if q["entry_type"] == "MUTATE_PART":
            pending.add((q["snapshot_step"], q["replica"], q["partition_id"]))
        else:
            mutated_gets.setdefault((q["snapshot_step"], q["replica"]), []).append(PartName.parse(q["new_part_name"]))
    keepers = keepers_at(t["assignments"])   # the spec's Keepers(asg[p]): no Leaver
    out = []
    for step, r, name in sorted({(x["snapshot_step"], x["replica"], x["part_name"]) for x in t["parts"]}):
        x = PartName.parse(name)
        at = ptr.get((step, r))
        if at is None or x.partition not in muts or r not in keepers.get((step, x.partition), ()):
            continue
        owed = max((m.mutation for i, m in muts[x.partition]
                    if i < at and m.min_block <= x.max_block and x.min_block <= m.max_block), default=0)
        if (x.mutation or x.min_block) >= owed or (step, r, x.partition) in pending:
            continue
        if any(g.covers(x) and g.mutation >= owed for g in mutated_gets.get((step, r), ())):
            continue
        out.append(f"{r} holds {name} at step {step}, owing mutation {owed} (a MUTATE_PART below its log "
                   f"pointer {at}) with none pending")
    return out


def migrations_not_ended(t: dict, final: int | None) -> list[str]:
    """The spec's MigrationsEndProp (every started migration ends, DONE or CANCELLED), a liveness
    property, judged on a finite history's settled end: once the driver settled the cluster (no
    step enabled, run.settled_step), a migration still in flight at the final snapshot will
    never end. A history cut wherever it was (no settled_step) or without a migrations table is
    not judged: its migrations may still be on their way."""
    run = t.get("run") or [{}]
    if run[0].get("settled_step") is None:
        return []
    return [f"{m['partition_id']}'s migration {m['src'] or '(repair)'} -> {m['dst']} is still {m['state']} at the "
            f"settled end" for m in t.get("migrations", ())
            if m["snapshot_step"] == final and m["state"] not in MIGRATION_ENDED]


def logical_errors(t: dict) -> list[str]:
    """One line per row of the optional `errors` table: a step, client call or operator command
    that raised where the protocol never does (ClickHouse's LOGICAL_ERROR). "admin" stands for
    the operator's commands, which the history logs with no replica."""
    return [f"{e['replica'] or 'admin'} {e['action']} raised {e['error']} at step {e['step']}: {e['message'] or ''}"
            for e in t.get("errors", ())]


# Per operator command, its spec action's guard on what the harness observed before it.
GUARDS = {"REASSIGN": reassign_allowed, "CANCEL": cancel_allowed}


def commands_off_guard(t: dict) -> list[str]:
    """CommandsFollowGuardsInv: an operator command (table `commands`) was accepted exactly when
    its spec action's guard held on the state the harness read before it (history/commands.py):
    accepted against the guard, or refused though it held, is a violation; so is a command whose
    migration read right after it is not what its outcome writes (semantics.effect_expected). A
    command that raised is NoLogicalErrorsInv's (its errors row), not judged here; a history
    without the table recorded no commands."""
    out = []
    for x in t.get("commands", ()):
        if x["outcome"] not in (ACCEPTED, REFUSED):
            continue
        guard = x["command"] in GUARDS and GUARDS[x["command"]](x)
        if (x["outcome"] == ACCEPTED) != guard:
            out.append(f"{x['command']} of {x['partition_id']} {x['src']} -> {x['dst']} at step {x['step']} was "
                       f"{x['outcome']} though its guard {'held' if guard else 'did not hold'}"
                       + (f": {x['reason']}" if x["reason"] else ""))
            continue
        expected = effect_expected(x) or {}
        off = {k: v for k, v in expected.items() if x.get(k) != v}
        if off:
            out.append(f"{x['command']} of {x['partition_id']} {x['src']} -> {x['dst']} at step {x['step']} was "
                       f"{x['outcome']} and left " + ", ".join(f"{k.removesuffix('_after')} {x.get(k)}, not {v}"
                                                              for k, v in off.items()))
    return out


# What a migration may show once a CANCEL of it was accepted: CoordinatorCancel's state, then CLEANUP's.
CANCEL_HONOURED = ("cancelling", "cancelled")


def cancels_ignored(t: dict) -> list[str]:
    """CancelHonouredInv: one line per migration snapshot (table `migrations`) of a partition whose
    CANCEL was accepted at an earlier step (table `commands`) that shows the migration neither
    cancelling nor cancelled. A snapshot at the CANCEL's own step may precede it (a CANCEL does
    not tick the clock), so only later ones are judged. The CANCEL's migration ends where another
    begins: at the partition's next accepted REASSIGN (a snapshot at its step may follow it), or
    at the first snapshot naming another src -> dst (a repair, which no command records)."""
    cmds = t.get("commands", ())
    cancels = [x for x in cmds if x["command"] == "CANCEL" and x["outcome"] == ACCEPTED]
    reassigns = [x for x in cmds if x["command"] == "REASSIGN" and x["outcome"] == ACCEPTED]
    snaps = sorted(t.get("migrations", ()), key=lambda m: m["snapshot_step"])
    ignored = {}   # (partition, snapshot_step) -> (the snapshot row, the latest CANCEL it ignores): one line each
    for c in cancels:
        p, at = c["partition_id"], c["step"]
        until = min((r["step"] for r in reassigns if r["partition_id"] == p and r["step"] > at), default=None)
        for m in snaps:
            if m["partition_id"] != p or m["snapshot_step"] <= at:
                continue
            if (until is not None and m["snapshot_step"] >= until) or (m["src"], m["dst"]) != (c["src"], c["dst"]):
                break
            if m["state"] not in CANCEL_HONOURED:
                ignored[p, m["snapshot_step"]] = (m, at)
    return [f"{p}'s migration {m['src'] or '(repair)'} -> {m['dst']} is {m['state']} at step {step}, after its "
            f"CANCEL accepted at step {at}" for (p, step), (m, at) in sorted(ignored.items())]


def down_waits(t: dict) -> list[dict]:
    """Every migration snapshot (table `migrations`) at which the migration waits on a down
    replica, with the first snapshot of its unbroken wait: `who` is its Leaver (switched: the
    source, cancelling: the target) or, in CLONE, its coordinator (column `coordinator`), and
    is down: not among the running replicas of the snapshot (table `metadata`, one row per
    running replica; a snapshot with no row there shows no one down). A Leaver's CLEANUP waits
    for every active map to see the assignment first (migration.replica_cleanup_for_down_leaver):
    only a snapshot whose `maps_behind` is empty (not null) shows it waiting on the Leaver.
    `since`: the earliest of the partition's consecutive snapshots up to this one that all show
    the same wait (state, src, dst and who); what happened between two snapshots is not seen, so
    a wait is measured from a snapshot showing it to a later one, never longer than it was."""
    running: dict[int, set[str]] = {}
    for m in t.get("metadata", ()):
        running.setdefault(m["snapshot_step"], set()).add(m["replica"])
    by_partition: dict[str, list[dict]] = {}
    for m in t.get("migrations", ()):
        by_partition.setdefault(m["partition_id"], []).append(m)
    out = []
    for p, rows in sorted(by_partition.items()):
        prev, since = None, None
        for m in sorted(rows, key=lambda m: m["snapshot_step"]):
            if m["state"] in LEAVER:
                who = m[LEAVER[m["state"]]] if m.get("maps_behind") == [] else None
            else:
                who = m.get("coordinator") if m["state"] == "clone" else None
            up = running.get(m["snapshot_step"])
            down = who is not None and up is not None and who not in up
            key = (m["state"], m["src"], m["dst"], who) if down else None
            if key is None:
                prev = None
                continue
            if key != prev:
                prev, since = key, m["snapshot_step"]
            out.append({"partition_id": p, "state": m["state"], "src": m["src"], "dst": m["dst"], "who": who,
                        "since": since, "snapshot_step": m["snapshot_step"]})
    return out


def down_wait_limit(t: dict) -> int | None:
    """The longest span a migration may be seen waiting on a down replica: run.down_timeout plus
    DOWN_WAIT_GRACE; None (not judged) when the history records no finite timeout in steps."""
    run = t.get("run") or [{}]
    timeout = run[0].get("down_timeout")
    return None if timeout is None else timeout + DOWN_WAIT_GRACE


def only_copies_down(t: dict, waits: list[dict]) -> set[tuple[str, int]]:
    """(partition_id, snapshot_step) of the switched waits at which the down source may hold the
    only copy of a part (F23's cost, the spec's MigrationsEndOrWaitOnOnlyCopyProp: CLEANUP on its
    behalf waits for an owner that stays to hold every part it has). Seen in the history as a row
    of the partition acknowledged by the snapshot's step, not dropped by then, that no running
    replica holds at the snapshot (`parts` lists running replicas only): its copy is on a down one.
    Broader than the spec's ~LeaverRedundant where a down owner other than the source holds it
    too; narrower where the source's only part is of an INSERT never acknowledged (not judged)."""
    asked = {(w["partition_id"], w["snapshot_step"]) for w in waits if w["state"] == "switched"}
    if not asked:
        return set()
    steps = {s for _, s in asked}
    held: dict[tuple[str, int], set[int]] = {}
    for x in t.get("parts", ()):
        if x["snapshot_step"] in steps:
            held.setdefault((x["partition_id"], x["snapshot_step"]), set()).add(x["row_id"])
    dropped: dict[tuple[str, int], int] = {}
    for x in t.get("drops", ()):
        key = (x["partition_id"], x["row_id"])
        dropped[key] = min(x["drop_step"], dropped.get(key, x["drop_step"]))
    out = set()
    for x in t.get("inserts", ()):
        if x["status"] != "ok":
            continue
        for p, s in asked:
            gone = dropped.get((p, x["row_id"]))
            if (x["partition_id"] == p and x["ack_step"] <= s and (gone is None or gone > s)
                    and x["row_id"] not in held.get((p, s), ())):
                out.add((p, s))
    return out


def down_waits_too_long(t: dict) -> list[str]:
    """DownWaitBoundedProp: one line per migration snapshot at which the migration has been seen
    waiting on the same down replica (down_waits) for more than down_timeout + DOWN_WAIT_GRACE
    steps: its CLEANUP on the leaver's behalf, or the CLONE's take-over, is overdue. Unless the
    source of a switched migration may hold the only copy of a part (only_copies_down): then the
    CLEANUP must wait for it to come back or be dropped (SYSTEM DROP REPLICA), as the spec's
    MigrationsEndOrWaitOnOnlyCopyProp allows."""
    limit = down_wait_limit(t)
    if limit is None:
        return []
    over = [w for w in down_waits(t) if w["snapshot_step"] - w["since"] > limit]
    excused = only_copies_down(t, over)
    return [f"{w['partition_id']}'s migration {w['src'] or '(repair)'} -> {w['dst']} is {w['state']} at step "
            f"{w['snapshot_step']}, waiting on {'its coordinator' if w['state'] == 'clone' else 'its leaver'} "
            f"{w['who']}, down at every snapshot since step {w['since']}: {w['snapshot_step'] - w['since']} steps, "
            f"over down_timeout + grace = {limit}"
            for w in over if (w["partition_id"], w["snapshot_step"]) not in excused]


def violations(history: History, rf: int) -> list[str]:
    """Every failure of every invariant, in plain words; [] when the run was exact."""
    return [f"{name}: {p}" for name, problems in check(history, rf).items() for p in problems]
