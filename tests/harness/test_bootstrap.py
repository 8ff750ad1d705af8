import re
import subprocess

from harness import bootstrap


def test_java_17_or_newer_is_found():
    ok, msg = bootstrap.check_java()
    assert ok, msg
    assert bootstrap.java_major() >= 17


def test_missing_java_is_explained(monkeypatch):
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: None)
    ok, msg = bootstrap.check_java()
    assert not ok and "openjdk-17" in msg


def test_tlc_jar_is_placed_at_the_known_path(monkeypatch):
    monkeypatch.delenv("TLA2TOOLS_JAR", raising=False)
    ok, msg = bootstrap.ensure_tlc()
    assert ok, msg
    assert bootstrap.JAR.is_file() and bootstrap.JAR.stat().st_size > 1_000_000


def test_bad_tlc_override_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("TLA2TOOLS_JAR", str(tmp_path / "nope.jar"))
    ok, msg = bootstrap.ensure_tlc()
    assert not ok and "nope.jar" in msg


def test_zookeeper_home_without_jars_is_reported(monkeypatch, tmp_path):
    monkeypatch.delenv("ZK_HOSTS", raising=False)
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    ok, msg = bootstrap.ensure_zookeeper()
    assert not ok and str(tmp_path) in msg


def test_clickhouse_is_ready_after_setup():
    ok, msg = bootstrap.ensure_clickhouse()
    assert ok, msg
    assert re.match(r"clickhouse-server \d+\.\d+\.\d+ \(/", msg), msg


def test_bad_clickhouse_bin_is_reported_not_replaced(monkeypatch, tmp_path):
    installs = []
    monkeypatch.setattr(bootstrap, "_apt_install", lambda *pkgs, **kw: installs.append(pkgs) or (True, "installed"))
    monkeypatch.setenv("CLICKHOUSE_BIN", str(tmp_path / "no-server"))
    ok, msg = bootstrap.ensure_clickhouse()
    assert not ok and str(tmp_path / "no-server") in msg
    assert installs == []  # the user asked for that binary: installing another would hide the mistake


def test_apt_lists_are_updated_once_per_setup(monkeypatch):
    commands = []
    monkeypatch.setattr(bootstrap, "_APT_LISTS_FRESH", False)
    monkeypatch.setattr(bootstrap.os, "geteuid", lambda: 0)
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(bootstrap.subprocess, "run",
                        lambda cmd, **kw: commands.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    assert bootstrap._apt_install("zookeeper")[0]
    assert bootstrap._apt_install("clickhouse-server", "clickhouse-client")[0]
    assert [c[:2] for c in commands] == [["apt-get", "update"], ["apt-get", "install"], ["apt-get", "install"]]
    assert commands[-1][-2:] == ["clickhouse-server", "clickhouse-client"]


def test_the_venvs_spark_submit_works_without_the_venv_activated():
    import subprocess
    import sys
    from pathlib import Path
    ok, msg = bootstrap.ensure_spark_submit()
    assert ok, msg
    venv_bin = Path(sys.prefix) / "bin"
    # a shell that never activated the venv: no venv on PATH, no SPARK_HOME, no PYSPARK_*
    env = {"HOME": str(Path.home()), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([str(venv_bin / "spark-submit"), "--version"], env=env, capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "version 3.5" in r.stderr + r.stdout
    assert bootstrap.ensure_spark_submit() == (ok, msg)  # idempotent
