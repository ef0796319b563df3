/* SPDX-License-Identifier: MIT */
/*
 * Python frames from inside a native hook, for CPython 3.9-3.13 (default GIL builds), without
 * linking libpython.
 *
 * The walk reads the interpreter's own frame chain from the thread state with per-version
 * offsets (docs/DESIGN.md, "Python stacks"), because the public API allocates frame objects on
 * 3.11+ and can run the garbage collector inside the hook. The layout is checked once against
 * the interpreter's type objects before it is trusted, and every frame's code object is checked
 * for its type while walking; any mismatch turns Python stacks off with one message.
 *
 * Only threads that hold the GIL walk (PyGILState_Check); the GIL is never taken here, because
 * hooks run under locks (PyTorch's allocator mutex) that a GIL holder may wait for. The GIL
 * also serializes every writer of the intern tables below, so they need no lock of their own.
 * A frame is (code object, instruction offset); each code object seen is kept alive with a
 * reference, so its address is never reused. The collector reads only the published prefix
 * [0, count) of the entry arrays, which never move.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

typedef void PyObject;

struct python_api {
	int (*Py_IsInitialized)(void);
	int (*Py_IsFinalizing)(void);
	int (*PyGILState_Check)(void);
	void *(*ThreadState_Unchecked)(void);
	const char *(*Py_GetVersion)(void);
	int (*PyCode_Addr2Line)(PyObject *, int);
	const char *(*PyUnicode_AsUTF8AndSize)(PyObject *, ssize_t *);
	void (*Py_IncRef)(PyObject *);
	PyObject *PyCode_Type;
	PyObject *PyFrame_Type;
};

/* Offsets verified with offsetof() against each version's headers (research notes in DESIGN). */
struct layout {
	int minor;
	int ts_frame;          /* 3.9/3.10: tstate->frame; 3.13: tstate->current_frame */
	int ts_cframe, cframe_current; /* 3.11/3.12: tstate->cframe->current_frame */
	int f_back, f_code, f_lasti, lasti_scale; /* 3.9/3.10 PyFrameObject */
	int if_code, if_previous, if_instr, if_is_entry, if_owner; /* 3.11+ _PyInterpreterFrame */
	int co_filename, co_name, co_qualname, co_firstlineno, co_firsttraceable, co_code_adaptive;
	int frame_type_size;   /* PyFrame_Type.tp_basicsize, a layout fingerprint */
};

static const struct layout layouts[] = {
	{ 9, 24, -1, -1, 24, 32, 104, 1, -1, -1, -1, -1, -1, 104, 112, -1, 40, -1, -1, 368 },
	{ 10, 24, -1, -1, 24, 32, 96, 2, -1, -1, -1, -1, -1, 104, 112, -1, 40, -1, -1, 360 },
	{ 11, -1, 56, 8, -1, -1, -1, 0, 32, 48, 56, 68, 69, 112, 120, 128, 72, 168, 184, 120 },
	{ 12, -1, 56, 0, -1, -1, -1, 0, 0, 8, 56, -1, 70, 112, 120, 128, 68, 176, 192, 120 },
	{ 13, 72, -1, -1, -1, -1, -1, 0, 0, 8, 56, -1, 70, 112, 120, 128, 68, 184, 200, 136 },
};

#define OWNER_GENERATOR 1
#define OWNER_CSTACK 3
#define TP_BASICSIZE 32
#define OB_TYPE 8

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

struct table {
	struct slot *slots;
	uint32_t mask;
	uint32_t used;
};

static struct vrt_pycode *codes;
static struct vrt_pyframe *frames;
static _Atomic uint32_t n_codes, n_frames;
static struct table code_index, frame_index;
static char *arena;
static size_t arena_left;

#define RD(type, base, off) (*(type *)((char *)(base) + (off)))

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
	*(void **)&py.ThreadState_Unchecked = sym("PyThreadState_GetUnchecked");
	if (!py.ThreadState_Unchecked)
		*(void **)&py.ThreadState_Unchecked = sym("_PyThreadState_UncheckedGet");
	*(void **)&py.PyGILState_Check = sym("PyGILState_Check");
	*(void **)&py.PyCode_Addr2Line = sym("PyCode_Addr2Line");
	*(void **)&py.PyUnicode_AsUTF8AndSize = sym("PyUnicode_AsUTF8AndSize");
	*(void **)&py.Py_IncRef = sym("Py_IncRef");
	py.PyCode_Type = sym("PyCode_Type");
	py.PyFrame_Type = sym("PyFrame_Type");
	return py.ThreadState_Unchecked && py.PyGILState_Check && py.PyCode_Addr2Line && py.PyUnicode_AsUTF8AndSize &&
	       py.Py_IncRef && py.PyCode_Type && py.PyFrame_Type;
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
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		const struct layout *l = &layouts[i];
		if (l->minor != minor)
			continue;
		ssize_t frame_size = RD(ssize_t, py.PyFrame_Type, TP_BASICSIZE);
		ssize_t code_size = RD(ssize_t, py.PyCode_Type, TP_BASICSIZE);
		if (frame_size != l->frame_type_size || (l->co_code_adaptive >= 0 && code_size != l->co_code_adaptive)) {
			snprintf(why, why_len, "Python %.10s has an unexpected frame layout (free-threaded or debug build?)",
				 version);
			return NULL;
		}
		return l;
	}
	snprintf(why, why_len, "Python 3.%d is not supported (3.9-3.13 are)", minor);
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
	frames = reserve(sizeof(*frames) * MAX_FRAMES);
	if (!codes || !frames || !table_init(&code_index, 1u << 12) || !table_init(&frame_index, 1u << 14))
		atomic_store(&py_state, -1);
}

static bool python_ready(void)
{
	int s = atomic_load_explicit(&py_state, memory_order_acquire);
	if (VRT_LIKELY(s == 1))
		return true;
	if (s < 0)
		return false;
	uint64_t now = vrt_now_ns();
	if (now < atomic_load(&py_next_try_ns))
		return false;
	/* dlsym takes the loader lock: try at most once a second until a Python shows up */
	atomic_store(&py_next_try_ns, now + 1000000000ull);
	if (!resolve_api() || !py.Py_IsInitialized())
		return false;
	char why[160];
	L = match_layout(why, sizeof(why));
	if (!L) {
		vrt_log("Python stacks off: %s; native stacks continue", why);
		atomic_store(&py_state, -1);
		return false;
	}
	atomic_store_explicit(&py_state, 1, memory_order_release);
	return true;
}

bool vrt_python_holds_gil(void)
{
	if (!vrt_cfg.python || !python_ready())
		return false;
	if (!py.Py_IsInitialized() || (py.Py_IsFinalizing && py.Py_IsFinalizing()))
		return false;
	return py.PyGILState_Check() == 1;
}

/* ---- intern tables (GIL held) ----------------------------------------------------------- */

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

static const char *arena_copy(const char *s, size_t n)
{
	if (n + 1 > arena_left) {
		size_t chunk = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
		char *fresh = reserve(chunk);
		if (!fresh)
			return "?";
		arena = fresh;
		arena_left = chunk;
	}
	char *out = arena;
	memcpy(out, s, n);
	out[n] = 0;
	arena += n + 1;
	arena_left -= n + 1;
	return out;
}

static const char *code_string(PyObject *code, int off)
{
	if (off < 0)
		return NULL;
	PyObject *s = RD(PyObject *, code, off);
	ssize_t n = 0;
	const char *utf8 = s ? py.PyUnicode_AsUTF8AndSize(s, &n) : NULL;
	return utf8 ? arena_copy(utf8, (size_t)n) : NULL;
}

/* First sight of a code object: describe it and keep it alive for the life of the process. */
static int intern_code(PyObject *code)
{
	struct slot *s = table_find(&code_index, (uintptr_t)code, 0);
	if (s->key)
		return (int)s->value;
	uint32_t id = atomic_load_explicit(&n_codes, memory_order_relaxed);
	if (id >= MAX_CODES)
		return -1;
	struct vrt_pycode *c = &codes[id];
	c->filename = code_string(code, L->co_filename);
	c->qualname = code_string(code, L->co_qualname);
	if (!c->qualname)
		c->qualname = code_string(code, L->co_name);
	if (!c->filename)
		c->filename = "?";
	if (!c->qualname)
		c->qualname = "?";
	c->firstlineno = (uint32_t)RD(int, code, L->co_firstlineno);
	if (!table_put(&code_index, (uintptr_t)code, 0, id))
		return -1;
	py.Py_IncRef(code);
	atomic_store_explicit(&n_codes, id + 1, memory_order_release);
	return (int)id;
}

static int intern_frame(PyObject *code, int lasti_bytes)
{
	struct slot *s = table_find(&frame_index, (uintptr_t)code, (uint32_t)lasti_bytes);
	if (s->key)
		return (int)s->value;
	int code_id = intern_code(code);
	uint32_t id = atomic_load_explicit(&n_frames, memory_order_relaxed);
	if (code_id < 0 || id >= MAX_FRAMES)
		return -1;
	frames[id] = (struct vrt_pyframe){ (uint32_t)code_id, lasti_bytes, py.PyCode_Addr2Line(code, lasti_bytes) };
	if (!table_put(&frame_index, (uintptr_t)code, (uint32_t)lasti_bytes, id))
		return -1;
	atomic_store_explicit(&n_frames, id + 1, memory_order_release);
	return (int)id;
}

/* ---- the walk --------------------------------------------------------------------------- */

struct walk {
	uint32_t *out;
	int n, max;
};

static bool is_code(PyObject *code) { return code && RD(PyObject *, code, OB_TYPE) == py.PyCode_Type; }

static void put(struct walk *w, uint32_t v)
{
	if (w->n < w->max)
		w->out[w->n++] = v;
}

/* 3.9 / 3.10: a chain of PyFrameObjects, one eval call each. */
static void walk_frame_objects(struct walk *w, PyObject *f)
{
	for (int guard = 0; f && w->n < w->max && guard < 10000; guard++, f = RD(PyObject *, f, L->f_back)) {
		PyObject *code = RD(PyObject *, f, L->f_code);
		if (!is_code(code))
			return;
		int lasti = RD(int, f, L->f_lasti);
		int id = intern_frame(code, lasti < 0 ? -1 : lasti * L->lasti_scale);
		if (id >= 0)
			put(w, (uint32_t)id);
		put(w, VRT_PY_EVAL_BOUNDARY);
	}
}

static bool incomplete(PyObject *f, PyObject *code, int owner)
{
	if (owner == OWNER_GENERATOR)
		return false;
	char *start = (char *)code + L->co_code_adaptive;
	return RD(char *, f, L->if_instr) < start + 2 * RD(int, code, L->co_firsttraceable);
}

/* 3.11+: interpreter frames; eval calls end at is_entry frames (3.11) or shim frames (3.12+). */
static void walk_interpreter_frames(struct walk *w, PyObject *f)
{
	for (int guard = 0; f && w->n < w->max && guard < 100000; guard++, f = RD(PyObject *, f, L->if_previous)) {
		int owner = RD(char, f, L->if_owner);
		if (L->minor >= 12 && owner == OWNER_CSTACK) {
			put(w, VRT_PY_EVAL_BOUNDARY);
			continue;
		}
		PyObject *code = RD(PyObject *, f, L->if_code);
		if (!is_code(code))
			return;
		bool entry = L->if_is_entry >= 0 && RD(char, f, L->if_is_entry);
		if (!incomplete(f, code, owner)) {
			char *start = (char *)code + L->co_code_adaptive;
			int lasti = (int)((RD(char *, f, L->if_instr) - start) / 2) * 2;
			int id = intern_frame(code, lasti);
			if (id >= 0)
				put(w, (uint32_t)id);
		}
		if (entry)
			put(w, VRT_PY_EVAL_BOUNDARY);
	}
}

int vrt_python_capture(uint32_t *out, int max)
{
	if (max <= 0 || !vrt_python_holds_gil())
		return 0;
	void *ts = py.ThreadState_Unchecked();
	if (!ts)
		return 0;
	struct walk w = { out, 0, max };
	if (L->minor <= 10) {
		walk_frame_objects(&w, RD(PyObject *, ts, L->ts_frame));
	} else {
		void *start = L->ts_frame >= 0 ? RD(void *, ts, L->ts_frame)
					       : RD(void *, RD(void *, ts, L->ts_cframe), L->cframe_current);
		walk_interpreter_frames(&w, start);
	}
	return w.n;
}

uint32_t vrt_python_code_count(void) { return atomic_load_explicit(&n_codes, memory_order_acquire); }
const struct vrt_pycode *vrt_python_code(uint32_t i) { return &codes[i]; }
uint32_t vrt_python_frame_count(void) { return atomic_load_explicit(&n_frames, memory_order_acquire); }
const struct vrt_pyframe *vrt_python_frame(uint32_t i) { return &frames[i]; }
