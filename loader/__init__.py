"""The loader service core (intake, WAL, pending store, dispatcher, Spark workers).

For now it holds the command-line interface; the service arrives with the loader-service issue.
"""
