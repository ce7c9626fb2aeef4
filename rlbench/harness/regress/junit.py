"""JUnit XML, the report format every CI system reads: one test case per verdict."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

__all__ = ["Case", "junit_xml"]


@dataclass(frozen=True)
class Case:
    name: str
    verdict: str
    why: str  # one line
    failed: bool
    details: str = ""  # a failure's longer text (tracebacks)
    skipped: bool = False  # not judged (the throughput gate's NOISY)


# Characters XML 1.0 cannot hold, even escaped (an error text may carry terminal codes).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def junit_xml(suite_name: str, classname: str, cases: list[Case]) -> str:
    """A ``testsuite`` of ``cases``; a failed case carries a ``failure`` and a case not
    judged a ``skipped``, each with a message that says why; every case its verdict in
    ``system-out``."""
    suite = ET.Element("testsuite", name=_text(suite_name), tests=str(len(cases)),
                       failures=str(sum(c.failed for c in cases)), errors="0",
                       skipped=str(sum(c.skipped and not c.failed for c in cases)))
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=_text(classname),
                             name=_text(c.name))
        if c.failed:
            ET.SubElement(case, "failure", message=_text(c.why), type=c.verdict).text = (
                _text(c.details) or None)
        elif c.skipped:
            ET.SubElement(case, "skipped", message=_text(c.why))
        ET.SubElement(case, "system-out").text = _text(f"{c.verdict}: {c.why}")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
