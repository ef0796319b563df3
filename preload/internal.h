/* SPDX-License-Identifier: MIT */
/*
 * Private to libvramtrace.so; the analyzer never includes this.
 *
 * Threads and ownership:
 *  - Hooks run on the application's threads. They only copy a fixed-size event (plus, on a stack
 *    cache miss, its raw frames) into the calling thread's own buffer (struct vrt_tbuf). No lock,
 *    no I/O, no allocation on that path.
 *  - One collector thread (collector.c) owns everything else: it drains the buffers, keeps the
 *    live set, interns stacks, symbolizes, encodes, compresses and writes the trace file, and
 *    serves the control socket. Structures it owns are touched by no other thread.
 *  - Python frame tables (python.c) are written only by threads holding the GIL, which
 *    serializes them; the collector reads their published prefix.
 */
#ifndef VRAMTRACE_PRELOAD_INTERNAL_H
#define VRAMTRACE_PRELOAD_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vramtrace/format.h"
#include "vramtrace/options.h"

#define VRT_EXPORT __attribute__((visibility("default")))
#define VRT_TLS __attribute__((tls_model("initial-exec")))
#define VRT_LIKELY(x) __builtin_expect(!!(x), 1)
#define VRT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define VRT_PASS ((void *)-1) /* dlsym filter: "not ours, let the real dlsym answer" */

/* ---- lifecycle (lifecycle.c) ------------------------------------------------------------ */

enum vrt_state {
	VRT_STATE_UNINIT = 0, /* constructor has not run */
	VRT_STATE_READY,      /* hooks record */
	VRT_STATE_FINISHING,  /* exit in progress: hooks pass through */
	VRT_STATE_DISABLED,   /* internal error or VRAMTRACE_MODE=off: hooks pass through */
};

extern _Atomic int vrt_state;
extern _Atomic int vrt_mode; /* enum vrt_mode */

extern pid_t vrt_pid;                      /* the traced process (a vfork child is not it) */

void vrt_disable(const char *why);          /* one stderr line, then pass-through forever */
bool vrt_start_early(void);                 /* a hook before our constructor: start now; READY? */
void vrt_log(const char *fmt, ...);         /* "vramtrace: ..." on stderr unless quiet */
uint64_t vrt_now_ns(void);                  /* CLOCK_MONOTONIC */
bool vrt_addr_is_ours(const void *addr);    /* inside libvramtrace.so's own text */
const char *vrt_self_path(void);            /* path of libvramtrace.so */
void vrt_locate_self(void);                 /* finds the two above, once, at start */

/*
 * Fork safety (lifecycle.c). A forked child inherits every lock as it was, held by threads that
 * do not exist there: glibc does not reset dl_iterate_phdr's lock, libunwind has its own, and
 * python.c's intern_lock is a spinlock. Code that may hold one runs inside a fork section. The
 * pthread_atfork prepare handler raises vrt_forking, then waits until every section is left
 * (bounded: a fork is never held up for more than VRT_FORK_WAIT_NS); an application thread that
 * sees the flag skips its section (the event goes without a stack), the collector waits for the
 * fork to pass (vrt_fork_park).
 *
 * Dekker: the thread stores its mark, then loads the flag; the forking thread stores the flag,
 * then loads the marks, with a full barrier between each store and load, so one of them sees
 * the other's store. The forking side pays for both where it can (vrt_fork_fence_heavy: the
 * membarrier system call makes every running thread of the process pass a full barrier), and an
 * application thread's section then costs plain stores and a compiler barrier; without
 * membarrier both sides use seq_cst.
 */
#define VRT_FORK_WAIT_NS 2000000000ull

extern _Atomic int vrt_forking; /* forks being prepared in this process */
/* membarrier is registered for this process: the fork side fences for both (set before any
 * hook records, and in a forked child before it has a second thread). */
extern bool vrt_fork_fence_light;
bool vrt_fork_fence_init(void);   /* registers; false: seq_cst on both sides */
void vrt_fork_fence_heavy(void);  /* the forking side, after raising vrt_forking */

/* An application thread's section: false if a fork is being prepared (skip the section). */
static inline bool vrt_fork_section_enter(_Atomic int *mark)
{
	if (VRT_LIKELY(vrt_fork_fence_light)) {
		atomic_store_explicit(mark, 1, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		atomic_store_explicit(mark, 1, memory_order_seq_cst);
	}
	if (VRT_LIKELY(!atomic_load_explicit(&vrt_forking, memory_order_seq_cst)))
		return true;
	atomic_store_explicit(mark, 0, memory_order_release);
	return false;
}

static inline void vrt_fork_section_leave(_Atomic int *mark) { atomic_store_explicit(mark, 0, memory_order_release); }

/* The collector's section: waits while a fork is being prepared, then enters. */
void vrt_fork_park(_Atomic int *mark);
/* Waits until *mark is 0; false if deadline (CLOCK_MONOTONIC ns) passed first. */
bool vrt_fork_wait_clear(_Atomic int *mark, uint64_t deadline_ns);

/* ---- configuration (config.c) ----------------------------------------------------------- */

struct vrt_config {
	char output[4096];
	int mode;
	uint64_t ring_bytes;
	int stack_depth;
	bool python;
	int python_depth;
	bool fast_unwind;
	bool free_stacks;
	int flush_ms;
	int ts_unit_ns;
	uint64_t thread_buffer;
	int rings;            /* slots in the rings sidecar (trace_output.c); 0: none */
	int full_wait_ms; /* tbuf.c: how long a full buffer's thread waits for progress */
	char phase[1024];
	bool nvtx;
	bool torch;
	bool control;
	bool follow_fork;
	bool quiet;
	bool output_unusable; /* VRAMTRACE_OUTPUT was given but cannot be taken: do not trace */
	bool terminal_utf8;   /* the locale the environment names is UTF-8: vrt_log passes UTF-8 */
};

extern struct vrt_config vrt_cfg;
/* Parses environ; bad values get a warning and the default. Never fails. */
void vrt_config_load(struct vrt_config *cfg);
/* Whether the last load said something about a setting (and no parent process had). */
bool vrt_config_warned(void);

/* ---- per-thread event buffers (tbuf.c) --------------------------------------------------- */

enum vrt_raw_flags {
	VRT_RAW_HAS_FRAMES = 1u << 0, /* frames follow; stack_id is 0 */
	VRT_RAW_LABEL = 1u << 1,      /* label bytes follow (MARK / PHASE) */
};

/*
 * What a hook publishes. Variable length: the header, then n_native u64 return addresses and
 * n_python u32 Python frame ids (or a label), padded to 8 bytes. len includes everything.
 */
struct vrt_raw {
	uint16_t len;
	uint8_t op;       /* enum vrt_op */
	uint8_t kind;     /* enum vrt_mem_kind */
	uint16_t api;     /* enum vrt_api */
	int16_t device;
	uint8_t n_native;
	uint8_t n_python;
	uint16_t flags;   /* enum vrt_raw_flags */
	int32_t result;
	uint32_t stack_id; /* cache hit: the interned stack; 0 = none or frames follow */
	uint64_t ts_ns;
	uint64_t addr;
	uint64_t size;
	uint64_t aux;
	uint64_t aux2;
	uint64_t stream;
	uint64_t stack_hash; /* for the collector to fill the thread's stack cache */
};
_Static_assert(sizeof(struct vrt_raw) == 80, "raw event header is 80 bytes");

#define VRT_STACK_CACHE_SLOTS 1024u

/* hash -> stack id, written by the collector, read by the owning thread (seqlock on hash). */
struct vrt_stack_cache_entry {
	_Atomic uint64_t hash;
	_Atomic uint32_t id;
	uint32_t pad;
};

/* One event as a hook reports it (event.c turns it into a vrt_raw). */
struct vrt_event {
	uint8_t op;
	uint8_t kind;
	uint16_t api;
	int16_t device;
	int32_t result;
	uint64_t ts_ns;
	uint64_t addr;
	uint64_t size;
	uint64_t aux;
	uint64_t aux2;
	uint64_t stream;
};

struct vrt_tbuf {
	_Atomic uint64_t head; /* bytes published by the owning thread */
	_Atomic int in_section; /* owner inside a fork section (stack capture, PyTorch probe) */
	uint8_t pad0[52];
	/* Bytes durable in the trace: the producer's free space ends here. The collector moves it
	 * only once the chunk holding those events is written (issue 22, item 6), so that a killed
	 * process's unwritten events are still in the ring (a rings sidecar's slot) for recovery. */
	_Atomic uint64_t tail;
	uint64_t pending_tail; /* tail once the EVENTS chunk numbered >= pending_seq is in the file */
	uint64_t pending_seq;  /* 0: none (include/vramtrace/rings.h) */
	uint8_t pad1[40];
	struct vrt_tbuf *next; /* registry list, see tbuf.c */
	uint8_t *data;
	uint64_t capacity;     /* power of two */
	uint32_t index;        /* thread index in the trace */
	pid_t tid;
	_Atomic int dead;      /* owning thread exited; collector reclaims after draining */
	uint32_t lost;         /* events dropped, not yet reported (owner only) */
	bool gave_up;          /* a wait for room ran out at gave_up_tail (owner only, tbuf.c) */
	uint64_t gave_up_tail;
	/* Side buffers (enum vrt_busy, "Signal handlers"): the thread's own buffer links the first,
	 * each the next; same index and tid. Owner only, but for the collector's registry walk. */
	_Atomic(struct vrt_tbuf *) side;
	bool side_buffer;      /* this is one */
	volatile bool writing; /* a side buffer mid-write by one of its thread's levels */
	uint64_t read_pos;     /* collector only: processed up to here (>= tail) */
	int32_t slot;          /* its slot in the rings sidecar, or -1: anonymous memory */
	uint64_t name_checked_ns; /* collector only */
	uint32_t name_id;      /* collector only */
	/* Owner only (stacks.c): the memos of its last native and Python walks (one mapping, made
	 * at its first stack), and the native part of the hash of the walk its memo holds (0: none). */
	struct vrt_unwind_memo *unwind_memo;
	struct vrt_python_memo *python_memo;
	bool no_memo;
	uint64_t native_hash;
	int native_first;
	struct vrt_stack_cache_entry cache[VRT_STACK_CACHE_SLOTS];
};

/* The calling thread's buffer, registering it on first use; NULL if that failed (the event
 * that wanted it is counted in vrt_tbuf_unbuffered, reported lost by the collector). */
struct vrt_tbuf *vrt_tbuf_self(void);
extern _Atomic uint64_t vrt_tbuf_unbuffered;
/* The smallest capacity a buffer was given when VRAMTRACE_THREAD_BUFFER could not be mapped. */
extern _Atomic uint64_t vrt_tbuf_smallest;
/* The side buffer after `after` in its thread's chain, created (see enum vrt_busy). */
struct vrt_tbuf *vrt_tbuf_add_side(struct vrt_tbuf *after);
struct vrt_raw *vrt_tbuf_reserve_slow(struct vrt_tbuf *b, size_t len);
/* Wakes the collector now (buffer filling up, OOM, exit). */
void vrt_collector_wake(void);

/* Reserves len bytes (multiple of 8) for one record; NULL if full (the event is counted lost).
 * Inline: the common case, room before the ring's end (tbuf.c has the rest). */
static inline struct vrt_raw *vrt_tbuf_reserve(struct vrt_tbuf *b, size_t len)
{
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&b->tail, memory_order_acquire);
	uint64_t pos = head & (b->capacity - 1);
	if (VRT_LIKELY(len <= b->capacity / 4 && len <= b->capacity - pos && b->capacity - (head - tail) >= len))
		return (struct vrt_raw *)(b->data + pos);
	return vrt_tbuf_reserve_slow(b, len);
}

/* Publishes the record reserved last; wakes the collector once, when the ring crosses half full. */
static inline void vrt_tbuf_publish(struct vrt_tbuf *b, struct vrt_raw *r)
{
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	uint64_t used = head - atomic_load_explicit(&b->tail, memory_order_relaxed);
	atomic_store_explicit(&b->head, head + r->len, memory_order_release);
	if (VRT_UNLIKELY(used < b->capacity / 2 && used + r->len >= b->capacity / 2))
		vrt_collector_wake();
}
/* Collector side. */
struct vrt_tbuf *vrt_tbuf_list(void);
/* Durability (issue 22, item 6): before an EVENTS chunk numbered >= seq is written, every
 * buffer notes what it will make durable; after the write, its tail moves there. commit_all
 * makes everything processed durable at once (nothing processed is left unwritten). */
void vrt_tbuf_mark_pending(uint64_t seq);
void vrt_tbuf_commit_pending(void);
void vrt_tbuf_commit_all(void);
/* The rings sidecar (trace_output.c makes it; NULL hdr: none, buffers are anonymous). */
struct vrt_rings_header;
void vrt_tbuf_use_rings(int fd, struct vrt_rings_header *hdr);
void vrt_tbuf_drop_rings(void);
size_t vrt_tbuf_slot_header(void);
void vrt_tbuf_reclaim_dead(void);
void vrt_tbuf_after_fork_child(void);
void vrt_tbuf_init(void);
/* Fork prepare: waits until no other thread is inside a fork section; false on timeout. */
bool vrt_tbuf_wait_sections(uint64_t deadline_ns);

/* ---- hook helpers (event.c) ------------------------------------------------------------- */

/*
 * What a thread is doing inside vramtrace (vrt_tls.busy) decides what a hook entered meanwhile
 * does. A hook is entered again only by a nested call of the real function it wraps or by a
 * signal handler that interrupted the thread. The state of the innermost hook:
 *  - SELF: vramtrace's own work (collector, attach, probes): hooks pass straight through.
 *  - HOOK: a driver hook or API call, around its real call: driver hooks pass through
 *    (libcuda's own calls), runtime hooks record (only a signal handler gets there).
 *  - RUNTIME: a runtime hook, around its real call: driver hooks pass through (the runtime's
 *    own driver calls); runtime hooks record, since libcudart binds its own symbols
 *    (DT_SYMBOLIC, no relocations against them): only a signal handler gets there.
 * and two flags:
 *  - EMITTING: vramtrace code that calls no CUDA and may not be re-entered is running (the
 *    thread's buffer may be mid-write, libunwind or the PyTorch probe may hold a lock): every
 *    hook entered is a signal handler's.
 *  - DEFERRING: some interrupted level is EMITTING: this level records into a side buffer.
 *
 * Signal handlers, lossless by construction. A hook entered by a handler saves the state it
 * interrupted in its own frame (the token vrt_enter returns, restored by vrt_leave), so
 * handlers nest to any depth. Invariant: a buffer is written by at most one level of its
 * thread at a time, and a level reserves space in a buffer only after marking it (EMITTING
 * for the thread's buffer, `writing` for a side buffer) and releases the mark only after
 * publishing; a handler runs to completion before the level it interrupted resumes. So a
 * handler that finds a buffer unmarked may write it whole, even if the interrupted level is
 * about to mark it (that level reserves after the handler published); one that finds it marked
 * takes the first unmarked side buffer of the chain (creating it: mmap is async-signal-safe),
 * writes its event there without a stack (libunwind is not re-entrant) and publishes it before
 * returning, hence before its pointer can reach another thread. Each buffer stays
 * single-producer in time; the collector merges them by timestamp like any thread's. An event
 * is lost only where any event is: a buffer the collector lets stay full, or no memory for a
 * side buffer; both are counted (LOST records).
 */
enum vrt_busy {
	VRT_BUSY_NO = 0,
	VRT_BUSY_SELF = 1,
	VRT_BUSY_HOOK = 2,
	VRT_BUSY_RUNTIME = 3,
	VRT_BUSY_STATE = 3, /* mask */
	VRT_BUSY_EMITTING = 4,
	VRT_BUSY_DEFERRING = 8,
};

/* Per-thread state; initial-exec TLS, kept small for late dlopen (attach). */
struct vrt_tls {
	int busy;                /* enum vrt_busy: a state and flags */
	int phase_depth;
	struct vrt_tbuf *buf;
	uint32_t nested;         /* hooks entered by signal handlers, still running */
	bool no_buffer;          /* this thread's buffer could not be mapped */
	_Atomic uint32_t missed; /* events that found no buffer (no memory), not yet counted lost */
	void *real;              /* the real function of the innermost hook under way (hooks.h) */
};
extern __thread struct vrt_tls vrt_tls VRT_TLS;

/* Fail-closed guards: nonzero when this call may record, and then pass it to vrt_leave (it
 * holds the state to restore). Driver hooks and API calls use vrt_enter, runtime hooks
 * vrt_enter_runtime. */
int vrt_enter(void);
int vrt_enter_runtime(void);
void vrt_leave(int token);

/* Brackets code that must not be re-entered by a signal handler's hook (EMITTING, see enum
 * vrt_busy): begin returns the state that end restores. */
int vrt_emitting_begin(void);
void vrt_emitting_end(int busy);
/* Publishes ev with the caller's stack (if with_stack and the mode records stacks). Returns the
 * time it was stamped with: ev's own, or the clock read right before it was written, as late as
 * can be so that a drain meets the events of all threads in the order of their times (0: not
 * published). */
uint64_t vrt_emit(const struct vrt_event *ev, bool with_stack);
/* Publishes a MARK / PHASE_ENTER / PHASE_EXIT with its label. */
void vrt_emit_label(uint8_t op, const char *label);
/* Publishes ev (no stack) with a text payload of at most VRT_TEXT_MAX bytes. */
#define VRT_TEXT_MAX 4000u
void vrt_emit_text(const struct vrt_event *ev, const char *text, size_t len);
/* From a thread's first event, before it is written: in full mode, asks the collector to make
 * the trace file now (issue 22, item 6) and waits for it, at most 5 s; returns at once once
 * asked and answered, in armed mode, from a signal handler's hook or without a collector. */
void vrt_collector_want_file(void);
/* Whether this process's trace has begun: its file is open, or an event asked for it. */
bool vrt_collector_trace_begun(void);
/* Whether a collector thread is there to drain the buffers (a full one is worth waiting for). */
bool vrt_collector_alive(void);

/* ---- stacks (stacks.c) ------------------------------------------------------------------ */

#define VRT_MAX_NATIVE 128
#define VRT_MAX_PYTHON 256

/* A Python frame as a walk reads it, before interning; code NULL marks an eval boundary. */
struct vrt_pyraw {
	void *code;
	int32_t lasti;
};

struct vrt_capture {
	int n_native;  /* native[native_first .. native_first + n_native) */
	int native_first;
	int n_pyraw;
	int n_python; /* interned: set by vrt_stack_intern_python */
	uint64_t native[VRT_MAX_NATIVE + 8];
	struct vrt_pyraw pyraw[VRT_MAX_PYTHON];
	uint32_t python[VRT_MAX_PYTHON];
	uint64_t hash;
};

void vrt_stacks_init(void);
/* Unmaps a dead thread's buffer's memos (tbuf.c, the collector). */
void vrt_stack_memos_release(struct vrt_tbuf *b);
/* The calling thread's native and Python frames, and the stack's hash; Python frames not yet
 * interned (n_python 0). Only with native or Python stacks on (emit_into asks). */
void vrt_stack_capture(struct vrt_capture *c);
/* Interns the capture's Python frames (for publishing them); false if a fork is being prepared
 * (then none are, and the hash must not name the stack published). */
bool vrt_stack_intern_python(struct vrt_capture *c);
uint32_t vrt_stack_cache_lookup(struct vrt_tbuf *b, uint64_t hash);
void vrt_stack_cache_fill(struct vrt_tbuf *b, uint64_t hash, uint32_t id);
uint64_t vrt_hash_frames(const uint64_t *native, int n_native, const uint32_t *python, int n_python);

/* ---- Python (python.c) ------------------------------------------------------------------ */

struct vrt_pycode {
	const char *filename;
	const char *qualname;
	uint32_t firstlineno;
};

struct vrt_pyframe {
	uint32_t code; /* index into the code table */
	int32_t lasti;
	int32_t line;
};

/* In a capture, marks the end of the frames one _PyEval_EvalFrameDefault call ran. */
#define VRT_PY_EVAL_BOUNDARY 0xffffffffu

void vrt_python_init(void);
/* Walks the calling thread's own Python stack (innermost first), GIL or not, into raw (at most
 * max), adding each frame's key to hash (stack_hash.h). memo: the thread's last walk, which
 * this one follows where it can and replaces (zeroed memory of vrt_python_memo_size() bytes is
 * an empty one), or NULL. */
struct vrt_hash_stream;
struct vrt_python_memo;
size_t vrt_python_memo_size(void);
int vrt_python_walk(struct vrt_python_memo *memo, struct vrt_pyraw *raw, struct vrt_hash_stream *hash, int max);
/* Interned frame ids (VRT_PY_EVAL_BOUNDARY at boundaries) of a walk's frames, in a fork
 * section, by the thread that walked them; frames that cannot be interned are left out. */
int vrt_python_frame_ids(const struct vrt_pyraw *raw, int n, uint32_t *ids);
/* Both at once (phase entries). */
int vrt_python_capture(uint32_t *out, int max);
/* Published tables: the collector reads entries [0, count). */
uint32_t vrt_python_code_count(void);
const struct vrt_pycode *vrt_python_code(uint32_t i);
uint32_t vrt_python_frame_count(void);
const struct vrt_pyframe *vrt_python_frame(uint32_t i);
/* Fork: the prepare handler takes the intern lock (false if it could not by the deadline). */
bool vrt_python_fork_prepare(uint64_t deadline_ns);
void vrt_python_fork_parent(bool locked);
void vrt_python_fork_child(bool locked);

/* ---- lookup paths (lookup.c) ------------------------------------------------------------ */

void *vrt_real_dlsym(void *handle, const char *name);
void vrt_lookup_init(void);
/* The function to hand out for a tracked API given the real one (a trampoline, or real). */
void *vrt_wrap(int api_slot_class, void *real);
/* Real driver helpers resolved through the driver's own cuGetProcAddress. */
void *vrt_driver_fn(const char *name, int version);

/* ---- hooks (hooks_runtime.c, hooks_driver.c) -------------------------------------------- */

int vrt_current_device_runtime(void);
int vrt_current_device_driver(void);
void vrt_record_oom(uint16_t api, int result, uint64_t size, int device, int with_driver_info);

/* ---- collector (collector.c) ------------------------------------------------------------ */

int vrt_collector_start(void);
void vrt_collector_stop(int end_reason, int end_detail);
/* Fork prepare: waits until the collector is parked outside its fork sections. */
bool vrt_collector_wait_parked(uint64_t deadline_ns);
/* Forgets the parent's collector; the child's starts at its first event (see tbuf.c). */
void vrt_collector_after_fork_child(void);
void vrt_collector_start_pending(void);
/* The collector's fork section (internal.h, "Fork safety"); nests. Collector thread only. */
void vrt_collector_section_enter(void);
void vrt_collector_section_leave(void);
/* exec and _exit: finishes the trace with this end before the real call (bounded wait); true if
 * the collector was told to (it may still be finishing after the wait): after an exec that
 * returns, vrt_collector_reopen_after_exec must follow. */
bool vrt_collector_close_now(int end_reason, int end_detail);
void vrt_collector_reopen_after_exec(void);
/* Flush and finish the trace from a fatal-signal handler (bounded wait). */
void vrt_collector_crash_flush(int signo);


/* ---- symbols (symbols.c), collector only ------------------------------------------------ */

struct vrt_symbol {
	uint32_t module_id;   /* 0: unknown */
	const char *name;     /* NULL: no symbol */
	uint64_t offset;
};

struct vrt_module_info {
	uint32_t id;
	const char *path;
	uint64_t base;
	uint64_t span;
	const uint8_t *build_id;
	uint32_t build_id_len;
};

void vrt_symbols_init(void);
int vrt_symbolize(uint64_t addr, struct vrt_symbol *out);
/* Modules discovered since the last call, for the writer to emit. */
int vrt_symbols_new_modules(const struct vrt_module_info **out, int max);
void vrt_symbols_invalidate(void); /* after dlopen/dlclose */
/* A new trace file (forked child, failed exec): every module is described again. */
void vrt_symbols_forget_reported(void);

/* ---- exec and _exit (hooks_exec.c) ------------------------------------------------------- */

void vrt_exec_hooks_init(void);

/* ---- NVTX, PyTorch, control, phases ----------------------------------------------------- */

void vrt_nvtx_setup_env(void);
/* now_ns: vrt_now_ns() as the caller read it (for an allocation, its event's time). */
void vrt_torch_maybe_attach(uint64_t now_ns);
/* Whether the tracker is attached to PyTorch's allocator: its blocks' frees are seen (torch.c). */
bool vrt_torch_tracking(void);
/* A retention walk asked of the interpreter's main thread (pyreach.c); false: no Python here. */
/* Py_AddPendingCall once the interpreter is up, else NULL: how we ask the main thread to run a
 * function of ours at its next safe point (it needs neither the GIL nor a thread state). */
typedef int (*vrt_add_pending_fn)(int (*fn)(void *), void *arg);
vrt_add_pending_fn vrt_python_add_pending(void);
bool vrt_python_walk_request(int reason, uint64_t *ticket);
bool vrt_python_walk_done(uint64_t ticket);
void vrt_python_walked_for_snapshot(void);
/* An attached interpreter records EXITING when it begins to finalize (pyreach.c). */
void vrt_python_watch_teardown(void);
/* An attached interpreter's main thread publishes what PyTorch's caching allocator holds
 * (torch_seed.c), at its next safe point. */
void vrt_torch_seed_request(void);
struct collector;
/* Collector thread: the unattributed seed of device dev (attach.c) grows or shrinks by delta
 * bytes, as PyTorch's snapshot names (or un-names) what it stood for; ts: what it is stamped. */
void vrt_attach_seed_adjust(struct collector *c, int dev, int64_t delta, uint64_t ts);
/* An INFO record from a thread already inside vramtrace (a hook; api.c). */
void vrt_emit_info(const char *key, const char *value);
/* What api.c kept until the file was made: the facts so far, and a teardown mark from before
 * the trace began (its CLOCK_MONOTONIC time). The collector making the file has them written;
 * from then on they are sent through the buffers. */
struct vrt_kept_writer {
	void (*fact)(void *ctx, const char *key, const char *value);
	void (*exiting)(void *ctx, uint64_t at_ns, int stage);
};
void vrt_info_write_kept(const struct vrt_kept_writer *w, void *ctx);
void vrt_info_after_fork(void);
/* The EXITING record (stage: enum vrt_exiting), from any thread (api.c). */
void vrt_record_exiting(int stage);
void vrt_torch_settle(void);
void vrt_torch_fork_child(void);


#endif /* VRAMTRACE_PRELOAD_INTERNAL_H */
