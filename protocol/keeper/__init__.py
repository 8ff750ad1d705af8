"""Keeper (ZooKeeper / ClickHouse Keeper) access for the reference implementation: one
interface, an in-memory backend and a real-ZooKeeper backend with the same semantics."""

from protocol.keeper.base import (BadVersionError, Check, Create, Delete, Keeper, KeeperError, KeeperUnavailableError,
                                  MultiError, NoAuthError, NodeExistsError, NoNodeError, NotEmptyError,
                                  SessionExpiredError, SetData, Stat)
from protocol.keeper.memory import MemoryEnsemble, MemoryKeeper

__all__ = ["BadVersionError", "Check", "Create", "Delete", "Keeper", "KeeperError", "KeeperUnavailableError", "MemoryEnsemble", "MemoryKeeper",
           "MultiError", "NoAuthError", "NodeExistsError", "NoNodeError", "NotEmptyError", "SessionExpiredError", "SetData", "Stat"]
