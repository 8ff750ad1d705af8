"""The checker's exit-code contract and the two failures that are not verdicts.

    0  every invariant holds        1  a violation was found
    2  bad input or usage           3  the environment failed (Java, Spark, the cluster)

A verdict (0 or 1) is only ever given on input that was read completely and passed every
check of its shape: a tool that proves no row was lost must not prove it of the wrong data.
"""

from __future__ import annotations

import re

HOLDS, VIOLATED, BAD_INPUT, ENVIRONMENT = 0, 1, 2, 3


class BadInput(Exception):
    """The history (or the command line) cannot be checked; the message names the file and, where
    known, the line or column."""

    exit_code = BAD_INPUT


class EnvironmentFailure(Exception):
    """Java, Spark or the cluster failed; nothing is known about the history."""

    exit_code = ENVIRONMENT


_READ_ERROR = re.compile(r"(?:Encountered error while reading file|Could not read footer for file"
                         r"|is not a Parquet file|Error reading file|FileNotFoundException)[: ]*(\S*)")


def first_line(text: str) -> str:
    """The first non-empty line of an exception's text, without Java's class prefix noise."""
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return type(text).__name__


def unreadable_file(java_text: str) -> str | None:
    """The file a Spark job failed to read, when its error says so (a truncated Parquet file whose
    footer was readable, a file deleted while the job ran)."""
    m = _READ_ERROR.search(java_text)
    if not m:
        return None
    path = m.group(1).rstrip(".,;")
    return path.removeprefix("file://").removeprefix("file:") or "a history file"


def root_cause(java_text: str) -> str:
    """The message of the innermost 'Caused by:' of a Java stack trace (the one that names the
    problem), without the exception's class name."""
    causes = re.findall(r"Caused by: (.+)", java_text)
    line = (causes[-1] if causes else first_line(java_text)).strip()
    return re.sub(r"^([\w$]+\.)*[\w$]*(Exception|Error)(: )?", "", line).strip()[:300] or line[:300]
