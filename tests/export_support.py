"""Export files as documents for the tests that edit them: ``read_doc`` gathers a JSON Lines export into one dict
(the header's fields and a list per section, like the first format's object), ``write_doc`` writes such a dict back
as JSON Lines, edits included, unvalidated."""
from __future__ import annotations

import json

from arbiter.store.transfer import SECTIONS


def read_doc(path) -> dict:
    with open(path, encoding="utf-8") as f:
        doc = json.loads(f.readline())
        doc.update({section: [] for section in SECTIONS})
        for line in f:
            row = json.loads(line)
            doc[row.pop("section")].append(row)
    return doc


def write_doc(doc: dict, path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({k: v for k, v in doc.items() if k not in SECTIONS}) + "\n")
        for section in SECTIONS:
            for row in doc.get(section, []):
                f.write(json.dumps({"section": section, **row}) + "\n")
