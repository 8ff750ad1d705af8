"""The Spark job's pieces: reading a history with explicit schemas, one pass of facts, the
invariants as DataFrames; pyspark_jobs/spark_check.py is the job."""
