"""Traces are self-contained: a program and a shared library of its own, built here with the C
compiler against the runtime double, are traced, then deleted, and the trace is moved to another
directory. The reports still name the library's function and the program's (a static function,
named from the executable's .symtab) with the paths of their modules, because the preload
symbolizes at record time (preload/symbols.c) and the names travel in the trace's own tables.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DOUBLES, MiB, TIMEOUT, analyze, frame_functions, trace

LIBRARY_C = r"""
#include <stddef.h>
#include <stdlib.h>
int cudaMalloc(void **ptr, size_t size);   /* the runtime double's; no CUDA header needed */

__attribute__((noinline)) void *copied_lib_alloc(size_t size)
{
	void *p = NULL;
	if (cudaMalloc(&p, size) != 0)
		abort();
	return p;
}
"""

PROGRAM_C = r"""
#include <stddef.h>
#include <stdio.h>
void *copied_lib_alloc(size_t size);
static void *kept;

__attribute__((noinline)) static void copied_prog_site(void) { kept = copied_lib_alloc(3u << 20); }

int main(void)
{
	copied_prog_site();
	puts("copied: done");
	return 0;
}
"""

FLAGS = ["-g", "-O0", "-fno-omit-frame-pointer", "-Wl,--build-id"]


def compiler():
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler (gcc) to build the program")
    return cc


def build_id(path):
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m[1] if m else None


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """Builds, traces and deletes the program; returns (trace in another directory, what was built)."""
    built = tmp_path_factory.mktemp("copied_build")
    (built / "liballoc.c").write_text(LIBRARY_C)
    (built / "prog.c").write_text(PROGRAM_C)
    lib, prog = built / "libcopiedalloc.so", built / "copiedprog"
    cc = compiler()
    for cmd in (
        [cc, *FLAGS, "-shared", "-fPIC", "-o", lib, built / "liballoc.c",
         f"-L{DOUBLES}", "-l:libcudart.so.13", f"-Wl,-rpath,{DOUBLES}"],
        [cc, *FLAGS, "-o", prog, built / "prog.c", f"-L{built}", "-lcopiedalloc", "-Wl,-rpath,$ORIGIN"],
    ):
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, f"{' '.join(map(str, cmd))}:\n{p.stderr}"
    ids = {"program": build_id(prog), "library": build_id(lib)}

    t = trace(built, [prog])
    assert (t.returncode, t.stdout) == (0, "copied: done\n"), t.stderr

    # Nothing of the run is left but the trace, and that in another directory.
    elsewhere = tmp_path_factory.mktemp("copied_elsewhere") / "copy.vrt"
    shutil.copyfile(t.trace, elsewhere)
    shutil.rmtree(built)
    assert not prog.exists() and not lib.exists()
    return elsewhere, {"program": str(prog), "library": str(lib)}, ids


def live_site(trace_path):
    report = json.loads(analyze("report", "--json", "--quiet", trace_path).stdout)
    sites = [s for s in report["live_at_end"] if "copied_lib_alloc" in frame_functions(s)]
    assert len(sites) == 1, report["live_at_end"]
    return report, sites[0]


def test_report_names_the_functions_of_deleted_binaries(copied):
    trace_path, paths, _ = copied
    report, site = live_site(trace_path)
    assert (site["bytes"], site["count"]) == (3 * MiB, 1)
    frames = site["frames"]
    assert [f["function"] for f in frames[:3]] == ["copied_lib_alloc", "copied_prog_site", "main"]
    assert frames[0]["module"] == paths["library"]
    assert frames[1]["module"] == frames[2]["module"] == paths["program"]
    assert {d["kind"] for d in report["devices"]} == {"device"}


def test_text_report_of_the_copy(copied):
    trace_path, _, _ = copied
    text = analyze("report", "--quiet", trace_path).stdout
    assert "copied_lib_alloc" in text and "copied_prog_site" in text


def test_dump_tables_lists_the_modules(copied):
    trace_path, paths, _ = copied
    tables = analyze("dump", "--tables", "--quiet", trace_path).stdout
    modules = re.findall(r"^module \d+ (\S*) base=0x[0-9a-f]+", tables, re.M)
    assert paths["program"] in modules and paths["library"] in modules, tables


def test_dump_tables_shows_build_ids(copied):
    trace_path, _, ids = copied
    assert ids["program"] and ids["library"], "the compiler wrote no build-id"
    tables = analyze("dump", "--tables", "--quiet", trace_path).stdout
    assert ids["program"] in tables and ids["library"] in tables
