"""`python -m memoryd` runs the command line."""

from memoryd.cli import entry

entry()
