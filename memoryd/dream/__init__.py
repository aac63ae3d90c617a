"""The dream pass, one use case: read and plan (also for `explain` and `ack`), write, report;
and its pure rules (staleness, duplicates, contradictions).
May import indexing, versions, trash, recall, discover, discipline, model, storage, views.
"""
