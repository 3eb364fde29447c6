"""The ``loader`` command: one typer app assembled from the command families.

=================== ==========================================================================
family              commands
=================== ==========================================================================
``cli.service``     ``serve``, ``demo``: run the service (and a demo producer)
``cli.remote``      ``submit``, ``export-trace``: talk to a running service
``cli.simulation``  ``simulate``, ``compare``, ``gen-trace``, ``sample``, ``report``: "what if"
=================== ==========================================================================
"""

from __future__ import annotations

import typer

from cli import remote, service, simulation

app = typer.Typer(
    name="loader",
    help="Real-time warehouse loader: the loading service, its client, and the scheduling simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for family in (service, remote, simulation):
    app.add_typer(family.commands)


def main() -> None:  # pragma: no cover - console entry point
    app()
