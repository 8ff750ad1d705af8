"""Generated INSERT workloads on the RFC's example table, with a row_id that identifies each row
for the history checker."""

from __future__ import annotations

import datetime as dt
import random

from protocol.table import Table

# The RFC's table, `PARTITION BY (toYYYYMM(date), user_id % 16)`, plus the row identity.
WORKLOAD = Table("events", (("date", "Date"), ("user_id", "UInt64"), ("row_id", "UInt64"), ("event", "String")),
                 "(toYYYYMM(date), user_id % 16)", ("date", "user_id"), replication_factor=2)


def blocks(rng: random.Random, n_blocks: int, rows_per_block: int, months: int, start: dt.date = dt.date(2024, 1, 1),
           users: int = 10_000, first_row_id: int = 0):
    """Yield (block_id, rows): dates over `months` months from `start`, users spread over the buckets."""
    row_id = first_row_id
    for b in range(n_blocks):
        rows = []
        for _ in range(rows_per_block):
            month = rng.randrange(months)
            y, m = divmod(start.month - 1 + month, 12)
            date = dt.date(start.year + y, m + 1, rng.randint(1, 28))
            rows.append({"date": date.isoformat(), "user_id": rng.randrange(users), "row_id": row_id,
                         "event": rng.choice(("view", "click", "buy"))})
            row_id += 1
        yield f"block-{first_row_id}-{b}", rows
