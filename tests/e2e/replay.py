"""An independent replay of a trace's records, for tests that must not take the analyzer's word
for what its own model computes.

It reads the records `vramtrace dump --stacks` prints (one line per record, the same fields as
the format's record table) and applies the rules of docs/trace-format.md, written again here
from the spec rather than from format/live.c (which the preload and the analyzer share): an allocation replaces an older item at its
address; a release older than the item it names is stale; a VMM handle holds its memory until
its last reference (cuMemCreate, cuMemRetainAllocationHandle) is released and its last mapping
(one unmap may cover several consecutive mappings) is gone; BLOCK_SIZE gives a block its real
size. Memory held is what ALLOC/SEED and PHYS_CREATE items hold, per device and kind; tensors
are BLOCK items per device.

Only traces replayed from their start are handled (no lost history, no late attach): that is
what every fixture trace used with it is, and `Replay` refuses anything else.

Standalone (no pytest): scripts/gpu_verify.py uses it too. The parser of `dump` lines lives here
and conftest.py takes it from here.
"""
import functools
import re
import subprocess
from dataclasses import dataclass, field

# ---- records from `vramtrace dump` ------------------------------------------------------

_RECORD = re.compile(r"^(?P<ts>\d+\.\d+) t(?P<thread>\d+) (?P<op>\S+)\s*(?P<rest>.*)$")
_ALLOC_LIKE = re.compile(r"^(?P<api>\S+) dev=(?P<dev>-?\d+) (?P<kind>\S+) (?P<fields>.*)$")


@dataclass
class Record:
    op: str
    thread: int
    ts: float
    api: str = ""
    device: int = 0
    kind: str = ""
    fields: dict = field(default_factory=dict)
    text: str = ""

    def __getitem__(self, key):
        return self.fields[key]

    def get(self, key, default=None):
        return self.fields.get(key, default)


def parse_dump(text):
    """Records of `vramtrace dump` output (header and stack lines are skipped)."""
    records = []
    for line in text.splitlines():
        m = _RECORD.match(line)
        if not m:
            continue
        r = Record(op=m["op"], thread=int(m["thread"]), ts=float(m["ts"]), text=line)
        a = _ALLOC_LIKE.match(m["rest"])
        if a:
            r.api, r.device, r.kind = a["api"], int(a["dev"]), a["kind"]
            for token in a["fields"].split():
                key, _, value = token.partition("=")
                r.fields[key] = int(value, 0) if re.fullmatch(r"-?(0x[0-9a-f]+|\d+)", value) else value
        elif r.op == "lost":  # "lost N events"
            r.fields["id"] = int(m["rest"].split()[0])
        else:
            for token in m["rest"].split():
                key, eq, value = token.partition("=")
                if eq and re.fullmatch(r"-?\d+", value):
                    r.fields[key] = int(value)
        records.append(r)
    return records


# ---- the replay ----------------------------------------------------------------------------

@dataclass
class Item:
    size: int
    ts: float
    device: int
    kind: str
    frames: list
    stack: int = 0
    refs: int = 1
    maps: int = 0


@dataclass
class Replay:
    """The state after replaying records up to (not including) the first mark `until`, or to
    the end. live/peak: {(device, kind): bytes}; tensors/tensor_peak: {device: bytes};
    peak_record/tensor_peak_record: how many records were applied when that peak was set."""
    path: object
    vramtrace: object  # the analyzer binary
    until: str = None
    at: float = None  # seconds: replay only records at or before this time
    records: int = None  # replay only the first `records` records
    live: dict = field(default_factory=dict)
    peak: dict = field(default_factory=dict)
    tensors: dict = field(default_factory=dict)
    tensor_peak: dict = field(default_factory=dict)
    peak_record: dict = field(default_factory=dict)
    tensor_peak_record: dict = field(default_factory=dict)
    applied: int = 0  # records applied so far

    def __post_init__(self):
        header, records = dumped(str(self.vramtrace), str(self.path))
        assert "history lost" not in header and "wrapped" not in header, header
        self.addr, self.handles, self.maps, self.blocks = {}, {}, {}, {}
        for record, frames in records:
            if self.records is not None and self.applied == self.records:
                break
            if self.until is not None and record.op == "mark" and record.text.split('"')[1] == self.until:
                break
            if self.at is not None and record.ts > self.at:
                break
            if record.op == "checkpoint":
                assert record["reason"] != 4, "a late attach seeds the live set: not handled here"
            self.applied += 1
            self.apply(record, frames)

    # ---- the rules ------------------------------------------------------------------------

    def apply(self, r, frames):
        op = r.op
        if op in ("alloc", "seed"):
            self.born(self.addr, r, frames)
        elif op == "free":
            self.release(self.addr, r)
        elif op == "phys_create" and r.api == "cuMemRetainAllocationHandle":
            h = self.handles.get(r["addr"])
            if h:
                h.refs += 1
        elif op == "phys_create":
            self.born(self.handles, r, frames)
        elif op == "phys_release":
            h = self.handles.get(r["addr"])
            if h and h.ts <= r.ts:
                h.refs = max(h.refs - 1, 0)
                self.maybe_dies(r["addr"])
        elif op == "map":
            handle = self.handles.get(r["aux"])
            self.maps[r["addr"]] = (r["aux"], r["size"], r.ts)
            if handle:
                handle.maps += 1
        elif op == "unmap":
            self.unmap(r["addr"], r["size"], r.ts)
        elif op == "block_alloc":
            self.born(self.blocks, r, frames)
        elif op == "block_free":
            self.release(self.blocks, r)
        elif op == "block_size":
            b = self.blocks.get(r["addr"])
            if b:
                self.count_block(b.device, r["size"] - b.size)
                b.size = r["size"]
        elif op == "context" and r.text.endswith(" reset"):
            # the device's allocations and tensors are gone, pinned host memory is not; handles,
            # mappings and reservations are left as they are (docs/trace-format.md, CONTEXT)
            device = r["dev"]
            for table in (self.addr, self.blocks):
                for a in [a for a, it in table.items() if it.device == device and it.kind != "host_pinned"]:
                    self.dies(table, a)

    def born(self, table, r, frames):
        old = table.get(r["addr"])
        if old is not None:
            if old.ts > r.ts:
                return
            self.dies(table, r["addr"])
        table[r["addr"]] = it = Item(r["size"], r.ts, r.device, r.kind, frames, r.get("stack", 0))
        self.count(table, it, it.size)

    def release(self, table, r):
        it = table.get(r["addr"])
        if it is not None and it.ts <= r.ts:
            self.dies(table, r["addr"])

    def unmap(self, addr, size, ts):
        end = addr + size
        while addr < end and addr in self.maps:
            handle, length, mapped = self.maps[addr]
            if mapped > ts:
                break
            del self.maps[addr]
            h = self.handles.get(handle)
            if h:
                h.maps = max(h.maps - 1, 0)
                self.maybe_dies(handle)
            addr += length

    def maybe_dies(self, handle):
        h = self.handles[handle]
        if not h.refs and not h.maps:
            self.dies(self.handles, handle)

    def dies(self, table, addr):
        it = table.pop(addr)
        self.count(table, it, -it.size)

    def count(self, table, it, delta):
        if table is self.blocks:
            self.count_block(it.device, delta)
            return
        key = (it.device, it.kind)
        self.live[key] = self.live.get(key, 0) + delta
        if self.live[key] > self.peak.get(key, 0):
            self.peak[key], self.peak_record[key] = self.live[key], self.applied

    def count_block(self, device, delta):
        self.tensors[device] = self.tensors.get(device, 0) + delta
        if self.tensors[device] > self.tensor_peak.get(device, 0):
            self.tensor_peak[device], self.tensor_peak_record[device] = self.tensors[device], self.applied

    # ---- questions ------------------------------------------------------------------------

    def held_items(self):
        """Every item holding memory now: ALLOC/SEED and VMM handles."""
        return list(self.addr.values()) + list(self.handles.values())

    def held_bytes(self, where=lambda item: True):
        return sum(it.size for it in self.held_items() if where(it))

    def live_total(self):
        return sum(self.live.values())


@functools.lru_cache(maxsize=32)
def dumped(vramtrace, path):
    """The header lines and [(Record, (frame text, ...))] of `vramtrace dump --stacks PATH`."""
    text = subprocess.run([vramtrace, "dump", "-q", "--stacks", path], capture_output=True, text=True, timeout=120,
                          check=True).stdout
    header, out, frames = [], [], None
    for line in text.splitlines():
        if line.startswith("    #"):
            frames.append(line.split(" ", 5)[5])
            continue
        if line.startswith("# "):
            header.append(line)
            continue
        parsed = parse_dump(line)
        if parsed:
            frames = []
            out.append((parsed[0], frames))
    return "\n".join(header), tuple(out)


def frame_module(frame):
    """The module named in parentheses at the end of a frame line: "f+0x1 (libx.so)" -> libx.so."""
    m = re.search(r"\(([^()]*)\)$", frame)
    return m[1] if m else ""
