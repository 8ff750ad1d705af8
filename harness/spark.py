"""One way to get a SparkSession: local mode by default, any master by ``SPARK_MASTER``/``master=``.

Settings that matter on a 2-core, 24 GiB machine (see shared TOOLCHAIN facts): bind to loopback,
no UI, no console progress bars, few shuffle partitions, and a driver big enough for
tens of millions of rows. A cluster submission overrides all of them with ``--conf``.
"""

from __future__ import annotations

import os
from pathlib import Path

# One set of local defaults, for the tests' sessions and the Spark job's (checkers/spark/session.py).
LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "4g",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}

_LOG4J2 = Path(__file__).with_name("spark-log4j2.properties")


def spark_session(app_name: str = "selective-replication", master: str | None = None,
                  conf: dict[str, str] | None = None):
    """Return a (possibly shared) SparkSession; ``master`` beats ``SPARK_MASTER`` beats local[2]."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # otherwise Spark binds a non-loopback address
    from pyspark.sql import SparkSession  # imported late: pyspark is heavy and only Spark jobs need it

    master = master or os.environ.get("SPARK_MASTER") or "local[2]"
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(LOCAL_DEFAULTS) if master.startswith("local") else {}
    settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{_LOG4J2}"
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
