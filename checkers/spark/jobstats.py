"""How many Spark jobs and stages a piece of work ran, from Spark's status tracker (the job group
API): the figures the benchmark records beside the seconds."""

from __future__ import annotations

import itertools
from contextlib import contextmanager

_groups = itertools.count()


class JobStats:
    def __init__(self):
        self.jobs = self.stages = self.stages_run = 0

    def as_dict(self) -> dict:
        return {"jobs": self.jobs, "stages": self.stages, "stages_run": self.stages_run}


@contextmanager
def counted(spark, label: str):
    """Run the body's Spark work in its own job group; the yielded JobStats is filled at the end.
    `stages` counts every stage of those jobs; `stages_run` leaves out the ones Spark skipped
    because their output already existed."""
    sc = spark.sparkContext
    group = f"{label}-{next(_groups)}"
    sc.setJobGroup(group, label)
    stats = JobStats()
    try:
        yield stats
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        tracker = sc.statusTracker()
        jobs = tracker.getJobIdsForGroup(group)
        stages = set()
        for j in jobs:
            info = tracker.getJobInfo(j)
            stages |= set(info.stageIds) if info else set()
        stats.jobs, stats.stages = len(jobs), len(stages)
        stats.stages_run = sum(1 for s in stages if (i := tracker.getStageInfo(s)) and i.numCompletedTasks)
