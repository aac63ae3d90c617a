"""The long-running process: `memoryd run`'s event source, loop, sessions and housekeeping.

May import any of memoryd's layers below it; nothing outside `cli` imports it but `instance`.
"""
