"""The history of a run: the one format every driver writes and every checker reads."""
