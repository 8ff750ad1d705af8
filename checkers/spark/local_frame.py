"""Small tables built on the driver as Spark inline tables (`VALUES`): a broadcast of one costs no
Spark job, where a frame from `createDataFrame` (an RDD) costs one at every use."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession


def literal(v) -> str:
    """Spark SQL text of a Python value: None, bool, int, str, a list, or a dict (a struct)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return f"{v}L"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, (list, tuple)):
        return f"array({', '.join(literal(x) for x in v)})"
    if isinstance(v, dict):
        return f"named_struct({', '.join(f'{literal(k)}, {literal(x)}' for k, x in v.items())})"
    raise TypeError(f"no SQL literal for {type(v).__name__} {v!r}")


def local_frame(spark: SparkSession, columns: list[tuple[str, str]], rows: list[tuple]) -> DataFrame:
    """A DataFrame of `rows` with `columns` [(name, Spark SQL type)], as an inline table."""
    select = ", ".join(f"CAST(c{i} AS {t}) AS `{name}`" for i, (name, t) in enumerate(columns))
    names = ", ".join(f"c{i}" for i in range(len(columns)))
    if not rows:  # VALUES needs a row: one of nulls, filtered out
        rows, where = [tuple(None for _ in columns)], " WHERE FALSE"
    else:
        where = ""
    values = ", ".join("(" + ", ".join(literal(v) for v in r) + ")" for r in rows)
    return spark.sql(f"SELECT {select} FROM VALUES {values} AS t({names}){where}")
