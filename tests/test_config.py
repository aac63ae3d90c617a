"""Configuration: defaults, every problem reported at once, the example file is complete."""

from pathlib import Path

import pytest

from memoryd.config import Config, build_config, config_as_dict, load_config, parse_duration
from memoryd.errors import ConfigError
from memoryd.paths import AppPaths

ROOT = Path(__file__).resolve().parents[1]


def test_durations_parse() -> None:
    """Durations read as "2s", "10m", "1h", "7d" (and "250ms")."""
    assert [parse_duration(x) for x in ("2s", "10m", "1h", "7d", "250ms")] == [
        2, 600, 3600, 604800, 0.25]
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    """Unknown keys, wrong types, bad durations and a file-not-folder all come in one error."""
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    data = {
        "index": {"separater": " - ", "max_lines": "200", "new_file_grace": "10 seconds"},
        "paths": {"claude_home": str(a_file)},
        "dream": {"pile_up": 0},
        "bogus": {},
    }
    with pytest.raises(ConfigError) as caught:
        build_config(data, "test.toml")
    problems = "\n".join(caught.value.problems)
    for expected in ("index.separater: unknown key", "index.max_lines: expected a whole number",
                     "index.new_file_grace: not a duration", "paths.claude_home:",
                     "is a file, not a folder", "dream.pile_up: must be at least 1",
                     "bogus: unknown section"):
        assert expected in problems
    assert len(caught.value.problems) == 6


def test_dirs_section_sets_mode_and_repo_root(tmp_path: Path) -> None:
    """`[dirs."<path>"]` sets a dir's index mode and repo root; a bad mode is named."""
    cfg = build_config({"dirs": {str(tmp_path): {"mode": "off", "repo_root": str(tmp_path)}}}, "t")
    assert cfg.override_for(tmp_path).mode == "off"
    with pytest.raises(ConfigError, match=r'dirs\.".*"\.mode: expected one of auto, manage, off'):
        build_config({"dirs": {str(tmp_path): {"mode": "sometimes"}}}, "t")


def test_example_config_documents_every_key_with_its_default(tmp_path: Path) -> None:
    """config.example.toml parses, holds every key, and its values are the built-in defaults."""
    example = ROOT / "config.example.toml"
    paths = AppPaths(tmp_path / "none.toml", tmp_path, tmp_path)
    cfg = load_config(example, paths)
    ours = config_as_dict(cfg)
    defaults = config_as_dict(Config())
    for section, table in defaults.items():
        if section == "dirs":
            continue
        assert isinstance(table, dict)
        for key, value in table.items():
            assert f"\n{key} = " in example.read_text() or f"\n# {key} = " in example.read_text(), (
                f"{section}.{key} is not documented in config.example.toml")
            if section != "paths":
                assert ours[section][key] == value, f"{section}.{key} differs from the default"


def test_missing_default_file_means_defaults(tmp_path: Path) -> None:
    """With no --config and no user file, the built-in defaults apply."""
    cfg = load_config(None, AppPaths(tmp_path / "config.toml", tmp_path, tmp_path))
    assert cfg == Config(source="built-in defaults", paths=cfg.paths)


def test_config_check_cli_exit_codes(env, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`config check` exits 0 on a valid file and 2 listing every problem on a bad one."""
    good = tmp_path / "good.toml"
    good.write_text('[watch]\ndebounce = "1s"\n')
    assert cli("--config", good, "config", "check").code == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[watch]\ndebounce = 3\nmax_wiat = "1s"\n')
    result = cli("--config", bad, "config", "check")
    assert result.code == 2
    assert "watch.debounce" in result.err and "watch.max_wiat: unknown key" in result.err
    assert str(bad) in result.err
    broken = tmp_path / "broken.toml"
    broken.write_text("[watch\n")
    assert cli("--config", broken, "config", "check").code == 2
    shown = cli("--config", good, "config", "show")
    assert shown.code == 0 and 'debounce = "1s"' in shown.out
    rows = [r for r in env.audit_rows() if r["event"] == "config.invalid"]
    assert len(rows) == 2
