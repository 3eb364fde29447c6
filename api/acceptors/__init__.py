"""Acceptor processes: HTTP served by several processes, intake still numbered and logged by one (gateway.py)."""
