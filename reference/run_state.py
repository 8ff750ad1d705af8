"""What `reference run --attach` needs of the run it carries on, beside the table in Keeper, the
parts on disk and the journaled history: the options the run was started with (the workload is
generated from them: an attach must make the same one), which replicas were running, and which
of the run's phases were done. Kept in the history's journal folder (`run.json`), rewritten
whole (a temporary file renamed over it) after each change, so a kill leaves the last one.

A phase marked done is skipped by the attach; one the kill cut short is done again, each written
so that doing it twice is doing it once (a block sent before is not sent again, a replica already
down is not crashed again, a REASSIGN Keeper already holds is not made again).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.cli_args import BadInput

# The options that shape a quiet run's course: stored at its start, taken back by an attach.
RUN_OPTIONS = ("replicas", "replication_factor", "buckets", "months", "blocks", "rows", "fault_rate", "add_replicas",
               "crash", "restart", "lose", "reassign", "rebalance", "max_concurrent", "per_source", "per_target",
               "query_rate", "queries", "bug", "seed", "history_format")
STATE = "run.json"


@dataclass
class RunState:
    folder: Path
    options: dict
    running: list[str]
    done: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, folder: Path, a: argparse.Namespace, running: list[str]) -> "RunState":
        state = cls(folder, {k: getattr(a, k) for k in RUN_OPTIONS}, sorted(running))
        state.save()
        return state

    @classmethod
    def load(cls, folder: Path) -> "RunState":
        path = folder / STATE
        try:
            obj = json.loads(path.read_text())
            return cls(folder, obj["options"], obj["running"], obj["done"])
        except FileNotFoundError:
            raise BadInput(f"--attach: {path} does not exist (no run journaled its history there: "
                           "give the --history folder of the run to carry on)") from None
        except (ValueError, KeyError, TypeError) as e:
            raise BadInput(f"--attach: {path} is not a run's state ({type(e).__name__}: {e})") from None

    def save(self) -> None:
        tmp = self.folder / f".{STATE}.tmp"
        tmp.write_text(json.dumps({"options": self.options, "running": self.running, "done": self.done}, indent=1))
        os.replace(tmp, self.folder / STATE)

    def is_done(self, phase: str) -> bool:
        return phase in self.done

    def mark(self, phase: str, running: list[str]) -> None:
        """`phase` is done, with `running` the replicas running after it."""
        self.done.append(phase)
        self.running = sorted(running)
        self.save()

    def apply(self, a: argparse.Namespace, defaults: dict) -> None:
        """The stored options into `a`. One given on the attach's command line (other than its
        default) that differs from the run's is refused: the attach makes the run's workload,
        not another."""
        for k, stored in self.options.items():
            given = getattr(a, k)
            if given != defaults.get(k) and given != stored:
                flag = "--" + k.replace("_", "-")
                raise BadInput(f"--attach carries on the run as it was started: {flag} {given} is not its "
                               f"{flag} {stored} ({self.folder / STATE}); leave {flag} out")
            setattr(a, k, stored)
