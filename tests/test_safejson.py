"""The bounded JSON and TOML readers (memoryd.model.safejson): a document nested past the bound or
over its size is an OverLimit (a ValueError) before json or tomllib recurse into it; every other
document parses exactly as json and tomllib parse it; and no other module parses either."""

import json
import re
import tomllib
from pathlib import Path

import pytest

import memoryd
from memoryd.model.safejson import MAX_DEPTH, OverLimit, loads, loads_toml

DEEP = MAX_DEPTH + 1


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,  # 10 KB: RecursionError from json itself
        "[" * 5000,  # never closed: json descends before it finds the end missing
        '{"a":' * DEEP + "1" + "}" * DEEP,
        '["\\\\", ' * DEEP + "1" + "]" * DEEP,  # an escaped backslash ends no string early
        '["[", ' * DEEP + '"]"' + "]" * DEEP,  # brackets in strings between the levels
    ],
    ids=["arrays", "unclosed", "objects", "escaped-backslash", "strings-between"],
)
def test_json_nested_past_the_bound_is_refused_as_a_value_error(text: str) -> None:
    """Nested deeper than MAX_DEPTH, as text or as bytes: OverLimit, which callers catch as
    the ValueError of any malformed file."""
    for data in (text, text.encode(), text.encode("utf-16")):
        with pytest.raises(OverLimit, match="nested"):
            loads(data)
    assert issubclass(OverLimit, ValueError)


@pytest.mark.parametrize(
    "value",
    [
        ["[" * 5000, "{" * 5000],  # brackets inside strings are text, however many
        {"q": '\\"[' * 3000, "b": "\\" * 9, "c": '"[{'},  # escaped quotes and backslashes
        [[[[1]]], {"a": [{"b": []}]}],
        json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH),  # at the bound exactly
        "é[ü{" * 100,
    ],
)
def test_json_within_the_bound_parses_as_json_does(value: object) -> None:
    """Any document at or under the bound gives what json.loads gives, from str and bytes."""
    text = json.dumps(value)
    assert loads(text) == json.loads(text) == value
    assert loads(text.encode()) == value
    assert loads(json.dumps(value, ensure_ascii=False).encode("utf-16")) == value


def test_an_unterminated_string_counts_no_brackets_after_it() -> None:
    """json stops at a string that never closes: the brackets after its quote are in it."""
    with pytest.raises(ValueError, match="Unterminated") as caught:
        loads('["' + "[" * 5000)
    assert not isinstance(caught.value, OverLimit)


def test_json_over_its_size_is_refused_unparsed() -> None:
    with pytest.raises(OverLimit, match="over 10 bytes"):
        loads(b'{"a": "12345"}', max_bytes=10)
    assert loads(b'{"a": 1}', max_bytes=10) == {"a": 1}


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 5000 + "]" * 5000,
        "a = " + "{b = " * 400 + "1" + "}" * 400,  # tomllib's own limit is near 340 here
        "a" + ".a" * DEEP + " = 1",  # dotted keys nest without a bracket
        "[a" + ".a" * DEEP + "]\nx = 1",
    ],
    ids=["arrays", "inline-tables", "dotted-keys", "table-header"],
)
def test_toml_nested_past_the_bound_is_refused(text: str) -> None:
    with pytest.raises(OverLimit, match="nested"):
        loads_toml(text)


def test_toml_strings_and_comments_hold_no_nesting() -> None:
    """Brackets in comments and in the four kinds of string count for nothing; the document
    parses as tomllib parses it."""
    text = (
        "# " + "[" * 500 + "\n"
        'a = "[[[\\"[[" # ' + "{" * 500 + "\n"
        "b = '''\n" + "[" * 500 + "\n'''\n"
        'c = """x\\"""" ' + "\n"
        "d = '" + "[" * 500 + "'\n"
        'e = """' + "[" * 500 + '"""""\n'
        "f = [[1], {g = [2]}]\n"
        "[[h]]\n"
    )
    assert loads_toml(text) == tomllib.loads(text)


# A call of json's or tomllib's parser, or an import of one by name.
_PARSER = re.compile(r"\b(?:json|tomllib)\.loads?\(|from (?:json|tomllib) import")


def test_no_module_but_safejson_parses_json_or_toml() -> None:
    """Every JSON, JSONL and TOML document memoryd reads goes through the bounded readers:
    a parse anywhere else would bring the RecursionError back."""
    root = Path(memoryd.__file__).parent
    offenders = [
        f"{path.relative_to(root)}:{text.count(chr(10), 0, found.start()) + 1}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "safejson.py"
        for text in [path.read_text()]
        for found in _PARSER.finditer(text)
    ]
    assert offenders == []


@pytest.mark.timeout(30)
def test_a_large_document_is_measured_in_linear_time() -> None:
    """Megabytes of escaped quotes and brackets inside strings, and of shallow arrays: each
    is measured in a few passes over its bytes, never a rescan per quote or bracket."""
    in_strings = json.dumps(['\\"[{' * 1000] * 2000)
    shallow = "[" + ",".join(["[1]"] * 500_000) + "]"
    for text in (in_strings, shallow):
        assert loads(text, max_bytes=32 << 20)
