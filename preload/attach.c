/* SPDX-License-Identifier: MIT */
/*
 * vramtrace_attach_start(): what `vramtrace attach` calls (through ptrace, analyzer/inject.c)
 * after dlopen'ing us into a running process.
 *
 * The injected call runs on a thread that was stopped in the middle of the program's own code,
 * possibly holding its locks (or the CUDA driver's). So it does only what needs that thread
 * (which CUDA context it has current) and hands everything else to a new thread, which it
 * does not wait for. That worker starts the collector armed (live set kept, nothing written),
 * hooks what is already resolved (GOT slots, PyTorch's driver table), measures the memory in
 * use, and asks the collector, through our own control socket, to START: the collector writes
 * the MODE change and the ATTACH checkpoint, and here (vrt_attach_on_start) one SEED per device
 * for what was allocated before we came, which nothing can attribute. `vramtrace attach` polls
 * STATUS until the mode is full or vrt_attach_error() says why not.
 */
#define _GNU_SOURCE
#define VRT_CTL_CLIENT
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "libc_dl.h"
#include "attach.h"
#include "collector.h"
#include "hooks.h"
#include "vramtrace/control.h"

#define SEED_LABEL "[allocated before attach, unattributed]"
/* Seeds need an address to be keyed by; this one no allocator hands out (non-canonical). */
#define SEED_ADDRESS(dev) (0xfffe000000000000ull | (uint64_t)(uint16_t)(dev))
#define MAX_SEED_DEVICES 64

/* lookup.c: the dlsym filter, used for its side effect of learning the driver's own
 * cuGetProcAddress from a handle (what vrt_driver_fn resolves helpers through). */
void *vrt_dlsym_filter(void *handle, const char *name);

struct seed {
	int device;
	uint64_t used;        /* total - free when measured */
	uint64_t measured_ns; /* CLOCK_MONOTONIC, just before the measurement */
	int64_t unattributed; /* collector thread: used - known - what PyTorch's snapshot named since */
};

static _Atomic int started;
static _Atomic int error_set;
static char error_text[256];
static CUcontext caller_context;
static struct seed seeds[MAX_SEED_DEVICES];
static int n_seeds;
static _Atomic int seed_pending; /* written by the worker before START, read by the collector */

bool vrt_attach_injected(void) { return atomic_load(&started) != 0; }

const char *vrt_attach_error(void) { return atomic_load(&error_set) ? error_text : NULL; }

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(error_text, sizeof(error_text), fmt, ap);
	va_end(ap);
	atomic_store(&error_set, 1);
}

/* ---- the driver, as the program loaded it ----------------------------------------------- */

#define MAX_DRIVERS 8

struct driver_names {
	char names[MAX_DRIVERS][512];
	int n;
};

static int collect_driver(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct driver_names *d = arg;
	const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	base = base ? base + 1 : info->dlpi_name;
	if (base && !strncmp(base, "libcuda.so", 10) && d->n < MAX_DRIVERS)
		snprintf(d->names[d->n++], sizeof(d->names[0]), "%s", info->dlpi_name);
	return 0;
}

/*
 * Late, RTLD_NEXT from us does not reach libcuda, so vrt_driver_fn (current device, memory
 * info) knows no cuGetProcAddress until a lookup goes through our filter. Make one now for
 * every libcuda loaded (RTLD_LOCAL copies included). Loader calls are made outside the
 * dl_iterate_phdr callback, which holds a lock dlopen takes after its own.
 */
static void learn_driver(void)
{
	static struct driver_names d;
	d.n = 0;
	dl_iterate_phdr(collect_driver, &d);
	for (int i = 0; i < d.n; i++) {
		void *h = dlopen(d.names[i], RTLD_LAZY | RTLD_NOLOAD);
		if (h) {
			vrt_dlsym_filter(h, "cuGetProcAddress_v2");
			vrt_libc_dlclose(h);
		}
	}
}

/* The calling thread's current context: TLS in the driver, safe on a thread stopped anywhere. */
static CUcontext current_context(void)
{
	CUresult (*get)(CUcontext *) = vrt_driver_fn("cuCtxGetCurrent", 4000);
	CUcontext ctx = NULL;
	if (!get || get(&ctx) != CUDA_SUCCESS)
		return NULL;
	return ctx;
}

/* ---- memory in use before we came ------------------------------------------------------- */

struct driver_fns {
	CUresult (*set_current)(CUcontext);
	CUresult (*get_device)(CUdevice *);
	CUresult (*mem_info)(size_t *, size_t *);
	CUresult (*device_count)(int *);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_state)(CUdevice, unsigned int *, int *);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*primary_release)(CUdevice);
};

static bool seeded(int device)
{
	for (int i = 0; i < n_seeds; i++)
		if (seeds[i].device == device)
			return true;
	return false;
}

/* Makes ctx current on this (our own) thread, reads its device's usage, unbinds it. */
static void measure_in(const struct driver_fns *f, CUcontext ctx)
{
	CUdevice dev;
	size_t free_bytes = 0, total = 0;
	if (f->set_current(ctx) != CUDA_SUCCESS)
		return;
	uint64_t when = vrt_now_ns();
	if (f->get_device(&dev) == CUDA_SUCCESS && f->mem_info(&free_bytes, &total) == CUDA_SUCCESS &&
	    !seeded((int)dev) && n_seeds < MAX_SEED_DEVICES && total >= free_bytes)
		seeds[n_seeds++] = (struct seed){ (int)dev, (uint64_t)(total - free_bytes), when };
	f->set_current(NULL);
}

/* Devices whose primary context is already active: retaining an active one creates nothing. */
static void measure_primary_contexts(const struct driver_fns *f)
{
	int count = 0;
	if (!f->primary_state || !f->primary_retain || !f->primary_release || !f->device_count || !f->device_get ||
	    f->device_count(&count) != CUDA_SUCCESS)
		return;
	for (int i = 0; i < count && i < MAX_SEED_DEVICES; i++) {
		CUdevice dev;
		unsigned int flags;
		int active = 0;
		CUcontext ctx;
		if (seeded(i) || f->device_get(&dev, i) != CUDA_SUCCESS ||
		    f->primary_state(dev, &flags, &active) != CUDA_SUCCESS || !active)
			continue;
		if (f->primary_retain(&ctx, dev) != CUDA_SUCCESS)
			continue;
		measure_in(f, ctx);
		f->primary_release(dev);
	}
}

/*
 * total - free per device, taken on the worker thread. It counts everything the device holds
 * for anyone (this process's context and allocations, other processes too), so it is reported
 * as one unattributed figure, never as allocations.
 */
static void measure_seeds(void)
{
	struct driver_fns f = {
		vrt_driver_fn("cuCtxSetCurrent", 4000), vrt_driver_fn("cuCtxGetDevice", 2000),
		vrt_driver_fn("cuMemGetInfo", 3020), vrt_driver_fn("cuDeviceGetCount", 2000),
		vrt_driver_fn("cuDeviceGet", 2000), vrt_driver_fn("cuDevicePrimaryCtxGetState", 7000),
		vrt_driver_fn("cuDevicePrimaryCtxRetain", 7000), vrt_driver_fn("cuDevicePrimaryCtxRelease", 11000),
	};
	if (!f.set_current || !f.get_device || !f.mem_info)
		return;
	if (caller_context)
		measure_in(&f, caller_context);
	measure_primary_contexts(&f);
}

/*
 * Device bytes on dev that the live set holds and the measurement already counted: allocated
 * after hooking (recorded, armed) and stamped before the measurement. An allocation is stamped
 * after its call returns, so one stamped earlier was in use when the driver was asked; later
 * ones are recorded events of their own and not part of the figure.
 */
static uint64_t known_device_bytes(struct collector *c, int dev, uint64_t measured_ns)
{
	uint64_t sum = 0, limit = vrt_ts_units(c, measured_ns);
	for (size_t i = 0; i < c->live.used; i++) {
		struct vrt_item e;
		vrt_live_at(&c->live, i, &e);
		if (vrt_item_counted(&e) && e.kind == VRT_KIND_DEVICE && e.device == dev && e.ts <= limit)
			sum += e.size;
	}
	return sum;
}

/* One SEED record, kept in the live set too so later checkpoints (ring wrap, exit) carry it. A
 * second one for the device replaces the first (the rules' "Birth", format/live.c). */
static void emit_seed(struct collector *c, int dev, uint64_t size, uint64_t ts)
{
	struct vrt_record r = { .op = VRT_OP_SEED, .ts = ts, .api = VRT_API_UNKNOWN, .device = dev,
				.kind = VRT_KIND_DEVICE, .addr = SEED_ADDRESS(dev), .size = size,
				.stack = vrt_output_label_stack(c, SEED_LABEL) };
	vrt_live_apply(&c->live, &r, NULL);
	vrt_output_event(c, 0, &r);
}

void vrt_attach_on_start(struct collector *c)
{
	if (!atomic_exchange(&seed_pending, 0) || !c->writer)
		return;
	for (int i = 0; i < n_seeds; i++) {
		uint64_t known = known_device_bytes(c, seeds[i].device, seeds[i].measured_ns);
		seeds[i].unattributed = seeds[i].used > known ? (int64_t)(seeds[i].used - known) : 0;
		if (seeds[i].unattributed)
			emit_seed(c, seeds[i].device, (uint64_t)seeds[i].unattributed, vrt_ts_units(c, vrt_now_ns()));
	}
}

static struct seed *seed_of(int device)
{
	for (int i = 0; i < n_seeds; i++)
		if (seeds[i].device == device)
			return &seeds[i];
	return NULL;
}

/* The seed ends: everything it stood for is named now. */
static void end_seed(struct collector *c, const struct vrt_item *e, uint64_t ts)
{
	struct vrt_record r = { .op = VRT_OP_FREE, .ts = ts, .api = VRT_API_UNKNOWN, .device = e->device,
				.kind = VRT_KIND_DEVICE, .addr = e->addr, .size = e->size, .stack2 = e->stack };
	vrt_live_apply(&c->live, &r, NULL);
	vrt_output_event(c, 0, &r);
}

void vrt_attach_seed_adjust(struct collector *c, int dev, int64_t delta, uint64_t ts)
{
	struct seed *s = seed_of(dev);
	if (!s)
		return;
	s->unattributed += delta;
	if (!c->writer || atomic_load(&vrt_mode) != VRT_MODE_FULL)
		return; /* armed again: nothing is written (the next ATTACH checkpoint has the live set) */
	struct vrt_item seed;
	bool live = vrt_live_lookup(&c->live, VRT_SPACE_ADDR, SEED_ADDRESS(dev), &seed);
	uint64_t was = live ? seed.size : 0;
	uint64_t now = s->unattributed > 0 ? (uint64_t)s->unattributed : 0;
	if (live && seed.ts > ts)
		ts = seed.ts; /* an older one would not replace it */
	if (now && now != was)
		emit_seed(c, dev, now, ts);
	else if (!now && live)
		end_seed(c, &seed, ts);
}

/* ---- PyTorch's driver table ------------------------------------------------------------- */

#define TORCH_TABLE_SLOTS 64

struct c10_cuda {
	char name[4096];
	uintptr_t rw_lo[8], rw_hi[8]; /* its writable segments */
	int n_rw;
};

static int find_c10_cuda(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct c10_cuda *t = arg;
	const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	if (!base || strncmp(base, "/libc10_cuda.so", 15))
		return 0;
	snprintf(t->name, sizeof(t->name), "%s", info->dlpi_name);
	for (int i = 0; i < info->dlpi_phnum && t->n_rw < 8; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
			t->rw_lo[t->n_rw] = info->dlpi_addr + ph->p_vaddr;
			t->rw_hi[t->n_rw++] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		}
	}
	return 1;
}

/* How many pointer slots from table on stay inside one writable segment of the library. */
static int slots_inside(const struct c10_cuda *t, void **table)
{
	uintptr_t p = (uintptr_t)table;
	for (int i = 0; i < t->n_rw; i++)
		if (p >= t->rw_lo[i] && p < t->rw_hi[i] && !(p & 7)) {
			uintptr_t n = (t->rw_hi[i] - p) / sizeof(void *);
			return n < TORCH_TABLE_SLOTS ? (int)n : TORCH_TABLE_SLOTS;
		}
	return 0;
}

/* Swaps every slot equal to the real function of a tracked driver API (any ABI version
 * PyTorch may have asked for) for its trampoline. */
static int patch_table(void **table, int n)
{
	static const int versions[] = { 12000, 13000 };
	int patched = 0;
	for (int d = 0; d < vrt_n_driver_hooks; d++) {
		const struct vrt_hook_def *def = &vrt_driver_hooks[d];
		for (size_t v = 0; def->base && !def->ptsz && v < sizeof(versions) / sizeof(versions[0]); v++) {
			void *real = vrt_driver_fn(def->base, versions[v]);
			if (!real || vrt_hook_by_base(def->base, versions[v], 0) != def)
				continue;
			for (int i = 0; i < n; i++) {
				void *wrapped;
				if (__atomic_load_n(&table[i], __ATOMIC_ACQUIRE) == real &&
				    (wrapped = vrt_hook_wrap(def, real)) != real && vrt_patch_pointer(&table[i], wrapped))
					patched++;
			}
		}
	}
	return patched;
}

/*
 * c10::cuda::DriverAPI::get() returns PyTorch's own table of driver functions (expandable
 * segments, IPC), filled once by its own lookups and never through our hooks after the fact.
 * Only called with libcuda loaded: get() initializes the table on first use and throws (a C++
 * exception we could not catch here) when it cannot open the driver.
 */
static int patch_torch_driver_table(void)
{
	static struct c10_cuda t;
	struct driver_names d = { .n = 0 };
	memset(&t, 0, sizeof(t));
	dl_iterate_phdr(find_c10_cuda, &t);
	dl_iterate_phdr(collect_driver, &d);
	if (!t.name[0] || !d.n || !vrt_cfg.torch)
		return 0;
	void *h = dlopen(t.name, RTLD_LAZY | RTLD_NOLOAD);
	void **(*get)(void) = h ? (void **(*)(void))vrt_real_dlsym(h, "_ZN3c104cuda9DriverAPI3getEv") : NULL;
	int patched = 0;
	if (get) {
		void **table = get();
		patched = table ? patch_table(table, slots_inside(&t, table)) : 0;
	}
	if (h)
		vrt_libc_dlclose(h);
	return patched;
}

int vrt_attach_on_stop(void) { return vrt_attach_injected() ? vrt_patch_restore_all() : 0; }

/* ---- the worker ------------------------------------------------------------------------- */

static void *attach_worker(void *arg)
{
	(void)arg;
	vrt_tls.busy = 1; /* nothing this thread calls is the program's */
	prctl(PR_SET_NAME, "vramtrace-attach");
	if (vrt_lifecycle_begin(VRT_MODE_ARMED)) {
		fail("the collector thread could not start");
		return NULL;
	}
	if (vrt_collector.control_fd < 0) {
		fail("the control socket could not be created");
		return NULL;
	}
	/* Hook first, measure second: what is allocated in between is in the live set already and
	 * is subtracted from the measurement, not counted twice. */
	int hooked = vrt_got_patch_all() + patch_torch_driver_table();
	if (!hooked)
		vrt_log("attach: no CUDA call site found to hook; only lookups made from now on are traced");
	measure_seeds();
	atomic_store(&seed_pending, 1);
	struct vrt_ctl_msg reply;
	int rc = vrt_ctl_request((int)getpid(), VRT_CTL_START, NULL, &reply, 30000);
	if (rc || reply.status) {
		fail("could not start tracing: %s", rc ? vrt_strerror(rc) : reply.payload);
		return NULL;
	}
	/* The tensor layer attaches at PyTorch's next new segment, which a warm cache may never
	 * make: attach it now (this thread has no lock of the program's). */
	if (vrt_tbuf_self())
		vrt_torch_maybe_attach(vrt_now_ns());
	vrt_torch_seed_request(); /* before the teardown watch: pending calls run in order */
	vrt_python_watch_teardown();
	return NULL;
}

/* The worker is started with every signal blocked: the program's signals stay its own. */
static int start_worker(void)
{
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;
	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 1u << 20);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&thread, &attr, attach_worker, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return rc ? VRT_E_IO : 0;
}

/* A late load traces only what it is asked for, silently (the program's stderr is its own). */
static void configure(const char *output_path)
{
	snprintf(vrt_cfg.output, sizeof(vrt_cfg.output), "%s", output_path);
	vrt_cfg.mode = VRT_MODE_FULL;
	vrt_cfg.control = true; /* `attach --stop`, mark and snapshot need it */
	vrt_cfg.quiet = true;
	vrt_cfg.nvtx = false;   /* NVTX reads its injection variable once, long ago */
}

/*
 * Returns 0 once the worker runs (the analyzer then polls STATUS), VRT_E_UNSUPPORTED when the
 * library was preloaded (its control socket is the way in) or attach already ran here,
 * VRT_E_ARG for a path that is not absolute, VRT_E_IO when no thread could be started.
 */
VRT_EXPORT int vramtrace_attach_start(const char *output_path)
{
	if (!vrt_loaded_late())
		return VRT_E_UNSUPPORTED;
	if (!output_path || output_path[0] != '/' || strlen(output_path) >= sizeof(vrt_cfg.output))
		return VRT_E_ARG;
	int expected = 0;
	if (!atomic_compare_exchange_strong(&started, &expected, 1))
		return VRT_E_UNSUPPORTED;
	int busy = vrt_tls.busy;
	vrt_tls.busy = 1;
	configure(output_path);
	learn_driver();
	caller_context = current_context();
	int rc = start_worker();
	if (rc)
		fail("no thread could be started in the process");
	vrt_tls.busy = busy;
	return rc;
}
