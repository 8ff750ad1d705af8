------------------------- MODULE SelectiveReplication -------------------------
(***************************************************************************)
(* Selective replication for ReplicatedMergeTree (RFC seed 000) on the     *)
(* base protocol of seeds 002/003: shared log/, per-replica log_pointer    *)
(* and queue, parts, blocks/ dedup; plus the RFC's assignment znodes,      *)
(* filtered pullLogsToQueue, per-replica assignment caches, INSERT and     *)
(* SELECT routing, and CLONE -> SWITCH -> CLEANUP migration.               *)
(*                                                                         *)
(* Data is tracked at block granularity: a part is [p |-> partition,      *)
(* b |-> set of <<insert id, block number>>, mv |-> mutations applied].    *)
(* A retried INSERT that dedup                                             *)
(* misses writes the same insert id under a new block number, as          *)
(* ClickHouse would; merges union blocks. So rows read twice (R3) or       *)
(* missing (R2) are visible directly.                                      *)
(*                                                                         *)
(* Every RFC-as-written behaviour that the model shows unsafe sits behind  *)
(* a switch in Bugs, named as in the reference implementation; with        *)
(* Bugs = {} the model is the fixed protocol (spec/FINDINGS.md).           *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Replicas, Partitions, RF,
    InsertPartition,   \* insert id -> partition of its block
    InitOwners,        \* partition -> owners at start ({} = not yet assigned)
    InitBlocks,        \* inserts already acknowledged and on every initial owner at start
    Queries,           \* query ids
    MaxTries,          \* attempts per insert (first try + retries)
    MaxMerges, MaxAlters, MaxMutations, MaxDrops, MaxMigrations, MaxConcurrentMigrations, MaxCrashes,
    MaxReplicaDrops,   \* SYSTEM DROP REPLICA: replicas an operator may remove for good
    BlockDuringClone,  \* the RFC's open question: TRUE blocks merges and mutations of a partition
                       \* in CLONE, FALSE applies them on source and target alike
    MinLogsToKeep,     \* min_replicated_logs_to_keep: the cleanup thread keeps the last ones
    MaxLogsToKeep,     \* max_replicated_logs_to_keep: a replica that is down and further behind is lost
    DedupWindow,       \* replicated_deduplication_window: blocks/ keeps this many hashes
    Domain,            \* replica -> its fault domain (protocol/placement.py's domains, domain(r));
                       \* without declared domains every replica is its own
    Capacity,          \* replica -> its disk capacity, a positive weight (placement.py's capacities):
                       \* a replica's share of the ownerships is proportional to it
    Bugs

Bug(name) == name \in Bugs
Inserts == DOMAIN InsertPartition
None == "none"
Absent == -1
NoAsg == [owners |-> {}, target |-> None, leaving |-> None, version |-> Absent]

\* The base protocol's version (issue 36): "26.x", ClickHouse as its source reads today (the default:
\* PR #102244 targets it), or "18.16", the release that runs here. A definition, not a CONSTANT, so
\* that a model names it only when it differs: its cfg replaces it (`BaseProtocol <- V18_16`,
\* MCSelectiveReplication.tla). The rule that differs here is who selects merges and mutations
\* (MergeSelector). The numbers that differ (the dedup window, the log kept) are DedupWindow,
\* MinLogsToKeep and MaxLogsToKeep scaled to a model; FINDINGS.md gives both versions' figures.
BaseProtocol == "26.x"

\* insert_quorum, in both versions (18.16 one quorum INSERT at a time, 26.x parallel by default): the
\* INSERT is acknowledged once InsertQuorum replicas hold its block. Each replica that fetches the
\* part adds itself to the quorum node (updateQuorum), and the writer answers when the count is
\* reached; past insert_quorum_timeout the answer is UNKNOWN_STATUS_OF_INSERT with the part left in
\* place (ClientTimeout). 0 is off, the default; a cfg replaces it (`InsertQuorum <- QuorumOfRF`).
\* Only owners fetch under selective replication, so a quorum above RF is never met: 26.x's 'auto'
\* is a majority of all the table's replicas (getQuorumSize), above RF 2 from four replicas on.
InsertQuorum == 0

VARIABLES
    active,   \* replicas whose is_active ephemeral node exists
    asg,      \* p -> selective/assignments/{p}: [owners, target, leaving, version]; target is the
              \* CLONE target, leaving the replica between SWITCH (or CANCEL) and its CLEANUP
    cache,    \* r -> p -> r's in-memory copy of asg[p], refreshed asynchronously
    log,      \* the shared log/: sequence of [type, p, part, v (assignment version it was written under)]
    ptr,      \* r -> log_pointer (entries pulled)
    queue,    \* r -> set of entries in replicas/{r}/queue
    parts,    \* r -> set of parts on r's disk
    meta,     \* r -> [alters |-> ALTER_METADATA entries applied, dropped |-> p -> highest DROP_RANGE executed]
    dedup,    \* blocks/: block ids already committed
    muts,     \* mutations/: one block number per ALTER UPDATE/DELETE, table-wide (the data below it is owed it)
    trimmed,  \* log entries 1..trimmed are gone: the cleanup thread removed them (log stays as history)
    lost,     \* replicas whose is_lost is 1: down while the log moved on, they must clone before pulling
    ins,      \* insert id -> [st, at, tries] as the client and the routing replica see it
    mig,      \* p -> selective/migrations/{p}: [st, src, dst, coord, fetched, pos]
    qry,      \* query id -> [st, at, routes, pending, expected, seen, dup, lost]
    inv_acked,         \* blocks whose INSERT the client saw acknowledged
    inv_read_cleaned,  \* TRUE once CLEANUP removed data an in-flight query was routed to
    aux_counts,        \* [merges, alters, migrations, crashes] for bounds
    gone      \* replicas removed for good by SYSTEM DROP REPLICA: no replicas/{r} subtree, no disk, never back

vars == <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, qry,
          inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* Helpers *)

Assigned(p) == asg[p].version # Absent
Load(r) == Cardinality({p \in Partitions : Assigned(p) /\ r \in asg[p].owners})

\* Placement beyond the RFC (its "future work"), as protocol/placement.py does it: fault-domain
\* anti-affinity (no two owners of a partition in one domain) and capacity-aware placement (a
\* replica's fill is its partitions per unit of capacity, placement.fill's by_count; the model
\* counts partitions, not bytes). With ignore_fault_domains every replica counts as its own
\* domain again, the RFC's counting. With Domain = identity and equal capacities, LeastFilled is
\* the RFC's least loaded choice and AllowedOwner only "not an owner already".
DomainOf(r) == IF Bug("ignore_fault_domains") THEN r ELSE Domain[r]
DomainsOf(S) == {DomainOf(r) : r \in S}
\* x is no fuller than y when x holds load lx and y holds ly: lx / Capacity[x] <= ly / Capacity[y].
NoFuller(x, lx, y, ly) == lx * Capacity[y] <= ly * Capacity[x]
\* placement.least_filled / is_least_filled: k active replicas in k distinct domains, none of
\* which a less full active replica could replace without two of them in one domain.
LeastFilled(k) ==
    {S \in SUBSET active :
        /\ Cardinality(S) = k
        /\ Cardinality(DomainsOf(S)) = k
        /\ \A x \in S, y \in active \ S : NoFuller(x, Load(x), y, Load(y)) \/ DomainOf(y) \in DomainsOf(S \ {x})}
\* placement.allowed_owner: may dst own p once src has left it? Not an owner already, and in no
\* domain of the owners that stay.
AllowedOwner(p, src, dst) ==
    dst \notin asg[p].owners /\ DomainOf(dst) \notin DomainsOf(asg[p].owners \ {src})

\* Replicas a (possibly cached) assignment tells to keep replicating the partition.
Keepers(a) == a.owners \cup ({a.target, a.leaving} \ {None})

Covers(x, y) == x.p = y.p /\ y.b \subseteq x.b
HasCovering(r, x) == \E y \in parts[r] : Covers(y, x)
\* ClickHouse's MergeTreePartInfo::contains also wants the mutation at least as new: a replica
\* holding all_1_1_0 still fetches all_1_1_0_5 (a lost replica's clone queues the source's
\* mutated part beside its own older one: skipping the fetch as "covered" lost the mutation).
CoversAsNew(y, x) == Covers(y, x) /\ y.mv >= x.mv
HasNewerCovering(r, x) == \E y \in parts[r] : CoversAsNew(y, x)

\* Adding a part removes the parts it covers, as a fetched or merged part does in MergeTree.
AddPart(S, x) == {y \in S : ~Covers(x, y)} \cup {x}
PartsOf(r, p) == {x \in parts[r] : x.p = p}
BlocksOf(r, p) == UNION {x.b : x \in PartsOf(r, p)}
Ids(B) == {blk[1] : blk \in B}   \* insert ids of a set of blocks
NoEmpty(S) == {x \in S : x.b # {}}
HasBlock(r, i) == \E x \in parts[r] : i \in Ids(x.b)
\* The acknowledgement a quorum INSERT waits for: InsertQuorum replicas hold its block.
QuorumReached(i) == InsertQuorum = 0 \/ Cardinality({r \in Replicas : HasBlock(r, i)}) >= InsertQuorum
\* Two different blocks of the same insert: its rows would be read twice.
Twice(B) == \E x, y \in B : x # y /\ x[1] = y[1]

Entry(type, p, part, k) == [type |-> type, p |-> p, part |-> part, k |-> k]
NoPart == [p |-> None, b |-> {}, mv |-> 0]
Max(S) == CHOOSE m \in S : \A n \in S : n <= m
Min(S) == CHOOSE m \in S : \A n \in S : m <= n

\* Who selects merges and mutations of the parts it holds. 18.16: the leader alone, elected through
\* leader_election/'s sequential ephemeral nodes (the replica with the oldest node; the next one when
\* it goes). 26.x: every replica is a leader (since 20.6, ClickHouse PR #11639; a version check on
\* log/ refuses a second selection of the same parts). The election order is fixed here, where a
\* replica that comes back takes the last place in ClickHouse: a restriction of 18.16's behaviours,
\* so a model under 18.16 shows what 18.16 can do, and one that holds under 26.x holds under 18.16.
ElectionOrder == CHOOSE s \in [1..Cardinality(Replicas) -> Replicas] : \A j, k \in DOMAIN s : j # k => s[j] # s[k]
Leader == LET up == {k \in DOMAIN ElectionOrder : ElectionOrder[k] \in active}
          IN IF up = {} THEN None ELSE ElectionOrder[Min(up)]
MergeSelector(r) == BaseProtocol = "26.x" \/ r = Leader

IsMutationOf(k, p) == log[k].type = "MUTATE" /\ log[k].p = p
\* A mutation (ALTER UPDATE/DELETE) is table-wide: mutations/ holds its block number, which in
\* the model is the log index the next INSERT would take, so the data it applies to is the
\* blocks below it, and a part whose blocks all came after it was born mutated. A part's mv is
\* the number of the last mutation applied to it, as ClickHouse names a mutated part
\* <part>_<mutation block number>. Two mutations with no INSERT between them share a number here
\* (they apply to the same data); every model issues at most one, so no mutation is folded away.
Owed(x) == LET ns == {muts[j] : j \in {j \in DOMAIN muts : \E blk \in x.b : blk[2] < muts[j]}}
           IN IF ns = {} THEN 0 ELSE Max(ns)
\* The mutation number part x must have reached on a replica: the highest MUTATE_PART of x's data
\* among ks, the log indices its log_pointer has passed. An invariant passes the log's MUTATE
\* indices up to the pointer, found once per state: TLC evaluates an operator's body at every
\* call, and a scan of the whole log per part made the invariants most of trace validation's time.
MutationsOwed(ks, x) ==
    LET ms == {k \in ks : IsMutationOf(k, x.p) /\ log[k].part.b \cap x.b # {}}
    IN IF ms = {} THEN 0 ELSE Max({log[k].part.mv : k \in ms})
\* The log indices of the entries of a type, to scan once per state.
IdxsOf(type) == {k \in 1..Len(log) : log[k].type = type}

\* DROP_RANGE of p at log index k removes p's blocks numbered below k (block number = log
\* index of the commit). DropPoint is the highest such k among the given indices, 0 if none.
IsDropOf(k, p) == log[k].type = "DROP" /\ log[k].p = p
DropPoint(p, ks) == LET d == {k \in ks : IsDropOf(k, p)} IN IF d = {} THEN 0 ELSE Max(d)
Trim(x, d) == [x EXCEPT !.b = {blk \in @ : blk[2] > d}]

\* Log index of the first (and of the last) GET_PART of insert i, 0 if none yet. A second one
\* comes from a retry that blocks/ did not deduplicate: after a DROP PARTITION cleared the hash,
\* or with no_dedup.
IsGetOf(k, i) == log[k].type = "GET" /\ i \in Ids(log[k].part.b)
GetIdxs(i) == {k \in 1..Len(log) : IsGetOf(k, i)}
FirstIdx(i) == LET ks == GetIdxs(i) IN IF ks = {} THEN 0 ELSE Min(ks)
LastIdx(i) == LET ks == GetIdxs(i) IN IF ks = {} THEN 0 ELSE Max(ks)

\* r will still learn of insert i by replication: it has not pulled i's entry yet, or a queue
\* entry that brings i is pending, and some replica (running or down) still has i on its disk to
\* fetch it from. Missing such rows is replication lag, not loss; a row no replica has any more
\* will never arrive, and no check excuses it as lag (issue 37's audit).
InFlightTo(r, i) ==
    /\ \E r2 \in Replicas : HasBlock(r2, i)
    /\ \/ ptr[r] < LastIdx(i)
       \/ \E e \in queue[r] : e.type \in {"GET", "MERGE", "MUTATE"} /\ i \in Ids(e.part.b)

\* r will still apply a mutation of p: one is pending in its queue.
MutationPending(r, p) == \E e \in queue[r] : e.type = "MUTATE" /\ e.p = p
DropPending(r, p) == \E e \in queue[r] : e.type = "DROP" /\ e.p = p

\* Insert i's rows are still in the table: committed (last) after its partition's last DROP_RANGE.
Live(i) == LastIdx(i) > DropPoint(InsertPartition[i], 1..Len(log))
LiveAcked == {i \in inv_acked : Live(i)}

Running(q) == qry[q].st = "running"

\* r is caught up on p: nothing for p in its queue or in the log beyond its log_pointer. Merges
\* and mutations are selected only by an owner caught up on the partition, whose parts are then what the whole log makes of it (ClickHouse selects from
\* its "virtual parts" and creates the entry with a check on the log's version, so no two
\* selections overlap).
CaughtUp(r, p) ==
    /\ \A e \in queue[r] : e.p # p
    /\ \A k \in (ptr[r] + 1)..Len(log) : log[k].p # p
\* r is caught up on p as far as log index n: nothing of p numbered up to n in its queue (an entry
\* a CLONE queued has no log index: 0), nor in the log between its log_pointer and n. SWITCH waits
\* for it at the position the CLONE's fetch fixed (F23): entries of p after it do not hold it up.
CaughtUpTo(r, p, n) ==
    /\ \A e \in queue[r] : e.p = p => e.k > n
    /\ \A k \in (ptr[r] + 1)..n : log[k].p # p
MigrationsInFlight == {p \in Partitions : mig[p].st \in {"clone", "switched", "cancelling"}}

\* The log and parts of a table whose InitBlocks were inserted and replicated before the model starts.
InitLog == [k \in 1..Cardinality(InitBlocks) |->
               LET i == CHOOSE j \in InitBlocks : Cardinality({x \in InitBlocks : x < j}) = k - 1 IN
               Entry("GET", InsertPartition[i], [p |-> InsertPartition[i], b |-> {<<i, k>>}, mv |-> 0], k)]

Init ==
    /\ active = Replicas
    /\ asg = [p \in Partitions |->
                IF InitOwners[p] = {} THEN NoAsg
                ELSE [owners |-> InitOwners[p], target |-> None, leaving |-> None, version |-> 0]]
    /\ cache = [r \in Replicas |-> asg]
    /\ log = InitLog
    /\ ptr = [r \in Replicas |-> Len(InitLog)]
    /\ queue = [r \in Replicas |-> {}]
    /\ parts = [r \in Replicas |-> {InitLog[k].part : k \in {k \in DOMAIN InitLog : r \in InitOwners[InitLog[k].p]}}]
    /\ meta = [r \in Replicas |-> [alters |-> 0, dropped |-> [p \in Partitions |-> 0]]]
    /\ dedup = InitBlocks
    /\ muts = <<>>
    /\ trimmed = 0
    /\ lost = {}
    /\ ins = [i \in Inserts |-> [st |-> IF i \in InitBlocks THEN "acked" ELSE "idle", at |-> None, tries |-> 0]]
    /\ mig = [p \in Partitions |-> [st |-> "none", src |-> None, dst |-> None, coord |-> None, fetched |-> FALSE, pos |-> 0]]
    /\ qry = [q \in Queries |-> [st |-> "idle", at |-> None, routes |-> <<>>, pending |-> {},
                                 expected |-> {}, seen |-> {}, dup |-> FALSE, lost |-> {}]]
    /\ inv_acked = InitBlocks
    /\ inv_read_cleaned = FALSE
    /\ aux_counts = [merges |-> 0, alters |-> 0, mutations |-> 0, drops |-> 0, migrations |-> 0, crashes |-> 0]
    /\ gone = {}

-----------------------------------------------------------------------------
(* Assignment caches (RFC: "refreshed asynchronously from ZK").            *)

ReplicaRefreshCache(r, p) ==
    /\ r \in active
    /\ cache[r][p] # asg[p]
    /\ cache' = [cache EXCEPT ![r][p] = asg[p]]
    /\ UNCHANGED <<active, asg, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* INSERT (RFC "INSERT routing", base protocol's blocks/ dedup).           *)

\* The client sends insert i, or retries it after an error or an unknown outcome.
ClientSendInsert(i, r) ==
    /\ ins[i].st \in {"idle", "unknown", "failed"}
    /\ ins[i].tries < MaxTries
    /\ r \in active
    /\ ins' = [ins EXCEPT ![i] = [st |-> "sent", at |-> r, tries |-> @.tries + 1]]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* First INSERT into a partition unknown to r: allocate by CAS-create (the race and the
\* fewer-than-RF case are model-checked in Assignment.tla); a lost race adopts the winner.
ReplicaAllocate(r, i) ==
    LET p == InsertPartition[i] IN
    /\ ins[i].st = "sent" /\ ins[i].at = r /\ r \in active
    /\ cache[r][p].version = Absent
    /\ IF Assigned(p)
       THEN /\ cache' = [cache EXCEPT ![r][p] = asg[p]]
            /\ UNCHANGED <<asg, ins, muts, trimmed, lost>>
       \* placement.least_filled refuses when the active replicas span fewer than RF domains.
       ELSE IF Cardinality(DomainsOf(active)) >= RF
            THEN \E S \in LeastFilled(RF) :
                    LET a == [owners |-> S, target |-> None, leaving |-> None, version |-> 0] IN
                    /\ asg' = [asg EXCEPT ![p] = a]
                    /\ cache' = [cache EXCEPT ![r][p] = a]
                    /\ UNCHANGED ins
            ELSE /\ ins' = [ins EXCEPT ![i].st = "failed"]
                 /\ UNCHANGED <<asg, cache, muts, trimmed, lost>>
    /\ UNCHANGED <<active, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* r's map says another replica owns the partition: forward the sub-block to an owner.
ReplicaForwardInsert(r, i) ==
    LET p == InsertPartition[i] IN
    /\ ins[i].st = "sent" /\ ins[i].at = r /\ r \in active
    /\ cache[r][p].version # Absent
    /\ r \notin cache[r][p].owners
    /\ \E o \in cache[r][p].owners : ins' = [ins EXCEPT ![i].at = o]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* r's map says r owns the partition: write the part locally and commit it in one Keeper
\* multi (blocks/ hash, GET_PART in log/). The fixed protocol also checks, in that multi,
\* that the assignment znode still has the version r's map holds; the RFC checks the map only.
ReplicaWriteInsert(r, i) ==
    LET p == InsertPartition[i]
        part == [p |-> p, b |-> {<<i, Len(log) + 1>>}, mv |-> 0] IN
    /\ ins[i].st = "sent" /\ ins[i].at = r /\ r \in active
    /\ cache[r][p].version # Absent
    /\ r \in cache[r][p].owners
    /\ IF ~Bug("insert_without_assignment_check") /\ asg[p].version # cache[r][p].version
       THEN \* The check fails: the INSERT errors, r refreshes its map, the client retries.
            /\ ins' = [ins EXCEPT ![i].st = "failed"]
            /\ cache' = [cache EXCEPT ![r][p] = asg[p]]
            /\ UNCHANGED <<log, parts, dedup>>
       ELSE /\ IF i \in dedup /\ ~Bug("no_dedup")
               THEN UNCHANGED <<log, parts, dedup>>   \* duplicate block: acknowledged, not written
               ELSE /\ parts' = [parts EXCEPT ![r] = AddPart(@, part)]
                    /\ log' = Append(log, Entry("GET", p, part, Len(log) + 1))
                    \* no_dedup: the hash is not recorded in blocks/ at all (insert_deduplicate = 0)
                    /\ dedup' = IF Bug("no_dedup") THEN dedup ELSE dedup \cup {i}
            /\ ins' = [ins EXCEPT ![i].st = "written"]
            /\ UNCHANGED cache
    /\ UNCHANGED <<active, asg, ptr, queue, meta, mig, qry, inv_acked, inv_read_cleaned, aux_counts, muts, trimmed, lost, gone>>

ClientReceiveAck(i) ==
    /\ ins[i].st = "written"
    /\ QuorumReached(i)
    /\ ins' = [ins EXCEPT ![i].st = "acked"]
    /\ inv_acked' = inv_acked \cup {i}
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, mig, qry, inv_read_cleaned, aux_counts, gone>>

\* The connection breaks before the write (sent) or after it (written): the client cannot tell.
\* Only a timeout that a retry can follow is modelled; without one it only hides an ack.
ClientTimeout(i) ==
    /\ ins[i].st \in {"sent", "written"}
    /\ ins[i].tries < MaxTries
    /\ ins' = [ins EXCEPT ![i].st = "unknown"]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* Replication log and filtered pullLogsToQueue (RFC table).               *)

\* How many parts one MERGE_PARTS merges. The models merge two: every merge of more is a sequence
\* of those as far as the data goes, and two keep the state space small. ClickHouse's merge
\* selector takes a range of any length (OPTIMIZE ... FINAL all of a partition's parts), so a trace
\* of a real run overrides this in its cfg (TraceSelectiveReplication.tla, issue 36).
MergeWidths == {2}
\* Which parts one MERGE_PARTS may take together: in the models, parts of one mutation version.
\* ClickHouse also merges parts of different versions that owe the same mutations (a part the
\* mutation rewrote with one written after it), which a trace of a real run shows (issue 36).
Mergeable(S) == \A x, y \in S : x.mv = y.mv
\* The sets of r's parts of p one MERGE_PARTS may take, before MergeWidths and Mergeable: any. A
\* trace names the merged part, and so the one set (TraceSelectiveReplication.tla): SUBSET of the
\* 25 parts a partition holds in a long trace is 33 million sets to try at every merge event.
MergeSets(r, p) == SUBSET PartsOf(r, p)

\* The merge-selecting replica puts MERGE_PARTS of parts of a partition it owns.
ReplicaSelectMerge(r, p) ==
    /\ r \in active
    /\ MergeSelector(r)
    /\ aux_counts.merges < MaxMerges
    /\ ~(BlockDuringClone /\ mig[p].st = "clone")
    /\ r \in cache[r][p].owners
    /\ CaughtUp(r, p)
    /\ \E S \in MergeSets(r, p) :
        /\ Cardinality(S) \in MergeWidths
        /\ Mergeable(S)
        /\ log' = Append(log, Entry("MERGE", p, [p |-> p, b |-> UNION {x.b : x \in S}, mv |-> Max({x.mv : x \in S})], Len(log) + 1))
    /\ aux_counts' = [aux_counts EXCEPT !.merges = @ + 1]
    /\ UNCHANGED <<active, asg, cache, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, gone>>

\* ALTER TABLE UPDATE/DELETE: a table-wide mutation in mutations/ with a block number (in every
\* partition in ClickHouse); nothing goes into log/ yet.
ClientMutate ==
    /\ aux_counts.mutations < MaxMutations
    /\ muts' = Append(muts, Len(log) + 1)
    /\ aux_counts' = [aux_counts EXCEPT !.mutations = @ + 1]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, gone>>

\* The owner that selects merges of p also selects part mutations: MUTATE_PART "mutate x to
\* x_m" for one of its parts whose data is older than a mutation, to the latest such mutation.
\* Every keeper executes it. With BlockDuringClone, none is selected for a partition in CLONE.
ReplicaSelectMutation(r, p) ==
    /\ r \in active
    /\ MergeSelector(r)
    /\ r \in cache[r][p].owners
    /\ CaughtUp(r, p)
    /\ ~(BlockDuringClone /\ mig[p].st = "clone")
    /\ \E x \in PartsOf(r, p) :
        /\ x.mv < Owed(x)
        /\ log' = Append(log, Entry("MUTATE", p, [x EXCEPT !.mv = Owed(x)], Len(log) + 1))
    /\ UNCHANGED <<active, asg, cache, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* ALTER TABLE DROP PARTITION: DROP_RANGE over the partition's blocks committed so far.
ClientDropPartition(p) ==
    /\ Assigned(p)
    \* A partition that never took a block number has nothing to drop: ClickHouse writes no entry.
    /\ \E k \in 1..Len(log) : log[k].p = p
    /\ aux_counts.drops < MaxDrops
    /\ ~(BlockDuringClone /\ mig[p].st = "clone")
    /\ log' = Append(log, Entry("DROP", p, [p |-> p, b |-> {}, mv |-> 0], Len(log) + 1))
    \* ClickHouse removes the dropped blocks' hashes from blocks/: the same INSERT sent again
    \* is written again (every committed block of p is below the drop's number here).
    /\ dedup' = {i \in dedup : InsertPartition[i] # p}
    /\ aux_counts' = [aux_counts EXCEPT !.drops = @ + 1]
    /\ UNCHANGED <<active, asg, cache, ptr, queue, parts, meta, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, gone>>

\* ALTER_METADATA: a global entry every replica must apply.
ClientAlterMetadata ==
    /\ aux_counts.alters < MaxAlters
    /\ log' = Append(log, Entry("ALTER", None, NoPart, Len(log) + 1))
    /\ aux_counts' = [aux_counts EXCEPT !.alters = @ + 1]
    /\ UNCHANGED <<active, asg, cache, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, gone>>

\* Pull the next log entry: global entries are always queued; partition-scoped ones only
\* when the map says r keeps the partition; skipped entries still advance log_pointer.
\* Fixed protocol: an entry of a partition r's map does not know makes r read the assignment
\* from Keeper before deciding (background path, not SELECT). No version in the entry is
\* needed: a replica becomes a keeper of a partition it knows only as a CLONE target, and the
\* CLONE's fetch covers what it skipped before.
ReplicaPullLog(r) ==
    LET e == log[ptr[r] + 1]
        stale == e.type # "ALTER" /\ cache[r][e.p].version = Absent /\ ~Bug("filter_with_stale_cache")
        view == IF stale THEN asg[e.p] ELSE cache[r][e.p]
        take == IF e.type = "ALTER" THEN ~Bug("filter_skips_global") ELSE r \in Keepers(view) IN
    /\ r \in active
    /\ r \notin lost
    /\ ptr[r] < Len(log)
    /\ ptr' = [ptr EXCEPT ![r] = @ + 1]
    /\ queue' = [queue EXCEPT ![r] = IF take THEN @ \cup {e} ELSE @]
    /\ cache' = IF stale THEN [cache EXCEPT ![r][e.p] = asg[e.p]] ELSE cache
    /\ UNCHANGED <<active, asg, log, parts, meta, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* Execute a queue entry: GET_PART fetches the part (or a covering one) from an active replica
\* that has it; MERGE_PARTS merges locally when all sources are here, else fetches the result;
\* ALTER_METADATA applies. An entry whose part is already covered is dropped.
ReplicaExecuteEntry(r) ==
    /\ r \in active
    /\ \E e \in queue[r] :
        \/ /\ e.type = "ALTER"
           /\ meta' = [meta EXCEPT ![r].alters = @ + 1]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED parts
        \/ /\ e.type \in {"GET", "MERGE"}
           \* already covered here, or made obsolete by a DROP_RANGE r has executed
           /\ HasNewerCovering(r, e.part) \/ \E blk \in e.part.b : blk[2] < meta[r].dropped[e.p]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED <<parts, meta, muts, trimmed, lost>>
        \/ \* DROP_RANGE: the parts in its range go, and so do the queued fetches, merges and
           \* mutations whose part lies in the range (removePartProducingOpsInRange).
           /\ e.type = "DROP"
           /\ parts' = [parts EXCEPT ![r] = NoEmpty({IF x.p = e.p THEN Trim(x, e.k) ELSE x : x \in @})]
           /\ queue' = [queue EXCEPT ![r] = {d \in @ \ {e} : ~(d.type \in {"GET", "MERGE", "MUTATE"} /\ d.p = e.p
                                                                  /\ \A blk \in d.part.b : blk[2] < e.k)}]
           /\ meta' = [meta EXCEPT ![r].dropped[e.p] = Max({@, e.k})]
        \/ /\ e.type = "MERGE"
           /\ ~HasNewerCovering(r, e.part)
           /\ LET srcs == {y \in PartsOf(r, e.p) : y.b \subseteq e.part.b} IN
              /\ UNION {x.b : x \in srcs} = e.part.b
              /\ parts' = [parts EXCEPT ![r] = AddPart(@, [e.part EXCEPT !.mv = Max({y.mv : y \in srcs})])]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED meta
        \/ \* MUTATE_PART with its source part here: rewrite it.
           /\ e.type = "MUTATE"
           /\ \E x \in PartsOf(r, e.p) :
                /\ x.b = e.part.b /\ x.mv < e.part.mv
                /\ parts' = [parts EXCEPT ![r] = (@ \ {x}) \cup {[x EXCEPT !.mv = e.part.mv]}]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED meta
        \/ \* MUTATE_PART already done here (a part at least as new covers it), or dropped.
           /\ e.type = "MUTATE"
           /\ \/ \E y \in parts[r] : Covers(y, e.part) /\ y.mv >= e.part.mv
              \/ \E blk \in e.part.b : blk[2] < meta[r].dropped[e.p]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED <<parts, meta>>
        \/ \* MUTATE_PART without its source: fetch the mutated part (or one covering it) instead.
           /\ e.type = "MUTATE"
           /\ ~\E x \in PartsOf(r, e.p) : x.b = e.part.b /\ x.mv < e.part.mv
           /\ ~\E y \in parts[r] : Covers(y, e.part) /\ y.mv >= e.part.mv
           /\ \E s \in active \ {r} : \E y \in parts[s] :
                /\ Covers(y, e.part) /\ y.mv >= e.part.mv
                /\ parts' = [parts EXCEPT ![r] = NoEmpty(AddPart(@, Trim(y, meta[r].dropped[e.p])))]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED meta
        \/ /\ e.type \in {"GET", "MERGE"}
           /\ ~HasNewerCovering(r, e.part)
           /\ \E s \in active \ {r} : \E y \in parts[s] :
                /\ CoversAsNew(y, e.part)
                \* a fetched part loses the blocks of drops r has already executed
                /\ parts' = [parts EXCEPT ![r] = NoEmpty(AddPart(@, Trim(y, meta[r].dropped[e.p])))]
           /\ queue' = [queue EXCEPT ![r] = @ \ {e}]
           /\ UNCHANGED meta
    /\ UNCHANGED <<active, asg, cache, log, ptr, dedup, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* SELECT routing: the query takes its replica's map, picks one replica per *)
(* partition, and reads each partition in its own step.                     *)

ClientStartQuery(q, r) ==
    LET known == {p \in Partitions : cache[r][p].version # Absent}
        \* RFC as written lists the CLONE target in the assignment like any owner.
        readable(p) == IF Bug("route_to_clone_target") THEN Keepers(cache[r][p]) ELSE cache[r][p].owners IN
    /\ qry[q].st = "idle"
    /\ r \in active
    /\ \A p \in known : readable(p) # {}
    /\ \E routes \in [known -> Replicas] :
        /\ \A p \in known : routes[p] \in readable(p)
        /\ qry' = [qry EXCEPT ![q] = [st |-> IF known = {} THEN "done" ELSE "running", at |-> r, routes |-> routes, pending |-> known,
                     expected |-> LiveAcked, seen |-> {}, dup |-> FALSE,
                     \* Acked blocks of partitions r does not know and whose entry r has pulled
                     \* are missed for good, not by lag.
                     lost |-> {i \in LiveAcked : InsertPartition[i] \notin known /\ ~(ptr[r] < FirstIdx(i))}]]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* Read one partition from the replica chosen for it (locally or ReadFromRemote).
ReplicaReadPartition(q, p) ==
    LET o == qry[q].routes[p]
        got == BlocksOf(o, p) IN
    /\ Running(q)
    /\ p \in qry[q].pending
    /\ o \in active
    \* The last partition read completes the query.
    /\ qry' = [qry EXCEPT ![q].pending = @ \ {p},
                          ![q].st = IF qry[q].pending = {p} THEN "done" ELSE @,
                          ![q].seen = @ \cup got,
                          ![q].dup = @ \/ Twice(got \cup qry[q].seen) \/ (got \cap qry[q].seen # {}),
                          ![q].lost = @ \cup {i \in qry[q].expected :
                                                InsertPartition[i] = p /\ i \notin Ids(got) /\ ~InFlightTo(o, i)
                                                /\ Live(i)}]  \* rows dropped since the start are not owed
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* The replica a partition was routed to is down: the query fails (an error, not a wrong result).
\* It was down when the query started (one that goes down under a running query fails it at
\* once: ReplicaCrash); the refused subquery fails the query at the latest when it comes back.
ClientQueryFails(q) ==
    /\ Running(q)
    /\ \E p \in qry[q].pending : qry[q].routes[p] \notin active
    /\ qry' = [qry EXCEPT ![q].st = "failed"]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* Migration CLONE -> SWITCH -> CLEANUP (RFC "Rebalancing"). Every step is  *)
(* one Keeper multi on selective/migrations/{p} and the assignment, so a    *)
(* coordinator that crashes leaves a state another replica can continue.    *)

\* Start a migration of p from src to dst: CLONE adds dst to the assignment as the CLONE
\* target (RF+1 keepers), and selective/migrations/{p} records the step, in one multi.
StartMigration(p, src, dst) ==
    /\ Assigned(p)
    /\ mig[p].st \in {"none", "done", "cancelled"}
    /\ src \in asg[p].owners
    \* dst not an owner yet, and in no fault domain of the owners that stay. This binds REASSIGN
    \* too: an explicit order into a domain the partition keeps is refused like a planned move
    \* (protocol/rebalance.py's apply_moves refuses it the same way).
    /\ AllowedOwner(p, src, dst)
    /\ src \in active   \* the replica that runs the ALTER coordinates; takeover covers its crash
    /\ Cardinality(MigrationsInFlight) < MaxConcurrentMigrations
    /\ aux_counts.migrations < MaxMigrations
    /\ asg' = [asg EXCEPT ![p].target = dst, ![p].version = @ + 1]
    /\ mig' = [mig EXCEPT ![p] = [st |-> "clone", src |-> src, dst |-> dst, coord |-> src, fetched |-> FALSE, pos |-> 0]]
    /\ aux_counts' = [aux_counts EXCEPT !.migrations = @ + 1]
    /\ UNCHANGED <<active, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, gone>>

\* Repair after a permanent loss (beyond the RFC, which moves partitions but never says how one
\* short of RF after DropReplica gets back to RF): a migration with no source. c, a surviving
\* owner, coordinates it as the replica that runs SYSTEM REBALANCE; dst is an active replica not
\* keeping p, in no fault domain of the owners. The CLONE is the ordinary one (every part
\* registered by any replica, F3; the skipped mutations and drops, F8); its SWITCH adds dst and
\* removes nothing (CoordinatorSwitch with src = None), so there is no CLEANUP. A repair is owed,
\* not an admin's choice: it is not counted against MaxMigrations (DropReplica bounds it, one
\* per owner dropped), and no admin CANCEL ends it (a target that goes for good is cancelled by
\* its own DropReplica).
RepairStart(p, c, dst) ==
    /\ Assigned(p)
    /\ Cardinality(asg[p].owners) < RF
    /\ mig[p].st \in {"none", "done", "cancelled"}
    /\ c \in asg[p].owners /\ c \in active
    /\ dst \in active
    /\ AllowedOwner(p, None, dst)
    /\ Cardinality(MigrationsInFlight) < MaxConcurrentMigrations
    /\ asg' = [asg EXCEPT ![p].target = dst, ![p].version = @ + 1]
    /\ mig' = [mig EXCEPT ![p] = [st |-> "clone", src |-> None, dst |-> dst, coord |-> c, fetched |-> FALSE, pos |-> 0]]
    /\ UNCHANGED <<active, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* ALTER TABLE t REASSIGN PARTITION p TO REPLICA dst (refused for a replica that is not active).
AdminReassign(p, src, dst) ==
    /\ dst \in active
    /\ StartMigration(p, src, dst)

\* The owners a partition will have once its CLONE in flight (if any) switches, and the load
\* counted so: a REBALANCE that counted only today's owners would move a second partition to a
\* replica already receiving one, and undo moves it planned itself.
PlannedOwners(p) == IF mig[p].st = "clone" THEN (asg[p].owners \ {mig[p].src}) \cup {mig[p].dst} ELSE asg[p].owners
PlannedLoad(r) == Cardinality({p \in Partitions : Assigned(p) /\ r \in PlannedOwners(p)})

\* SYSTEM REBALANCE TABLE t: move a partition from a most filled replica to a least filled one
\* (partitions per unit of Capacity), only when that narrows the gap: the target after the move
\* is still less full than the source before it (with equal capacities, a load above the
\* target's by 2 or more). A plan of several moves is several such steps. StartMigration's
\* AllowedOwner keeps the move out of the fault domains of the owners that stay; when the most
\* and least filled replicas share a domain with the partition, no move is made (the reference's
\* planner then looks further; safety is what the model checks).
AdminRebalance(p, src, dst) ==
    /\ dst \in active
    /\ StartMigration(p, src, dst)   \* its cheap guards first: the load comparison below is costly
    /\ \A r \in active : /\ NoFuller(r, PlannedLoad(r), src, PlannedLoad(src))
                        /\ NoFuller(dst, PlannedLoad(dst), r, PlannedLoad(r))
    /\ ~NoFuller(src, PlannedLoad(src), dst, PlannedLoad(dst) + 1)

\* CLONE's bulk copy. RFC: "FETCHes all existing parts from source". Fixed: the target first
\* re-reads the assignment (so its filter keeps the partition from now on), then queues a fetch
\* of every active part of the partition registered in Keeper by any replica (F3: not only the
\* source's; a part covered by another, an outdated one, is left out), and re-queues the
\* MUTATE_PART and DROP_RANGE entries of the partition that some keeper has still to apply: those
\* in the keepers' queues and those in the log between the keeper furthest behind and its own
\* log_pointer, which it skipped (F8). That reads no log entry older than every keeper's pointer,
\* so the cleanup thread cannot have removed one it needs. RFC as written
\* (clone_ignores_skipped_entries): no re-queue. F8's first fix
\* (clone_reads_skipped_entries_from_log): re-read the skipped entries from the log, where the
\* cleanup thread may have removed them.
ReplicaCloneFetch(p) ==
    LET dst == mig[p].dst
        src == mig[p].src
        K == (Keepers(asg[p]) \ lost) \ {dst}
        lo == Min({ptr[k] : k \in K} \cup {ptr[dst]})
        pending == UNION {{e \in queue[k] : e.p = p} : k \in K} \cup {log[j] : j \in {j \in (lo + 1)..ptr[dst] : log[j].p = p}}
        U == UNION {PartsOf(s, p) : s \in Replicas}
        ActiveU == {x \in U : ~\E y \in U : y # x /\ x.b \subseteq y.b /\ x.mv <= y.mv}
        requeue == IF Bug("clone_ignores_skipped_entries") THEN {}
                   ELSE IF Bug("clone_reads_skipped_entries_from_log")
                   THEN {log[k] : k \in {k \in (trimmed + 1)..ptr[dst] : IsMutationOf(k, p) \/ IsDropOf(k, p)}}
                   ELSE {e \in pending : e.type \in {"MUTATE", "DROP"}} IN
    /\ mig[p].st = "clone" /\ ~mig[p].fetched
    /\ dst \in active
    /\ IF Bug("repair_without_clone") /\ src = None
       \* The naive repair: add the new replica to the owners and leave the data to the log. Its
       \* log_pointer is past every entry of the partition it skipped, so nothing brings them.
       THEN /\ cache' = [cache EXCEPT ![dst][p] = asg[p]]
            /\ UNCHANGED <<queue, parts>>
       ELSE IF Bug("clone_from_source_only")
       THEN /\ src \in active
            /\ parts' = [parts EXCEPT ![dst] = PartsOf(src, p) \cup {x \in @ : x.p # p}]
            /\ UNCHANGED <<queue, cache>>
       ELSE /\ cache' = [cache EXCEPT ![dst][p] = asg[p]]
            /\ queue' = [queue EXCEPT ![dst] = @ \cup {Entry("GET", p, x, 0) : x \in ActiveU} \cup requeue]
            /\ UNCHANGED parts
    \* The catch-up position: SWITCH waits for the target to have done the partition's entries up
    \* to here, not for it to have nothing pending (a stream of inserts need never let it: F23).
    /\ mig' = [mig EXCEPT ![p].fetched = TRUE, ![p].pos = Len(log)]
    /\ UNCHANGED <<active, asg, log, ptr, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* SWITCH: CAS the assignment to replace the source with the target. Fixed: the source stays
\* a leaving keeper, still replicating the partition, because maps that have not seen the
\* SWITCH keep routing SELECTs to it. RFC as written (source_stops_at_switch): it is dropped.
\* A repair (no source: RepairStart, or a move whose source DropReplica removed) only adds the
\* target: nothing leaves, so there is no CLEANUP and the migration is done at once. With
\* repair_moves_coordinator the repair's SWITCH takes its coordinator, an owner, for the source
\* it moves away from, as PR #102244's rebalancer does with its phase-1 migration (PR-F9,
\* repair_moves_replica in PR102244Code.tla): the coordinator leaves through CLEANUP like any
\* source, and the partition stays one owner short (RepairOutcomeProp).
CoordinatorSwitch(p) ==
    LET src == IF mig[p].src = None /\ Bug("repair_moves_coordinator") /\ mig[p].coord \in asg[p].owners
               THEN mig[p].coord ELSE mig[p].src
        repair == src = None IN
    /\ mig[p].st = "clone" /\ mig[p].fetched
    /\ mig[p].coord \in active
    /\ Bug("switch_without_catchup") \/ CaughtUpTo(mig[p].dst, p, mig[p].pos)
    /\ asg' = [asg EXCEPT ![p] = [owners |-> (@.owners \ {src}) \cup {mig[p].dst}, target |-> None,
                                  leaving |-> IF Bug("source_stops_at_switch") \/ repair THEN None ELSE src,
                                  version |-> @.version + 1]]
    /\ mig' = [mig EXCEPT ![p].st = IF repair THEN "done" ELSE "switched", ![p].src = src]
    /\ UNCHANGED <<active, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* The replica that leaves the partition: the source after SWITCH, the target after CANCEL.
Leaver(p) == IF mig[p].st = "switched" THEN mig[p].src ELSE mig[p].dst

\* The leaver holds no part of p that no staying owner has: its CLEANUP deletes no only copy.
\* A switched source: SWITCH waits for the target only up to mig.pos (F23), so a part the source
\* wrote after that, before SWITCH, may be the source's alone until an owner fetches it. A
\* cancelled target only ever copied, but an owner it copied from may since have been dropped for
\* good (DropReplica) before another owner fetched the part: the target's copy is then the last
\* one (F32). Off for a switched source with switch_without_catchup (no catch-up anywhere; the RFC
\* has none at CLEANUP) and with cleanup_without_catchup (this wait alone left out); off for a
\* cancelled target with cancel_cleanup_trusts_owners (F32's variant: the wait as F23 first had it).
LeaverRedundant(p) ==
    \/ mig[p].st \notin {"switched", "cancelling"}
    \/ mig[p].st = "switched" /\ (Bug("switch_without_catchup") \/ Bug("cleanup_without_catchup"))
    \/ mig[p].st = "cancelling" /\ Bug("cancel_cleanup_trusts_owners")
    \* A set comprehension, not \A x : \E o : ... In an action TLC 2.15 takes that \E for a choice
    \* per x and enumerates every combination of witnesses, |owners| ^ |parts| identical successors:
    \* 2^17 (124,264 of 126,487 states generated) at one CLEANUP of a reference trace (issue 36).
    \/ {x \in NoEmpty(PartsOf(Leaver(p), p)) : ~\E o \in asg[p].owners \ lost : HasCovering(o, x)} = {}

\* CLEANUP on the leaving replica after old_parts_lifetime. The delay is modelled by what it
\* must outlast: every active replica's map has seen the new assignment, and no running query
\* is routed to the leaver for p. With cleanup_no_delay the data goes right after SWITCH.
ReplicaCleanup(p) ==
    LET r == Leaver(p)
        routedHere == \E q \in Queries : Running(q) /\ p \in qry[q].pending /\ qry[q].routes[p] = r IN
    /\ mig[p].st \in {"switched", "cancelling"}
    /\ r \in active
    /\ LeaverRedundant(p)
    /\ \/ Bug("cleanup_no_delay")
       \/ /\ \A a \in active : cache[a][p].version >= asg[p].version
          /\ ~routedHere
    \* CAS the leaver out; the leaver's own map sees it at once, so its filter stops here.
    /\ asg' = [asg EXCEPT ![p].leaving = None, ![p].version = @ + 1]
    /\ cache' = [cache EXCEPT ![r][p] = asg'[p]]
    /\ parts' = [parts EXCEPT ![r] = {x \in @ : x.p # p}]
    /\ queue' = [queue EXCEPT ![r] = {e \in @ : e.p # p}]
    /\ mig' = [mig EXCEPT ![p].st = IF @ = "switched" THEN "done" ELSE "cancelled"]
    /\ inv_read_cleaned' = (inv_read_cleaned \/ routedHere)
    /\ UNCHANGED <<active, log, ptr, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, aux_counts, gone>>

\* A migration whose leaver stays down still ends (issue 15; protocol/migration.py's
\* replica_cleanup_for_down_leaver, after Cluster.down_timeout, which the model leaves
\* unbounded: any time the leaver is down). An active replica r records the end in the leaver's
\* place under CLEANUP's own guard: every active map has seen the current assignment, so none
\* routes a new SELECT to the leaver; and no running query is routed to it for p (a query whose
\* replica went down has failed: ClientQueryFails; in ClickHouse the connection broke with the
\* server). The leaver's disk is not touched: it is down. It drops the partition when it comes
\* back, before it serves (ReplicaRestart). With down_leaver_cleanup_ignores_maps the end is
\* recorded at once, while a stale map still lists the leaver as an owner.
ReplicaCleanupForDownLeaver(p, r) ==
    LET leaver == Leaver(p)
        routedThere == \E q \in Queries : Running(q) /\ p \in qry[q].pending /\ qry[q].routes[p] = leaver IN
    /\ mig[p].st \in {"switched", "cancelling"}
    /\ leaver \notin active
    /\ r \in active
    /\ LeaverRedundant(p)
    /\ Bug("down_leaver_cleanup_ignores_maps") \/ \A a \in active : cache[a][p].version >= asg[p].version
    /\ ~routedThere
    /\ asg' = [asg EXCEPT ![p].leaving = None, ![p].version = @ + 1]
    /\ cache' = [cache EXCEPT ![r][p] = asg'[p]]
    /\ mig' = [mig EXCEPT ![p].st = IF @ = "switched" THEN "done" ELSE "cancelled"]
    /\ UNCHANGED <<active, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* Cancel before SWITCH: CAS the target out of the assignment into "leaving"; it leaves through
\* ReplicaCleanup like a switched source. With cancel_drops_target_at_once it is dropped and
\* deletes its copy in the same step, while its stale map still makes it pull the partition.
CoordinatorCancel(p) ==
    LET dst == mig[p].dst IN
    /\ mig[p].st = "clone"
    /\ mig[p].src # None   \* a repair is not cancelled (RepairStart)
    /\ mig[p].coord \in active
    /\ IF Bug("cancel_drops_target_at_once")
       THEN /\ asg' = [asg EXCEPT ![p].target = None, ![p].version = @ + 1]
            /\ mig' = [mig EXCEPT ![p].st = "cancelled"]
            /\ parts' = [parts EXCEPT ![dst] = {x \in @ : x.p # p}]
            /\ queue' = [queue EXCEPT ![dst] = {e \in @ : e.p # p}]
       ELSE /\ asg' = [asg EXCEPT ![p].target = None, ![p].leaving = dst, ![p].version = @ + 1]
            /\ mig' = [mig EXCEPT ![p].st = "cancelling"]
            /\ UNCHANGED <<parts, queue, muts, trimmed, lost>>
    /\ UNCHANGED <<active, cache, log, ptr, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* The coordinator's session is gone: another active replica takes the migration over.
ReplicaTakeOverMigration(p, r) ==
    /\ mig[p].st = "clone"
    /\ mig[p].coord \notin active
    /\ r \in active
    /\ mig' = [mig EXCEPT ![p].coord = r]
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* The cleanup thread (ReplicatedMergeTreeCleanupThread).                    *)

\* clearOldLogs: remove the log entries every replica that is not lost has pulled, keeping the
\* last MinLogsToKeep. A replica that is down and more than MaxLogsToKeep entries behind does not
\* hold the log back: it is marked is_lost (markLostReplicas) and must clone when it comes back.
\* Its reading of the replicas, named for TraceSelectiveReplication.tla, whose trim reads them as
\* 18.16 does, some steps before its multi.
LogFresh(r) == r \in active \/ ptr[r] >= Len(log) - MaxLogsToKeep
LogKeepers == {r \in Replicas \ (lost \cup gone) : LogFresh(r)}
LogTrimUpto == Min({ptr[r] : r \in LogKeepers} \cup {Len(log) - MinLogsToKeep})
CleanupClearOldLogs ==
    LET fresh(r) == LogFresh(r)
        keep == LogKeepers
        upto == LogTrimUpto
    IN /\ keep # {}       \* "All replicas are stale: we won't mark any replica as lost"
       /\ upto > trimmed
       /\ trimmed' = upto
       /\ lost' = lost \cup {r \in Replicas \ (lost \cup gone) : ~fresh(r)}
       /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, dedup, muts, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* clearOldBlocks: blocks/ keeps DedupWindow hashes (and those of the last
\* replicated_deduplication_window_seconds, not modelled: time is not). Which one goes is left
\* open here (ClickHouse drops the oldest by ctime): an INSERT retried after its hash went is
\* written again.
CleanupClearOldBlocks(i) ==
    /\ i \in dedup
    /\ Cardinality(dedup) > DedupWindow
    /\ dedup' = dedup \ {i}
    /\ UNCHANGED <<active, asg, cache, log, ptr, queue, parts, meta, muts, trimmed, lost, ins, mig, qry, inv_acked, inv_read_cleaned, aux_counts, gone>>

-----------------------------------------------------------------------------
(* Crashes: the is_active node goes; disk (parts) and Keeper (queue,        *)
(* log_pointer) survive; the in-memory map does not, nor the queries the    *)
(* process was serving.                                                     *)

\* A running query r serves: it started at r (the client's connection is to r) or a partition
\* it has still to read is routed to r (the initiator's connection to r's subquery). Either
\* connection breaks with the process, so the query fails there and then: it cannot wait for
\* r to come back and read on. The pin that held off the leaver's CLEANUP for that read was in
\* r's memory and is gone too (protocol/query.py), so a read after the restart could find the
\* partition cleaned up; the RFC leaves this implicit, the reference and ClickHouse fail it.
ServedBy(q, r) == Running(q) /\ (qry[q].at = r \/ \E p \in qry[q].pending : qry[q].routes[p] = r)

ReplicaCrash(r) ==
    /\ r \in active
    /\ aux_counts.crashes < MaxCrashes
    /\ active' = active \ {r}
    /\ aux_counts' = [aux_counts EXCEPT !.crashes = @ + 1]
    /\ qry' = [q \in Queries |-> IF ServedBy(q, r) THEN [qry[q] EXCEPT !.st = "failed"] ELSE qry[q]]
    /\ UNCHANGED <<asg, cache, log, ptr, queue, parts, meta, dedup, muts, trimmed, lost, ins, mig, inv_acked, inv_read_cleaned, gone>>

\* A lost replica clones when it comes back (cloneReplicaIfNeeded). ClickHouse's cloneReplica
\* mimics one source that is not lost: it takes its log_pointer and queue and fetches every part
\* it has, and it takes out of the table (into detached/) every local part the source neither has
\* nor has a GET_PART queued for. Three readings:
\*  - clone_lost_replica_from_one_peer (cloneReplica as is, F14): one source for everything; under
\*    selective replication no source holds every partition the lost replica keeps.
\*  - clone_keeps_only_what_the_source_has (F15): a source per partition, each as cloneReplica
\*    treats its one source; a part the lost replica wrote and whose GET_PART its source has not
\*    pulled yet is taken out, and it may be the only copy.
\*  - clone_lost_replica_from_any_keeper (F33): a source per partition, any keeper that is not
\*    lost, as the fix below first had it; a CLONE target that has not fetched yet (or a target
\*    cancelled before its fetch) is one, holds nothing of the partition and has nothing of it
\*    queued, and the lost owner, cloning from it, drops its own parts and queues nothing.
\*  - fixed: a source per partition the replica keeps (an owner that is not lost: an owner holds
\*    every block of the partition or has it on its way, OwnersCompleteInv); that
\*    partition's queue entries and parts from it; a local part is kept when the source has it,
\*    or a queued entry of the source or an entry of the log beyond the source's log_pointer will
\*    make it (as PR #58132's clonePartition reads them). The log_pointer is that of the source
\*    furthest behind, so nothing is skipped (what is pulled twice is a no-op), and the global
\*    entries and metadata come from that source. Parts of partitions it does not keep go.
Made(e) == e.type \in {"GET", "MERGE", "MUTATE"}
SourceParts(s, p, withLog) ==
    PartsOf(s, p) \cup {e.part : e \in {e \in queue[s] : e.p = p /\ (IF withLog THEN Made(e) ELSE e.type = "GET")}}
                  \cup (IF withLog THEN {log[j].part : j \in {j \in (ptr[s] + 1)..Len(log) : log[j].p = p /\ Made(log[j])}}
                        ELSE {})
CloneLostReplica(r) ==
    IF Bug("clone_lost_replica_from_one_peer")
    THEN \E s \in Replicas \ (lost \cup {r}) :
            /\ ptr' = [ptr EXCEPT ![r] = ptr[s]]
            /\ queue' = [queue EXCEPT ![r] = queue[s] \cup {Entry("GET", x.p, x, 0) : x \in parts[s]}]
            /\ parts' = [parts EXCEPT ![r] = {x \in @ : \E y \in SourceParts(s, x.p, FALSE) : Covers(y, x)}]
            /\ meta' = [meta EXCEPT ![r] = meta[s]]
            /\ lost' = lost \ {r}
    ELSE LET kept == {p \in Partitions : r \in Keepers(asg[p])}
             sources(p) == (IF Bug("clone_lost_replica_from_any_keeper") THEN Keepers(asg[p]) ELSE asg[p].owners)
                               \ (lost \cup {r})
             withLog == ~Bug("clone_keeps_only_what_the_source_has") IN
         /\ \A p \in kept : sources(p) # {}        \* else "All replicas are lost": retried later
         /\ \E src \in [kept -> Replicas], g \in Replicas \ (lost \cup gone \cup {r}) :
            /\ \A p \in kept : src[p] \in sources(p)
            /\ \A p \in kept : ptr[g] <= ptr[src[p]]
            /\ kept # {} => g \in {src[p] : p \in kept}
            /\ ptr' = [ptr EXCEPT ![r] = ptr[g]]
            /\ queue' = [queue EXCEPT ![r] = {e \in queue[g] : e.type = "ALTER"}
                           \cup UNION {{e \in queue[src[p]] : e.p = p} : p \in kept}
                           \cup UNION {{Entry("GET", p, x, 0) : x \in PartsOf(src[p], p)} : p \in kept}]
            /\ parts' = [parts EXCEPT ![r] = {x \in @ : x.p \in kept /\ \E y \in SourceParts(src[x.p], x.p, withLog) : Covers(y, x)}]
            /\ meta' = [meta EXCEPT ![r] = [alters |-> meta[g].alters,
                                             dropped |-> [p \in Partitions |-> IF p \in kept THEN meta[src[p]].dropped[p]
                                                                                ELSE @.dropped[p]]]]
            /\ lost' = lost \ {r}

\* Restart. Fixed: the replica loads its map from Keeper before it serves (is_active again);
\* with serve_before_map_loaded it serves with an empty map that fills in asynchronously. Then,
\* before it serves, it drops every partition it no longer keeps: a CLEANUP was done on its
\* behalf while it was down (ReplicaCleanupForDownLeaver; reference drop_foreign_partitions).
\* With restart_keeps_foreign_parts it keeps them. A lost replica's clone keeps only what it keeps.
\* A query that routed a partition to r while r was down has failed by the time r is back: its
\* subquery was sent when the query started and the connection was refused (ClientQueryFails
\* may take it any time before). It never waits for r and reads from it after the restart: r
\* took no pin for it, so a CLEANUP there could already have removed what it would read.
ReplicaRestart(r) ==
    LET foreign(p) == p \in Partitions /\ r \notin Keepers(asg[p]) IN
    /\ r \notin active
    /\ r \notin gone    \* SYSTEM DROP REPLICA is for good: the replica never comes back (a new one has a new name)
    /\ active' = active \cup {r}
    /\ cache' = [cache EXCEPT ![r] = IF Bug("serve_before_map_loaded") THEN [p \in Partitions |-> NoAsg] ELSE asg]
    \* (r was down: a running query ServedBy r is one routed to it, none started there)
    /\ qry' = [q \in Queries |-> IF ServedBy(q, r) THEN [qry[q] EXCEPT !.st = "failed"] ELSE qry[q]]
    /\ IF r \in lost THEN CloneLostReplica(r)
       ELSE IF Bug("restart_keeps_foreign_parts") THEN UNCHANGED <<ptr, queue, parts, meta, lost>>
       ELSE /\ parts' = [parts EXCEPT ![r] = {x \in @ : ~foreign(x.p)}]
            /\ queue' = [queue EXCEPT ![r] = {e \in @ : ~foreign(e.p)}]
            /\ UNCHANGED <<ptr, meta, lost>>
    /\ UNCHANGED <<asg, log, dedup, muts, trimmed, ins, mig, inv_acked, inv_read_cleaned, aux_counts, gone>>

\* Which replica that is down the operator may drop for good: any (TRUE). A model may override it
\* in its cfg (`OperatorDrops <- DropKeepsACopy`, MCSelectiveReplication.tla) to leave out the
\* drops that take the only copy of a block with them, the base protocol's bound (F20), so that
\* what it finds after a drop is the protocol's doing (F32).
OperatorDrops(r) == TRUE

\* SYSTEM DROP REPLICA 'r': an operator removes a dead replica for good (ClickHouse refuses an
\* active one). Its replicas/{r} subtree goes (queue, log_pointer as a holder of the log: the
\* cleanup thread no longer waits for it), and so does its disk: the machine is not coming back.
\* Selective replication adds what the RFC does not say: r leaves every assignment in the same
\* step, so no INSERT is forwarded to it and no SELECT routed to it any more, and each partition
\* it owned is short of RF until a repair (RepairStart) switches a new owner in. A migration in
\* flight that involves r: a CLONE into r is cancelled (its target is gone, nothing to clean); a
\* CLONE out of r becomes a repair (its SWITCH then only adds the target: REASSIGN away from a
\* dead owner); a SWITCH or CANCEL whose leaver is r is done (its data went with it). ptr[r] is
\* left as it was: nothing reads it once r is gone.
DropReplica(r) ==
    /\ r \notin active
    /\ r \notin gone
    /\ Cardinality(gone) < MaxReplicaDrops
    /\ OperatorDrops(r)
    /\ gone' = gone \cup {r}
    /\ asg' = [p \in Partitions |->
                IF r \in Keepers(asg[p])
                THEN [owners |-> asg[p].owners \ {r},
                      target |-> IF asg[p].target = r THEN None ELSE asg[p].target,
                      leaving |-> IF asg[p].leaving = r THEN None ELSE asg[p].leaving,
                      version |-> asg[p].version + 1]
                ELSE asg[p]]
    /\ mig' = [p \in Partitions |->
                CASE mig[p].st = "clone" /\ mig[p].dst = r -> [mig[p] EXCEPT !.st = "cancelled"]
                  [] mig[p].st = "clone" /\ mig[p].src = r -> [mig[p] EXCEPT !.src = None]
                  [] mig[p].st = "switched" /\ mig[p].src = r -> [mig[p] EXCEPT !.st = "done"]
                  [] mig[p].st = "cancelling" /\ mig[p].dst = r -> [mig[p] EXCEPT !.st = "cancelled"]
                  [] OTHER -> mig[p]]
    /\ parts' = [parts EXCEPT ![r] = {}]
    /\ queue' = [queue EXCEPT ![r] = {}]
    /\ UNCHANGED <<active, cache, log, ptr, meta, dedup, muts, trimmed, lost, ins, qry, inv_acked, inv_read_cleaned, aux_counts>>

-----------------------------------------------------------------------------
Next ==
    \/ \E r \in Replicas :
        \/ ReplicaPullLog(r) \/ ReplicaExecuteEntry(r) \/ ReplicaCrash(r) \/ ReplicaRestart(r)
        \/ DropReplica(r)
        \/ \E p \in Partitions : ReplicaRefreshCache(r, p) \/ ReplicaSelectMerge(r, p) \/ ReplicaSelectMutation(r, p)
        \/ \E i \in Inserts : ClientSendInsert(i, r) \/ ReplicaAllocate(r, i)
                               \/ ReplicaForwardInsert(r, i) \/ ReplicaWriteInsert(r, i)
        \/ \E q \in Queries : ClientStartQuery(q, r)
    \/ \E i \in Inserts : ClientReceiveAck(i) \/ ClientTimeout(i)
    \/ \E q \in Queries : ClientQueryFails(q) \/ \E p \in Partitions : ReplicaReadPartition(q, p)
    \/ ClientAlterMetadata
    \/ ClientMutate
    \/ \E p \in Partitions : ClientDropPartition(p)
    \/ CleanupClearOldLogs
    \/ \E i \in Inserts : CleanupClearOldBlocks(i)
    \/ \E p \in Partitions :
        \/ ReplicaCloneFetch(p) \/ CoordinatorSwitch(p) \/ ReplicaCleanup(p) \/ CoordinatorCancel(p)
        \/ \E r \in Replicas : ReplicaTakeOverMigration(p, r) \/ ReplicaCleanupForDownLeaver(p, r)
        \/ \E src, dst \in Replicas : AdminReassign(p, src, dst) \/ AdminRebalance(p, src, dst) \/ RepairStart(p, src, dst)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants. Each names one clause so that TLC names what broke.          *)

\* Every variable holds a value of its intended type.
TypeOKInv ==
    /\ active \subseteq Replicas
    /\ gone \subseteq Replicas \ active
    /\ \A r \in Replicas : ptr[r] \in 0..Len(log) /\ meta[r].alters \in Nat
    /\ inv_acked \subseteq Inserts
    /\ \A p \in Partitions : mig[p].st \in {"none", "clone", "switched", "cancelling", "done", "cancelled"}

\* Each assignment names RF owners, plus one CLONE target exactly while a CLONE is in flight.
\* Only a permanent loss makes a partition short, by one owner per replica dropped (a repair
\* brings it back; RepairedEventuallyProp says it does), and no replica dropped keeps any role.
\* With no replica dropped this is the exact count, owners = RF.
ReplicationFactorInv ==
    \A p \in Partitions : Assigned(p) =>
        /\ Cardinality(asg[p].owners) <= RF
        /\ Cardinality(asg[p].owners) >= RF - Cardinality(gone)
        /\ Keepers(asg[p]) \cap gone = {}
        /\ (asg[p].target # None) <=> (mig[p].st = "clone")
        /\ (asg[p].leaving # None) <=> \/ mig[p].st = "cancelling"
                                       \/ mig[p].st = "switched" /\ ~Bug("source_stops_at_switch")

\* Every acknowledged insert was committed: a GET_PART of it is in the log, written by this
\* attempt or by an earlier one that blocks/ then deduplicated it against. With this, the domain
\* of the no-loss invariants below (LiveAcked) leaves out exactly the inserts a later DROP_RANGE
\* removed, and no acknowledged insert can drop out of it by never reaching the log.
AckedCommittedInv ==
    \A i \in inv_acked : LastIdx(i) > 0

\* Every acknowledged insert that no DROP_RANGE removed is still on some replica's disk.
NoAckedBlockLostInv ==
    \A i \in LiveAcked : \E r \in Replicas : HasBlock(r, i)

\* Every owner holds, or is still being brought by replication, every acknowledged block of
\* its partitions: a partition is never left short of complete copies.
OwnersCompleteInv ==
    \A i \in LiveAcked : \A o \in asg[InsertPartition[i]].owners : HasBlock(o, i) \/ InFlightTo(o, i)

\* R2: a completed query returned every block acknowledged before it started, except
\* blocks its replicas were still receiving by ordinary replication lag.
QueryNoMissingInv ==
    \A q \in Queries : qry[q].st = "done" => qry[q].lost = {}

\* R3: a completed query returned no block twice.
QueryNoDuplicateInv ==
    \A q \in Queries : qry[q].st = "done" => ~qry[q].dup

\* A keeper never holds a part older than a mutation it has passed in the log and that was
\* issued after the part's data, unless a mutation of that partition is still pending in its
\* queue, or a fetch of a part that covers it with that mutation applied (a lost replica's
\* clone queues the source's mutated part and keeps its own until the fetch replaces it; the
\* conformance walks found it): replicas converge on mutations.
MutatedPartQueued(r, x, owed) ==
    \E e \in queue[r] : e.type = "GET" /\ Covers(e.part, x) /\ e.part.mv >= owed
MutationsAppliedInv ==
    LET mutates == IdxsOf("MUTATE") IN
    \A r \in Replicas : \A x \in parts[r] :
        r \in Keepers(asg[x.p]) =>
            LET owed == MutationsOwed(mutates \cap 1..ptr[r], x)
            IN x.mv >= owed \/ MutationPending(r, x.p) \/ MutatedPartQueued(r, x, owed)

\* A keeper never holds blocks that a DROP_RANGE it has passed removed, unless a drop of that
\* partition is still pending in its queue: dropped rows do not come back.
DropsAppliedInv ==
    LET drops == IdxsOf("DROP") IN
    \A r \in Replicas : \A x \in parts[r] :
        r \in Keepers(asg[x.p]) =>
            LET d == DropPoint(x.p, drops \cap 1..ptr[r])
            IN \/ \A blk \in x.b : blk[2] > d
               \/ DropPending(r, x.p)

\* No replica stores the rows of one insert twice (a retried INSERT that dedup missed).
NoDuplicateRowsInv ==
    \A r \in Replicas, p \in Partitions : ~Twice(BlocksOf(r, p))

\* CLEANUP never removed data that a running query was routed to read.
CleanupSafeInv == ~inv_read_cleaned

\* Every replica applied or queued every global entry it has pulled.
GlobalEntriesAppliedInv ==
    \A r \in Replicas :
        meta[r].alters + Cardinality({e \in queue[r] : e.type = "ALTER"})
            = Cardinality({k \in 1..ptr[r] : log[k].type = "ALTER"})

\* No replica keeps parts of a partition it does not own or CLONE into, except the replica
\* leaving it (source after SWITCH, target after CANCEL) until its CLEANUP, and a replica that
\* is down (a CLEANUP done on its behalf: it drops the partition when it comes back).
NoForeignPartsInv ==
    \A r \in Replicas : \A x \in parts[r] :
        \/ r \in Keepers(asg[x.p])
        \/ mig[x.p].st \in {"switched", "cancelling"} /\ r = Leaver(x.p)
        \/ r \notin active

\* Fault-domain anti-affinity: the owners of a partition, and those it will have once its CLONE
\* in flight switches, are in distinct domains (Domain itself: ignore_fault_domains must not hide it).
DomainAntiAffinityInv ==
    \A p \in Partitions :
        \A S \in {asg[p].owners, PlannedOwners(p)} : Cardinality({Domain[r] : r \in S}) = Cardinality(S)

\* A migration's state says what it did to the owners: from SWITCH on (switched, done) the source
\* is no owner and the target is one (unless SYSTEM DROP REPLICA removed it since); before SWITCH
\* and after CANCEL (clone, cancelling, cancelled) the target is no owner. A replica re-enters
\* the owners only by a later migration, which replaces mig[p]. Without it a CLEANUP that records
\* a switched migration as cancelled, or a cancelled one as done, breaks nothing else: no reader
\* of the data looks at the migration's end, but the rebalancer and system.migrations do. The
\* assignment's leaving replica is the migration's Leaver: the source from SWITCH to its CLEANUP
\* (none under the RFC's source_stops_at_switch), the target from CANCEL to its CLEANUP, no one
\* otherwise (ReplicationFactorInv says when there is one; this says who). Without it a CLEANUP
\* whose end is lost leaves a switched migration with no one leaving until the leaver, back,
\* ends it: no row and no owner is wrong meanwhile.
MigrationOutcomeInv ==
    \A p \in Partitions :
        /\ mig[p].st \in {"switched", "done"} =>
              /\ mig[p].src = None \/ mig[p].src \notin asg[p].owners
              /\ mig[p].dst \in asg[p].owners \/ mig[p].dst \in gone
        /\ mig[p].st \in {"clone", "cancelling", "cancelled"} => mig[p].dst \notin asg[p].owners
        /\ asg[p].leaving = CASE mig[p].st = "switched" /\ ~Bug("source_stops_at_switch") -> mig[p].src
                               [] mig[p].st = "cancelling" -> mig[p].dst
                               [] OTHER -> None

\* No more migrations are in flight than the concurrency limit allows.
MigrationLimitInv == Cardinality(MigrationsInFlight) <= MaxConcurrentMigrations

\* log_pointer never moves backwards (checked as an action property).
LogPointerMonotonicProp == [][\A r \in Replicas : ptr'[r] >= ptr[r]]_vars

\* The cleanup thread's trimming never moves backwards: a removed entry does not come back.
TrimmedMonotonicProp == [][trimmed' >= trimmed]_vars

\* A lost replica's log_pointer moves only by its clone, which takes it out of `lost`: it pulls
\* nothing, since the entries it is behind on are ones the cleanup thread removed (`log` keeps
\* them only as the model's history). The replicas not lost are at or past `trimmed`.
LostReplicaClonesProp == [][\A r \in lost : ptr'[r] # ptr[r] => r \notin lost']_vars

\* How many owners each partition has: replication_factor, less its owners that SYSTEM DROP
\* REPLICA removed and no repair has replaced yet. The state does not say which partitions a
\* dropped replica owned (DropReplica takes it out of the owners in the same step, and `gone`
\* says only who went), so the count is stated on the steps, an action property, not as a state
\* invariant: that would need a history variable threaded through every action, through the
\* modules that EXTEND or INSTANCE this one and through conformance's reading of TLC's state
\* graph, for what the steps already say. Each step leaves every assigned partition's count as
\* it was, except that DropReplica lowers it by one per owner it removes and a repair's SWITCH
\* (a CLONE with no source: RepairStart, or a move whose source was dropped) adds exactly its
\* target and removes no one; a move's SWITCH keeps the count. An allocation starts at RF. From
\* Init (RF each, ReplicationFactorInv with no replica gone) it follows that at every state
\* owners = RF - dropped owners + repairs switched, partition by partition. ReplicationFactorInv
\* only bounds the count by the replicas gone, table-wide: with one replica dropped, any partition
\* may sit at RF - 1, one the dropped replica never owned, or one whose repair has switched.
\* Without it a repair whose SWITCH moves the partition away from its coordinator
\* (repair_moves_coordinator, PR-F9's mechanism) leaves it short for good and breaks no other
\* safety property: only the liveness RepairedEventuallyProp, on a model TLC must exhaust with
\* fairness. The history's checkers judge the count at every snapshot (checkers/invariants.py).
RepairOutcomeProp ==
    [][\A p \in Partitions : asg'[p].version # Absent =>
         LET repair == mig[p].st = "clone" /\ mig'[p].st \in {"switched", "done"} /\ mig[p].src = None
             dropped == asg[p].owners \cap (gone' \ gone) IN
         /\ Cardinality(asg'[p].owners) = IF ~Assigned(p) THEN RF
                                          ELSE Cardinality(asg[p].owners) - Cardinality(dropped)
                                               + (IF repair THEN 1 ELSE 0)
         /\ repair => asg'[p].owners = asg[p].owners \cup {mig[p].dst}]_vars

\* The RFC's promise for reads after SWITCH ("Full speed: data is on local disk, no cold cache"):
\* the step that makes a CLONE's target an owner finds it holding every live acknowledged block of
\* p whose entry is at or before the position its fetch fixed (mig.pos). Blocks written after the
\* position may still be on their way (F23); CLEANUP's wait (LeaverRedundant) keeps their copy.
\* Not the SWITCH guard restated: the guard reads the target's queue and log_pointer, this the
\* parts it holds.
SwitchTargetHoldsFetchedProp ==
    [][\A p \in Partitions :
         (mig[p].st = "clone" /\ mig'[p].st \in {"switched", "done"}) =>
            \A i \in LiveAcked : InsertPartition[i] = p /\ 0 < FirstIdx(i) /\ FirstIdx(i) <= mig[p].pos
                                 => HasBlock(mig[p].dst, i)]_vars

-----------------------------------------------------------------------------
(* Liveness, under weak fairness of the background work a replica does by   *)
(* itself (pulling, executing its queue, refreshing its map, restarting)    *)
(* and of each migration step. Clients and admins owe nothing.              *)

ReplicaFairness ==
    \A r \in Replicas :
        /\ WF_vars(ReplicaPullLog(r)) /\ WF_vars(ReplicaExecuteEntry(r)) /\ WF_vars(ReplicaRestart(r))
        /\ \A p \in Partitions : WF_vars(ReplicaRefreshCache(r, p))

\* The down timeouts (Cluster.down_timeout, Cluster._clone_waits_on_down): a CLONE whose target
\* is down, or whose target waits on a GET_PART of the partition that no active replica can
\* serve while some replica is down (the only copy may be there), is cancelled by its
\* coordinator; a leaver that is down is cleaned up for by an active replica.
CloneWaitsOnDown(p) ==
    LET dst == mig[p].dst IN
    \/ dst \notin active
    \/ /\ mig[p].fetched /\ active # Replicas
       /\ \E e \in queue[dst] : e.p = p /\ e.type = "GET" /\ ~HasNewerCovering(dst, e.part)
                                /\ \A s \in active \ {dst} : ~HasNewerCovering(s, e.part)
MigrationFairness ==
    \A p \in Partitions :
        /\ WF_vars(ReplicaCloneFetch(p)) /\ WF_vars(CoordinatorSwitch(p)) /\ WF_vars(ReplicaCleanup(p))
        /\ WF_vars(CloneWaitsOnDown(p) /\ CoordinatorCancel(p))
        /\ \A r \in Replicas : WF_vars(ReplicaTakeOverMigration(p, r)) /\ WF_vars(ReplicaCleanupForDownLeaver(p, r))

QueryFairness ==
    \A q \in Queries : WF_vars(ClientQueryFails(q)) /\ \A p \in Partitions : WF_vars(ReplicaReadPartition(q, p))

LiveSpec == Spec /\ ReplicaFairness /\ MigrationFairness /\ QueryFairness

\* The repair as a background job (the reference's system_rebalance starts one for every
\* partition short of RF): not owed by an admin, so fair only in the repair models' LiveRepairSpec.
RepairFairness == \A p \in Partitions : WF_vars(\E c, d \in Replicas : RepairStart(p, c, d))
LiveRepairSpec == Spec /\ ReplicaFairness /\ MigrationFairness /\ QueryFairness /\ RepairFairness

\* The merge-selecting task as a background job (mergeSelectingTask): a replica that may select a
\* mutation of a part it holds does. Fair only in the models of who selects (MCLivenessMutationOffLeader).
SelectionFairness == \A r \in Replicas : \A p \in Partitions : WF_vars(ReplicaSelectMutation(r, p))
LiveSelectionSpec == LiveSpec /\ SelectionFairness

\* The same, without the map refresh timer: nothing forces a stale map to catch up.
NoRefreshFairness ==
    \A r \in Replicas : WF_vars(ReplicaPullLog(r)) /\ WF_vars(ReplicaExecuteEntry(r)) /\ WF_vars(ReplicaRestart(r))
LiveSpecWithoutRefresh == Spec /\ NoRefreshFairness /\ MigrationFairness /\ QueryFairness

\* The same, without fairness on restarts: a crashed replica may stay down for good. Every
\* migration must still end, by the down timeouts.
NoRestartFairness ==
    \A r \in Replicas :
        /\ WF_vars(ReplicaPullLog(r)) /\ WF_vars(ReplicaExecuteEntry(r))
        /\ \A p \in Partitions : WF_vars(ReplicaRefreshCache(r, p))
LiveSpecWithoutRestart == Spec /\ NoRestartFairness /\ MigrationFairness /\ QueryFairness

\* Every started migration ends, DONE or CANCELLED.
MigrationsEndProp ==
    \A p \in Partitions : (mig[p].st = "clone") ~> (mig[p].st \in {"done", "cancelled"})

\* Every started migration ends, or waits for a switched source that is down and holds the only
\* copy of a part (F23): SWITCH waits for the target only up to the position the fetch fixed, so
\* a part the source wrote after it may be the source's alone, and ending the migration would make
\* the source drop it when it comes back. It comes back under LiveSpec (MigrationsEndProp holds
\* there); under LiveSpecWithoutRestart it may not, and the operator's SYSTEM DROP REPLICA
\* (DropReplica) is what ends the migration, with the part. The same for a cancelled target down
\* with the last copy of a part an owner dropped for good had (F32).
MigrationsEndOrWaitOnOnlyCopyProp ==
    \A p \in Partitions :
        (mig[p].st = "clone") ~> \/ mig[p].st \in {"done", "cancelled"}
                                 \/ mig[p].st \in {"switched", "cancelling"} /\ Leaver(p) \notin active
                                    /\ ~LeaverRedundant(p)

\* Every partition a permanent loss left short of RF gets back to RF owners (while replicas
\* enough are left: the repair models drop one of three at RF 2).
RepairedEventuallyProp ==
    \A p \in Partitions : (Assigned(p) /\ Cardinality(asg[p].owners) < RF) ~> (Cardinality(asg[p].owners) = RF)

\* Every owner eventually holds every acknowledged block of its partitions.
OwnersEventuallyCompleteProp ==
    \A i \in Inserts : (i \in LiveAcked) ~> (~Live(i) \/ \A o \in asg[InsertPartition[i]].owners : HasBlock(o, i))

\* Replication lag ends: each replica that is up keeps coming back to a state where it has
\* pulled the whole log and executed its whole queue. So every global entry is pulled and
\* applied by every replica (GlobalEntriesAppliedInv excuses entries beyond log_pointer), and
\* every pending MUTATE and DROP_RANGE is executed (MutationsAppliedInv and DropsAppliedInv
\* excuse a pending one); OwnersEventuallyCompleteProp says it for the GET_PARTs only. "Keeps
\* coming back" rather than "stays": a write or a restart may start the lag again.
ReplicasCatchUpProp ==
    \A r \in Replicas : []<>(r \in active => ptr[r] = Len(log) /\ queue[r] = {})

\* Mutations end: every part each replica holds keeps coming back to having every mutation of its
\* data applied (system.mutations' is_done). Under 18.16 only the leader selects MUTATE_PART, and
\* only of parts it holds: a partition it does not keep is never mutated (F34).
MutationsDoneProp == []<>(\A r \in Replicas : \A x \in parts[r] : x.mv >= Owed(x))

\* A replica serving the query is down: one it still has to read from (the query may fail:
\* ClientQueryFails, or failed with its crash) or the one it started at (failed with its crash).
ServerDown(q) == qry[q].at \notin active \/ \E p \in qry[q].pending : qry[q].routes[p] \notin active

\* Every started query ends, answered or failed: none waits for ever on a replica that went
\* down for good (LiveSpecWithoutRestart), since a broken connection is an error the client sees.
QueriesEndProp == \A q \in Queries : Running(q) ~> (qry[q].st \in {"done", "failed"})

\* A query is answered unless a replica serving it goes down: the client sees an error only
\* when the replica it is connected to, or one it was routed to, is unavailable. Neither
\* property is implied by the invariants, which judge only the queries that are done (R2, R3).
QueryAnsweredProp == \A q \in Queries : Running(q) ~> (qry[q].st = "done" \/ ServerDown(q))
=============================================================================
