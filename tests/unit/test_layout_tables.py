"""The committed layout tables, without downloading anything: each derived row complete and in
order, the C tables exactly what the generators write from the JSON, the rows that were in the
code before unchanged, and what the preload reads at fixed offsets the same in every version.

    VRT_SOURCE_ROOT=. python3 tests/unit/test_layout_tables.py
"""
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(os.environ.get("VRT_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
sys.path[:0] = [str(ROOT / "scripts" / "torch_layouts"), str(ROOT / "scripts" / "python_layouts")]
import generate as torch_gen  # noqa: E402  (scripts/torch_layouts/generate.py)

sys.path.pop(0)
del sys.modules["generate"]
import generate as python_gen  # noqa: E402  (scripts/python_layouts/generate.py)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def release_key(v):
    return tuple(int(x) for x in v.split("."))


def test_torch_table():
    rows = json.loads((ROOT / "scripts/torch_layouts/layouts.json").read_text())
    releases = [r["release"] for r in rows]
    check(releases == sorted(releases, key=release_key) and len(set(releases)) == len(releases),
          "torch rows are not in release order, or repeat one")
    minors = {tuple(release_key(v)[:2]) for v in releases}
    check(minors >= {(2, m) for m in range(1, 16)}, f"a minor series from 2.1 to 2.15 is missing: {sorted(minors)}")
    for r in rows:
        tracker = r["slot_attach_tracker"] >= 0
        for f in torch_gen.FIELDS:
            optional = f == "fn_attach_tracker" and not tracker
            check(f in r and (r[f] is not None or optional), f"{r['release']}: {f} missing")
        slots = [r["slot_initialized"], r["slot_get_device_stats"]] + ([r["slot_attach_tracker"]] if tracker else [])
        check(all(0 <= s < r["vtable_slots"] for s in slots) and len(set(slots)) == len(slots),
              f"{r['release']}: slots {slots} against a vtable of {r['vtable_slots']}")
        check(r["stats_freed_bytes"] + 8 <= r["stats_size"] <= 2048, f"{r['release']}: DeviceStats of {r['stats_size']}")
        check(r["entry_device_size"] in ((1, 4) if tracker else (0, 1, 4)), f"{r['release']}: device field")
        load = r.get("checked", {}).get("load", [])
        want = "native: row ok" if tracker else "native: refused as it must be"
        check(isinstance(load, list) and load and load[0].startswith(want) and "recognised" in load[1],
              f"{r['release']}: no passing load check recorded: {load}")
        check("slot" in r.get("checked", {}).get("binary", "") or not tracker, f"{r['release']}: no binary check")
    table = (ROOT / "preload/torch_layout_table.h").read_text()
    check(table == torch_gen.table_text(rows), "preload/torch_layout_table.h is not what generate.py --header writes")
    # The constants torch.c had before the table, valid for 2.11 (tested on an H200).
    r = next(r for r in rows if r["release"] == "2.11.0")
    before = dict(slot_initialized=6, slot_get_device_stats=9, slot_attach_tracker=44, stats_size=976,
                  stats_alloc_count=16, stats_alloc_bytes=400, stats_freed_bytes=408, entry_action=0, entry_device=4,
                  entry_device_size=1, entry_addr=8, entry_stream=32, entry_size=40, action_alloc=0,
                  action_free_requested=1, action_oom=8,
                  rtti_native="N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE",
                  rtti_async="N3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE")
    check({k: r[k] for k in before} == before, f"the 2.11.0 row differs from torch.c's former constants: {r}")


def test_python_table():
    rows = json.loads((ROOT / "scripts/python_layouts/layouts.json").read_text())
    check([r["minor"] for r in rows] == list(range(9, 15)), f"python rows: {[r['minor'] for r in rows]}")
    for r in rows:
        check(all(f in r for f in python_gen.FIELDS), f"3.{r['minor']}: a field is missing")
        check("runtime" in r.get("checked", {}), f"3.{r['minor']}: not checked against a running interpreter")
        interp = r["minor"] >= 11
        check((r["if_code"] >= 0) == interp and (r["f_code"] >= 0) != interp, f"3.{r['minor']}: frame kind")
    table = (ROOT / "preload/python_layout_table.h").read_text()
    check(table == python_gen.table_text(rows), "preload/python_layout_table.h is not what generate.py --header writes")
    # pyreach.c and python.c read these at fixed offsets; the generator checked each version's headers.
    src = (ROOT / "preload/pyreach.c").read_text()
    defines = {k: int(v) for k, v in re.findall(r"#define (\w+_OFFSET) (\d+)", src)}
    check(defines == {"OB_TYPE_OFFSET": python_gen.FIXED["ob_type"], "TP_FLAGS_OFFSET": python_gen.FIXED["tp_flags"],
                      "TP_TRAVERSE_OFFSET": python_gen.FIXED["tp_traverse"],
                      "TP_IS_GC_OFFSET": python_gen.FIXED["tp_is_gc"]}, f"pyreach.c's offsets {defines}")
    py = (ROOT / "preload/python.c").read_text()
    for name, key in (("TP_BASICSIZE", "tp_basicsize"), ("OB_TYPE", "ob_type"), ("STR_LENGTH", "str_length"),
                      ("STR_STATE", "str_state")):
        check(re.search(rf"#define {name} {python_gen.FIXED[key]}\b", py), f"python.c's {name}")


if __name__ == "__main__":
    failed = 0
    for t in (test_torch_table, test_python_table):
        before = len(failures)
        t()
        failed += len(failures) > before
        print(("ok  " if len(failures) == before else "FAIL") + " " + t.__name__)
        for f in failures[before:]:
            print("  " + f)
    print(f"{2 - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
