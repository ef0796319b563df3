#!/usr/bin/env python3
"""bench.py - vramtrace's CPU benchmarks; bench/run.sh builds what they need and calls this.

    python3 bench/bench.py --build BUILD_DIR [--reps N] [--big EVENTS] [--json OUT]
                           [--only hot,whole,cold,size,analyzer,whatif] [--quick] [--compare BUILD_DIR[=LABEL]]

Prints one table (see bench/NOTES.md for what every number means):

  hot path   ns that vramtrace adds to one cudaMalloc + cudaFree pair (median over --reps
             runs of the worker threads' CPU time, minus the same program untraced), for a C
             program with a shallow and a 40-frame call chain at 1 and 8 threads, and a Python
             program calling through ctypes 20 frames deep; against the CUDA test double
             (tests/doubles) and against a near-zero-cost runtime (bench/null_cudart.c) that
             makes the hooks' own cost readable to a few ns.
  whole      issue 17's three hot-path rows counted over the whole process (the worker's CPU
             time and the collector's, from the loop's start until its events are written),
             minus the same program untraced, per pair, against the null runtime: C with no
             stacks, C 40 frames deep with native stacks, Python 20 deep with native and Python
             stacks; with --compare, each build's preload in turn on the same programs,
             interleaved run by run (a before and after in the same minutes).
  cold       the same pair with the caches cold, as a framework's step leaves them (hotpath
             cold: 40 distinct frames along 64 paths, 4 MiB touched between pairs; hotpath
             ops: one allocator's frames under 8 operators of other depths): wall ns
             inside the pair, traced with no stacks and with native stacks, minus untraced;
             with --compare, each build's preload in turn. The warm rows above read the hooks'
             instructions; these read their cache misses, which a real step pays.
  trace size bytes per event of a training-like loop traced for real (keep-all trace).
  analyzer   `vramtrace report --json -q` and `vramtrace leaks --json -q` on synthetic traces
             of 10M and --big events: events/s (per CPU second, both of the reader's threads
             counted, and per wall second) and peak memory (max RSS, and RssAnon apart). The 10M
             runs are repeated --reps times and the medians shown; --compare runs another build's
             analyzer (an earlier commit) on the same traces, interleaved run by run with this
             one, one row each: a before and after measured side by side in the same minutes.
  whatif     the caching-allocator replay: the model alone (bench/alloc_model_speed: a trace's
             tensor requests and frees decoded once, then replayed, best CPU time of --reps) on a
             synthetic PyTorch trace (tests/gen_torch_trace) and on an H200 trace, and
             `vramtrace whatif --json -q` end to end (reading included): allocator events/s.

Nothing here needs a GPU or the network. Generated files go to a temporary directory that is
deleted at the end.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Targets and published anchors, printed beside the measurements.
TARGET_NOSTACK_NS = 150
TARGET_STACKS_NS = 1000
TARGET_BYTES_PER_EVENT = 2.0
TARGET_EVENTS_PER_S = 20e6
TARGET_BYTES_PER_LIVE = 128  # analyzer memory per live allocation (analyzer/model.h)
TARGET_REPLAY_EVENTS_PER_S = 10e6
MEMRAY_BYTES_PER_EVENT = 3.5


class Bench:
    def __init__(self, args):
        self.a = args
        b = os.path.abspath(args.build)
        self.build = b
        self.hotpath = os.path.join(b, "bench", "hotpath")
        self.gen = os.path.join(b, "bench", "gen_trace")
        self.peakmem = os.path.join(b, "bench", "peakmem")
        self.prefault = os.path.join(b, "bench", "libprefault.so")
        self.null_dir = os.path.join(b, "bench")
        self.double_dir = os.path.join(b, "tests", "doubles")
        self.preload = os.path.join(b, "preload", "libvramtrace.so")
        self.vramtrace = os.path.join(b, "analyzer", "vramtrace")
        self.pyprog = os.path.join(HERE, "hotpath_py.py")
        self.model_speed = os.path.join(b, "bench", "alloc_model_speed")
        self.gen_torch = os.path.join(b, "tests", "gen_torch_trace")
        self.tmp = tempfile.mkdtemp(prefix="vramtrace-bench-")
        # The analyzers measured: this build's, then each --compare build's, by label.
        self.analyzers = [(self.label(ROOT, None), self.vramtrace)]
        for spec in args.compare or []:
            path, _, label = spec.partition("=")
            path = os.path.abspath(path)
            self.analyzers.append((label or self.label(self.source_of(path), path), os.path.join(path, "analyzer", "vramtrace")))
        # The preloads measured by `whole`: this build's, then each --compare build's.
        self.preloads = [(label, os.path.join(os.path.dirname(os.path.dirname(vt)), "preload", "libvramtrace.so"))
                         for label, vt in self.analyzers]
        self.results = {"hot": [], "whole": [], "cold": [], "size": {}, "analyzer": [], "memory": [], "whatif": [], "notes": []}
        self.lost_total = 0

    # ---- helpers ------------------------------------------------------------------------

    def env(self, runtime, config, buffer_bytes, out, preload=None):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("VRAMTRACE_") or k in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
                del e[k]
        if runtime == "null":
            e["LD_LIBRARY_PATH"] = self.null_dir
        pre = [self.prefault]
        if config != "untraced":
            pre.append(preload or self.preload)
            e.update({"VRAMTRACE_OUTPUT": out, "VRAMTRACE_QUIET": "1", "VRAMTRACE_RING": "0",
                      "VRAMTRACE_THREAD_BUFFER": str(buffer_bytes)})
        if config in ("nostack", "nostack-notorch", "nostack-global"):
            e.update({"VRAMTRACE_STACK_DEPTH": "0", "VRAMTRACE_PYTHON": "0"})
        if config == "native":
            e["VRAMTRACE_PYTHON"] = "0"
        if config == "armed":
            e["VRAMTRACE_MODE"] = "armed"
        if config == "nostack-notorch":
            e["VRAMTRACE_TORCH"] = "0"
        e["LD_PRELOAD"] = ":".join(pre)
        return e

    @staticmethod
    def source_of(build):
        try:
            with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
                return json.load(f)["directories"]["source"]
        except (OSError, KeyError, ValueError):
            return build

    @staticmethod
    def label(source, fallback):
        """The commit a tree is at, '+' when it has uncommitted changes; else the fallback."""
        commit = subprocess.run(["git", "-C", source, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        if not commit:
            return os.path.basename(fallback.rstrip("/")) if fallback else "?"
        dirty = subprocess.run(["git", "-C", source, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return commit + ("+" if dirty else "")

    @staticmethod
    def parse_kv(line):
        out = {}
        for tok in line.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
        return out

    def info(self, path):
        r = subprocess.run([self.vramtrace, "info", "--json", path], capture_output=True, text=True)
        if r.returncode:
            return None
        return json.loads(r.stdout)

    # ---- hot path -----------------------------------------------------------------------

    def run_traced(self, cmd, env, out, config, traced):
        """Runs cmd (SystemExit if it fails); returns its stdout lines and, when traced, its trace's
        `info` (SystemExit if unreadable; its losses counted in lost_total), else None."""
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        if r.returncode:
            raise SystemExit(f"bench: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
        inf = None
        if traced:
            inf = self.info(out)  # this build's reader: traces of earlier commits read too
            if inf is None:
                raise SystemExit(f"bench: no readable trace from {' '.join(cmd)} ({config})")
            self.lost_total += inf["events_lost"]
        return r.stdout.strip().splitlines(), inf

    def hot_run(self, runtime, program, threads, config, pairs, preload=None):
        out = os.path.join(self.tmp, "hot.vrt")
        if os.path.exists(out):
            os.unlink(out)
        per_thread = pairs // threads if program != "python" else pairs
        ring = 1 << 20
        while ring < per_thread * 2 * 80 * 2 + (1 << 20):
            ring <<= 1
        env = self.env(runtime, config, ring, out, preload)
        if program == "python":
            lib = os.path.join(self.null_dir if runtime == "null" else self.double_dir, "libcudart.so.13")
            cmd = [sys.executable, self.pyprog, lib, str(pairs), "20"] + (["--global"] if config == "nostack-global" else [])
        else:
            cmd = [self.hotpath, program, str(threads), str(per_thread)]
        lines, inf = self.run_traced(cmd, env, out, config, config not in ("untraced", "armed"))
        kv = self.parse_kv(lines[-1])
        n = kv["pairs"]
        rec = {"runtime": runtime, "program": program, "threads": threads, "config": config, "pairs": n,
               "cpu_ns_per_pair": kv["cpu_ns"] / n, "wall_ns_per_pair": kv["wall_ns"] / n,
               "faults": kv.get("faults", 0)}
        if "proc_cpu_ns" in kv:
            rec["proc_cpu_ns_per_pair"] = kv["proc_cpu_ns"] / n
        if inf:
            rec["events_written"] = inf["events_written"]
            rec["events_lost"] = inf["events_lost"]
        return rec

    def hot(self):
        q = self.a.quick
        # (runtime, program, threads, total pairs): sized for ~0.2-0.6 s of CPU each.
        cases = []
        for runtime, base in (("double", 4000 if q else 30000), ("null", 20000 if q else 150000)):
            for program in ("flat", "deep"):
                for threads in (1, 8):
                    cases.append((runtime, program, threads, base))
            cases.append((runtime, "python", 1, base // 5 if runtime == "double" else base // 2))
        configs_c = ["untraced", "nostack", "native", "armed"]
        configs_py = ["untraced", "nostack", "native", "native+py", "armed"]
        runs = {}
        reps = self.a.reps
        t0 = time.time()
        for rep in range(reps):
            for case in cases:
                runtime, program, threads, pairs = case
                configs = configs_py if program == "python" else configs_c
                if runtime == "null" and program == "flat":
                    configs = configs + ["nostack-notorch"]
                if runtime == "null" and program == "python":
                    configs = configs + ["nostack-global"]
                for config in configs:
                    rec = self.hot_run(runtime, program, threads, config, pairs)
                    runs.setdefault(case + (config,), []).append(rec)
            self.progress(f"hot path: repetition {rep + 1}/{reps} done ({time.time() - t0:.0f} s)")
        for key, recs in runs.items():
            runtime, program, threads, pairs, config = key
            cpu = [r["cpu_ns_per_pair"] for r in recs]
            row = {"runtime": runtime, "program": program, "threads": threads, "config": config,
                   "pairs": recs[0]["pairs"], "median_cpu_ns_per_pair": statistics.median(cpu),
                   "min_cpu_ns_per_pair": min(cpu), "max_cpu_ns_per_pair": max(cpu),
                   "median_wall_ns_per_pair": statistics.median(r["wall_ns_per_pair"] for r in recs),
                   "events_lost": sum(r.get("events_lost", 0) for r in recs), "runs": recs}
            if "proc_cpu_ns_per_pair" in recs[0]:
                row["median_proc_cpu_ns_per_pair"] = statistics.median(r["proc_cpu_ns_per_pair"] for r in recs)
                # CPU outside the worker threads: the collector (and, untraced, ~nothing)
                row["median_other_cpu_ns_per_pair"] = statistics.median(
                    r["proc_cpu_ns_per_pair"] - r["cpu_ns_per_pair"] for r in recs)
            self.results["hot"].append(row)

    # ---- issue 17's rows, whole process, build against build -----------------------------------

    WHOLE_ROWS = (("flat", "nostack", "C, 1 call site, no stacks"),
                  ("deep", "native", "C, 40-frame chain, native stacks"),
                  ("python", "native+py", "Python 20 deep, native + Python"))

    def whole(self):
        q = self.a.quick
        pairs = {"flat": 20000 if q else 200000, "deep": 10000 if q else 100000, "python": 5000 if q else 40000}
        runs = {}
        t0 = time.time()
        for rep in range(self.a.reps):
            for program, config, _ in self.WHOLE_ROWS:
                base = self.hot_run("null", program, 1, "untraced", pairs[program])
                # Each build's turn right after the untraced run, in a rotating order.
                order = self.preloads[rep % len(self.preloads):] + self.preloads[:rep % len(self.preloads)]
                for label, preload in order:
                    rec = self.hot_run("null", program, 1, config, pairs[program], preload)
                    runs.setdefault((program, label), []).append(
                        (rec["proc_cpu_ns_per_pair"] - base["proc_cpu_ns_per_pair"],
                         rec["cpu_ns_per_pair"] - base["cpu_ns_per_pair"], rec.get("events_lost", 0)))
            self.progress(f"whole process: repetition {rep + 1}/{self.a.reps} done ({time.time() - t0:.0f} s)")
        for (program, label), rs in runs.items():
            whole = sorted(r[0] for r in rs)
            self.results["whole"].append({"program": program, "build": label, "runs": len(rs),
                                          "median_whole_ns_per_pair": statistics.median(whole),
                                          "min_whole_ns_per_pair": whole[0], "max_whole_ns_per_pair": whole[-1],
                                          "median_thread_ns_per_pair": statistics.median(r[1] for r in rs),
                                          "events_lost": sum(r[2] for r in rs)})

    def whole_table(self, lines):
        rows = {(r["program"], r["build"]): r for r in self.results["whole"]}
        if not rows:
            return
        lines.append("")
        lines.append("WHOLE PROCESS: ns added per cudaMalloc+cudaFree pair, the worker's and the collector's CPU "
                     "(median [min..max] of %d runs; null runtime; thread = the worker's share)" % self.a.reps)
        lines.append(f"  {'row':36} {'build':10} {'whole':>7} {'[min..max]':>14} {'thread':>7} {'lost':>5}")
        for program, _, name in self.WHOLE_ROWS:
            for label, _ in self.preloads:
                r = rows.get((program, label))
                if r:
                    span = f"[{r['min_whole_ns_per_pair']:.0f}..{r['max_whole_ns_per_pair']:.0f}]"
                    lines.append(f"  {name:36} {label:10} {r['median_whole_ns_per_pair']:>+7.0f} {span:>14} "
                                 f"{r['median_thread_ns_per_pair']:>+7.0f} {r['events_lost']:>5}")
        lines.append("  targets (issue 17, whole process): no stacks <= 100 ns an event (200 a pair); "
                     "Python 20 deep <= 800 ns a pair")

    # ---- the pair with cold caches ---------------------------------------------------------

    # (program, configuration, row): hotpath's cold mode (40 distinct frames, 64 paths) and its
    # ops mode (one allocator's frames under 8 operators of other depths, a framework's shape)
    COLD_ROWS = (("cold", "nostack", "C, 40 distinct frames, no stacks"),
                 ("cold", "native", "C, 40 distinct frames, native stacks"),
                 ("ops", "native", "C, allocator under 8 operators, native"))

    def cold_run(self, program, config, pairs, preload=None):
        out = os.path.join(self.tmp, "cold.vrt")
        if os.path.exists(out):
            os.unlink(out)
        env = self.env("null", config, 1 << 24, out, preload)
        # After the null runtime, the caller's path: where the preload's own libraries live
        # (a GPU host without a system libunwind). The double is not in play here.
        if os.environ.get("LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] += ":" + os.environ["LD_LIBRARY_PATH"]
        cmd = [self.hotpath, program, "1", str(pairs)]
        lines, inf = self.run_traced(cmd, env, out, config, config != "untraced")
        kv = {}
        for line in lines:
            kv.update(self.parse_kv(line))
        return kv["pair_ns"], inf["events_lost"] if inf else 0

    def cold(self):
        pairs = 2000 if self.a.quick else 20000
        runs = {}
        t0 = time.time()
        for rep in range(self.a.reps):
            base = {program: self.cold_run(program, "untraced", pairs)[0]
                    for program in dict.fromkeys(program for program, _, _ in self.COLD_ROWS)}
            order = self.preloads[rep % len(self.preloads):] + self.preloads[:rep % len(self.preloads)]
            for label, preload in order:
                for program, config, _ in self.COLD_ROWS:
                    ns, lost = self.cold_run(program, config, pairs, preload)
                    runs.setdefault((program, config, label), []).append((ns - base[program], lost))
            self.progress(f"cold caches: repetition {rep + 1}/{self.a.reps} done ({time.time() - t0:.0f} s)")
        for (program, config, label), rs in runs.items():
            added = sorted(r[0] for r in rs)
            self.results["cold"].append({"program": program, "config": config, "build": label, "runs": len(rs),
                                         "median_added_ns_per_pair": statistics.median(added),
                                         "min_added_ns_per_pair": added[0], "max_added_ns_per_pair": added[-1],
                                         "events_lost": sum(r[1] for r in rs)})

    def cold_table(self, lines):
        rows = {(r["program"], r["config"], r["build"]): r for r in self.results["cold"]}
        if not rows:
            return
        lines.append("")
        lines.append("COLD CACHES: wall ns added inside a cudaMalloc+cudaFree pair, 4 MiB touched between pairs "
                     "(median [min..max] of %d runs; null runtime)" % self.a.reps)
        lines.append(f"  {'row':40} {'build':10} {'added':>7} {'[min..max]':>14} {'lost':>5}")
        for program, config, name in self.COLD_ROWS:
            for label, _ in self.preloads:
                r = rows.get((program, config, label))
                if r:
                    span = f"[{r['min_added_ns_per_pair']:.0f}..{r['max_added_ns_per_pair']:.0f}]"
                    lines.append(f"  {name:40} {label:10} {r['median_added_ns_per_pair']:>+7.0f} {span:>14} "
                                 f"{r['events_lost']:>5}")

    # ---- trace size ---------------------------------------------------------------------

    @staticmethod
    def chunk_stats(path):
        """Sums stored and raw bytes per chunk type of a keep-all trace."""
        stats = {}
        with open(path, "rb") as f:
            data = f.read()
        log_offset = struct.unpack_from("<Q", data, 40)[0]
        off = log_offset
        while off + 32 <= len(data):
            magic, ctype, codec, _flags, stored, raw, _seq = struct.unpack_from("<IBBHIIQ", data, off)
            if magic != 0x4B484356:
                break
            s = stats.setdefault(ctype, [0, 0, 0])
            s[0] += 1
            s[1] += stored + 32
            s[2] += raw
            off += (32 + stored + 7) & ~7
        return stats

    def size(self):
        steps = 60 if self.a.quick else 300
        out = os.path.join(self.tmp, "train.vrt")
        env = self.env("double", "native", 16 << 20, out)
        env["LD_PRELOAD"] = self.preload
        r = subprocess.run([self.hotpath, "train", "1", str(steps)], env=env, capture_output=True, text=True,
                           timeout=600)
        if r.returncode:
            raise SystemExit(f"bench: train loop failed: {r.stderr[-500:]}")
        inf = self.info(out)
        st = self.chunk_stats(out)
        events = inf["events_written"]
        size = os.path.getsize(out)
        ev = st.get(1, [0, 0, 0])
        self.results["size"]["train"] = {
            "events": events, "lost": inf["events_lost"], "file_bytes": size, "bytes_per_event": size / events,
            "events_chunk_bytes_per_event": ev[1] / events, "raw_bytes_per_event": ev[2] / events,
            "tables_bytes": st.get(2, [0, 0, 0])[1], "chunks": {str(k): v for k, v in st.items()}}
        self.lost_total += inf["events_lost"]
        os.unlink(out)

    # ---- analyzer -----------------------------------------------------------------------

    def measure(self, cmd):
        r = subprocess.run([self.peakmem] + cmd, capture_output=True, text=True)
        line = [l for l in r.stderr.splitlines() if l.startswith("wall_s=")]
        if r.returncode or not line:
            raise SystemExit(f"bench: {' '.join(cmd)} failed: {r.stderr[-500:]}")
        return self.parse_kv(line[-1])

    def analyze(self, events, label, reps=1, gen_args=(), shape="training"):
        path = os.path.join(self.tmp, f"gen{label}.vrt")
        t0 = time.time()
        g = subprocess.run([self.gen, path, str(events), *gen_args], capture_output=True, text=True)
        if g.returncode:
            raise SystemExit(f"bench: gen_trace failed: {g.stderr}")
        gen = self.parse_kv(g.stdout)
        gen_s = time.time() - t0
        runs = {}
        # Interleaved: each repetition runs every build once, so that all of them meet the
        # machine's same minutes.
        for _ in range(reps):
            for build, vramtrace in self.analyzers:
                for command in ("report", "leaks"):
                    runs.setdefault((build, command), []).append(self.measure([vramtrace, command, "--json", "-q", path]))
        rows = []
        for (build, command), ms in runs.items():
            cpu = statistics.median(m["user_s"] + m["sys_s"] for m in ms)
            wall = statistics.median(m["wall_s"] for m in ms)
            rows.append({"command": command, "build": build, "shape": shape, "events": int(gen["events"]),
                         "trace_bytes": int(gen["bytes"]), "reps": len(ms), "wall_s": wall, "cpu_s": cpu,
                         "events_per_cpu_s": gen["events"] / cpu, "events_per_wall_s": gen["events"] / wall,
                         "maxrss_kb": max(m["maxrss_kb"] for m in ms), "anon_peak_kb": max(m["anon_peak_kb"] for m in ms),
                         "file_peak_kb": max(m["file_peak_kb"] for m in ms), "gen_s": gen_s,
                         "cpu_s_each": [m["user_s"] + m["sys_s"] for m in ms], "wall_s_each": [m["wall_s"] for m in ms]})
            self.progress(f"analyzer: {build} {command} on {label} events: {cpu:.2f} s CPU, {wall:.2f} s wall "
                          f"(median of {len(ms)})")
        os.unlink(path)
        return rows

    def live_memory(self):
        """Peak RSS per live allocation: report and leaks on a trace holding `held` allocations
        live to the end (gen_trace --hold), less the same on one that holds ~4.5k."""
        held = 200_000 if self.a.quick else 2_000_000
        per = {}
        for label, args in (("base", ["100000"]), ("held", [str(held + 100000), "--hold", str(held)])):
            path = os.path.join(self.tmp, f"live-{label}.vrt")
            g = subprocess.run([self.gen, path, *args], capture_output=True, text=True)
            if g.returncode:
                raise SystemExit(f"bench: gen_trace failed: {g.stderr}")
            for build, vramtrace in self.analyzers:
                for command in ("report", "leaks"):
                    per[(label, build, command)] = self.measure([vramtrace, command, "--json", "-q", path])["maxrss_kb"]
            os.unlink(path)
        for build, _ in self.analyzers:
            for command in ("report", "leaks"):
                b = (per[("held", build, command)] - per[("base", build, command)]) * 1024 / held
                self.results["memory"].append({"command": command, "build": build, "held": held,
                                               "bytes_per_live_allocation": b,
                                               "maxrss_kb": per[("held", build, command)],
                                               "base_maxrss_kb": per[("base", build, command)]})
                self.progress(f"analyzer: {build} {command}, {held} live allocations: {b:.0f} B each")

    def analyzer(self):
        self.live_memory()
        small = 1_000_000 if self.a.quick else 10_000_000
        rows = self.analyze(small, f"{small // 1_000_000}M", self.a.reps)
        self.results["analyzer"] += rows
        # A large live set and short phase calls: what leaks' scans cost (one look per call at
        # every live item was quadratic in a leak that grows call after call).
        held = 50_000 if self.a.quick else 200_000
        self.results["analyzer"] += self.analyze(10 * held, "live", self.a.reps,
                                                 ["--hold", str(held), "--step-events", "500"],
                                                 f"{held // 1000}k live, a call / 500 ev")
        big = 3 * small if self.a.quick else self.a.big
        if big <= small:
            return
        # The 200M run must fit the time budget: predict it from the small one and shrink it if not.
        per_event = sum(r["cpu_s"] + r["gen_s"] / (2 * len(self.analyzers)) for r in rows) / small
        predicted = per_event * big
        if predicted > self.a.budget and not self.a.force_big:
            fit = int(self.a.budget / per_event) // 10_000_000 * 10_000_000
            fit = max(fit, 2 * small)
            self.results["notes"].append(
                f"{big // 1_000_000}M events predicted at {predicted:.0f} s of CPU, over the {self.a.budget:.0f} s "
                f"budget at today's analyzer speed: ran {fit // 1_000_000}M instead "
                f"(--big {big} --force-big runs it anyway)")
            big = fit
        self.results["analyzer"] += self.analyze(big, f"{big // 1_000_000}M")

    # ---- whatif ---------------------------------------------------------------------------

    def model_speed_run(self, path, label, reps):
        r = subprocess.run([self.model_speed, path, "--reps", str(reps)], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"bench: alloc_model_speed failed: {r.stderr}")
        m = self.parse_kv(r.stdout)
        row = {"what": "model", "trace": label, "allocator_events": int(m["events"]), "cpu_s": m["seconds"],
               "allocator_events_per_s": m["events_per_s"]}
        self.progress(f"whatif: the model on {label}: {m['events_per_s'] / 1e6:.1f}M allocator events/s")
        return row

    def whatif(self):
        events = 2_000_000 if self.a.quick else 10_000_000
        path = os.path.join(self.tmp, "torch.vrt")
        g = subprocess.run([self.gen_torch, path, str(events)], capture_output=True, text=True)
        if g.returncode:
            raise SystemExit(f"bench: gen_torch_trace failed: {g.stderr}")
        trace_events = int(g.stdout.split()[0])
        label = f"synthetic {trace_events // 1_000_000}M"
        self.results["whatif"].append(self.model_speed_run(path, label, self.a.reps))
        h200 = os.path.join(ROOT, "tests", "golden", "h200", "retain-ds-oom-offload.vrt")
        if os.path.exists(h200):
            self.results["whatif"].append(self.model_speed_run(h200, "H200 ZeRO-2 offload OOM", 50))
        m = self.measure([self.vramtrace, "whatif", "--json", "-q", path])
        cpu = m["user_s"] + m["sys_s"]
        out = subprocess.run([self.vramtrace, "whatif", "--json", "-q", path], capture_output=True, text=True)
        d = json.loads(out.stdout)
        allocator = d["requests"] + d["frees"]
        self.results["whatif"].append({"what": "whatif", "trace": label, "trace_events": trace_events,
                                       "allocator_events": allocator, "cpu_s": cpu, "wall_s": m["wall_s"],
                                       "allocator_events_per_s": allocator / cpu, "maxrss_kb": m["maxrss_kb"]})
        self.progress(f"whatif: end to end on {label}: {cpu:.1f} s CPU")
        os.unlink(path)

    def whatif_table(self, lines):
        rows = self.results["whatif"]
        if not rows:
            return
        lines.append("")
        lines.append("WHATIF: the caching-allocator replay, allocator events (tensor requests + frees) per CPU second")
        lines.append(f"  {'what':28} {'trace':26} {'events':>10} {'CPU s':>7} {'M events/s':>11}")
        for r in rows:
            what = "model alone (best of reps)" if r["what"] == "model" else "vramtrace whatif, end to end"
            lines.append(f"  {what:28} {r['trace']:26} {r['allocator_events']:>10} {r['cpu_s']:>7.2f} "
                         f"{r['allocator_events_per_s'] / 1e6:>11.1f}")
        lines.append(f"  target >= {TARGET_REPLAY_EVENTS_PER_S / 1e6:.0f}M allocator events/s for the replay; end to "
                     f"end adds reading the trace (and a second pass when it holds its own limit)")

    # ---- output -------------------------------------------------------------------------

    def progress(self, msg):
        if not self.a.json_only:
            print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def hot_table(self, lines):
        rows = self.results["hot"]
        if not rows:
            return
        index = {(r["runtime"], r["program"], r["threads"], r["config"]): r for r in rows}
        lines.append("HOT PATH: ns added per cudaMalloc+cudaFree pair (median of %d runs, worker-thread CPU time; "
                     "untraced = ns per pair)" % self.a.reps)
        lines.append(f"  {'runtime':8} {'program':24} {'thr':>3} {'untraced':>9} {'no stacks':>10} {'native':>8} "
                     f"{'native+py':>10} {'armed':>7} {'lost':>5}   collector ns/pair (no stacks)")
        names = {"flat": "C, 1 call site", "deep": "C, 40-frame chain", "python": "Python ctypes, 20 deep"}
        for runtime in ("double", "null"):
            for program in ("flat", "deep", "python"):
                for threads in (1, 8):
                    base = index.get((runtime, program, threads, "untraced"))
                    if not base:
                        continue
                    b = base["median_cpu_ns_per_pair"]
                    cells = []
                    lost = 0
                    for config in ("nostack", "native", "native+py", "armed"):
                        r = index.get((runtime, program, threads, config))
                        if not r:
                            cells.append("-")
                            continue
                        cells.append(f"{r['median_cpu_ns_per_pair'] - b:+.0f}")
                        lost += r["events_lost"]
                    coll = ""
                    r = index.get((runtime, program, threads, "nostack"))
                    if runtime == "null" and r and "median_other_cpu_ns_per_pair" in r:
                        coll = f"{r['median_other_cpu_ns_per_pair'] - base.get('median_other_cpu_ns_per_pair', 0):.0f}"
                    lines.append(f"  {runtime:8} {names[program]:24} {threads:>3} {b:>9.0f} {cells[0]:>10} {cells[1]:>8} "
                                 f"{cells[2]:>10} {cells[3]:>7} {lost:>5}   {coll}")
        ab = index.get(("null", "flat", 1, "nostack-notorch"))
        ab8 = index.get(("null", "flat", 8, "nostack-notorch"))
        if ab:
            b1 = index[("null", "flat", 1, "untraced")]["median_cpu_ns_per_pair"]
            msg = f"  ablation: no stacks with VRAMTRACE_TORCH=0 (no PyTorch probe per allocation): " \
                  f"{ab['median_cpu_ns_per_pair'] - b1:+.0f} ns at 1 thread"
            if ab8:
                b8 = index[("null", "flat", 8, "untraced")]["median_cpu_ns_per_pair"]
                msg += f", {ab8['median_cpu_ns_per_pair'] - b8:+.0f} ns at 8 threads"
            lines.append(msg + " (null runtime)")
        abg = index.get(("null", "python", 1, "nostack-global"))
        if abg:
            bp = index[("null", "python", 1, "untraced")]["median_cpu_ns_per_pair"]
            ns = index[("null", "python", 1, "nostack")]["median_cpu_ns_per_pair"]
            lines.append(f"  ablation: Python, no stacks, runtime loaded RTLD_GLOBAL (the device lookup's dlsym(RTLD_NEXT) "
                         f"finds cudaGetDevice): {abg['median_cpu_ns_per_pair'] - bp:+.0f} ns vs {ns - bp:+.0f} ns "
                         f"RTLD_LOCAL (null runtime)")
        lines.append(f"  targets: no stacks <= {TARGET_NOSTACK_NS} ns; native+Python stacks ~40 deep <= "
                     f"{TARGET_STACKS_NS} ns; 1 -> 8 threads flat (no global lock). Anchors: memray 1.45x/1.65x "
                     f"slowdown, PyTorch _record_memory_history ~2 us/event, heaptrack: one global lock")
        lines.append("  double = tests/doubles runtime (mutex + mmap/munmap per pair; +-1 us run to run, cannot resolve "
                     "150 ns); null = bench/null_cudart.c (~13 ns per pair): read the hooks' cost from these rows")

    def size_table(self, lines):
        s = self.results["size"].get("train")
        if not s:
            return
        lines.append("")
        lines.append("TRACE SIZE: bytes per event, training-like loop (12 sites, 1000 events/step), keep-all trace")
        lines.append(f"  {s['events']} events, {s['file_bytes']} bytes: {s['bytes_per_event']:.2f} B/event in the "
                     f"file ({s['events_chunk_bytes_per_event']:.2f} B/event in event chunks, "
                     f"{s['raw_bytes_per_event']:.2f} B/event before zstd), lost {s['lost']}")
        for r in self.results["analyzer"][:1]:
            lines.append(f"  synthetic {r['events'] // 1_000_000}M-event trace (bench/gen_trace): "
                         f"{r['trace_bytes'] / r['events']:.2f} B/event")
        lines.append(f"  target <= {TARGET_BYTES_PER_EVENT} B/event; anchor: memray {MEMRAY_BYTES_PER_EVENT} B/event "
                     f"(uncompressed)")

    def analyzer_table(self, lines):
        rows = self.results["analyzer"]
        if not rows:
            return
        lines.append("")
        lines.append("ANALYZER: synthetic training trace (~4.5k live allocations, 320 stacks, a phase every 10k "
                     "events); CPU s: both of the reader's threads, median of the runs")
        lines.append(f"  {'command':8} {'build':10} {'events':>6} {'runs':>4} {'trace MB':>9} {'CPU s':>7} {'wall s':>7} "
                     f"{'Mev/CPU s':>10} {'Mev/wall s':>11} {'maxRSS MB':>10} {'anon MB':>8}")
        for r in sorted(rows, key=lambda r: (r.get("shape", "training") != "training", r["events"],
                                             r["command"] != "report")):
            shape = r.get("shape", "training")
            lines.append(f"  {r['command']:8} {r['build']:10} {r['events'] / 1e6:>5g}M {r['reps']:>4} "
                         f"{r['trace_bytes'] / 1e6:>9.1f} {r['cpu_s']:>7.2f} {r['wall_s']:>7.2f} "
                         f"{r['events_per_cpu_s'] / 1e6:>10.2f} {r['events_per_wall_s'] / 1e6:>11.2f} "
                         f"{r['maxrss_kb'] / 1024:>10.1f} {r['anon_peak_kb'] / 1024:>8.1f}"
                         + ("" if shape == "training" else f"  ({shape})"))
        lines.append(f"  target >= {TARGET_EVENTS_PER_S / 1e6:.0f}M events/s; memory bounded by live set + tables "
                     f"(maxRSS flat across sizes: the trace is read with pread, never mapped). "
                     f"Anchor: memray/bytehound analyzers OOM on 100+ GB traces")
        for m in self.results["memory"]:
            lines.append(f"  memory: {m['build']} {m['command']} {m['bytes_per_live_allocation']:.0f} B per live "
                         f"allocation ({m['held']} held: {m['maxrss_kb'] / 1024:.1f} MB, {m['base_maxrss_kb'] / 1024:.1f} "
                         f"MB with ~4.5k); target <= {TARGET_BYTES_PER_LIVE} B (analyzer/model.h)")
        for build, _ in self.analyzers:
            for command in ("report", "leaks"):
                runs = sorted((r for r in rows if r["command"] == command and r["build"] == build
                               and r.get("shape", "training") == "training"),
                              key=lambda r: r["events"])
                if len(runs) >= 2 and runs[-1]["events"] > runs[0]["events"]:
                    per_event = (runs[-1]["maxrss_kb"] - runs[0]["maxrss_kb"]) * 1024 / (runs[-1]["events"] - runs[0]["events"])
                    lines.append(f"  memory: {build} {command} {per_event:.3f} B per decoded event "
                                 f"({runs[0]['events'] // 1_000_000}M -> {runs[-1]['events'] // 1_000_000}M events; "
                                 f"the live set is the same)")
        for note in self.results["notes"]:
            lines.append(f"  note: {note}")

    def table(self):
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        lines = [f"vramtrace benchmarks: commit {commit}{' (+ uncommitted changes)' if dirty else ''}, "
                 f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}", ""]
        self.results["commit"] = commit
        self.hot_table(lines)
        self.whole_table(lines)
        self.cold_table(lines)
        self.size_table(lines)
        self.analyzer_table(lines)
        self.whatif_table(lines)
        lines.append("")
        lines.append(f"events lost in all traced runs: {self.lost_total}")
        return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--big", type=int, default=200_000_000, help="events in the large analyzer trace")
    p.add_argument("--budget", type=float, default=60.0, help="CPU seconds the large analyzer run may take")
    p.add_argument("--force-big", action="store_true", help="run --big events even if over --budget")
    p.add_argument("--only", default="hot,whole,cold,size,analyzer,whatif")
    p.add_argument("--quick", action="store_true", help="small sizes, for checking the harness")
    p.add_argument("--compare", action="append", metavar="BUILD_DIR[=LABEL]",
                   help="also measure this build's analyzer, interleaved (default label: its commit)")
    p.add_argument("--json", help="also write every measurement here")
    p.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    b = Bench(a)
    only = a.only.split(",")
    try:
        t0 = time.time()
        if "hot" in only:
            b.hot()
        if "whole" in only:
            b.whole()
        if "cold" in only:
            b.cold()
        if "size" in only:
            b.size()
        if "analyzer" in only:
            b.analyzer()
        if "whatif" in only:
            b.whatif()
        b.results["seconds"] = time.time() - t0
        print(b.table())
        if a.json:
            with open(a.json, "w") as f:
                json.dump(b.results, f, indent=1)
    finally:
        shutil.rmtree(b.tmp, ignore_errors=True)
    return 1 if b.lost_total else 0


if __name__ == "__main__":
    sys.exit(main())
