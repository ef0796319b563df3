#!/usr/bin/env python3
"""Derives preload/torch.c's view of PyTorch's CUDA caching allocator from each release itself.

    generate.py [--work DIR] [--all] [VERSION...]     e.g.  generate.py 2.4.1 2.5.0
    generate.py --header                              rewrite the C table from layouts.json

For each release: fetch its wheel from PyPI (fetch.py; nothing of it is committed), compile
probe.cpp against the wheel's torch/include and CUDA headers of the wheel's CUDA major to get
vtable slots, structure offsets and enum values; read the wheel's libc10_cuda.so (readelf) to
confirm that NativeCachingAllocator's vtable holds those methods in those slots, its RTTI names
and the exported allocator object; then build loadcheck.c with the preload's own row check
(preload/torch_layout.c) and run it on the library, dlopened on this CPU-only machine: the row
must pass, a corrupted row must be refused, the cudaMallocAsync backend must be recognised.
The row and what was checked go to layouts.json; preload/torch_layout_table.h is written from it.
--all takes every 2.x release from 2.1 on that `pip index versions torch` lists.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import fetch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LAYOUTS = HERE / "layouts.json"
TABLE = ROOT / "preload" / "torch_layout_table.h"

NS = "_ZN3c104cuda20CUDACachingAllocator"
NATIVE = "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"
ASYNC = "N3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE"
ALLOCATOR_SYMBOL = NS + "9allocatorE"
METHODS = {"initialized": "initialized", "get_device_stats": "getDeviceStats",
           "attach_tracker": "attachAllocatorTraceTracker"}

# The C struct's fields in order (torch_layout.h), and where each comes from.
FIELDS = ["release", "cuda", "slot_initialized", "slot_get_device_stats", "slot_attach_tracker", "vtable_slots",
          "stats_size", "stats_alloc_count", "stats_alloc_bytes", "stats_freed_bytes",
          "entry_action", "entry_device", "entry_device_size", "entry_addr", "entry_stream", "entry_size",
          "action_alloc", "action_free_requested", "action_oom",
          "rtti_native", "rtti_async", "fn_initialized", "fn_get_device_stats", "fn_attach_tracker"]
STRINGS = {"release", "cuda", "rtti_native", "rtti_async", "fn_initialized", "fn_get_device_stats",
           "fn_attach_tracker"}


class Mismatch(Exception):
    pass


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def release_key(v):
    return tuple(int(x) for x in v.split("."))


def all_releases():
    out = run([sys.executable, "-m", "pip", "index", "versions", "torch"])
    listed = re.search(r"Available versions: (.*)", out)[1].split(", ")
    return sorted((v for v in listed if re.fullmatch(r"2\.\d+\.\d+", v) and release_key(v) >= (2, 1, 0)),
                  key=release_key)


# ---- CUDA headers and runtime of the wheel's CUDA major ------------------------------------------

def wheel_cuda(rel: Path):
    text = (rel / "torch" / "version.py").read_text()
    return re.search(r"^cuda[^=]*= '([\d.]+)'", text, re.M)[1]


def cudart(work: Path, rel: Path):
    """(include dir, lib dir) for the wheel's CUDA: CUDA 12 from the nvidia-cuda-runtime-cu12
    wheel its METADATA pins, CUDA 13 from the local toolkit (/usr/local/cuda)."""
    cuda = wheel_cuda(rel)
    if cuda.startswith("13."):
        return Path("/usr/local/cuda/include"), Path("/usr/local/cuda/lib64")
    meta = next(rel.glob("*.dist-info/METADATA")).read_text()
    pin = re.search(r"nvidia-cuda-runtime-cu12 ?\(?==([\d.]+)", meta)
    version = pin[1] if pin else "12.1.105"
    dest = work / f"cudart-{version}"
    if not (dest / "done").exists():
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", tmp,
                   "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
                   "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux1_x86_64",
                   f"nvidia-cuda-runtime-cu12=={version}"]
            subprocess.run(cmd, check=True)
            import zipfile
            with zipfile.ZipFile(next(Path(tmp).glob("*.whl"))) as z:
                z.extractall(dest)
        (dest / "done").write_text("")
    base = dest / "nvidia" / "cuda_runtime"
    return base / "include", base / "lib"


# ---- the headers: probe.cpp ------------------------------------------------------------------------

def probe(work: Path, rel: Path, include: Path):
    exe = work / f"probe-{rel.name}"
    last = None
    for std in ("c++20", "c++17"):
        cmd = ["g++", f"-std={std}", "-O0", "-w", "-I", str(rel / "torch" / "include"), "-I", str(include),
               str(HERE / "probe.cpp"), "-o", str(exe)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode == 0:
            break
        last = p.stderr
    else:
        raise Mismatch(f"probe.cpp does not compile against {rel.name}'s headers:\n{last[-3000:]}")
    facts = dict(line.split(" ", 1) for line in run([str(exe)]).splitlines())
    return {k: int(v) for k, v in facts.items()}, std


# ---- the binary: readelf -------------------------------------------------------------------------

def read_elf(lib: Path):
    """Symbols by name and by address, and what each word of .data.rel.ro-ish memory is relocated to."""
    syms, by_addr = {}, {}
    for line in run(["readelf", "-W", "-s", str(lib)]).splitlines():
        f = line.split()
        if len(f) < 8 or not re.fullmatch(r"\d+:", f[0]) or f[6] == "UND":
            continue
        value, size, kind, name = int(f[1], 16), int(f[2], 0), f[3], f[7].split("@")[0]
        syms.setdefault(name, (value, size, kind))
        if kind == "FUNC":
            by_addr.setdefault(value, set()).add(name)
    relocs = {}
    for line in run(["readelf", "-W", "-r", str(lib)]).splitlines():
        f = line.split()
        if len(f) < 4 or not re.fullmatch(r"[0-9a-f]{8,16}", f[0]):
            continue
        if f[2] == "R_X86_64_RELATIVE":
            relocs[int(f[0], 16)] = ("addr", int(f[3], 16))
        elif f[2] in ("R_X86_64_64", "R_X86_64_GLOB_DAT") and len(f) >= 5:
            relocs[int(f[0], 16)] = ("sym", f[4].split("@")[0])
    return syms, by_addr, relocs


def elf_check(lib: Path, facts):
    """The vtable slots the headers gave, as the binary holds them; the override names for the row."""
    syms, by_addr, relocs = read_elf(lib)
    notes = []
    if syms.get(ALLOCATOR_SYMBOL, (0, 0, ""))[1:] != (8, "OBJECT"):
        raise Mismatch(f"{ALLOCATOR_SYMBOL} is not an exported 8-byte object")
    for rtti in (NATIVE, ASYNC):
        if "_ZTS" + rtti not in syms or "_ZTI" + rtti not in syms:
            raise Mismatch(f"no RTTI for {rtti}")
    vt_addr, vt_size, _ = syms["_ZTV" + NATIVE]
    point = vt_addr + 16
    ti = relocs.get(point - 8)
    if ti not in (("addr", syms["_ZTI" + NATIVE][0]), ("sym", "_ZTI" + NATIVE)):
        raise Mismatch(f"the vtable's type_info word is {ti}")
    row = {"vtable_slots": vt_size // 8 - 2}
    for key, method in METHODS.items():
        slot = facts[f"slot.{key}"]
        if slot < 0:
            row[f"fn_{key}"] = None
            continue
        if slot >= row["vtable_slots"]:
            raise Mismatch(f"slot {slot} ({method}) is past the vtable's {row['vtable_slots']}")
        target = relocs.get(point + 8 * slot)
        names = by_addr.get(target[1], set()) if target and target[0] == "addr" else {target[1]} if target else set()
        want = re.compile(re.escape(NS) + r"6Native22NativeCachingAllocator%d%sE" % (len(method), method))
        hits = sorted(n for n in names if want.match(n))
        if not hits:
            raise Mismatch(f"vtable slot {slot} holds {sorted(names) or target}, not NativeCachingAllocator::{method}")
        row[f"fn_{key}"] = hits[0]
        notes.append(f"slot {slot} = {method}")
    return row, notes


# ---- the preload's own check on the dlopened library: loadcheck.c -------------------------------------

def build_loadcheck(work: Path):
    exe = work / "loadcheck"
    run(["gcc", "-std=gnu17", "-O1", "-Wall", "-I", str(ROOT / "preload"), str(HERE / "loadcheck.c"),
         str(ROOT / "preload" / "torch_layout.c"), "-lelf", "-ldl", "-o", str(exe)])
    return exe


def load_check(exe: Path, rel: Path, libdir: Path, version: str):
    lib = rel / "torch" / "lib"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{lib}:{libdir}")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    out = []
    for conf in (None, "backend:cudaMallocAsync"):
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        p = subprocess.run([str(exe), str(lib / "libc10_cuda.so"), version, "async" if conf else "native"],
                           capture_output=True, text=True, env=env, timeout=120)
        if p.returncode:
            raise Mismatch(f"loadcheck ({conf or 'native'}) failed: {p.stdout}{p.stderr}")
        out.append(p.stdout.strip())
    return out


# ---- the table ----------------------------------------------------------------------------------------

def derive(work: Path, version: str, loadcheck_exe=None):
    rel = fetch.fetch(work, version)
    include, libdir = cudart(work, rel)
    facts, std = probe(work, rel, include)
    if facts["stats.size"] <= 16 or facts["stats.counter_size"] != 8 or facts["allocator.atomic_pointer"] != 1:
        raise Mismatch(f"DeviceStats or the allocator object is not what torch.c reads: {facts}")
    if facts["slot.attach_tracker"] >= 0 and facts["sizeof.std_function"] != 32:
        raise Mismatch("the tracker is not a libstdc++ std::function")
    if -2 in (facts["slot.initialized"], facts["slot.get_device_stats"], facts["slot.attach_tracker"]):
        raise Mismatch(f"a method's signature changed: {facts}")
    elf_row, elf_notes = elf_check(rel / "torch" / "lib" / "libc10_cuda.so", facts)
    row = {"release": version, "cuda": wheel_cuda(rel)}
    for f in FIELDS:
        key = f.replace("_", ".", 1)
        if f in elf_row:
            row[f] = elf_row[f]
        elif key in facts:
            row[f] = facts[key]
    row.update(rtti_native=NATIVE, rtti_async=ASYNC)
    row["checked"] = {
        "wheel": (rel / "wheel").read_text().strip(),
        "headers": f"probe.cpp, g++ -std={std}, CUDA headers {include}",
        "binary": "libc10_cuda.so: " + "; ".join(elf_notes + ["RTTI of both backends", "allocator exported"]),
    }
    return row, rel, libdir


def load_layouts():
    return json.loads(LAYOUTS.read_text()) if LAYOUTS.exists() else []


def save_layouts(rows):
    rows = sorted(rows, key=lambda r: release_key(r["release"]))
    LAYOUTS.write_text(json.dumps(rows, indent=1) + "\n")
    write_table(rows)


def c_value(v):
    if v is None:
        return "NULL"
    return json.dumps(v) if isinstance(v, str) else str(v)


def table_text(rows):
    lines = ["/* Generated by scripts/torch_layouts/generate.py from layouts.json: do not edit. */",
             "/* One row a PyTorch release; see torch_layout.h for the fields. */",
             "static const struct vrt_torch_layout vrt_torch_layout_table[] = {"]
    for r in sorted(rows, key=lambda r: release_key(r["release"])):
        vals = ", ".join(f".{f} = {c_value(r.get(f))}" for f in FIELDS)
        lines.append(f"\t{{ {vals} }},")
    lines.append("};")
    return "\n".join(lines) + "\n"


def write_table(rows):
    TABLE.write_text(table_text(rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("versions", nargs="*")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "vramtrace-torch-layouts")
    ap.add_argument("--all", action="store_true", help="every 2.x release from 2.1 on PyPI")
    ap.add_argument("--header", action="store_true", help="only rewrite the C table from layouts.json")
    args = ap.parse_args()
    rows = {r["release"]: r for r in load_layouts()}
    if args.header:
        return save_layouts(list(rows.values()))
    versions = all_releases() if args.all else args.versions
    if not versions:
        ap.error("name a release, or --all")
    args.work.mkdir(parents=True, exist_ok=True)
    failed = []
    derived = {}
    for v in versions:
        try:
            derived[v] = derive(args.work, v)
            rows[v] = derived[v][0]
            print(f"{v}: derived", flush=True)
        except (Mismatch, subprocess.CalledProcessError) as e:
            failed.append(v)
            print(f"{v}: FAILED: {e} {getattr(e, 'stderr', '') or ''}", flush=True)
    save_layouts(list(rows.values()))  # the load check runs the preload's code on this table
    exe = build_loadcheck(args.work)
    for v, (row, rel, libdir) in derived.items():
        try:
            row["checked"]["load"] = load_check(exe, rel, libdir, v)
            print(f"{v}: loaded: {' | '.join(row['checked']['load'])}", flush=True)
        except (Mismatch, subprocess.SubprocessError) as e:
            failed.append(v)
            row["checked"]["load"] = f"FAILED: {e}"
            print(f"{v}: load check FAILED: {e}", flush=True)
    save_layouts(list(rows.values()))
    if failed:
        sys.exit(f"failed: {' '.join(failed)}")


if __name__ == "__main__":
    main()
