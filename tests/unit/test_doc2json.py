"""Doc2JSON's merge rules, type checks and grounding, without a database."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kbpg_db.features.doc2json import build as d
from kbpg_db.features.doc2json.settings import parse_json_schema

FIELDS = parse_json_schema(
    {
        "fields": [
            {"name": "title", "type": "string"},
            {
                "name": "party",
                "type": "object",
                "fields": [
                    {"name": "name", "type": "string"},
                    {
                        "name": "address",
                        "type": "object",
                        "fields": [
                            {"name": "city", "type": "string"},
                            {"name": "lines", "type": "array", "item_type": "string"},
                        ],
                    },
                ],
            },
            {
                "name": "items",
                "type": "array",
                "items": {
                    "type": "object",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {
                            "name": "dims",
                            "type": "object",
                            "fields": [{"name": "w", "type": "number"}],
                        },
                    ],
                },
            },
        ]
    }
)


def run(windows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    values: dict[str, Any] = {}
    sources: dict[str, Any] = {}
    errors: list[Any] = []
    for i, given_values in enumerate(windows):
        good = d.checked(FIELDS, given_values, i, "", errors)
        d.merge(values, good, FIELDS, i, "", lambda _v: {"match": "none"}, sources)
    return values, sources, errors


def test_nested_objects_merge_key_by_key_at_every_depth() -> None:
    values, sources, errors = run(
        [
            {"party": {"name": "ACME", "address": {"city": "Oslo", "lines": ["Main St 1"]}}},
            {"party": {"address": {"lines": ["Main St 1", "Box 9"]}}},
            {"party": {"name": "ACME AS", "address": {"city": None}}, "title": "Order"},
        ]
    )
    assert errors == []
    assert values == {
        "party": {"name": "ACME AS", "address": {"city": "Oslo", "lines": ["Main St 1", "Box 9"]}},
        "title": "Order",
    }
    assert sources["party.name"]["window"] == 2
    assert sources["party.address.city"]["window"] == 0
    assert sources["party.address.lines[1]"]["window"] == 1


def test_arrays_of_objects_keep_identical_items_once_and_nested_types_are_checked() -> None:
    values, sources, errors = run(
        [
            {"items": [{"sku": "A", "dims": {"w": 2}}, {"sku": "B"}]},
            {"items": [{"dims": {"w": 2}, "sku": "A"}, {"sku": "C", "dims": {"w": "wide"}}]},
            {"items": "not a list", "party": ["not", "an", "object"]},
        ]
    )
    assert values["items"] == [
        {"sku": "A", "dims": {"w": 2}},
        {"sku": "B"},
        {"sku": "C", "dims": {}},
    ]
    assert sources["items[2].sku"]["window"] == 1
    assert [(e["field"], e["window"], e["error"]) for e in errors] == [
        ("items[].dims.w", 1, "expected a number, got string"),
        ("items", 2, "expected an array, got string"),
        ("party", 2, "expected an object, got list"),
    ]


def test_integer_accepts_whole_floats_only_and_booleans_are_not_numbers() -> None:
    ints = parse_json_schema(
        {"fields": [{"name": "n", "type": "integer"}, {"name": "x", "type": "number"}]}
    )
    errors: list[Any] = []
    assert d.checked(ints, {"n": 3.0, "x": True}, 0, "", errors) == {"n": 3}
    assert d.checked(ints, {"n": 3.5}, 0, "", errors) == {}
    assert [e["field"] for e in errors] == ["x", "n"]


def test_grounding_exact_case_number_fuzzy_and_none() -> None:
    text = "Header. Invoice from ACME Corp, total 1,234.50 EUR; terms: net 30-days. Paid."
    ground = d.grounder(text, 8, len(text))
    exact = ground("ACME Corp")
    assert (
        exact["match"] == "exact" and text[exact["char_start"] : exact["char_end"]] == "ACME Corp"
    )
    assert ground("acme corp")["match"] == "case"
    number = ground(1234.5)
    assert (
        number["match"] == "number"
        and text[number["char_start"] : number["char_end"]] == "1,234.50"
    )
    fuzzy = ground("Net 30 days")
    assert fuzzy["match"] == "fuzzy" and fuzzy["ratio"] >= 0.8
    assert ground("Header")["match"] == "none"  # outside the window
    assert ground("Zebra Holdings")["match"] == "none"
    assert ground(True) == {"match": "none"}
    assert ground(34)["match"] == "none"  # digits inside 1,234.50 are not the number 34


def test_grounding_never_approximates_a_number_date_or_version() -> None:
    text = (
        "Data were collected from 2000-2018 across 12 sites, with release v3.2.1 of the "
        "pipeline; the survey ran on 14 March 2019 in the northern districts."
    )
    ground = d.grounder(text, 0, len(text))
    # One digit off: before, "approximate" with the span "2000-201" at similarity 0.94.
    assert ground("2000-2019") == {"match": "none"}
    assert ground("v3.2.2 of the pipeline") == {"match": "none"}
    assert ground("15 March 2019") == {"match": "none"}
    exact = ground("2000-2018")
    assert exact["match"] == "exact"
    # Wording may differ; the numbers are there whole and the span covers them.
    loose = ground("collected from 2000-2018 accross 12 site")
    assert loose["match"] == "fuzzy"
    span = text[loose["char_start"] : loose["char_end"]]
    assert "2000-2018" in span and "12" in span and not span.endswith("201")
    wording = ground("northern district")
    assert wording["match"] in ("fuzzy", "exact")


@settings(max_examples=40, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(["alpha", "beta", "ga", "δέλτα", "缓存", "\n\n", "x.y"]),
        min_size=1,
        max_size=400,
    ),
    size=st.integers(min_value=200, max_value=260),
    overlap=st.integers(min_value=0, max_value=120),
)
def test_windows_cover_the_text_with_exact_overlaps(
    words: list[str], size: int, overlap: int
) -> None:
    from kbpg_db import tokens

    text = " ".join(words)
    windows = d.text_windows(text, size, overlap)
    enc = tokens.encoding()
    ids = enc.encode(text, disallowed_special=())
    assert windows[0].char_start == 0 and windows[-1].char_end == len(text)
    assert sum(w.tokens for w in windows) - overlap * (len(windows) - 1) == len(ids)
    for a, b in itertools.pairwise(windows):
        assert a.tokens == size and b.char_start < a.char_end
