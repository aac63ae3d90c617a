"""The dream pass, one use case: read and plan (also for `explain` and `ack`), write, report;
and its pure rules (staleness, duplicates, contradictions).
May import: discipline, discover, indexing, model, recall, storage, trash, versions, and the
flat modules.
"""
