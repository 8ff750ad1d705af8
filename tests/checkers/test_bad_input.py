"""No verdict on bad input: each kind of bad history is refused with exit 2 and one line on stderr
that names the file (and the line or column), never a traceback, and the input is left as it was.
The environment failing is exit 3, with one line too.

Cases a fresh JVM matters for (found before Spark starts, or where Java's output could leak) run
the command line as a subprocess; the others call `main` in this process with the shared session.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.ports import free_port
from lab.synth import generate
from pyspark_jobs.spark_check import main

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
TABLES = ("run", "inserts", "queries", "query_reads", "query_rows", "parts", "assignments")


@pytest.fixture(scope="module")
def bases(spark, tmp_path_factory):
    """A correct synthetic history as single Parquet files (as history/record.py writes them)
    and as JSON lines."""
    spark_dir = tmp_path_factory.mktemp("spark") / "h"
    generate(spark, spark_dir, 300)
    pq_dir, jl_dir = tmp_path_factory.mktemp("parquet"), tmp_path_factory.mktemp("jsonl")
    for t in TABLES:
        table = pq.read_table(spark_dir / f"{t}.parquet")
        pq.write_table(table, pq_dir / f"{t}.parquet")
        (jl_dir / f"{t}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    return {"parquet": pq_dir, "jsonl": jl_dir}


def jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def edit_line(path: Path, n: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[n - 1] = text
    path.write_text("\n".join(lines) + "\n")


def set_field(path: Path, n: int, **values) -> None:
    rows = jsonl_rows(path)
    rows[n - 1].update(values)
    write_jsonl(path, rows)


def rewrite_parquet(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def corrupt_first_page(path: Path) -> None:
    """Garbage over the first page header: the footer still reads, the data does not."""
    data = bytearray(path.read_bytes())
    data[4:68] = b"\xff" * 64
    path.write_bytes(bytes(data))


def empty_every_table(folder: Path) -> None:
    for t in TABLES:
        (folder / f"{t}.jsonl").write_text("")


def no_parts(folder: Path) -> None:
    rewrite_parquet(folder / "parts.parquet", lambda t: t.slice(0, 0))


def no_assignments(folder: Path) -> None:
    rewrite_parquet(folder / "assignments.parquet", lambda t: t.slice(0, 0))


def nothing_acknowledged(folder: Path) -> None:
    write_jsonl(folder / "inserts.jsonl", [{**r, "status": "failed"} for r in jsonl_rows(folder / "inserts.jsonl")])


def two_runs(folder: Path) -> None:
    rows = jsonl_rows(folder / "run.jsonl")
    write_jsonl(folder / "run.jsonl", rows + [{**rows[0], "run_id": "another"}])


def late_parts(folder: Path) -> None:
    rows = jsonl_rows(folder / "parts.jsonl")
    write_jsonl(folder / "parts.jsonl", rows + [{**rows[0], "snapshot_step": rows[0]["snapshot_step"] + 5}])


def new_run_beside_old(folder: Path) -> None:
    """A new user's folder: the old run's inserts.parquet, and the new run's inserts.jsonl."""
    write_jsonl(folder / "inserts.jsonl", pq.read_table(folder / "inserts.parquet").to_pylist()[:-5])


def null_row_id(folder: Path) -> None:
    def change(t):
        ids = t.column("row_id").to_pylist()
        ids[7] = None
        return t.set_column(t.schema.get_field_index("row_id"), "row_id", pa.array(ids, pa.int64()))
    rewrite_parquet(folder / "parts.parquet", change)


@dataclass
class Case:
    id: str
    base: str                              # "parquet" or "jsonl"
    make: Callable[[Path], None]           # the damage, done to a copy of the base
    names: list[str]                       # what the one line must say
    subprocess: bool = False               # run the command line in a fresh process
    args: tuple = ()
    long: bool = False                     # a JVM run found the damage (~17 s): make check, over make test's budget


CASES = [
    Case("no_such_folder", "parquet", lambda f: shutil.rmtree(f), ["no such folder"], subprocess=True),
    Case("a_table_missing", "parquet", lambda f: (f / "queries.parquet").unlink(), ["no queries.parquet"],
         subprocess=True),
    Case("two_formats_of_one_table", "parquet", new_run_beside_old,
         ["inserts.parquet and inserts.jsonl", "two formats"], subprocess=True),
    Case("truncated_parquet", "parquet", lambda f: truncate(f / "parts.parquet"),
         ["parts.parquet", "not a readable Parquet file"], subprocess=True),
    Case("unreadable_parquet_page", "parquet", lambda f: corrupt_first_page(f / "inserts.parquet"),
         ["inserts.parquet", "cannot be read"], subprocess=True, long=True),
    Case("missing_column", "parquet",
         lambda f: rewrite_parquet(f / "inserts.parquet", lambda t: t.drop_columns(["status"])),
         ["inserts.parquet", "no column(s) status"], subprocess=True),
    # a column given twice (issue 41): which one a reader takes is its choice; neither is the column
    Case("duplicate_column_parquet", "parquet",
         lambda f: rewrite_parquet(f / "inserts.parquet", lambda t: t.append_column("status", t.column("status"))),
         ["inserts.parquet", "column(s) status appear more than once"], subprocess=True),
    Case("duplicate_key_jsonl", "jsonl",
         lambda f: edit_line(f / "inserts.jsonl", 1, (f / "inserts.jsonl").read_text().splitlines()[0][:-1]
                             + ', "status": "ok"}'),
         ["inserts.jsonl line 1", "column status appears more than once"], subprocess=True),
    Case("wrong_type_parquet", "parquet",
         lambda f: rewrite_parquet(f / "run.parquet", lambda t: t.set_column(
             t.schema.get_field_index("replication_factor"), "replication_factor", pa.array(["two"]))),
         ["run.parquet", "column replication_factor is string, expected an integer"], subprocess=True),
    Case("no_final_snapshot", "parquet", no_assignments, ["assignments.parquet", "no final snapshot"], subprocess=True),
    Case("every_table_empty", "jsonl", empty_every_table, ["run.jsonl", "no run row"], subprocess=True),
    Case("missing_column_jsonl", "jsonl",
         lambda f: write_jsonl(f / "query_rows.jsonl", [{k: v for k, v in r.items() if k != "row_id"}
                                                        for r in jsonl_rows(f / "query_rows.jsonl")]),
         ["query_rows.jsonl line 1", "no column(s) row_id"], subprocess=True),
    Case("malformed_jsonl_line", "jsonl", lambda f: edit_line(f / "inserts.jsonl", 117, '{"insert_id": "b11/2024'),
         ["inserts.jsonl line 117", "not valid JSON"], subprocess=True, long=True),
    Case("unknown_status", "jsonl", lambda f: set_field(f / "inserts.jsonl", 42, status="OK"),
         ["inserts.jsonl line 42", "status is not one of ok, failed, unknown", "'OK'"]),
    Case("non_numeric_row_id", "jsonl", lambda f: set_field(f / "parts.jsonl", 9, row_id="r9"),
         ["parts.jsonl line 9", 'column row_id is "r9", expected an integer']),
    Case("replication_factor_two", "jsonl", lambda f: set_field(f / "run.jsonl", 1, replication_factor="two"),
         ["run.jsonl line 1", 'column replication_factor is "two", expected an integer']),
    Case("a_json_array_line", "jsonl", lambda f: edit_line(f / "query_rows.jsonl", 3, "[1, 2]"),
         ["query_rows.jsonl line 3", "not a JSON object"]),
    Case("null_row_id", "parquet", null_row_id, ["parts.parquet", "no row_id (1 rows)"]),
    Case("nothing_acknowledged", "jsonl", nothing_acknowledged, ["inserts.jsonl", "no insert was acknowledged"]),
    Case("two_run_rows", "jsonl", two_runs, ["run.jsonl", "2 run rows"]),
    Case("parts_after_the_last_assignment", "jsonl", late_parts, ["parts.jsonl", "after the last assignment snapshot"]),
    # an optional table, once there, is held to its columns like the others
    Case("drops_without_drop_step", "jsonl",
         lambda f: write_jsonl(f / "drops.jsonl", [{"partition_id": r["partition_id"], "row_id": r["row_id"]}
                                                   for r in jsonl_rows(f / "inserts.jsonl")[:3]]),
         ["drops.jsonl line 1", "no column(s) drop_step"]),
    Case("migration_without_state", "jsonl",
         lambda f: write_jsonl(f / "migrations.jsonl", [
             {"snapshot_step": 1, "partition_id": "202401-1", "state": "clone", "src": "r1", "dst": "r2"},
             {"snapshot_step": 2, "partition_id": "202401-1", "state": None, "src": "r1", "dst": "r2"}]),
         ["migrations.jsonl line 2", "no state"]),
    Case("usage_without_input", "parquet", lambda f: None, ["the following arguments are required: --input"],
         subprocess=True, args=("--no-input",)),
]


def fingerprint(folder: Path) -> dict:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_cli(args: list[str], tmp_path: Path, in_process: bool, capsys) -> tuple[int, str]:
    if in_process:
        capsys.readouterr()
        code = main(args)
        return code, capsys.readouterr().err
    r = subprocess.run([sys.executable, "-m", "pyspark_jobs.spark_check", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    return r.returncode, r.stderr


def assert_one_clean_line(err: str, names: list[str], log: bool = True) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err[-3000:]
    line = lines[0]
    for forbidden in ("Traceback", "\tat ", "Caused by", "py4j"):
        assert forbidden not in line, line
    for name in names:
        assert name in line, line
    assert ("(log: " in line) == log
    return line


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.long) if c.long else c for c in CASES],
                         ids=[c.id for c in CASES])
def test_bad_input_is_refused_with_exit_2_and_one_line(case, bases, tmp_path, capsys):
    folder = tmp_path / "history"
    shutil.copytree(bases[case.base], folder)
    case.make(folder)
    before = fingerprint(folder)
    args = ["--log", str(tmp_path / "check.log")]
    args = [*args, "--sample", "3"] if case.args == ("--no-input",) else [*args, "--input", str(folder)]
    code, err = run_cli(args, tmp_path, not case.subprocess, capsys)
    assert code == 2, err[-3000:]
    # refused while the arguments are parsed (no --input, a folder that is not there): before any log
    assert_one_clean_line(err, case.names, log=case.id not in ("usage_without_input", "no_such_folder"))
    assert fingerprint(folder) == before  # nothing written into, or removed from, the input


def test_unknown_extra_columns_and_narrower_integers_are_accepted(bases, tmp_path, capsys):
    """Other engineers add columns (a query read's log position, ...): they are never read. An
    int32 column where an integer is expected is widened, not refused."""
    folder = tmp_path / "history"
    shutil.copytree(bases["parquet"], folder)
    rewrite_parquet(folder / "query_reads.parquet",
                    lambda t: t.append_column("log_position", pa.array(range(t.num_rows), pa.int64())))
    rewrite_parquet(folder / "inserts.parquet", lambda t: t.append_column("client", pa.array(["c"] * t.num_rows)))
    rewrite_parquet(folder / "parts.parquet", lambda t: t.set_column(
        t.schema.get_field_index("row_id"), "row_id", t.column("row_id").cast(pa.int32())))
    jl = tmp_path / "jsonl"
    shutil.copytree(bases["jsonl"], jl)
    write_jsonl(jl / "queries.jsonl", [{**r, "read_at_log_position": 7} for r in jsonl_rows(jl / "queries.jsonl")])
    for f in (folder, jl):
        assert main(["--input", str(f), "--log", str(tmp_path / "log")]) == 0, capsys.readouterr()
    assert "all invariants hold" in capsys.readouterr().out


def test_replicas_that_hold_nothing_are_a_loss_not_bad_input(bases, tmp_path, capsys):
    """An empty `parts` table at the final snapshot is what a run that lost every row writes: the
    verdict is OwnersCompleteInv (exit 1), never "bad input" (exit 2) and never a pass."""
    folder = tmp_path / "history"
    shutil.copytree(bases["parquet"], folder)
    no_parts(folder)
    assert main(["--input", str(folder), "--log", str(tmp_path / "log")]) == 1
    assert "OwnersCompleteInv" in capsys.readouterr().out


def test_late_parts_beside_logged_errors_are_judged_not_refused(bases, tmp_path, capsys):
    """Parts snapshots after the last assignment snapshot are bad input (the case above), unless the
    run logged errors: a step that corrupted every assignment znode leaves its later snapshots with
    no assignment row (Cluster.assignment_rows logs each and leaves it out). The history is judged
    on its last snapshot with assignments, and the errors are NoLogicalErrorsInv's violations (exit
    1): so a mutant of _write whose assignments could not be read was refused as bad input, not judged."""
    folder = tmp_path / "history"
    shutil.copytree(bases["jsonl"], folder)
    late_parts(folder)
    write_jsonl(folder / "errors.jsonl", [{"step": 7, "replica": "", "action": "read assignment",
                                          "error": "ValueError", "message": "assignment znode is not JSON"}])
    assert main(["--input", str(folder), "--log", str(tmp_path / "log")]) == 1
    out = capsys.readouterr().out
    assert "NoLogicalErrorsInv" in out and "bad input" not in out


def test_java_that_cannot_start_is_exit_3(bases, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "JAVA_HOME": str(tmp_path / "no-jdk")}
    r = subprocess.run([sys.executable, "-m", "pyspark_jobs.spark_check", "--input", str(bases["parquet"]),
                        "--log", str(tmp_path / "log")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    line = assert_one_clean_line(r.stderr, ["environment", "Spark could not start", str(tmp_path / "log")])
    assert "no-jdk" in line or "java" in line.lower()


def test_an_unreachable_cluster_is_exit_3(bases, tmp_path):
    master = f"spark://127.0.0.1:{free_port()}"  # nothing listens there
    r = subprocess.run([sys.executable, "-m", "pyspark_jobs.spark_check", "--input", str(bases["parquet"]),
                        "--master", master, "--log", str(tmp_path / "log")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert_one_clean_line(r.stderr, ["environment", "unreachable", master])
