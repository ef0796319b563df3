#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns analyzer/report.html.in into a C header holding it as one string literal, for
`vramtrace html` (analyzer/cmd_html.c). Run by meson at build time:

    embed_template.py report.html.in html_template.h

One C string per template line, so the generated header stays diffable. Bytes outside
printable ASCII are written as octal escapes. The comment right after the doctype is for the
template's readers, not the report's: it is left out.
"""
import sys


def c_literal(data: bytes) -> str:
    out = []
    for b in data:
        c = chr(b)
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "?":
            out.append("\\?")  # no trigraphs, whatever the compiler mode
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: embed_template.py TEMPLATE OUTPUT.h")
    with open(argv[1], "rb") as f:
        text = f.read()
    head = b"<!DOCTYPE html>\n<!--"
    if text.startswith(head):
        end = text.index(b"-->\n", len(head)) + len(b"-->\n")
        text = text[:len(head) - 4] + text[end:]
    lines = text.splitlines(keepends=True)
    body = "\n".join("\t" + c_literal(line) for line in lines) or '\t""'
    with open(argv[2], "w", encoding="ascii") as f:
        f.write("/* Generated from analyzer/report.html.in by analyzer/embed_template.py: do not edit. */\n")
        f.write("static const char vrt_html_template[] =\n%s;\n" % body)


if __name__ == "__main__":
    main(sys.argv)
