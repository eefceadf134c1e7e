"""The ``graphflow`` group: help, version, ``--db`` anywhere, one-line errors with their exit
codes, no short flag used twice, and what ``--help`` and ``threads`` import."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from typing import Any, get_args

import click
import pytest

from checkpoints.models import ThreadStatus
from graphflow.auth import vocab
from graphflow.cli import app, main, policy, threads

from .conftest import Cli


def _commands(
    group: click.Group, parent: click.Context | None = None, path: str = "graphflow"
) -> list[tuple[str, click.Command, click.Context]]:
    """Every command with a context as the command line makes it (settings inherited)."""
    ctx = click.Context(group, parent=parent, info_name=path.rpartition(" ")[2],
                        **({} if parent else group.context_settings))  # fmt: skip
    out: list[tuple[str, click.Command, click.Context]] = [(path, group, ctx)]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out += _commands(command, ctx, f"{path} {name}")
        else:
            out.append((f"{path} {name}", command, click.Context(command, ctx, name)))
    return out


ALL = _commands(app)
COMMANDS = [(path, command) for path, command, _ in ALL]


def test_every_command_is_listed() -> None:
    names = {path for path, _ in COMMANDS}
    assert names == {f"graphflow{s}" for s in (
        "", " demo", " run", " resume", " draw", " threads", " show", " history", " pauses",
        " approve", " deny", " answer", " cancel", " policy", " policy check", " worker",
        " audit", " verify", " freeze", " unfreeze",
    )}  # fmt: skip


@pytest.mark.parametrize(("path", "command", "ctx"), ALL, ids=[p for p, _, _ in ALL])
def test_no_two_options_of_a_command_share_a_flag(
    path: str, command: click.Command, ctx: click.Context
) -> None:
    seen: dict[str, str] = {}
    for param in command.get_params(ctx):
        for flag in [*param.opts, *param.secondary_opts]:
            if not flag.startswith("-"):
                continue
            assert flag not in seen, f"{path}: {flag} is {seen[flag]} and {param.name}"
            seen[flag] = str(param.name)
    assert "-h" in seen


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_takes_db_and_data_commands_take_json(
    path: str, command: click.Command
) -> None:
    if isinstance(command, click.Group) and path != "graphflow":
        return  # (a group of commands: its commands take them)
    names = {p.name for p in command.params}
    assert "db" in names, path
    if path not in ("graphflow", "graphflow demo"):  # they print no data
        assert "as_json" in names, path


def test_help_and_version(cli: Cli) -> None:
    got = cli("--help", db=False)
    assert got.code == 0 and got.stderr == ""
    assert got.stdout.startswith("Usage: graphflow ") and "threads" in got.stdout
    assert cli("-h", db=False).stdout == got.stdout
    import graphflow

    version = cli("--version", db=False)
    assert (version.code, version.stdout) == (0, f"graphflow {graphflow.__version__}\n")


def test_no_command_shows_the_help_and_is_a_usage_error(cli: Cli) -> None:
    got = cli(db=False)
    assert got.code == 2 and got.stdout == "" and "Commands:" in got.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nonsense"], "No such command 'nonsense' (see 'graphflow --help')"),
        (["deny", "t", "c"], "Missing option '--reason' (see 'graphflow deny --help')"),
        (["threads", "--status", "odd"], "Invalid value for '--status': 'odd' is not one of"),
        (["show"], "Missing argument 'THREAD'"),
        (["threads", "--frobnicate"],
         "No such option '--frobnicate' (see 'graphflow threads --help')"),
        (["run", "--graph", "flows:graph", "--thread", "t"], "Missing option '--input'"),
        (["run", "--graph", "flows:graph", "--thread", "t", "--input", "{x"],
         "--input is not JSON: Expecting property name"),
        (["run", "--graph", "flows:graph", "--thread", "t", "--input", "[1]"],
         "--input must be a JSON object or null, not list"),
        (["run", "--graph", "flows", "--thread", "t", "--input", "{}"],
         "--graph 'flows' must be MODULE:ATTRIBUTE"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_and_exit_2(cli: Cli, args: list[str], message: str) -> None:
    got = cli(*args)
    assert got.code == 2 and got.stdout == ""
    assert message in got.error
    assert not (cli.cwd / "g.db").exists()


def test_usage_errors_in_a_subprocess_are_one_line(cli: Cli) -> None:
    got = cli.sub("deny", "t", "c")
    assert got.code == 2 and got.stdout == ""
    assert got.stderr == (
        "graphflow: error: Missing option '--reason' (see 'graphflow deny --help')\n"
    )


def _threads(*argv: str) -> list[str]:
    """The thread ids ``graphflow *argv threads --json``-style arguments list."""
    from click.testing import CliRunner

    got = CliRunner().invoke(app, list(argv), catch_exceptions=False)
    assert got.exit_code == 0, got.stderr
    return [t["thread_id"] for t in json.loads(got.stdout)]


def test_db_before_or_after_the_command_and_its_default(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.start("t1")
    other = str(cli.cwd / "other.db")
    assert _threads("threads", "--json", "--db", cli.db) == ["t1"]
    assert _threads("--db", cli.db, "threads", "--json") == ["t1"]
    assert _threads("--db", other, "threads", "--json", "--db", cli.db) == ["t1"]  # its own
    monkeypatch.setenv("GRAPHFLOW_DB", cli.db)
    assert _threads("threads", "--json") == ["t1"]
    monkeypatch.setenv("GRAPHFLOW_DB", other)
    assert _threads("--db", cli.db, "threads", "--json") == ["t1"]  # given wins over the env
    monkeypatch.delenv("GRAPHFLOW_DB")
    (cli.cwd / "g.db").rename(cli.cwd / "graphflow.db")
    assert _threads("threads", "--json") == ["t1"]  # ./graphflow.db
    assert not (cli.cwd / "other.db").exists()


def test_a_listing_on_a_missing_database_is_exit_4_and_creates_nothing(cli: Cli) -> None:
    for args in (["threads"], ["pauses"], ["show", "t"], ["history", "t"],
                 ["approve", "t", "c"], ["deny", "t", "c", "--reason", "r"],
                 ["answer", "t", "p", "1"], ["cancel", "t", "--reason", "r"],
                 ["resume", "t", "--graph", "flows:graph"]):  # fmt: skip
        got = cli(*args)
        assert got.code == 4, (args, got.stderr)
        assert got.stdout == ""
        assert f"database {cli.db!r} does not exist (nothing was created)" in got.error
    assert sorted(p.name for p in cli.cwd.iterdir()) == ["flows.py"]


def test_an_unexpected_error_is_one_line_with_its_type(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.start("t1")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug\nover two lines")

    monkeypatch.setattr("graphflow.cli.load.store_graph", broken)
    got = cli("show", "t1")
    assert got.code == 1 and got.stdout == ""
    assert got.error == "graphflow: error: ZeroDivisionError: a bug over two lines"


def test_a_store_error_names_the_database(cli: Cli) -> None:
    (cli.cwd / "g.db").write_text("not a database at all, just text\n" * 40)
    got = cli("threads")
    assert got.code == 1 and got.stdout == ""
    assert repr(cli.db) in got.error and "not a graphflow database" in got.error


def test_a_directory_or_an_empty_db_is_refused_naming_it(cli: Cli) -> None:
    (cli.cwd / "adir").mkdir()
    for args in (["threads"], ["pauses"], ["show", "t"], ["audit", "t"]):
        got = cli(*args, "--db", "adir", db=False)
        assert got.code == 1 and "database 'adir' is a directory" in got.error, args
        empty = cli(*args, "--db", "", db=False)
        assert empty.code == 2 and "--db '' names no file" in empty.error, args
    assert cli("--db", "", "threads", db=False).code == 2
    for args in (["verify", "--db", "adir"], ["verify", "--evidence", "adir"]):
        got = cli(*args, db=False)
        assert got.code == 1 and "'adir' is a directory" in got.error, args
    (cli.cwd / "empty.db").touch()
    (cli.cwd / "empty.evidence.db").touch()
    for args in (["threads", "--db", "empty.db"], ["audit", "t", "--db", "empty.db"],
                 ["verify", "--evidence", "empty.evidence.db"]):  # fmt: skip
        got = cli(*args, db=False)
        assert got.code == 1 and "is an empty file, not a" in got.error, args
    assert (cli.cwd / "empty.db").stat().st_size == 0  # nothing written to them
    assert (cli.cwd / "empty.evidence.db").stat().st_size == 0
    assert sorted(p.name for p in cli.cwd.iterdir()) == [
        "adir", "empty.db", "empty.evidence.db", "flows.py"
    ]  # fmt: skip


def test_a_postgresql_dsn_is_refused_alike_by_every_command(cli: Cli) -> None:
    dsn = "postgresql://postgres@127.0.0.1:5432/test"
    for args in (["threads"], ["pauses"], ["show", "t"], ["audit", "t"], ["verify"],
                 ["approve", "t", "c"], ["worker", "--graph", "flows:graph", "--once"],
                 ["run", "--graph", "flows:graph", "--thread", "t", "--input", "{}"]):  # fmt: skip
        got = cli(*args, "--db", dsn, db=False)
        assert got.code == 1, (args, got.stderr)
        assert "PostgreSQL stores are not available in this version" in got.error, args
    assert sorted(p.name for p in cli.cwd.iterdir()) == ["flows.py"]


def test_audit_of_a_file_that_is_no_database_says_so_before_its_log(cli: Cli) -> None:
    (cli.cwd / "g.db").write_text("not a database at all, just text\n" * 40)
    got = cli("audit", "t1")
    assert got.code == 1 and "not a graphflow database" in got.error


def test_an_sqlite_error_is_about_the_database(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli.start("t1")

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr("graphflow.cli.load.store_graph", failing)
    got = cli("show", "t1")
    assert got.code == 1
    assert got.error == f"graphflow: error: cannot use database {cli.db!r}: disk I/O error"


def test_keyboard_interrupt_is_one_line_and_130(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli.start("t1")

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("graphflow.cli.load.store_graph", interrupted)
    got = cli("show", "t1")
    assert got.code == 130 and got.stdout == ""
    assert got.stderr == "graphflow: error: interrupted\n"


def test_main_returns_the_exit_code(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["threads", "--db", cli.db]) == 4
    assert main(["--version"]) == 0
    assert main(["nonsense"]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("graphflow ") and err.count("\n") == 2


def test_spelled_out_words_match_the_library() -> None:
    assert get_args(ThreadStatus) == threads.THREAD_STATUSES
    assert policy.PRINCIPAL_TYPES == vocab.PRINCIPAL_TYPES
    assert policy.RISKS == vocab.RISKS
    assert policy.CATEGORIES == vocab.CATEGORIES


def _loaded_after(code: str, cwd: Any) -> list[str]:
    """The modules loaded once ``code`` ran in a new process, the standard library's aside
    (those of graphflow and checkpoints, and every third-party package)."""
    script = (
        "import sys\n"
        f"{code}\n"
        "import json\n"
        "std = sys.stdlib_module_names\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.partition('.')[0] not in std\n"
        "                        and not m.startswith(('_', 'encodings')))), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stderr.strip().splitlines()[-1])
    return loaded


def test_help_imports_click_and_the_cli_only(cli: Cli) -> None:
    code = "from graphflow.cli import main\nmain(['--help'])\nmain(['policy', 'check', '-h'])"
    loaded = _loaded_after(code, cli.cwd)
    ours = [m for m in loaded if m.partition(".")[0] in ("graphflow", "checkpoints")]
    assert ours and all(m == "graphflow" or m.startswith("graphflow.cli") for m in ours), ours
    others = {m.partition(".")[0] for m in loaded} - {"graphflow", "click"}
    heavy = {"pydantic", "pydantic_core", "networkx", "sqlite_utils", "anyio", "msgpack", "yaml"}
    assert not others & heavy, sorted(others)


def test_help_imports_neither_sqlite3_nor_json(cli: Cli) -> None:
    script = (
        "import sys\n"
        "from graphflow.cli import main\n"
        "main(['--help'])\n"
        "print(sorted(m for m in ('json', 'sqlite3') if m in sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=cli.cwd, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: graphflow ")
    assert proc.stderr.strip().splitlines()[-1] == "[]"


def test_threads_imports_no_engine(cli: Cli) -> None:
    cli.start("t1")
    argv = ["threads", "--json", "--db", cli.db]
    code = f"from graphflow.cli import main\nassert main({argv!r}) == 0"
    loaded = _loaded_after(code, cli.cwd)
    assert "checkpoints.sqlite" in loaded  # (it did read the store)
    graphflow = [m for m in loaded if m.startswith("graphflow.")]
    assert all(m.startswith("graphflow.cli") for m in graphflow), graphflow
    assert not {"networkx", "sqlite_utils"} & {m.partition(".")[0] for m in loaded}


def test_threads_loads_no_pydantic_event_loop_or_memory_store(cli: Cli) -> None:
    """Listing threads reads the store's index only: neither pydantic (serde looks models
    up, it never imports them), nor an event loop (the store's read never suspends), nor
    the MemoryCheckpointer (the package binds names on first use), nor the engine's
    libraries (over 100 ms of a new process together)."""
    cli.start("t1")
    heavy = (
        "anyio._backends._asyncio", "asyncio", "checkpoints.memory", "jsonschema", "logging",
        "networkx", "numpy", "pydantic", "pydantic_core", "sqlite_utils", "yaml",
    )  # fmt: skip
    script = (
        "import sys\n"
        "from graphflow.cli import main\n"
        f"assert main(['threads', '--json', '--db', {cli.db!r}]) == 0\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=cli.cwd, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["thread_id"] == "t1"
    assert proc.stderr.strip().splitlines()[-1] == "[]"
