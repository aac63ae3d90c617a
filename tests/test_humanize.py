"""The text helpers every human view shares: relative times, colour policy, short paths, tables."""

import io
import time

import pytest

from memoryd.model.humanize import (
    Painter,
    ago,
    clip,
    clock_time,
    parse_ts,
    short_path,
    table,
    use_color,
)


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (0, "just now"),
        (4.9, "just now"),
        (42, "42 s ago"),
        (59.9, "59 s ago"),
        (60, "1 min ago"),
        (3599, "59 min ago"),
        (3600, "1 h ago"),
        (47 * 3600, "47 h ago"),
        (2 * 86400, "2 d ago"),
        (400 * 86400, "400 d ago"),
        (-180, "in 3 min"),
    ],
)
def test_ago_reads_as_people_say_it(delta: float, text: str) -> None:
    now = 1_800_000_000.0
    assert ago(now - delta, now) == text


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_policy_follows_no_color_and_the_terminal() -> None:
    assert use_color("auto", _Tty(), {}) is True
    assert use_color("auto", io.StringIO(), {}) is False  # a pipe
    assert use_color("auto", _Tty(), {"NO_COLOR": "1"}) is False
    assert use_color("auto", _Tty(), {"NO_COLOR": ""}) is True  # empty means unset
    assert use_color("auto", _Tty(), {"TERM": "dumb"}) is False
    assert use_color("always", io.StringIO(), {"NO_COLOR": "1"}) is True
    assert use_color("never", _Tty(), {}) is False
    assert Painter(False)("x", "warn") == "x"
    assert Painter(True)("x", "warn") == "\x1b[33mx\x1b[0m"


def test_timestamps_parse_and_render_in_utc() -> None:
    when = parse_ts("2026-12-01T10:20:30Z")
    assert when == parse_ts("2026-12-01T11:20:30+01:00")
    assert when is not None
    assert parse_ts("yesterday") is None
    assert parse_ts(True) is None
    assert clock_time(when, when + 60, utc=True) == "10:20:30Z"
    assert clock_time(when, when + 10 * 86400, utc=True) == "Dec 01 10:20Z"
    assert clock_time(when, when + 400 * 86400, utc=True) == "2026-12-01 10:20Z"
    local = clock_time(when, when + 1)
    assert local == time.strftime("%H:%M:%S", time.localtime(when))


def test_short_path_uses_tilde_only_for_the_home_folder() -> None:
    assert short_path("/home/ann/.claude/x", "/home/ann") == "~/.claude/x"
    assert short_path("/home/ann", "/home/ann/") == "~"
    assert short_path("/home/anna/x", "/home/ann") == "/home/anna/x"
    assert short_path("/tmp/a\nb", None) == "/tmp/a\\nb"


def test_table_fits_the_width_by_shrinking_the_name_column() -> None:
    rows = [["a-very-long-project-name-indeed", "project", "12"], ["b", "agent", "3"]]
    wide = table(["NAME", "KIND", "FILES"], rows, 100)
    assert wide[0] == "NAME                             KIND     FILES"
    assert wide[1] == "a-very-long-project-name-indeed  project  12"
    narrow = table(["NAME", "KIND", "FILES"], rows, 30)
    assert all(len(line) <= 30 for line in narrow)
    assert narrow[1] == "a-very-long-p…  project  12"
    assert clip("abc", 2) == "a…"
    assert clip("abc", 0) == ""
