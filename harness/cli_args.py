"""The command lines' one contract: exit codes, argument types that refuse bad values up front,
and one line instead of a traceback.

    0  holds                      1  a violation was found
    2  bad input or usage         3  no verdict: the environment failed (Keeper unreachable,
                                     Java or TLC missing, ...) or the tool itself did; the line
                                     names the log holding the traceback
    130 interrupted (Ctrl-C)

Used by `python -m reference`, `python -m harness.tlc`, `python -m harness.check_models`,
`python -m conformance`, `python -m harness.zookeeper` and the Spark checker
(`pyspark_jobs/spark_check.py`, which runs from the checkout, so harness/ is importable there too).

Ranges are argparse `type=` functions, so argparse names the option in its one-line refusal
(`argument --rows: must be an integer >= 1, not 0`) and exits 2 before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import difflib
import json
import logging
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Callable, Iterable, Sequence

HOLDS, VIOLATED, BAD_INPUT, ENVIRONMENT, INTERRUPTED = 0, 1, 2, 3, 130
EXIT_STATUS = ("exit status: 0 holds, 1 a violation was found, 2 bad input or usage, 3 no verdict (the "
               "environment failed), 130 Ctrl-C")


class BadInput(Exception):
    """The command line or an input file cannot be used; the message names which. A verdict (0 or
    1) is only ever given on input that was read completely and passed every check of its shape: a
    tool that proves no row was lost must not prove it of the wrong data."""


class EnvironmentFailure(Exception):
    """Something outside the input failed (Keeper, Java, TLC): nothing was decided."""


class _ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in --help, but not the noise of `(default: None)` on options that have none."""

    def _get_help_string(self, action):
        return super()._get_help_string(action) if _has_default(action) else action.help


def _has_default(action: argparse.Action) -> bool:
    # Identity, not ==: a default of 0 is one to show, only None and a flag's False are not.
    return not (action.default is None or action.default is False or action.default == argparse.SUPPRESS)


class Declared(BaseException):
    """Raised by a Parser's parse_args inside `declaration()`: the command's inputs as it declares
    them (the parser, its subcommands' among its actions), before anything has run. A BaseException,
    so that no command's own `except Exception` (its contract's last resort) takes it."""

    def __init__(self, parser: "Parser"):
        super().__init__(parser.prog)
        self.parser = parser


_DECLARING = False


@contextlib.contextmanager
def declaration():
    """Within it, a command's main(argv) stops at its parse_args and raises Declared with its parser:
    how tests/cli/ reads every command's declaration without running it."""
    global _DECLARING
    _DECLARING = True
    try:
        yield
    finally:
        _DECLARING = False


class Parser(argparse.ArgumentParser):
    """argparse with every default shown in --help (subcommands' parsers are of the same class), and
    a refusal in one line: `PROG: bad input: argument --x: must be ...` (the contract's form, as
    run_main's), `--help` for the usage."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _ShowDefaults)
        kwargs.setdefault("epilog", EXIT_STATUS)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        if _DECLARING:
            raise Declared(self)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        self.exit(BAD_INPUT, f"{self.prog}: bad input: {message} (--help for usage)\n")

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        # argparse prints no help line, hence no default, for an option without help text.
        if not action.help and action.option_strings and _has_default(action):
            action.help = "default: %(default)s"
        return action


# ---- argument types: each raises ArgumentTypeError, which argparse turns into exit 2 naming the option


def int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, not {value}")
        return value
    parse.__name__ = f"integer >= {low}"  # argparse's fallback message names the type by this
    parse.declares = ("integer", low)
    return parse


def integers(low: int) -> Callable[[str], list[int]]:
    """Comma-separated integers, each >= low (a sweep's sizes)."""
    one = int_at_least(low)

    def parse(text: str) -> list[int]:
        if not text or any(not x for x in text.split(",")):
            raise argparse.ArgumentTypeError(f"wants integers >= {low} separated by commas, not {text!r}")
        return [one(x) for x in text.split(",")]
    parse.__name__ = f"integers >= {low}"
    parse.declares = ("integers", low)
    return parse


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def fraction(text: str) -> float:
    """A chance: 0 <= p <= 1."""
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a chance between 0 and 1, not {value:g}")
    return value


def number_at_least(low: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = _float(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be a number >= {low:g}, not {value:g}")
        return value
    parse.__name__ = f"number >= {low:g}"
    parse.declares = ("number", low)
    return parse


def positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, not {value:g}")
    return value


_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d+)$")


def zk_address(text: str) -> str:
    """ZooKeeper's connect string: HOST:PORT[,HOST:PORT...][/chroot]."""
    hosts, slash, chroot = text.partition("/")
    if slash and (not chroot or chroot.endswith("/") or chroot.startswith("/") or "//" in chroot):
        raise argparse.ArgumentTypeError(f"chroot /{chroot} is not a znode path (in {text!r})")
    if not hosts:
        raise argparse.ArgumentTypeError(f"wants HOST:PORT, not {text!r}")
    for hp in hosts.split(","):
        m = _HOST_PORT.match(hp)
        if not m:
            raise argparse.ArgumentTypeError(f"wants HOST:PORT[,HOST:PORT...][/chroot], not {text!r}")
        if not 1 <= int(m["port"]) <= 65535:
            raise argparse.ArgumentTypeError(f"port {m['port']} is not between 1 and 65535 (in {text!r})")
    return text


def znode_path(text: str) -> str:
    if not text.startswith("/") or (len(text) > 1 and text.endswith("/")) or "//" in text:
        raise argparse.ArgumentTypeError(f"wants an absolute znode path like /clickhouse/tables/01/t, not {text!r}")
    return text


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _writable_here(path: Path, what: str) -> None:
    """`path` can be created (or written) without creating anything now: its nearest existing
    ancestor is a folder we may write into."""
    base = _nearest_existing(path)
    if not base.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {what} {path}: {base} is not a folder")
    _probe(base, f"cannot create {what} {path}")


def _probe(folder: Path, what: str) -> None:
    """Write into `folder` by trying: os.access says yes to root on read-only mounts and /proc. An
    anonymous temporary file leaves nothing behind, even if we are killed."""
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{what}: {folder} is not writable ({e.strerror})") from None


def output_dir(text: str) -> Path:
    """A folder to write into: an existing writable folder, or one that can be made."""
    path = Path(text)
    if path.exists():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{path} exists and is not a folder")
        _probe(path, "cannot write there")
        return path
    _writable_here(path, "folder")
    return path


def output_file(text: str) -> Path:
    """A file to write: not a folder, and its folder writable or creatable."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder, not a file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"{path} is not writable")
        return path
    _writable_here(path.parent, "folder")
    return path


def optional_output_file(text: str) -> Path | None:
    """A file to write, or '' for none (a table the command would otherwise rewrite)."""
    return None if text == "" else output_file(text)


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {path}" if not path.exists() else f"{path} is not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{path} is not readable")
    return path


def existing_dir(text: str) -> Path:
    """A folder to read: a history, a ZooKeeper dataDir (its path, or its file:// URL)."""
    if "://" in text and not text.startswith("file://"):
        raise argparse.ArgumentTypeError(f"{text}: only a folder on a local or shared file system can be read")
    path = Path(text.removeprefix("file://").removeprefix("file:"))
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {path}" if not path.exists() else f"{path} is not a folder")
    if not os.access(path, os.R_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{path} is not readable")
    return path


def one_of(known: Iterable[str], what: str = "name") -> Callable[[str], str]:
    """One name of a set known when the parser is built (a model, an aspect, a replica): where
    argparse's `choices` would print hundreds of them in --help, or they are given comma-separated
    (`names`)."""
    known = frozenset(known)

    def parse(text: str) -> str:
        if text not in known:
            near = difflib.get_close_matches(text, known, n=3)
            raise argparse.ArgumentTypeError(f"unknown {what} {text!r}" + (f"; did you mean {', '.join(near)}?"
                                                                             if near else f" ({len(known)} known)"))
        return text
    parse.__name__ = what
    parse.declares = ("one of", tuple(sorted(known)))
    return parse


def names(known: Iterable[str], what: str = "name") -> Callable[[str], list[str]]:
    """A comma-separated list of names of a known set, each at most once."""
    one = one_of(known, what)

    def parse(text: str) -> list[str]:
        items = text.split(",")
        if not text or any(not i for i in items):
            raise argparse.ArgumentTypeError(f"wants {what}s separated by commas, not {text!r}")
        if len(set(items)) != len(items):
            raise argparse.ArgumentTypeError(f"names a {what} twice: {text!r}")
        return [one(i) for i in items]
    parse.__name__ = f"{what}s"
    parse.declares = ("names", one.declares[1])
    return parse


def text(what: str, pattern: str = r"[^\x00-\x1f]+") -> Callable[[str], str]:
    """Text the command passes on as it is (a git revision, a credential, a label): declared so
    that it is not taken for an option forgotten untyped; `pattern` says what it may look like
    (by default: not empty, no control character)."""
    shape = re.compile(pattern)

    def parse(value: str) -> str:
        if not shape.fullmatch(value):
            raise argparse.ArgumentTypeError(f"{what} must match {pattern}, not {value!r}")
        return value
    parse.__name__ = what
    parse.declares = ("text", pattern)
    return parse


def json_input(schema: dict, what: str) -> Callable[[str], tuple[Path, object]]:
    """A JSON file a command reads back (a failure file, a recorded walk): read and held to its
    schema (JSON Schema 2020-12, with jsonschema) while the arguments are parsed, so a file of the
    wrong shape is refused in one line that names the place in it, before anything runs. Gives
    (path, document)."""
    def parse(text: str) -> tuple[Path, object]:
        path = existing_file(text)
        try:
            data = json.loads(path.read_text())
        except UnicodeDecodeError:
            raise argparse.ArgumentTypeError(f"{path} is not {what} (not text)") from None
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{path} is not {what} (not JSON: {e})") from None
        import jsonschema   # imported when a file is read, not by every command that imports this module
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the top level"
            raise argparse.ArgumentTypeError(f"{path} is not {what}: at {where}: {error.message[:200]}")
        return path, data
    parse.__name__ = what
    parse.declares = ("json file", schema)
    return parse


def refused(reason: str) -> Callable[[str], str]:
    """An option kept only to refuse it with a reason, whatever its value, which the refusal does
    not repeat (a credential given in argv, readable in /proc by every local user)."""
    def parse(value: str) -> str:
        raise argparse.ArgumentTypeError(reason)
    parse.__name__ = "refused"
    parse.declares = ("refused",)
    return parse


# What each type of this vocabulary declares, for the generated bad-input suite (tests/cli/):
# a range, a set of names, a path's kind. A type made by a factory above carries its own.
for _t, _d in ((fraction, ("fraction",)), (positive_float, ("positive number",)), (zk_address, ("zk address",)),
               (znode_path, ("znode path",)), (output_dir, ("output folder",)), (output_file, ("output file",)),
               (existing_file, ("existing file",)), (existing_dir, ("existing folder",)),
               (optional_output_file, ("output file or nothing",))):
    _t.declares = _d


# ---- environment checks


def keeper_reachable(connect: str, timeout: float = 3.0) -> None:
    """A session with ZooKeeper within `timeout` seconds, or EnvironmentFailure: a wrong host or port
    is one line in seconds, not kazoo's retries for the session timeout. A chroot that does not
    exist is bad input named by its path (as ClickHouse, we do not create it)."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.retry import KazooRetry
    hosts, slash, chroot = connect.partition("/")
    quiet = logging.getLogger("kazoo.client")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its "Connection dropped" warnings are what we report, once
    client = KazooClient(hosts=hosts, timeout=timeout, connection_retry=KazooRetry(max_tries=-1, max_delay=0.5))
    try:
        client.start(timeout=timeout)
        if slash and client.exists("/" + chroot) is None:
            raise BadInput(f"--zk {connect}: no znode /{chroot} on {hosts} (create it, or leave the chroot out)")
    except KazooTimeoutError:
        raise EnvironmentFailure(f"no ZooKeeper answers at {hosts} within {timeout:g} s "
                                 "(start one: python -m harness.zookeeper)") from None
    finally:
        client.stop()
        client.close()
        quiet.setLevel(level)


# ---- the one way out


def _log_traceback(prog: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(tempfile.gettempdir()) / f"{re.sub(r'[^A-Za-z0-9]+', '-', prog).strip('-')}-{stamp}-{os.getpid()}.log"
    path.write_text(f"{prog} {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
    return path


def fail(prog: str, kind: str, message: str, code: int) -> int:
    print(f"{prog}: {kind}: {message}", file=sys.stderr, flush=True)
    return code


def run_main(prog: str, main: Callable[[], int], bad_input: Sequence[type[BaseException]] = (),
             environment: Sequence[type[BaseException]] = ()) -> int:
    """Run `main` under the contract: the caller's input errors are 2, its environment's 3, Ctrl-C
    130, anything unexpected 3 with its traceback in a log file (never 1: that is a verdict)."""
    try:
        return main()
    except (BadInput, *bad_input) as e:
        return fail(prog, "bad input", str(e), BAD_INPUT)
    except (EnvironmentFailure, *environment) as e:
        return fail(prog, "environment", str(e) or type(e).__name__, ENVIRONMENT)
    except KeyboardInterrupt:
        return fail(prog, "interrupted", "stopped by Ctrl-C", INTERRUPTED)
    except BrokenPipeError:  # output piped into `head`: the reader left; the shell's code for SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 128 + 13
    except Exception as e:  # noqa: BLE001 - the contract: no traceback reaches the user
        log = _log_traceback(prog)
        text = str(e).splitlines()[0][:300] if str(e) else ""
        return fail(prog, "internal error", f"{type(e).__name__}{': ' + text if text else ''} (traceback in {log})",
                    ENVIRONMENT)
