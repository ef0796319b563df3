"""The live-set rules exist once (format/live.c): the preload applies them to what it writes, and
every checkpoint restates the result; the analyzer's model applies them to the events it reads.
They must follow docs/trace-format.md ("Replay semantics"): an allocation replaces an
older item at its address, a release older than its item is stale, a physical handle lives while
it is referenced or mapped, a reservation until it is freed. This holds the preload to that
spec through tests/e2e/replay.py (the rules written again, from the spec alone: a fault in
format/live.c changes the preload and the analyzer alike, so only an independent statement of
the rules can see it):

- every process's exit checkpoint equals the replay of its events from the start;
- in a ring, each periodic checkpoint equals the previous one replayed on through the events
  between them (the round trip of issue 15: from the start and from a checkpoint, equal live
  sets), and the first equals the replay from the start.

The analyzer's side is held to the same replay here too (what `report` says each device and kind
holds at the end of each test program), and by the golden and H200 tests."""
import json

import pytest

from conftest import CUDART, GOLDEN, VRAMTRACE, analyze, program, trace as traced
from replay import Item, Replay, dumped
from stress_helpers import FASTRT, run

SPACE_OF_OP = {"alloc": "addr", "seed": "addr", "phys_create": "handle", "map": "map", "va_reserve": "reserve",
               "import": "import", "block_alloc": "block"}
# What Replay leaves out (it holds no memory of this process) and this test follows too: an
# item born by the first opcode, ended by the second when that is not older than the item.
UNCOUNTED = {"va_reserve": ("reserve", "va_free"), "import": ("import", "import_close")}
ENDS = {end: space for space, end in UNCOUNTED.values()}


class Stepper(Replay):
    """Replay's rules, fed one record at a time, from an empty state or a checkpoint's; tracks
    reservations and imports too (they hold no memory, so Replay leaves them out) and each
    item's stack."""

    def __post_init__(self):
        self.addr, self.handles, self.maps, self.blocks = {}, {}, {}, {}
        self.uncounted = {"reserve": {}, "import": {}}

    def born(self, table, r, frames):
        super().born(table, r, frames)
        if table.get(r["addr"]) is not None and table[r["addr"]].ts == r.ts:
            table[r["addr"]].stack = r.get("stack", 0)

    def apply(self, r, frames=()):
        if r.op in UNCOUNTED:
            table = self.uncounted[UNCOUNTED[r.op][0]]
            old = table.get(r["addr"])
            if old is None or old[1] <= r.ts:
                table[r["addr"]] = (r["size"], r.ts, r.device, r.kind, r.get("stack", 0))
        elif r.op in ENDS:
            table = self.uncounted[ENDS[r.op]]
            old = table.get(r["addr"])
            if old is not None and old[1] <= r.ts:
                del table[r["addr"]]
        else:
            super().apply(r, frames)

    def seed(self, items):
        """The state a checkpoint restates (its CP_LIVE records): each item as if the opcode in
        `made` had happened at its time; a handle's references are its `y`, its mappings the
        MAP items that name it."""
        for r in items:
            made = r["made"]
            if made in UNCOUNTED or made in ("alloc", "block_alloc"):
                self.apply(_as(r, made))
            elif made == "phys_create":
                self.handles[r["addr"]] = it = Item(r["size"], r.ts, r.device, r.kind, [], refs=r["y"])
                it.stack = r.get("stack", 0)
            elif made == "map":
                self.maps[r["addr"]] = (r["aux"], r["size"], r.ts)
            else:
                raise AssertionError(f"a checkpoint item this test does not know: {r.text}")
        for handle, _, _ in self.maps.values():
            if handle in self.handles:
                self.handles[handle].maps += 1

    def state(self):
        """{(space, address): what the item is}, as a checkpoint would restate it."""
        out = {}
        for space, table in (("addr", self.addr), ("handle", self.handles), ("block", self.blocks)):
            for a, it in table.items():
                out[(space, a)] = (it.size, it.ts, it.device, it.kind, getattr(it, "stack", 0)) + \
                    ((it.refs,) if space == "handle" else ())
        for a, (handle, size, ts) in self.maps.items():
            out[("map", a)] = (size, ts, handle)
        for space, table in self.uncounted.items():
            for a, item in table.items():
                out[(space, a)] = item
        return out


def _as(r, op):
    """A CP_LIVE record read as the event that made its item live."""
    copy = type(r)(op=op, thread=r.thread, ts=r.ts, api=r.api, device=r.device, kind=r.kind, fields=dict(r.fields),
                   text=r.text)
    return copy


def restated(items):
    """{(space, address): ...} of a checkpoint's CP_LIVE records, in the shape of Stepper.state."""
    out = {}
    for r in items:
        space = SPACE_OF_OP[r["made"]]
        if space == "map":
            out[(space, r["addr"])] = (r["size"], r.ts, r["aux"])
        else:  # a handle's `y` is its reference count
            out[(space, r["addr"])] = (r["size"], r.ts, r.device, r.kind, r.get("stack", 0)) + \
                ((r["y"],) if space == "handle" else ())
    return out


def checkpoints(records):
    """[(index of its CP_BEGIN in records, reason, events before it, [CP_LIVE records])] of every
    whole checkpoint, in file order."""
    out, current = [], None
    for i, (r, _) in enumerate(records):
        if r.op == "checkpoint":
            current = (i, r["reason"], r["events"], [])
        elif r.op == "cp_live" and current:
            current[3].append(r)
        elif r.op == "cp_end" and current:
            if r["id"] == len(current[3]):
                out.append(current)
            current = None
    return out


def events_between(records, start, end):
    return [(r, f) for r, f in records[start:end] if r.op not in ("checkpoint", "cp_live", "cp_end", "cp_phase")]


def describe(diff_a, diff_b):
    return "\n".join([f"  replay only: {k} {v}" for k, v in sorted(diff_a.items())[:10]] +
                     [f"  checkpoint only: {k} {v}" for k, v in sorted(diff_b.items())[:10]])


def assert_equal_states(replayed, restates, where):
    only_replay = {k: v for k, v in replayed.items() if restates.get(k) != v}
    only_cp = {k: v for k, v in restates.items() if replayed.get(k) != v}
    assert not only_replay and not only_cp, f"{where}:\n{describe(only_replay, only_cp)}"


# Programs that exercise each rule on the doubles: runtime and driver allocations and frees
# (async, pinned, managed, registered), VMM handles with retains and releases (one referenced
# twice at exit), mappings and
# reservations (reached through the runtime's entry points too), context resets, threads, a
# static runtime.
PROGRAMS = {
    "rt_api": [], "rt_reset": [], "drv_api": [], "drv_rest": [], "entry_point_vmm": [], "dl_driver": [], "static_rt": [],
    "mt_alloc": [], "phases": [], "oom": [], "vmm_retained": [],
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_exit_checkpoint_restates_the_replay_of_every_event(tmp_path, name):
    t = traced(tmp_path, [program(name), *PROGRAMS[name]], env={"CUDART": str(CUDART)})
    _, records = dumped(str(VRAMTRACE), str(t.trace))
    cps = [c for c in checkpoints(records) if c[1] == 3]  # VRT_CP_EXIT
    assert len(cps) == 1, [c[:3] for c in checkpoints(records)]
    begin, _, events, items = cps[0]
    before = events_between(records, 0, begin)
    assert len(before) == events  # the checkpoint's `x`: the events written before it
    s = Stepper(t.trace, VRAMTRACE)
    for r, f in before:
        s.apply(r, f)
    assert_equal_states(s.state(), restated(items), f"{name}: exit checkpoint")
    assert items, "a checkpoint with nothing in it proves nothing"
    # and the analyzer's replay (analyzer/model.c over format/live.c) holds what the spec's does,
    # per device and kind
    report = json.loads(analyze("report", "--json", "-q", t.trace).stdout)
    held = {(d["device"], d["kind"]): d["live_bytes_at_end"] for d in report["devices"] if d["live_bytes_at_end"]}
    assert held == {k: v for k, v in s.live.items() if v}, (held, s.live)


def test_ring_checkpoints_follow_from_each_other_and_from_the_start(tmp_path):
    """stress_churn in a 4 MiB ring, run short of a lap: several periodic checkpoints, with every
    event before and between them still in the ring."""
    argv = [program("stress_churn"), 150000, 100]
    p, out = run(tmp_path, argv, "c.vrt", env={"VRAMTRACE_THREAD_BUFFER": "16M"}, run_args=["--ring", "4M"],
                 extra_preload=FASTRT, limit=120)
    assert p.returncode == 0, p.stderr
    header, records = dumped(str(VRAMTRACE), str(out))
    assert "history lost" not in header and "wrapped" not in header, header
    periodic = [c for c in checkpoints(records) if c[1] == 0]  # VRT_CP_PERIODIC
    assert len(periodic) >= 2, [c[:3] for c in checkpoints(records)]
    # from the start to the first
    s = Stepper(out, VRAMTRACE)
    for r, f in events_between(records, 0, periodic[0][0]):
        s.apply(r, f)
    assert_equal_states(s.state(), restated(periodic[0][3]), "from the start to the first checkpoint")
    # from each to the next
    for a, b in zip(periodic, periodic[1:]):
        s = Stepper(out, VRAMTRACE)
        s.seed(a[3])
        between = events_between(records, a[0], b[0])
        assert len(between) == b[2] - a[2]
        for r, f in between:
            s.apply(r, f)
        assert_equal_states(s.state(), restated(b[3]), f"from the checkpoint at event {a[2]} to the one at {b[2]}")
    assert sum(len(c[3]) for c in periodic) > 1000


# attach*.vrt began late: their first checkpoint seeds the live set (VRT_CP_ATTACH), which a
# replay from the start cannot know.
H200 = sorted(p for p in (GOLDEN / "h200").glob("*.vrt")
              if not p.name.startswith("attach"))


@pytest.mark.parametrize("path", H200, ids=lambda p: p.stem)
def test_real_traces_exit_checkpoints_restate_the_replay(path):
    """The H200 traces (PyTorch's allocator with and without expandable segments, JAX, CuPy,
    NCCL, DeepSpeed): every whole checkpoint of a trace recorded from its start equals the replay
    of the events before it."""
    header, records = dumped(str(VRAMTRACE), str(path))
    cps = checkpoints(records)
    assert "history lost" not in header and "wrapped" not in header and not any(c[1] == 4 for c in cps), header
    assert cps, "no whole checkpoint"
    s, done, applied = Stepper(path, VRAMTRACE), 0, 0
    for begin, reason, events, items in cps:
        for r, f in events_between(records, done, begin):
            s.apply(r, f)
            applied += 1
        done = begin
        assert applied == events
        assert_equal_states(s.state(), restated(items), f"{path.name}: checkpoint (reason {reason}) at event {events}")
