"""Spilling pending updates to disk under a memory budget (Motwani and Thomas, SODA 2004)."""
