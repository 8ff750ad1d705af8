"""The history journaled as it is recorded (history/journal.py): what a kill leaves is read back
as the history up to it, a last line cut short dropped, an INSERT sent and never answered
recorded unknown, a snapshot cut short dropped whole."""

from __future__ import annotations

import pytest

from history.journal import BadJournal, load
from history.record import History
from history.schema import HISTORY


def _journaled(tmp_path) -> History:
    h = History()
    h.journal_to(tmp_path)
    return h


def test_every_row_recorded_is_on_disk_before_the_recorder_goes_on(tmp_path):
    h = _journaled(tmp_path)
    h.insert_sent("b1", 1, {"202401-0": [1, 2]}, {"202401-0": "202401-0_x"})
    h.insert("b1", "202401-0", [{"row_id": 1}, {"row_id": 2}], "ok", 1, 2)
    h.crash(3, "r2")
    # not closed: what a kill -9 leaves
    got = load(tmp_path, list(HISTORY))
    assert [r["row_id"] for r in got.tables["inserts"]] == [1, 2]
    assert got.tables["crashes"] == [{"step": 3, "replica": "r2"}]
    assert got.unanswered == [] and got.step == 4


def test_an_insert_sent_and_never_answered_is_unanswered_per_sub_block(tmp_path):
    h = _journaled(tmp_path)
    h.insert_sent("b1", 5, {"202401-0": [1], "202401-1": [2, 3]}, {})
    h.insert("b1", "202401-0", [{"row_id": 1}], "ok", 5, 6)   # killed between the two sub-blocks' rows
    got = load(tmp_path, list(HISTORY))
    assert got.unanswered == [{"block_id": "b1", "sent_step": 5, "subs": {"202401-1": [2, 3]}, "dedup_ids": {}}]


def test_a_last_line_cut_short_is_dropped_and_cut_off_the_file(tmp_path):
    h = _journaled(tmp_path)
    h.crash(1, "r1")
    h.journal.close()
    path = tmp_path / "crashes.jsonl"
    path.write_bytes(path.read_bytes() + b'{"step": 2, "repl')
    assert load(tmp_path, list(HISTORY)).tables["crashes"] == [{"step": 1, "replica": "r1"}]
    assert path.read_bytes().endswith(b'"r1"}\n')   # the next append starts its own line
    h2 = _journaled(tmp_path)
    h2.crash(3, "r3")
    assert [r["step"] for r in load(tmp_path, list(HISTORY)).tables["crashes"]] == [1, 3]


def test_a_bad_line_before_the_last_is_refused(tmp_path):
    (tmp_path / "crashes.jsonl").write_text('{"step": 1\n{"step": 2, "replica": "r"}\n')
    with pytest.raises(BadJournal, match="line 1"):
        load(tmp_path, list(HISTORY))


def test_a_file_that_is_no_table_of_the_history_is_refused(tmp_path):
    (tmp_path / "parts_old.jsonl").write_text("")
    with pytest.raises(BadJournal, match="parts_old"):
        load(tmp_path, list(HISTORY))


def test_a_snapshot_cut_short_before_its_assignments_is_dropped_whole(tmp_path):
    h = _journaled(tmp_path)
    h._add("parts", [{"snapshot_step": 7, "replica": "r1", "partition_id": "p", "part_name": "x", "row_id": 1}])
    h._add("assignments", [{"snapshot_step": 7, "partition_id": "p", "owners": ["r1"], "clone_target": None,
                            "leaving_replica": None}])
    h._add("parts", [{"snapshot_step": 9, "replica": "r1", "partition_id": "p", "part_name": "x", "row_id": 1}])
    got = load(tmp_path, list(HISTORY))
    assert [r["snapshot_step"] for r in got.tables["parts"]] == [7]
    assert got.step == 10   # the clock still goes on after the cut snapshot's step


def test_without_a_journal_nothing_is_written(tmp_path):
    h = History()
    h.insert_sent("b1", 1, {"p": [1]}, {})
    h.crash(1, "r1")
    assert list(tmp_path.iterdir()) == [] and h.tables["crashes"] == [{"step": 1, "replica": "r1"}]
