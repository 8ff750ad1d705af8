"""The drivers of PR #102244's design: its cluster and its run (`python -m reference run --design pr102244`)."""
