"""The znode layout of a table: the base protocol's (seed 002) plus the RFC's selective/ subtree."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.table import check_partition_id


@dataclass(frozen=True)
class Layout:
    root: str  # the table's ZooKeeper path, e.g. /clickhouse/tables/01/events

    @property
    def log(self) -> str:
        return f"{self.root}/log"

    @property
    def replicas(self) -> str:
        return f"{self.root}/replicas"

    def replica(self, r: str) -> str:
        if not r or "/" in r:
            raise ValueError(f"malformed replica name {r!r}")
        return f"{self.replicas}/{r}"

    def is_active(self, r: str) -> str:
        return f"{self.replica(r)}/is_active"

    def log_pointer(self, r: str) -> str:
        return f"{self.replica(r)}/log_pointer"

    def is_lost(self, r: str) -> str:
        """"1" while the replica must clone before it pulls the log (markLostReplicas set it)."""
        return f"{self.replica(r)}/is_lost"

    def host(self, r: str) -> str:
        """Rewritten at every start: markLostReplicas checks its version, so a replica that came
        back meanwhile is not marked lost."""
        return f"{self.replica(r)}/host"

    def queue(self, r: str) -> str:
        return f"{self.replica(r)}/queue"

    def parts(self, r: str) -> str:
        return f"{self.replica(r)}/parts"

    def placement(self, r: str) -> str:
        """r's declared fault domain, disk capacity and bytes in use (placement.py)."""
        return f"{self.replica(r)}/placement"

    def map_version(self, r: str, partition_id: str) -> str:
        """The assignment version r's in-memory map holds for a partition, published for CLEANUP."""
        return f"{self.replica(r)}/maps/{check_partition_id(partition_id)}"

    @property
    def blocks(self) -> str:
        return f"{self.root}/blocks"

    def block_numbers(self, partition: str) -> str:
        """Where INSERTs, mutations and drops of a partition take their block numbers."""
        return f"{self.root}/block_numbers/{check_partition_id(partition)}"

    @property
    def all_block_numbers(self) -> str:
        return f"{self.root}/block_numbers"

    @property
    def mutations(self) -> str:
        """ALTER UPDATE/DELETE, table-wide (ReplicatedMergeTreeMutationEntry)."""
        return f"{self.root}/mutations"

    @property
    def columns(self) -> str:
        """The table's columns; its version is the ALTER_METADATA entry's alter_version."""
        return f"{self.root}/columns"

    @property
    def config(self) -> str:
        return f"{self.root}/selective/config"

    @property
    def assignments(self) -> str:
        return f"{self.root}/selective/assignments"

    def assignment(self, partition_id: str) -> str:
        return f"{self.assignments}/{check_partition_id(partition_id)}"

    @property
    def migrations(self) -> str:
        return f"{self.root}/selective/migrations"

    def migration(self, partition_id: str) -> str:
        return f"{self.migrations}/{check_partition_id(partition_id)}"
