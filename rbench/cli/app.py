"""The ``rbench`` command line (Typer + rich).

Exit codes: 0 ok, 2 user error (bad name, option, missing or malformed data, unwritable results
directory, a ranker returning bad scores, an exception raised inside a ranker's code: one line
naming the ranker and the call, ``--debug`` anywhere on the line adds the traceback), 1 internal
error, 130 interrupted.
"""

from __future__ import annotations

import sys
import warnings

import typer

from rbench.cli import compare, listing, reproduce, run, tables, verify
from rbench.cli.common import err, escape_help, refuse_empty_paths
from rbench.core.console import PipeClosed, quiet_stdout, styled
from rbench.core.errors import RBenchError
from rbench.core.faults import ranker_fault

DEBUG_FLAG = "--debug"  # keep the traceback of a ranker's fault (taken off the command line before click)
_DEBUG = False

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="rbench: benchmark LLM rankers against classic and task-specific baselines.")


def _version(value: bool) -> None:
    if value:
        from rbench.core.protocol import PROTOCOL_VERSION
        from rbench.core.version import __version__

        print(f"rbench {__version__} (evaluation protocol {PROTOCOL_VERSION})")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print rbench's version and evaluation protocol, then exit.")) -> None:
    """rbench: benchmark LLM rankers against classic and task-specific baselines."""


# one module per command group (rbench.cli.listing, run, tables, compare, reproduce, verify, data)
app.command("tasks")(listing.tasks_cmd)
app.command("rankers")(listing.rankers_cmd)
app.command("run")(run.run_cmd)
app.command("table")(tables.table_cmd)
app.command("compare")(compare.compare_cmd)
app.add_typer(tables.plot_app, name="plot")
app.command("reproduce")(reproduce.reproduce_cmd)
app.command("verify")(verify.verify_cmd)


def _mount_data_app() -> None:
    try:
        from rbench.cli.data import data_app
    except ImportError:
        return
    app.add_typer(data_app, name="data", help="Download, prepare and import task data.")


_mount_data_app()


def _note(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """Warnings (e.g. a variant leaving out an unprepared donor task) as one short line."""
    err.print(styled(("note:", "yellow"), f" {message}"), soft_wrap=True, highlight=False)


def _click_kinds() -> dict[str, tuple[type, ...]]:
    """The exception classes of every click the CLI may meet: typer >= 0.2x bundles its own copy
    (``typer._click``), older typer uses the ``click`` package; either may be installed."""
    import importlib

    kinds: dict[str, list[type]] = {"ClickException": [], "NoArgsIsHelpError": [], "Abort": [typer.Abort]}
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for name, found in kinds.items():
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and cls not in found:
                found.append(cls)
    return {name: tuple(found) for name, found in kinds.items()}


def _error_line(message: str) -> None:
    err.print(styled(("error:", "bold red"), f" {message}"), highlight=False, soft_wrap=True)


def _commands(ctx) -> str:  # noqa: ANN001
    names = getattr(ctx.command, "list_commands", lambda _ctx: [])(ctx)
    return f": {', '.join(names)}" if names else ""


def _usage_message(exc: Exception) -> str:
    """A click usage error as one line, with where to find the command's options."""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    return f"{message} (see {ctx.command_path} --help)" if ctx is not None else message


def main(argv: list[str] | None = None) -> int:
    """Console-script entry: maps errors to exit codes and one clear line."""
    global _DEBUG
    warnings.showwarning = _note
    args = sys.argv[1:] if argv is None else list(argv)
    _DEBUG = DEBUG_FLAG in args  # anywhere on the line: `rbench run ... --debug` too
    args = [a for a in args if a != DEBUG_FLAG]
    try:
        refuse_empty_paths(args)
        command = escape_help(typer.main.get_command(app))  # help texts shown as written (no rich markup)
        code = command.main(args=args, prog_name="rbench", standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        if code == 130:  # click turned a KeyboardInterrupt into an abort
            err.print(styled(("interrupted", "yellow"), " (no partial RunRecord was written)"))
        return code if isinstance(code, int) else 0
    except RBenchError as exc:
        _error_line(str(exc))
        return 2
    except KeyboardInterrupt:
        err.print(styled(("interrupted", "yellow"), " (no partial RunRecord was written)"))
        return 130
    except (BrokenPipeError, PipeClosed):  # the reader closed the pipe (`rbench rankers | head`)
        quiet_stdout()
        return 0
    except SystemExit as exc:  # typer/click exits (--help)
        if exc.code == 1 and _stdout_gone():  # click or typer's rich met a closed pipe and exit 1
            quiet_stdout()
            return 0
        return int(exc.code or 0)
    except OSError as exc:
        line = _environment_error(exc)
        if line is None:
            return _internal_error(exc)
        _error_line(line)
        return 2
    except Exception as exc:
        kinds = _click_kinds()
        if isinstance(exc, kinds["NoArgsIsHelpError"]):  # typer printed the help (to stdout) already
            _error_line(f"{exc.ctx.command_path} needs a command{_commands(exc.ctx)} "
                        f"(see {exc.ctx.command_path} --help)")
            return 2
        if isinstance(exc, kinds["ClickException"]):  # a usage error: bad or missing option, unknown command
            _error_line(_usage_message(exc))
            return 2
        if isinstance(exc, kinds["Abort"]):
            if isinstance(exc.__cause__, EOFError):  # click turns any EOFError (a truncated gzip) into Abort
                _error_line(f"input ended early, a file is truncated? ({exc.__cause__ or 'EOFError'})")
                return 2
            err.print(styled(("interrupted", "yellow"), " (no partial RunRecord was written)"))
            return 130
        return _internal_error(exc)


def _internal_error(exc: BaseException) -> int:
    fault = ranker_fault(exc)  # a ranker's bug is the ranker's: one line naming it, exit 2 (rbench.core.faults)
    if fault is not None:
        if _DEBUG:
            err.print_exception(max_frames=20)
        _error_line(fault)
        return 2
    err.print_exception(max_frames=8)
    err.print(styled(("internal error:", "bold red"), f" {type(exc).__name__}: {exc}"), soft_wrap=True)
    return 1


def _environment_error(exc: OSError) -> str | None:
    """One line for what the machine refused (permissions, a read-only or full disk), naming the
    path; None for other OS errors (those are bugs to report, with their traceback)."""
    import errno

    where = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return f"no space left writing {where}: free some space and run again (files written before are intact)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        from rbench.core import paths

        try:
            home = paths.home()
        except RBenchError as bad_home:  # RBENCH_HOME itself is unusable: that is the line to print
            return str(bad_home)
        hint = (f"; rbench keeps its data in {home}: make it writable or set RBENCH_HOME to a folder that is"
                if str(where).startswith(str(home)) else "")
        return f"cannot write {where} ({exc.strerror}){hint}"
    return None


def _stdout_gone() -> bool:
    """Whether stdout met a closed pipe: click wraps it (``_PacifyFlushWrapper``), rich points its
    descriptor at /dev/null (``Console.on_broken_pipe``)."""
    import os

    if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
        return True
    try:
        now, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (now.st_dev, now.st_ino) == (null.st_dev, null.st_ino)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
