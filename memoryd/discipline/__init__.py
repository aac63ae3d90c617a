"""Rules on memory content: JSONL record stores, findings, acknowledged flags.
May import: discover, dream, indexing, model, storage, and the flat modules.
"""
