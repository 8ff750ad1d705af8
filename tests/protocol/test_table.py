import datetime as dt

import pytest

from protocol.table import EVENTS, BadPartitionId, Table, TableDefinitionError, check_partition_id


def test_rfc_example_key_gives_clickhouse_ids():
    row = {"date": dt.date(2024, 1, 15), "user_id": 21, "event": "click"}
    assert EVENTS.partition_id(row) == "202401-5"


@pytest.mark.parametrize("key, row, pid", [
    ("toYYYYMM(d)", {"d": "2023-12-31"}, "202312"),
    ("d", {"d": dt.date(2024, 2, 29)}, "20240229"),                # a bare Date is YYYYMMDD
    ("toDate(d)", {"d": dt.datetime(2024, 3, 1, 23, 59)}, "20240301"),
    ("intDiv(u, 1000)", {"u": 123456}, "123"),
    ("(u % 4, intDiv(u, 10))", {"u": 17}, "1-1"),
    ("tuple()", {"u": 1}, "all"),
    ("(u % 16)", {"u": 35}, "3"),
])
def test_supported_keys(key, row, pid):
    t = Table("t", (("d", "Date"), ("u", "UInt64"), ("s", "String")), key, ("u",))
    assert t.partition_id(row) == pid
    assert check_partition_id(pid) == pid


def test_split_by_partition_keeps_rows_in_order():
    rows = [{"date": "2024-01-01", "user_id": u, "event": "e"} for u in (1, 17, 2, 33)]
    split = EVENTS.split_by_partition(rows)
    assert split == {"202401-1": [rows[0], rows[1], rows[3]], "202401-2": [rows[2]]}


@pytest.mark.parametrize("key, message", [
    ("s", "not integral"),
    ("nope % 3", "unknown column"),
    ("lower(s)", "unsupported partition key"),
    ("u % 0", "divides by zero"),
    ("d % 7", "arithmetic on Date"),
])
def test_bad_keys_are_named(key, message):
    with pytest.raises(TableDefinitionError, match=message):
        Table("t", (("d", "Date"), ("u", "UInt64"), ("s", "String")), key, ("u",))


def test_bad_definitions_are_named():
    with pytest.raises(TableDefinitionError, match="unsupported type"):
        Table("t", (("x", "Float64"),), "x", ("x",))
    with pytest.raises(TableDefinitionError, match="ORDER BY uses unknown column"):
        Table("t", (("x", "UInt8"),), "x", ("y",))
    with pytest.raises(TableDefinitionError, match="row lacks partition key column"):
        EVENTS.partition_id({"user_id": 1})


@pytest.mark.parametrize("bad", ["202401_5", "", "abc", "202401-", "-", "all-1", None])
def test_malformed_partition_ids(bad):
    with pytest.raises(BadPartitionId, match="malformed partition id"):
        check_partition_id(bad)
