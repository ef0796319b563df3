/* SPDX-License-Identifier: MIT */
/*
 * What PyTorch's caching allocator held when `vramtrace attach` came (issue 19, item 3).
 *
 * An injected attach measures the device's used memory, and all of it that the live set does
 * not hold is one unattributed SEED per device (attach.c). In a PyTorch job most of that is the
 * allocator's own segments and the tensors in them, which PyTorch can list. So, once tracing
 * is full, the attach asks the interpreter's main thread to run seed_from_snapshot() at its next
 * safe point (Py_AddPendingCall: only between bytecodes, so a main thread inside a long C call
 * runs it late or never, and then nothing changes). If sys.modules has torch and
 * torch.cuda.is_initialized(), it calls torch.cuda.memory._snapshot() and publishes, with text
 * labels instead of the main thread's (meaningless) stack and API TORCH_SNAPSHOT:
 *  - one SEED per segment (address, total size, stream), kind device;
 *  - one BLOCK_ALLOC per active_allocated block (address, size, aux = requested size; the label
 *    names its innermost Python frame when PyTorch recorded the block's history), only
 *    while the tensor layer (torch.c) has its tracker attached: without it no BLOCK_FREE would
 *    ever end one, and a tensor freed later would be counted live to the end.
 * A block pending free is left out: its FREE_REQUESTED (the tensor layer's BLOCK_FREE) came
 * before the attach, and nothing later would end it. An expandable segment is left out too: its
 * memory is VMM mappings, whose unmap and release name other spaces than a SEED's; it stays in
 * the unattributed figure. Every record is stamped with the time taken before the snapshot,
 * so a later event on the same address is newer than it (the collector's side, collector.c
 * seed_from_snapshot, skips what the live set or a later release already names, and attach.c
 * shrinks the unattributed SEED by each segment taken).
 *
 * Only the C API, resolved by name, and nothing of vramtrace's Python package is imported into
 * the job. Every call is checked, the error indicator is cleared before returning (a pending
 * call that fails would raise in the program), and the work is bounded.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define SEGMENT_LABEL "[PyTorch allocator segment, allocated before attach]"
#define BLOCK_LABEL "[tensor allocated before attach]"
#define MAX_SEGMENTS 100000
#define MAX_BLOCKS 1000000

typedef struct _object PyObject;

static struct {
	PyObject *(*module_dict)(void);
	PyObject *(*dict_get)(PyObject *, const char *); /* borrowed; NULL (no error) if not a dict */
	PyObject *(*get_attr)(PyObject *, const char *);
	PyObject *(*call_method)(PyObject *, const char *, const char *, ...);
	int (*is_true)(PyObject *);
	long (*list_size)(PyObject *);
	PyObject *(*list_get)(PyObject *, long); /* borrowed */
	unsigned long long (*as_u64)(PyObject *);
	long long (*as_i64)(PyObject *);
	const char *(*as_utf8)(PyObject *, long *);
	PyObject *(*err_occurred)(void);
	void (*err_clear)(void);
	void (*decref)(PyObject *);
} py;

static void *sym(const char *name) { return vrt_real_dlsym(NULL /* RTLD_DEFAULT */, name); }

static bool resolve(void)
{
	*(void **)&py.module_dict = sym("PyImport_GetModuleDict");
	*(void **)&py.dict_get = sym("PyDict_GetItemString");
	*(void **)&py.get_attr = sym("PyObject_GetAttrString");
	*(void **)&py.call_method = sym("PyObject_CallMethod");
	*(void **)&py.is_true = sym("PyObject_IsTrue");
	*(void **)&py.list_size = sym("PyList_Size");
	*(void **)&py.list_get = sym("PyList_GetItem");
	*(void **)&py.as_u64 = sym("PyLong_AsUnsignedLongLong");
	*(void **)&py.as_i64 = sym("PyLong_AsLongLong");
	*(void **)&py.as_utf8 = sym("PyUnicode_AsUTF8AndSize");
	*(void **)&py.err_occurred = sym("PyErr_Occurred");
	*(void **)&py.err_clear = sym("PyErr_Clear");
	*(void **)&py.decref = sym("Py_DecRef");
	void *const all[] = { py.module_dict, py.dict_get, py.get_attr, py.call_method, py.is_true, py.list_size,
			      py.list_get, py.as_u64, py.as_i64, py.as_utf8, py.err_occurred, py.err_clear, py.decref };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!all[i])
			return false;
	return true;
}

static void drop(PyObject *o)
{
	if (o)
		py.decref(o);
}

/* d[key] as an unsigned integer; false (error cleared) if missing or not one. */
static bool field_u64(PyObject *d, const char *key, uint64_t *out)
{
	PyObject *v = py.dict_get(d, key);
	if (!v)
		return false;
	unsigned long long x = py.as_u64(v);
	if (py.err_occurred()) {
		py.err_clear();
		return false;
	}
	*out = x;
	return true;
}

static bool field_is(PyObject *d, const char *key, const char *want)
{
	PyObject *v = py.dict_get(d, key);
	long n = 0;
	const char *s = v ? py.as_utf8(v, &n) : NULL;
	if (!s) {
		py.err_clear();
		return false;
	}
	return (size_t)n == strlen(want) && !memcmp(s, want, (size_t)n);
}

static bool field_true(PyObject *d, const char *key)
{
	PyObject *v = py.dict_get(d, key);
	int t = v ? py.is_true(v) : 0;
	if (t < 0)
		py.err_clear();
	return t > 0;
}

static bool recording(void)
{
	return atomic_load(&vrt_state) == VRT_STATE_READY && atomic_load(&vrt_mode) == VRT_MODE_FULL;
}

static void publish(const struct vrt_event *ev, const char *label)
{
	int guard;
	if (!recording() || !(guard = vrt_enter()))
		return;
	vrt_emit_text(ev, label, strlen(label));
	vrt_leave(guard);
}

struct segment {
	int device;
	uint64_t addr, size, stream;
};

static bool read_segment(PyObject *d, struct segment *s)
{
	uint64_t device;
	if (!field_u64(d, "device", &device) || !field_u64(d, "address", &s->addr) ||
	    !field_u64(d, "total_size", &s->size) || device > INT16_MAX || !s->addr || !s->size ||
	    s->addr + s->size < s->addr)
		return false;
	s->device = (int)device;
	if (!field_u64(d, "stream", &s->stream))
		s->stream = 0;
	return true;
}

/* "file:line in function" of the innermost Python frame of a block recorded with history (its
 * "frames", innermost first; native frames have no .py file), cut to fit; false if none. */
#define MAX_FRAMES 64
static bool python_site(PyObject *block, char *out, size_t len)
{
	PyObject *frames = py.dict_get(block, "frames");
	long n = frames ? py.list_size(frames) : 0;
	for (long k = 0; k < n && k < MAX_FRAMES; k++) {
		PyObject *f = py.list_get(frames, k), *file = f ? py.dict_get(f, "filename") : NULL;
		PyObject *name = f ? py.dict_get(f, "name") : NULL;
		long n_file = 0, n_name = 0;
		const char *file_s = file ? py.as_utf8(file, &n_file) : NULL;
		const char *name_s = file_s && name ? py.as_utf8(name, &n_name) : NULL;
		uint64_t line;
		if (!name_s || n_file < 3 || memcmp(file_s + n_file - 3, ".py", 3) || !field_u64(f, "line", &line)) {
			py.err_clear();
			continue;
		}
		snprintf(out, len, "%s at %.*s:%llu in %.*s", BLOCK_LABEL, (int)(n_file > 160 ? 160 : n_file),
			 file_s + (n_file > 160 ? n_file - 160 : 0), (unsigned long long)line,
			 (int)(n_name > 80 ? 80 : n_name), name_s);
		return true;
	}
	py.err_clear();
	return false;
}

/* The segment's active_allocated blocks that lie inside it; returns how many were read. */
static long seed_blocks(PyObject *blocks, const struct segment *s, uint64_t ts_ns, long budget)
{
	long n = py.list_size(blocks);
	if (n < 0) {
		py.err_clear();
		return 0;
	}
	long i = 0;
	for (; i < n && i < budget; i++) {
		PyObject *b = py.list_get(blocks, i);
		uint64_t addr, size, requested;
		if (!b || !field_is(b, "state", "active_allocated") || !field_u64(b, "address", &addr) ||
		    !field_u64(b, "size", &size) || !size || addr < s->addr || addr - s->addr > s->size ||
		    size > s->size - (addr - s->addr)) {
			py.err_clear();
			continue;
		}
		if (!field_u64(b, "requested_size", &requested) || requested > size)
			requested = size;
		struct vrt_event ev = { .op = VRT_OP_BLOCK_ALLOC, .api = VRT_API_TORCH_SNAPSHOT, .kind = VRT_KIND_DEVICE,
					.device = (int16_t)s->device, .ts_ns = ts_ns, .addr = addr, .size = size,
					.aux = requested, .stream = s->stream };
		char label[320];
		publish(&ev, python_site(b, label, sizeof(label)) ? label : BLOCK_LABEL);
	}
	return i;
}

static void seed_segments(PyObject *segments, uint64_t ts_ns)
{
	long n = py.list_size(segments), budget = MAX_BLOCKS;
	if (n < 0) {
		py.err_clear();
		return;
	}
	for (long i = 0; i < n && i < MAX_SEGMENTS && budget > 0 && recording(); i++) {
		PyObject *d = py.list_get(segments, i);
		struct segment s;
		if (!d || !read_segment(d, &s)) {
			py.err_clear();
			continue;
		}
		if (!field_true(d, "is_expandable")) {
			struct vrt_event ev = { .op = VRT_OP_SEED, .api = VRT_API_TORCH_SNAPSHOT, .kind = VRT_KIND_DEVICE,
						.device = (int16_t)s.device, .ts_ns = ts_ns, .addr = s.addr,
						.size = s.size, .stream = s.stream };
			publish(&ev, SEGMENT_LABEL);
		}
		PyObject *blocks = vrt_torch_tracking() ? py.dict_get(d, "blocks") : NULL;
		if (blocks)
			budget -= seed_blocks(blocks, &s, ts_ns, budget);
	}
}

/* torch.cuda, when torch is imported and CUDA initialized in it (a new reference), else NULL. */
static PyObject *initialized_torch_cuda(void)
{
	PyObject *mods = py.module_dict();
	PyObject *torch = mods ? py.dict_get(mods, "torch") : NULL; /* borrowed */
	PyObject *cuda = torch ? py.get_attr(torch, "cuda") : NULL;
	PyObject *yes = cuda ? py.call_method(cuda, "is_initialized", NULL) : NULL;
	int initialized = yes ? py.is_true(yes) : 0;
	drop(yes);
	if (initialized > 0)
		return cuda;
	drop(cuda);
	return NULL;
}

/* torch.cuda.memory._snapshot()["segments"], or torch.cuda.memory_snapshot() (the same list). */
static PyObject *snapshot(PyObject *cuda)
{
	PyObject *memory = py.get_attr(cuda, "memory");
	PyObject *top = memory ? py.call_method(memory, "_snapshot", NULL) : NULL;
	drop(memory);
	if (top)
		return top;
	py.err_clear();
	return py.call_method(cuda, "memory_snapshot", NULL);
}

static int seed_from_snapshot(void *arg)
{
	(void)arg;
	if (!resolve())
		return 0;
	PyObject *cuda = recording() ? initialized_torch_cuda() : NULL;
	uint64_t ts_ns = vrt_now_ns(); /* before the snapshot: what is in it was live by then */
	PyObject *top = cuda ? snapshot(cuda) : NULL;
	PyObject *segments = top ? py.dict_get(top, "segments") : NULL; /* borrowed */
	if (top)
		seed_segments(segments ? segments : top, ts_ns);
	drop(top);
	drop(cuda);
	py.err_clear(); /* a pending call that fails would raise in the program */
	return 0;
}

void vrt_torch_seed_request(void)
{
	vrt_add_pending_fn add_pending = vrt_python_add_pending();
	if (add_pending)
		add_pending(seed_from_snapshot, NULL);
}
