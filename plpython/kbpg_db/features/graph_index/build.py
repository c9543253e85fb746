"""GraphIndex: the PageIndex tree, the cross-references between its sections, and
vector + BM25 retrieval over the sections with the referenced ones added to the hits.

Stage 1 is PageIndex's pipeline (``page_index.build_tree``). Stage 2 finds what each
section's text refers to elsewhere in the document:

- explicit references are resolved by rule, without an LLM: "Section 4.2", "§ 3",
  "Article 12", "Chapter 2", "Appendix B", "Sections 3 and 5", and Markdown links to
  another heading's anchor (``[retries](#retry-policy)``);
- the LLM (``enrichment_model``, default the indexing model; at most ``llm_concurrency``
  calls in flight) reads a section's text and the document's ToC and names the other
  sections it cites, mentions or depends on. With ``enrichment: auto`` (the default) it
  is asked only about sections whose reference-like wording the rules left unresolved;
  ``all`` asks about every section with text; ``rules`` never asks. Only ids from the ToC
  are kept, never the section itself or its parent or children (structure is not a
  reference); what was dropped is counted.

Stage 3 embeds each section's title path, summary (the LLM's; without one, the section's
own text, as much as the model reads) and the titles it references; BM25 indexes its text.
Edges go to ``kb.graph_index_reference``; per-document counts to the ToC row's
``structure_detail.references``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kbpg_db import embedding, tokens
from kbpg_db.config import IndexingConfig
from kbpg_db.features import BuildContext, Built, Document
from kbpg_db.features.graph_index.settings import GraphIndexExtra
from kbpg_db.features.page_index import build as pi
from kbpg_db.llm import Llm, Request

KINDS = ("cites", "mentions", "depends_on")
NODE_TEXT_TOKENS = 6000  # of a section's text shown to the LLM

# A reference word and its label: "Section 4.2", "§3", "Art. 12", "Appendix B".
_WORDS = {
    "section": "section",
    "sections": "section",
    "sec.": "section",
    "§": "section",
    "§§": "section",
    "clause": "section",
    "clauses": "section",
    "paragraph": "section",
    "article": "article",
    "articles": "article",
    "art.": "article",
    "chapter": "chapter",
    "chapters": "chapter",
    "ch.": "chapter",
    "appendix": "appendix",
    "appendices": "appendix",
    "annex": "appendix",
    "part": "part",
    "parts": "part",
    "schedule": "schedule",
}
_LABEL = r"(?:\d+(?:\.\d+)*[a-z]?|[A-Z](?:\.\d+)*|[IVXLC]+)\b"
_REF = re.compile(
    r"(?P<word>§§?|\b(?:sections?|sec\.|clauses?|paragraph|articles?|art\.|chapters?|ch\.|"
    r"appendix|appendices|annex|parts?|schedule))\s*(?P<labels>"
    + _LABEL
    + r"(?:\s*(?:,|and|or|&|to)\s*"
    + _LABEL
    + r")*)",
    re.I,
)
_ONE_LABEL = re.compile(_LABEL)
# A section title's own label: "4.2 Retries", "Article 12 — Termination", "Appendix B:".
_TITLE = re.compile(
    r"^\s*(?:(?P<word>§|section|clause|article|chapter|appendix|annex|part|schedule)\s*)?"
    r"(?P<label>\d+(?:\.\d+)*[a-z]?|[A-Z](?:\.\d+)*|[IVXLC]+)(?:[.:)\s\u2013\u2014-]|$)",
    re.I,
)
_ANCHOR_LINK = re.compile(r"\[([^\]\n]{0,300})\]\(#([^)\s]{1,200})\)")
# A resolved reference with the words that introduce it ("see Section 3", "in § 2"): what
# is left of a section's text once these are gone shows whether anything is unresolved.
_LEAD = (
    r"(?:\b(?:see(?:\s+also)?|cf\.|refer(?:s|red|ring)?\s+to|(?:described|defined|set\s+out|"
    r"explained)\s+(?:in|under)|according\s+to|pursuant\s+to|under|in)\s+)?"
)
_REF_WITH_LEAD = re.compile(_LEAD + "(?:" + _REF.pattern + ")", re.I)
_LINK_WITH_LEAD = re.compile(_LEAD + _ANCHOR_LINK.pattern, re.I)
# Wording that suggests a reference the rules may not have resolved.
_CUE = re.compile(
    r"\b(?:see|refer(?:s|red|ring)? to|described (?:in|under|above|below)|defined (?:in|under|"
    r"above|below)|as (?:set out|stated|noted|discussed|explained|shown) (?:in|above|below)|"
    r"according to|pursuant to|in accordance with|subject to|cf\.|the (?:previous|preceding|"
    r"following|next) (?:section|chapter)|(?:above|below))\b",
    re.I,
)


@dataclass
class Ref:
    source: int  # ordinal of the referring node
    target: int
    kind: str
    phrase: str
    resolved_by: str  # rule | llm


def slug(title: str) -> str:
    """A heading's Markdown anchor, as GitHub and most renderers make it."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def _title_label(title: str) -> tuple[str | None, str] | None:
    m = _TITLE.match(title)
    if m is None:
        return None
    word = m.group("word")
    label = m.group("label")
    if word is None and not label[0].isdigit():
        return None  # "A Guide", "I think": a letter alone is not a label
    return (_WORDS.get(word.lower()) if word else None), label.lower()


# The words around a reference that say where it points. Before it, another work it is in:
# "the Style Guide, Chapter 2", "the Developer's Handbook, Chapter 4", "RFC 9110, Section 4"
# (a capitalised name ending in a word for a work); after it, "of the Style Guide".
_WORK_NOUN = (
    r"(?:Guide|Handbook|Manual|Reference|Specification|Spec|Standard|Book|Documentation|"
    r"Tutorial|Primer|FAQ|Act|Regulation|Directive|Code|Report|Paper|Whitepaper|Edition|"
    r"Volume|Vol\.|Series|Cookbook|Notes|RFC\s?\d+|ISO\s?\d+(?:[-:]\d+)*)"
)
_WORK_BEFORE = re.compile(
    r"(?:^|[\s(\[])(?P<det>this|the|our|its|their|his|her|an?)?\s*"
    r"(?P<work>(?:[A-Z0-9][\w'\u2019&.-]*\s+){0,5}" + _WORK_NOUN + r")"
    r"\s*(?:,|'s|\u2019s|:|\(|\s[-\u2013\u2014])?\s*(?:in\s+|at\s+)?$"
)
_WORK_AFTER = re.compile(
    r"^\s*(?:of|in)\s+(?P<det>this|the|our|its|their|an?)?\s*"
    r"(?P<work>(?:[A-Z0-9][\w'\u2019&.-]*\s+){0,5}" + _WORK_NOUN + r")\b"
)
# After a single label, the title it names: quoted ('Section 3.5, "System management"'),
# in brackets, or after a dash or colon ("Chapter 2 - Page Layout").
_TITLE_AFTER = re.compile(
    r"^\s*(?:,\s*)?(?:[\u201c\"\u2018'](?P<quoted>[^\u201d\"\u2019'\n]{2,120})[\u201d\"\u2019']"
    r"|\(\s*[\u201c\"]?(?P<bracketed>[^)\u201d\"\n]{2,100}?)[\u201d\"]?\s*\))"
    r"|^\s*(?:[-\u2013\u2014]|:)\s*(?P<dashed>[A-Z][^.;,:!?()\n]{1,80})"
)
_SENTENCE_END = re.compile(r"[.;!?]\s|\n")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _agrees(named: str, title: str) -> bool:
    """Whether a title given beside a reference is the target section's own title (its
    label left out), allowing for a word more or less and different punctuation."""
    import difflib

    a, b = _words(named), _words(title)
    if not a or not b:
        return False
    joined_a, joined_b = " ".join(a), " ".join(b)
    if joined_a in joined_b or joined_b in joined_a:
        return True
    overlap = len(set(a) & set(b)) / min(len(set(a)), len(set(b)))
    return overlap >= 0.6 or difflib.SequenceMatcher(None, joined_a, joined_b).ratio() >= 0.75


class Resolver:
    """Explicit references in a section's text, resolved to other nodes of its document.
    The words around a label must agree with the target: a reference into another work
    ("the Style Guide, Chapter 2") is no edge into this document, and a title given beside
    the label ("Section 3.5, \u201cSystem management\u201d") picks the section of that
    title among those of the same label, or none."""

    def __init__(self, nodes: list[pi.Node], names: list[str] | None = None) -> None:
        self.by_label: dict[tuple[str | None, str], list[int]] = {}
        self.by_anchor: dict[str, int] = {}
        self.titles: list[str] = []
        for i, node in enumerate(nodes):
            m = _TITLE.match(node.title) if node.has_heading else None
            self.titles.append(node.title[m.end() :].strip(" .:-\u2013\u2014") if m else node.title)
            if not node.has_heading:
                continue
            found = _title_label(node.title)
            if found is not None:
                self.by_label.setdefault(found, []).append(i)
            self.by_anchor.setdefault(slug(node.title), i)
        # This document's own names ("this Handbook" too): a reference naming one of them
        # is into this document.
        self.names = [" ".join(_words(n)) for n in names or [] if _words(n)]
        self.external = 0

    def _candidates(self, word: str, label: str) -> list[int]:
        """The sections a label may name: those titled with its word and label, else (a
        section, article or chapter number) those titled with the number alone."""
        exact = self.by_label.get((word, label), [])
        if not exact and label[0].isdigit() and word in ("section", "article", "chapter"):
            return self.by_label.get((None, label), [])
        return exact

    def _other_work(self, text: str, start: int, end: int) -> bool:
        """Whether the reference at text[start:end] names a work other than this one."""
        before = text[max(0, start - 120) : start]
        cut = list(_SENTENCE_END.finditer(before))
        if cut:
            before = before[cut[-1].end() :]
        m = _WORK_BEFORE.search(before) or _WORK_AFTER.match(text[end : end + 120])
        if m is None or (m.group("det") or "").lower() == "this":
            return False
        work = " ".join(_words(m.group("work")))
        return not any(work in name or name in work for name in self.names)

    def find(self, text: str) -> tuple[list[tuple[int, str]], int]:
        """(target ordinal, phrase) per resolved reference, and how many explicit ones
        did not resolve. References into other works are counted in ``external``."""
        out: list[tuple[int, str]] = []
        unresolved = 0
        for m in _REF.finditer(text):
            word = _WORDS.get(m.group("word").lower(), "section")
            labels = [
                label
                for label in _ONE_LABEL.findall(m.group("labels"))
                # "part a": a lower-case letter is a word, not a label
                if not (label.isalpha() and not label.isupper())
            ]
            if not labels:
                continue
            if self._other_work(text, m.start(), m.end()):
                self.external += len(labels)
                continue
            named = _TITLE_AFTER.match(text[m.end() : m.end() + 160]) if len(labels) == 1 else None
            title = next((g for g in named.groups() if g), None) if named else None
            for label in labels:
                found = self._candidates(word, label.lower())
                if title is not None:
                    agreeing = [t for t in found if _agrees(title, self.titles[t])]
                    if not agreeing and found:
                        self.external += 1  # the title is another section's, or another work's
                        continue
                    found = agreeing
                if len(found) == 1:
                    phrase = m.group(0) + (text[m.end() : m.end() + named.end()] if named else "")
                    out.append((found[0], phrase.strip()))
                else:
                    unresolved += 1  # missing or ambiguous: left to the LLM
        for m in _ANCHOR_LINK.finditer(text):
            target = self.by_anchor.get(m.group(2).lower())
            if target is None:
                unresolved += 1
            else:
                out.append((target, m.group(0)))
        return out, unresolved


REFERENCES_SCHEMA = {
    "type": "object",
    "properties": {
        "references": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "node_id": {"type": "string"},
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "phrase": {"type": "string"},
                },
                "required": ["node_id", "kind", "phrase"],
            },
        }
    },
    "required": ["references"],
}


def _check_references(value: Any) -> list[dict[str, str]]:
    """The answer's shape; which ids exist is checked after (unknown ones are counted)."""
    if not isinstance(value, dict) or not isinstance(value.get("references"), list):
        raise ValueError('expected {"references": [{"node_id": ..., "kind": ..., "phrase": ...}]}')
    out: list[dict[str, str]] = []
    for item in value["references"]:
        if not isinstance(item, dict) or not isinstance(item.get("node_id"), str):
            raise ValueError("each reference must be an object with node_id, kind and phrase")
        kind = str(item.get("kind") or "mentions")
        out.append(
            {
                "node_id": item["node_id"].strip(),
                "kind": kind if kind in KINDS else "mentions",
                "phrase": str(item.get("phrase") or "").strip()[:300],
            }
        )
    return out


def _toc_lines(nodes: list[pi.Node]) -> str:
    return "\n".join(f"{'  ' * n.depth}[{n.node_id}] {n.title[:200]}" for n in nodes)


def _enrichment_llm(extra: GraphIndexExtra, llm: Llm | None) -> Llm | None:
    if llm is None or not llm.available or extra.enrichment == "rules":
        return None
    return llm.with_model(extra.enrichment_model)


def references(
    doc: Document, tree: pi.Tree, extra: GraphIndexExtra, ctx: BuildContext
) -> tuple[list[Ref], dict[str, Any]]:
    """Every section's references to other sections, and the counts per way."""
    text = doc.content
    nodes = tree.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    names = [doc.title, str(doc.metadata.get("pdf_title") or "")]
    names += [n.title for n in nodes if n.parent is None and n.has_heading][:1]
    resolver = Resolver(nodes, names)
    refs: list[Ref] = []
    ask: list[int] = []
    titles = {
        n.title.lower(): i for i, n in enumerate(nodes) if n.has_heading and len(n.title) >= 8
    }
    for i, node in enumerate(nodes):
        body = text[pi._body_start(text, node) : node.own_end]
        found, unresolved = resolver.find(body)
        seen: set[int] = set()
        for target, phrase in found:
            if target != i and target not in seen:
                seen.add(target)
                refs.append(Ref(i, target, "cites", phrase, "rule"))
        if not body.strip():
            continue
        if extra.enrichment == "all":
            ask.append(i)
        elif extra.enrichment == "auto":
            rest = _REF_WITH_LEAD.sub(" ", _LINK_WITH_LEAD.sub(" ", body))
            lowered = rest.lower()
            names_another = any(t in lowered for t, j in titles.items() if j != i)
            if unresolved or names_another or _CUE.search(rest):
                ask.append(i)
    stats: dict[str, Any] = {
        "rule_edges": len(refs),
        "external_references": resolver.external,
        "llm_edges": 0,
        "sections_asked": 0,
        "dropped_unknown_ids": 0,
        "dropped_structural": 0,
    }
    llm = _enrichment_llm(extra, ctx.llm)
    if llm is None and extra.enrichment != "rules":
        stats["llm"] = "not configured"
    if llm is None or not ask:
        return refs, stats
    by_id = {n.node_id: i for i, n in enumerate(nodes)}
    toc = _toc_lines(nodes)
    requests = []
    for i in ask:
        node = nodes[i]
        body = tokens.truncate(text[node.start : node.own_end], NODE_TEXT_TOKENS)
        requests.append(
            Request(
                "section_references",
                [
                    {
                        "role": "system",
                        "content": "You find the cross-references in a document section: the "
                        "other sections of the same document its text explicitly cites, "
                        "mentions or depends on. Parent and child sections are structure, "
                        "not references. Answer with JSON only.",
                    },
                    {
                        "role": "user",
                        "content": f"Document: {doc.title}\nTable of contents:\n{toc}\n\n"
                        f"Section [{node.node_id}] {' › '.join(node.path)}:\n{body}\n\n"
                        'Return {"references": [{"node_id": "an id from the table of '
                        'contents", "kind": "cites" | "mentions" | "depends_on", "phrase": '
                        '"the words of the section that make the reference"}]}; an empty '
                        "list when it refers to no other section.",
                    },
                ],
                REFERENCES_SCHEMA,
                _check_references,
                max_tokens=800,
            )
        )
    llm.progress = ctx.stage("finding cross-references", len(requests))
    stats["sections_asked"] = len(requests)
    have = {(r.source, r.target) for r in refs}
    for i, answer in zip(ask, llm.ask_many(requests), strict=True):
        node = nodes[i]
        near = {index[id(c)] for c in node.children}
        if node.parent is not None:
            near.add(index[id(node.parent)])
        count = 0
        for item in answer:
            known = by_id.get(item["node_id"])
            if known is None:
                stats["dropped_unknown_ids"] += 1
                continue
            target = known
            if target == i or target in near:
                stats["dropped_structural"] += 1
                continue
            if (i, target) in have or count >= extra.max_references_per_node:
                continue
            have.add((i, target))
            count += 1
            refs.append(Ref(i, target, item["kind"], item["phrase"], "llm"))
            stats["llm_edges"] += 1
    return refs, stats


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    extra = GraphIndexExtra.model_validate(cfg.extra)
    tree = pi.build_tree(doc, extra, ctx)
    built = pi.stored(doc, tree)
    refs, stats = references(doc, tree, extra, ctx)
    nodes = tree.nodes
    outgoing: dict[int, list[str]] = {}
    for r in refs:
        outgoing.setdefault(r.source, []).append(nodes[r.target].title)
    limit = cfg.input_tokens
    texts: list[str] = []
    for i, node in enumerate(nodes):
        head = " › ".join(node.path)
        tail = "References: " + "; ".join(outgoing[i]) if outgoing.get(i) else ""
        # The summary the LLM wrote; without one, the section's own text (as much as the
        # model reads beside its title and references) says more than its lead words.
        body = node.summary if node.summary_kind == "llm" else pi._body(doc.content, node)
        room = max(16, limit - tokens.count(head) - tokens.count(tail) - 2)
        parts = [head, tokens.truncate(body or "", room), tail]
        texts.append(tokens.truncate("\n".join(p for p in parts if p), limit))
    ctx.report(f"embedding {len(texts)} sections")
    result = embedding.embed(cfg, texts, ctx.embedding_key, [tokens.count(t) for t in texts])
    for row, vec in zip(built.chunks, result.vectors, strict=True):
        row["embedding"] = embedding.vector_literal(vec)
    assert built.artifacts is not None
    built.artifacts["edges"] = [
        {
            "source": r.source,
            "target": r.target,
            "kind": r.kind,
            "phrase": r.phrase,
            "resolved_by": r.resolved_by,
        }
        for r in refs
    ]
    built.artifacts["references"] = stats
    built.tokens, built.cost_usd = result.tokens, result.cost_usd
    return built
