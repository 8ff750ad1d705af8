import pytest

from protocol.parts import BadPart, PartName, PartStore


@pytest.fixture
def stores(tmp_path):
    return PartStore(tmp_path / "r1"), PartStore(tmp_path / "r2")


def test_names_round_trip_and_cover():
    n = PartName.parse("202401-5_3_7_1")
    assert (n.partition, n.min_block, n.max_block, n.level, n.mutation) == ("202401-5", 3, 7, 1, 0)
    assert str(PartName("202401-5", 3, 7, 1, 9)) == "202401-5_3_7_1_9"
    assert n.covers(PartName("202401-5", 4, 4, 0)) and not n.covers(PartName("202401-5", 8, 8, 0))
    assert not n.covers(PartName("202401-6", 4, 4, 0))


def test_a_patch_part_is_named_in_its_own_partition_id_and_stored_under_its_partition(stores):
    """A lightweight UPDATE's patch part: ClickHouse names it patch-<hash>-<p> (PatchPartInfo.h);
    it belongs to p (the store, the filter, the checkers), and covers and is covered by no part of rows."""
    n = PartName.parse("patch-1f-202401-5_4_4_0")
    assert (n.partition, n.patch, n.partition_id, str(n)) == ("202401-5", "1f", "patch-1f-202401-5", "patch-1f-202401-5_4_4_0")
    rows = PartName("202401-5", 1, 9, 1)
    assert not rows.covers(n) and not n.covers(PartName("202401-5", 4, 4, 0))
    assert PartName("202401-5", 1, 9, 1, patch="1f").covers(n)
    r1, r2 = stores
    a = r1.write(PartName("202401-5", 1, 1, 0), [{"x": 1}])
    r1.write(n, [{"x": 2}])
    assert r1.names("202401-5") == [a, n]
    assert r2.fetch_from(r1, n) == n and r2.names("202401-5") == [n]
    with pytest.raises(BadPart, match="one partition"):
        r1.merge([a, n])


@pytest.mark.parametrize("bad", ["202401_5_1_1_0", "p1_1_1_0", "202401-5_9_1_0", "202401-5_1_1", "patch--202401_1_1_0",
                                 "patch-xyz-202401_1_1_0"])
def test_malformed_names(bad):
    with pytest.raises(BadPart):
        PartName.parse(bad)


def test_write_read_merge_mutate(stores):
    r1, _ = stores
    a = r1.write(PartName("202401-5", 1, 1, 0), [{"user_id": 5, "event": "a"}])
    b = r1.write(PartName("202401-5", 2, 2, 0), [{"user_id": 21, "event": "b"}])
    m = r1.merge([a, b])
    assert str(m) == "202401-5_1_2_1" and r1.names() == [m]
    assert [r["event"] for r in r1.read(m)] == ["a", "b"]
    mut = r1.mutate(m, 3, lambda r: None if r["event"] == "a" else {**r, "event": "B"})
    assert str(mut) == "202401-5_1_2_1_3" and r1.read(mut) == [{"user_id": 21, "event": "B"}]
    with pytest.raises(BadPart, match="immutable"):
        r1.write(mut, [])


def test_replaced_parts_stay_until_the_commit_and_a_failed_commit_takes_the_new_part_off(stores):
    r1, r2 = stores
    a = r1.write(PartName("202401-5", 1, 1, 0), [{"user_id": 5}])
    b = r1.write(PartName("202401-5", 2, 2, 0), [{"user_id": 21}])
    seen = []
    m = r1.merge([a, b], commit=lambda new: seen.append(sorted(map(str, r1.names()))))
    # at the commit the sources were still on disk beside the merged part (a kill there loses none)
    assert seen == [["202401-5_1_1_0", "202401-5_1_2_1", "202401-5_2_2_0"]] and r1.names() == [m]

    def refused(new):
        raise RuntimeError("the commit multi failed")
    c = r2.write(PartName("202401-5", 3, 3, 0), [{"user_id": 37}])
    d = r2.write(PartName("202401-5", 4, 4, 0), [{"user_id": 53}])
    with pytest.raises(RuntimeError):
        r2.merge([c, d], commit=refused)
    assert r2.names() == [c, d]   # as before the merge
    with pytest.raises(RuntimeError):
        r2.fetch_from(r1, m, commit=refused)
    assert r2.names() == [c, d]


def test_fetch_verifies_checksum_and_leaves_nothing_on_failure(stores):
    r1, r2 = stores
    n = r1.write(PartName("202401-5", 1, 1, 0), [{"user_id": 5}])
    path = r1.folder / f"{n}.part"
    path.write_text(path.read_text().replace('"user_id": 5', '"user_id": 6'))
    with pytest.raises(BadPart, match="checksum"):
        r2.fetch_from(r1, n)
    assert r2.names() == []


def test_fetch_of_a_covering_part_replaces_covered_ones(stores):
    r1, r2 = stores
    a = r1.write(PartName("202401-5", 1, 1, 0), [{"x": 1}])
    b = r1.write(PartName("202401-5", 2, 2, 0), [{"x": 2}])
    r2.fetch_from(r1, a)
    m = r1.merge([a, b])
    r2.fetch_from(r1, m)
    assert r2.names() == [m]


def test_merge_refuses_mixed_partitions_and_mutations(stores):
    r1, _ = stores
    a = r1.write(PartName("202401-5", 1, 1, 0), [])
    b = r1.write(PartName("202401-6", 2, 2, 0), [])
    c = r1.write(PartName("202401-5", 3, 3, 0, 4), [])
    with pytest.raises(BadPart, match="one partition"):
        r1.merge([a, b])
    with pytest.raises(BadPart, match="mutation versions"):
        r1.merge([a, c])
