"""The long-running process: a loop fed by batches of events (one thread reads them), the
sessions it keeps per dir, its watches and housekeeping.
May import: discover, dream, indexing, model, recall, storage, trash, versions, and the flat
modules.
"""
