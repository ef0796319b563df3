#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""
Checks that `vramtrace report` rejects each known-bad trace of tests/fuzz/bad/ with the exit
status and the message that bad/EXPECTED gives for it (exit 3 for bad traces, see
analyzer/cli.c vrt_exit_code; 0 where a damaged file is still read, with its warning), and that
what it reads of a damaged file is exactly what the generator put in the chunks a reader must
still take: the number of events `report --json` replays (EXPECTED's fourth column).

    check_bad.py VRAMTRACE BAD_DIR
    check_bad.py VRAMTRACE --generate MAKE_CORPUS   (checks a freshly generated corpus)

Entries marked "xfail: ..." are known analyzer bugs: they are reported, and an xfail that starts
passing fails the run, so that the mark is removed together with the fix.
"""
import json
import os
import subprocess
import sys
import tempfile


def check(vramtrace, bad_dir):
    with open(os.path.join(bad_dir, "EXPECTED"), encoding="utf-8") as f:
        entries = [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]
    listed = {e[0] for e in entries}
    on_disk = {n for n in os.listdir(bad_dir) if n != "EXPECTED"}
    passed = failed = xfailed = 0
    for extra in sorted(on_disk - listed):
        print("FAIL %s: in %s but not in EXPECTED" % (extra, bad_dir))
        failed += 1
    for name, code, message, events, status in entries:
        path = os.path.join(bad_dir, name)
        try:
            p = subprocess.run([vramtrace, "report", path], capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = "timeout", ""
        ok = rc == int(code) and message in err and rc in (0, 1, 2, 3, 4, 5)
        read = None
        if ok and events:
            j = subprocess.run([vramtrace, "report", "--json", "-q", path], capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL)
            read = json.loads(j.stdout)["events"] if j.returncode == int(code) else "exit %d" % j.returncode
            ok = read == int(events)
        if status.startswith("xfail"):
            if ok:
                print("FAIL %s: passes now; remove its xfail mark (%s)" % (name, status))
                failed += 1
            else:
                print("xfail %s: %s" % (name, status[6:].strip()))
                xfailed += 1
            continue
        if ok:
            passed += 1
            print("ok   %s" % name)
        else:
            failed += 1
            print("FAIL %s: exit %s (want %s), stderr %r (want it to contain %r), %s events read (want %s)" % (
                name, rc, code, err.strip()[-300:], message, read, events or "none"))
    print("%d passed, %d failed, %d skipped (known bugs)" % (passed, failed, xfailed))
    return 1 if failed else 0


def main(argv):
    if len(argv) == 4 and argv[2] == "--generate":
        with tempfile.TemporaryDirectory(prefix="vrt-bad-") as d:
            subprocess.run([argv[3], d], check=True)
            return check(argv[1], os.path.join(d, "bad"))
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    return check(argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
