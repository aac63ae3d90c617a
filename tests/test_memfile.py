"""Parsing one memory file: every input gives a value, never an exception."""

import time
import tracemalloc
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.model.memfile import (
    MAX_FRONTMATTER_BYTES,
    Memory,
    NotMemory,
    Problem,
    _yaml_refuses,
    parse_flat,
    parse_memory,
)
from memoryd.model.yamlstrings import load_yaml_strings


def test_flat_frontmatter_is_read_without_yaml() -> None:
    """Flat `key: value` lines take the fast path and keep every field as a string."""
    data = b"---\nname: Deploy flow\ndescription: how staging deploys\ntype: project\n---\nbody\n"
    parsed = parse_memory("deploy.md", data)
    assert isinstance(parsed, Memory)
    assert (parsed.name, parsed.description, parsed.type) == (
        "Deploy flow",
        "how staging deploys",
        "project",
    )
    assert parsed.body == "body\n"
    assert parse_flat("name: x\ndescription: y") == {"name": "x", "description": "y"}


def test_fast_path_agrees_with_yaml_on_quoting() -> None:
    """Quoted values decode as YAML would; anything unusual falls back to the YAML loader."""
    assert parse_flat("a: 'it''s'\nb: \"two words\"") == {"a": "it's", "b": "two words"}
    assert parse_flat("a: [1, 2]") == {"a": ["1", "2"]}
    assert parse_flat("a: [x: 1]") is None
    assert parse_flat("a: x # comment") is None
    assert parse_flat("metadata:\n  type: user") == {"metadata": {"type": "user"}}
    assert parse_flat("related:\n  - a.md\n  - b.md") == {"related": ["a.md", "b.md"]}
    assert parse_flat("metadata:\n  type: user\n   odd: indent") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'name: x\ndescription: "a: b"\nmetadata:\n  type: user\n  id: 1-2',
            {"name": "x", "description": "a: b", "metadata": {"type": "user", "id": "1-2"}},
        ),
        ("a:\nb: c\nd:", {"a": "", "b": "c", "d": ""}),
        ("name: x  \ntype: user", {"name": "x", "type": "user"}),
        ("name: x\r\nmetadata:\r\n  type: user\r", {"name": "x", "metadata": {"type": "user"}}),
        ("metadata:\n\n  type: user", {"metadata": {"type": "user"}}),
        (
            'a: it\'s "fine"\nb: C#\nc: http://x/y',
            {"a": 'it\'s "fine"', "b": "C#", "c": "http://x/y"},
        ),
        ("description: a: b", None),
        ("name: x:", None),
        ("name: ~", None),
        ('name: "a\\b"', None),
        ("a: x\n  b: y", None),
        ("a: x\na: y", None),
        ("m:\n  a: x\n  a: y", None),
        ("m:\n  a: x\n    b: y", None),
    ],
)
def test_flat_reading_of_common_and_near_common_shapes(
    text: str, expected: dict[str, object] | None
) -> None:
    """The shapes agents write most, and their near misses that must go to the YAML loader."""
    assert parse_flat(text) == expected


@pytest.mark.parametrize(
    ("data", "description"),
    [
        (b"---\ndescription: d\n...\nbody", "d"),
        (b"---\ndescription: d\n--- \t\nbody", "d"),
        (b"---\ndescription: d\n---", "d"),
        (b"---\r\ndescription: d\r\n---\r\nbody", "d"),
        (b"---\ndescription: d\n----\nx: y\n---\n", None),
        (b"---\ndescription: d\n--- x\n---\n", None),
        (b"---\n" + b"a: b\n" * 28 + b"description: d\n---\n", "d"),
        (b"---\n" + b"a: b\n" * 29 + b"description: d\n---\n", None),
    ],
    ids=[
        "dots",
        "trailing-blanks",
        "at-end",
        "crlf",
        "rule",
        "dashes-then-text",
        "line-30",
        "line-31",
    ],
)
def test_frontmatter_closes_at_the_first_closing_line_within_30(
    data: bytes, description: str | None
) -> None:
    """`---` or `...` with only blanks after it closes; past 30 lines the file is a Problem."""
    parsed = parse_memory("a.md", data)
    if description is None:
        assert isinstance(parsed, Problem)
    else:
        assert isinstance(parsed, Memory) and parsed.description == description


def test_bom_is_skipped_and_bad_utf8_offsets_count_after_it() -> None:
    """A UTF-8 BOM is not part of the text; a decoding error names the byte after it."""
    parsed = parse_memory("a.md", b"\xef\xbb\xbf---\nname: x\n---\n")
    assert isinstance(parsed, Memory) and parsed.name == "x"
    bad = parse_memory("b.md", b"\xef\xbb\xbf---\n\xff")
    assert isinstance(bad, Problem) and bad.message == "not UTF-8 text (byte 4)"


def test_hash_inside_a_plain_description_is_text_not_a_comment() -> None:
    """`review of #2041 dedup` keeps its `#2041`: YAML would cut it as a comment."""
    data = (
        b"---\nname: review-2041\ndescription: Adversarial review of #2041 cc-watch dedup\n"
        b"metadata:\n  type: project\n---\nbody\n"
    )
    parsed = parse_memory("r.md", data)
    assert isinstance(parsed, Memory)
    assert parsed.description == "Adversarial review of #2041 cc-watch dedup"
    assert parsed.type == "project"
    quoted = parse_memory("q.md", b"---\nname: x\ndescription: 'quoted #1'\n---\n")
    assert isinstance(quoted, Memory) and quoted.description == "quoted #1"


def test_nested_metadata_type_is_used() -> None:
    """`metadata.type` counts as the type when there is no top-level one."""
    parsed = parse_memory("a.md", b"---\nname: a\nmetadata:\n  type: feedback\n---\nx")
    assert isinstance(parsed, Memory)
    assert parsed.type == "feedback"


def test_yaml_scalars_stay_strings() -> None:
    """YAML 1.1 would turn `no` into False and dates into date objects; memoryd keeps text."""
    parsed = parse_memory("a.md", b"---\nname: no\nmodified: 2026-01-02\nn: 07\n---\n")
    assert isinstance(parsed, Memory)
    assert parsed.frontmatter == {"name": "no", "modified": "2026-01-02", "n": "07"}


def test_bom_and_crlf_are_read() -> None:
    """A UTF-8 BOM does not hide the frontmatter, and CRLF line endings parse."""
    data = "\ufeff---\r\nname: 한국어 메모\r\ntype: user\r\n---\r\n본문\r\n".encode()
    parsed = parse_memory("k.md", data)
    assert isinstance(parsed, Memory)
    assert parsed.name == "한국어 메모"
    assert parsed.type == "user"


def test_no_frontmatter_is_not_a_memory() -> None:
    """A README without frontmatter is a note: kept, never indexed automatically."""
    assert isinstance(parse_memory("README.md", b"# Notes\n\ntext"), NotMemory)


def test_colon_inside_a_flat_value_is_read_leniently() -> None:
    """Real agents write `: ` inside descriptions; strict YAML refuses, memoryd reads it."""
    data = (
        b"---\nname: x\ndescription: don't type it as `: object`; leave it\ntype: feedback\n---\n"
    )
    parsed = parse_memory("x.md", data)
    assert isinstance(parsed, Memory)
    assert parsed.description == "don't type it as `: object`; leave it"


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"---\nname: [unclosed\n---\nbody", "bad_yaml"),
        (b"---\nname: x\n  bad: indent: here\n---\n", "bad_yaml"),
        (b"---\n- a\n- b\n---\n", "bad_frontmatter"),
        (b"---\nname: x\n" + b"k: v\n" * 40, "bad_frontmatter"),
        (b"---\nname: x\x00\x01\n---\n", "binary"),
        (b"---\nname: \xff\xfe\n---\n", "not_utf8"),
    ],
    ids=["unclosed-flow", "bad-indent", "list", "unclosed-frontmatter", "binary", "latin1"],
)
def test_bad_files_are_problems_naming_the_fix(data: bytes, kind: str) -> None:
    """Malformed input becomes a Problem with a reason and a hint, never an exception."""
    parsed = parse_memory("bad.md", data)
    assert isinstance(parsed, Problem)
    assert parsed.kind == kind
    assert parsed.message
    assert parsed.hint
    assert parsed.sha256


def test_yaml_bomb_is_refused_quickly_and_small() -> None:
    """A billion-laughs bomb is refused (aliases are not allowed) in milliseconds, small memory."""
    bomb = ["---", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        bomb.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    bomb.append("---")
    data = "\n".join(bomb).encode()
    tracemalloc.start()
    started = time.perf_counter()
    parsed = parse_memory("bomb.md", data)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(parsed, Problem)
    assert "alias" in parsed.message
    assert elapsed < 1.0  # a bound on runaway expansion, not a performance target
    assert peak < 5_000_000


def test_oversized_file_is_a_problem() -> None:
    """A 2 MiB file is over the 1 MiB cap and reported, not parsed."""
    data = b"---\nname: big\n---\n" + b"x" * (2 * 1024 * 1024)
    parsed = parse_memory("big.md", data)
    assert isinstance(parsed, Problem)
    assert parsed.kind == "too_large"


def test_oversized_frontmatter_is_a_problem() -> None:
    """Frontmatter over 16 KiB is refused even when the file is small enough."""
    data = b"---\nname: x\ndescription: " + b"y" * 20000 + b"\n---\nbody"
    parsed = parse_memory("fm.md", data)
    assert isinstance(parsed, Problem)
    assert parsed.kind == "bad_frontmatter"


@pytest.mark.parametrize("char", ["y", "\u00e9", "\u20ac", "\U0001f600"])
def test_the_frontmatter_limit_counts_bytes_at_its_edge(char: str) -> None:
    """The 16 KiB limit is of UTF-8 bytes, for 1- to 4-byte characters alike: a block one
    byte over it is refused, one at it is read (the count is skipped only for blocks too
    short to reach it)."""
    width = len(char.encode())
    head = "name: x\ndescription: "
    room = MAX_FRONTMATTER_BYTES - len(head)
    for size, refused in ((room - room % width, False), (room - room % width + width, True)):
        fm = head + char * (size // width)
        assert len(fm.encode()) == len(head) + size
        parsed = parse_memory("fm.md", f"---\n{fm}\n---\nbody".encode())
        assert isinstance(parsed, Problem) is refused
        assert not refused or parsed.kind == "bad_frontmatter"  # type: ignore[union-attr]


def test_description_newlines_fold_into_one_line() -> None:
    """A multi-line description folds to one line so an index pointer stays one line."""
    data = b"---\nname: x\ndescription: |\n  first line\n  second line\n---\n"
    parsed = parse_memory("x.md", data)
    assert isinstance(parsed, Memory)
    assert parsed.description == "first line second line"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_a_value(data: bytes) -> None:
    """No byte string makes the parser raise."""
    assert isinstance(parse_memory("f.md", b"---\n" + data), Memory | NotMemory | Problem)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True),
        st.text(
            st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=30
        ),
        max_size=5,
    )
)
def test_fast_path_matches_the_yaml_loader(fields: dict[str, str]) -> None:
    """Whenever the fast path accepts frontmatter, the YAML loader reads the same strings."""
    text = "\n".join(f"{k}: {v}" for k, v in fields.items())
    fast = parse_flat(text)
    if fast is None:
        return
    try:
        slow = load_yaml_strings(text) or {}
    except Exception:
        pytest.fail(f"fast path accepted what YAML refuses: {text!r}")
    assert fast == {k: ("" if v is None else v) for k, v in slow.items()}


_WORDS = st.lists(
    st.sampled_from(["b", " b", ": b", ":b", "\u00e9", "\u2028", "\u3000", '"', "#"]), max_size=6
).map(lambda middle: "a" + "".join(middle) + "c")
_KEYS = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        _KEYS, st.one_of(_WORDS, st.dictionaries(_KEYS, _WORDS, min_size=1)), min_size=1
    )
)
def test_what_the_loader_is_skipped_for_it_refuses(fields: dict[str, Any]) -> None:
    """Frontmatter the YAML loader is not run on, as sure to fail, does fail in the loader."""
    lines = []
    for key, value in fields.items():
        if isinstance(value, str):
            lines.append(f"{key}: {value}")
        else:
            lines += [f"{key}:", *(f"  {k}: {v}" for k, v in value.items())]
    text = "\n".join(lines)
    if _yaml_refuses(text):
        with pytest.raises(yaml.YAMLError):
            load_yaml_strings(text)
