"""Join views kept up to date (docs/join-views.md): commits.py reads what an input's Delta
versions added; maintainer.py runs a view's MJoin executor with A-Caching over them and
commits each view load once (the view's Delta table: loader/loading/sinks/view_delta.py)."""
