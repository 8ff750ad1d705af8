"""The racing profiles: workloads whose client and operator actions race the protocol's own
steps, for the history checkers (the in-process oracle, pyspark_jobs/): the interleavings TLC
explores, on the reference, so a history can show a lost, doubled or short-replicated row.

`quiet` is what `reference run` did before profiles (every insert before any migration, synced
queries): it is not driven from here. The other profiles run one seeded loop over the
deterministic driver (reference/cluster.py), so a (profile, seed) is one history, step for step:

- inserts (with retries and, at `fault_rate`, broken forwards of unknown outcome) that land
  between a CLONE's start, its fetch, its SWITCH and its CLEANUP, into partitions that keep being
  created (new months and buckets) while maps are stale;
- REASSIGNs started at random and cancelled at random (a cancel in every state is tried; the
  coordinator refuses it after SWITCH);
- queries that start on the replica's map as it is and read without syncing: the rows the spec
  excuses as replication lag are recorded with them (history/lag.py), the rest are owed;
- replicas crashed and restarted (and queried right after the restart), and, in `lossy`, kept
  down while the cleanup thread trims the log, so they come back lost and clone;
- background steps chosen by kind with the profile's weights: few map refreshes keep maps stale;
- in `dropping`, ALTER TABLE DROP PARTITION racing the REASSIGNs (F8, F16): a drop the CLONE
  target skipped before it became a keeper must reach it; the history records what each drop
  removed (History.drop), so the checkers owe those rows to nobody after it and report any
  replica that still holds one at the end (DropsAppliedInv). The log is short, so the cleanup
  thread trims a DROP_RANGE every replica pulled before the owners executed it (F16). Half the
  drops meet keepers whose pulling is behind the target's (keepers_lag): the DROP_RANGE is in the
  log between their log_pointers and the target's, in no keeper's queue, when the CLONE fetch
  runs at once (F8's log range);
- in `retrying`, migration steps retried on stale reads (a task whose Keeper answer was lost
  after its write went through, or one queued for an earlier migration): SWITCH, CLEANUP (by
  the leaver and on a down leaver's behalf), the CLONE fetch and the take-over, each only where
  its spec guard is false now, so the step's own guard must refuse it. Each refusal (a SWITCH to
  another replica than the target, a SWITCH or CANCEL queued by a coordinator that went down, a
  CLEANUP on the behalf of a leaver that is back, ...) is tried in turn, the least tried first, so
  a short run meets every guard, not only the common ones;
- in `mutating`, ALTER TABLE UPDATE racing the moves: a partition's MUTATE_PARTs written and
  pulled by every replica, not executed, when its CLONE fetch runs (F8, for mutations); half the
  time pulled by the replicas that do not keep the partition only, as drops are.
- in `altering`, ALTER TABLE ADD COLUMN: an ALTER_METADATA every replica must apply, whatever it
  owns; the history records each replica's metadata version at the end (GlobalEntriesAppliedInv);
- in `losing`, a replica lost for good (issue 18, F20): crashed, SYSTEM DROP REPLICA, and its
  partitions repaired back to RF while the inserts, moves and queries go on;
- in `leaving`, a migration's source (in CLONE or after SWITCH) goes down and stays down past
  the down timeout, so its CLEANUP is done on its behalf while queries on stale maps go on, and
  comes back later (the down-leaver rule, issue 15);
- in `allocating`, two allocators race on a new partition (spec/assignment/Assignment.tla): one reads
  (ReplicaChooseOwners) before another replica's INSERT allocates the partition and writes its
  rows, and writes (ReplicaCreateAssignment, or adopts the winner's) some steps after;
- in `cancelling`, CANCELs aimed at each state a migration can be in (`aim_cancel`): a REASSIGN
  driven by its own replicas' steps to a CLONE before or after its fetch, or past SWITCH, or
  cancelled once already, then cancelled; and a CANCEL of an ended migration and of a repair's
  CLONE (a replica lost for good and repaired, as in `losing`): a CANCEL accepted where the
  coordinator must refuse it makes an owner drop its copy, one refused where it must be accepted
  leaves the CLONE to end otherwise; after a CANCEL of a fetched CLONE, the coordinator's
  SWITCH decided before it (its target caught up) runs, and its state guard must refuse it;
- in `deserting`, a replica that is a leaver of both kinds (the source of moves driven to SWITCH,
  the target of a CLONE cancelled) goes down (`desert`) and comes back (`return`) only once no
  migration awaits it as its leaver, so CLEANUP is done on its behalf several times a run; one of
  them, taken down from a settled cluster, is lost for good (SYSTEM DROP REPLICA, `forsake`) and
  its partitions repaired;
- in `clients`, half the INSERTs and queries go through the reference's client API:
  client_send_insert (retries to random replicas with the same rows, so the same dedup ids; one
  answer, ok, failed or unknown, for the whole block) and select_all (routes and pins at the
  start, every partition read at once, unsynced), recorded by the same Cluster code as the
  driver's own (Cluster.insert_answered, Cluster.query_answered), as the client was told;
- in `refusing`, `clients` with replicas crashing often: every try of a block refused, some after
  the block's first sub-blocks were committed (an INSERT is not atomic across partitions): the
  client told "failed" must find none of its rows anywhere, told "unknown" may;
- in `overlapping`, up to MAX_OPEN_QUERIES SELECTs in flight at once, as a server's concurrent
  queries are: each started on its replica's map as it is (about half pruned to some partitions),
  its routes pinned at the start, its partitions read one at a time on later turns, across the
  SWITCHes, CLEANUPs and crashes in between. Two queries pinning one partition on one replica is
  what a pin count is for: a CLEANUP must wait for the last of them. A crash fails every open
  query the replica served (ServedBy), as a broken connection does;
- in `expiring`, replicas' Keeper sessions expire (the in-memory keeper's own expiry: is_active
  goes, every request of the session fails) and are re-established some turns later, as
  ClickHouse's restarting thread does (Cluster.reestablish: a new session, the map reloaded
  first); meanwhile the replica is read-only and its background tasks stop. INSERTs are sent to
  a replica that does not own a partition of the block, so it forwards: a forward meets an owner
  whose session expired (it goes to another owner), and a session expires between the map read
  and the write, the writer's or the receiver's own (the sub-block goes to another owner the map
  names, or is refused when none is writable). New partitions keep appearing (12 months), so a
  writer's map often does not have the partition yet;
- in `parallel`, most SELECTs go through parallel replicas (seed 004, spec/parallel_replicas/):
  three of the four replicas announce their snapshots with migration steps, merges and crashes
  between the announcements and the reads; the coordinator is the run's (`reference run
  --parallel-replicas`): the fix by default, ClickHouse master's (`snapshot_replica`, the path
  PR #102244 takes: PR-F11) or 2023's (`union`) to show F24 in a history; `orphan` forces F24's
  first window: every owner of a partition down while a parallel-replicas SELECT runs;
- in `windows` (as `losing`) and `windows_rf1` (replication factor 1, no crash, no loss), the
  windows of reference/windows.py forced on half the seeds (Profile.windows, driven by
  reference/race_windows.py): a SWITCH tried with a GET_PART of its partition queued on the
  target, a SELECT received by a CLONE's target whose map names it so, and (RF 2 only) a replica
  crashed while a repair is in flight. At RF 1 the copy a weakened guard lets go is the only one,
  so the loss reaches the history instead of surviving on the other owner;
- in `impatient`, `expiring` with most INSERTs from clients that try once (Profile.client_tries):
  a try whose commit went out and whose answer was lost is the client's only answer, and must be
  told "unknown", not "failed" (its rows are in the table).

A profile is data: the weights of its actions and of the background step kinds, its sizes, its
fault and down-time settings. The loop that draws from them is reference/races.py's Race, its
fault actions reference/race_faults.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from protocol.cleanup_thread import CleanupSettings


@dataclass(frozen=True)
class Profile:
    name: str
    actions: dict[str, float]                  # action -> weight, one drawn per loop turn
    kinds: dict[str, float]                    # background step kind -> weight
    steps: int = 400                           # loop turns
    interleave: int = 3                        # background steps at most before each read
    fault_rate: float = 0.1                    # broken INSERT forwards (outcome unknown)
    min_live: int = 2                          # never crash below this many running replicas
    max_down: int = 2                          # nor have more than this many down at once
    cleanup: CleanupSettings = field(default_factory=CleanupSettings)
    attempts: int = 1                          # (replica, kind) draws per "step" turn until one is enabled
    months: int = 3                            # months the rows' dates spread over (x buckets: partitions)
    buckets: int = 4                           # user buckets per month
    down_timeout: float = math.inf             # steps a migration waits on a down replica (Cluster.down_timeout)
    min_down: int = 0                          # steps a crashed replica stays down before a restart may pick it
    client_tries: int = 3                      # tries of a client_send_insert before its client gives up
    max_parallel_replicas: int = 3             # replicas a parallel-replicas SELECT spreads over (`parallel`)
    rf: int = 2                                # the table's replication_factor
    windows: tuple[str, ...] = ()              # the windows forced on the forced seeds (reference/windows.py)
    describe: str = ""


_KINDS = {"refresh": 1, "pull": 4, "execute": 4, "migrate": 3, "merge": 1, "cleanup": 1}
PROFILES = {p.name: p for p in (
    Profile("racing", {"insert": 4, "step": 8, "reassign": 1.5, "cancel": 0.7, "query": 2, "crash": 0.3,
                       "restart": 0.6},
            _KINDS, describe="inserts, retries, reassigns and cancels racing CLONE/SWITCH/CLEANUP; "
                             "unsynced queries; crash and restart"),
    Profile("stale", {"insert": 4, "step": 8, "reassign": 2, "cancel": 0.3, "query": 4, "crash": 0.2,
                      "restart": 0.5},
            {**_KINDS, "refresh": 0.2, "migrate": 5}, interleave=5,
            describe="as racing, with maps refreshed rarely and queries read between migration steps"),
    Profile("lossy", {"insert": 4, "step": 10, "reassign": 1, "cancel": 0.3, "query": 2, "crash": 0.6,
                      "restart": 0.3},
            {**_KINDS, "cleanup": 3}, cleanup=CleanupSettings(min_logs_to_keep=2, max_logs_to_keep=6), max_down=1,
            describe="as racing, with a short log: replicas down long enough are marked lost and clone"),
    Profile("thin", {"insert": 4, "step": 6, "reassign": 1, "cancel": 0.3, "query": 2, "crash": 1.2,
                     "restart": 0.8},
            _KINDS, min_live=1, max_down=3, months=12,
            describe="as racing, with most replicas down at times while new partitions keep appearing "
                     "(12 months): a new partition meets fewer active replicas than the replication factor"),
    Profile("switching", {"insert": 2, "step": 6, "reassign": 2, "cancel": 0.1, "query": 4},
            {"refresh": 0.3, "pull": 3, "execute": 3, "migrate": 4, "merge": 0.5, "cleanup": 0.5}, interleave=6,
            attempts=8, months=1, buckets=2,
            describe="two partitions moved again and again, inserts spread over the run, maps refreshed "
                     "rarely and queries reading between migration steps: writes and reads on a map a "
                     "SWITCH made stale"),
    Profile("churn", {"insert": 1.5, "step": 10, "reassign": 2, "cancel": 0.05, "query": 3},
            {"refresh": 0.3, "pull": 5, "execute": 5, "migrate": 5, "merge": 0.2, "cleanup": 0.5}, interleave=6,
            attempts=8, months=1, buckets=2,
            describe="as switching, with replication keeping up so migrations SWITCH during the run, not "
                     "only at its end: INSERTs meet a source whose map a SWITCH just made stale"),
    Profile("dropping", {"insert": 4, "step": 10, "reassign": 0.5, "cancel": 0.2, "query": 2, "drop": 1},
            {**_KINDS, "pull": 8, "execute": 2, "migrate": 6, "cleanup": 2}, cleanup=CleanupSettings(min_logs_to_keep=0, max_logs_to_keep=50),
            describe="as racing, with DROP PARTITION racing CLONE/SWITCH/CLEANUP and a log the cleanup "
                     "thread trims as soon as every replica pulled an entry"),
    Profile("altering", {"insert": 4, "step": 8, "reassign": 1.5, "cancel": 0.7, "query": 2, "crash": 0.3,
                         "restart": 0.6, "alter": 0.5},
            _KINDS, describe="as racing, with ALTER TABLE ADD COLUMN (ALTER_METADATA, a global entry every "
                             "replica applies whatever it owns) racing the moves and crashes"),
    Profile("retrying", {"insert": 4, "step": 8, "reassign": 2, "cancel": 0.7, "query": 2, "crash": 0.8,
                         "strand": 0.6, "restart": 1.2, "retry_stale": 2},
            {**_KINDS, "migrate": 5},
            describe="as racing, with migration steps retried on stale reads (a task whose Keeper answer was "
                     "lost after its write went through, or queued for an earlier migration of the partition, or "
                     "by a coordinator before its crash): each step's own guard must refuse the retry, and each "
                     "kind of refusal is tried in turn"),
    Profile("losing", {"insert": 4, "step": 8, "reassign": 1, "cancel": 0.3, "query": 2, "crash": 0.2,
                       "restart": 0.5, "lose": 0.4, "repair": 1},
            _KINDS, max_down=1,
            describe="as racing, with one replica lost for good (crash, SYSTEM DROP REPLICA) and its partitions "
                     "repaired back to RF (CLONE, SWITCH adds the owner) while inserts, moves and queries go on"),
    Profile("leaving", {"insert": 4, "step": 8, "reassign": 2, "cancel": 0.3, "query": 4, "strand": 1,
                        "restart": 0.6},
            {**_KINDS, "refresh": 0.3}, interleave=4, max_down=1, down_timeout=30, min_down=60,
            describe="as racing, with a migration's source down past the down timeout (30 steps; 60 at least) "
                     "so its CLEANUP is done on its behalf, then back; maps refreshed rarely, so queries route "
                     "on maps that still list the leaver"),
    Profile("allocating", {"insert": 3, "rival": 2, "step": 8, "reassign": 1, "cancel": 0.3, "query": 3,
                           "crash": 0.2, "restart": 0.5},
            _KINDS, months=12,
            describe="as racing, with new partitions all through the run (12 months) and two allocators "
                     "racing on a new partition between the read and the write of its assignment"),
    Profile("cancelling", {"insert": 3, "step": 6, "aim_cancel": 4, "cancel": 0.5, "query": 2, "crash": 0.2,
                           "restart": 0.6, "lose": 0.2, "repair": 0.5},
            _KINDS, max_down=1,
            describe="as racing, with CANCELs aimed at every migration state: a CLONE before and after its "
                     "fetch, after SWITCH, while CANCELLING, after the end, and a repair's CLONE (a replica "
                     "lost for good and repaired)"),
    Profile("deserting", {"insert": 3, "step": 8, "reassign": 1, "cancel": 0.3, "query": 3, "desert": 3,
                          "return": 1.5, "forsake": 1, "repair": 1},
            {**_KINDS, "refresh": 2, "migrate": 5}, down_timeout=12, min_down=30,
            describe="as leaving, with leavers of both kinds (a source after SWITCH, a cancelled target) down "
                     "past the down timeout (12 steps) until their CLEANUPs were done on their behalf (30 steps "
                     "at least), again and again, one of them lost for good (SYSTEM DROP REPLICA) and repaired"),
    Profile("clients", {"insert": 2, "client_insert": 2, "step": 8, "reassign": 1.5, "cancel": 0.5, "query": 2,
                        "client_query": 2, "crash": 0.3, "restart": 0.6},
            _KINDS, describe="as racing, with half the INSERTs and queries through the reference's client API "
                             "(client_send_insert: one answer for the block; select_all: every partition read "
                             "at once), recorded as the client was told"),
    Profile("refusing", {"insert": 2, "client_insert": 4, "step": 8, "reassign": 1.5, "cancel": 0.5, "query": 2,
                         "client_query": 2, "crash": 1.5, "restart": 0.8},
            _KINDS, max_down=2,
            describe="as clients, with replicas crashing often (two down at once): a block's tries through "
                     "client_send_insert are all refused, some after its first sub-blocks were committed, "
                     "so the client is told failed or unknown"),
    Profile("overlapping", {"insert": 1.5, "step": 10, "reassign": 1, "cancel": 0.05, "open_query": 1,
                            "read_query": 1.5, "read_across_switch": 3, "crash": 0.15, "restart": 0.6},
            {"refresh": 2, "pull": 5, "execute": 5, "migrate": 5, "merge": 0.2, "cleanup": 0.5}, interleave=6,
            attempts=8, months=1, buckets=4,
            describe="as churn, with several SELECTs in flight at once, each read a partition at a time over "
                     "later turns (pinned at the start, some pruned), some pinned on a move's source before "
                     "its SWITCH: CLEANUPs waiting on the last of several pins, crashes failing the queries "
                     "they served"),
    Profile("expiring", {"insert": 1, "forward": 4, "client_insert": 1.5, "expire": 0.7, "reestablish": 3, "step": 8,
                         "reassign": 1, "cancel": 0.3, "query": 2, "crash": 0.8, "restart": 0.6},
            _KINDS, max_down=1, months=12,
            describe="as racing, with Keeper sessions expiring and re-established (read-only replicas) while "
                     "INSERTs are forwarded by non-owners and sent through client_send_insert: a forward meets an "
                     "expired owner, a session expires between the map read and the write or right after the "
                     "commit went out (its answer lost), and new partitions (12 months) miss from writers' maps"),
    Profile("impatient", {"insert": 1, "forward": 2, "client_insert": 4, "expire": 0.7, "reestablish": 3, "step": 8,
                          "reassign": 1, "cancel": 0.3, "query": 1, "client_query": 1.5, "crash": 0.4, "restart": 0.6},
            _KINDS, max_down=1, months=12, client_tries=1,
            describe="as expiring, with most INSERTs from clients that try once and give up: a try whose "
                     "commit went out and whose answer was lost must be told unknown, never failed (its rows "
                     "are in the table), and one refused before its commit must be told failed; SELECTs "
                     "through select_all, whose reads avoid owners whose session expired"),
    Profile("mutating", {"insert": 4, "step": 10, "reassign": 0.5, "cancel": 0.2, "query": 2, "mutate": 1},
            {**_KINDS, "pull": 8, "execute": 2, "migrate": 6, "cleanup": 2},
            describe="as dropping, with ALTER TABLE UPDATE racing CLONE/SWITCH/CLEANUP: an owner writes a "
                     "partition's MUTATE_PARTs, every replica pulls them and executes late, and the partition "
                     "is moved, so a CLONE fetch meets keepers with the mutation still queued"),
    Profile("windows", {"insert": 4, "step": 8, "reassign": 1.5, "cancel": 0.3, "query": 2, "crash": 0.2,
                        "restart": 0.6, "lose": 0.2, "repair": 0.5},
            _KINDS, max_down=1,
            windows=("switch_with_target_queued", "query_at_clone_target", "repair_racing_loss"),
            describe="as losing, with the three windows a guard's history needs opened on purpose on half the "
                     "seeds: SWITCH tried with a GET_PART queued on the target, a SELECT received by a CLONE's "
                     "target, a replica crashed while a repair is in flight"),
    Profile("windows_rf1", {"insert": 4, "step": 8, "reassign": 1.5, "cancel": 0.3, "query": 2},
            _KINDS, rf=1, windows=("switch_with_target_queued", "query_at_clone_target"),
            describe="as windows at replication factor 1, where a copy a guard lets go is the only one: no "
                     "crash (a partition's one owner down is a failed query, not a window) and no loss (a "
                     "replica lost at RF 1 takes its rows with it, the base protocol's bound)"),
    Profile("parallel", {"insert": 4, "step": 8, "reassign": 2, "cancel": 0.5, "parallel_query": 3, "query": 1,
                         "crash": 0.3, "restart": 0.6, "orphan": 0.3},
            {**_KINDS, "migrate": 5}, interleave=6, months=1,
            describe="as racing, with most SELECTs spread over three of the four replicas by parallel replicas "
                     "(reference/parallel_reads.py; --parallel-replicas picks the coordinator), announcements "
                     "and reads between migration steps"),
)}


class UnknownProfile(ValueError):
    pass


def profile_of(name: str) -> Profile:
    if name not in PROFILES:
        raise UnknownProfile(f"unknown profile {name!r}; known: quiet, {', '.join(PROFILES)}")
    return PROFILES[name]
