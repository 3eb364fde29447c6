"""``python -m loader``: the same CLI as ``.venv/bin/loader`` (handy in tests and containers)."""

from cli.simulation import app

app()
