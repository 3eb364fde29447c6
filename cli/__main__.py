"""``python -m cli``: the same command line as ``.venv/bin/loader`` (handy in tests and containers)."""

from cli.app import main

main()
