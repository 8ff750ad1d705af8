"""The cleanup thread of ReplicatedMergeTree (ReplicatedMergeTreeCleanupThread), on the leader:
`cleanup_clear_old_logs` trims log/ and marks replicas lost, `cleanup_clear_old_blocks` keeps
blocks/ to the deduplication window. Each is one step of the spec's (CleanupClearOldLogs,
CleanupClearOldBlocks); a replica's outdated parts are its own (Replica.replica_clear_old_parts).

Settings and their defaults are the base protocol's (issue 36), one set per ClickHouse version:
`BASE_PROTOCOLS`. 26.x, the default, as master's MergeTreeSettings.cpp reads (@0024204a, the copy
whose docs name 26.1): min_replicated_logs_to_keep 10, max_replicated_logs_to_keep 1000,
replicated_deduplication_window 10000 blocks and replicated_deduplication_window_seconds one hour.
18.16 as its running server's system.merge_tree_settings reads (2026-11-30): 100, 10000, 100 blocks
and one week. old_parts_lifetime is 480 s in both. Which of a window's two bounds binds: in 26.x
time does for a table taking fewer than 10000 / 3600 = 2.8 INSERTs a second, in 18.16 the count
does for one taking more than 100 a week. agreement/KEEPER_OPERATIONS.md says where each figure
was read.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.assignment import GuardFailed
from protocol.keeper import BadVersionError, Check, Keeper, MultiError, NoNodeError, SetData
from protocol.layout import Layout
from protocol.replica import log_number as entry_number


@dataclass(frozen=True)
class CleanupSettings:
    min_logs_to_keep: int = 10
    max_logs_to_keep: int = 1000
    dedup_window: int = 10000
    dedup_window_seconds: float = 3600
    old_parts_lifetime: float = 480.0

    def __post_init__(self):
        for name in ("min_logs_to_keep", "max_logs_to_keep", "dedup_window"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")
        if self.max_logs_to_keep < 1:
            # ClickHouse indexes the log with it: 0 would mark every replica that is down lost.
            raise ValueError("max_logs_to_keep must be >= 1")


# The two versions' defaults (the module's docstring says where each was read).
BASE_PROTOCOLS = {
    "26.x": CleanupSettings(),
    "18.16": CleanupSettings(min_logs_to_keep=100, max_logs_to_keep=10000, dedup_window=100,
                             dedup_window_seconds=7 * 24 * 3600),
}


def cleanup_clear_old_logs(keeper: Keeper, layout: Layout, settings: CleanupSettings = CleanupSettings()) -> int:
    """clearOldLogs: remove the log entries every replica that is not lost has pulled, keeping
    the last min_logs_to_keep. A replica that is down and more than max_logs_to_keep entries
    behind does not hold the log back: markLostReplicas sets its is_lost, with a check that its
    host did not change (it did not come back meanwhile). Returns the entries removed."""
    doomed, stale = old_logs(keeper, layout, settings)
    for r, host_version in stale.items():
        try:
            keeper.multi([Check(layout.host(r), host_version), SetData(layout.is_lost(r), b"1")])
        except MultiError:
            raise GuardFailed("CleanupClearOldLogs", f"{r} became active while being marked lost") from None
    for n in doomed:
        try:
            keeper.delete(f"{layout.log}/{n}")
        except NoNodeError:
            pass   # another replica's cleanup removed it concurrently
    return len(doomed)


def old_logs(keeper: Keeper, layout: Layout, settings: CleanupSettings) -> tuple[list[str], dict[str, int]]:
    """What clearOldLogs would do now: the entries to remove and the replicas to mark lost (with
    the version of their host node); GuardFailed when nothing may go."""
    entries = sorted(keeper.get_children(layout.log))
    if not entries:
        raise GuardFailed("CleanupClearOldLogs", "the log is empty")
    head = entry_number(entries[-1]) + 1               # the spec's Len(log)
    oldest_fresh = head - settings.max_logs_to_keep    # a pointer below it is stale
    keep, stale = [], {}
    for r in keeper.get_children(layout.replicas):
        if keeper.get(layout.is_lost(r))[0] == b"1":
            continue
        ptr = int(keeper.get(layout.log_pointer(r))[0])
        if keeper.exists(layout.is_active(r)) is not None or ptr >= oldest_fresh:
            keep.append(ptr)
        else:
            stale[r] = keeper.exists(layout.host(r)).version
    if not keep:
        raise GuardFailed("CleanupClearOldLogs", "all replicas are stale: we won't mark any replica as lost")
    upto = min([*keep, head - settings.min_logs_to_keep])
    doomed = [n for n in entries if entry_number(n) < upto]
    if not doomed:
        raise GuardFailed("CleanupClearOldLogs", f"nothing to remove below {upto}")
    return doomed, stale


def cleanup_clear_old_blocks(keeper: Keeper, layout: Layout, settings: CleanupSettings = CleanupSettings(),
                             cache: dict[str, tuple[int, int]] | None = None) -> int:
    """clearOldBlocks: keep the dedup_window newest block ids of blocks/, and only those less
    than dedup_window_seconds older than the newest one. An INSERT retried after its id went is
    written again. Returns the ids removed.

    `cache` (name -> (ctime, version)), kept by the caller between rounds, is ClickHouse's
    cached_block_stats: only ids not seen before are stat'ed, so a round costs one listing, not a
    read per id (a window of 1,000 ids would be 1,000 reads every cleanup period)."""
    cache = {} if cache is None else cache
    names = keeper.get_children(layout.blocks)
    for gone in set(cache) - set(names):
        del cache[gone]
    stats = []
    for n in names:
        if n not in cache:
            st = keeper.exists(f"{layout.blocks}/{n}")
            if st is None:
                continue
            cache[n] = (st.ctime, st.version)
        ctime, version = cache[n]
        stats.append((ctime, n, version))
    if not stats:
        return 0
    stats.sort(reverse=True)  # newest first, as ClickHouse sorts by (ctime, name)
    threshold = stats[0][0] - int(settings.dedup_window_seconds * 1000)
    doomed = [(n, v) for i, (ctime, n, v) in enumerate(stats) if i >= settings.dedup_window or ctime < threshold]
    if not doomed:
        raise GuardFailed("CleanupClearOldBlocks", f"{len(stats)} block ids, all in the window")
    for n, v in doomed:
        try:
            keeper.delete(f"{layout.blocks}/{n}", v)
        except (NoNodeError, BadVersionError):
            pass   # removed, or written again, meanwhile: either way not ours to remove
        cache.pop(n, None)   # gone, or re-created: stat'ed afresh if it is listed again
    return len(doomed)
