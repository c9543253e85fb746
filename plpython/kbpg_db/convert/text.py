"""Plain-text formats: Markdown made readable (front matter, comments, link definitions and
HTML tables), reStructuredText's titles as headings."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from kbpg_db.convert.base import Converted, decode_text, markdown_table

_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MD_CODE_SPAN = r"(?P<code>(?P<ticks>`+)[^`\n](?:[^\n]*?[^`\n])?(?P=ticks)(?!`))"
# A code span or a line of indented code (kept), or an HTML comment (dropped); "<!--"
# with no "-->" is text.
_MD_COMMENT = re.compile(
    _MD_CODE_SPAN + r"|(?P<indented>^(?: {4}|\t)[^\n]*)|<!--.*?-->", re.S | re.M
)
# A link reference definition: [label]: destination, an optional title, nothing else.
_MD_DEFINITION = re.compile(
    r"""^ {0,3}\[((?:[^\]\\]|\\.)+)\]:[ \t]*(?:<[^>\n]*>|\S+)"""
    r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$""",
    re.M,
)
# A code span (kept), or a reference link: [text][label], [text][] or [text] alone.
_MD_REFERENCE = re.compile(
    _MD_CODE_SPAN + r"|(?<![\\!\]])\[(?P<text>(?:[^\[\]\\`\n]|\\.|`[^`\n]*`)+)\]"
    r"(?:\[(?P<label>[^\[\]\n]*)\]|(?![(:\[]))"
)


def _label(text: str) -> str:
    return " ".join(text.lower().split())


def _md_blocks(text: str) -> list[tuple[bool, str]]:
    """The text as (is fenced code, lines) runs, in order."""
    out: list[tuple[bool, list[str]]] = []
    fence: str | None = None
    for line in text.split("\n"):
        mark = _MD_FENCE.match(line)
        code = fence is not None
        if mark and fence is None:
            fence, code = mark.group(1)[0] * 3, True
        elif mark and mark.group(1).startswith(fence or "\0"):
            fence = None
        if out and out[-1][0] == code:
            out[-1][1].append(line)
        else:
            out.append((code, [line]))
    return [(code, "\n".join(lines)) for code, lines in out]


# An HTML table written in Markdown, as a block of its own (CommonMark's HTML block).
_MD_HTML_TABLE = re.compile(r"^ {0,3}<table\b.*?</table>[ \t]*$", re.S | re.M | re.I)


class _TableReader(HTMLParser):
    """The rows of an HTML table: each cell's text, `code` as a code span, tags dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self.cell = []
        elif tag == "code" and self.cell is not None:
            self.cell.append("`")
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "code" and self.cell is not None:
            self.cell.append("`")

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def _html_table(m: re.Match[str]) -> str:
    reader = _TableReader()
    reader.feed(m[0])
    reader.close()
    rows = [r for r in reader.rows if r]
    return markdown_table(rows) if rows else m[0]


# Front matter: YAML between "---" lines (Jekyll, Hugo, Docusaurus, MkDocs) or TOML
# between "+++" lines (Hugo), at the very start of the file.
_FRONT_MATTER = re.compile(
    r"\A(?:---[ \t]*\n(.*?)\n(?:---|\.\.\.)|\+\+\+[ \t]*\n(.*?)\n\+\+\+)[ \t]*(?:\n|\Z)", re.S
)
_FRONT_TITLE = re.compile(
    r"""^title[ \t]*[:=][ \t]*(?:"([^"\n]*)"|'([^'\n]*)'|([^\n#]*?))[ \t]*$""", re.M
)
_FIELD_LINE = re.compile(r"^(?:[\w-]+[ \t]*[:=].*|[ \t-].*|#.*|)$")


def front_matter(text: str) -> tuple[str, str | None]:
    """The text without its front matter, and the title the front matter gives. A block
    whose lines are not all fields (``key: value``, ``key = value``, indented or list
    lines, comments) is text, not front matter."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return text, None
    body = m.group(1) if m.group(1) is not None else m.group(2)
    if not all(_FIELD_LINE.match(line) for line in body.split("\n")):
        return text, None
    t = _FRONT_TITLE.search(body)
    title = next((g for g in t.groups() if g), None) if t else None
    return text[m.end() :], (title.strip() or None) if title else None


def readable_markdown(text: str) -> str:
    """Markdown as a reader sees it rendered: no front matter (its ``title`` becomes the
    first heading where the page has no heading of its own first, as documentation sites
    show it), no HTML comments (version notes, build markers), no link reference
    definitions, a reference link ``[text][label]`` as its text where its label is
    defined, and an HTML table as a Markdown one. Fenced code blocks and code spans stay
    as they are."""
    if text.startswith(("---", "+++")):
        text, title = front_matter(text)
        if title and not re.match(r"\s*#[ \t]", text):
            text = f"# {title}\n\n{text.lstrip(chr(10))}"
    if "<!--" not in text and "]:" not in text and "<table" not in text.lower():
        return text
    blocks = _md_blocks(text)
    labels: set[str] = set()
    prose: list[tuple[bool, str]] = []
    for code, part in blocks:
        if not code:
            part = _MD_COMMENT.sub(lambda m: m["code"] or m["indented"] or "", part)
            if "<table" in part.lower():
                part = _MD_HTML_TABLE.sub(_html_table, part)
            labels.update(_label(m.group(1)) for m in _MD_DEFINITION.finditer(part))
            part = re.sub(r"\n{3,}", "\n\n", _MD_DEFINITION.sub("", part))
        prose.append((code, part))
    out = [
        part
        if code or not labels
        else _MD_REFERENCE.sub(
            lambda m: (
                m["code"] or (m["text"] if _label(m["label"] or m["text"]) in labels else m[0])
            ),
            part,
        )
        for code, part in prose
    ]
    cleaned = "\n".join(out).strip("\n")
    return cleaned + "\n" if text.endswith("\n") else cleaned


_RST_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}[ \t]*$")


def convert_rst(data: bytes) -> Converted:
    """reStructuredText with its section titles as Markdown headings (the chunkers and
    PageIndex split at those); the rest kept as written."""
    lines = decode_text(data, "the file").split("\n")
    styles: list[tuple[str, bool]] = []
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        over = _RST_ADORNMENT.match(line)
        if (
            over
            and i + 2 < len(lines)
            and lines[i + 1].strip()
            and lines[i + 2].strip() == (line.strip())
        ):
            title, style, step = lines[i + 1].strip(), (line.strip()[0], True), 3
        elif (
            line.strip()
            and not over
            and i + 1 < len(lines)
            and (under := _RST_ADORNMENT.match(lines[i + 1]))
            and len(lines[i + 1].rstrip()) >= len(line.rstrip())
        ):
            title, style, step = line.strip(), (under.group(1), False), 2
        else:
            out.append(line)
            i += 1
            continue
        if style not in styles:
            styles.append(style)
        out.append("#" * min(styles.index(style) + 1, 6) + " " + title)
        i += step
    return Converted("\n".join(out), "rst")
