"""Shared helpers for the end-to-end suite.

Each test runs a real program from tests/programs (built by meson into <build>/tests) under
`vramtrace run` against the GPU-free CUDA doubles, then reads the trace back through the
analyzer: `report --json` for totals and sites, `dump` for individual records, `info --json`
for how the process ended. Nothing here parses the trace format itself.

Environment (set by the meson test; defaults suit a checkout built in ./build):
  VRAMTRACE_BUILD   the meson build directory
  VRAMTRACE_SOURCE  the source tree
  VRAMTRACE_UPDATE_GOLDEN=1  rewrite tests/golden/*.expected (and record missing traces);
                             the same as pytest's --update-golden
  VRAMTRACE_STRESS=1  also run the tests marked @pytest.mark.slow (the 'stress' meson suite
                      runs exactly those: -m slow); without it they are skipped
  VRAMTRACE_TEST_PRELOAD     libraries put in front of every traced program's LD_PRELOAD (the
                             sanitizer runtime, for a build with -Db_sanitize; see
                             scripts/test-sanitizers.sh)
"""
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from replay import Record, parse_dump  # noqa: F401 (defined there for scripts too; tests take them from here)

SOURCE = Path(os.environ.get("VRAMTRACE_SOURCE", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("VRAMTRACE_BUILD", SOURCE / "build"))
VRAMTRACE = BUILD / "analyzer" / "vramtrace"
PROGRAMS = BUILD / "tests"
DOUBLES = BUILD / "tests" / "doubles"
CUDART = DOUBLES / "libcudart.so.13"
PROGRAM_SOURCES = SOURCE / "tests" / "programs"
GOLDEN = SOURCE / "tests" / "golden"

MiB = 1 << 20
KiB = 1 << 10

TIMEOUT = 60  # seconds for any one command; the whole suite takes a few seconds

# The reports' text depends on the locale's character set (analyzer/charset.h): the suite reads
# it in UTF-8 whatever the machine's default, and a test that wants another says so.
os.environ["LC_ALL"] = "C.UTF-8"

if not VRAMTRACE.exists():
    pytest.exit(f"{VRAMTRACE} is not built: run `ninja -C {BUILD}` (or set VRAMTRACE_BUILD)", returncode=2)


def program(name):
    """Path of a built test program."""
    path = PROGRAMS / name
    assert path.exists(), f"{path} is not built (tests/meson.build builds it)"
    return str(path)


def program_constant(source, name):
    """A module-level constant of a Python test program, read from its source (it is not
    imported: it loads a CUDA runtime)."""
    import ast

    for node in ast.parse(Path(source).read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(name)


def kept_line(source, way):
    """The line of a test program that ends in "# kept: WAY" (where it allocates what it keeps)."""
    lines = Path(source).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.rstrip().endswith(f"# kept: {way}"))


def clean_env(extra=None):
    """The environment for a traced program: ours without any VRAMTRACE_*/FAKECUDA* settings
    that the developer's shell may carry, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VRAMTRACE_", "FAKECUDA", "LD_PRELOAD")) or k == "VRAMTRACE_PRELOAD"}
    env.update(extra or {})
    if os.environ.get("VRAMTRACE_TEST_PRELOAD"):
        env["LD_PRELOAD"] = ":".join(filter(None, [os.environ["VRAMTRACE_TEST_PRELOAD"], env.get("LD_PRELOAD")]))
    return env


# ---- one traced run ---------------------------------------------------------------------

def analyze(*args, check=True):
    """Runs `vramtrace ARGS...`; returns the CompletedProcess."""
    p = subprocess.run([str(VRAMTRACE), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert p.returncode == 0, f"vramtrace {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}"
    return p


@dataclass
class Traced:
    """A program run under `vramtrace run`, and its trace read back through the analyzer."""
    argv: list
    trace: Path
    returncode: int
    stdout: str
    stderr: str

    @cached_property
    def report(self):
        return json.loads(analyze("report", "--json", "--quiet", "--top", "100", self.trace).stdout)

    @cached_property
    def report_text(self):
        return analyze("report", "--quiet", self.trace).stdout

    @cached_property
    def dump_text(self):
        return analyze("dump", "--quiet", self.trace).stdout

    @cached_property
    def dump_stacks_text(self):
        return analyze("dump", "--quiet", "--stacks", self.trace).stdout

    def stack_of(self, record):
        """The frame lines ("leak_site+0x1c (prog)", ...) `dump --stacks` prints under record."""
        lines = self.dump_stacks_text.splitlines()
        frames = []
        for line in lines[lines.index(record.text) + 1:]:
            m = re.match(r"^    #\d+ (.*)$", line)
            if not m:
                break
            frames.append(m[1])
        return frames

    @cached_property
    def records(self):
        return parse_dump(self.dump_text)

    @cached_property
    def info(self):
        return json.loads(analyze("info", "--json", self.trace).stdout)

    @cached_property
    def info_text(self):
        return analyze("info", self.trace).stdout

    def events(self, op=None, api=None):
        """Event records (checkpoint contents excluded), optionally of one op / api."""
        return [r for r in self.records
                if not r.op.startswith("cp_") and r.op != "checkpoint"
                and (op is None or r.op == op) and (api is None or r.api == api)]

    def totals(self):
        """{(device, kind): (peak_bytes, live_bytes_at_end)} from the report."""
        return {(d["device"], d["kind"]): (d["peak_bytes"], d["live_bytes_at_end"])
                for d in self.report["devices"]}

    def live_sites(self):
        return self.report["live_at_end"]

    def site(self, function, sites=None):
        """The one live-at-end site whose stack passes through `function`."""
        sites = self.live_sites() if sites is None else sites
        found = [s for s in sites if function in frame_functions(s)]
        assert len(found) == 1, f"{len(found)} sites through {function}: {[frame_functions(s) for s in sites]}"
        return found[0]


def human(n):
    """Bytes the way vramtrace prints them: three significant digits and a binary unit."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.2f} {unit}" if n < 10 else f"{n:.1f} {unit}" if n < 100 \
                else f"{n:.0f} {unit}"
        n /= 1024


def frame_functions(site):
    return [f["function"] for f in site["frames"]]


def build_fake_c10(directory):
    """tests/programs/fake_c10_tracker.c built as DIRECTORY/torch/lib/libc10_cuda.so beside a
    torch/version.py of 2.11.0, where the tensor layer looks for PyTorch's release (the stand-in
    torch loads it when FAKETORCH_C10 names it). Returns its path."""
    lib = Path(directory) / "torch" / "lib" / "libc10_cuda.so"
    lib.parent.mkdir(parents=True)
    (lib.parent.parent / "version.py").write_text("__version__ = '2.11.0'\n")
    p = subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(PROGRAM_SOURCES / "fake_c10_tracker.c")],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"cannot build the fake libc10_cuda.so:\n{p.stderr}"
    return str(lib)


def trace(tmp_path, argv, env=None, run_args=(), name="t.vrt"):
    """Runs argv under `vramtrace run -o tmp_path/name`; the trace must exist afterwards."""
    out = Path(tmp_path) / name
    cmd = [str(VRAMTRACE), "run", "-q", *run_args, "-o", str(out), "--", *map(str, argv)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(env),
                       cwd=tmp_path)
    assert out.exists(), f"no trace written by {' '.join(cmd)} (exit {p.returncode}):\n{p.stderr}"
    return Traced(list(argv), out, p.returncode, p.stdout, p.stderr)


def on_a_terminal(argv, env):
    """argv's output (stdout and stderr) when both are a terminal (a pty): what a user sees."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:
        os.execve(str(argv[0]), [str(a) for a in argv], env)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace")


def big_torch_trace(path, events=2_000_000):
    """A synthetic PyTorch trace large enough for progress bars (looked at every 2^20 records)."""
    subprocess.run([str(BUILD / "tests" / "gen_torch_trace"), str(path), str(events), "--leak-every", "50"],
                   check=True, capture_output=True, timeout=TIMEOUT)
    return path


def run_plain(argv, env=None, cwd=None):
    """Runs argv without vramtrace, same environment rules."""
    return subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=TIMEOUT,
                          env=clean_env(env), cwd=cwd)


def assert_nothing_lost(t):
    assert t.info["events_lost"] == 0
    assert not t.events("lost"), [r.text for r in t.events("lost")]
    assert t.info["events_written"] == len(t.events()), "state block and records disagree"


def assert_unchanged_behaviour(t, env=None, cwd=None):
    """The program's own exit code and stdout are the same with and without vramtrace."""
    plain = run_plain(t.argv, env=env, cwd=cwd)
    assert (t.returncode, t.stdout) == (plain.returncode, plain.stdout)


def marker_lines(path):
    """{name: line} for every '# MARK: name' comment in a source file."""
    marks = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        m = re.search(r"#\s*MARK:\s*([\w.<>]+)\s*$", line)
        if m:
            assert m[1] not in marks, f"duplicate marker {m[1]}"
            marks[m[1]] = number
    return marks


@pytest.fixture(scope="session")
def python_exe():
    """The interpreter for Python test programs: this one."""
    return sys.executable


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", dest="update_golden",
                     help="rewrite tests/golden/*.expected from the kept traces (recording missing ones)")


STRESS = os.environ.get("VRAMTRACE_STRESS") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a stress test of several seconds; runs only with VRAMTRACE_STRESS=1 "
                                       "(meson test --suite stress)")
    config.addinivalue_line("markers", "forks: forks a process that has threads running (the preload's collector "
                                       "at least); scripts/test-sanitizers.sh leaves these out under ASan, whose "
                                       "allocator (GCC 12) is not fork-safe")


def pytest_collection_modifyitems(config, items):
    if STRESS:
        return
    skip = pytest.mark.skip(reason="slow stress test: set VRAMTRACE_STRESS=1 (meson test --suite stress)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return [f"vramtrace build: {BUILD}", f"vramtrace source: {SOURCE}"]


def copy_trace(src, dst):
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
