"""harness/zk_txnlog.py decodes ZooKeeper's transaction log itself: held to a known kazoo sequence
byte for byte, and to ZooKeeper's own TxnLogToolkit record for record."""

import pytest

from harness.zk_txnlog import TxnLogError, decode_log, log_files, read_log_file, read_txnlog, toolkit_records


def test_every_op_of_a_multi_is_read_with_its_data_and_version(zk_server, zk_client):
    first = zk_server.last_zxid() + 1
    zk_client.create("/a", b"1")
    # Bytes that are not text: the toolkit's dump loses these; the decoder must not.
    zk_client.create("/b", b"\x80\x00\xff\x04")
    tx = zk_client.transaction()
    tx.create("/a/c", b"3" * 300)
    tx.set_data("/a", b"4")
    tx.delete("/b")
    tx.check("/a", 1)
    assert not [r for r in tx.commit() if isinstance(r, Exception)]
    zk_client.create("/a/e-", b"", ephemeral=True, sequence=True)
    txns = read_txnlog(zk_server.data_dir, first, zk_server.last_zxid())

    ns = zk_client.chroot
    assert [t.type for t in txns] == ["create", "create", "multi", "create"]
    assert txns[1].ops[0].data == b"\x80\x00\xff\x04"
    assert [(op.type, op.path, op.data, op.version) for op in txns[2].ops] == [
        ("create", f"{ns}/a/c", b"3" * 300, None), ("setData", f"{ns}/a", b"4", 1),
        ("delete", f"{ns}/b", None, None), ("check", f"{ns}/a", None, 2)]
    assert txns[3].ops[0].ephemeral and txns[3].ops[0].path == f"{ns}/a/e-0000000001"
    assert {t.session for t in txns} == {zk_client.client_id[0]}


def test_a_failed_multi_and_a_refused_write_are_errors_that_name_the_code(zk_server, zk_client):
    first = zk_server.last_zxid() + 1
    tx = zk_client.transaction()
    tx.create("/x", b"")
    tx.delete("/nothing-here")
    tx.commit()
    zk_client.create("/y", b"")
    with pytest.raises(Exception):
        zk_client.create("/y", b"")
    txns = read_txnlog(zk_server.data_dir, first, zk_server.last_zxid())
    assert [t.type for t in txns] == ["multi", "create", "error"]
    assert txns[0].failed and [op.error for op in txns[0].ops if op.type == "error"] == [-101]
    assert txns[2].failed and txns[2].ops[0].error == -110
    assert not txns[1].failed


def test_the_decoder_and_zookeepers_toolkit_read_the_same_records(zk_server, zk_client):
    for i in range(30):
        zk_client.create(f"/n{i}", bytes(range(i % 256)) * 3)
        tx = zk_client.transaction()
        tx.set_data(f"/n{i}", b"v")
        tx.create(f"/n{i}/c", b"\xff" * i)
        tx.commit()
    zk_client.stop()   # a closeSession record too
    for f in log_files(zk_server.data_dir):
        mine = [(t.zxid, t.session, t.type) for t in read_log_file(f)]
        assert mine == toolkit_records(f)
        assert len(mine) >= 61


def test_a_file_that_is_not_a_log_or_is_cut_inside_a_record_is_refused(zk_server, zk_client, tmp_path):
    zk_client.create("/z", b"z" * 100)
    raw = log_files(zk_server.data_dir)[0].read_bytes()
    with pytest.raises(TxnLogError, match="not a ZooKeeper transaction log"):
        decode_log(b"hello world, no header here", "bogus")
    assert decode_log(raw)   # the whole file reads
    end = 16 + 12 + int.from_bytes(raw[16 + 8:16 + 12], "big")   # the first record, without its end byte
    with pytest.raises(TxnLogError, match="incomplete"):
        decode_log(raw[:end])
    flipped = bytearray(raw)
    flipped[end - 1] ^= 0xFF   # the first record's last byte: its checksum no longer matches
    with pytest.raises(TxnLogError, match="checksum"):
        decode_log(bytes(flipped))
    (tmp_path / "version-2").mkdir()
    with pytest.raises(TxnLogError, match="no transaction log"):
        read_txnlog(tmp_path)
