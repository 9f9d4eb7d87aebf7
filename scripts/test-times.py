"""Prints each test binary's test count and time from cargo-nextest's JUnit report: the wall time
from its first test's start to its last test's end (tests of several binaries overlap), and the
sum of its tests' own times."""
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta

rows = []
for suite in ET.parse(sys.argv[1]).getroot().iter("testsuite"):
    spans, total = [], 0.0
    for case in suite.iter("testcase"):
        seconds = float(case.get("time", 0))
        total += seconds
        if case.get("timestamp"):
            start = datetime.fromisoformat(case.get("timestamp"))
            spans.append((start, start + timedelta(seconds=seconds)))
    wall = (max(e for _, e in spans) - min(s for s, _ in spans)).total_seconds() if spans else total
    rows.append((wall, suite.get("name"), int(suite.get("tests", 0)), total))
for wall, name, count, total in sorted(rows, reverse=True):
    print(f"test: {name}: {count} tests, {wall:.1f} s wall, {total:.1f} s summed", file=sys.stderr)
