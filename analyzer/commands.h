/* SPDX-License-Identifier: MIT */
/* The subcommands and their --help texts (docs/cli.md is generated from the same texts). */
#ifndef VRAMTRACE_COMMANDS_H
#define VRAMTRACE_COMMANDS_H

int vrt_cmd_run(int argc, char **argv);
int vrt_cmd_report(int argc, char **argv);
int vrt_cmd_leaks(int argc, char **argv);
int vrt_cmd_oom(int argc, char **argv);
int vrt_cmd_timeline(int argc, char **argv);
int vrt_cmd_html(int argc, char **argv);
int vrt_cmd_export(int argc, char **argv);
int vrt_cmd_diff(int argc, char **argv);
int vrt_cmd_whatif(int argc, char **argv);
int vrt_cmd_dump(int argc, char **argv);
int vrt_cmd_info(int argc, char **argv);
int vrt_cmd_recover(int argc, char **argv);
int vrt_cmd_attach(int argc, char **argv);
int vrt_cmd_mark(int argc, char **argv);
int vrt_cmd_snapshot(int argc, char **argv);
int vrt_cmd_watch(int argc, char **argv);

#define VRT_HELP_RUN                                                                                   \
	"usage: vramtrace run [options] [--] COMMAND [ARGS...]\n"                                       \
	"\n"                                                                                           \
	"Runs COMMAND with libvramtrace.so preloaded and exits with its exit code. Every CUDA\n"         \
	"allocation (device, pinned host, managed, VMM) is recorded with its native and Python stack;\n" \
	"PyTorch tensors too when the PyTorch build is recognised. Each process that allocates writes\n" \
	"its own trace.\n"                                                                             \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  -o, --output PATH   trace file (default ./vramtrace.<pid>.vrt); a directory (existing, or\n" \
	"                      ending in /) gets one file per process, named by pid and rank\n"          \
	"  -f, --force         replace the trace file if it exists (without it, run refuses)\n"         \
	"  --ring SIZE         keep at most SIZE of events (e.g. 64M, 2G; default 256M); the live set\n"  \
	"                      and stacks are never lost\n"                                              \
	"  --keep-all          keep every event (same as --ring 0)\n"                                    \
	"  --phase NAME        make every call of the Python function NAME (or module:qualname) a\n"     \
	"                      phase; repeatable; 'nvtx:NAME' selects NVTX ranges in reports\n"          \
	"  --retain WHEN       retention walks in a Python job (what holds memory that survives a\n"   \
	"                      phase call, what is live at an OOM): on (default), off, or the most\n"   \
	"                      seconds one walk may take\n"                                             \
	"  --armed             start armed: live set only, until `vramtrace attach PID`\n"              \
	"  --depth N           native frames per stack (default 48; 0: none)\n"                          \
	"  --no-python         no Python frames\n"                                                        \
	"  --no-torch          no PyTorch tensor events (CUDA level only)\n"                             \
	"  --free-stacks       also record a stack for every free\n"                                     \
	"  -q, --quiet         no messages from vramtrace\n"                                             \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace run -- python train.py\n"                                                           \
	"  vramtrace run --phase train -o leak.vrt -- python finetune.py\n"                              \
	"  vramtrace run -o traces/ -- torchrun --nproc_per_node=2 train.py\n"

#define VRT_HELP_REPORT                                                                                \
	"usage: vramtrace report [options] TRACE|DIR...\n"                                              \
	"\n"                                                                                           \
	"Per device and memory kind: the peak and when it happened, what is live at the end (by what\n"\
	"it is, and where a retention walk ran, what holds it), and the sites (stacks) holding the\n"  \
	"most bytes at the end and at the peak. Several files or a directory show every process, by\n"\
	"rank.\n"                                                                                       \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --json        machine-readable output\n"                                                      \
	"  --top N       sites per list (default 10)\n"                                                  \
	"  --frames N    frames shown per site (default 8)\n"                                            \
	"  --until-mark LABEL  stop at the first mark LABEL (vramtrace.mark / vramtrace mark)\n"          \
	"  --width N     cut frame lines to N columns (0: never; default: the terminal's width on a\n"   \
	"                terminal, no limit in a pipe or a file)\n"                                      \
	"  -q, --quiet   no progress or notes on stderr\n"                                               \
	"  --max-memory SIZE  stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace report vramtrace.1234.vrt\n"                                                       \
	"  vramtrace report --json traces/ | jq '.processes[].devices'\n"

#define VRT_HELP_LEAKS                                                                                 \
	"usage: vramtrace leaks [options] TRACE|DIR...\n"                                               \
	"\n"                                                                                           \
	"With a phase (a function given to `run --phase`, an NVTX range, or vramtrace.phase()): one\n" \
	"line per invocation (live at entry, allocated, freed, live at exit, live at the next entry;\n"\
	"the first and last 25 of more), then the allocations made inside an invocation and still\n"   \
	"live when the next one starts, grouped by site, and the growth per invocation (a site whose\n"\
	"survivors each die during the next invocation is \"kept until the next call\": no growth).\n" \
	"Without phases: sites whose bytes keep rising at the low points of total memory, told apart\n"\
	"from caches that level off. Memory that is persistent by design (CUDA context, NCCL,\n"       \
	"workspaces, allocator cache) is labelled, not blamed, unless it grows every call (a new\n"    \
	"communicator or handle per call is blamed like any other site); a workspace whose every\n"   \
	"call's survivors came on a new stream says so (PyTorch keeps a cuBLAS workspace per stream:\n"\
	"a torch.cuda.Stream() made each call adds one).\n"                                          \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --phase NAME   the phase to follow: a function, nvtx:NAME or mark:LABEL (default: the one\n"  \
	"                 whose calls explain the growth; an unknown name is an error)\n"              \
	"  --json         machine-readable output\n"                                                      \
	"  --top N        sites listed (default 10)\n"                                                   \
	"  --frames N     frames shown per site (default 8)\n"                                          \
	"  --fail-on-growth  exit 1 when memory grows from invocation to invocation\n"                    \
	"  --layer L      tensors (PyTorch blocks, the default when present) or cuda (allocations)\n"      \
	"  --until-mark LABEL  treat the first mark LABEL as the end of the trace\n"                     \
	"  --width N      cut frame lines to N columns (0: never; default: the terminal's width on a\n"  \
	"                 terminal, no limit in a pipe or a file)\n"                                     \
	"  -q, --quiet    no progress or notes on stderr\n"                                              \
	"  --max-memory SIZE  stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace leaks --phase train leak.vrt\n"                                                     \
	"  vramtrace leaks --json leak.vrt | jq '.survivors[0]'\n"

#define VRT_HELP_OOM                                                                                   \
	"usage: vramtrace oom [options] TRACE|DIR\n"                                                     \
	"\n"                                                                                           \
	"Explains the last out-of-memory failure in the trace: the request, free and total memory, what\n" \
	"was live by category (parameters, gradients, optimizer state, activations, workspaces,\n" \
	"allocator cache, the step's own tensors, non-PyTorch) with the rule that put each site there,\n" \
	"pinned host memory beside it, what held it (where a retention walk ran at the failure: the\n" \
	"roots its chains start from), the top sites, and the phase it happened in. Then what would\n" \
	"make it fit: for lifting the cap, expandable_segments, max_split_size_mb, empty_cache(),\n" \
	"activation checkpointing, ZeRO-3, offload_param, offload_optimizer and a smaller batch, the\n" \
	"bytes each frees at the failing request, whether that request and every one before it would\n" \
	"then fit, and what decided it (replay: the allocator replayed as in `vramtrace whatif`;\n" \
	"identity: what a retention walk found; rule: the allocating stacks). Given a directory (a\n" \
	"run's traces), it explains the process that ran out of memory.\n"                       \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --json        machine-readable output\n"                                                      \
	"  --top N       sites listed (default 10)\n"                                                    \
	"  --index K     explain the K-th OOM (1 = first) instead of the last\n"                         \
	"  --frames N    frames shown per site (default 6)\n"                                            \
	"  --until-mark LABEL  explain an OOM before the first mark LABEL only\n"                        \
	"  --width N     cut frame lines to N columns (0: never; default: the terminal's width on a\n"   \
	"                terminal, no limit in a pipe or a file)\n"                                      \
	"  -q, --quiet   no progress or notes on stderr\n"                                               \
	"  --max-memory SIZE  stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace oom crash.vrt\n"

#define VRT_HELP_TIMELINE                                                                              \
	"usage: vramtrace timeline [options] TRACE|DIR\n"                                          \
	"\n"                                                                                           \
	"Live bytes over time per device and kind: a compact chart in the terminal, or CSV.\n"         \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --csv            one row per time bucket: time_s, then one column per device/kind\n"          \
	"  --buckets N      time buckets (default: the terminal width, 100 for CSV)\n"                   \
	"  --from S --to S  a time range in seconds\n"                                                   \
	"  --until-mark LABEL  end the chart at the first mark LABEL\n"                                 \
	"  --width N        the chart's columns (default: the terminal's width, 100 in a pipe; 0: 100)\n" \
	"  -q, --quiet      no progress or notes on stderr\n"                                           \
	"  --max-memory SIZE  stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace timeline run.vrt\n"                                                                 \
	"  vramtrace timeline --csv --buckets 1000 run.vrt > memory.csv\n"

#define VRT_HELP_HTML                                                                                  \
	"usage: vramtrace html [options] TRACE|DIR -o REPORT.html\n"                               \
	"\n"                                                                                           \
	"One self-contained HTML file (no network needed): a stacked timeline of live memory by top\n"  \
	"site with phases marked and zoom, a flame graph of live memory at the peak or at any clicked\n" \
	"time, for PyTorch traces the allocator's segments and fragmentation over time (reserved,\n"    \
	"allocated, the largest free block) and the 64 largest tensors' lives, and the leaks and OOM\n" \
	"sections. Data is aggregated before writing, so the file stays small for any trace length.\n"  \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  -o, --output PATH  output file (required; - for standard output)\n"                         \
	"  --sites N    sites drawn as their own band (default 12)\n"                                    \
	"  --buckets N  time buckets (default 600)\n"                                                    \
	"  --until-mark LABEL  every section ends at the first mark LABEL, as if the trace ended there\n" \
	"  -q, --quiet  no progress or notes on stderr\n"                                                \
	"  --max-memory SIZE  stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace html run.vrt -o run.html\n"

#define VRT_HELP_EXPORT                                                                                \
	"usage: vramtrace export --format FORMAT [options] TRACE|DIR -o FILE\n"                    \
	"\n"                                                                                           \
	"formats:\n"                                                                                   \
	"  memory-viz   PyTorch memory snapshot (pickle) for pytorch.org/memory_viz\n"                   \
	"  chrome       Chrome/Perfetto trace JSON: the process by command line and rank, its threads\n" \
	"               by name, counter tracks per device and kind, phases, marks, OOMs, and each\n"    \
	"               allocation (tensor, or CUDA allocation) with its size, site and stack\n"          \
	"  folded       folded stacks of bytes live at the end (flamegraph.pl, speedscope)\n"            \
	"  folded-peak  folded stacks of bytes live at the peak\n"                                       \
	"  parquet      tables (events, stacks, frames, phases, survivors) in the directory -o names,\n"   \
	"               for one trace or a directory of per-rank traces; needs pyarrow (docs/python.md)\n"  \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  -f, --format FORMAT  one of the formats above\n"                                             \
	"  -o, --output FILE    the file written (a directory for parquet); - for standard output\n"  \
	"  --max-events N       memory-viz: at most N events in its device traces (default 2000000);\n" \
	"                       chrome: the first N allocations get an event with their stack\n"        \
	"                       (default 100000; the counters hold every allocation)\n"                  \
	"  --points N           chrome: the counters' time resolution, the trace's span in at least N\n" \
	"                       steps (default 20000); a point is written where a value changes\n"      \
	"  --until-mark LABEL   end the export at the first mark LABEL, as if the trace ended there\n"  \
	"  --max-memory SIZE    stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"  -q, --quiet          no progress or notes on stderr\n"                                       \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace export --format chrome run.vrt -o run.json\n"                                       \
	"  vramtrace export --format folded run.vrt -o run.folded && flamegraph.pl run.folded > f.svg\n" \
	"  vramtrace export --format parquet ranks/ -o tables/\n"

#define VRT_HELP_DIFF                                                                                  \
	"usage: vramtrace diff [options] A.vrt B.vrt\n"                                                  \
	"       vramtrace diff [options] TRACE --at S1 --at S2\n"                                        \
	"\n"                                                                                           \
	"Bytes live by site in A (or at time S1) against B (or at S2), largest change first. By\n"     \
	"category (--by category): parameters, gradients, optimizer state, activations... in each\n"   \
	"trace at its out-of-memory error, else at its peak (or at --at), so that what a change (a\n" \
	"larger batch) grew reads off directly.\n"                                                     \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --by WHAT  site (the default) or category\n"                                                \
	"  --at S     a time in seconds (twice, for one trace); default: the end of each trace (by\n"  \
	"             category: its OOM, else its peak)\n"                                            \
	"  --json     machine-readable output\n"                                                         \
	"  --top N    sites listed (default 10)\n"                                                        \
	"  --until-mark LABEL  each trace ends at its first mark LABEL (both must have one)\n"          \
	"  --width N  cut site lines to N columns (0: never; default: the terminal's width on a\n"      \
	"             terminal, no limit in a pipe or a file)\n"                                        \
	"  -q, --quiet  no progress or notes on stderr\n"                                               \
	"  --max-memory SIZE  stop (exit 6) before using more memory (default: half of the machine's)\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace diff before.vrt after.vrt\n"                                                       \
	"  vramtrace diff run.vrt --at 10 --at 600\n"                                                    \
	"  vramtrace diff --by category batch8.vrt batch16.vrt\n"

#define VRT_HELP_WHATIF                                                                                \
	"usage: vramtrace whatif [options] TRACE\n"                                                      \
	"\n"                                                                                           \
	"Replays the trace's tensor requests and frees (size, stream, device, order) through a model\n" \
	"of PyTorch 2.11's CUDA caching allocator: the peak reserved and allocated memory a setting\n"  \
	"would reach, how much of the reserved memory would sit unallocated at the peak and the\n"      \
	"largest free block then, and under a limit the first request that would fail, with its\n"     \
	"stack. Memory outside the allocator (CUDA context, NCCL, libraries) stays as recorded; the\n"  \
	"program's own empty_cache() calls happen where they happened. Under the recorded setting it\n" \
	"also checks itself: every cudaMalloc and cudaFree (or map and unmap) of the allocator at the\n" \
	"same request as recorded.\n"                                                                  \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --alloc-conf STR       a PYTORCH_ALLOC_CONF setting (default: the recorded one), e.g.\n"    \
	"                         expandable_segments:True or max_split_size_mb:512\n"                  \
	"  --allocator-limit SIZE bytes the allocator may reserve, as set_per_process_memory_fraction\n" \
	"                         sets them (a byte count or 4.9G; default: the trace's own limit)\n"   \
	"  --device-memory SIZE   a device of that size (default: the recorded device)\n"              \
	"  --json                 machine-readable output\n"                                            \
	"  --until-mark LABEL     replay the requests before the first mark LABEL only\n"              \
	"  --width N              cut frame lines to N columns (0: never; default: the terminal's\n"     \
	"                         width on a terminal, no limit in a pipe or a file)\n"                  \
	"  -q, --quiet            no notes on stderr\n"                                                 \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace whatif run.vrt\n"                                                                 \
	"  vramtrace whatif --alloc-conf expandable_segments:True --allocator-limit 4.9G run.vrt\n"     \
	"  vramtrace whatif --json --alloc-conf max_split_size_mb:512 crash.vrt | jq .fails_at\n"

#define VRT_HELP_DUMP                                                                                  \
	"usage: vramtrace dump [--stacks] [--tables] [--json] [--until-mark LABEL] [-q] TRACE|DIR\n" \
	"\n"                                                                                           \
	"Prints the header, then every record: time (s), thread, operation, API, device, kind,\n"      \
	"address, size and stack id. --stacks adds each event's frames; --tables the definitions\n"   \
	"(modules with their build-ids, threads). --until-mark LABEL stops before the first mark\n"  \
	"LABEL; --json writes one JSON object per line.\n"                                            \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace dump run.vrt | grep oom\n"                                                         \
	"  vramtrace dump --stacks run.vrt | less\n"

#define VRT_HELP_INFO                                                                                  \
	"usage: vramtrace info [--json] [-q] [--max-memory SIZE] TRACE|DIR\n"                      \
	"\n"                                                                                           \
	"The process (pid, rank, command line, host), how it ended (exit, signal, killed), the trace\n" \
	"layout (ring or keep-all, chunks, lost events) and the table sizes.\n"                         \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace info crash.vrt\n"                                                                  \
	"  vramtrace info --json run.vrt | jq .end_reason\n"

#define VRT_HELP_RECOVER                                                                               \
	"usage: vramtrace recover [-q] TRACE\n"                                                           \
	"\n"                                                                                           \
	"A process killed while tracing (SIGKILL, the OOM killer) leaves TRACE.rings beside its trace:\n" \
	"its threads' event buffers, which the trace had not received yet. recover appends those\n"    \
	"events to TRACE (in time order, with their stacks) and removes the sidecar; `vramtrace run`\n" \
	"does this by itself when its command was killed, and records the signal. Stacks whose native\n" \
	"frames were first seen after the last write show addresses, not names; a Python frame the\n" \
	"trace never described shows as a labelled frame.\n"                                           \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace recover vramtrace.4242.vrt\n"

#define VRT_HELP_ATTACH                                                                                \
	"usage: vramtrace attach [--stop|--armed] [-o PATH] PID\n"                                       \
	"\n"                                                                                           \
	"Starts full tracing in a running process of yours. A process started with `vramtrace run\n"   \
	"--armed` (or with the preload) switches at once over its control socket, keeping its exact\n"  \
	"live set: what it allocated before is reported with its sizes, labelled as allocated before\n" \
	"tracing started. A process started without vramtrace gets libvramtrace.so injected with\n"    \
	"ptrace (x86-64 only; same user; kernel.yama.ptrace_scope must allow it, vramtrace never uses\n" \
	"sudo): one thread waiting in a system call runs dlopen, then is put back exactly as it was.\n" \
	"Calls through the program's own pointers (GOT slots, PyTorch's driver table) are hooked from\n" \
	"then on; a function it looked up itself before (dlsym, ctypes, a static runtime) is not\n"    \
	"(`vramtrace watch` shows what grows through it: the driver's count against the trace's).\n"  \
	"What a Python job's PyTorch held before is taken from its own snapshot (segments,\n"         \
	"and tensors while the tensor layer is on), labelled as allocated before the attach; the rest\n" \
	"of the memory in use then is one unattributed total per device (the CUDA context, libraries\n" \
	"outside PyTorch). Stop it with --stop: the trace is closed, the hooked call sites are\n"     \
	"restored, and the process keeps running.\n"                                                   \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --stop       stop tracing and close the trace; the process keeps running (a process is\n"    \
	"               traced into one file: it cannot be attached again after --stop)\n"             \
	"  --armed      go back to armed (live set only, nothing written)\n"                             \
	"  -o PATH      the trace file, for a process whose trace is not open yet (default for an\n"    \
	"               injected process: ./vramtrace.<pid>.vrt); relative to this directory\n"        \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace attach 4242 && vramtrace mark 4242 epoch-2 && vramtrace attach --stop 4242\n"      \
	"  vramtrace run --armed -o job.vrt -- python train.py &   # later: vramtrace attach PID\n"

#define VRT_HELP_MARK                                                                                  \
	"usage: vramtrace mark PID LABEL\n"                                                              \
	"\n"                                                                                           \
	"Records a labelled mark in a running process's trace, from outside; the process must be\n"   \
	"tracing (`vramtrace attach PID` first). `leaks --phase mark:LABEL` treats the time between\n" \
	"successive marks with that label as invocations.\n"                                           \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace mark 4242 epoch-start\n"                                                          \
	"  vramtrace leaks --phase mark:epoch-start vramtrace.4242.vrt\n"

#define VRT_HELP_SNAPSHOT                                                                              \
	"usage: vramtrace snapshot PID -o FILE\n"                                                        \
	"\n"                                                                                           \
	"Writes the running process's live set and retained history to FILE now (a new file, mode\n"  \
	"0600; a relative FILE is taken from this directory). The process keeps running and tracing.\n" \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace snapshot 4242 -o now.vrt && vramtrace report now.vrt\n"

#define VRT_HELP_WATCH                                                                                 \
	"usage: vramtrace watch [options] PID\n"                                                         \
	"\n"                                                                                           \
	"The sites that grow in a running process (traced; an armed one once `vramtrace attach` has\n"    \
	"started tracing it), every few seconds, without stopping it: each look takes its live set with\n" \
	"stacks (a snapshot without a retention walk, into a private temporary directory, deleted once\n" \
	"read), and the sites are compared with the first look (growth so far) and the one before (the\n" \
	"rate now). Sites are named by the user's code that allocated them; tensors where PyTorch's\n"    \
	"allocator is seen.\n"                                                                            \
	"\n"                                                                                           \
	"Where the NVIDIA driver's NVML is there (libnvidia-ml.so.1), each look also shows what the\n"    \
	"driver counts for the process, and how much of its growth the trace did not see: in an\n"     \
	"attached process, allocations through a CUDA function it looked up before the attach\n"      \
	"(dlsym, ctypes, a static runtime, NCCL), or the driver's own (modules loaded lazily). In a\n"   \
	"container whose driver lists the host's process ids there is no figure, and watch says so.\n" \
	"\n"                                                                                           \
	"options:\n"                                                                                   \
	"  --interval S   seconds between looks (default 5)\n"                                          \
	"  --top N        sites listed per look (default 5)\n"                                          \
	"  --count N      stop after N looks (default: until Ctrl-C or the process exits)\n"           \
	"  --json         one JSON object per look\n"                                                   \
	"\n"                                                                                           \
	"examples:\n"                                                                                  \
	"  vramtrace attach 4242 && vramtrace watch 4242\n"                                             \
	"  vramtrace watch --interval 1 --count 10 --json 4242 > growth.ndjson\n"

#endif /* VRAMTRACE_COMMANDS_H */
