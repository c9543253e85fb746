"""A chunk's regions: the recorded boxes its characters overlap, merged per column."""

from __future__ import annotations

from kbpg_db.regions import chunk_origins

META = {
    "regions": [
        [0, 10, 1, 72, 72, 290, 90],  # a heading
        [11, 200, 1, 72, 100, 290, 300],  # a paragraph just below: merged with it
        [201, 400, 1, 310, 100, 520, 400],  # the right column: a box of its own
        [402, 500, 2, 72, 72, 500, 200, 0.8],  # page 2, read by OCR
        [501, 600, 2, 72, 210, 500, 300, 0.6],
    ],
    "ocr": {"engine": "tesseract"},
}


def test_a_chunk_gets_the_boxes_it_overlaps() -> None:
    out = chunk_origins(META, [[0, 0, 150], [1, 150, 450], [2, 450, 600], [3, 700, 800]])
    assert out["0"] == {"regions": [{"page": 1, "bbox": [72.0, 72.0, 290.0, 300.0]}]}
    assert out["1"]["regions"] == [
        {"page": 1, "bbox": [72.0, 100.0, 290.0, 300.0]},
        {"page": 1, "bbox": [310.0, 100.0, 520.0, 400.0]},
        {"page": 2, "bbox": [72.0, 72.0, 500.0, 200.0]},
    ]
    assert out["1"]["ocr"] == {"engine": "tesseract", "confidence": 0.8}
    # Weighted by the characters of each OCR region the chunk holds.
    assert out["2"]["regions"] == [{"page": 2, "bbox": [72.0, 72.0, 500.0, 300.0]}]
    assert out["2"]["ocr"]["confidence"] == round((0.8 * 50 + 0.6 * 99) / 149, 3)
    assert "3" not in out  # past the regions: nothing to say
    assert chunk_origins({}, [[0, 0, 10]]) == {}
