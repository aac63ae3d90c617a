"""Rules on memory content: secrets flagged and masked (`secrets.mask`, the one masking
step), JSONL record stores, findings, acknowledged flags.
May import model, storage, discover and the flat plumbing modules.
"""
