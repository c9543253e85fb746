"""Office, web and data files made by the tests (python-docx, python-pptx, openpyxl, xlwt,
pymupdf): each with known headings, slides, sheets and an embedded image, so conversion
can be checked exactly. Also the bad ones: damaged archives and zip bombs."""

from __future__ import annotations

import base64
import io
import json
import zipfile

# A 1x1 PNG: small, valid, and recognisable after extraction.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PNG_DATA_URI = "data:image/png;base64," + base64.b64encode(PNG).decode()


def docx_bytes() -> bytes:
    import docx

    d = docx.Document()
    d.add_heading("Refund policy", 1)
    d.add_paragraph("Customers may return a purchase within 30 days for a full refund.")
    d.add_heading("Exceptions", 2)
    d.add_paragraph("Clearance items are final sale and cannot be refunded.")
    d.add_picture(io.BytesIO(PNG))
    d.add_heading("Shipping", 1)
    d.add_paragraph("Orders ship from the Rotterdam warehouse within two business days.")
    table = d.add_table(rows=3, cols=2)
    for r, row in enumerate([("Zone", "Days"), ("Europe", "2"), ("Overseas", "9")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def pptx_bytes() -> bytes:
    import pptx
    from pptx.util import Inches

    p = pptx.Presentation()
    s = p.slides.add_slide(p.slide_layouts[1])
    s.shapes.title.text = "Quarterly results"
    s.placeholders[1].text = "Revenue grew by eleven percent in the third quarter."
    s = p.slides.add_slide(p.slide_layouts[1])
    s.shapes.title.text = "Hiring plan"
    s.placeholders[1].text = "We will hire four platform engineers in Lisbon."
    s = p.slides.add_slide(p.slide_layouts[6])  # blank: no title
    s.shapes.add_picture(io.BytesIO(PNG), Inches(1), Inches(1))
    box = s.shapes.add_textbox(Inches(1), Inches(3), Inches(6), Inches(1))
    box.text_frame.text = "Appendix: the office dog is called Pixel."
    out = io.BytesIO()
    p.save(out)
    return out.getvalue()


def xlsx_bytes() -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Plans"
    ws.append(["Plan", "Price (EUR)", "Messages"])
    ws.append(["Starter", 19, 500])
    ws.append(["Studio", 45, 2000])
    ws2 = wb.create_sheet("Contacts")
    ws2.append(["Team", "Email"])
    ws2.append(["Billing", "billing@example.com"])
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def xls_bytes() -> bytes:
    import xlwt

    wb = xlwt.Workbook()
    sh = wb.add_sheet("Inventory")
    for r, row in enumerate([("Item", "Count"), ("Widgets", 40), ("Gadgets", 7)]):
        for c, value in enumerate(row):
            sh.write(r, c, value)
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


HTML = f"""<!doctype html><html><head><title>Backup guide</title>
<style>body {{ color: red }}</style><script>var secret = "SCRIPTTEXT";</script></head>
<body onload="steal()"><div class="navheader"><a href="prev.html">Prev NAVTEXT</a></div>
<nav>MENUTEXT</nav><h1>Backups</h1>
<p onclick="alert('XSS-ONCLICK')">Run the nightly backup at 02:00 UTC.<img src="{PNG_DATA_URI}"
 alt="diagram" onerror="alert('XSS-ONERROR')"></p>
<h2>Restore</h2><p>Set shared_buffers first. Restore with <code>kbctl restore --from latest</code>.
<a href="javascript:alert('XSS-HREF')">click</a></p>
<iframe src="https://evil.example/">IFRAMETEXT</iframe>
<svg><script>alert('XSS-SVG')</script></svg>
<noscript>NOSCRIPTTEXT</noscript>
<object data="x.swf">OBJECTTEXT</object>
</body></html>"""

CSV = "city,country,population\nLisbon,Portugal,545000\nRotterdam,Netherlands,655000\n"

JSON = json.dumps(
    {
        "service": {"name": "billing", "owners": [{"team": "payments", "oncall": "ana"}]},
        "limits": {"rate": 100, "burst": None},
        "tags": ["core", "eu"],
    }
)

IPYNB = json.dumps(
    {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Notebook title\n", "Intro."]},
            {
                "cell_type": "code",
                "metadata": {},
                "source": ["print('hello')"],
                "outputs": [],
                "execution_count": None,
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
)


def scanned_pdf_bytes() -> bytes:
    """A PDF whose only page is a picture: no text layer."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_image(pymupdf.Rect(72, 72, 300, 300), stream=PNG)
    return doc.tobytes()


def zip_bomb(name: str = "word/document.xml", size: int = 64 * 1024 * 1024) -> bytes:
    """A small archive whose one member expands to ``size`` bytes of zeros."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as member:
            chunk = b"\0" * (1024 * 1024)
            for _ in range(size // len(chunk)):
                member.write(chunk)
    return out.getvalue()


def deep_html(depth: int = 10_000) -> bytes:
    return (
        "<html><body>" + "<div>" * depth + "deep" + "</div>" * depth + "</body></html>"
    ).encode()


def deep_json(depth: int = 10_000) -> bytes:
    return ("[" * depth + "1" + "]" * depth).encode()


def big_csv(rows: int = 1_000_000) -> bytes:
    return b"id,value\n" + b"".join(b"%d,x\n" % i for i in range(rows))
