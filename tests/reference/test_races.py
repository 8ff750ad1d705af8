"""Racing profiles (reference/races.py) and the replication lag they record (history/lag.py):
the fixed protocol holds under them, unsynced reads are excused only what the spec excuses,
and a switch's history is refused by the in-process oracle."""

import pytest

from lab.teeth import SIZE, TEETH
from reference.__main__ import main
from reference.races import PROFILES, racing_history

SMALL = {"steps": 80, "blocks": 16}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_fixed_protocol_holds_under_each_profile(tmp_path, profile):
    run = racing_history(tmp_path, profile, 0, **SMALL)
    # The run goes on past a step that raises (the errors table): the fixed protocol raises none.
    assert run["errors"] == 0, run["error_sample"]
    assert run["oracle_violations"] == 0, run["oracle_sample"]
    assert run["actions"].get("query", 0) > 0


def test_unsynced_queries_record_lag_and_without_it_r2_fails(tmp_path):
    """The lag rows are what stands between an unsynced read and a reported loss: drop them and
    the same history shows misses (so the excuse is used, and is all that is excused)."""
    from checkers.oracle import violations
    from protocol.keeper import MemoryEnsemble
    from reference.races import profile_of, race, racing_cluster
    c = racing_cluster(MemoryEnsemble().connect, tmp_path, profile_of("racing"), 0)
    try:
        race(c, profile_of("racing"), 0, **SMALL)
        c.snapshot()
        assert c.history.tables["query_lag"]
        assert violations(c.history, 2) == []
        c.history.tables["query_lag"] = []
        assert any("missed row" in p for p in violations(c.history, 2))
    finally:
        c.close()


def test_drops_record_what_they_removed_and_without_them_the_rows_are_lost(tmp_path):
    """`dropping`: each DROP PARTITION's removed rows are in the history (table drops), no replica
    holds one at the end, and they are what excuses the owners: without the table the same
    history shows acknowledged rows lost (so the drops are all that is excused)."""
    from checkers.oracle import violations
    from protocol.keeper import MemoryEnsemble
    from reference.races import profile_of, race, racing_cluster
    c = racing_cluster(MemoryEnsemble().connect, tmp_path, profile_of("dropping"), 0)
    try:
        counts = race(c, profile_of("dropping"), 0, **SMALL)
        c.snapshot()
        assert counts.get("drop", 0) > 0 and c.history.tables["drops"]
        removed = {(x["partition_id"], x["row_id"]) for x in c.history.tables["drops"]}
        final = max(x["snapshot_step"] for x in c.history.tables["parts"])
        assert not removed & {(x["partition_id"], x["row_id"]) for x in c.history.tables["parts"]
                              if x["snapshot_step"] == final}
        assert violations(c.history, 2) == []
        c.history.tables["drops"] = []
        assert any(p.startswith("OwnersCompleteInv") for p in violations(c.history, 2))
    finally:
        c.close()


@pytest.mark.parametrize("profile, seed, action, bugs, invariant", [
    ("dropping", 2, None, frozenset(), "DropsAppliedInv"),
    ("dropping", 2, None, frozenset({"clone_ignores_skipped_entries"}), "DropsAppliedInv"),
    ("dropping", 3, None, frozenset({"clone_reads_skipped_entries_from_log"}), "DropsAppliedInv MigrationsEndProp"),
    ("altering", 0, "alter", frozenset(), "GlobalEntriesAppliedInv"),
    ("altering", 0, "alter", frozenset({"filter_skips_global"}), "GlobalEntriesAppliedInv"),
    ("mutating", 1, "mutate", frozenset(), "MutationsAppliedInv"),
    ("mutating", 1, "mutate", frozenset({"clone_ignores_skipped_entries"}), "MutationsAppliedInv"),
], ids=["drop-fixed", "drop-F8", "drop-F16", "alter-fixed", "alter-skips_global", "mutate-fixed", "mutate-F8"])
def test_a_switch_breaks_only_its_invariant_in_oracle_and_duckdb_alike(tmp_path, profile, seed, action, bugs,
                                                                       invariant):   # one or more, space-separated
    """`dropping` seeds 2 and 3 (lab/teeth.py): with F8 (or F16, F8's first fix, on the
    trimmed log) the CLONE target fetches a part a DROP PARTITION removed from its owners, and keeps
    it (DropsAppliedInv); in seed 3 a target that skipped a DROP_RANGE no keeper had pulled yet
    (the keepers' pulling behind: `dropping`'s keepers_lag) also queues a fetch of a part its
    keepers then drop, and waits for it for ever (MigrationsEndProp, F8's other face). `altering` seed 0: with filter_skips_global the log filter skips
    ALTER_METADATA on every replica, so none reaches the table's metadata version
    (GlobalEntriesAppliedInv, one per running replica). `mutating` seed 1: with F8 the CLONE target
    fetches the parts its keepers have not mutated yet and never queues their MUTATE_PARTs, so it
    holds old data with no mutation pending (MutationsAppliedInv, at every snapshot until, an
    owner, it selects the mutation itself). The oracle and DuckDB both report those
    invariants and nothing else, with the same count; the fixed protocol holds for both."""
    from checkers.duckdb_check import check as duckdb_check
    run = racing_history(tmp_path, profile, seed, bugs, **SIZE)
    if action:
        assert run["actions"].get(action, 0) > 0
    by_duckdb = {name: n for name, n in duckdb_check(run["history"]).items() if n}
    if not bugs:
        assert run["oracle_violations"] == 0 and by_duckdb == {}, run["oracle_sample"]
    else:
        # every oracle failure is one of the switch's invariants (the total equals DuckDB's count of them)
        assert run["oracle_invariants"] == sorted(invariant.split())
        assert sorted(by_duckdb) == run["oracle_invariants"]
        assert sum(by_duckdb.values()) == run["oracle_violations"]


@pytest.mark.parametrize("profile, seed, switch", [
    ("racing", 0, "filter_with_stale_cache"),
    ("leaving", 1, "restart_keeps_foreign_parts"),   # the down-leaver rule on the step clock
    ("allocating", 0, "blind_write"),                # the `rival` action's two allocators
])
def test_switch_refused_by_oracle(tmp_path, profile, seed, switch):
    """The same profile and seed holds without the switch (test_fixed_protocol_holds_under_each_profile
    runs seed 0; leaving 1 is checked here)."""
    run = racing_history(tmp_path / "broken", profile, seed, frozenset({switch}), **SMALL)
    assert run["oracle_violations"] > 0
    if seed:
        fixed = racing_history(tmp_path / "fixed", profile, seed, **SMALL)
        assert fixed["oracle_violations"] == 0, fixed["oracle_sample"]


def test_cli_profile(tmp_path, capsys):
    args = ["run", "--profile", "racing", "--replicas", "4", "--buckets", "4", "--blocks", "16", "--rows", "4",
            "--months", "3", "--steps", "80", "--history", str(tmp_path / "h")]
    assert main(args) == 0
    assert (tmp_path / "h" / "query_lag.parquet").exists()
    assert main(args[:-2] + ["--bug", "filter_with_stale_cache"]) == 1
    with pytest.raises(SystemExit) as refused:
        main(["run", "--profile", "nope"])
    assert refused.value.code == 2 and "unknown profile 'nope'" in capsys.readouterr().err


# A switch's first row in make test; its later rows (a variant's code the first never reaches, for
# the mutation layers) in make check's long tests.
_FIRST = {t.switch: t for t in reversed(TEETH)}


@pytest.mark.parametrize("tooth", [pytest.param(t, marks=[] if _FIRST[t.switch] is t else [pytest.mark.long])
                                   for t in TEETH], ids=lambda t: f"{t.switch}-{t.profile}-{t.seed}")
def test_every_tooth_is_refused_by_the_oracle(tmp_path, tooth):
    """The Spark job's teeth table (lab/teeth.py) without Spark: each row's history is still
    refused, naming the row's invariant. A change to the reference or the driver that moves a
    run's course can make a seed stop catching its switch; the Spark cases are long, so without
    this only make check would notice (F6's and F7's rows went stale that way)."""
    run = racing_history(tmp_path, tooth.profile, tooth.seed, frozenset({tooth.switch}), **SIZE)
    assert tooth.invariant in run["oracle_invariants"], run["oracle_sample"]


def _raises(*args, **kwargs):
    # Stands in for a broken step (a mutant's): the protocol's code raising where it never should.
    raise RuntimeError("broken step")


def test_a_step_that_raises_every_time_is_logged_bounded_and_the_run_still_ends(tmp_path, monkeypatch):
    """SWITCH raises every time: each raise is logged in the history's errors table, the
    coordinator stops retrying after MAX_STEP_ERRORS, and the run ends with its migrations left
    in flight and a history written for the checkers, instead of raising out of the run."""
    import pyarrow.parquet as pq

    from reference.cluster import MAX_STEP_ERRORS
    monkeypatch.setattr("reference.cluster.coordinator_switch", _raises)
    run = racing_history(tmp_path, "churn", 0, **SMALL)
    errors = pq.read_table(tmp_path / "history" / "errors.parquet").to_pylist()
    assert run["errors"] == len(errors) > 0
    assert {(e["action"], e["error"], e["message"]) for e in errors} == {("migrate", "RuntimeError", "broken step")}
    per_replica = {}
    for e in errors:
        per_replica[e["replica"]] = per_replica.get(e["replica"], 0) + 1
    assert max(per_replica.values()) == MAX_STEP_ERRORS   # the bound is what ended the retries
    assert run["actions"].get("migrations left in flight") == 1
    # the CLONEs never end (judged at the settled end), and each raise is a LOGICAL_ERROR
    assert run["oracle_invariants"] == ["MigrationsEndProp", "NoLogicalErrorsInv"]


def test_a_query_that_raises_is_a_failed_query_and_the_run_goes_on(tmp_path, monkeypatch):
    """A read that raises reaches the client as a failed query (history status failed, the error
    logged); the run goes on to its end, and the history is refused through NoLogicalErrorsInv only:
    one violation per logged raise (no query is owed anything, so nothing else fails)."""
    monkeypatch.setattr("reference.cluster.replica_read_partition", _raises)
    run = racing_history(tmp_path, "switching", 0, **SMALL)
    assert run["errors"] > 0 and all(": RuntimeError: broken step" in e for e in run["error_sample"])
    assert all(e.split(":")[0].endswith(" query") for e in run["error_sample"])
    assert run["actions"].get("query failed", 0) > 0 and "query" not in run["actions"]
    assert run["oracle_invariants"] == ["NoLogicalErrorsInv"] and run["oracle_violations"] == run["errors"]


def test_a_read_that_leaves_its_partition_pending_fails_its_query_instead_of_hanging(tmp_path, monkeypatch):
    """ReplicaReadPartition removes the partition from the query's pending ones; one that does not
    (replica_read_partition's mutant 13) would leave an open query waiting for ever and the run
    with it. The harness checks the effect after each read (cluster.read_done): the query fails,
    the error is logged, and the run ends with its history refused through NoLogicalErrorsInv."""
    from protocol.query import replica_read_partition

    def leaves_it_pending(query, partition, replicas):
        rows = replica_read_partition(query, partition, replicas)
        query.pending.add(partition)
        return rows
    for where in ("reference.cluster.replica_read_partition", "reference.races.replica_read_partition"):
        monkeypatch.setattr(where, leaves_it_pending)
    run = racing_history(tmp_path, "overlapping", 0, **SMALL)
    assert run["errors"] > 0 and all("which is still pending" in e for e in run["error_sample"]), run["error_sample"]
    assert run["oracle_invariants"] == ["NoLogicalErrorsInv"], run["oracle_sample"]


def test_an_unparsable_queue_entry_is_logged_and_the_run_still_ends(tmp_path, monkeypatch):
    """A CLONE fetch that queues a GET_PART nobody can parse (as replica_clone_fetch's mutant 85,
    whose part name is "None"): the observer reading queues for the history logs the bad entry
    once and goes on, so the run ends with a history the checkers refuse (the target never gets
    the partition's rows), not with the observer's exception and no history at all."""
    from protocol.log_entry import GET_PART, LogEntry

    class Unnamed(LogEntry):
        def __init__(self, type, **kw):
            if type == GET_PART:
                kw["new_part_name"] = "None"
            super().__init__(type, **kw)
    monkeypatch.setattr("protocol.migration.LogEntry", Unnamed)
    run = racing_history(tmp_path, "churn", 0, **SMALL)
    import pyarrow.parquet as pq
    errors = pq.read_table(tmp_path / "history" / "errors.parquet").to_pylist()
    bad = [e for e in errors if e["action"] == "queue entry"]
    assert bad and all(e["error"] == "BadLogEntry" for e in bad)
    assert len(bad) == len({e["message"] for e in bad})   # each entry logged once
    assert "OwnersCompleteInv" in run["oracle_invariants"], run["oracle_invariants"]


def test_cancelling_aims_a_cancel_at_every_migration_state(tmp_path):
    """`cancelling` (seeds 0 and 2, small): CANCELs accepted in a CLONE before and after its fetch,
    and refused after SWITCH, while CANCELLING, after the end and for a repair's CLONE: every state
    where a coordinator's guard that accepts or refuses wrongly changes the run is met."""
    met = set()
    for seed in (0, 2):
        run = racing_history(tmp_path / str(seed), "cancelling", seed, **SMALL)
        assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
        met |= {k for k in run["actions"] if k.startswith("cancel ")}
    for accepted in ("cancel in clone", "cancel in clone fetched"):
        assert accepted in met, met
    for refused in ("switched", "cancelling", "done", "cancelled", "repair"):
        assert any(k.startswith("cancel refused in ") and refused in k for k in met), (refused, met)


def _cancel_in_any_state(keeper, layout, partition, target=None, bugs=frozenset()):
    # A coordinator whose state guard is gone (a mutant's): what a CANCEL in CLONE writes, written
    # in whatever state the migration is.
    from protocol.assignment import Assignment, read_assignment
    from protocol.migration import _write, read_migration
    mig, version = read_migration(keeper, layout, partition)
    a = read_assignment(keeper, layout, partition)
    new = Assignment(a.owners, target=None, leaving=mig["dst"])
    _write(keeper, layout, partition, a, new, {**mig, "state": "cancelling"}, version)
    return new


def test_a_cancel_accepted_after_switch_is_refused_by_the_oracle(tmp_path, monkeypatch):
    """The CANCELs `cancelling` aims past SWITCH change its history when the coordinator accepts
    them: the target, an owner by then, cleans up its copy and the source is left holding one no
    assignment lists (on seed 0, which holds with the guard: the test above)."""
    monkeypatch.setattr("reference.cluster.coordinator_cancel", _cancel_in_any_state)
    run = racing_history(tmp_path, "cancelling", 0, **SMALL)
    assert run["oracle_violations"] > 0
    assert {"OwnersCompleteInv", "NoForeignPartsInv"} & set(run["oracle_invariants"]), run["oracle_sample"]


def test_deserting_has_cleanup_done_for_down_leavers_of_both_kinds(tmp_path, monkeypatch):
    """`deserting` (seed 0, small): the CLEANUP of a down source after SWITCH and of a down target
    after CANCEL are each done on its behalf, several times in one run, and the fixed protocol holds."""
    import reference.cluster
    from protocol.migration import read_migration
    ended = []
    cleanup = reference.cluster.replica_cleanup_for_down_leaver

    def noted(rep, partition, bugs=frozenset()):
        state = read_migration(rep.keeper, rep.layout, partition)[0]["state"]
        who = cleanup(rep, partition, bugs)
        ended.append(state)
        return who
    monkeypatch.setattr("reference.cluster.replica_cleanup_for_down_leaver", noted)
    run = racing_history(tmp_path, "deserting", 0, **SMALL)
    assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
    assert ended.count("switched") >= 2 and ended.count("cancelling") >= 1, ended
    assert run["actions"].get("forsake") == 1   # one leaver lost for good, after its CLEANUPs


def test_clients_go_through_the_client_api_and_are_judged(tmp_path, monkeypatch):
    """`clients` (seed 0, small): INSERTs through client_send_insert and SELECTs through select_all,
    recorded as the client was told; a client API that acknowledges a block it never sent is
    refused by the oracle on the same run (the answers are what the checkers judge)."""
    run = racing_history(tmp_path / "fixed", "clients", 0, **SMALL)
    assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
    assert run["actions"].get("client insert ok", 0) > 0 and run["actions"].get("client query", 0) > 0
    monkeypatch.setattr("reference.races.client_send_insert", lambda *a, **k: "ok")
    lying = racing_history(tmp_path / "lying", "clients", 0, **SMALL)
    assert "OwnersCompleteInv" in lying["oracle_invariants"], lying["oracle_sample"]


def test_a_select_all_that_loses_a_row_is_refused_by_the_oracle(tmp_path, monkeypatch):
    """`clients` seed 0 records what select_all returned: one whose rows go missing (its owed rows
    are all there on the fixed protocol: the test above) has missed rows."""
    from protocol.query import select_all

    def losing(replica, replicas, **kw):
        q = select_all(replica, replicas, **kw)
        q.rows = []
        return q
    monkeypatch.setattr("reference.races.select_all", losing)
    run = racing_history(tmp_path, "clients", 0, **SMALL)
    assert "QueryNoMissingInv" in run["oracle_invariants"], run["oracle_sample"]


def test_client_send_insert_failed_means_nothing_written(tmp_path, monkeypatch):
    """client_send_insert's docstring: "failed" (every try refused before it committed anything). With replicas
    crashing often (both owners of a partition down: each try refused at that sub-block, after the
    sub-blocks before it were written and are deduplicated on the retries) the history shows rows of
    a block the client was told failed. `clients` holds on seeds 0-9 (few crashes); this variant
    did not on seed 1 until client_send_insert told "unknown" once a try had committed a
    sub-block (test_insert.py has the unit case). `refusing` is that variant; on its seed 0 a block
    is told "failed", and a client_send_insert that forgets what a try committed (route_insert's
    `out`) tells "failed" of a block with rows written."""
    run = racing_history(tmp_path / "fixed", "refusing", 0, **SMALL)
    assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
    assert run["actions"].get("client insert failed", 0) > 0, run["actions"]
    import protocol.insert
    route = protocol.insert.route_insert
    monkeypatch.setattr("protocol.insert.route_insert", lambda *a, out=None, **k: route(*a, **k))
    forgetting = racing_history(tmp_path / "forgetting", "refusing", 0, **SMALL)
    assert "NoPhantomRowsInv" in forgetting["oracle_invariants"], forgetting["oracle_sample"]


def test_a_lost_answer_is_told_unknown_to_a_client_that_tries_once(tmp_path, monkeypatch):
    """`impatient` (seed 1, full size): clients that try once, Keeper sessions expiring, some right
    after the commit went out (the answer lost). The fixed client_send_insert tells such a try
    "unknown" and a try refused before its commit "failed"; one that takes the lost answer for a
    refusal before the commit (as _unavailable_before_commit's mutant 2, any KeeperUnavailableError)
    tells "failed" of rows that are in the table: NoPhantomRowsInv."""
    from protocol.keeper import KeeperUnavailableError, SessionExpiredError
    run = racing_history(tmp_path / "fixed", "impatient", 1)
    assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
    assert run["actions"].get("client insert unknown", 0) > 0 and run["actions"].get("client insert failed", 0) > 0
    monkeypatch.setattr("protocol.insert._unavailable_before_commit",
                        lambda e: isinstance(e, (SessionExpiredError, KeeperUnavailableError)))
    told_failed = racing_history(tmp_path / "told_failed", "impatient", 1)
    assert "NoPhantomRowsInv" in told_failed["oracle_invariants"], told_failed["oracle_sample"]


def test_overlapping_queries_hold_pins_across_cleanup(tmp_path, monkeypatch):
    """`overlapping` (small): SELECTs in flight across turns, some pinned on a move's source before
    its SWITCH, so the source's CLEANUP is refused for their pins while the fixed protocol holds;
    a CLEANUP that does not wait for the pins (its map wait kept) drops the copy a pinned query
    was told to read, and the oracle sees the rows it missed."""
    import reference.cluster
    from protocol.assignment import GuardFailed
    cleanup = reference.cluster.replica_cleanup
    waited = []

    def noted(leaver, partition, bugs=frozenset()):
        try:
            return cleanup(leaver, partition, bugs)
        except GuardFailed as e:
            waited.append("running queries" in e.reason)
            raise
    monkeypatch.setattr("reference.cluster.replica_cleanup", noted)
    run = racing_history(tmp_path / "fixed", "overlapping", 2, **SMALL)
    assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
    assert any(waited) and run["actions"].get("query", 0) > 0, (waited, run["actions"])

    class Unpinned(dict):
        def get(self, partition, default=None):
            return None

    def ignoring_pins(leaver, partition, bugs=frozenset()):
        pins, leaver.pins = leaver.pins, Unpinned(leaver.pins)
        try:
            return cleanup(leaver, partition, bugs)
        finally:
            leaver.pins = pins
    monkeypatch.setattr("reference.cluster.replica_cleanup", ignoring_pins)
    run = racing_history(tmp_path / "unpinned", "overlapping", 2, **SMALL)
    assert "QueryNoMissingInv" in run["oracle_invariants"], run["oracle_sample"]


def test_retried_steps_are_refused_by_their_own_guards(tmp_path, monkeypatch):
    """`retrying` (seed 0, small): migration steps retried where their spec guard is false are each
    refused by the step (GuardFailed) and the fixed protocol holds; a SWITCH that skips its own
    guard (and does nothing) is logged as accepted, a LOGICAL_ERROR the oracle refuses."""
    run = racing_history(tmp_path / "fixed", "retrying", 0, **SMALL)
    assert run["oracle_violations"] == 0 and run["errors"] == 0, run["oracle_sample"] + run["error_sample"]
    refused = {k for k in run["actions"] if k.startswith("retried ") and k.endswith(" refused")}
    # each kind of refusal in turn, so a run this short meets the rare ones as well (a mutant of
    # the guard a SWITCH to the wrong target meets survived every racing run before)
    assert len(refused) >= 6, run["actions"]
    assert {"retried switch to another replica than the target refused",
            "retried cleanup for a down leaver that is up refused"} <= refused, run["actions"]
    monkeypatch.setattr("reference.races.coordinator_switch", lambda *a, **k: None)
    run = racing_history(tmp_path / "unguarded", "retrying", 0, **SMALL)
    assert "NoLogicalErrorsInv" in run["oracle_invariants"], run["oracle_sample"]
    assert any("was accepted where its spec guard is false" in e for e in run["error_sample"]), run["error_sample"]
