/* SPDX-License-Identifier: MIT */
/*
 * The search of a retention walk (python/vramtrace/_retention.py), in C because a training job's
 * heap holds millions of objects: breadth-first from the roots over every object's tp_traverse,
 * the references the cyclic GC itself sees, plus those a Python function adds for the types it
 * names (a running frame's locals, a tensor's .grad, an autograd node's inputs). It answers, for
 * each target it reaches, the chain of objects from its root.
 *
 * Called from Python through ctypes.PyDLL, so with the GIL held. The caller has the cyclic GC
 * off and other threads held back (a long switch interval), and keeps every list extra()
 * returns alive until it is done, so no object seen here dies during the walk: the walk takes
 * no reference until it builds its answer. The layout it relies on (ob_type, tp_flags,
 * tp_traverse, tp_is_gc: the same offsets in the default builds of 3.9-3.14, by each version's
 * headers, scripts/python_layouts/generate.py) is checked on a dict it builds itself before the
 * first walk. A free-threaded build (ob_type at 24) is refused by its version string before
 * anything is read; it, or any surprise, answers None, and the Python side walks on its own.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

typedef struct _object PyObject;
typedef int (*visitproc)(PyObject *, void *);
typedef int (*traverseproc)(PyObject *, visitproc, void *);

#define OB_TYPE_OFFSET 8
#define TP_FLAGS_OFFSET 168
#define TP_TRAVERSE_OFFSET 184
#define TP_IS_GC_OFFSET 328
#define TPFLAGS_HAVE_GC (1ul << 14)
#define MAX_CHAIN 64

/* Set up by the first call; every call holds the GIL, which serializes them. */
static struct {
	int ready; /* 0 unknown, 1 checked and usable, -1 not usable */
	PyObject *none;
	void (*incref)(PyObject *);
	void (*decref)(PyObject *);
	PyObject *(*list_new)(long);
	int (*list_append)(PyObject *, PyObject *);
	int (*list_set)(PyObject *, long, PyObject *);
	long (*list_size)(PyObject *);
	PyObject *(*list_get)(PyObject *, long);
	PyObject *(*dict_new)(void);
	int (*dict_set)(PyObject *, PyObject *, PyObject *);
	int (*dict_next)(PyObject *, long *, PyObject **, PyObject **);
	PyObject *(*long_from_ptr)(void *);
	PyObject *(*long_from_u64)(unsigned long long);
	PyObject *(*call1)(PyObject *, ...);
	int (*is_true)(PyObject *);
	void (*err_clear)(void);
} py;

static inline PyObject *type_of(PyObject *o) { return *(PyObject **)((char *)o + OB_TYPE_OFFSET); }
static inline unsigned long flags_of(PyObject *t) { return *(unsigned long *)((char *)t + TP_FLAGS_OFFSET); }
static inline traverseproc traverse_of(PyObject *t) { return *(traverseproc *)((char *)t + TP_TRAVERSE_OFFSET); }

typedef int (*inquiry)(PyObject *);

/* As the GC decides (_PyObject_IS_GC): a type may say per object (a static type object is not
 * a GC object, though its type's flags say so, and traversing it is an error). */
static traverseproc gc_traverse(PyObject *o)
{
	PyObject *t = type_of(o);
	if (!(flags_of(t) & TPFLAGS_HAVE_GC))
		return NULL;
	inquiry is_gc = *(inquiry *)((char *)t + TP_IS_GC_OFFSET);
	return is_gc && !is_gc(o) ? NULL : traverse_of(t);
}

static void *sym(const char *name) { return vrt_real_dlsym(NULL /* RTLD_DEFAULT */, name); }

static bool resolve(void)
{
	py.none = sym("_Py_NoneStruct");
	*(void **)&py.incref = sym("Py_IncRef");
	*(void **)&py.decref = sym("Py_DecRef");
	*(void **)&py.list_new = sym("PyList_New");
	*(void **)&py.list_append = sym("PyList_Append");
	*(void **)&py.list_set = sym("PyList_SetItem");
	*(void **)&py.list_size = sym("PyList_Size");
	*(void **)&py.list_get = sym("PyList_GetItem");
	*(void **)&py.dict_new = sym("PyDict_New");
	*(void **)&py.dict_set = sym("PyDict_SetItem");
	*(void **)&py.dict_next = sym("PyDict_Next");
	*(void **)&py.long_from_ptr = sym("PyLong_FromVoidPtr");
	*(void **)&py.long_from_u64 = sym("PyLong_FromUnsignedLongLong");
	*(void **)&py.call1 = sym("PyObject_CallFunctionObjArgs");
	*(void **)&py.is_true = sym("PyObject_IsTrue");
	*(void **)&py.err_clear = sym("PyErr_Clear");
	void *const all[] = { py.none, py.incref, py.decref, py.list_new, py.list_append, py.list_set, py.list_size,
			      py.list_get, py.dict_new, py.dict_set, py.dict_next, py.long_from_ptr, py.long_from_u64,
			      py.call1, py.is_true, py.err_clear };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!all[i])
			return false;
	const char *(*version)(void) = (const char *(*)(void))sym("Py_GetVersion");
	return version && !strstr(version(), "free-threading"); /* None is answered through the API */
}

struct seen_check {
	PyObject *a, *b;
	int hits, others;
};

static int check_visit(PyObject *o, void *arg)
{
	struct seen_check *c = arg;
	if (o == c->a || o == c->b)
		c->hits++;
	else
		c->others++;
	return 0;
}

/* The layout, tried on objects whose references are known: {a: b} holds exactly a and b (a
 * non-string key, so that the dict visits its keys too). */
static bool layout_holds(void)
{
	PyObject *d = py.dict_new(), *a = py.long_from_u64(0x5eed5eed5eedull), *b = py.list_new(0);
	bool ok = false;
	if (d && a && b && !py.dict_set(d, a, b)) {
		traverseproc tr = gc_traverse(d);
		struct seen_check c = { a, b, 0, 0 };
		ok = tr && !gc_traverse(py.none) && !tr(d, check_visit, &c) && c.hits == 2 && !c.others;
	}
	if (d)
		py.decref(d);
	if (a)
		py.decref(a);
	if (b)
		py.decref(b);
	py.err_clear();
	return ok;
}

/* ---- the walk's tables: open addressing on object addresses ------------------------------ */

struct table {
	uintptr_t *keys;  /* 0: empty */
	uintptr_t *vals;
	size_t cap, used;
};

static size_t home(const struct table *t, uintptr_t key)
{
	uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 29)) & (t->cap - 1);
}

static bool table_init(struct table *t, size_t cap)
{
	t->cap = cap;
	t->used = 0;
	t->keys = calloc(cap, sizeof(*t->keys));
	t->vals = calloc(cap, sizeof(*t->vals));
	return t->keys && t->vals;
}

static void table_free(struct table *t)
{
	free(t->keys);
	free(t->vals);
	memset(t, 0, sizeof(*t));
}

static uintptr_t *table_find(const struct table *t, uintptr_t key)
{
	for (size_t i = home(t, key);; i = (i + 1) & (t->cap - 1)) {
		if (t->keys[i] == key)
			return &t->vals[i];
		if (!t->keys[i])
			return NULL;
	}
}

static bool table_grow(struct table *t)
{
	struct table bigger;
	if (!table_init(&bigger, t->cap * 2)) {
		table_free(&bigger);
		return false;
	}
	for (size_t i = 0; i < t->cap; i++)
		if (t->keys[i]) {
			size_t j = home(&bigger, t->keys[i]);
			while (bigger.keys[j])
				j = (j + 1) & (bigger.cap - 1);
			bigger.keys[j] = t->keys[i];
			bigger.vals[j] = t->vals[i];
			bigger.used++;
		}
	table_free(t);
	*t = bigger;
	return true;
}

/* Inserts key -> val unless present; 1 if inserted, 0 if present, -1 out of memory. */
static int table_add(struct table *t, uintptr_t key, uintptr_t val)
{
	if ((t->used + 1) * 2 > t->cap && !table_grow(t))
		return -1;
	size_t i = home(t, key);
	for (; t->keys[i]; i = (i + 1) & (t->cap - 1))
		if (t->keys[i] == key)
			return 0;
	t->keys[i] = key;
	t->vals[i] = val;
	t->used++;
	return 1;
}

/* ---- the walk ------------------------------------------------------------------------------ */

enum { KIND_PLAIN = 1, KIND_EXTRA = 2 };

struct walk {
	struct table seen;    /* object -> the object it was first reached from (0: a root) */
	struct table targets; /* target -> 1 once reached */
	struct table kinds;   /* type -> KIND_PLAIN / KIND_EXTRA, as classify() said */
	uintptr_t *queue;
	size_t n_queue, cap_queue, max_objects;
	size_t remaining;     /* targets not reached yet */
	uintptr_t current;    /* the object whose references are being visited */
	PyObject *classify, *extra, *keep;
	bool failed;
};

static bool push(struct walk *w, uintptr_t o)
{
	if (w->n_queue == w->cap_queue) {
		size_t cap = w->cap_queue ? w->cap_queue * 2 : 1 << 16;
		uintptr_t *q = realloc(w->queue, cap * sizeof(*q));
		if (!q)
			return false;
		w->queue = q;
		w->cap_queue = cap;
	}
	w->queue[w->n_queue++] = o;
	return true;
}

/* A type's kind, asked of classify() the first time it is seen. */
static int kind_of(struct walk *w, PyObject *type)
{
	uintptr_t *k = table_find(&w->kinds, (uintptr_t)type);
	if (k)
		return (int)*k;
	PyObject *r = py.call1(w->classify, type, NULL);
	int kind = r && py.is_true(r) > 0 ? KIND_EXTRA : KIND_PLAIN;
	if (r)
		py.decref(r);
	py.err_clear();
	if (table_add(&w->kinds, (uintptr_t)type, (uintptr_t)kind) < 0)
		w->failed = true;
	return kind;
}

/*
 * A reference from w->current. Objects that can refer to nothing (no GC support: strings,
 * numbers) lead nowhere, and are not remembered unless they are targets.
 */
static int visit(PyObject *o, void *arg)
{
	struct walk *w = arg;
	if (!o || w->failed)
		return 0;
	uintptr_t *t = table_find(&w->targets, (uintptr_t)o);
	bool leads = gc_traverse(o) != NULL; /* every type extra() knows supports the GC */
	if (!t && !leads)
		return 0;
	int added = table_add(&w->seen, (uintptr_t)o, w->current);
	if (added < 0) {
		w->failed = true;
		return 0;
	}
	if (!added)
		return 0;
	if (t && !*t) {
		*t = 1;
		w->remaining--;
	}
	if (leads && w->n_queue < w->max_objects && !push(w, (uintptr_t)o))
		w->failed = true;
	return 0;
}

static void visit_extra(struct walk *w, PyObject *o)
{
	PyObject *list = py.call1(w->extra, o, NULL);
	if (!list) {
		py.err_clear();
		return;
	}
	long n = py.list_size(list);
	if (n > 0 && !py.list_append(w->keep, list)) /* kept alive until the caller is done */
		for (long i = 0; i < n; i++)
			visit(py.list_get(list, i), w);
	py.decref(list);
	py.err_clear();
}

static bool walk_run(struct walk *w, uint64_t deadline_ns)
{
	for (size_t i = 0; i < w->n_queue && w->remaining && !w->failed; i++) {
		if (!(i & 1023) && vrt_now_ns() > deadline_ns)
			return false;
		PyObject *o = (PyObject *)w->queue[i];
		w->current = (uintptr_t)o;
		traverseproc tr = gc_traverse(o);
		if (tr)
			tr(o, visit, w);
		if (kind_of(w, type_of(o)) == KIND_EXTRA)
			visit_extra(w, o);
	}
	return !w->failed;
}

/* target id -> [root, ..., target], for every target reached. */
static PyObject *chains(struct walk *w)
{
	PyObject *out = py.dict_new();
	for (size_t i = 0; out && i < w->targets.cap; i++) {
		uintptr_t target = w->targets.keys[i];
		if (!target || !w->targets.vals[i])
			continue;
		uintptr_t path[MAX_CHAIN];
		int n = 0;
		for (uintptr_t o = target; o && n < MAX_CHAIN; n++) {
			path[n] = o;
			uintptr_t *parent = table_find(&w->seen, o);
			o = parent ? *parent : 0;
		}
		PyObject *list = py.list_new(n), *key = py.long_from_ptr((void *)target);
		for (int k = 0; list && k < n; k++) {
			py.incref((PyObject *)path[n - 1 - k]);
			py.list_set(list, k, (PyObject *)path[n - 1 - k]); /* steals the reference */
		}
		if (list && key)
			py.dict_set(out, key, list);
		if (list)
			py.decref(list);
		if (key)
			py.decref(key);
	}
	return out;
}

/* The objects of everything (a list) that the walk did not reach: where an unreached target's
 * holders are, for the caller to look through (few, unless the walk was cut short). */
static PyObject *unreached(struct walk *w, PyObject *everything)
{
	long n = everything == py.none ? -1 : py.list_size(everything);
	if (n < 0) {
		py.err_clear();
		py.incref(py.none);
		return py.none;
	}
	PyObject *out = py.list_new(0);
	for (long i = 0; out && i < n; i++) {
		PyObject *o = py.list_get(everything, i);
		if (o && !table_find(&w->seen, (uintptr_t)o) && py.list_append(out, o)) {
			py.decref(out);
			out = NULL;
		}
	}
	return out;
}

static PyObject *answer(PyObject *paths, size_t visited, int status, PyObject *rest)
{
	PyObject *out = py.list_new(0), *n = py.long_from_u64(visited), *s = py.long_from_u64((unsigned long long)status);
	bool ok = out && paths && n && s && rest && !py.list_append(out, paths) && !py.list_append(out, n) &&
		  !py.list_append(out, s) && !py.list_append(out, rest);
	PyObject *parts[] = { paths, n, s, rest };
	for (size_t i = 0; i < 4; i++)
		if (parts[i])
			py.decref(parts[i]);
	if (!ok && out) {
		py.decref(out);
		out = NULL;
	}
	return out;
}

static bool walk_init(struct walk *w, PyObject *roots, PyObject *targets, PyObject *exclude)
{
	long n_roots = py.list_size(roots), n_exclude = py.list_size(exclude);
	if (n_roots < 0 || n_exclude < 0 || !table_init(&w->seen, 1 << 16) || !table_init(&w->targets, 1024) ||
	    !table_init(&w->kinds, 4096))
		return false;
	for (long i = 0; i < n_exclude; i++) /* seen already, never followed: the caller's own state */
		if (table_add(&w->seen, (uintptr_t)py.list_get(exclude, i), 0) < 0)
			return false;
	long pos = 0;
	PyObject *key, *value;
	while (py.dict_next(targets, &pos, &key, &value))
		if (table_add(&w->targets, (uintptr_t)value, 0) > 0)
			w->remaining++;
	for (long i = 0; i < n_roots; i++) {
		PyObject *r = py.list_get(roots, i);
		w->current = 0;
		if (r && table_add(&w->seen, (uintptr_t)r, 0) > 0) {
			uintptr_t *t = table_find(&w->targets, (uintptr_t)r);
			if (t && !*t) {
				*t = 1;
				w->remaining--;
			}
			if (!push(w, (uintptr_t)r))
				return false;
		}
	}
	return true;
}

static void walk_free(struct walk *w)
{
	table_free(&w->seen);
	table_free(&w->targets);
	table_free(&w->kinds);
	free(w->queue);
}

/*
 * roots: a list; targets: a dict whose values are the objects sought; classify(type) -> true
 * when extra(obj) names references of obj's type that tp_traverse does not; keep: a list that
 * receives extra()'s answers; everything: gc.get_objects(), or None; exclude: objects never to be
 * followed (the caller's own state). Answers [paths (target id
 * -> [root, ..., target]), objects visited, status (0: complete, 1: the deadline or max_objects
 * came first), the objects of everything not reached when a target was not (else None)], or
 * None when this interpreter cannot be walked from C.
 */
VRT_EXPORT void *vramtrace_reach(PyObject *roots, PyObject *targets, PyObject *classify, PyObject *extra,
				 PyObject *keep, PyObject *everything, PyObject *exclude, unsigned long long deadline_ns,
				 unsigned long long max_objects)
{
	if (!py.ready)
		py.ready = resolve() && layout_holds() ? 1 : -1;
	if (py.ready < 0) {
		if (py.none)
			py.incref(py.none);
		return py.none;
	}
	struct walk w = { .classify = classify, .extra = extra, .keep = keep, .max_objects = max_objects };
	bool ok = walk_init(&w, roots, targets, exclude);
	bool complete = ok && walk_run(&w, deadline_ns);
	int status = complete && w.n_queue < max_objects ? 0 : 1;
	PyObject *rest = NULL;
	if (ok && !w.failed) {
		if (!status && w.remaining)
			rest = unreached(&w, everything);
		else
			py.incref(rest = py.none);
	}
	PyObject *out = ok && !w.failed ? answer(chains(&w), w.n_queue, status, rest) : NULL;
	walk_free(&w);
	if (!out) {
		py.err_clear();
		py.incref(py.none);
		return py.none;
	}
	return out;
}

/* ---- a walk asked for from outside (vramtrace snapshot PID) -------------------------------- */

/*
 * The collector asks the interpreter's main thread to run a retention walk at its next safe
 * point (Py_AddPendingCall needs neither the GIL nor a thread state), and waits a while for it
 * to be done: the main thread may be inside a long C call, and then the snapshot goes without.
 * Only a job whose sitecustomize loaded vramtrace._retention walks; others say done at once.
 */
static _Atomic uint64_t walk_requests, walks_done, last_snapshot_walk_ns;

/* The program walked for a snapshot of its own (vramtrace.snapshot()): the snapshot it asks for
 * next needs no second walk, and its main thread, waiting for it, could not run one. */
void vrt_python_walked_for_snapshot(void) { atomic_store(&last_snapshot_walk_ns, vrt_now_ns()); }

static int pending_walk(void *arg)
{
	static PyObject *(*module_dict)(void);
	static PyObject *(*dict_get)(PyObject *, const char *);
	static PyObject *(*call_method)(PyObject *, const char *, const char *, ...);
	if (!module_dict) {
		*(void **)&dict_get = sym("PyDict_GetItemString");
		*(void **)&call_method = sym("PyObject_CallMethod");
		*(void **)&module_dict = sym("PyImport_GetModuleDict");
	}
	PyObject *mods = module_dict && dict_get && call_method && py.ready >= 0 && resolve() ? module_dict() : NULL;
	PyObject *m = mods ? dict_get(mods, "vramtrace._retention") : NULL; /* borrowed */
	if (m) {
		PyObject *r = call_method(m, "walk_for_request", "i", (int)(intptr_t)arg);
		if (r)
			py.decref(r);
	}
	if (py.err_clear)
		py.err_clear(); /* a pending call that fails would raise in the program */
	atomic_store(&walks_done, atomic_load(&walk_requests));
	return 0;
}

vrt_add_pending_fn vrt_python_add_pending(void)
{
	vrt_add_pending_fn add = NULL;
	int (*initialized)(void) = NULL;
	*(void **)&add = sym("Py_AddPendingCall");
	*(void **)&initialized = sym("Py_IsInitialized");
	return add && initialized && initialized() ? add : NULL;
}

bool vrt_python_walk_request(int reason, uint64_t *ticket)
{
	if (vrt_now_ns() - atomic_load(&last_snapshot_walk_ns) < 2000000000ull)
		return false;
	vrt_add_pending_fn add_pending = vrt_python_add_pending();
	if (!add_pending)
		return false;
	*ticket = atomic_fetch_add(&walk_requests, 1) + 1;
	return add_pending(pending_walk, (void *)(intptr_t)reason) == 0;
}

bool vrt_python_walk_done(uint64_t ticket) { return atomic_load(&walks_done) >= ticket; }

/* ---- teardown of an interpreter attached to -------------------------------------------- */

/*
 * A job started under `vramtrace run` says when its interpreter begins to finalize (its
 * sitecustomize's vramtrace._retention); one attached to has no such hook, and its teardown
 * (module globals cleared, their tensors freed) would read as the program's own frees. The
 * attach asks the main thread to register one, through the C API only: nothing of ours is
 * imported into the job.
 */
typedef PyObject *(*py_cfunction)(PyObject *, PyObject *);
struct py_method_def { /* PyMethodDef, stable ABI */
	const char *name;
	py_cfunction meth;
	int flags;
	const char *doc;
};
#define PY_METH_NOARGS 0x0004

static PyObject *on_teardown(PyObject *self, PyObject *unused)
{
	(void)self, (void)unused;
	vrt_record_exiting(1);
	py.incref(py.none);
	return py.none;
}

static struct py_method_def teardown_def = { "vramtrace_teardown", on_teardown, PY_METH_NOARGS, NULL };

static int pending_watch_teardown(void *arg)
{
	(void)arg;
	PyObject *(*import)(const char *) = NULL;
	PyObject *(*new_function)(void *, PyObject *, PyObject *) = NULL;
	PyObject *(*call_method)(PyObject *, const char *, const char *, ...) = NULL;
	PyObject *(*module_dict)(void) = NULL;
	PyObject *(*dict_get)(PyObject *, const char *) = NULL;
	*(void **)&import = sym("PyImport_ImportModule");
	*(void **)&new_function = sym("PyCFunction_NewEx");
	*(void **)&call_method = sym("PyObject_CallMethod");
	*(void **)&module_dict = sym("PyImport_GetModuleDict");
	*(void **)&dict_get = sym("PyDict_GetItemString");
	if (!import || !new_function || !call_method || !module_dict || !dict_get || !resolve())
		return 0;
	PyObject *mods = module_dict();
	if (mods && dict_get(mods, "vramtrace._retention")) /* borrowed: it has its own hook */
		return 0;
	PyObject *threading = import("threading");
	PyObject *fn = threading ? new_function(&teardown_def, NULL, NULL) : NULL;
	PyObject *r = fn ? call_method(threading, "_register_atexit", "O", fn) : NULL;
	if (r)
		py.decref(r);
	if (fn)
		py.decref(fn);
	if (threading)
		py.decref(threading);
	py.err_clear(); /* a pending call that fails would raise in the program */
	return 0;
}

void vrt_python_watch_teardown(void)
{
	vrt_add_pending_fn add_pending = vrt_python_add_pending();
	if (add_pending)
		add_pending(pending_watch_teardown, NULL);
}
