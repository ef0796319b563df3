/* SPDX-License-Identifier: MIT */
/*
 * Tensor-level events from PyTorch's CUDA caching allocator, with no change to the program.
 *
 * Mechanism: the allocator's own extension point, attachAllocatorTraceTracker, reached through
 * the vtable of the exported c10::cuda::CUDACachingAllocator::allocator object, with a
 * std::function built here following the libstdc++ ABI. The tracker runs synchronously on the
 * allocating thread (so the stack is the tensor's), costs PyTorch one TraceEntry per event, and
 * does not need history recording. It is attached only when every assumption holds:
 *  - torch/version.py beside libc10_cuda.so names a release in the layout table
 *    (torch_layout_table.h: slots, offsets and names derived from each release's own headers
 *    and binary by scripts/torch_layouts/generate.py), or a patch release of a series in it;
 *  - the row holds for the loaded library (vrt_torch_layout_check, which reads and never calls):
 *    the object's RTTI names NativeCachingAllocator (the cudaMallocAsync backend throws from
 *    the tracker method; its tensors are cudaMallocAsync calls, which the driver hooks already
 *    see), and each slot used holds the method the row names, by the library's symbol table;
 *  - the allocator is initialized (trackers given earlier are dropped by init()).
 * Otherwise one stderr line says so and tracing stays at the CUDA (segment) level.
 *
 * TraceEntry reports the requested size, not the rounded block size that memory_allocated()
 * counts. The block size comes from the allocator's cumulative allocation counters
 * (getDeviceStats): an ALLOC is traced before they move, so it is published with an estimate
 * and settled by a BLOCK_SIZE event at the next callback on that device or the next phase
 * boundary, which read them: when the count moved by exactly one, the bytes moved by its block.
 * Otherwise (a callback we skipped, torch.cuda.reset_accumulated_memory_stats() in between) the
 * block keeps its estimate. A free's size is the collector's, from the block it ends (0 for a
 * block the trace never saw allocated, as for a cudaFree of one).
 *
 * So the counters are read once per allocation (and once to start from): by the callback after
 * it, which settles it, and not by an ALLOC that follows such a read, whose counters before it
 * are that read's, as no allocation moved them since: the allocator calls its tracker with the
 * device's mutex held, so the callbacks of a device are serialized and see every allocation,
 * except one whose callback returned early, which marks the counters stale first. Were one to
 * slip by anyway, the count check leaves the next block at its estimate.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "torch_layout.h"

#define MAX_DEVICES 64
#define MAX_STATS_SIZE 2048 /* DeviceStats, returned by value: 952 to 976 bytes in the table */

enum action { ALLOC, FREE_REQUESTED, OOM }; /* what the row's action values mean here */

/* libstdc++ std::function<void(const TraceEntry&)>: 16 bytes of functor, manager, invoker. */
struct std_function {
	void *functor[2];
	int (*manager)(void *dest, const void *src, int op);
	void (*invoker)(const void *functor, const void *entry);
};

/* What a device's alloc_count and alloc_bytes are. */
enum counters {
	STALE,   /* not known: the next ALLOC reads them first */
	FRESH,   /* the allocator's now: a callback read them and no ALLOC came since */
	PENDING, /* as the pending ALLOC found them: the next callback reads and settles it */
};

struct device_state {
	_Atomic int lock;
	/* enum counters: looked at without the lock to decide whether to read, trusted under it */
	_Atomic int counters;
	uint64_t alloc_count, alloc_bytes;
	uint64_t addr, estimate; /* the pending ALLOC's */
	uint64_t pendings;       /* ALLOCs seen: whether the one pending is still the one a settle read for */
};

static _Atomic int torch_state; /* 0 not yet, 1 attached, 2 attaching, -1 never */
static void *allocator;
static void **vtable;
static const struct vrt_torch_layout *row; /* set before torch_state is 1, then constant */
static struct device_state devices[MAX_DEVICES];

struct stats {
	uint64_t alloc_count, alloc_bytes;
};

static void read_stats(int device, struct stats *s)
{
	uint8_t buf[MAX_STATS_SIZE] __attribute__((aligned(16)));
	void *(*get)(void *, void *, int) = (void *(*)(void *, void *, int))vtable[row->slot_get_device_stats];
	get(buf, allocator, device); /* sret: the caller's buffer comes first */
	memcpy(&s->alloc_count, buf + row->stats_alloc_count, 8);
	memcpy(&s->alloc_bytes, buf + row->stats_alloc_bytes, 8);
}

static void lock(struct device_state *d)
{
	int expected = 0;
	while (!atomic_compare_exchange_weak_explicit(&d->lock, &expected, 1, memory_order_acquire, memory_order_relaxed))
		expected = 0;
}

static void unlock(struct device_state *d) { atomic_store_explicit(&d->lock, 0, memory_order_release); }

static void publish_size(int device, uint64_t addr, uint64_t size)
{
	struct vrt_event ev = { .op = VRT_OP_BLOCK_SIZE, .api = VRT_API_TORCH_BLOCK, .device = (int16_t)device,
				.addr = addr, .size = size };
	vrt_emit(&ev, false);
}

static enum counters counters_of(struct device_state *d)
{
	return (enum counters)atomic_load_explicit(&d->counters, memory_order_relaxed);
}

static void set_counters(struct device_state *d, enum counters c)
{
	atomic_store_explicit(&d->counters, c, memory_order_relaxed);
}

/* With d locked and PENDING: publishes the ALLOC's size if s saw exactly one allocation since. */
static void settle_locked(int device, struct device_state *d, const struct stats *s)
{
	if (s->alloc_count != d->alloc_count + 1)
		return;
	uint64_t size = s->alloc_bytes - d->alloc_bytes;
	if (size != d->estimate)
		publish_size(device, d->addr, size);
}

static uint64_t estimate(uint64_t requested) { return requested < 512 ? 512 : (requested + 511) & ~511ull; }

static void on_entry(const uint8_t *te)
{
	int guard;
	int raw, action, device;
	if (row->entry_device_size == 1)
		device = *(const int8_t *)(te + row->entry_device); /* c10::DeviceIndex */
	else
		memcpy(&device, te + row->entry_device, 4);          /* int (2.2) */
	uint64_t addr, size, stream;
	memcpy(&raw, te + row->entry_action, 4);
	memcpy(&addr, te + row->entry_addr, 8);
	memcpy(&stream, te + row->entry_stream, 8);
	memcpy(&size, te + row->entry_size, 8);
	action = raw == row->action_alloc ? ALLOC
		 : raw == row->action_free_requested ? FREE_REQUESTED
		 : raw == row->action_oom ? OOM : -1;
	/* The other actions (FREE_COMPLETED after each free, SEGMENT_*) move no allocation counter. */
	if (action < 0 || device < 0 || device >= MAX_DEVICES)
		return;
	struct device_state *d = &devices[device];
	if (!(guard = vrt_enter())) {
		if (action == ALLOC) /* it moves the counters unseen */
			set_counters(d, STALE);
		return;
	}
	enum counters seen = counters_of(d);
	bool read = seen == PENDING || (seen == STALE && action == ALLOC);
	struct stats s;
	if (read)
		read_stats(device, &s);
	lock(d);
	if (read) {
		if (counters_of(d) == PENDING)
			settle_locked(device, d, &s);
		d->alloc_count = s.alloc_count;
		d->alloc_bytes = s.alloc_bytes;
		set_counters(d, FRESH);
	}
	struct vrt_event ev = { .api = VRT_API_TORCH_BLOCK, .device = (int16_t)device, .addr = addr, .stream = stream };
	if (action == ALLOC) {
		ev.op = VRT_OP_BLOCK_ALLOC;
		ev.size = estimate(size);
		ev.aux = size;
		d->addr = addr;
		d->estimate = ev.size;
		/* Settled later only from the counters as this ALLOC found them; a callback that
		 * returned early may have made them stale since the look above. */
		set_counters(d, counters_of(d) == FRESH ? PENDING : STALE);
		d->pendings++;
	} else if (action == FREE_REQUESTED) {
		ev.op = VRT_OP_BLOCK_FREE;
		ev.size = 0; /* the collector's, from the live block it ends */
	} else {
		ev.op = VRT_OP_OOM;
		ev.api = VRT_API_TORCH_OOM;
		ev.size = size;
		ev.aux = addr; /* PyTorch passes the device's free bytes here */
		ev.addr = 0;
	}
	unlock(d);
	vrt_emit(&ev, action != FREE_REQUESTED || vrt_cfg.free_stacks);
	if (action == OOM)
		vrt_collector_wake();
	vrt_leave(guard);
}

static void invoker(const void *functor, const void *entry)
{
	(void)functor;
	on_entry(entry);
}

/* The functor is trivially copyable and stored locally: clone is a copy, destroy is nothing. */
static int manager(void *dest, const void *src, int op)
{
	static void *type_info;
	switch (op) {
	case 0: /* __get_type_info */
		if (!type_info)
			type_info = vrt_real_dlsym(RTLD_DEFAULT, "_ZTIv");
		*(void **)dest = type_info;
		break;
	case 1: /* __get_functor_ptr */
		*(const void **)dest = src;
		break;
	case 2: /* __clone_functor */
		memcpy(dest, src, 16);
		break;
	}
	return 0;
}

struct find_c10 {
	char path[4096];
};

/* Objects ever loaded: while it stays the same there is nothing new to search. */
static int read_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
	bool has = size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds);
	*(unsigned long long *)arg = has ? info->dlpi_adds : 0;
	return 1;
}

static int find_c10_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	static const char lib[] = "/libc10_cuda.so";
	struct find_c10 *f = arg;
	(void)size;
	const char *name = info->dlpi_name;
	size_t n = name ? strlen(name) : 0;
	if (n < sizeof(lib) - 1 || strcmp(name + n - (sizeof(lib) - 1), lib))
		return 0;
	snprintf(f->path, sizeof(f->path), "%s", name);
	return 1;
}

/* torch/lib/libc10_cuda.so -> torch/version.py: "__version__ = '2.11.0+cu130'". */
static bool read_version(const char *lib, char *version, size_t len)
{
	char path[4200];
	const char *slash = strrchr(lib, '/');
	if (!slash)
		return false;
	snprintf(path, sizeof(path), "%.*s/../version.py", (int)(slash - lib), lib);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[256];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		/* The assignment itself, not "__all__ = ['__version__', ...]" above it. */
		char *q = strncmp(line, "__version__", 11) ? NULL : line;
		char *open = q ? strchr(q, '\'') : NULL;
		char *close = open ? strchr(open + 1, '\'') : NULL;
		if (close) {
			snprintf(version, len, "%.*s", (int)(close - open - 1), open + 1);
			found = true;
		}
	}
	fclose(f);
	return found;
}

static void refuse(const char *why)
{
	atomic_store(&torch_state, -1);
	vrt_log("PyTorch tensor events off: %s; recording CUDA segments only", why);
}

/* Without PyTorch loaded, look again at most every 20 ms: dl_iterate_phdr takes the loader's
 * lock, and a process that never imports PyTorch allocates all day. The time is the one the
 * caller stamped its event with (vrt_now_ns), so the check in between is two loads. */
#define SEARCH_EVERY_NS 20000000ull
static _Atomic uint64_t next_search_ns;
static _Atomic bool c10_found;

static bool search_due(uint64_t now_ns)
{
	return atomic_load_explicit(&c10_found, memory_order_relaxed) ||
	       now_ns >= atomic_load_explicit(&next_search_ns, memory_order_relaxed);
}

static void attach(void)
{
	static unsigned long long searched_adds = ~0ull;
	static char c10_path[4096];
	struct find_c10 f;
	f.path[0] = 0;
	if (!c10_path[0]) {
		atomic_store_explicit(&next_search_ns, vrt_now_ns() + SEARCH_EVERY_NS, memory_order_relaxed);
		unsigned long long adds = 0;
		dl_iterate_phdr(read_adds, &adds);
		if (!adds || adds != searched_adds)
			dl_iterate_phdr(find_c10_cb, &f);
		searched_adds = adds;
		if (!f.path[0]) {
			atomic_store(&torch_state, 0); /* PyTorch may be imported later */
			return;
		}
		snprintf(c10_path, sizeof(c10_path), "%s", f.path);
		atomic_store_explicit(&c10_found, true, memory_order_relaxed);
	}
	snprintf(f.path, sizeof(f.path), "%s", c10_path);
	char version[64], why[320];
	if (!read_version(f.path, version, sizeof(version)))
		return refuse("cannot read torch/version.py next to libc10_cuda.so");
	static bool said_version;
	if (!said_version) {
		said_version = true; /* the release whose allocator the trace shows (whatif models 2.11) */
		vrt_emit_info("torch", version);
	}
	const struct vrt_torch_layout *r = vrt_torch_layout_find(version);
	if (!r) {
		snprintf(why, sizeof(why), "PyTorch %s is not in this build's layout table (%s to %s)", version,
			 vrt_torch_layout_row(0)->release, vrt_torch_layout_row(vrt_torch_layout_count() - 1)->release);
		return refuse(why);
	}
	static const char object[] = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
	void *h = dlopen(f.path, RTLD_NOW | RTLD_NOLOAD);
	void **slot = h ? vrt_real_dlsym(h, object) : NULL;
	allocator = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
	/* A program linked with libc10_cuda (LibTorch in C++) may hold the pointer in its own copy
	 * (a copy relocation), which the library's code then uses: the global scope finds that one. */
	slot = allocator ? NULL : vrt_real_dlsym(RTLD_DEFAULT, object);
	if (slot)
		allocator = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!allocator)
		return refuse("the allocator object is not exported");
	/* Checked once: until the allocator is initialized, attach() comes back here. */
	static const struct vrt_torch_layout *checked;
	if (checked != r) {
		switch (vrt_torch_layout_check(r, f.path, allocator, why, sizeof(why))) {
		case VRT_TORCH_ASYNC:
			atomic_store(&torch_state, -1);
			vrt_log("PyTorch cudaMallocAsync backend: each tensor is a cudaMallocAsync call, traced as such");
			return;
		case VRT_TORCH_REFUSED:
			return refuse(why);
		case VRT_TORCH_NATIVE:
			break;
		}
		if (r->stats_size > MAX_STATS_SIZE || (r->entry_device_size != 1 && r->entry_device_size != 4))
			return refuse("the allocator's statistics or trace entries are laid out as this build cannot read");
		checked = r;
	}
	row = r;
	vtable = *(void ***)allocator;
	if (!((bool (*)(void *))vtable[row->slot_initialized])(allocator)) {
		atomic_store(&torch_state, 0); /* not yet: a tracker given now would be dropped */
		return;
	}
	struct std_function fn = { { NULL, NULL }, manager, invoker };
	((void (*)(void *, void *))vtable[row->slot_attach_tracker])(allocator, &fn);
	atomic_store(&torch_state, 1);
	if (!vrt_cfg.quiet)
		vrt_log("PyTorch %s: recording tensors (caching-allocator blocks) too", version);
}

void vrt_torch_maybe_attach(uint64_t now_ns)
{
	int expected = 0;
	/* Never from a signal handler's hook (nested): the probe takes the loader's locks and
	 * PyTorch's allocator mutex, and marks the thread's fork section, which is not nestable. */
	if (atomic_load_explicit(&torch_state, memory_order_relaxed) != 0 || !vrt_cfg.torch || vrt_tls.nested ||
	    atomic_load(&vrt_state) != VRT_STATE_READY || !search_due(now_ns))
		return;
	/* Whoever loses this race goes on without waiting: the winner may need locks they hold. */
	if (!atomic_compare_exchange_strong(&torch_state, &expected, 2))
		return;
	/* A fork section (internal.h): dl_iterate_phdr and dlopen take the loader's locks. */
	struct vrt_tbuf *b = vrt_tls.buf;
	if (!b || !vrt_fork_section_enter(&b->in_section)) {
		atomic_store(&torch_state, 0); /* next time */
		return;
	}
	/* EMITTING, not SELF: attach makes no CUDA call, so a hook entered meanwhile is a signal
	 * handler's, and it defers its event rather than lose it (enum vrt_busy). */
	int busy = vrt_emitting_begin();
	attach();
	vrt_emitting_end(busy);
	vrt_fork_section_leave(&b->in_section);
}

bool vrt_torch_tracking(void) { return atomic_load(&torch_state) == 1; }

/* Called where no allocator lock is held (phase boundaries): settle pending ALLOCs now. */
void vrt_torch_settle(void)
{
	if (atomic_load(&torch_state) != 1)
		return;
	for (int dev = 0; dev < MAX_DEVICES; dev++) {
		struct device_state *d = &devices[dev];
		if (counters_of(d) != PENDING)
			continue;
		lock(d);
		uint64_t pending = d->pendings;
		unlock(d);
		struct stats s;
		read_stats(dev, &s);
		lock(d);
		/* Not a callback: ALLOCs may have come between the read and the lock, after a reset of
		 * the statistics too (the counters restart: the read could then match a later block's
		 * count and size it by the old one's), and what was read is not known to stay the
		 * allocator's. Only the ALLOC pending at the read is settled by it. */
		if (counters_of(d) == PENDING && d->pendings == pending && s.alloc_count > d->alloc_count) {
			settle_locked(dev, d, &s);
			set_counters(d, STALE);
		}
		unlock(d);
	}
}

/* The device locks may be held by threads that are gone here; what they guard only refines
 * block sizes, so a child starts it over. An attach cut short by the fork is tried again. */
void vrt_torch_fork_child(void)
{
	memset(devices, 0, sizeof(devices));
	int attaching = 2;
	atomic_compare_exchange_strong(&torch_state, &attaching, 0);
}
