/*
 * shim_vgpu.c - libshim_vgpu.so, a GPU-sharing shim in the style of HAMi-core's libvgpu.so, for
 * the co-existence tests (tests/e2e/test_coexistence.py). Preloaded before or after
 * libvramtrace.so, it does what HAMi-core does (src/libvgpu.c, src/cuda/hook.c):
 *  - overrides dlsym, taking "the real dlsym" with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
 *    a cu* name it wraps is answered from its own library (dlsym on its own handle), anything
 *    else by the real dlsym;
 *  - exports cuGetProcAddress(_v2): the real one first, then its own wrapper for a name it
 *    wraps, taken from a table of its exported functions ({"cuMemAlloc_v2", cuMemAlloc_v2}:
 *    an ordinary -fPIC library, so the loader binds those to the first definition in the
 *    global scope, which may be vramtrace's);
 *  - exports cuMemAlloc_v2 / cuMemFree_v2 / cuMemAllocHost_v2, enforcing a device-memory limit
 *    (FAKEVGPU_LIMIT bytes, default unlimited): an allocation past it fails with
 *    CUDA_ERROR_OUT_OF_MEMORY without reaching the driver;
 *  - finds the driver's functions with dlopen("libcuda.so.1") and the real dlsym.
 * At exit it prints "shim_vgpu: calls=N refused=R used=U" on stdout: the job's result includes
 * what the shim did, so "unchanged with vramtrace" covers the shim too.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef cuGetProcAddress

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym;
static void *self_handle, *driver;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic long calls, refused;
static _Atomic size_t used, limit = SIZE_MAX;

static struct {
	CUresult (*get_proc_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	CUresult (*get_proc)(const char *, void **, int, cuuint64_t);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*mem_alloc_host)(void **, size_t);
	CUresult (*get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
} real;

/* Nothing else here: a sanitizer runtime's first dlsym comes before getenv works. */
static dlsym_fn get_real_dlsym(void)
{
	if (!real_dlsym)
		real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (!real_dlsym)
		real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	return real_dlsym;
}

static void init(void)
{
	get_real_dlsym();
	const char *l = getenv("FAKEVGPU_LIMIT");
	if (l && *l)
		limit = strtoull(l, NULL, 0);
	Dl_info info;
	if (dladdr((void *)init, &info))
		self_handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
	driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE);
	if (!real_dlsym || !self_handle || !driver) {
		fprintf(stderr, "shim_vgpu: cannot initialize\n");
		abort();
	}
	*(void **)&real.get_proc_v2 = real_dlsym(driver, "cuGetProcAddress_v2");
	*(void **)&real.get_proc = real_dlsym(driver, "cuGetProcAddress");
	*(void **)&real.mem_alloc = real_dlsym(driver, "cuMemAlloc_v2");
	*(void **)&real.mem_free = real_dlsym(driver, "cuMemFree_v2");
	*(void **)&real.mem_alloc_host = real_dlsym(driver, "cuMemAllocHost_v2");
	*(void **)&real.get_address_range = real_dlsym(driver, "cuMemGetAddressRange_v2");
}

static void ensure(void) { pthread_once(&once, init); }

__attribute__((destructor)) static void report(void)
{
	printf("shim_vgpu: calls=%ld refused=%ld used=%zu\n", (long)calls, (long)refused, (size_t)used);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	ensure();
	calls++;
	size_t cur = atomic_load(&used);
	do {
		if (size > limit || cur > limit - size) {
			refused++;
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	} while (!atomic_compare_exchange_weak(&used, &cur, cur + size));
	CUresult r = real.mem_alloc(p, size);
	if (r != CUDA_SUCCESS)
		used -= size;
	return r;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	ensure();
	calls++;
	CUdeviceptr base;
	size_t size = 0;
	if (p && real.get_address_range && real.get_address_range(&base, &size, p) != CUDA_SUCCESS)
		size = 0;
	CUresult r = real.mem_free(p);
	if (r == CUDA_SUCCESS)
		used -= size;
	return r;
}

CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
	ensure();
	calls++;
	return real.mem_alloc_host(pp, size);
}

/* Wrapped names: HAMi's __dlsym_hook_section, a table of its own exports. */
static const struct {
	const char *base;
	void *fn;
} hooked[] = {
	{ "cuMemAlloc", (void *)cuMemAlloc_v2 },
	{ "cuMemFree", (void *)cuMemFree_v2 },
	{ "cuMemAllocHost", (void *)cuMemAllocHost_v2 },
};

static void *hooked_fn(const char *base)
{
	for (size_t i = 0; i < sizeof(hooked) / sizeof(hooked[0]); i++)
		if (!strcmp(hooked[i].base, base))
			return hooked[i].fn;
	return NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	ensure();
	CUresult r = real.get_proc_v2(symbol, pfn, version, flags, status);
	if (r != CUDA_SUCCESS)
		return r;
	void *mine = !strcmp(symbol, "cuGetProcAddress") && version >= 12000 ? (void *)cuGetProcAddress_v2
										  : hooked_fn(symbol);
	if (mine)
		*pfn = mine;
	return r;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	ensure();
	CUresult r = real.get_proc(symbol, pfn, version, flags);
	if (r == CUDA_SUCCESS && hooked_fn(symbol))
		*pfn = hooked_fn(symbol);
	return r;
}

void *dlsym(void *handle, const char *symbol)
{
	if (handle != RTLD_NEXT && symbol[0] == 'c' && symbol[1] == 'u') {
		ensure();
		void *f = real_dlsym(self_handle, symbol);
		if (f)
			return f;
	}
	return get_real_dlsym()(handle, symbol);
}
