"""Entity keys, name similarity and merge decisions of the triplet graph."""

from __future__ import annotations

from types import SimpleNamespace

from kbpg_db.features.knowledge_graph import build as kg


def test_entity_keys_fold_case_punctuation_legal_forms_and_type_synonyms() -> None:
    keys = {
        kg.entity_key(n, t)
        for n, t in [
            ("Anthropic", "organization"),
            ("anthropic", "company"),
            ("Anthropic, Inc.", "Organisation"),
            ("  ANTHROPIC   ltd ", "firm"),
        ]
    }
    assert keys == {"anthropic|organization"}
    # A homonym of another type keeps its own key.
    assert kg.entity_key("Mercury", "planet") != kg.entity_key("Mercury", "chemical element")
    assert kg.name_key("Inc.") == "inc"  # a name that is only a legal word stays
    assert kg.type_key("Cities") == "place"


def test_similarity_is_pg_trgm_s() -> None:
    assert kg.similarity("claude", "claude ai") == 0.7
    assert kg.similarity("word", "word") == 1.0
    assert kg.similarity("abc", "xyz") == 0.0


SETTINGS = SimpleNamespace(entity_merge="rules", merge_similarity=0.6, merge_vector_similarity=0.9)


def entity(name: str, kind: str) -> dict[str, str]:
    return {"name": name, "type": kind, "context": f"{name} in a text"}


def test_rules_merge_plurals_and_keep_the_rest_apart() -> None:
    known = {"prompt cache|product": {**entity("Prompt Cache", "product"), "canonical": None}}
    mine = {
        "prompt caches|product": entity("Prompt caches", "product"),
        "prompt cache|concept": entity("prompt cache", "concept"),
        "anthropic|organization": entity("Anthropic", "organization"),
    }
    got = kg.merge_decisions(mine, known, SETTINGS, None)
    assert [(d["key"], d["other_key"], d["merged"], d["decided_by"]) for d in got] == [
        ("prompt caches|product", "prompt cache|product", True, "rule"),
        ("prompt cache|concept", "prompt cache|product", False, "rule"),
    ]
    assert got[1]["reason"] == "same name, another type (concept / product): kept apart"


def test_a_merge_points_at_the_canonical_key() -> None:
    known = {"cache|product": {**entity("cache", "product"), "canonical": "store|product"}}
    got = kg.merge_decisions({"caches|product": entity("caches", "product")}, known, SETTINGS, None)
    assert got[0]["other_key"] == "store|product" and got[0]["merged"]


def test_names_close_in_meaning_are_candidates() -> None:
    known = {
        "automobile|product": {**entity("automobile", "product"), "canonical": None,
                               "vector": [1.0, 0.0, 0.1]},
        "banana|product": {**entity("banana", "product"), "canonical": None, "vector": [0.0, 1.0, 0.0]},
        "car|concept": {**entity("car", "concept"), "canonical": None, "vector": [1.0, 0.0, 0.1]},
    }  # fmt: skip
    mine = {"car|product": {**entity("car", "product"), "vector": [0.99, 0.05, 0.1]}}
    got = kg.merge_decisions(mine, known, SETTINGS, None)
    # automobile: same type, close vector; car|concept: same name, another type; not banana.
    assert [(d["other_key"], d["merged"], d["reason"]) for d in got] == [
        ("automobile|product", False, "similar meaning (cosine 1.00): kept apart"),
        ("car|concept", False, "same name, another type (product / concept): kept apart"),
    ]
