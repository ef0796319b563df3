"""The driver API, reached three ways: linked directly (tests/programs/drv_api.c), through
dlopen + dlsym of a driver loaded RTLD_LOCAL (dl_driver.c, XLA-style), and through the
runtime's cudaGetDriverEntryPointByVersion (entry_point_vmm.c, PyTorch expandable segments)."""
import pytest

from conftest import MiB, analyze, assert_nothing_lost, assert_unchanged_behaviour, frame_functions, program, trace

PAGE = 2 * MiB


# ---- linked against libcuda -------------------------------------------------------------

@pytest.fixture(scope="module")
def drv(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("drv_api"), [program("drv_api")])


def test_driver_program_behaviour_is_unchanged(drv):
    assert (drv.returncode, drv.stdout) == (0, "drv_api: done\n")
    assert_unchanged_behaviour(drv)


def test_driver_exact_totals(drv):
    assert drv.totals() == {
        # peak: leak 1 MiB + async 4096 + both VMM pages of vmm_site while mapped
        (0, "device"): (1 * MiB + 4096 + 2 * PAGE, 1 * MiB + 4096 + PAGE),
        (0, "managed"): (1 * MiB, 0),
        (-1, "host_pinned"): (8192 + 16384, 8192),
    }


@pytest.mark.parametrize("function, size", [
    ("leak_site", 1 * MiB),
    ("async_leak_site", 4096),
    ("vmm_leak_site", PAGE),
    ("pinned_site", 8192),
])
def test_driver_live_site(drv, function, size):
    site = drv.site(function)
    assert (site["bytes"], site["count"]) == (size, 1)
    assert frame_functions(site)[0] == function


def test_driver_live_sites_are_exactly_those(drv):
    assert sorted(frame_functions(s)[0] for s in drv.live_sites()) == \
        ["async_leak_site", "leak_site", "pinned_site", "vmm_leak_site"]


@pytest.mark.parametrize("api, kind, sizes", [
    ("cuMemAlloc_v2", "device", [1 * MiB, 2 * MiB]),
    ("cuMemAllocManaged", "managed", [1 * MiB]),
    ("cuMemAllocAsync", "device", [4096, 12288]),
    ("cuMemAllocAsync_ptsz", "device", [8192]),
    ("cuMemAllocHost_v2", "host_pinned", [8192]),
    ("cuMemHostAlloc", "host_pinned", [4096]),
    ("cuMemHostRegister_v2", "host_pinned", [16384]),
])
def test_driver_api_recorded_under_its_name(drv, api, kind, sizes):
    assert [(r.kind, r["size"]) for r in drv.events("alloc", api)] == [(kind, s) for s in sizes]


@pytest.mark.parametrize("api, sizes", [
    ("cuMemFree_v2", [2 * MiB, 1 * MiB]),  # transient_site's device, managed_site's managed
    ("cuMemFreeAsync", [12288]),  # async_free_site
    ("cuMemFreeAsync_ptsz", [8192]),
    ("cuMemFreeHost", [4096]),
    ("cuMemHostUnregister", [16384]),
])
def test_driver_frees_recorded_with_sizes(drv, api, sizes):
    assert [r["size"] for r in drv.events("free", api)] == sizes


def test_legacy_stream_async_free_frees_what_it_names(drv):
    """async_free_site: 12 KiB from cuMemAllocAsync, given back with cuMemFreeAsync; nothing of it
    is live at the end (test_driver_exact_totals), and the free names its allocation."""
    alloc = [r for r in drv.events("alloc", "cuMemAllocAsync") if r["size"] == 12288]
    free = drv.events("free", "cuMemFreeAsync")
    assert len(alloc) == 1 and len(free) == 1
    assert (free[0]["addr"], free[0]["alloc_stack"]) == (alloc[0]["addr"], alloc[0]["stack"])
    assert "async_free_site" not in [frame_functions(s)[0] for s in drv.live_sites()]


def test_per_thread_stream_variants_from_cuGetProcAddress_are_tracked(drv):
    alloc, = drv.events("alloc", "cuMemAllocAsync_ptsz")
    free, = drv.events("free", "cuMemFreeAsync_ptsz")
    assert free["addr"] == alloc["addr"] and free["alloc_stack"] == alloc["stack"]


def test_vmm_records_in_order(drv):
    vmm_ops = {"va_reserve", "phys_create", "map", "phys_release", "unmap", "va_free"}
    seq = [(r.op, r.api) for r in drv.events() if r.op in vmm_ops]
    assert seq == [
        # vmm_site: two pages side by side, released while mapped, one retained and released
        ("va_reserve", "cuMemAddressReserve"),
        ("phys_create", "cuMemCreate"), ("phys_create", "cuMemCreate"),
        ("map", "cuMemMap"), ("map", "cuMemMap"),
        ("phys_release", "cuMemRelease"), ("phys_release", "cuMemRelease"),
        ("phys_create", "cuMemRetainAllocationHandle"), ("phys_release", "cuMemRelease"),
        ("unmap", "cuMemUnmap"),
        ("va_free", "cuMemAddressFree"),
        # vmm_leak_site: one page, released while mapped, left mapped
        ("va_reserve", "cuMemAddressReserve"),
        ("phys_create", "cuMemCreate"), ("map", "cuMemMap"), ("phys_release", "cuMemRelease"),
    ]


def test_vmm_sizes_and_devices(drv):
    creates = [r for r in drv.events("phys_create", "cuMemCreate")]
    assert [(r.device, r.kind, r["size"]) for r in creates] == [(0, "device", PAGE)] * 3
    reserves = drv.events("va_reserve")
    assert [r["size"] for r in reserves] == [4 * PAGE, PAGE]
    assert [r["size"] for r in drv.events("va_free")] == [4 * PAGE]
    unmap, = drv.events("unmap")
    assert (unmap["addr"], unmap["size"]) == (reserves[0]["addr"], 2 * PAGE)
    maps = drv.events("map")
    assert [r["addr"] - reserves[0]["addr"] for r in maps[:2]] == [0, PAGE]
    assert [r.device for r in maps] == [0, 0, 0], "a mapping takes the device of its handle"


def test_retained_handle_is_a_reference_not_new_memory(drv):
    retain, = drv.events("phys_create", "cuMemRetainAllocationHandle")
    first = drv.events("phys_create", "cuMemCreate")[0]
    assert (retain["addr"], retain["size"]) == (first["addr"], 0)


def test_release_before_unmap_keeps_memory_counted_until_unmap(drv):
    """Peak = leak + async + 2 pages proves the released-but-mapped pages stayed counted;
    the live total proves the unmap freed both."""
    peak, live = drv.totals()[(0, "device")]
    assert peak - live == PAGE  # vmm_site's 2 pages gone, vmm_leak_site's 1 page still held


def test_driver_nothing_lost(drv):
    assert_nothing_lost(drv)


# ---- dlopen("libcuda.so.1") + dlsym ------------------------------------------------------

@pytest.fixture(scope="module")
def dl(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("dl_driver"), [program("dl_driver")])


def test_dlopen_program_behaviour_is_unchanged(dl):
    assert (dl.returncode, dl.stdout) == (0, "dl_driver: done\n")
    assert_unchanged_behaviour(dl)


def test_dlsym_lookups_are_traced_with_exact_totals(dl):
    assert dl.totals() == {(0, "device"): (3 * MiB, 1 * MiB), (-1, "host_pinned"): (4096, 4096)}


def test_dlsym_driver_on_device_0_not_host(dl):
    """A driver opened RTLD_LOCAL must still give the current device of each allocation."""
    assert [r.device for r in dl.events("alloc", "cuMemAlloc_v2")] == [0, 0]


def test_dlsym_sites(dl):
    assert (dl.site("leak_site")["bytes"], dl.site("pinned_site")["bytes"]) == (1 * MiB, 4096)
    assert_nothing_lost(dl)


# ---- cudaGetDriverEntryPointByVersion ------------------------------------------------------

@pytest.fixture(scope="module")
def ep(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("entry_point_vmm"), [program("entry_point_vmm")])


def test_entry_point_program_behaviour_is_unchanged(ep):
    assert (ep.returncode, ep.stdout) == (0, "entry_point_vmm: done\n")
    assert_unchanged_behaviour(ep)


def test_entry_point_vmm_exact_totals(ep):
    assert ep.totals() == {(0, "device"): (3 * PAGE, 2 * PAGE)}


def test_entry_point_segment_pages_attributed_to_segment_grow(ep):
    site = ep.site("segment_grow")
    assert (site["bytes"], site["count"]) == (2 * PAGE, 2)
    assert frame_functions(site)[:2] == ["segment_grow", "main"]
    assert len(ep.live_sites()) == 1


def test_entry_point_vmm_records(ep):
    assert [r["size"] for r in ep.events("phys_create", "cuMemCreate")] == [PAGE] * 3
    assert len(ep.events("map", "cuMemMap")) == 3
    unmap, = ep.events("unmap", "cuMemUnmap")
    release, = ep.events("phys_release", "cuMemRelease")
    assert unmap["size"] == PAGE and release["size"] == PAGE
    assert unmap.ts <= release.ts  # unmap first, then release
    plain = ep.events(api="cudaMalloc") + ep.events(api="cudaFree")
    assert [(r.op, r["size"]) for r in plain] == [("alloc", 1 * MiB), ("free", 1 * MiB)]
    assert_nothing_lost(ep)


# ---- the rest of the driver: pitch, pools, imports, a context reset -------------------------------

@pytest.fixture(scope="module")
def rest(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("drv_rest"), [program("drv_rest")])


def test_rest_program_behaviour_is_unchanged(rest):
    assert (rest.returncode, rest.stdout) == (0, "drv_rest: done\n")
    assert_unchanged_behaviour(rest)


def test_rest_exact_totals_a_context_reset_takes_the_device_memory_with_it(rest):
    assert rest.totals() == {
        (0, "device"): (10240 + 8192 + 3 * MiB + PAGE, 1 * MiB),  # after the reset: after_reset_site only
        (-1, "host_pinned"): (4096, 4096),  # pinned host memory outlives the context
    }
    assert sorted(frame_functions(s)[0] for s in rest.live_sites()) == ["after_reset_site", "pinned_site"]


@pytest.mark.parametrize("op, api, sizes", [
    ("alloc", "cuMemAllocPitch_v2", [10240]),
    ("alloc", "cuMemAllocFromPoolAsync", [8192]),
    ("alloc", "cuMemAllocFromPoolAsync_ptsz", [4096]),
    ("free", "cuMemFreeAsync_ptsz", [4096]),
    ("import", "cuIpcOpenMemHandle_v2", [3 * MiB]),
    ("import_close", "cuIpcCloseMemHandle", [3 * MiB]),
    ("import", "cuMemImportFromShareableHandle", [0]),
])
def test_rest_driver_api_recorded_under_its_name(rest, op, api, sizes):
    assert [r["size"] for r in rest.events(op, api)] == sizes


def test_rest_imports_are_not_memory_held(rest):
    """ipc_site's 3 MiB is reset_victim_site's own buffer opened again: counted once."""
    peak, _ = rest.totals()[(0, "device")]
    assert peak == 10240 + 8192 + 3 * MiB + PAGE
    assert_nothing_lost(rest)


def test_stream_capture_through_the_exported_names_and_cuGetProcAddress(tmp_path):
    """tests/programs/drv_capture.c begins and ends a capture by the driver's exported names,
    then by what cuGetProcAddress hands a per-thread-default-stream runtime: each is one
    CAPTURE_BEGIN and one CAPTURE_END, on the stream the program captured on, around the
    allocation it made inside, with the beginning's stack at the program's site."""
    t = trace(tmp_path, [program("drv_capture")])
    assert t.returncode == 0, t.stderr
    streams = [line.split()[-1] for line in t.stdout.splitlines()]
    assert len(streams) == 2
    events = [line.split()[2:] for line in analyze("dump", "-q", t.trace).stdout.splitlines()
              if " capture_" in line or " alloc " in line]
    for stream, size in zip(streams, (1 * MiB, 2 * MiB)):
        begin = ["capture_begin", "cuStreamBeginCapture_v2", "dev=0", "stream=" + stream]
        at = next(i for i, e in enumerate(events) if e[:4] == begin)
        assert events[at + 1][0] == "alloc" and "size=%d" % size in events[at + 1], events
        assert events[at + 2] == ["capture_end", "cuStreamEndCapture", "dev=0", "stream=" + stream], events
    dump = analyze("dump", "-q", "--stacks", t.trace).stdout.splitlines()
    begin_lines = [i for i, line in enumerate(dump) if " capture_begin " in line]
    sites = [next(line for line in dump[i + 1:] if "_site" in line) for i in begin_lines]
    assert ["exported_site" in sites[0], "proc_address_site" in sites[1]] == [True, True], sites
