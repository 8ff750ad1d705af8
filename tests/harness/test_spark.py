import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_local_session_with_quiet_small_defaults(spark):
    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "8"
    df = spark.range(100_000).selectExpr("id % 16 AS bucket")
    counts = {r["bucket"]: r["count"] for r in df.groupBy("bucket").count().collect()}
    assert len(counts) == 16 and sum(counts.values()) == 100_000
