"""The vocabulary every stage shares: table schemas and declarations, updates and batches,
client-facing errors, crash-safe file writes, failpoints. Imports no stage."""
