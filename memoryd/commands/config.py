"""`memoryd config check|show`: validate the configuration, or print the effective one as TOML."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, TextIO

from memoryd.commands.common import EXIT_OK

if TYPE_CHECKING:
    from memoryd.runtime import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "config",
        description="Validate the configuration (every problem at once) or "
        "print the effective configuration.",
    )
    config_sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    config_sub.add_parser("check", help="validate; exit 2 listing every problem")
    config_sub.add_parser("show", help="print the effective configuration as TOML")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def run(args: argparse.Namespace, rt: Runtime, out: TextIO) -> int:
    from memoryd.config import config_as_dict

    if args.config_command == "check":
        out.write(f"{rt.config.source}: configuration is valid\n")
        return EXIT_OK
    data = config_as_dict(rt.config)
    out.write(f"# effective configuration (from {rt.config.source})\n")
    for section, table in data.items():
        assert isinstance(table, dict)
        if section == "dirs":  # a table per dir, named by its path
            table = {f"dirs.{json.dumps(path)}": values for path, values in table.items()}
        for name, values in (table if section == "dirs" else {section: table}).items():
            out.write(f"\n[{name}]\n")
            for key, value in values.items():
                out.write(f"{key} = {_toml_value(value)}\n")
    return EXIT_OK
