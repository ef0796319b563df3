#!/usr/bin/env python3
"""Builds `vramtrace html` pages of each trace with two binaries and compares the data object the
pages embed (what their JavaScript reads; extracted as tests/e2e/test_html.py's page_data does).
The one member that differs by design, generated_unix_s (the time the page was made), is left out.

    scripts/html-data-diff.py OLD_BIN NEW_BIN TRACE...

Prints a line per trace that differs (the first differing member) and "N/M identical"; exits 1
when any differs or a page could not be built."""
import json
import os
import re
import subprocess
import sys
import tempfile

DATA = re.compile(r'<script type="application/json" id="vrt-data">(.*?)</script>', re.S)


def page_data(binary, trace, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMTRACE_")}
    p = subprocess.run([binary, "html", "-q", "-o", out, trace], capture_output=True, text=True, env=env,
                       timeout=600)
    if p.returncode:
        return None, f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
    with open(out, encoding="utf-8") as f:
        m = DATA.search(f.read())
    if not m:
        return None, "no embedded data"
    d = json.loads(m.group(1))
    d.pop("generated_unix_s", None)
    return d, None


def first_difference(a, b, path="data"):
    if type(a) is not type(b):
        return path
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return list(a) != list(b) and f"{path} (member order)"
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else path


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    old, new, traces = argv[1], argv[2], argv[3:]
    same = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, trace in enumerate(traces):
            a, why_a = page_data(old, trace, os.path.join(tmp, f"{i}-old.html"))
            b, why_b = page_data(new, trace, os.path.join(tmp, f"{i}-new.html"))
            if why_a or why_b:
                print(f"{trace}: old {why_a or 'ok'}; new {why_b or 'ok'}")
                continue
            # Compared as text too: the same values in another order or spelling are a difference.
            if a == b and json.dumps(a) == json.dumps(b):
                same += 1
            else:
                print(f"{trace}: differs at {first_difference(a, b) or 'text'}")
    print(f"{same}/{len(traces)} identical")
    return 0 if same == len(traces) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
