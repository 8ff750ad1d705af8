"""The protocol: ReplicatedMergeTree's base protocol and selective replication, one function per
spec action (spec/rfc/SelectiveReplication.tla; PR #102244's design in protocol/pr102244/). No
driving, recording or judging here: the drivers (reference/) choose which step runs next."""
