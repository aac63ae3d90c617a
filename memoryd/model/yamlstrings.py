"""PyYAML with memoryd's rules: every scalar a string, aliases refused (pure).

Imported only when a frontmatter block is not the flat `key: value` lines memfile reads
itself (most are): PyYAML costs ~8 ms of a command's start-up.
"""

from typing import Any

import yaml


class _StringOnlyLoader(yaml.SafeLoader):
    """Every scalar stays a string (no `no` -> False, no dates); aliases are refused (bombs)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases are not allowed in memory frontmatter", event.start_mark
            )
        return super().compose_node(parent, index)


def _construct_str(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


def _strings_only(loader: Any) -> None:
    """Every plain scalar a string (no implicit resolvers), and every scalar tag (`!!int 3`)
    read by the string constructor."""
    loader.yaml_implicit_resolvers = {}
    for tag in ("bool", "int", "float", "null", "timestamp", "binary", "str"):
        loader.add_constructor(f"tag:yaml.org,2002:{tag}", _construct_str)


_strings_only(_StringOnlyLoader)
_CStringOnlyLoader: Any = None
if getattr(yaml, "__with_libyaml__", False):

    class _CStringOnlyLoader(yaml.CSafeLoader):  # type: ignore[no-redef]
        """The same rules, composed by libyaml; aliases are refused after composing."""

    _strings_only(_CStringOnlyLoader)


def _refuse_aliases(root: yaml.Node) -> None:
    """An alias composes to a node met twice: refuse it, as the pure loader does."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise yaml.composer.ComposerError(
                None, None, "aliases are not allowed in memory frontmatter", node.start_mark
            )
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack += (key, value)


def load_yaml_strings(text: str) -> Any:
    if _CStringOnlyLoader is None:
        return yaml.load(text, Loader=_StringOnlyLoader)  # noqa: S506 - the loader is safe
    loader = _CStringOnlyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


# What each kind of YAML error means, in words of memoryd's own: the loader's messages quote
# the frontmatter (`could not determine a constructor for the tag '!secret-value'`), and a
# problem's message goes to the audit log and command output, which never carry memory text.
YAML_CATEGORIES = (
    (yaml.constructor.ConstructorError, "a tag or value memoryd does not accept"),
    (yaml.composer.ComposerError, "an alias or anchor"),
    (yaml.scanner.ScannerError, "characters YAML cannot read"),
    (yaml.parser.ParserError, "a structure YAML cannot parse"),
)


def hint_for_yaml(error: Exception) -> str:
    """The kind of a YAML error and where it is (line and column in the file), no text."""
    kinds = (what for kind, what in YAML_CATEGORIES if isinstance(error, kind))
    category = next(kinds, "a YAML error")
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is None:
        return category
    # The mark counts from the frontmatter's first line, which is the file's second.
    return f"{category} at line {mark.line + 2}, column {mark.column + 1}"
