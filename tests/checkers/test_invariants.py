"""The one statement of the history format (history/schema.py) and of the invariants
(checkers/invariants.py) fits its users: the writer writes every table the schema has, the readers
read a part of it, each invariant's SQL reads views both engines define, and the oracle judges the
same invariants."""

from checkers.invariants import INVARIANTS, VIEWS
from checkers.oracle import INVARIANTS as ORACLE
from history.record import History
from history.schema import HISTORY, TABLES, arrow_schema


def test_the_writer_writes_the_schema_and_the_readers_read_a_part_of_it():
    assert list(History().tables) == list(HISTORY)
    for name, table in TABLES.items():
        written = HISTORY[name].names
        assert [c for c in written if c in table.names] == table.names
        assert arrow_schema(name).names == written


def test_every_invariant_is_stated_once_and_reads_views_both_engines_define():
    from checkers.spark.checks import DESCRIPTIONS, Views
    assert set(INVARIANTS) == set(ORACLE) == set(DESCRIPTIONS)
    for inv in INVARIANTS.values():
        assert set(inv.tables) <= set(TABLES), inv.name
        assert set(inv.views) <= set(TABLES) | set(VIEWS), inv.name
        if inv.spark:   # the Spark job builds each view, or reads the table
            assert all(hasattr(Views, v) or v in TABLES for v in inv.views), inv.name
        else:
            assert inv.spark_note, inv.name
