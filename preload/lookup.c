/* SPDX-License-Identifier: MIT */
/*
 * The lookup paths: dlsym, cuGetProcAddress (v1 and v2), cudaGetDriverEntryPoint(ByVersion).
 * Whatever they hand out for a tracked API is replaced by a trampoline bound to the real
 * function. Lookups are wrapped whatever the thread or lifecycle state: a runtime that caches an
 * unwrapped pointer during its lazy init would hide that API forever.
 *
 * dlsym itself is the assembly stub in dlsym_x86_64.S: it asks vrt_dlsym_filter first and, for
 * anything that is not ours, tail-jumps to the real dlsym so glibc still sees the original
 * caller (RTLD_NEXT depends on it). Nothing heavy happens inside dlsym.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#include "hooks.h"

/* cuda.h maps the name to the v2 ABI; both ABIs are exported and hooked separately. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
/* The legacy entry point is deprecated, not gone: programs still call it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Read by the assembly stub. */
__attribute__((visibility("hidden"))) void *vrt_real_dlsym_ptr;
static _Atomic(void *) real_get_proc_v2; /* the driver's own cuGetProcAddress_v2 */

/* Runs inside dlsym, which a sanitizer runtime calls while it initializes, before its shadow
 * memory exists: never instrumented. */
#define VRT_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

VRT_NO_SANITIZE static void init_real_dlsym(void)
{
	if (vrt_real_dlsym_ptr)
		return;
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
	vrt_real_dlsym_ptr = p;
}

void vrt_lookup_init(void) { init_real_dlsym(); }

void *vrt_real_dlsym(void *handle, const char *name)
{
	init_real_dlsym();
	void *(*fn)(void *, const char *) = vrt_real_dlsym_ptr;
	return fn ? fn(handle, name) : NULL;
}

/* ---- definitions ------------------------------------------------------------------------ */

static CUresult hook_cuGetProcAddress_v2(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status);
static CUresult hook_cuGetProcAddress(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags);
static cudaError_t hook_cudaGetDriverEntryPoint(void *real, const char *symbol, void **fp, unsigned long long flags,
						enum cudaDriverEntryPointQueryResult *status);
static cudaError_t hook_cudaGetDriverEntryPoint_ptsz(void *real, const char *symbol, void **fp,
						     unsigned long long flags,
						     enum cudaDriverEntryPointQueryResult *status);
static cudaError_t hook_cudaGetDriverEntryPointByVersion(void *real, const char *symbol, void **fp, unsigned int v,
							 unsigned long long flags,
							 enum cudaDriverEntryPointQueryResult *status);
static cudaError_t hook_cudaGetDriverEntryPointByVersion_ptsz(void *real, const char *symbol, void **fp,
							      unsigned int v, unsigned long long flags,
							      enum cudaDriverEntryPointQueryResult *status);

VRT_DEFINE_HOOK(cuGetProcAddress_v2, CUresult,
		(const char *symbol, void **pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult *status),
		(symbol, pfn, version, flags, status), CUDA_ERROR_NOT_INITIALIZED)
VRT_DEFINE_HOOK(cuGetProcAddress, CUresult, (const char *symbol, void **pfn, int version, cuuint64_t flags),
		(symbol, pfn, version, flags), CUDA_ERROR_NOT_INITIALIZED)
VRT_DEFINE_HOOK(cudaGetDriverEntryPoint, cudaError_t,
		(const char *symbol, void **fp, unsigned long long flags, enum cudaDriverEntryPointQueryResult *status),
		(symbol, fp, flags, status), cudaErrorInitializationError)
VRT_DEFINE_HOOK(cudaGetDriverEntryPoint_ptsz, cudaError_t,
		(const char *symbol, void **fp, unsigned long long flags, enum cudaDriverEntryPointQueryResult *status),
		(symbol, fp, flags, status), cudaErrorInitializationError)
VRT_DEFINE_HOOK(cudaGetDriverEntryPointByVersion, cudaError_t,
		(const char *symbol, void **fp, unsigned int v, unsigned long long flags,
		 enum cudaDriverEntryPointQueryResult *status),
		(symbol, fp, v, flags, status), cudaErrorInitializationError)
VRT_DEFINE_HOOK(cudaGetDriverEntryPointByVersion_ptsz, cudaError_t,
		(const char *symbol, void **fp, unsigned int v, unsigned long long flags,
		 enum cudaDriverEntryPointQueryResult *status),
		(symbol, fp, v, flags, status), cudaErrorInitializationError)

static const struct vrt_hook_def lookup_hooks[] = {
	VRT_HOOK_DEF(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, UNKNOWN),
	VRT_HOOK_DEF(cuGetProcAddress, "cuGetProcAddress", 11030, 0, UNKNOWN),
	VRT_HOOK_DEF(cudaGetDriverEntryPoint, NULL, 0, 0, UNKNOWN),
	VRT_HOOK_DEF(cudaGetDriverEntryPoint_ptsz, NULL, 0, 1, UNKNOWN),
	VRT_HOOK_DEF(cudaGetDriverEntryPointByVersion, NULL, 0, 0, UNKNOWN),
	VRT_HOOK_DEF(cudaGetDriverEntryPointByVersion_ptsz, NULL, 0, 1, UNKNOWN),
};
#define N_LOOKUP_HOOKS ((int)(sizeof(lookup_hooks) / sizeof(lookup_hooks[0])))

static const struct vrt_hook_def *find_in(const struct vrt_hook_def *defs, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(defs[i].symbol, name))
			return &defs[i];
	return NULL;
}

const struct vrt_hook_def *vrt_hook_by_symbol(const char *name)
{
	if (!name || name[0] != 'c' || name[1] != 'u')
		return NULL;
	const struct vrt_hook_def *d = find_in(vrt_driver_hooks, vrt_n_driver_hooks, name);
	if (!d)
		d = find_in(vrt_runtime_hooks, vrt_n_runtime_hooks, name);
	if (!d)
		d = find_in(lookup_hooks, N_LOOKUP_HOOKS, name);
	return d;
}

const struct vrt_hook_def *vrt_hook_by_base(const char *base, int version, uint64_t flags)
{
	int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	const struct vrt_hook_def *found = NULL;
	if (!strcmp(base, "cuGetProcAddress"))
		return version >= 12000 ? &lookup_hooks[0] : version >= 11030 ? &lookup_hooks[1] : NULL;
	for (int i = 0; i < vrt_n_driver_hooks; i++) {
		const struct vrt_hook_def *d = &vrt_driver_hooks[i];
		if (strcmp(d->base, base) || version < d->min_version)
			continue;
		if (d->ptsz == want_ptsz)
			return d;
		found = d; /* no variant for this stream mode: the other one has the same ABI */
	}
	return found;
}

static bool is_ours(const struct vrt_hook_def *def, void *p)
{
	if (p == def->exported)
		return true;
	for (int k = 0; k < VRT_HOOK_SLOTS; k++)
		if (p == def->trampolines[k])
			return true;
	return vrt_addr_is_ours(p);
}

void *vrt_hook_wrap(const struct vrt_hook_def *def, void *real)
{
	if (!def || !real || is_ours(def, real))
		return real;
	for (int k = 0; k < VRT_HOOK_SLOTS; k++) {
		void *cur = atomic_load_explicit(&def->slots[k], memory_order_acquire);
		if (cur == real)
			return def->trampolines[k];
		if (!cur && atomic_compare_exchange_strong(&def->slots[k], &cur, real))
			return def->trampolines[k];
		if (cur == real) /* another thread bound it first */
			return def->trampolines[k];
	}
	static _Atomic int warned;
	if (!atomic_exchange(&warned, 1))
		vrt_log("more than %d copies of %s; later ones are not traced", VRT_HOOK_SLOTS, def->symbol);
	return real;
}

/* Wraps what a driver lookup returned for base name `symbol`. */
static void wrap_proc(const char *symbol, void **pfn, int version, uint64_t flags)
{
	if (!symbol || !pfn || !*pfn || atomic_load(&vrt_state) == VRT_STATE_DISABLED)
		return;
	const struct vrt_hook_def *def = vrt_hook_by_base(symbol, version, flags);
	if (def)
		*pfn = vrt_hook_wrap(def, *pfn);
}

static void remember_get_proc(void *real)
{
	void *none = NULL;
	if (real && !vrt_addr_is_ours(real))
		atomic_compare_exchange_strong(&real_get_proc_v2, &none, real);
}

static CUresult hook_cuGetProcAddress_v2(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status)
{
	CUresult (*fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = real;
	remember_get_proc(real);
	CUresult r = fn(symbol, pfn, version, flags, status);
	if (r == CUDA_SUCCESS)
		wrap_proc(symbol, pfn, version, flags);
	return r;
}

static CUresult hook_cuGetProcAddress(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	CUresult (*fn)(const char *, void **, int, cuuint64_t) = real;
	CUresult r = fn(symbol, pfn, version, flags);
	if (r == CUDA_SUCCESS)
		wrap_proc(symbol, pfn, version, flags);
	return r;
}

/* The legacy entry point answers with the ABI of the runtime that was built against 13.0. */
#define RUNTIME_VERSION 13000

static cudaError_t entry_point(void *real, const char *symbol, void **fp, unsigned long long flags,
			       enum cudaDriverEntryPointQueryResult *status)
{
	cudaError_t (*fn)(const char *, void **, unsigned long long, enum cudaDriverEntryPointQueryResult *) = real;
	cudaError_t r = fn(symbol, fp, flags, status);
	if (r == cudaSuccess)
		wrap_proc(symbol, fp, RUNTIME_VERSION, flags);
	return r;
}

static cudaError_t entry_point_by_version(void *real, const char *symbol, void **fp, unsigned int v,
					  unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)
{
	cudaError_t (*fn)(const char *, void **, unsigned int, unsigned long long,
			  enum cudaDriverEntryPointQueryResult *) = real;
	cudaError_t r = fn(symbol, fp, v, flags, status);
	if (r == cudaSuccess)
		wrap_proc(symbol, fp, (int)v, flags);
	return r;
}

static cudaError_t hook_cudaGetDriverEntryPoint(void *real, const char *symbol, void **fp, unsigned long long flags,
						enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point(real, symbol, fp, flags, status);
}

static cudaError_t hook_cudaGetDriverEntryPoint_ptsz(void *real, const char *symbol, void **fp,
						     unsigned long long flags,
						     enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point(real, symbol, fp, flags, status);
}

static cudaError_t hook_cudaGetDriverEntryPointByVersion(void *real, const char *symbol, void **fp, unsigned int v,
							 unsigned long long flags,
							 enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point_by_version(real, symbol, fp, v, flags, status);
}

static cudaError_t hook_cudaGetDriverEntryPointByVersion_ptsz(void *real, const char *symbol, void **fp,
							      unsigned int v, unsigned long long flags,
							      enum cudaDriverEntryPointQueryResult *status)
{
	return entry_point_by_version(real, symbol, fp, v, flags, status);
}

/* ---- dlsym ------------------------------------------------------------------------------ */

/* Called by the dlsym stub. Returns VRT_PASS for "let the real dlsym answer". */
VRT_NO_SANITIZE __attribute__((visibility("hidden"))) void *vrt_dlsym_filter(void *handle, const char *name)
{
	init_real_dlsym();
	if (handle == RTLD_NEXT || !name || name[0] != 'c' || name[1] != 'u')
		return VRT_PASS;
	const struct vrt_hook_def *def = vrt_hook_by_symbol(name);
	if (!def)
		return VRT_PASS;
	void *real = vrt_real_dlsym(handle, name);
	if (!real)
		return NULL;
	if (real == def->exported) {
		/* Found our own export (RTLD_DEFAULT): answer only if the real library has it too. */
		return vrt_real_dlsym(RTLD_NEXT, name) ? real : NULL;
	}
	if (def->exported == (void *)cuGetProcAddress_v2)
		remember_get_proc(real);
	else if (def->base && handle != RTLD_DEFAULT)
		/* A driver opened RTLD_LOCAL (XLA, CuPy's loader) is invisible to RTLD_NEXT: take the
		 * helpers (vrt_driver_fn: current device, memory info) from the library asked. */
		remember_get_proc(vrt_real_dlsym(handle, "cuGetProcAddress_v2"));
	return vrt_hook_wrap(def, real);
}

/* ---- real driver helpers for the hooks -------------------------------------------------- */

void *vrt_driver_fn(const char *name, int version)
{
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		atomic_load(&real_get_proc_v2);
	if (!gpa)
		gpa = vrt_real_dlsym(RTLD_NEXT, "cuGetProcAddress_v2");
	void *fn = NULL;
	CUdriverProcAddressQueryResult status;
	if (gpa && gpa(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
		fn = NULL;
	return fn; /* the driver's own function: calling it records nothing */
}
