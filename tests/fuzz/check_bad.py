#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""
Checks that `vramtrace report` rejects each known-bad trace of tests/fuzz/bad/ with the exit
status and the message that bad/EXPECTED gives for it (exit 3 for bad traces, see
analyzer/cli.c vrt_exit_code; 0 where a damaged file is still read, with its warning; 6 where
the memory budget stops it), that what it reads of a damaged file is exactly what the generator
put in the chunks a reader must still take (the number of events `report --json` replays,
EXPECTED's fourth column; empty: not counted), and that it stays within the memory and time it
may take: every file is read in at most 200 MiB of peak RSS and 30 s unless its sixth column
says otherwise (rss=MiB secs=S), with the arguments args=A,B, from a copy extended (sparse) to
size=BYTES; stdout_max=N bounds what it prints, clean=1 says that stdout holds no terminal
control characters.

    check_bad.py [--sanitized] VRAMTRACE BAD_DIR
    check_bad.py [--sanitized] VRAMTRACE --generate MAKE_CORPUS   (checks a freshly generated corpus)

--sanitized (a sanitizer build of vramtrace): peak RSS is not checked (the sanitizer's shadow and
quarantine are not the analyzer's memory; the budget still holds, through the sanitizer's
allocation hooks), and every time limit is ten times longer.

Entries marked "xfail: ..." are known analyzer bugs: they are reported, and an xfail that starts
passing fails the run, so that the mark is removed together with the fix.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

DEFAULT_RSS_MIB = 200
DEFAULT_SECS = 30
# C0 controls but newline and tab, DEL, C1 controls (UTF-8), bidi overrides and isolates.
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def limits_of(fields):
    limits = {"rss": DEFAULT_RSS_MIB, "secs": DEFAULT_SECS, "args": "", "size": 0, "stdout_max": 0, "clean": 0}
    for item in " ".join(fields).split():
        key, _, value = item.partition("=")
        if key not in limits:
            raise ValueError("unknown limit %r" % item)
        limits[key] = value if key == "args" else int(value)
    return limits


def measure(cmd, secs):
    """Runs cmd; returns (exit status or "timeout", stdout bytes, stderr text, peak RSS in MiB)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out, err = [], []
    readers = [threading.Thread(target=lambda: out.append(p.stdout.read())),
               threading.Thread(target=lambda: err.append(p.stderr.read()))]
    for r in readers:
        r.start()
    timer = threading.Timer(secs, p.kill)
    timer.start()
    _, status, usage = os.wait4(p.pid, 0)
    timer.cancel()
    for r in readers:
        r.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    rc = "timeout" if p.returncode == -9 else p.returncode
    return rc, out[0], err[0].decode(errors="replace"), usage.ru_maxrss / 1024


def prepared(path, limits, scratch):
    """The file to read: path itself, or a sparse copy extended to limits["size"]."""
    if not limits["size"]:
        return path
    copy = os.path.join(scratch, os.path.basename(path))
    shutil.copyfile(path, copy)
    os.truncate(copy, limits["size"])
    return copy


def replayed_events(vramtrace, args, path, code, secs):
    """How many events `report --json` replays from path, or what went wrong."""
    try:
        j = subprocess.run([vramtrace, "report", "--json", "-q", *args, path], capture_output=True, text=True,
                           timeout=secs, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "timeout"
    if j.returncode != code:
        return "exit %d" % j.returncode
    return json.loads(j.stdout)["events"]


SANITIZED = False


def check(vramtrace, bad_dir):
    with open(os.path.join(bad_dir, "EXPECTED"), encoding="utf-8") as f:
        entries = [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]
    listed = {e[0] for e in entries}
    on_disk = {n for n in os.listdir(bad_dir) if n != "EXPECTED"}
    passed = failed = xfailed = 0
    for extra in sorted(on_disk - listed):
        print("FAIL %s: in %s but not in EXPECTED" % (extra, bad_dir))
        failed += 1
    with tempfile.TemporaryDirectory(prefix="vrt-bad-") as scratch:
        for name, code, message, events, status, *rest in entries:
            limits = limits_of(rest)
            path = prepared(os.path.join(bad_dir, name), limits, scratch)
            args = [a for a in limits["args"].split(",") if a]
            rc, out, err, rss = measure([vramtrace, "report", *args, path], limits["secs"] * (10 if SANITIZED else 1))
            problems = []
            if rc != int(code) or rc not in (0, 1, 2, 3, 4, 5, 6):
                problems.append("exit %s (want %s)" % (rc, code))
            if message not in err:
                problems.append("stderr %r (want it to contain %r)" % (err.strip()[-300:], message))
            if rss > limits["rss"] and not SANITIZED:
                problems.append("peak RSS %.0f MiB (at most %d)" % (rss, limits["rss"]))
            if limits["stdout_max"] and len(out) > limits["stdout_max"]:
                problems.append("%d bytes on stdout (at most %d)" % (len(out), limits["stdout_max"]))
            if limits["clean"] and CONTROL.search(out):
                problems.append("a control character on stdout: %r" % CONTROL.search(out).group())
            if not problems and events:
                read = replayed_events(vramtrace, args, path, int(code), limits["secs"] * (10 if SANITIZED else 1))
                if read != int(events):
                    problems.append("%s events read (want %s)" % (read, events))
            if path != os.path.join(bad_dir, name):
                os.unlink(path)
            ok = not problems
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
                print("ok   %s (%.0f MiB)" % (name, rss))
            else:
                failed += 1
                print("FAIL %s: %s" % (name, "; ".join(problems)))
    print("%d passed, %d failed, %d skipped (known bugs)" % (passed, failed, xfailed))
    return 1 if failed else 0


def main(argv):
    global SANITIZED
    if len(argv) > 1 and argv[1] == "--sanitized":
        SANITIZED = True
        argv = argv[:1] + argv[2:]
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
