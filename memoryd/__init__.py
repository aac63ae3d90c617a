"""memoryd: keeps coding agents' memory folders healthy, deterministically and reversibly."""

__version__ = "0.1.0"
