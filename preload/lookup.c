/* SPDX-License-Identifier: MIT */
/*
 * The lookup paths: dlsym, cuGetProcAddress (v1 and v2), cudaGetDriverEntryPoint(ByVersion).
 * Whatever they hand out for a tracked API is replaced by a trampoline bound to the real
 * function. Lookups are wrapped whatever the thread or lifecycle state: a runtime that caches an
 * unwrapped pointer during its lazy init would hide that API forever.
 *
 * dlsym itself is the assembly stub in dlsym_x86_64.S: it asks vrt_dlsym_filter first and, for
 * anything that is not ours, tail-jumps to the next dlsym so glibc still sees the original
 * caller (RTLD_NEXT depends on it). Nothing heavy happens inside dlsym.
 *
 * Never capture ourselves. A library that is not linked -Bsymbolic (a driver built as an
 * ordinary -fPIC library, a GPU-sharing shim, a second interposer) binds the pointers in its own
 * tables to our exports, since we come first in the global scope; a lookup then answers with
 * our own export. Handing that back would send every call to an export whose next definition
 * (RTLD_NEXT) cannot be seen when the library was opened RTLD_LOCAL. So whatever a lookup
 * yields that is ours is replaced by the genuine function, found in the library that answered
 * (dladdr, then dlopen(RTLD_NOLOAD) + dlsym on its handle, which searches that object first),
 * else in the driver, else among the global definitions after us; and an export whose RTLD_NEXT
 * finds nothing looks in its caller's object the same way (vrt_export_next).
 *
 * Be transparent to other dlsym interposers: the real answer to a dlsym is the next dlsym's
 * (a shim preloaded after us sees the program's lookups as it would without us), and ours is
 * also defined as dlsym@GLIBC_2.34 and dlsym@GLIBC_2.2.5, so a shim preloaded before us that
 * takes "the real dlsym" with dlvsym(RTLD_NEXT, ...) (HAMi-core does) reaches ours.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "libc_dl.h"
#include "hooks.h"

/* cuda.h maps the name to the v2 ABI; both ABIs are exported and hooked separately. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
/* The legacy entry point is deprecated, not gone: programs still call it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* libc's dlsym, for our own lookups (RTLD_NEXT relative to us). */
static void *libc_dlsym_ptr;
/* The dlsym after ours in the global scope (libc's, or another interposer's): the one that
 * answers the program's lookups. Read by the assembly stub. */
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
	libc_dlsym_ptr = p;
	void *(*libc_dlsym)(void *, const char *) = p;
	/* Unversioned: any interposer after us. Never ours (RTLD_NEXT starts after us), and nothing
	 * instrumented may run here (see VRT_NO_SANITIZE). */
	void *next = p ? libc_dlsym(RTLD_NEXT, "dlsym") : NULL;
	vrt_real_dlsym_ptr = next ? next : p;
}

void vrt_lookup_init(void) { init_real_dlsym(); }

VRT_NO_SANITIZE void *vrt_real_dlsym(void *handle, const char *name)
{
	init_real_dlsym();
	void *(*fn)(void *, const char *) = libc_dlsym_ptr;
	return fn ? fn(handle, name) : NULL;
}

/* What the program's dlsym would have answered without us. */
VRT_NO_SANITIZE static void *next_dlsym(void *handle, const char *name)
{
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
	/* Every slot taken: reuse one whose function was unloaded (a runtime dlclose'd and opened
	 * again elsewhere); a caller still holding its trampoline would call unmapped code anyway. */
	for (int k = 0; k < VRT_HOOK_SLOTS; k++) {
		void *cur = atomic_load_explicit(&def->slots[k], memory_order_acquire);
		Dl_info info;
		if (cur && !dladdr(cur, &info) && atomic_compare_exchange_strong(&def->slots[k], &cur, real))
			return def->trampolines[k];
	}
	static _Atomic int warned;
	if (!atomic_exchange(&warned, 1))
		vrt_log("more than %d copies of %s; later ones are not traced", VRT_HOOK_SLOTS, def->symbol);
	return real;
}

/* ---- never capture ourselves ------------------------------------------------------------- */

static const struct vrt_hook_def *owner_in(const struct vrt_hook_def *defs, int n, const void *p, bool *trampoline)
{
	for (int i = 0; i < n; i++) {
		if (p == defs[i].exported) {
			*trampoline = false;
			return &defs[i];
		}
		for (int k = 0; k < VRT_HOOK_SLOTS; k++)
			if (p == defs[i].trampolines[k]) {
				*trampoline = true;
				return &defs[i];
			}
	}
	return NULL;
}

/* The hook whose export or trampoline p is; NULL if p is neither. */
static const struct vrt_hook_def *owner_of(const void *p, bool *trampoline)
{
	const struct vrt_hook_def *d = owner_in(vrt_driver_hooks, vrt_n_driver_hooks, p, trampoline);
	if (!d)
		d = owner_in(vrt_runtime_hooks, vrt_n_runtime_hooks, p, trampoline);
	if (!d)
		d = owner_in(lookup_hooks, N_LOOKUP_HOOKS, p, trampoline);
	return d;
}

/*
 * name as the object holding addr defines it, or as its dependencies do (dlsym on its handle
 * searches the object first); NULL if none or if that is ours. The main program is skipped: its
 * handle is the global scope, where we come first.
 */
static void *genuine_in(const void *addr, const char *name)
{
	Dl_info info;
	struct link_map *lm = NULL;
	if (!addr || vrt_addr_is_ours(addr) || !dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm ||
	    !lm->l_prev || !lm->l_name || !lm->l_name[0])
		return NULL;
	void *h = dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return NULL;
	void *fn = vrt_real_dlsym(h, name);
	vrt_libc_dlclose(h);
	return fn && !vrt_addr_is_ours(fn) ? fn : NULL;
}

struct scan_objects {
	int skip, n;        /* objects before this batch; in it */
	const void *at[32]; /* an address inside each object: the start of its first segment */
};

static int collect_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct scan_objects *s = arg;
	if (s->skip > 0) {
		s->skip--;
		return 0;
	}
	if (s->n == (int)(sizeof(s->at) / sizeof(s->at[0])))
		return 1;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_LOAD) {
			s->at[s->n++] = (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
			break;
		}
	return 0;
}

/* The first loaded object, in load order, that defines name (besides us). Objects are looked at
 * in batches, after dl_iterate_phdr returns: dlopen may not be called from its callback. */
static void *genuine_anywhere(const char *name)
{
	for (int done = 0;;) {
		struct scan_objects s = { .skip = done };
		dl_iterate_phdr(collect_object, &s);
		for (int i = 0; i < s.n; i++) {
			void *fn = genuine_in(s.at[i], name);
			if (fn)
				return fn;
		}
		if (s.n < (int)(sizeof(s.at) / sizeof(s.at[0])))
			return NULL;
		done += s.n;
	}
}

/* The genuine name, for a lookup that answered with our own export: from the library that
 * answered, else from the driver whose cuGetProcAddress we met first, else after us, else from
 * whichever object defines it. */
static void *genuine(const void *answered_by, const char *name)
{
	void *fn = genuine_in(answered_by, name);
	if (!fn)
		fn = genuine_in(atomic_load(&real_get_proc_v2), name);
	if (!fn) {
		fn = vrt_real_dlsym(RTLD_NEXT, name);
		if (fn && vrt_addr_is_ours(fn))
			fn = NULL;
	}
	return fn ? fn : genuine_anywhere(name);
}

static void no_genuine(const char *name)
{
	static _Atomic int said;
	if (!atomic_exchange(&said, 1))
		vrt_log("no definition of %s besides vramtrace's was found; calls to it are not traced", name);
}

/*
 * A lookup answered p, one of ours: our export of an API, or (a shim handing back what it got
 * from us) one of our trampolines, already bound to a genuine function. Returns what to hand
 * out instead: a trampoline bound to the genuine function (the genuine function itself when we
 * are not recording), or p when no genuine one can be found (it passes through, see
 * vrt_export_next).
 */
static void *unwrap_ours(const void *answered_by, void *p)
{
	bool trampoline;
	const struct vrt_hook_def *def = owner_of(p, &trampoline);
	if (!def || trampoline)
		return p;
	void *fn = genuine(answered_by, def->symbol);
	if (!fn) {
		no_genuine(def->symbol);
		return p;
	}
	return atomic_load(&vrt_state) == VRT_STATE_DISABLED ? fn : vrt_hook_wrap(def, fn);
}

/* Wraps what a driver lookup returned for base name `symbol`; answered_by is the function that
 * answered (the driver's cuGetProcAddress, the runtime's cudaGetDriverEntryPoint). */
static void wrap_proc(const void *answered_by, const char *symbol, void **pfn, int version, uint64_t flags)
{
	if (!symbol || !pfn || !*pfn)
		return;
	if (VRT_UNLIKELY(vrt_addr_is_ours(*pfn))) {
		*pfn = unwrap_ours(answered_by, *pfn);
		return;
	}
	if (atomic_load(&vrt_state) == VRT_STATE_DISABLED)
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

/* ---- an export's next definition --------------------------------------------------------- */

/*
 * Callers of an export whose RTLD_NEXT found nothing (a driver opened RTLD_LOCAL that calls its
 * own exported functions, bound to ours), each with the definition its own scope gives, keyed
 * by the call's return address (one call site calls one name from one object), or by the real
 * function that tail-called it. Entries are claimed by CAS on ret and read only once ready;
 * never removed (a full table only costs the lookup again).
 */
#define CALLER_SLOTS 256
#define CALLER_PROBES 8

static struct caller_entry {
	_Atomic uintptr_t ret;
	const char *name;
	void *fn;
	_Atomic int ready;
} callers[CALLER_SLOTS];

static size_t caller_hash(uintptr_t ret) { return (size_t)((ret * 0x9E3779B97F4A7C15ull) >> 56); }

static void *caller_find(uintptr_t ret, const char *name)
{
	for (size_t i = 0, h = caller_hash(ret); i < CALLER_PROBES; i++) {
		struct caller_entry *e = &callers[(h + i) % CALLER_SLOTS];
		uintptr_t r = atomic_load_explicit(&e->ret, memory_order_acquire);
		if (!r)
			return NULL;
		if (r == ret && atomic_load_explicit(&e->ready, memory_order_acquire) && e->name == name)
			return e->fn;
	}
	return NULL;
}

static void caller_add(uintptr_t ret, const char *name, void *fn)
{
	for (size_t i = 0, h = caller_hash(ret); i < CALLER_PROBES; i++) {
		struct caller_entry *e = &callers[(h + i) % CALLER_SLOTS];
		uintptr_t none = 0;
		if (atomic_compare_exchange_strong(&e->ret, &none, ret)) {
			e->name = name;
			e->fn = fn;
			atomic_store_explicit(&e->ready, 1, memory_order_release);
			return;
		}
	}
}

void *vrt_export_next(const char *name, _Atomic(void *) *next, void *ret)
{
	void *fn = atomic_load_explicit(next, memory_order_acquire);
	if (!fn) {
		fn = vrt_real_dlsym(RTLD_NEXT, name);
		if (fn && !vrt_addr_is_ours(fn)) {
			atomic_store_explicit(next, fn, memory_order_release);
			return fn;
		}
		fn = VRT_NO_NEXT;
		atomic_store_explicit(next, fn, memory_order_release);
	}
	if (fn != VRT_NO_NEXT)
		return fn;
	/* Called from one of our hooks: the real function it called tail-called this export, so
	 * that function, not our hook, names the library calling. */
	const void *caller = vrt_addr_is_ours(ret) ? vrt_tls.real : ret;
	fn = caller ? caller_find((uintptr_t)caller, name) : NULL;
	if (fn)
		return fn;
	fn = genuine_in(caller, name);
	if (!fn)
		fn = genuine_in(vrt_tls.real, name);
	if (!fn)
		fn = genuine_in(atomic_load(&real_get_proc_v2), name);
	if (!fn)
		fn = genuine_anywhere(name);
	if (!fn) {
		no_genuine(name);
		return NULL;
	}
	if (caller)
		caller_add((uintptr_t)caller, name, fn);
	return fn;
}

static CUresult hook_cuGetProcAddress_v2(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *status)
{
	CUresult (*fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = real;
	remember_get_proc(real);
	CUresult r = fn(symbol, pfn, version, flags, status);
	if (r == CUDA_SUCCESS)
		wrap_proc(real, symbol, pfn, version, flags);
	return r;
}

static CUresult hook_cuGetProcAddress(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	CUresult (*fn)(const char *, void **, int, cuuint64_t) = real;
	CUresult r = fn(symbol, pfn, version, flags);
	if (r == CUDA_SUCCESS)
		wrap_proc(real, symbol, pfn, version, flags);
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
		wrap_proc(real, symbol, fp, RUNTIME_VERSION, flags);
	return r;
}

static cudaError_t entry_point_by_version(void *real, const char *symbol, void **fp, unsigned int v,
					  unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)
{
	cudaError_t (*fn)(const char *, void **, unsigned int, unsigned long long,
			  enum cudaDriverEntryPointQueryResult *) = real;
	cudaError_t r = fn(symbol, fp, v, flags, status);
	if (r == cudaSuccess)
		wrap_proc(real, symbol, fp, (int)v, flags);
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

/* Called by the dlsym stub. Returns VRT_PASS for "let the next dlsym answer". */
VRT_NO_SANITIZE __attribute__((visibility("hidden"))) void *vrt_dlsym_filter(void *handle, const char *name)
{
	init_real_dlsym();
	if (handle == RTLD_NEXT || !name || name[0] != 'c' || name[1] != 'u')
		return VRT_PASS;
	const struct vrt_hook_def *def = vrt_hook_by_symbol(name);
	if (!def)
		return VRT_PASS;
	void *real = next_dlsym(handle, name);
	if (!real)
		return NULL;
	if (vrt_addr_is_ours(real)) {
		bool trampoline;
		const struct vrt_hook_def *owner = owner_of(real, &trampoline);
		if (!owner || trampoline)
			return real; /* bound to a genuine function already */
		/* An interposer after us answered from a table of its own exports, bound to ours:
		 * its own function is what it meant. */
		void *fn = vrt_real_dlsym_ptr != libc_dlsym_ptr ? genuine_in(vrt_real_dlsym_ptr, owner->symbol) : NULL;
		if (fn)
			return atomic_load(&vrt_state) == VRT_STATE_DISABLED ? fn : vrt_hook_wrap(owner, fn);
		/* The scope searched reached our export first (RTLD_DEFAULT, the program's handle):
		 * answer only if a real library there has it too, as it would without us. */
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
