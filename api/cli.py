"""The `meshplan` command line. Each package registers its own commands; this module only joins them
and turns bad input into a clear message with exit code 2 (never a traceback)."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from planner.specs.errors import InvalidInput, MeshplanError, validation_errors

app = typer.Typer(
    name="meshplan",
    help="Automatic TP/PP/DP parallelism planner: profile, plan, serve, apply.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: every flag name printed whole, at any width (also when piped)
)
err_console = Console(stderr=True)
if not err_console.is_terminal:  # logs and pipes: one line per error, whatever COLUMNS says
    err_console = Console(stderr=True, width=1_000_000)


def _register() -> None:
    from api import serve_cli
    from api.exporters import cli as export_cli
    from planner import cli as planner_cli
    from profiler import cli as profiler_cli
    from runtime import calibrate as calibrate_cli
    from runtime import cli as runtime_cli

    for module in (planner_cli, profiler_cli, runtime_cli, calibrate_cli, export_cli, serve_cli):
        module.register(app)


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI; bad input exits with code 2 and a message naming the field."""
    try:
        app(args=argv, standalone_mode=True)
    except MeshplanError as exc:
        for e in exc.errors if isinstance(exc, InvalidInput) else [exc]:
            err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except ValidationError as exc:  # a model validated outside the request paths above: still a fix per field
        for d in validation_errors(exc):
            err_console.print(f"[bold red]error:[/] {escape(str(MeshplanError(**d)))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
