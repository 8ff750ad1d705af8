"""What the fault suite (lab/faults.py) and the load sweep (lab/load_sweep.py) share as commands:
a Spark session for the third checker, started before anything else so that a missing Spark is
an environment error before any server starts; Ctrl-C and a kill from another shell turned into
KeyboardInterrupt so the `with` blocks stop the servers and unmount the disks; and their exit
codes (3 environment, 130 interrupted) with one line on stderr. Their tables go to a section of
BENCHMARKS.md of their own (`write_section`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class Stopped(Exception):
    """The suite ended without its cells: `code` is the exit code, the line already said."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def with_spark(app: str, body: Callable[[object], T], on_interrupt: str) -> T:
    """`body(spark)` with the servers' signals set up; raises Stopped(3) when Spark does not start
    or `body` fails for its environment (a server that would not start), Stopped(130) on Ctrl-C,
    after saying `on_interrupt` (what was cleaned up)."""
    try:
        from harness.spark import spark_session
        spark = spark_session(app)
    except Exception as e:  # noqa: BLE001 - any failure to start the JVM is the environment's
        print(f"error: Spark could not start: {e}", file=sys.stderr)
        raise Stopped(3) from e
    from harness.zookeeper import interrupt_on_ctrl_c_and_kill
    interrupt_on_ctrl_c_and_kill()   # SIGTERM too: the servers' `with` blocks stop them
    try:
        return body(spark)
    except KeyboardInterrupt:
        print(f"interrupted: {on_interrupt}", file=sys.stderr)
        raise Stopped(130) from None
    except Exception as e:   # a server that could not be started
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        raise Stopped(3) from e
    finally:
        spark.stop()


def command_line(prog: str, argv: list[str] | None) -> str:
    """The command as it was typed, for the table's "Produced by"."""
    return prog + f" {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip()


def write_section(markdown: str, section: str, body: str) -> None:
    """Replace `section` of the markdown file (lab.bench_rebalance.splice: the others kept)."""
    from lab.bench_rebalance import splice
    path = Path(markdown)
    path.write_text(splice(path.read_text() if path.exists() else "", section, body + "\n"))
