"""What every command shares: its output, its errors, and the ``--config`` option.

Errors are one red line on stderr and exit status 2, never a traceback: a command-line
user gets the reason and what to do, as the API's clients do.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from loader.config import ConfigError, Settings, load_settings

# Pipes and CI logs get a width that fits the comparison table instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 132)
err_console = Console(stderr=True)

ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="TOML configuration file (see deploy/loader.example.toml).")
]


def fail(message: str) -> typer.Exit:
    # soft_wrap: a path in the message stays on one line (copyable), whatever the width
    err_console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(code=2)


def settings_or_fail(config: Path | None, **overrides: object) -> Settings:
    try:
        return load_settings(config, **overrides)
    except ConfigError as exc:
        raise fail(str(exc)) from None
