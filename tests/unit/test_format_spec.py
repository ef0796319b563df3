# SPDX-License-Identifier: MIT
"""
Ties docs/trace-format.md to include/vramtrace/format.h, in both directions.

The C side comes from tests/unit/format_layout (built by meson; its path in the environment
variable VRT_FORMAT_LAYOUT), which prints what the compiler sees: struct offsets and sizes, enum
values, record layouts, API names. The spec side comes from the tables of the document that are
introduced by a `<!-- table: NAME -->` comment. Every fact on one side must be on the other with
the same numbers. The text of format.h is parsed as well, so that a member added to the header but
not to format_layout.c is caught too.

Run by meson (suite 'unit'), by `python3 -m pytest tests/unit` (with VRT_FORMAT_LAYOUT set), or
directly: `VRT_FORMAT_LAYOUT=build/tests/unit/format_layout python3 tests/unit/test_format_spec.py`.
"""
import functools
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("VRT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
SPEC = os.path.join(ROOT, "docs", "trace-format.md")
FORMAT_H = os.path.join(ROOT, "include", "vramtrace", "format.h")

# Every table the document must have, and nothing else tagged.
STRUCTS = ["vrt_file_header", "vrt_file_state", "vrt_chunk_header"]
PLAIN_ENUMS = ["vrt_file_flags", "vrt_end_reason", "vrt_chunk_type", "vrt_codec", "vrt_mem_kind",
               "vrt_frame_kind", "vrt_mode", "vrt_mode_cause", "vrt_cp_reason", "vrt_exiting", "vrt_walk_reason",
               "vrt_walk_status", "vrt_owner_category", "vrt_owner_status"]
OTHER_TABLES = ["enum vrt_field_code", "enum vrt_api", "opcodes", "limits", "constants", "crc", "versions"]


def _layout_binary():
    path = os.environ.get("VRT_FORMAT_LAYOUT")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(ROOT, "build*", "tests", "unit", "format_layout")))
    if found:
        return found[0]
    raise RuntimeError("set VRT_FORMAT_LAYOUT to the built tests/unit/format_layout")


@functools.lru_cache(maxsize=None)
def layout():
    """What the compiler sees, from format_layout."""
    out = subprocess.run([_layout_binary()], check=True, capture_output=True, text=True).stdout
    c = {"const": {}, "struct": {}, "field": {}, "enum": {}, "op": {}, "api": {}}
    for line in out.splitlines():
        kind, *rest = line.split(" ")
        if kind == "const":
            c["const"][rest[0]] = rest[1]
        elif kind == "struct":
            c["struct"][rest[0]] = int(rest[1])
            c["field"].setdefault(rest[0], [])
        elif kind == "field":
            c["field"].setdefault(rest[0], []).append((rest[1], int(rest[2]), int(rest[3])))
        elif kind == "enum":
            c["enum"].setdefault(rest[0], {})[rest[1]] = int(rest[2])
        elif kind == "op":
            c["op"][rest[0]] = (int(rest[1]), rest[2])
        elif kind == "api":
            c["api"][rest[0]] = (int(rest[1]), " ".join(rest[2:]))
        else:
            raise AssertionError("format_layout printed an unknown line: %r" % line)
    return c


def _cells(line):
    line = line.strip()
    assert line.startswith("|") and line.endswith("|"), line
    return [cell.strip() for cell in line[1:-1].split("|")]


@functools.lru_cache(maxsize=None)
def spec_tables():
    """{name: (headers, [row dicts])} for every tagged table of the document."""
    with open(SPEC, encoding="utf-8") as f:
        lines = f.read().splitlines()
    tables = {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"\s*<!--\s*table:\s*(.+?)\s*-->\s*", line)
        if not m:
            continue
        name = m.group(1)
        assert name not in tables, "table %r tagged twice" % name
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        headers = _cells(lines[j])
        sep = _cells(lines[j + 1])
        assert len(sep) == len(headers) and all(re.fullmatch(r":?-{3,}:?", s) for s in sep), \
            "table %r: bad separator line" % name
        rows = []
        j += 2
        while j < len(lines) and lines[j].strip().startswith("|"):
            cells = _cells(lines[j])
            assert len(cells) == len(headers), "table %r: row %r has %d cells, want %d" % (
                name, lines[j], len(cells), len(headers))
            rows.append(dict(zip(headers, cells)))
            j += 1
        assert rows, "table %r is empty" % name
        tables[name] = (headers, rows)
    return tables


def table(name, headers):
    tables = spec_tables()
    assert name in tables, "docs/trace-format.md has no table tagged %r" % name
    have, rows = tables[name]
    assert have == headers, "table %r: columns %r, want %r" % (name, have, headers)
    return rows


def untick(cell):
    return cell.strip().strip("`")


def diff(spec, header):
    """Only the entries that differ, for readable failures."""
    keys = sorted(set(spec) | set(header), key=str)
    return "; ".join("%s: spec %r, header %r" % (k, spec.get(k, "(missing)"), header.get(k, "(missing)"))
                     for k in keys if spec.get(k) != header.get(k))


def number(cell):
    return int(untick(cell), 0)


def c_string_bytes(cell):
    """`"VRAMTRC\\0"` -> bytes."""
    s = untick(cell)
    assert s.startswith('"') and s.endswith('"'), cell
    return s[1:-1].encode("ascii").decode("unicode_escape").encode("latin-1")


@functools.lru_cache(maxsize=None)
def header_text():
    with open(FORMAT_H, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_enums():
    """{enum name: [member names]} for the enums written out in format.h (not X-macro ones)."""
    out = {}
    for m in re.finditer(r"enum\s+(\w+)\s*\{(.*?)\};", header_text(), flags=re.S):
        body = m.group(2)
        if "VRT_APIS(" in body:
            continue
        out[m.group(1)] = re.findall(r"^\s*(VRT_\w+)\s*(?:=|,|$)", body, flags=re.M)
    return out


def header_structs():
    out = {}
    for m in re.finditer(r"struct\s+(\w+)\s*\{(.*?)\};", header_text(), flags=re.S):
        out[m.group(1)] = re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*;", m.group(2))
    return out


def header_defines():
    return set(re.findall(r"^#define\s+(VRT_\w+)(?!\()\s", header_text(), flags=re.M))


# ---- tests ---------------------------------------------------------------------------------

def test_every_tagged_table_is_known():
    expected = {"struct " + s for s in STRUCTS} | {"enum " + e for e in PLAIN_ENUMS} | set(OTHER_TABLES)
    have = set(spec_tables())
    assert have == expected, "unexpected tables %r, missing tables %r" % (
        sorted(have - expected), sorted(expected - have))


def test_structs_match():
    c = layout()
    assert sorted(c["struct"]) == sorted(STRUCTS), c["struct"]
    for s in STRUCTS:
        rows = table("struct " + s, ["offset", "size", "field", "meaning"])
        spec = [(untick(r["field"]), number(r["offset"]), number(r["size"])) for r in rows]
        assert spec == c["field"][s], "struct %s: spec %r\n != header %r" % (s, spec, c["field"][s])
        # The fields tile the struct: no hidden padding, nothing past its end.
        end = 0
        for name, off, size in spec:
            assert off == end, "struct %s: gap or overlap before %s (%d, want %d)" % (s, name, off, end)
            end = off + size
        assert end == c["struct"][s], "struct %s: fields end at %d, sizeof is %d" % (s, end, c["struct"][s])


def test_struct_fields_all_listed_by_format_layout():
    structs = header_structs()
    for s in STRUCTS:
        printed = [f[0] for f in layout()["field"][s]]
        assert structs[s] == printed, "struct %s in format.h has %r, format_layout prints %r" % (
            s, structs[s], printed)


def test_plain_enums_match():
    c = layout()["enum"]
    limits = {untick(r["name"]): number(r["value"]) for r in table("limits", ["value", "name", "meaning"])}
    limits_seen = {}
    for e in PLAIN_ENUMS:
        rows = table("enum " + e, ["value", "name", "meaning"])
        spec = {untick(r["name"]): number(r["value"]) for r in rows}
        assert len(spec) == len(rows), "enum %s: a name is listed twice" % e
        members = {k: v for k, v in c[e].items() if not k.endswith("_LAST")}
        limits_seen.update({k: v for k, v in c[e].items() if k.endswith("_LAST")})
        assert spec == members, "enum %s: %s" % (e, diff(spec, members))
    for e in ("vrt_op", "vrt_api"):
        limits_seen.update({k: v for k, v in c[e].items() if k.endswith("_LAST")})
    assert limits == limits_seen, "limits: " + diff(limits, limits_seen)


def test_enum_members_all_listed_by_format_layout():
    printed = layout()["enum"]
    enums = header_enums()
    for e, members in enums.items():
        assert e in printed, "format.h enum %s is not printed by format_layout" % e
        assert set(members) == set(printed[e]), "enum %s: format.h has %r, format_layout prints %r" % (
            e, sorted(members), sorted(printed[e]))
    assert set(printed) - {"vrt_api"} <= set(enums), sorted(set(printed) - set(enums))


def test_field_codes_match():
    rows = table("enum vrt_field_code", ["code", "name", "encoding", "meaning and decoding rule"])
    spec = {}
    for r in rows:
        code = untick(r["code"])
        assert len(code) == 1, r
        spec[untick(r["name"])] = ord(code)
    assert spec == layout()["enum"]["vrt_field_code"], diff(spec, layout()["enum"]["vrt_field_code"])


def test_opcodes_match():
    c = layout()
    rows = table("opcodes", ["value", "name", "layout", "fields"])
    spec = {untick(r["name"]): (number(r["value"]), untick(r["layout"])) for r in rows}
    assert len(spec) == len(rows), "an opcode is listed twice"
    assert spec == c["op"], "opcodes: " + diff(spec, c["op"])
    values = [v for v, _ in spec.values()]
    assert len(set(values)) == len(values), "two opcodes share a value"
    ops = {k: v for k, v in c["enum"]["vrt_op"].items() if not k.endswith("_LAST")}
    assert ops == {k: v for k, (v, _) in c["op"].items()}, "enum vrt_op and VRT_RECORD_LAYOUTS differ"
    codes = {chr(v) for v in c["enum"]["vrt_field_code"].values()}
    for r in rows:
        lay = untick(r["layout"])
        assert set(lay) <= codes, "%s: unknown field code in %r" % (r["name"], lay)
        described = "".join(re.findall(r"`(.)`", r["fields"]))
        assert described == lay, "%s: the fields column describes %r, the layout is %r" % (
            r["name"], described, lay)


def test_apis_match():
    rows = table("enum vrt_api", ["value", "name", "function"])
    spec = {untick(r["name"]): (number(r["value"]), untick(r["function"])) for r in rows}
    assert len(spec) == len(rows), "an API is listed twice"
    assert spec == layout()["api"], "APIs: " + diff(spec, layout()["api"])


def test_constants_match():
    rows = table("constants", ["value", "name", "meaning"])
    c = layout()["const"]
    spec = {}
    for r in rows:
        name = untick(r["name"])
        value = untick(r["value"])
        spec[name] = c_string_bytes(value).hex() if value.startswith('"') else str(int(value, 0))
    assert spec == c, "constants: " + diff(spec, c)
    assert header_defines() - {"VRT_RECORD_LAYOUTS", "VRT_APIS"} <= set(c), \
        "format.h #defines not printed by format_layout: %r" % sorted(header_defines() - set(c))


def test_crc_ranges_match():
    rows = {untick(r["checksum"]): untick(r["covers"]) for r in table("crc", ["checksum", "covers", "notes"])}
    fields = layout()["field"]

    def offset(s, f):
        return [o for n, o, _ in fields[s] if n == f][0]

    want = {
        "vrt_file_header.header_crc": "0..%d" % (offset("vrt_file_header", "header_crc") - 1),
        "vrt_file_state.crc": "0..%d" % (offset("vrt_file_state", "crc") - 1),
        "vrt_chunk_header.header_crc": "0..%d" % (offset("vrt_chunk_header", "header_crc") - 1),
        "vrt_chunk_header.payload_crc": "payload",
    }
    assert rows == want, "crc coverage: " + diff(rows, want)
    # The prose and the struct tables say the same.
    state = offset("vrt_file_header", "state")
    text = open(SPEC, encoding="utf-8").read()
    assert "absolute bytes %d..%d" % (state, state + offset("vrt_file_state", "crc") - 1) in text


def test_version_log_matches():
    c = layout()["const"]
    current = "%s.%s" % (c["VRT_FORMAT_MAJOR"], c["VRT_FORMAT_MINOR"])
    rows = table("versions", ["version", "change"])
    assert untick(rows[-1]["version"]) == current, "the last entry of Version changes is not %s" % current
    text = open(SPEC, encoding="utf-8").read()
    assert "format version **%s**" % current in text


def _main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print("ok   %s" % name)
        except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e))
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
