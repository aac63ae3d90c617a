"""Rules on memory content: secrets flagged and masked (`secrets.mask`, the one masking
step), JSONL record stores, findings, acknowledged flags.
May import: discover, dream, indexing, model, storage, and the flat modules.
"""
