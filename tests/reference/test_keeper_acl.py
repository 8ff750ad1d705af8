"""ACLs (issue 15): with the identity USER:PASSWORD (the digest scheme, as ClickHouse's <identity>)
every znode a run creates carries one ACL, all permissions for that identity only; a client
without the credentials is refused every change (and every read), and nothing changes. On a real
ZooKeeper. The credentials come from a file (--zk-auth-file, mode 600) or the ZK_AUTH environment
variable, never the command line, and an error never repeats them (issue 38)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from reference.__main__ import main

pytestmark = pytest.mark.zookeeper

ROOT = "/clickhouse/tables/01/events"
AUTH = "ch:secret"


def _client(hosts, auth=None) -> KazooClient:
    c = KazooClient(hosts=hosts, timeout=10, auth_data=[("digest", auth)] if auth else None)
    c.start(timeout=15)
    return c


def _tree(c: KazooClient, path="/clickhouse") -> dict:
    """path -> (data, version, acls) of every node under path."""
    data, stat = c.get(path)
    out = {path: (data, stat.version, c.get_acls(path)[0])}
    for child in c.get_children(path):
        out.update(_tree(c, f"{path}/{child}"))
    return out


@pytest.fixture
def auth_file(tmp_path):
    f = tmp_path / "zk-auth"
    f.write_text(AUTH + "\n")
    f.chmod(0o600)
    return f


def test_every_znode_carries_the_identity_acl_and_others_are_refused(zk_chroot, capsys, auth_file, monkeypatch):
    assert main(["run", "--zk", zk_chroot, "--zk-auth-file", str(auth_file), "--replicas", "2", "--blocks", "3",
                 "--add-replicas", "1", "--rebalance", "--queries", "1", "--show"]) == 0
    owner, stranger = _client(zk_chroot, AUTH), _client(zk_chroot)
    try:
        before = _tree(owner)
        assert len(before) > 30   # the table, its replicas, log entries, parts, assignments, migrations
        want = [make_digest_acl("ch", "secret", all=True)]
        assert {p for p, (_, _, acl) in before.items() if acl != want} == set()
        assignment = f"{ROOT}/selective/assignments/{owner.get_children(f'{ROOT}/selective/assignments')[0]}"
        entry = f"{ROOT}/log/{owner.get_children(f'{ROOT}/log')[0]}"
        refused = {
            "set": lambda: stranger.set(assignment, b'{"owners": ["x"]}'),
            "delete": lambda: stranger.delete(entry),
            "create": lambda: stranger.create(f"{ROOT}/log/log-", b"forged", sequence=True),
            "set_acls": lambda: stranger.set_acls(assignment, [make_digest_acl("x", "y", all=True)]),
            "get": lambda: stranger.get(assignment),
        }
        for what, attempt in refused.items():
            with pytest.raises(NoAuthError):
                attempt()
        assert _tree(owner) == before   # nothing changed
        capsys.readouterr()
        # The command line without the credentials: one line naming where they go, exit 2.
        assert main(["tables", "--zk", zk_chroot, "--json"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--zk-auth-file" in err[0] and "ZK_AUTH" in err[0]
        assert main(["tables", "--zk", zk_chroot, "--zk-auth-file", str(auth_file), "--json"]) == 0
        monkeypatch.setenv("ZK_AUTH", AUTH)   # or from the environment
        assert main(["tables", "--zk", zk_chroot, "--json"]) == 0
    finally:
        owner.delete("/clickhouse", recursive=True)   # the chroot's teardown runs without credentials
        owner.stop(), owner.close()
        stranger.stop(), stranger.close()


@pytest.mark.parametrize("source, bad", [(src, bad) for src in ("file", "env")
                                         for bad in ("no-colon-s3cr3t", ":s3cr3t", "s3cr3t:")] + [("file", "")])
def test_malformed_credentials_are_one_line_that_does_not_repeat_them(zk_chroot, capsys, tmp_path, monkeypatch,
                                                                     source, bad):
    args = ["run", "--zk", zk_chroot, "--show"]
    if source == "file":
        f = tmp_path / "zk-auth"
        f.write_text(bad)
        f.chmod(0o600)
        args += ["--zk-auth-file", str(f)]
    else:
        monkeypatch.setenv("ZK_AUTH", bad)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--zk-auth-file" if source == "file" else "ZK_AUTH") in err[0], err
    assert "s3cr3t" not in err[0], err


def test_credentials_on_the_command_line_are_refused_without_echo(zk_chroot, capsys):
    with pytest.raises(SystemExit) as refused:   # while the arguments are parsed, before Keeper is asked
        main(["run", "--zk", zk_chroot, "--zk-auth", "ch:s3cr3t", "--show"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/proc" in err[0] and "s3cr3t" not in err[0], err


def test_a_credentials_file_others_can_read_is_refused(zk_chroot, capsys, auth_file):
    auth_file.chmod(0o644)
    assert main(["run", "--zk", zk_chroot, "--zk-auth-file", str(auth_file), "--show"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chmod 600" in err[0] and "secret" not in err[0], err


def test_a_root_others_may_change_is_refused_until_fixed(zk_chroot, capsys, auth_file):
    """A root made beforehand by a client without credentials (world:anyone, all permissions)
    would let anyone delete the table's empty nodes under it and squat the run's lock: refused,
    naming it, with nothing changed; --fix-acls gives it to the credentials, and then a stranger
    can neither create under it nor delete from it."""
    from kazoo.exceptions import NoAuthError as KzNoAuth
    stranger = _client(zk_chroot)
    try:
        stranger.ensure_path(ROOT)
        before = stranger.get_acls(ROOT)[0]
        capsys.readouterr()
        args = ["run", "--zk", zk_chroot, "--zk-auth-file", str(auth_file), "--replicas", "2", "--blocks", "2",
                "--show"]
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ROOT in err[0] and "world:anyone" in err[0] and "--fix-acls" in err[0], err
        assert stranger.get_acls(ROOT)[0] == before and stranger.get_children(ROOT) == []   # nothing changed
        assert main([*args, "--fix-acls"]) == 0
        owner = _client(zk_chroot, AUTH)
        try:
            assert owner.get_acls(ROOT)[0] == [make_digest_acl("ch", "secret", all=True)]
        finally:
            owner.stop(), owner.close()
        for attempt in (lambda: stranger.create(f"{ROOT}/squat", b""),
                        lambda: stranger.delete(f"{ROOT}/columns")):
            with pytest.raises(KzNoAuth):
                attempt()
    finally:
        owner = _client(zk_chroot, AUTH)
        owner.delete("/clickhouse", recursive=True)
        owner.stop(), owner.close()
        stranger.stop(), stranger.close()


def test_fix_acls_without_credentials_is_bad_input(zk_chroot, capsys):
    assert main(["run", "--zk", zk_chroot, "--fix-acls", "--show"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fix-acls" in err[0], err
