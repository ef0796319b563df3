"""The shared CUDA runtime (libcudart.so.13 double): every allocation API, recorded once each
under its runtime name, with exact totals per device and kind (tests/programs/rt_api.c)."""
import json
import sys

import pytest

from conftest import CUDART, KiB, MiB, PROGRAM_SOURCES, analyze, assert_nothing_lost, assert_unchanged_behaviour, frame_functions, program, \
    trace

# Device 0 device memory: leak 1 MiB, transient 3 MiB (the peak: 4 MiB), pitch 10240 and pool 8192 kept.
DEVICE_PEAK = 4 * MiB
DEVICE_LIVE = 1 * MiB + 10240 + 8192
MANAGED = 2 * MiB
PINNED_PEAK = 64 * KiB + 16384  # cudaMallocHost kept + cudaHostRegister while registered
PINNED_LIVE = 64 * KiB


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("rt_api"), [program("rt_api")])


def test_program_behaviour_is_unchanged(rt):
    assert rt.returncode == 0
    assert rt.stdout == "rt_api: done\n"
    assert_unchanged_behaviour(rt)


def test_exact_totals_per_device_and_kind(rt):
    assert rt.totals() == {
        (0, "device"): (DEVICE_PEAK, DEVICE_LIVE),
        (0, "managed"): (MANAGED, MANAGED),
        (-1, "host_pinned"): (PINNED_PEAK, PINNED_LIVE),
    }


@pytest.mark.parametrize("function, size", [
    ("leak_site", 1 * MiB),
    ("pitch_site", 10240),
    ("pool_site", 8192),
    ("managed_site", MANAGED),
    ("pinned_site", PINNED_LIVE),
])
def test_live_site_bytes_and_count(rt, function, size):
    site = rt.site(function)
    assert (site["bytes"], site["count"]) == (size, 1)
    assert frame_functions(site)[0] == function, "the innermost frame is the caller of the CUDA API"


def test_live_sites_add_up_to_live_totals(rt):
    assert len(rt.live_sites()) == 5
    assert sum(s["bytes"] for s in rt.live_sites()) == DEVICE_LIVE + MANAGED + PINNED_LIVE


def test_top_site_at_device_peak_is_the_transient_allocation(rt):
    device = next(d for d in rt.report["devices"] if (d["device"], d["kind"]) == (0, "device"))
    at_peak = {frame_functions(s)[0]: (s["bytes"], s["count"]) for s in device["top_at_peak"]}
    assert at_peak == {"transient_site": (3 * MiB, 1), "leak_site": (1 * MiB, 1)}


@pytest.mark.parametrize("api, kind, sizes", [
    ("cudaMalloc", "device", [1 * MiB, 3 * MiB]),
    ("cudaMallocPitch", "device", [10240]),  # pitch 1024 x 10 rows
    ("cudaMalloc3D", "device", [6144]),      # pitch 512 x 4 rows x 3 slices
    ("cudaMallocAsync", "device", [4096]),
    ("cudaMallocFromPoolAsync", "device", [8192, 2048]),
    ("cudaMallocManaged", "managed", [MANAGED]),
    ("cudaMallocHost", "host_pinned", [64 * KiB]),
    ("cudaHostAlloc", "host_pinned", [12288]),
    ("cudaHostRegister", "host_pinned", [16384]),
])
def test_each_api_is_recorded_under_its_own_name(rt, api, kind, sizes):
    allocs = rt.events("alloc", api)
    assert [(r.kind, r["size"]) for r in allocs] == [(kind, size) for size in sizes]
    assert {r.device for r in allocs} == {-1 if kind == "host_pinned" else 0}


def test_no_driver_call_is_recorded_twice(rt):
    """The runtime's nested driver calls pass through: every record names a runtime API."""
    assert not [r.text for r in rt.events() if r.api.startswith("cu") and not r.api.startswith("cuda")]
    # 11 allocations: cudaMalloc x2, pitch, 3D, async, pool x2, managed, host, host alloc, register.
    assert len(rt.events("alloc")) == 11


@pytest.mark.parametrize("api, size", [
    ("cudaFree", 3 * MiB),
    ("cudaFree", 6144),
    ("cudaFreeAsync", 4096),
    ("cudaFreeAsync", 2048),
    ("cudaFreeHost", 12288),
    ("cudaHostUnregister", 16384),
])
def test_frees_carry_the_size_of_what_they_freed(rt, api, size):
    assert size in [r["size"] for r in rt.events("free", api)]


def test_frees_point_at_the_allocating_stack(rt):
    live = {}  # addresses are reused: match each free with the allocation live there then
    frees = 0
    for r in rt.events():
        if r.op == "alloc":
            live[r["addr"]] = r
        elif r.op == "free":
            a = live.pop(r["addr"])
            assert (r["alloc_stack"], r["size"]) == (a["stack"], a["size"]), r.text
            frees += 1
    assert frees == 6


def test_ipc_open_and_close_are_imports_not_memory_held(rt):
    opened = rt.events("import", "cudaIpcOpenMemHandle")
    closed = rt.events("import_close", "cudaIpcCloseMemHandle")
    assert [(r.device, r["size"]) for r in opened] == [(0, 1 * MiB)]
    assert [r["addr"] for r in closed] == [opened[0]["addr"]]
    assert closed[0]["size"] == 1 * MiB


def test_zero_byte_malloc_is_not_an_allocation(rt):
    """cudaMalloc(&p, 0) succeeds with NULL: no record, no live site of 0 bytes."""
    assert not [r.text for r in rt.events() if r.get("size") == 0 or r.get("addr") == 0]
    assert not [s for s in rt.live_sites() if "zero_size_site" in frame_functions(s)]


def test_runtime_on_per_thread_stream_entry_points_records_the_same(tmp_path, rt):
    """FAKECUDART_PTSZ=1: the runtime resolves its stream-ordered driver calls as the _ptsz
    variants; those nested calls still pass through, and the same runtime calls are recorded."""
    t = trace(tmp_path, [program("rt_api")], env={"FAKECUDART_PTSZ": "1"})
    assert (t.returncode, t.stdout) == (rt.returncode, rt.stdout)
    assert t.totals() == rt.totals()
    assert [(r.op, r.api, r.get("size")) for r in t.events()] == [(r.op, r.api, r.get("size")) for r in rt.events()]


def test_nothing_is_lost(rt):
    assert_nothing_lost(rt)


def test_trace_ends_as_a_normal_exit(rt):
    assert (rt.info["end_reason"], rt.info["end_detail"]) == ("exited normally", 0)


# ---- report --top and --frames ------------------------------------------------------------------

def text_sections(text):
    """{section title: [(headline, [frame lines])]} of `vramtrace report`'s site lists."""
    sections, sites = {}, None
    for line in text.splitlines():
        if line.startswith("top sites"):
            sites = sections.setdefault(line.rstrip(":"), [])
        elif sites is not None and line.strip().startswith(("in ", "at ")) and sites:
            sites[-1][1].append(line.strip()[3:])
        elif sites is not None and line.strip():
            sites.append((line.strip(), []))
        else:
            sites = None
    return sections


def text_report(rt, *args):
    return text_sections(analyze("report", "-q", *args, rt.trace).stdout)


@pytest.mark.parametrize("n", [1, 2, 3, 100])
def test_report_frames_shows_exactly_n_frames_of_each_site(rt, n):
    """rt_api's sites are each called from main: every stack has at least 2 frames (site, main).
    The headline is the site itself, so the frames under it start at its caller: --frames N
    shows the first N of the others (all when fewer), innermost first."""
    full = {frame_functions(s)[0]: s["frames"] for s in rt.live_sites()}
    assert all(frame_functions({"frames": stack})[:2] == [name, "main"] for name, stack in full.items()), full
    live, = [v for k, v in text_report(rt, "--frames", n).items() if k.startswith("top sites by bytes live")]
    assert len(live) == 5
    for headline, frames in live:
        name = headline.split()[-2].split("+")[0]
        assert len(frames) == min(n, len(full[name]) - 1), (headline, frames)
        for shown, frame in zip(frames, full[name][1:]):  # an unnamed frame shows its address
            assert shown.startswith(frame["function"] + "+" if frame["function"] != "??" else frame["address"]), \
                (headline, frames)


@pytest.mark.parametrize("n", [1, 2, 4, 5, 6])
def test_report_top_lists_exactly_n_sites(rt, n):
    """5 sites live at the end (rt_api.c), 2 at the device peak (transient and leak)."""
    sections = text_report(rt, "--top", n)
    live, = [v for k, v in sections.items() if k.startswith("top sites by bytes live")]
    assert len(live) == min(n, 5)
    device_peak, = [v for k, v in sections.items() if k.startswith("top sites at the peak of device 0 memory")]
    assert len(device_peak) == min(n, 2)
    rep = json.loads(analyze("report", "--json", "-q", "--top", n, rt.trace).stdout)
    assert len(rep["live_at_end"]) == min(n, 5)
    device, = [d for d in rep["devices"] if (d["device"], d["kind"]) == (0, "device")]
    assert len(device["top_at_peak"]) == min(n, 2)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_run_depth_keeps_exactly_that_many_native_frames(tmp_path, depth):
    """`run --depth N`: N native frames per stack, innermost first (every rt_api site has at
    least site, main and libc's caller of main under it)."""
    t = trace(tmp_path, [program("rt_api")], run_args=("--depth", str(depth)))
    assert len(t.live_sites()) == 5
    for site in t.live_sites():
        functions = frame_functions(site)
        assert len(functions) == depth, functions
        assert functions[0].endswith("_site") and functions[1:2] in ([], ["main"]), functions


def test_device_reset_takes_the_device_memory_with_it(tmp_path):
    """tests/programs/rt_reset.c: cudaDeviceReset frees every allocation of the device (not
    pinned host memory); what is allocated after it is live at the end."""
    t = trace(tmp_path, [program("rt_reset")])
    assert (t.returncode, t.stdout) == (0, "rt_reset: done\n")
    assert t.totals() == {(0, "device"): (2 * MiB, 1 * MiB), (-1, "host_pinned"): (4 * KiB, 4 * KiB)}
    assert sorted(frame_functions(s)[0] for s in t.live_sites()) == ["after_reset_site", "pinned_site"]
    assert_unchanged_behaviour(t)


def test_report_says_by_what_it_is_what_is_live_at_the_end_on_every_device_and_the_host(tmp_path):
    """tests/programs/devices_at_end.py keeps (d + 1) MiB on each of 4 devices and 3 MiB pinned:
    report's categories at the end (one pass over the live set for every slot) hold exactly that
    on each device and on the host, as its per-device totals do."""
    t = trace(tmp_path, [sys.executable, PROGRAM_SOURCES / "devices_at_end.py", CUDART, 4],
              env={"FAKECUDA_DEVICES": "4"})
    assert (t.returncode, t.stdout) == (0, "devices_at_end: 4 devices\n"), t.stderr
    out = json.loads(analyze("report", "--json", "-q", t.trace).stdout)
    by_slot = {}
    for c in out["categories_at_end"]:
        by_slot[c["device"]] = by_slot.get(c["device"], 0) + c["bytes"]
    assert by_slot == {0: 1 * MiB, 1: 2 * MiB, 2: 3 * MiB, 3: 4 * MiB, -1: 3 * MiB}
    live = {d["device"]: d["live_bytes_at_end"] for d in out["devices"]}
    assert live == by_slot
