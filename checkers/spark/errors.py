"""A failed Spark job's Java text, as the one line the exit-code contract asks for: the file it
could not read, the innermost cause. The contract itself (codes, BadInput, EnvironmentFailure) is
every command's, harness/cli_args.py.
"""

from __future__ import annotations

import re

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
