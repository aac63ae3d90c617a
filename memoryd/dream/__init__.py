"""Deterministic consolidation of a memory dir: staleness, duplicates, contradictions."""
