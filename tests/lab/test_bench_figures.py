"""The protocol properties behind `make bench`'s figures (counts, not timings): a SELECT makes
no Keeper request, and selective replication writes less to Keeper per block than plain."""

from lab.bench import insert_costs
from protocol.keeper import MemoryEnsemble


def test_select_is_keeper_free_and_selective_writes_less(tmp_path):
    plain = insert_costs(MemoryEnsemble().connect, tmp_path, 6, "plain")
    selective = insert_costs(MemoryEnsemble().connect, tmp_path, 6, "selective")
    assert selective["select"]["requests"] == 0 and plain["select"]["requests"] == 0
    # Existing partition: the same two requests as plain (the block-number lock's multi, the
    # commit's multi), plus the assignment Check in each of them (F4).
    assert selective["existing_partition"]["insert"]["requests"] == plain["existing_partition"]["insert"]["requests"]
    assert selective["existing_partition"]["insert"]["entries_in_multi"] == \
        plain["existing_partition"]["insert"]["entries_in_multi"] + 2
    # Allocation costs requests on the first INSERT only.
    assert selective["new_partition"]["insert"]["requests"] > selective["existing_partition"]["insert"]["requests"]
    # Replication: 4 non-owners only advance log_pointer instead of queueing and fetching.
    assert selective["existing_partition"]["until_settled"]["entries_in_multi"] < \
        plain["existing_partition"]["until_settled"]["entries_in_multi"]
