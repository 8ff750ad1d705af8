"""The checkers of a history: the Spark job (checkers/spark/, run by pyspark_jobs/spark_check.py),
and its small-data twins, the in-process oracle and DuckDB."""
