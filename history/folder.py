"""Find each table of a history folder and check its shape before any Spark job runs: one file
(or Spark folder) per table in one format, every required column there with a usable type, and
Parquet footers that can be read. Costs no JVM: Parquet metadata is read with pyarrow, JSON lines
by their first line.

What this refuses (BadInput, exit 2), each naming the file: a folder that is not there, a table
with no file, a table in two formats (an old run's `.parquet` beside a new run's `.jsonl` must not
be checked as one of them), a Parquet file whose footer cannot be read (truncated), a missing
required column, a column of the wrong type, and a first JSON line that is not a JSON object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.cli_args import BadInput, EnvironmentFailure
from history.schema import KIND_NAMES, TABLES, Table

FORMATS = (("parquet", "parquet"), ("jsonl", "json"), ("json", "json"))  # extension -> Spark reader
# Spark types a required column may have in a file (read as is, then cast to the first one).
COMPATIBLE = {"long": ("bigint", "int", "smallint", "tinyint"), "string": ("string",),
              "strings": ("array<string>",)}


@dataclass
class TableSource:
    table: Table
    path: Path                   # the file or Spark folder
    fmt: str                     # "parquet" or "json"
    files: list[Path]            # the data files Spark will read
    rows: int                    # exact for Parquet (footers), an estimate for JSON lines
    read_types: dict[str, str]   # column -> Spark type to read it with (the file's own type)


def _local(folder: str) -> Path:
    if "://" in folder and not folder.startswith("file://"):
        raise BadInput(f"{folder}: only a folder on a local or shared file system can be checked "
                       f"(the driver lists it and reads Parquet footers)")
    return Path(folder.removeprefix("file://").removeprefix("file:"))


def data_files(path: Path) -> list[Path]:
    """What Spark reads: the file itself, or a folder's files not starting with '_' or '.'."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file()
                  and not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts))


def _arrow_to_spark(t) -> str:
    import pyarrow as pa
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "int"
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int8(t):
        return "tinyint"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{_arrow_to_spark(t.value_type)}>"
    return str(t)


def _probe_parquet(table: Table, path: Path, files: list[Path]) -> tuple[int, dict[str, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # shipped to a cluster whose Python lacks it
        raise EnvironmentFailure("pyarrow is needed to read Parquet footers: pip install pyarrow") from e
    rows, types, first = 0, {}, {}
    for f in files:
        try:
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError for a truncated or foreign file
            raise BadInput(f"{f}: not a readable Parquet file ({str(e).splitlines()[0]})") from e
        rows += meta.num_rows
        twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
        if twice:   # which of the two a reader takes is the reader's choice: neither is the column
            raise BadInput(f"{f}: column(s) {', '.join(twice)} appear more than once")
        missing = [c for c in table.required if c not in schema.names]
        if missing:
            raise BadInput(f"{f}: no column(s) {', '.join(missing)} (table {table.name} needs "
                           f"{', '.join(table.required)})")
        for c in table.columns:
            if c.optional and c.name not in schema.names:
                continue   # read as null
            t = _arrow_to_spark(schema.field(c.name).type)
            if t not in COMPATIBLE[c.kind]:
                raise BadInput(f"{f}: column {c.name} is {t}, expected {KIND_NAMES[c.kind]}")
            if c.name in types and types[c.name] != t:
                raise BadInput(f"{path}: column {c.name} is {types[c.name]} in {first[c.name]} "
                               f"and {t} in {f.name}")
            types[c.name], first[c.name] = t, f.name
    return rows, types


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: list) -> dict:
    """A JSON object whose key is given twice: json.loads would keep the last, silently."""
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise _DuplicateKey(k)
        seen.add(k)
    return dict(pairs)


def _probe_json(table: Table, files: list[Path]) -> int:
    """Checks the first line names every required column; estimates rows from the bytes."""
    size = sum(f.stat().st_size for f in files)
    for f in files:
        with f.open("rb") as fh:
            for n, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
                except _DuplicateKey as e:
                    raise BadInput(f"{f} line {n}: column {e} appears more than once") from None
                except ValueError:
                    raise BadInput(f"{f} line {n}: not valid JSON: {raw[:80].decode('utf-8', 'replace')!r}") from None
                if not isinstance(obj, dict):
                    raise BadInput(f"{f} line {n}: not a JSON object: {raw[:80].decode('utf-8', 'replace')!r}")
                missing = [c for c in table.required if c not in obj]
                if missing:
                    raise BadInput(f"{f} line {n}: no column(s) {', '.join(missing)} (table {table.name} "
                                   f"needs {', '.join(table.required)})")
                return max(1, size // len(raw))
    return 0


def find_tables(folder: str) -> dict[str, TableSource]:
    """Every table's source, or BadInput naming what is wrong (the first problem of each table)."""
    root = _local(folder)
    if not root.is_dir():
        raise BadInput(f"{folder}: no such history folder")
    found, problems = {}, []
    for name, table in TABLES.items():
        candidates = [(root / f"{name}.{ext}", fmt) for ext, fmt in FORMATS if (root / f"{name}.{ext}").exists()]
        if not candidates and table.optional:
            continue
        if not candidates:
            problems.append(f"{root}: no {name}.parquet or {name}.jsonl")
            continue
        if len(candidates) > 1:
            problems.append(f"{root}: table {name} is there in two formats "
                            f"({' and '.join(p.name for p, _ in candidates)}); keep the one of the run to check")
            continue
        path, fmt = candidates[0]
        files = data_files(path)
        try:
            if fmt == "parquet":
                rows, types = _probe_parquet(table, path, files) if files else (0, {})
            else:
                rows, types = _probe_json(table, files), {}
        except BadInput as e:
            problems.append(str(e))
            continue
        read_types = {c.name: types.get(c.name, COMPATIBLE[c.kind][0]) for c in table.columns}
        found[name] = TableSource(table, path, fmt, files, rows, read_types)
    if problems:
        raise BadInput("; ".join(problems))
    # A history that assigned nothing still shows something when its servers logged errors or
    # refused INSERTs (every first INSERT raised, or was refused): judged, not refused.
    shows = any(n in found and found[n].rows for n in ("errors", "insert_refusals"))
    for name, src in found.items():
        if src.table.must_have_rows and src.rows == 0 and not (name == "assignments" and shows):
            raise BadInput(f"{src.path}: {src.table.must_have_rows}")
    return found
