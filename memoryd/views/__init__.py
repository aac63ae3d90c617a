"""Views for people: pure renderers, rows in and text out (memoryd.humanize does the layout)."""
