"""Claude Code integration: the hooks (`memoryd hook EVENT`), settings install/uninstall
and the plugin folder shipped as package data.
May import: discover, model, recall, storage, and the flat modules.
"""
