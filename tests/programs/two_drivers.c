/*
 * two_drivers.c - two copies of the driver in one process, each opened RTLD_LOCAL by path, as
 * when a program bundles its own libcuda.so.1 beside the system's.
 *
 *   two_drivers PATH_A PATH_B
 *
 * Through each copy's cuGetProcAddress_v2: copy A allocates 1 MiB (a_site) and 4 KiB pinned;
 * copy B allocates 2 MiB (b_site), 8 KiB pinned, and 3 MiB it frees (b_transient_site). Each
 * copy's own accounting (fakecuda_used_bytes, fakecuda_live_allocations) is printed, so a call
 * routed to the wrong copy changes the output:
 *   "two_drivers: a_used=1048576 a_live=2 b_used=2097152 b_live=2"
 * Expected trace: device 0 device peak 6 MiB, live 3 MiB; host_pinned peak = live = 12 KiB.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>

#include "fakecuda.h"
#include "prog.h"

struct driver {
	void *lib;
	CUresult (*get_proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*mem_alloc_host)(void **, size_t);
	CUresult (*ctx_set_current)(CUcontext);
	CUcontext ctx;
};

static void *proc(struct driver *d, const char *name, int version)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult status;
	CHECK(d->get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status));
	return fn;
}

static void open_driver(struct driver *d, const char *path)
{
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(3);
	}
	*(void **)&d->get_proc = dlsym(d->lib, "cuGetProcAddress_v2");
	if (!d->get_proc)
		exit(3);
	CUresult (*init)(unsigned) = proc(d, "cuInit", 2000);
	CUresult (*retain)(CUcontext *, CUdevice) = proc(d, "cuDevicePrimaryCtxRetain", 7000);
	*(void **)&d->ctx_set_current = proc(d, "cuCtxSetCurrent", 4000);
	*(void **)&d->mem_alloc = proc(d, "cuMemAlloc", 3020);
	*(void **)&d->mem_free = proc(d, "cuMemFree", 3020);
	*(void **)&d->mem_alloc_host = proc(d, "cuMemAllocHost", 3020);
	CHECK(init(0));
	CHECK(retain(&d->ctx, 0));
}

SITE void a_site(struct driver *d)
{
	CUdeviceptr p;
	void *h;
	CHECK(d->ctx_set_current(d->ctx));
	CHECK(d->mem_alloc(&p, 1 * MiB));
	CHECK(d->mem_alloc_host(&h, 4 * KiB));
}

SITE void b_site(struct driver *d)
{
	CUdeviceptr p;
	void *h;
	CHECK(d->ctx_set_current(d->ctx));
	CHECK(d->mem_alloc(&p, 2 * MiB));
	CHECK(d->mem_alloc_host(&h, 8 * KiB));
}

SITE void b_transient_site(struct driver *d)
{
	CUdeviceptr p;
	CHECK(d->mem_alloc(&p, 3 * MiB));
	CHECK(d->mem_free(p));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: two_drivers PATH_A PATH_B\n");
		return 2;
	}
	struct driver a, b;
	open_driver(&a, argv[1]);
	open_driver(&b, argv[2]);
	if (a.lib == b.lib) {
		fprintf(stderr, "two_drivers: both paths are one library\n");
		return 3;
	}
	a_site(&a);
	b_site(&b);
	b_transient_site(&b);
	fakecuda_used_bytes_fn a_used = (fakecuda_used_bytes_fn)dlsym(a.lib, "fakecuda_used_bytes");
	fakecuda_used_bytes_fn b_used = (fakecuda_used_bytes_fn)dlsym(b.lib, "fakecuda_used_bytes");
	fakecuda_live_allocations_fn a_live = (fakecuda_live_allocations_fn)dlsym(a.lib, "fakecuda_live_allocations");
	fakecuda_live_allocations_fn b_live = (fakecuda_live_allocations_fn)dlsym(b.lib, "fakecuda_live_allocations");
	printf("two_drivers: a_used=%zu a_live=%zu b_used=%zu b_live=%zu\n", a_used(0), a_live(), b_used(0), b_live());
	return 0;
}
