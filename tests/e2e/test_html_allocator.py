"""`vramtrace html`'s allocator views (issue 16, item 2): segments and fragmentation over time,
and the largest tensors as bands over time.

The figures are checked against the CLI (`oom --json`: the request, the tensors, the allocator's
cache) and against an independent computation: tests/e2e/replay.py replays `vramtrace dump`'s
records (its own rules, not the analyzer's model), and the largest free block is then found
here by sorting each segment's blocks and measuring the gaps between them, with none of the
analyzer's incremental range set. Traces: H200 fixtures (a plain OOM, an OOM with expandable
segments, a late attach whose tensors lie in segments made before it) and a synthetic
PyTorch-like trace written by tests/gen_torch_trace.c, whose tensors lie outside its segments.
"""
import json
import re
from html import unescape
import subprocess

import pytest

from conftest import SOURCE, analyze, human
from replay import Replay
from test_html import VRAMTRACE, dump_dom, element_block, gen_torch_trace, html, needs_chromium, page_data

H200 = SOURCE / "tests" / "golden" / "h200"
TORCH = ("libc10_cuda", "CUDACachingAllocator", "[PyTorch allocator segment")
BANDS = 64


def torch_stack(frames):
    return any(t in f for f in frames for t in TORCH)


def allocator_state(r, device=0):
    """(reserved, allocated, largest free block, bytes of tensors in no segment) of a replay."""
    held = [it for it in r.held_items() if it.device == device and it.kind == "device" and torch_stack(it.frames)]
    segments = sorted((a, a + it.size) for a, it in r.addr.items()
                      if it.device == device and it.kind == "device" and torch_stack(it.frames))
    runs = []  # mapped pages of expandable segments: touching pages are one segment
    for a, (handle, size, _) in sorted(r.maps.items()):
        h = r.handles.get(handle)
        if not h or h.device != device or not torch_stack(h.frames):
            continue
        if runs and runs[-1][1] == a:
            runs[-1][1] = a + size
        else:
            runs.append([a, a + size])
    segments = sorted(segments + [tuple(x) for x in runs])
    blocks = sorted((a, a + b.size) for a, b in r.blocks.items() if b.device == device)
    largest, inside = 0, 0
    for lo, hi in segments:
        at = lo
        for a, b in blocks:
            if lo <= a and b <= hi:
                largest = max(largest, a - at)
                at = b
                inside += b - a
        largest = max(largest, hi - at)
    allocated = sum(b - a for a, b in blocks)
    return sum(it.size for it in held), allocated, largest, allocated - inside


def facts(dom, ident):
    m = re.search(r'<div id="%s" data-bytes="(\d+)"' % ident, dom)
    assert m, f"no #{ident}"
    return int(m[1])


@needs_chromium
@pytest.mark.parametrize("name", ["oom", "remedies-expandable"])
def test_figures_at_the_oom_equal_the_cli_and_an_independent_replay(tmp_path, name):
    src = H200 / f"{name}.vrt"
    out = tmp_path / f"{name}.html"
    html(src, out)
    a = page_data(out)["allocator"]
    o = json.loads(analyze("oom", "--json", "-q", src).stdout)["oom"]
    at = a["oom"]["at"]
    # the CLI's: the request, the tensors, and the cache (what the segments hold beyond them)
    assert a["oom"]["requested_bytes"] == o["requested_bytes"]
    assert at["allocated_bytes"] == o["tensor_bytes"]
    assert at["reserved_bytes"] == o["tensor_bytes"] + o["by_category"].get("allocator_cache", 0)
    # the independent replay up to the failure
    reserved, allocated, largest, outside = allocator_state(Replay(src, VRAMTRACE, at=o["time_s"]), o["device"])
    assert (at["reserved_bytes"], at["allocated_bytes"], at["largest_free_bytes"], at["outside_bytes"]) == \
        (reserved, allocated, largest, outside)
    assert 0 < largest < o["requested_bytes"], "both fixtures fail with no free block as large as the request"
    # the end, too
    dev, = a["devices"]
    assert (dev["end"]["reserved_bytes"], dev["end"]["allocated_bytes"], dev["end"]["largest_free_bytes"],
            dev["end"]["outside_bytes"]) == allocator_state(Replay(src, VRAMTRACE))
    assert dev["expandable"] == (name == "remedies-expandable")
    # the page shows them, with the verdict that fits the figures
    dom = dump_dom(tmp_path, out)
    sec = element_block(dom, "section", "allocator")
    assert "Allocator segments and fragmentation" in sec
    assert facts(sec, "alloc-oom-requested") == o["requested_bytes"]
    assert facts(sec, "alloc-oom-reserved") == reserved
    assert facts(sec, "alloc-oom-allocated") == allocated
    assert facts(sec, "alloc-oom-largest") == largest
    verdict = re.sub(r"<[^>]+>", "", element_block(sec, "p", "alloc-oom-verdict"))
    assert verdict.startswith("Expandable segments" if dev["expandable"] else "Not fragmentation"), verdict
    for cls in ("alloc-reserved", "alloc-allocated", "alloc-largest"):
        path = re.search(r'<path class="%s" d="([^"]+)"' % cls, sec)
        assert path and len(re.findall(r"H", path[1])) >= page_data(out)["buckets"], cls


def buckets(col):
    acc, out = 0, []
    for d in col["values"]:
        acc += d
        out.append(acc * col["unit"])
    return out


@needs_chromium
def test_tensors_in_no_recorded_segment_are_said_and_adjacent_segments_stay_apart(tmp_path):
    """The synthetic trace: 20 MiB-multiple segments made one after another at consecutive
    addresses, tensors at addresses none of them holds. Every tensor is outside; the largest free
    block is the largest single segment (touching cudaMalloc segments are not one range)."""
    path = tmp_path / "gen.vrt"
    subprocess.run([gen_torch_trace(tmp_path), path, "30000", "--oom"], check=True, capture_output=True, timeout=120)
    out = tmp_path / "gen.html"
    html(path, out)
    d = page_data(out)
    dev, = d["allocator"]["devices"]
    r = Replay(path, VRAMTRACE)
    assert (dev["end"]["reserved_bytes"], dev["end"]["allocated_bytes"], dev["end"]["largest_free_bytes"],
            dev["end"]["outside_bytes"]) == allocator_state(r)
    sizes = [it.size for it in r.addr.values() if torch_stack(it.frames)]
    assert len(sizes) > 1 and dev["end"]["largest_free_bytes"] == max(sizes) < sum(sizes)
    assert dev["end"]["outside_bytes"] == dev["end"]["allocated_bytes"] > 0
    assert buckets(dev["outside"]) == buckets(dev["allocated"])
    o = d["allocator"]["oom"]["at"]
    assert o["outside_bytes"] == o["allocated_bytes"] > 0
    dom = dump_dom(tmp_path, out)
    note = re.sub(r"<[^>]+>", "", element_block(dom, "p", "alloc-outside-0"))
    assert "lie in no segment the trace recorded" in note and "the largest free block is of the recorded segments only" in note


def test_an_attach_says_what_it_cannot_know(tmp_path):
    """attach.vrt: tensors allocated before the attach, in segments the trace never saw."""
    out = tmp_path / "attach.html"
    html(H200 / "attach.vrt", out)
    dev, = page_data(out)["allocator"]["devices"]
    assert 0 < dev["end"]["outside_bytes"] <= dev["end"]["allocated_bytes"]
    assert dev["end"]["allocated_bytes"] > dev["end"]["reserved_bytes"], "tensors the recorded segments cannot hold"


def test_no_allocator_views_without_tensors(tmp_path):
    out = tmp_path / "x.html"
    html(H200 / "torch-expandable.vrt", out)
    d = page_data(out)
    assert d["allocator"] is None and d["tensors"] is None


# ---- the largest tensors --------------------------------------------------------------------

def tensor_lives(src):
    """Every tensor of the trace from `dump`: [size, born, died or None, address, stack]."""
    lives, live = [], {}
    for line in analyze("dump", src).stdout.splitlines():
        m = re.match(r"^(\d+\.\d+) t\d+ (block_alloc|block_free|block_size) +\S+ dev=\d+ \S+ addr=(0x[0-9a-f]+) size=(\d+)", line)
        if not m:
            continue
        ts, op, addr, size = float(m[1]), m[2], int(m[3], 16), int(m[4])
        if op == "block_alloc":
            live[addr] = [size, ts, None, addr]
            lives.append(live[addr])
        elif op == "block_size" and addr in live:
            live[addr][0] = size
        elif addr in live:
            live.pop(addr)[2] = ts
    return lives


@needs_chromium
@pytest.mark.parametrize("name", ["oom", "leak-cycle"])
def test_largest_tensors_are_bands_with_their_stack_on_hover(tmp_path, name):
    src = H200 / f"{name}.vrt"
    out = tmp_path / f"{name}.html"
    html(src, out)
    d = page_data(out)
    bands = d["tensors"]["bands"]
    assert len(bands) == BANDS
    # the 64 largest of the trace (the earliest among equals), each born and freed when dump says
    lives = sorted(tensor_lives(src), key=lambda x: (-x[0], x[1]))[:BANDS]
    want = sorted((round(x[1], 6), None if x[2] is None else round(x[2], 6), x[0]) for x in lives)
    got = sorted((round(b[0], 6), None if b[1] is None else round(b[1], 6), b[2]) for b in bands)
    assert got == want
    assert any(b[1] is not None for b in bands)
    assert any(b[1] is None for b in bands) == (name == "leak-cycle"), "leak-cycle's leaked tensors live on"
    # hover a band: the tooltip has its size and its stack's frames
    def python_frames(k):
        return [d["frames"][f] for f in d["sites"][bands[k][4]]["frames"] if d["frames"][f][2] == "p"]
    i = max((k for k in range(len(bands)) if python_frames(k)), key=lambda k: bands[k][2])
    python = python_frames(i)
    page = tmp_path / "hover.html"
    page.write_text(out.read_text().replace("</body>", HOVER % i + "</body>"))
    dom = dump_dom(tmp_path, page)
    tip = dom[dom.index('id="bands-tip"'):dom.index('id="bands-site"')]
    assert re.match(r'id="bands-tip" style="[^"]*display: block', tip), tip[:200]
    text = re.sub(r"<[^>]+>", " ", tip)
    assert human(bands[i][2]) in text, text
    # its Python frames, innermost first, as "function (file.py:line)"
    listed = [unescape(x) for x in re.findall(r'<td class="loc">(.*?)</td>', tip[tip.index('class="band-stack"'):])]
    want = ["%s (%s)" % (f[0], f[1].rsplit("/", 1)[-1]) for f in reversed(python)][:12]
    assert listed == want, (listed, want)
    # a click (here: the address's #tensor=I) picks out its site: its bands, and its area in the chart
    dom = dump_dom(tmp_path, out, f"#tensor={i}")
    rows = re.findall(r'<rect [^>]*class="band( hl)?"[^>]*data-site="(\d+)"', dom)
    assert rows and all((hl == " hl") == (int(s) == bands[i][4]) for hl, s in rows)
    picked = re.sub(r"<[^>]+>", " ", dom[dom.index('id="bands-site"'):dom.index('id="leaks"')])
    same = [b for b in bands if b[4] == bands[i][4]]
    assert f"{len(same)} of the largest tensors come from this site" in picked
    main = d["series"][d["main"]]
    if bands[i][4] in main["sites"]:
        rank = main["sites"].index(bands[i][4])
        assert re.search(r'<path [^>]*class="area hl"[^>]*data-rank="%d"' % rank, dom)


HOVER = """<script>
setTimeout(function () {
  var r = document.querySelector('rect.band[data-i="%d"]'), b = r.getBoundingClientRect();
  r.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: b.left + 1, clientY: b.top + 2 }));
}, 0);
</script>"""


@pytest.mark.parametrize("name", ["oom", "attach-ds", "remedies-expandable"])
def test_each_bucket_is_the_moment_the_tensors_were_highest(tmp_path, name):
    """The allocator chart's buckets are the tensors chart's: allocated in each equals the
    tensors series there, and reserved never falls below what the recorded segments hold of it."""
    out = tmp_path / f"{name}.html"
    html(H200 / f"{name}.vrt", out)
    d = page_data(out)
    tensors, = [s for s in d["series"] if s["kind"] == "tensors" and s["device"] == 0]
    totals = [sum(col) for col in zip(*[[v * tensors["unit"] for v in _cumsum(c)] for c in tensors["values"]])]
    dev, = d["allocator"]["devices"]
    allocated, reserved, outside = buckets(dev["allocated"]), buckets(dev["reserved"]), buckets(dev["outside"])
    largest = buckets(dev["largest_free"])
    assert allocated == totals
    assert all(a - o <= r for a, o, r in zip(allocated, outside, reserved))
    assert all(0 <= x <= r - (a - o) for x, r, a, o in zip(largest, reserved, allocated, outside)), \
        "a free block no larger than what the segments hold beyond their tensors"
    assert max(reserved) <= dev["peak_reserved"] and max(allocated) == tensors["peak"]


def _cumsum(deltas):
    acc, out = 0, []
    for x in deltas:
        acc += x
        out.append(acc)
    return out


# ---- survivors grouped by site (ux defect 6) ------------------------------------------------

@needs_chromium
def test_survivors_of_more_calls_than_the_page_keeps_are_whole_sites(tmp_path):
    """A synthetic run of ~100 steps where seven sites leave a tensor in every call: leaks --json
    has 700 per-call rows, more than the 50 the page keeps, and the page still shows each site
    with every call `vramtrace leaks` counts (not its first few calls)."""
    path = tmp_path / "steps.vrt"
    subprocess.run([gen_torch_trace(tmp_path), path, "100000", "--leak-every", "1"], check=True, capture_output=True,
                   timeout=120)
    per_call = json.loads(analyze("leaks", "--json", "-q", path).stdout)["survivors"]
    assert len(per_call) > 50 * 2
    cli = analyze("leaks", "-q", path).stdout.split("survivors by site")[1]
    printed = re.findall(r"^ +([\d.]+ (?:B|KiB|MiB|GiB)) +(\d+)x  ", cli, re.M)
    assert printed and all(int(n) > 50 for _, n in printed)
    out = tmp_path / "steps.html"
    html(path, out)
    table_html = element_block(dump_dom(tmp_path, out), "table", "leaks-survivors")
    rows = re.findall(r"<tr[^>]*data-calls=\"(\d+)\"[^>]*>(.*?)</tr>", table_html, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r[1], re.S) for r in rows]
    assert [(c[0], c[1]) for c in cells] == printed
    calls = re.findall(r"born in calls (\d+)\.\.(\d+)", cli)
    assert [c[3] for c in cells] == [f"{a}..{b}" for a, b in calls]


@pytest.mark.parametrize("name", ["attach-ds", "attach", "leak-cycle", "remedies-expandable", "oom"])
def test_the_end_equals_report(tmp_path, name):
    """What the allocator's segments hold at the end and what tensors hold, as `report` counts
    them (attach-ds and attach start from the attach's seeded checkpoint)."""
    src = H200 / f"{name}.vrt"
    out = tmp_path / f"{name}.html"
    html(src, out)
    dev, = page_data(out)["allocator"]["devices"]
    rep = json.loads(analyze("report", "--json", src).stdout)
    torch, = [x["pytorch_allocator_bytes"] for x in rep["devices"] if x["kind"] == "device" and x["device"] == 0]
    assert dev["end"]["reserved_bytes"] == torch > 0
    assert dev["end"]["allocated_bytes"] == rep["tensors"][0]["live_bytes_at_end"]
