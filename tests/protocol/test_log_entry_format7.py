"""Log entries in ClickHouse master's format 7 (issue 36): what writeText writes and readText
reads (ReplicatedMergeTreeLogEntry.cpp; offsets in protocol/log_entry.py). The texts below are
composed, one per shape the writer has: part moves' entries with their log_entry_id, DROP_PART
against DROP_RANGE, a merge and a mutation with every optional line, today's INSERT entry."""

import pytest

from protocol.log_entry import (ALTER_METADATA, ATTACH_PART, CLONE_PART_FROM_SHARD, DROP_PART, DROP_RANGE, GET_PART,
                                MERGE_PARTS, MUTATE_PART, SYNC_PINNED_PART_UUIDS, BadLogEntry, LogEntry, replace)

TASK = "/clickhouse/tables/s2/events/part_moves_shard/task-0000000003"
UUID = "3b0e7c52-0f4d-4a8e-9c1b-5d2f6a7e8b90"

# Part moves' entries (SYNC_SOURCE, DESTINATION_FETCH, DESTINATION_ATTACH, SOURCE_DROP): format 7,
# the barrier path as log_entry_id.
SYNC = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
        f"log_entry_id: {TASK}/log_SYNC_SOURCE\nsync_pinned_part_uuids\n\n")
CLONE = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
         f"log_entry_id: {TASK}/log_DESTINATION_FETCH\nclone_part_from_shard\n202503_4_4_0\n"
         "source_shard: /clickhouse/tables/s1/events\n")
ATTACH = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: \nblock_id: \n"
          f"log_entry_id: {TASK}/log_DESTINATION_ATTACH\nattach\n202503_9_9_0\n"
          "part_checksum: FEDCBA9876543210FEDCBA9876543210\n")
DROP_ONE = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
            f"log_entry_id: {TASK}/log_SOURCE_DROP\ndrop\n202503_4_4_0\n")
# The layout of other types with an id: master stamps them with none, but would write them so.
DROP_ALL = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
            "log_entry_id: made-up-1\ndrop\n202503_0_8_999999999\n")
DETACH_MUTATED = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
                  "log_entry_id: made-up-2\ndetach\n202503_0_8_999999999_4\n")
MERGE_ALL_LINES = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
                   "log_entry_id: made-up-3\nmerge\n202503_1_1_0\n202503_2_2_0\ninto\n202503_1_2_1\n"
                   f"deduplicate: 1\nmerge_type: 3\ninto_uuid: {UUID}\ndeduplicate_by_columns: 'user_id','ev\\'t'\n"
                   "cleanup: 1\napply_patches: 2\npatch-1f-202503_3_3_0\npatch-1f-202503_5_5_0\n")
MUTATE_FOR_ALTER = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
                    f"log_entry_id: made-up-4\nmutate\n202503_1_2_1\nto\n202503_1_2_1_6\nto_uuid\n{UUID}\n"
                    "alter_version\n5\n")
# An INSERT as master writes it: format 4, both dedup ids of the block, a compact part, quorum 2.
INSERT_TODAY = ("format version: 4\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\n"
                "block_id: 202503_7777_8888,202503_9999_1234\nget\n202503_6_6_0\npart_type: Compact\nquorum: 2\n")
GET_WITH_ID = ("format version: 7\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: 202503_7777_8888\n"
               "log_entry_id: made-up-5\nget\n202503_6_6_0\n")

VECTORS = [
    pytest.param(SYNC, SYNC_PINNED_PART_UUIDS, dict(log_entry_id=f"{TASK}/log_SYNC_SOURCE", source_replica="r2"),
                 id="sync_pinned_part_uuids"),
    pytest.param(CLONE, CLONE_PART_FROM_SHARD, dict(new_part_name="202503_4_4_0",
                                                    source_shard="/clickhouse/tables/s1/events"), id="clone"),
    pytest.param(ATTACH, ATTACH_PART, dict(new_part_name="202503_9_9_0", source_replica="",
                                           part_checksum="FEDCBA9876543210FEDCBA9876543210"), id="attach"),
    pytest.param(DROP_ONE, DROP_PART, dict(new_part_name="202503_4_4_0", detach=False, partition="202503"),
                 id="drop_part"),
    pytest.param(DROP_ALL, DROP_RANGE, dict(new_part_name="202503_0_8_999999999", detach=False), id="drop_range"),
    pytest.param(DETACH_MUTATED, DROP_RANGE, dict(new_part_name="202503_0_8_999999999_4", detach=True),
                 id="detach_range_with_mutation"),
    pytest.param(MERGE_ALL_LINES, MERGE_PARTS,
                 dict(source_parts=("202503_1_1_0", "202503_2_2_0"), new_part_name="202503_1_2_1", deduplicate=True,
                      merge_type=3, new_part_uuid=UUID, deduplicate_by_columns=("user_id", "ev't"), cleanup=True,
                      patch_parts=("patch-1f-202503_3_3_0", "patch-1f-202503_5_5_0")), id="merge_every_line"),
    pytest.param(MUTATE_FOR_ALTER, MUTATE_PART, dict(source_parts=("202503_1_2_1",), new_part_name="202503_1_2_1_6",
                                                     new_part_uuid=UUID, alter_version=5), id="mutate_for_alter"),
    pytest.param(INSERT_TODAY, GET_PART, dict(block_id="202503_7777_8888,202503_9999_1234", part_type="Compact",
                                              quorum=2, log_entry_id="", format_version=4), id="insert_today"),
    pytest.param(GET_WITH_ID, GET_PART, dict(block_id="202503_7777_8888", log_entry_id="made-up-5", format_version=7),
                 id="get_with_id"),
]


@pytest.mark.parametrize("text, kind, fields", VECTORS)
def test_a_master_entry_reads_with_its_fields_and_writes_back_byte_for_byte(text, kind, fields):
    e = LogEntry.parse(text.encode())
    assert e.type == kind
    assert {k: getattr(e, k) for k in fields} == fields
    assert e.format() == text.encode()


def test_the_level_alone_tells_a_drop_of_one_part_from_a_drop_of_a_range():
    one, whole = LogEntry.parse(DROP_ONE), LogEntry.parse(DROP_ALL)
    assert (one.type, whole.type) == (DROP_PART, DROP_RANGE)
    # written alike, "drop" and the name: no type in the text
    assert (one.format(), whole.format()) == (DROP_ONE.encode(), DROP_ALL.encode())
    assert b"\ndrop\n202503_4_4_0\n" in one.format() and b"\ndrop\n202503_0_8_999999999\n" in whole.format()


@pytest.mark.parametrize("text, version", [pytest.param(MERGE_ALL_LINES, 6, id="dedup_by_columns_6"),
                                           pytest.param(MUTATE_FOR_ALTER, 5, id="uuid_5"),
                                           pytest.param(GET_WITH_ID, 4, id="plain_4")])
def test_without_a_log_entry_id_the_version_written_is_the_least_the_fields_need(text, version):
    e = LogEntry.parse(text)
    head, rest = text.split("log_entry_id: ", 1)
    want = head.replace("format version: 7", f"format version: {version}") + rest.split("\n", 1)[1]
    bare = replace(e, log_entry_id="")
    assert bare == e   # the id is the text's, not part of what the entry asks
    assert bare.format() == want.encode()
    assert LogEntry.parse(want).format() == want.encode()


def test_merge_lines_in_any_order_read_the_same_and_write_back_in_the_writers_order():
    shuffled = MERGE_ALL_LINES.replace(
        f"merge_type: 3\ninto_uuid: {UUID}\ndeduplicate_by_columns: 'user_id','ev\\'t'\ncleanup: 1\n",
        f"cleanup: 1\ndeduplicate_by_columns: 'user_id','ev\\'t'\ninto_uuid: {UUID}\nmerge_type: 3\n")
    assert shuffled != MERGE_ALL_LINES
    assert LogEntry.parse(shuffled) == LogEntry.parse(MERGE_ALL_LINES)
    assert LogEntry.parse(shuffled).format() == MERGE_ALL_LINES.encode()


def test_defaults_written_out_read_as_absent_and_are_not_written_back():
    """part_type Wide, merge_type 1 (Regular), the Nil UUID: what ClickHouse holds when the line is
    missing, so it writes nothing for them."""
    wide = INSERT_TODAY.replace("part_type: Compact", "part_type: Wide")
    assert LogEntry.parse(wide).part_type == ""
    assert LogEntry.parse(wide).format() == INSERT_TODAY.replace("part_type: Compact\n", "").encode()
    plain = ("format version: 4\ncreate_time: 2025-03-14 09:26:53\nsource replica: r2\nblock_id: \n"
             "merge\n202503_1_1_0\n202503_2_2_0\ninto\n202503_1_2_1\ndeduplicate: 0\n")
    spelled = plain.replace("deduplicate: 0\n", "deduplicate: 0\nmerge_type: 1\n"
                                                "into_uuid: 00000000-0000-0000-0000-000000000000\n")
    assert LogEntry.parse(spelled) == LogEntry.parse(plain)
    assert LogEntry.parse(spelled).format() == plain.encode()


def test_storage_type_reads_between_part_type_and_quorum():
    text = INSERT_TODAY.replace("quorum: 2\n", "storage_type: Packed\nquorum: 2\n")
    e = LogEntry.parse(text)
    assert (e.part_type, e.storage_type, e.quorum) == ("Compact", "Packed", 2)
    assert e.format() == text.encode()


def test_an_alter_with_a_non_ascii_comment_is_sized_in_bytes_and_round_trips():
    columns = "columns format version: 1\n1 columns:\n`city` String COMMENT 'Zürich, Genève'\n"
    e = LogEntry(ALTER_METADATA, alter_version=2, columns_str=columns, metadata_str="metadata format version: 1\n",
                 source_replica="r2", create_time=1_741_944_413)
    text = e.format()
    assert len(columns.encode()) == len(columns) + 2
    assert f"columns_str_size:\n{len(columns.encode())}\n{columns}\n".encode() in text
    assert LogEntry.parse(text) == e and LogEntry.parse(text).format() == text
    by_characters = text.replace(f"columns_str_size:\n{len(columns.encode())}\n".encode(),
                                 f"columns_str_size:\n{len(columns)}\n".encode())
    with pytest.raises(BadLogEntry, match="metadata_str_size"):   # the columns end 2 bytes early
        LogEntry.parse(by_characters)


@pytest.mark.parametrize("text, message", [
    pytest.param(INSERT_TODAY.replace("format version: 4", "format version: 8"), "unknown format version 8",
                 id="version_8"),
    pytest.param(INSERT_TODAY.replace("format version: 4", "format version: 0"), "unknown format version 0",
                 id="version_0"),
    pytest.param(GET_WITH_ID.replace("log_entry_id: made-up-5\n", ""), "log_entry_id", id="v7_without_log_entry_id"),
    pytest.param(GET_WITH_ID.replace("format version: 7", "format version: 6"), "unknown entry kind",
                 id="v6_with_log_entry_id"),
    pytest.param(INSERT_TODAY + "replica_to_fetch: r3\n", "after the entry", id="unknown_trailing_text"),
    pytest.param(GET_WITH_ID[:-1], "expected '\\\\n'", id="no_final_newline"),
    pytest.param(DROP_ONE + "\n", "quorum", id="extra_blank_line"),
    pytest.param(INSERT_TODAY.replace("part_type: Compact\n", "storage_type: Packed\npart_type: Compact\n"), "quorum",
                 id="storage_type_before_part_type"),
    pytest.param(MUTATE_FOR_ALTER.replace(UUID, "not-a-uuid"), "to_uuid", id="bad_uuid"),
    pytest.param(DROP_ONE.replace("202503_4_4_0", "202503_4_4"), "malformed part name",
                 id="drop_of_a_name_that_is_no_part"),
])
def test_text_a_master_reader_refuses_is_refused(text, message):
    with pytest.raises(BadLogEntry, match=message):
        LogEntry.parse(text)
