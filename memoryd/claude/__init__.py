"""Claude Code integration: the hooks (`memoryd hook EVENT`), settings install/uninstall
and the plugin folder shipped as package data.
May import: commands, discipline, discover, model, recall, storage, views, and the flat modules.
"""
