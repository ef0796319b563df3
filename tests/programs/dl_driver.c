/*
 * dl_driver.c - a program that never links libcuda and finds the driver the way XLA and
 * CuPy's loader do: dlopen("libcuda.so.1") and dlsym() of the exact versioned symbol names.
 *
 * Expected: device 0, device: peak 3 MiB (leak_site 1 MiB + transient_site 2 MiB), live 1 MiB;
 *           host, host_pinned: peak = live = 4096 (pinned_site).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>

#include "prog.h"

static struct {
	CUresult (*init)(unsigned int);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*mem_alloc_host)(void **, size_t);
} drv;

static void *need(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
		exit(3);
	}
	return p;
}

SITE void leak_site(void)
{
	CUdeviceptr p;
	CHECK(drv.mem_alloc(&p, 1 * MiB));
}

SITE void transient_site(void)
{
	CUdeviceptr p;
	CHECK(drv.mem_alloc(&p, 2 * MiB));
	CHECK(drv.mem_free(p));
}

SITE void pinned_site(void)
{
	void *p;
	CHECK(drv.mem_alloc_host(&p, 4096));
}

int main(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
		return 3;
	}
	*(void **)&drv.init = need(lib, "cuInit");
	*(void **)&drv.device_get = need(lib, "cuDeviceGet");
	*(void **)&drv.primary_retain = need(lib, "cuDevicePrimaryCtxRetain");
	*(void **)&drv.ctx_set_current = need(lib, "cuCtxSetCurrent");
	*(void **)&drv.mem_alloc = need(lib, "cuMemAlloc_v2");
	*(void **)&drv.mem_free = need(lib, "cuMemFree_v2");
	*(void **)&drv.mem_alloc_host = need(lib, "cuMemAllocHost_v2");
	CUdevice dev;
	CUcontext ctx;
	CHECK(drv.init(0));
	CHECK(drv.device_get(&dev, 0));
	CHECK(drv.primary_retain(&ctx, dev));
	CHECK(drv.ctx_set_current(ctx));
	leak_site();
	transient_site();
	pinned_site();
	printf("dl_driver: done\n");
	return 0;
}
