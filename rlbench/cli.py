"""The ``rlbench`` command: picks one of ``rlbench.commands`` and turns what it raises into
one line and an exit code (2 for bad input, with nothing started)."""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence

from rich.console import Console

from rlbench.commands import COMMANDS, HELP, USAGE
from rlbench.errors import ConfigError, UnknownNameError, one_line, quote
from rlbench.harness.render import inert_console
from rlbench.numerics_environment import allow_restart, asks_for_portable, pin_portable
from rlbench.version import __version__

__all__ = ["HELP", "main"]

# the commands that compute a run's numbers: numerics=portable pins their kernels first
COMPUTING = ("run", "regress", "tune", "dataset")
BAD_PATH_ERRNOS = (errno.ENAMETOOLONG, errno.ELOOP)
ERROR_LIMIT = 2000  # characters of an error line; the message is cut, never wrapped


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for bad input, 1 if a run failed)."""
    args = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    if not console.is_terminal:  # logs and CI: wide enough that tables are never truncated
        console = Console(width=160)
    console = inert_console(console)  # a store's names and tags print as text, never codes
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        if args:
            return 0
        print(f"rlbench: error: give a command ({', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    if args[0] == "--version":
        print(f"rlbench {__version__}")
        return 0
    bad = next((word for word in args if "\x00" in word), None)
    if bad is not None:  # no path or name holds one; the OS refuses it in paths
        print(f"rlbench: error: the word {quote(bad)} holds a NUL character", file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    if argv is None:  # the rlbench command's own process: it may start itself again
        allow_restart(args)
    if command in COMPUTING and asks_for_portable(rest):
        pin_portable()  # before torch and numpy load; a refusal is the sweep's to say
    if command in HELP and any(word in ("-h", "--help") for word in rest):
        print(HELP[command], end="")
        return 0
    try:
        if command not in COMMANDS:
            raise UnknownNameError("command", command, list(COMMANDS))
        return COMMANDS[command].run(rest, console)
    except ConfigError as err:  # bad input, an unreachable store or cluster: nothing started
        details = getattr(err, "details", None)  # a recipe's own traceback, whole
        if details:
            print(details, end="", file=sys.stderr)
        print(f"rlbench: error: {one_line(err, limit=ERROR_LIMIT)}", file=sys.stderr)
        return 2
    except OSError as err:  # a path in the user's words the OS cannot look up
        if err.errno not in BAD_PATH_ERRNOS:
            raise
        print(f"rlbench: error: {quote(str(err.filename))}: {err.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.signals import Terminated

        what = "terminated" if isinstance(stop, Terminated) else "interrupted"
        if command == "run":
            print(f"rlbench: {what}; the runs that ended are in the store, the stopped "
                  "ones are marked KILLED: the same command again runs what is left",
                  file=sys.stderr)
        elif command == "tune":
            print(f"rlbench: {what}; a trial in progress is queued again with its settings "
                  "and its runs are marked KILLED: the same command again continues the "
                  "study", file=sys.stderr)
        else:
            print(f"rlbench: {what}", file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
