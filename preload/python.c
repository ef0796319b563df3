/* SPDX-License-Identifier: MIT */
/*
 * Python frames from inside a native hook, for CPython 3.9-3.14 (default GIL builds), without
 * linking libpython. A free-threaded build (3.13t, 3.14t) lays objects out differently: it is
 * recognised by its version string and by the type object's header, and gets native stacks only.
 *
 * The walk reads the interpreter's own frame chain from the thread state with per-version
 * offsets (docs/DESIGN.md, "Python stacks"), because the public API allocates frame objects on
 * 3.11+ and can run the garbage collector inside the hook. The layout is checked once against
 * the interpreter's type objects before it is trusted, and every frame's code object is checked
 * for its type while walking; any mismatch turns Python stacks off with one message.
 *
 * A thread reads only its own frames, found through its own thread state
 * (PyGILState_GetThisThreadState), whether or not it holds the GIL: PyTorch's Python bindings
 * release the GIL around most operators, so the allocations that matter happen without it.
 * The GIL is never taken here (hooks run under locks, like PyTorch's allocator mutex, that a GIL
 * holder may wait for) and no Python API that allocates or touches reference counts is called:
 * while a thread is inside C, nobody else changes its frame chain, and the code objects on it
 * and their name strings are alive. Names are copied at first sight from the string objects'
 * own storage. A code object may die later and another take its address (see "code objects that
 * died" below).
 *
 * The intern tables are shared by all threads and guarded by a spinlock, which a thread takes
 * only to publish a stack its stack cache does not know, and then only when its own small cache
 * of (code, offset) -> frame id misses: once per code location and thread, so allocating threads
 * do not contend in steady state (a known stack is named by its walk alone, see "the walk"). The collector reads only
 * the published prefix [0, count) of the entry arrays, which never move. A fork's prepare
 * handler holds the lock across fork(), so a child never inherits it taken (or half-updated
 * tables).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "stack_hash.h"
#include "vramtrace/utf8.h"

typedef void PyObject;

struct python_api {
	int (*Py_IsInitialized)(void);
	int (*Py_IsFinalizing)(void);
	void *(*ThisThreadState)(void);
	const char *(*Py_GetVersion)(void);
	int (*PyCode_Addr2Line)(PyObject *, int);
	PyObject *PyCode_Type;
	PyObject *PyFrame_Type;
	PyObject *PyType_Type;
};

/* Offsets from each version's own headers (scripts/python_layouts/generate.py, which also checks
 * the two fingerprints below against a running interpreter of that version). */
struct layout {
	int minor;
	int ts_frame;          /* 3.9/3.10: tstate->frame; 3.13+: tstate->current_frame */
	int ts_cframe, cframe_current; /* 3.11/3.12: tstate->cframe->current_frame */
	int f_back, f_code, f_lasti, lasti_scale; /* 3.9/3.10 PyFrameObject */
	int if_code, if_previous, if_instr, if_is_entry, if_owner; /* 3.11+ _PyInterpreterFrame */
	int owner_generator, owner_cstack; /* frame owners: a generator's; a C-stack/shim frame's (3.12+) */
	int code_tag_bits;     /* 3.14: f_executable is a _PyStackRef, a pointer with tag bits */
	int co_filename, co_name, co_qualname, co_firstlineno, co_firsttraceable, co_code_adaptive;
	int frame_type_size;   /* PyFrame_Type.tp_basicsize, a layout fingerprint */
	int str_ascii_size;    /* sizeof(PyASCIIObject): compact ASCII data follows it */
	int str_compact_size;  /* sizeof(PyCompactUnicodeObject): other compact data follows it */
};

#include "python_layout_table.h"

#define TP_BASICSIZE 32
#define TP_DEALLOC 48
#define OB_TYPE 8
#define STR_LENGTH 16
#define STR_STATE 32
#define STR_COMPACT (1u << 5)
#define STR_ASCII (1u << 6)
#define STR_KIND_SHIFT 2 /* the kind: bytes a character, 1, 2 or 4 */

static struct python_api py;
static const struct layout *L;
static _Atomic int py_state; /* 0 not yet, 1 ready, -1 off for good */
static _Atomic uint64_t py_next_try_ns;

#define MAX_CODES (1u << 20)
#define MAX_FRAMES (1u << 22)

struct slot {
	uintptr_t key;
	uint32_t key2;
	uint32_t value;
};

/* What the code index checks beyond a code object's address: its file name and name objects
 * and first line (see "code objects that died"). */
struct code_guard {
	PyObject *filename, *name;
	int firstlineno;
};

struct table {
	struct slot *slots;
	uint32_t mask;
	uint32_t used;
};

/* Per-thread: recent (code object, offset) -> frame id, emptied when a code object dies. */
struct frame_cache_entry {
	PyObject *code;
	int lasti;
	uint32_t id;
};
#define FRAME_CACHE_SLOTS 512u
static __thread struct frame_cache_entry *frame_cache VRT_TLS;
static __thread uint64_t frame_cache_deaths VRT_TLS; /* code_deaths when the cache was last emptied */

static struct vrt_pycode *codes;
static struct code_guard *guards;
static uint64_t *guards_checked; /* code_deaths when the code's guard was last known to name it */
static struct vrt_pyframe *frames;
static _Atomic int intern_lock;
static _Atomic uint32_t n_codes, n_frames;
static struct table code_index, frame_index;
static char *arena;
static size_t arena_left;

#define RD(type, base, off) (*(type *)((char *)(base) + (off)))

/*
 * Code objects that died. A code object's address names it only while it lives: the next one
 * may take it, and with it the addresses of its file name and name strings, which die with it
 * (code made at run time: exec, namedtuple, dataclasses, torch.compile), so not even those tell
 * the two apart. PyCode_Type's tp_dealloc is wrapped to count the deaths, and whatever this
 * file keeps by address holds only while the count stands: a walk reads it once and names each
 * frame by its code object's address alone, the stack hash the thread's stack cache is keyed by
 * takes the count in, the walk memo and the thread's frame cache are dropped when it moved, and
 * a code index entry kept before it moved is checked by its text (intern_code). A thread's own
 * stack holds live code objects only; a death in another thread before this one runs the code
 * born in its place is ordered before it by the GIL's hand-over.
 */
static _Atomic uint64_t code_deaths;
static void (*code_dealloc_next)(PyObject *);

/* Runs for every code object freed, in whatever thread frees it (holding the GIL). */
static void code_dealloc_counting(PyObject *code)
{
	atomic_fetch_add_explicit(&code_deaths, 1, memory_order_relaxed);
	code_dealloc_next(code);
}

/* Wraps PyCode_Type's tp_dealloc once per process (a forked child finds it wrapped); false if
 * it cannot. A pointer store: a code object freed meanwhile runs one or the other, both whole. */
static bool count_code_deaths(void)
{
	void (**slot)(PyObject *) = (void (**)(PyObject *))((char *)py.PyCode_Type + TP_DEALLOC);
	void (*now)(PyObject *) = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (now == code_dealloc_counting)
		return true;
	if (!now)
		return false;
	code_dealloc_next = now;
	return __atomic_compare_exchange_n(slot, &now, code_dealloc_counting, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static void *sym(const char *name) { return vrt_real_dlsym(NULL /* RTLD_DEFAULT */, name); }

static bool resolve_api(void)
{
	*(void **)&py.Py_IsInitialized = sym("Py_IsInitialized");
	*(void **)&py.Py_GetVersion = sym("Py_GetVersion");
	if (!py.Py_IsInitialized || !py.Py_GetVersion)
		return false;
	*(void **)&py.Py_IsFinalizing = sym("Py_IsFinalizing");
	if (!py.Py_IsFinalizing)
		*(void **)&py.Py_IsFinalizing = sym("_Py_IsFinalizing");
	*(void **)&py.ThisThreadState = sym("PyGILState_GetThisThreadState");
	*(void **)&py.PyCode_Addr2Line = sym("PyCode_Addr2Line");
	py.PyCode_Type = sym("PyCode_Type");
	py.PyFrame_Type = sym("PyFrame_Type");
	py.PyType_Type = sym("PyType_Type");
	return py.ThisThreadState && py.PyCode_Addr2Line && py.PyCode_Type && py.PyFrame_Type && py.PyType_Type;
}

/* Finds this interpreter's layout and checks it against the type objects; NULL if unknown. */
static const struct layout *match_layout(char *why, size_t why_len)
{
	const char *version = py.Py_GetVersion();
	if (strncmp(version, "3.", 2)) {
		snprintf(why, why_len, "Python %.20s is not CPython 3", version);
		return NULL;
	}
	int minor = atoi(version + 2);
	/* A free-threaded object header puts ob_type at 24, not 8 (the version string says so too). */
	if (strstr(version, "free-threading") || RD(PyObject *, py.PyCode_Type, OB_TYPE) != py.PyType_Type) {
		snprintf(why, why_len, "Python 3.%d is a free-threaded build, whose frames this build does not read", minor);
		return NULL;
	}
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		const struct layout *l = &layouts[i];
		if (l->minor != minor)
			continue;
		ssize_t frame_size = RD(ssize_t, py.PyFrame_Type, TP_BASICSIZE);
		ssize_t code_size = RD(ssize_t, py.PyCode_Type, TP_BASICSIZE);
		if (frame_size != l->frame_type_size || (l->co_code_adaptive >= 0 && code_size != l->co_code_adaptive)) {
			snprintf(why, why_len, "Python %.10s has an unexpected frame layout (a debug build?)",
				 version);
			return NULL;
		}
		return l;
	}
	snprintf(why, why_len, "Python 3.%d is not supported (3.%d-3.%d are)", minor, layouts[0].minor,
		 layouts[sizeof(layouts) / sizeof(layouts[0]) - 1].minor);
	return NULL;
}

static void *reserve(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static bool table_init(struct table *t, uint32_t n)
{
	t->slots = reserve(sizeof(struct slot) * n);
	t->mask = n - 1;
	t->used = 0;
	return t->slots != NULL;
}

void vrt_python_init(void)
{
	codes = reserve(sizeof(*codes) * MAX_CODES);
	guards = reserve(sizeof(*guards) * MAX_CODES);
	guards_checked = reserve(sizeof(*guards_checked) * MAX_CODES);
	frames = reserve(sizeof(*frames) * MAX_FRAMES);
	if (!codes || !guards || !guards_checked || !frames || !table_init(&code_index, 1u << 12) || !table_init(&frame_index, 1u << 14))
		atomic_store(&py_state, -1);
}

static bool python_ready(void)
{
	int s = atomic_load_explicit(&py_state, memory_order_acquire);
	if (VRT_LIKELY(s == 1))
		return true;
	if (s < 0)
		return false;
	/* dlsym takes the loader lock: try at most once a second until a Python shows up, one
	 * thread at a time (the winner of the exchange writes py; the others read it only once
	 * py_state says it is complete) */
	uint64_t now = vrt_now_ns(), next = atomic_load(&py_next_try_ns);
	if (now < next || !atomic_compare_exchange_strong(&py_next_try_ns, &next, now + 1000000000ull))
		return false;
	if (!resolve_api() || !py.Py_IsInitialized())
		return false;
	char why[160];
	L = match_layout(why, sizeof(why));
	if (!L) {
		vrt_log("Python stacks off: %s; native stacks continue", why);
		atomic_store(&py_state, -1);
		return false;
	}
	if (!count_code_deaths()) {
		vrt_log("Python stacks off: PyCode_Type's deallocator could not be followed; native stacks continue");
		atomic_store(&py_state, -1);
		return false;
	}
	atomic_store_explicit(&py_state, 1, memory_order_release);
	return true;
}

/* This thread's Python thread state, or NULL (not a Python thread, or Python not running). */
static void *python_thread(void)
{
	if (!vrt_cfg.python || !python_ready())
		return NULL;
	if (!py.Py_IsInitialized() || (py.Py_IsFinalizing && py.Py_IsFinalizing()))
		return NULL;
	return py.ThisThreadState();
}

/* ---- intern tables (intern_lock held) --------------------------------------------------- */

static uint64_t hash2(uintptr_t a, uint32_t b)
{
	uint64_t h = (uint64_t)a * 0x9e3779b97f4a7c15ull ^ ((uint64_t)b * 0xc2b2ae3d27d4eb4full);
	return h ^ (h >> 29);
}

static struct slot *table_find(struct table *t, uintptr_t key, uint32_t key2)
{
	for (uint64_t i = hash2(key, key2);; i++) {
		struct slot *s = &t->slots[i & t->mask];
		if (!s->key || (s->key == key && s->key2 == key2))
			return s;
	}
}

static bool table_put(struct table *t, uintptr_t key, uint32_t key2, uint32_t value)
{
	if ((t->used + 1) * 2 > t->mask + 1) {
		struct table bigger;
		if (!table_init(&bigger, (t->mask + 1) * 2))
			return false;
		for (uint32_t i = 0; i <= t->mask; i++)
			if (t->slots[i].key)
				*table_find(&bigger, t->slots[i].key, t->slots[i].key2) = t->slots[i];
		bigger.used = t->used;
		munmap(t->slots, sizeof(struct slot) * (t->mask + 1));
		*t = bigger;
	}
	*table_find(t, key, key2) = (struct slot){ key, key2, value };
	t->used++;
	return true;
}

/* Room for n bytes and a terminating 0 in the arena (NULL without memory); arena_commit takes
 * what was written. */
static char *arena_room(size_t n)
{
	if (n + 1 > arena_left) {
		size_t chunk = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
		char *fresh = reserve(chunk);
		if (!fresh)
			return NULL;
		arena = fresh;
		arena_left = chunk;
	}
	return arena;
}

static const char *arena_commit(size_t n)
{
	char *out = arena;
	out[n] = 0;
	arena += n + 1;
	arena_left -= n + 1;
	return out;
}

static const char *arena_copy(const char *s, size_t n)
{
	char *out = arena_room(n);
	if (!out)
		return "?";
	memcpy(out, s, n);
	return arena_commit(n);
}

/* Code point cp as UTF-8 at out; returns the bytes written (at most 4). A lone surrogate from
 * the surrogateescape error handler (U+DC80-U+DCFF: a file name's byte that was not UTF-8)
 * becomes that byte again; any other lone surrogate U+FFFD. The reader shows bytes that are not
 * UTF-8 as \xNN. */
static size_t put_utf8(char *out, uint32_t cp)
{
	if (cp >= 0xdc80 && cp <= 0xdcff) {
		out[0] = (char)(cp - 0xdc00);
		return 1;
	}
	return vrt_utf8_encode(out, (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ? 0xfffd : cp);
}

/* Code point i of a compact string's characters, `kind` bytes each (1, 2 or 4). */
static uint32_t code_point(const void *data, unsigned kind, size_t i)
{
	return kind == 1 ? ((const uint8_t *)data)[i] : kind == 2 ? ((const uint16_t *)data)[i] : ((const uint32_t *)data)[i];
}

/* A compact string's n code points of `kind` bytes each (1, 2 or 4), as UTF-8 in the arena. */
static const char *arena_utf8(const void *data, unsigned kind, size_t n)
{
	char *out = arena_room(4 * n);
	if (!out)
		return "?";
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		o += put_utf8(out + o, code_point(data, kind, i));
	return arena_commit(o);
}

/* The UTF-8 text of a str object, read from its own storage: compact strings (what the compiler
 * makes of names and file names) hold their characters inline, ASCII after the PyASCIIObject,
 * others in 1, 2 or 4 bytes each after the PyCompactUnicodeObject. */
static const char *string_text(PyObject *s)
{
	if (!s)
		return NULL;
	unsigned state = RD(unsigned, s, STR_STATE);
	ssize_t n = RD(ssize_t, s, STR_LENGTH);
	if (n < 0 || n > 4096 || !(state & STR_COMPACT))
		return NULL;
	if (state & STR_ASCII)
		return arena_copy((const char *)s + L->str_ascii_size, (size_t)n);
	unsigned kind = (state >> STR_KIND_SHIFT) & 7;
	if (kind != 1 && kind != 2 && kind != 4)
		return NULL;
	return arena_utf8((const char *)s + L->str_compact_size, kind, (size_t)n);
}

/* Whether string_text(s) would give text (NULL as "?"), compared in place: nothing is copied. */
static bool text_equals(PyObject *s, const char *text)
{
	unsigned state = s ? RD(unsigned, s, STR_STATE) : 0;
	ssize_t n = s ? RD(ssize_t, s, STR_LENGTH) : -1;
	unsigned kind = (state >> STR_KIND_SHIFT) & 7;
	if (n < 0 || n > 4096 || !(state & STR_COMPACT) || (!(state & STR_ASCII) && kind != 1 && kind != 2 && kind != 4))
		return !strcmp(text, "?");
	if (state & STR_ASCII)
		return strlen(text) == (size_t)n && !memcmp((const char *)s + L->str_ascii_size, text, (size_t)n);
	const void *data = (const char *)s + L->str_compact_size;
	for (ssize_t i = 0; i < n; i++) {
		char utf8[4];
		size_t k = put_utf8(utf8, code_point(data, kind, (size_t)i));
		for (size_t j = 0; j < k; j++, text++)
			if (!*text || *text != utf8[j])
				return false;
	}
	return !*text;
}

static PyObject *code_field(PyObject *code, int off) { return off >= 0 ? RD(PyObject *, code, off) : NULL; }

static PyObject *qualname_of(PyObject *code) { return code_field(code, L->co_qualname >= 0 ? L->co_qualname : L->co_name); }

static struct code_guard guard_of(PyObject *code)
{
	return (struct code_guard){ code_field(code, L->co_filename), code_field(code, L->co_name),
				    RD(int, code, L->co_firstlineno) };
}

static bool same_guard(const struct code_guard *a, const struct code_guard *b)
{
	return a->filename == b->filename && a->name == b->name && a->firstlineno == b->firstlineno;
}

/* The code object's id; described at first sight (or when its address was reused). An entry
 * kept before a code object died is checked by its text: its guard's strings may be reborn. */
static int intern_code(PyObject *code)
{
	uint64_t deaths = atomic_load_explicit(&code_deaths, memory_order_relaxed);
	struct code_guard g = guard_of(code);
	struct slot *s = table_find(&code_index, (uintptr_t)code, 0);
	if (s->key && same_guard(&guards[s->value], &g)) {
		uint32_t known = s->value;
		if (guards_checked[known] == deaths)
			return (int)known;
		if (text_equals(g.filename, codes[known].filename) && text_equals(qualname_of(code), codes[known].qualname)) {
			guards_checked[known] = deaths;
			return (int)known;
		}
	}
	uint32_t id = atomic_load_explicit(&n_codes, memory_order_relaxed);
	if (id >= MAX_CODES)
		return -1;
	struct vrt_pycode *c = &codes[id];
	c->filename = string_text(g.filename);
	c->qualname = string_text(qualname_of(code));
	c->filename = c->filename ? c->filename : "?";
	c->qualname = c->qualname ? c->qualname : "?";
	c->firstlineno = (uint32_t)g.firstlineno;
	guards[id] = g;
	guards_checked[id] = deaths;
	if (s->key)
		s->value = id; /* the address now names a different code object */
	else if (!table_put(&code_index, (uintptr_t)code, 0, id))
		return -1;
	atomic_store_explicit(&n_codes, id + 1, memory_order_release);
	return (int)id;
}

static int intern_frame(PyObject *code, int lasti_bytes)
{
	int code_id = intern_code(code);
	if (code_id < 0)
		return -1;
	struct slot *s = table_find(&frame_index, (uintptr_t)code_id + 1, (uint32_t)lasti_bytes);
	if (s->key)
		return (int)s->value;
	uint32_t id = atomic_load_explicit(&n_frames, memory_order_relaxed);
	if (id >= MAX_FRAMES)
		return -1;
	frames[id] = (struct vrt_pyframe){ (uint32_t)code_id, lasti_bytes, py.PyCode_Addr2Line(code, lasti_bytes) };
	if (!table_put(&frame_index, (uintptr_t)code_id + 1, (uint32_t)lasti_bytes, id))
		return -1;
	atomic_store_explicit(&n_frames, id + 1, memory_order_release);
	return (int)id;
}

static void lock_tables(void)
{
	int expected = 0;
	while (!atomic_compare_exchange_weak_explicit(&intern_lock, &expected, 1, memory_order_acquire,
						      memory_order_relaxed))
		expected = 0;
}

static void unlock_tables(void) { atomic_store_explicit(&intern_lock, 0, memory_order_release); }

/* Bounded: the forking thread may itself hold the lock (fork() from a signal handler). */
bool vrt_python_fork_prepare(uint64_t deadline_ns)
{
	for (int spins = 0;; spins++) {
		int expected = 0;
		if (atomic_compare_exchange_weak_explicit(&intern_lock, &expected, 1, memory_order_acquire,
							  memory_order_relaxed))
			return true;
		if (spins > 64 && vrt_now_ns() > deadline_ns)
			return false;
		sched_yield();
	}
}

void vrt_python_fork_parent(bool locked)
{
	if (locked)
		unlock_tables();
}

void vrt_python_fork_child(bool locked)
{
	/* Not ours yet still held: by a thread gone here, maybe mid-update. */
	if (!locked && atomic_load(&intern_lock))
		atomic_store(&py_state, -1);
	atomic_store(&intern_lock, 0);
}

/* Frame id of (code, lasti): from this thread's cache, else interned under the lock. */
static int frame_id(PyObject *code, int lasti)
{
	struct frame_cache_entry *e = NULL;
	uint64_t deaths = atomic_load_explicit(&code_deaths, memory_order_relaxed);
	if (frame_cache && frame_cache_deaths != deaths) {
		memset(frame_cache, 0, sizeof(struct frame_cache_entry) * FRAME_CACHE_SLOTS);
		frame_cache_deaths = deaths;
	}
	if (frame_cache) {
		uint64_t h = ((uintptr_t)code >> 4) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uint32_t)lasti;
		e = &frame_cache[(h ^ (h >> 31)) & (FRAME_CACHE_SLOTS - 1)];
		if (e->code == code && e->lasti == lasti)
			return (int)e->id;
	}
	lock_tables();
	int id = intern_frame(code, lasti);
	unlock_tables();
	if (e && id >= 0)
		*e = (struct frame_cache_entry){ code, lasti, (uint32_t)id };
	return id;
}

/* ---- the walk --------------------------------------------------------------------------- */

/*
 * A walk reads frames and names each by its raw key (stack_hash.h: the code object's address and
 * the instruction offset, with the count of code objects that died once a walk); nothing is
 * interned and no lock is taken, so a stack the thread's cache already knows costs only the
 * reads. Interning follows on a miss (vrt_python_frame_ids).
 *
 * The thread's last walk is kept (the memo): an interpreter frame running the same code object
 * at the same instruction, entered the same way, gives what it gave then, without its key made
 * again, while no code object died since the memo was written. It is followed from the
 * innermost frame until the first frame that differs; from there the walk reads everything and
 * writes the memo anew. (Where a frame is does not enter: what it gives follows from the fields
 * compared.) Following reads the memo while the framework's work between two allocations has
 * evicted it, so what it compares is packed apart from what it does not (a frame's key and the
 * hash after it, read for the last frame followed): 24 bytes a frame, eight in three lines.
 */
struct memo_frame {
	const void *code;         /* as read, tag bits and all */
	uintptr_t where;          /* 3.11+: the instruction pointer; 3.9/3.10: f_lasti */
	int32_t lasti;
	uint16_t how;             /* 3.11+: owner, and entry (3.11) << 8, as read */
	bool has_frame, boundary; /* what the frame gave */
};
_Static_assert(sizeof(struct memo_frame) == 24, "eight memo frames in three cache lines");

struct memo_tail {
	uint64_t key;
	struct vrt_hash_stream after; /* the walk's hash once the frame was given */
};

/* Valid for walks of the same max while code_deaths stands at deaths (a frame's has_frame came
 * from its code object's first traceable instruction, which a code object born in its place
 * need not share). */
struct vrt_python_memo {
	int n, max;
	uint64_t deaths;
	struct memo_frame frames[VRT_MAX_PYTHON];
	struct memo_tail tails[VRT_MAX_PYTHON];
};

size_t vrt_python_memo_size(void) { return sizeof(struct vrt_python_memo); }

struct walk {
	struct vrt_pyraw *raw;
	struct vrt_hash_stream *hash;
	int n, max;
	struct vrt_python_memo *memo;
	int visited;    /* frames visited so far: the memo's index */
	bool following; /* every frame visited so far was the memo's */
};

static bool is_code(PyObject *code) { return code && RD(PyObject *, code, OB_TYPE) == py.PyCode_Type; }

static void put_key(struct walk *w, PyObject *code, int lasti, uint64_t key)
{
	if (w->n == w->max)
		return;
	w->raw[w->n++] = (struct vrt_pyraw){ code, lasti };
	vrt_hash_stream_add(w->hash, key);
}

static void put_boundary(struct walk *w)
{
	if (w->n == w->max)
		return;
	w->raw[w->n++] = (struct vrt_pyraw){ NULL, 0 };
	vrt_hash_stream_add(w->hash, VRT_HASH_PY_TAG | VRT_PY_EVAL_BOUNDARY);
}

/* What the memo's next frame gave, if the frame visited now is that frame again. */
static bool follow(struct walk *w, const void *code, uintptr_t where, uint32_t how)
{
	const struct memo_frame *m = w->following && w->visited < w->memo->n ? &w->memo->frames[w->visited] : NULL;
	if (!m || m->code != code || m->where != where || m->how != how) {
		w->following = false;
		return false;
	}
	if (m->has_frame)
		put_key(w, (PyObject *)((uintptr_t)code & ~(uintptr_t)L->code_tag_bits), m->lasti,
			w->memo->tails[w->visited].key);
	if (m->boundary)
		put_boundary(w);
	w->visited++;
	return true;
}

/* Gives what a frame read in full gives, and keeps it in the memo. */
static void give(struct walk *w, struct memo_frame f, PyObject *code)
{
	uint64_t key = 0;
	if (f.has_frame) {
		key = vrt_hash_pyframe((uintptr_t)code, f.lasti);
		put_key(w, code, f.lasti, key);
	}
	if (f.boundary)
		put_boundary(w);
	if (w->memo && w->visited < VRT_MAX_PYTHON) {
		w->memo->tails[w->visited] = (struct memo_tail){ key, *w->hash };
		w->memo->frames[w->visited++] = f;
	}
}

/* 3.9 / 3.10: a chain of PyFrameObjects, one eval call each. */
static void walk_frame_objects(struct walk *w, PyObject *f)
{
	for (int guard = 0; f && w->n < w->max && guard < 10000; guard++, f = RD(PyObject *, f, L->f_back)) {
		PyObject *code = RD(PyObject *, f, L->f_code);
		int lasti = RD(int, f, L->f_lasti);
		if (follow(w, code, (uintptr_t)(uint32_t)lasti, 0))
			continue;
		if (!is_code(code))
			return;
		struct memo_frame m = { .code = code, .where = (uintptr_t)(uint32_t)lasti,
					.lasti = lasti < 0 ? -1 : lasti * L->lasti_scale, .has_frame = true, .boundary = true };
		give(w, m, code);
	}
}

static bool incomplete(PyObject *f, PyObject *code, int owner)
{
	if (owner == L->owner_generator)
		return false;
	char *start = (char *)code + L->co_code_adaptive;
	return RD(char *, f, L->if_instr) < start + 2 * RD(int, code, L->co_firsttraceable);
}

/* An interpreter frame's fields that decide what it gives (3.11+). */
struct iframe {
	const void *code; /* tagged (3.14) */
	uintptr_t instr;
	uint32_t how;     /* owner | is_entry << 8 */
};

static struct iframe read_iframe(PyObject *f)
{
	int owner = RD(char, f, L->if_owner);
	bool entry = L->if_is_entry >= 0 && RD(char, f, L->if_is_entry);
	return (struct iframe){ RD(const void *, f, L->if_code), RD(uintptr_t, f, L->if_instr),
				(uint32_t)(uint8_t)owner | (uint32_t)entry << 8 };
}

/*
 * The memo's frames while the chain is the memo's, from the innermost: only the fields that
 * decide a frame's output are read and compared, and the hash resumes from the memo's state
 * after the last frame followed. Returns the first frame that differs (or NULL at the chain's
 * end); w holds what the followed frames gave.
 */
static PyObject *follow_interpreter_frames(struct walk *w, PyObject *f)
{
	const ptrdiff_t o_owner = L->if_owner, o_entry = L->if_is_entry, o_code = L->if_code, o_instr = L->if_instr,
			o_previous = L->if_previous;
	const uintptr_t untag = ~(uintptr_t)L->code_tag_bits;
	const struct memo_frame *m = w->memo->frames, *end = m + w->memo->n;
	struct vrt_pyraw *raw = w->raw + w->n;
	for (; f && m < end; m++, f = RD(PyObject *, f, o_previous)) {
		const void *code = RD(const void *, f, o_code);
		if (m->code != code || m->where != RD(uintptr_t, f, o_instr))
			break;
		uint32_t how = (uint8_t)RD(char, f, o_owner) | (o_entry >= 0 && RD(char, f, o_entry) ? 1u << 8 : 0);
		if (m->how != how)
			break;
		if (m->has_frame)
			*raw++ = (struct vrt_pyraw){ (PyObject *)((uintptr_t)code & untag), m->lasti };
		if (m->boundary)
			*raw++ = (struct vrt_pyraw){ NULL, 0 };
	}
	int followed = (int)(m - w->memo->frames);
	if (followed) {
		*w->hash = w->memo->tails[followed - 1].after;
		w->n = w->hash->n; /* the memo was walked with the same max: its outputs fit */
	}
	w->visited = followed;
	w->following = false;
	return f;
}

/* 3.11+: interpreter frames; eval calls end at is_entry frames (3.11) or shim frames (3.12+). */
static void walk_interpreter_frames(struct walk *w, PyObject *f)
{
	if (w->following)
		f = follow_interpreter_frames(w, f);
	for (int guard = 0; f && w->n < w->max && guard < 100000; guard++, f = RD(PyObject *, f, L->if_previous)) {
		struct iframe i = read_iframe(f);
		struct memo_frame m = { .code = i.code, .where = i.instr, .how = (uint16_t)i.how };
		int owner = (int)(int8_t)(i.how & 0xff);
		if (L->owner_cstack >= 0 && owner == L->owner_cstack) {
			m.boundary = true;
			give(w, m, NULL);
			continue;
		}
		PyObject *code = (PyObject *)((uintptr_t)i.code & ~(uintptr_t)L->code_tag_bits);
		if (!is_code(code))
			return;
		m.boundary = i.how >> 8;
		if (!incomplete(f, code, owner)) {
			m.has_frame = true;
			m.lasti = (int)((i.instr - (uintptr_t)((char *)code + L->co_code_adaptive)) / 2) * 2;
		}
		give(w, m, code);
	}
}

int vrt_python_walk(struct vrt_python_memo *memo, struct vrt_pyraw *raw, struct vrt_hash_stream *hash, int max)
{
	void *ts = max > 0 ? python_thread() : NULL;
	if (!ts)
		return 0;
	uint64_t deaths = atomic_load_explicit(&code_deaths, memory_order_relaxed);
	bool have_memo = memo && memo->max == max && memo->deaths == deaths;
	struct walk w = { raw, hash, 0, max, memo, 0, have_memo };
	if (L->minor <= 10) {
		walk_frame_objects(&w, RD(PyObject *, ts, L->ts_frame));
	} else {
		void *cframe = L->ts_frame >= 0 ? NULL : RD(void *, ts, L->ts_cframe);
		void *start = L->ts_frame >= 0 ? RD(void *, ts, L->ts_frame)
				: cframe ? RD(void *, cframe, L->cframe_current) : NULL;
		walk_interpreter_frames(&w, start);
	}
	if (memo) {
		memo->n = w.visited;
		memo->max = max;
		memo->deaths = deaths;
	}
	if (w.n && deaths) /* the frames' keys are addresses, which name them until a death */
		hash->h = vrt_hash_mum(hash->h ^ VRT_HASH_K1, deaths ^ VRT_HASH_PY_TAG);
	return w.n;
}

int vrt_python_frame_ids(const struct vrt_pyraw *raw, int n, uint32_t *ids)
{
	if (!frame_cache)
		frame_cache = reserve(sizeof(struct frame_cache_entry) * FRAME_CACHE_SLOTS); /* NULL: uncached */
	int out = 0;
	for (int i = 0; i < n; i++) {
		if (!raw[i].code) {
			ids[out++] = VRT_PY_EVAL_BOUNDARY;
			continue;
		}
		int id = frame_id(raw[i].code, raw[i].lasti);
		if (id >= 0)
			ids[out++] = (uint32_t)id;
	}
	return out;
}

int vrt_python_capture(uint32_t *out, int max)
{
	struct vrt_pyraw raw[VRT_MAX_PYTHON];
	struct vrt_hash_stream ignored = vrt_hash_stream_begin();
	int n = vrt_python_walk(NULL, raw, &ignored, max < VRT_MAX_PYTHON ? max : VRT_MAX_PYTHON);
	return vrt_python_frame_ids(raw, n, out);
}

uint32_t vrt_python_code_count(void) { return atomic_load_explicit(&n_codes, memory_order_acquire); }
const struct vrt_pycode *vrt_python_code(uint32_t i) { return &codes[i]; }
uint32_t vrt_python_frame_count(void) { return atomic_load_explicit(&n_frames, memory_order_acquire); }
const struct vrt_pyframe *vrt_python_frame(uint32_t i) { return &frames[i]; }
