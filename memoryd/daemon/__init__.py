"""The long-running process: a loop fed by batches of events (one thread reads them), the
sessions it keeps per dir, its watches and housekeeping.
May import every folder but commands and claude.
"""
