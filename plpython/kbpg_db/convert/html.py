"""HTML: cleaned of what a reader never sees (scripts, navigation, furniture, trackers),
sanitized, then Markdown; XML by what it holds."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from typing import Any

from kbpg_db.convert.base import MARKDOWN_OPTIONS, Converted, ConvertError, Limits, decode_text
from kbpg_db.convert.formats import _FEED, _XHTML
from kbpg_db.convert.office import _markitdown, _titled


def convert_xml(data: bytes, limits: Limits) -> Converted:
    """A .xml file by what it holds: a feed as a feed, XHTML as HTML, anything else as its
    text (markup included: element and attribute names are what one searches XML for)."""
    head = data[:4096]
    if _FEED.match(head):
        return _markitdown("rss", data, limits)
    if _XHTML.match(head):
        return convert_html(data, limits)
    return Converted(decode_text(data, "the XML file"), "xml")


# reStructuredText section titles: a line under (and maybe over) a line of one repeated


_DROPPED = (
    "script",
    "style",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "applet",
    "noscript",
    "template",
    "svg",
    "math",
    "canvas",
    "form",
    "button",
    "select",
    "input",
    "textarea",
    "link",
    "meta",
    "base",
)
_ALLOWED_TAGS = frozenset(
    {
        "a",
        "abbr",
        "b",
        "blockquote",
        "br",
        "caption",
        "code",
        "dd",
        "del",
        "details",
        "dfn",
        "div",
        "dl",
        "dt",
        "em",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "i",
        "img",
        "ins",
        "kbd",
        "li",
        "mark",
        "ol",
        "p",
        "pre",
        "q",
        "s",
        "samp",
        "section",
        "small",
        "span",
        "strong",
        "sub",
        "summary",
        "sup",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "time",
        "tr",
        "u",
        "ul",
        "var",
        "article",
        "main",
        "header",
        "footer",
        "nav",
        "aside",
        "body",
        "html",
    }
)
_ALLOWED_ATTRS = {
    "a": ["href", "title"],
    "img": ["src", "alt", "title"],
    "abbr": ["title"],
    "td": ["colspan", "rowspan"],
    "th": ["colspan", "rowspan"],
}


def _html_depth_ok(html: str, limit: int) -> None:
    """Refuse nesting past ``limit``: the converters recurse per element."""

    void = {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
        "p",
        "li",
        "td",
        "th",
        "tr",
        "option",
        "dt",
        "dd",
    }

    class Depth(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=False)
            self.depth = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag in void:
                return
            self.depth += 1
            if self.depth > limit:
                raise ConvertError(
                    f"is HTML nested more than {limit} elements deep; the limit is {limit}"
                )

        def handle_endtag(self, tag: str) -> None:
            if tag not in void:
                self.depth = max(self.depth - 1, 0)

    Depth().feed(html)


_NAV_CLASS = re.compile(
    r"(?i)^(nav|navbar|navheader|navfooter|navigation|breadcrumbs?|skip-?link)$"
)


_ADMONITION = re.compile(r"(?i)^(note|tip|warning|caution|important|admonition|callout)$")


def _is_navigation(tag: Any) -> bool:
    if tag.name == "nav" or (tag.get("role") or "").lower() == "navigation":
        return True
    classes = tag.get("class") or []
    return any(_NAV_CLASS.match(c) for c in classes)


# Elements that are the page or its content, whatever their classes say: a skin marks
# <html> and <body> with its features ("vector-toc-available", "main-menu-pinned"), which
# read as furniture words, and dropping them would drop the page.
_NEVER_FURNITURE = frozenset({"html", "body", "main", "article"})


def _is_structure(tag: Any) -> bool:
    return tag.name in _NEVER_FURNITURE or (tag.get("role") or "").lower() == "main"


# Page furniture: what a site repeats around every page's content. By element, ARIA role,
# or a class or id made of these words (sidebar, vector-menu, p-lang, mw-jump-link, ...).
_FURNITURE_TAGS = ("aside", "footer")
_FURNITURE_ROLES = {
    "complementary",
    "contentinfo",
    "banner",
    "search",
    "menu",
    "menubar",
    "toolbar",
}
_FURNITURE_WORD = re.compile(
    r"(?i)(?:^|[-_])(?:sidebar|sidenav|menu|menubar|portlet|pinnable|breadcrumbs?|footer|"
    r"masthead|cookies?|share|social|advert|ads|lang|languages|interlanguage|catlinks|"
    r"printfooter|jump|editsection|navbox|noprint|indicators|skip|toc|sitenotice)"
    r"(?:$|[-_])"
)


def _is_furniture(tag: Any) -> bool:
    if tag.name in _FURNITURE_TAGS:
        return True
    if (tag.get("role") or "").lower() in _FURNITURE_ROLES:
        return True
    words = [*(tag.get("class") or []), tag.get("id") or ""]
    return any(_FURNITURE_WORD.search(w) for w in words if w)


def _main_content(soup: Any) -> None:
    """Keep only the page's main content when it marks one (<main>, role=main, a single
    <article>) holding most of the page's text; otherwise the page stays whole."""
    body = soup.body or soup
    total = len(body.get_text(" ", strip=True))
    marked = soup.find_all("main") + soup.find_all(attrs={"role": "main"})
    articles = soup.find_all("article")
    if not marked and len(articles) == 1:
        marked = articles
    for main in marked:
        if total and len(main.get_text(" ", strip=True)) >= 0.3 * total:
            main.extract()
            body.clear()
            body.append(main)
            return


_HEADING_TAG = re.compile(r"^h[1-6]$")
_PERMALINK_MARKS = {"¶", "§", "#", "🔗", "\uf0c1"}
_PERMALINK_CLASS = re.compile(r"(?i)\b(?:headerlink|hash-link|anchor-link|anchorjs-link)\b")


# Redirect links: a search engine's or a mail's click tracker in front of the real target
# (/ck/a?!&&p=...&u=a1aHR0cHM6..., /url?q=https://...). The target is kept where the link
# names it; otherwise the link goes and its text stays.
_REDIRECT_PATH = re.compile(
    r"(?i)^/(?:ck/a|url|aclk|l\.php|link|redirect|r|click|out|goto|away)/?$"
)
_TARGET_PARAMS = ("u", "url", "q", "target", "dest", "destination", "redirect", "uddg", "to")
_LONG_LINK = 400  # characters: a link this long is a tracker's payload, not an address


def _link_target(href: str) -> str | None:
    """The address a link should keep: its own, the real target behind a redirect, or
    None where it is noise in a chunk (a data: URI, an opaque tracking payload)."""
    import binascii
    import urllib.parse

    href = href.strip()
    if href.lower().startswith("data:"):
        return None
    try:
        url = urllib.parse.urlsplit(href)
    except ValueError:
        return None
    redirect = bool(_REDIRECT_PATH.match(url.path or "")) and bool(url.query)
    if redirect or len(href) > _LONG_LINK:
        params = urllib.parse.parse_qs(url.query.lstrip("!&"), keep_blank_values=False)
        for name in _TARGET_PARAMS:
            for value in params.get(name, []):
                if re.match(r"(?i)^https?://", value):
                    return value
                if re.match(r"^a1[A-Za-z0-9_-]+$", value):  # base64url after "a1" (Bing)
                    try:
                        decoded = base64.urlsafe_b64decode(value[2:] + "=" * (-len(value[2:]) % 4))
                        target = decoded.decode("utf-8")
                    except (binascii.Error, ValueError):
                        continue
                    if re.match(r"(?i)^https?://\S+$", target):
                        return target
        return None
    return href


def _inline_data_image(src: str) -> str:
    """A data: image whose payload is written raw (``data:image/svg+xml,<svg ...>``, with
    spaces and quotes) percent-encoded whole, so media extraction takes it out of the text
    instead of leaving the SVG's source in a chunk."""
    import urllib.parse

    head, sep, payload = src.partition(",")
    if not sep or ";base64" in head.lower():
        return src
    return head + "," + urllib.parse.quote(urllib.parse.unquote(payload), safe="")


def _text_length(soup: Any) -> int:
    return len(re.sub(r"\s+", "", soup.get_text()))


# A cleaning step that leaves less than this of the page's text, and fewer characters than
# _KEEP_CHARS, is taken for a misreading of the page: its furniture is kept instead.
_KEEP_SHARE = 0.1
_KEEP_CHARS = 200


def clean_html(html: str) -> tuple[str, str | None, list[str]]:
    """The HTML without scripts, styles, frames, event handlers or javascript: links:
    dangerous elements go with their content, then bleach keeps only an allow-list of
    tags and attributes (data: images stay, for media extraction). Also the page title,
    and notes on what the cleaning did that a reader should know."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    for el in soup([*_DROPPED, "title", "head"]):
        el.decompose()
    total = _text_length(soup)
    whole = str(soup)
    _drop_furniture(soup)
    notes: list[str] = []
    kept = _text_length(soup)
    if total and kept < _KEEP_SHARE * total and kept < _KEEP_CHARS:
        # Removing the page's furniture would leave little or none of it: the page is kept
        # whole instead (its dangerous elements are gone all the same).
        soup = BeautifulSoup(whole, "html.parser")
        notes.append(
            f"the page was indexed whole: removing its navigation and sidebars would have "
            f"left {kept} of its {total} characters of text"
        )
    return _sanitize(soup), title or None, notes


def _drop_furniture(soup: Any) -> None:
    """Permalink marks, and the site's navigation, sidebars and footers around the page's
    own content."""
    # Permalink anchors ("¶" after Sphinx and MkDocs headings and definitions, "#" on
    # GitHub and Docusaurus): a symbol linking to the element itself, which would end up
    # in the section's name ("Basic Usage¶") and in the text.
    for a in soup.find_all("a", href=re.compile(r"^#")):
        if a.get_text(strip=True) in _PERMALINK_MARKS or _PERMALINK_CLASS.search(
            " ".join(a.get("class") or [])
        ):
            a.decompose()
    # Site navigation (prev/next bars, menus), sidebars, footers and language lists are
    # the site's, repeated on every page, not this page's content. Inside a heading such a
    # mark is furniture ("[edit]") unless it holds the heading's whole text (Sphinx's
    # "toc-backref" link around a section's name): then only the link goes.
    _main_content(soup)
    for el in soup.find_all(
        lambda t: not _is_structure(t) and (_is_navigation(t) or _is_furniture(t))
    ):
        if el.decomposed:
            continue
        head = el.find_parent(_HEADING_TAG)
        if head is not None and el.get_text(strip=True) == head.get_text(strip=True):
            el.unwrap()
        else:
            el.decompose()


def _sanitize(soup: Any) -> str:
    """Admonition titles as labels, links without tracking, then bleach's allow-list."""
    import bleach

    # An admonition's title ("Note", "Warning") is a label, not a section: as a heading it
    # would take the text after the box into a section named "Note".
    for box in soup.find_all(class_=_ADMONITION):
        for head in box.find_all(re.compile(r"^h[1-6]$")):
            head.name = "p"
            head.string = head.get_text(" ", strip=True) + ":"
    # A list whose items hold headings (search results, card grids) is a run of sections:
    # as a list, Markdown would indent each heading into its item ("2. ## Title") and the
    # section's title would be lost to the chunker.
    for item in soup.find_all("li"):
        if item.find(_HEADING_TAG) is not None:
            item.name = "div"
            if item.parent is not None and item.parent.name in ("ol", "ul"):
                item.parent.name = "div"
    for a in soup.find_all("a", href=True):
        target = _link_target(a["href"])
        if target is None:
            del a["href"]
        else:
            a["href"] = target
    for img in soup.find_all("img", src=re.compile(r"(?i)^\s*data:")):
        img["src"] = _inline_data_image(img["src"].strip())
    cleaner = bleach.Cleaner(
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRS,
        protocols={"http", "https", "mailto", "data"},
        strip=True,
        strip_comments=True,
    )
    cleaned = str(cleaner.clean(str(soup)))
    # bleach allows data: for every URL attribute; only images may carry one.
    return re.sub(r'(?i)<a\b[^>]*\bhref="data:[^"]*"[^>]*>', "<a>", cleaned)


def convert_html(data: bytes | str, limits: Limits) -> Converted:
    from markitdown.converters import HtmlConverter

    html = data if isinstance(data, str) else decode_text(data, "the HTML")
    _html_depth_ok(html, limits.max_depth)
    cleaned, title, notes = clean_html(html)
    try:
        res = HtmlConverter().convert_string(cleaned, strict=True, **MARKDOWN_OPTIONS)
    except RecursionError:
        raise ConvertError(f"is HTML nested too deeply (limit {limits.max_depth})") from None
    meta = _titled({"notes": notes} if notes else {}, title)
    return Converted((res.markdown or "").strip() + "\n", "html", None, meta)
