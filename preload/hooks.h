/* SPDX-License-Identifier: MIT */
/*
 * Hook plumbing shared by hooks_driver.c and hooks_runtime.c.
 *
 * Every intercepted API has one body, hook_<symbol>(real, args...), and three ways in:
 *  - the exported symbol itself (programs linked against libcuda/libcudart, and libraries not
 *    linked -Bsymbolic calling their own exports), whose "real" is the next definition after us
 *    (RTLD_NEXT), else the caller's own (vrt_export_next);
 *  - VRT_HOOK_SLOTS trampolines, each bound to one real function pointer that dlsym,
 *    cuGetProcAddress or cudaGetDriverEntryPoint handed out (legacy vs per-thread-stream
 *    variants, several copies of the driver, static and shared runtimes);
 *  - GOT patching after attach, which points a caller's slot at a trampoline.
 */
#ifndef VRAMTRACE_PRELOAD_HOOKS_H
#define VRAMTRACE_PRELOAD_HOOKS_H

#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"

#define VRT_HOOK_SLOTS 8
#define VRT_UNPACK(...) __VA_ARGS__

struct vrt_hook_def {
	const char *symbol;      /* exact exported name, as dlsym and the GOT see it */
	const char *base;        /* cuGetProcAddress name; NULL for runtime APIs */
	int min_version;         /* first cudaVersion with this ABI (cuGetProcAddress) */
	int ptsz;                /* the per-thread-default-stream variant of base */
	uint16_t api;            /* enum vrt_api, for naming */
	_Atomic(void *) *slots;  /* real functions bound to the trampolines */
	void *const *trampolines;
	void *exported;          /* our own definition of symbol */
};

extern const struct vrt_hook_def vrt_driver_hooks[];
extern const int vrt_n_driver_hooks;
extern const struct vrt_hook_def vrt_runtime_hooks[];
extern const int vrt_n_runtime_hooks;

/* Exact symbol name -> definition, for dlsym and GOT patching. */
const struct vrt_hook_def *vrt_hook_by_symbol(const char *name);
/* cuGetProcAddress base name + version + flags -> definition, NULL if not tracked. */
const struct vrt_hook_def *vrt_hook_by_base(const char *base, int version, uint64_t flags);
/* A trampoline bound to real (or real itself when untracked, ours already, or out of slots). */
void *vrt_hook_wrap(const struct vrt_hook_def *def, void *real);

/* An export's *next once RTLD_NEXT found nothing: its callers then each get their own. */
#define VRT_NO_NEXT ((void *)1)
/*
 * The definition an export's call goes to: the next one after us (cached in *next), or, when
 * there is none (the library that calls it was opened RTLD_LOCAL and binds its own calls to our
 * export), the one its caller's object (ret: the call's return address) or the driver defines.
 * NULL if none exists: the export then returns its "missing" error, as the call could not have
 * been linked without us.
 */
void *vrt_export_next(const char *name, _Atomic(void *) *next, void *ret);

/*
 * Generates the slots, trampolines and the exported definition of one API. Every way in goes
 * through sym##_call, which notes the real function under way (vrt_tls.real) for the duration:
 * a library that calls its own exports, bound to ours, is found from it (vrt_export_next).
 */
#define VRT_DEFINE_HOOK(sym, ret, params, args, missing)                                         \
	static _Atomic(void *) sym##_slots[VRT_HOOK_SLOTS];                                      \
	static _Atomic(void *) sym##_next;                                                       \
	static ret sym##_call(void *real_, VRT_UNPACK params)                                    \
	{                                                                                        \
		void *outer_ = vrt_tls.real;                                                     \
		vrt_tls.real = real_;                                                            \
		ret r_ = hook_##sym(real_, VRT_UNPACK args);                                     \
		vrt_tls.real = outer_;                                                           \
		return r_;                                                                       \
	}                                                                                        \
	VRT_DEFINE_TRAMPOLINES(sym, ret, params, (, VRT_UNPACK args))                            \
	VRT_EXPORT ret sym params                                                                \
	{                                                                                        \
		void *next = atomic_load_explicit(&sym##_next, memory_order_acquire);            \
		if (VRT_UNLIKELY((uintptr_t)next <= (uintptr_t)VRT_NO_NEXT)) {                   \
			next = vrt_export_next(#sym, &sym##_next, __builtin_return_address(0));  \
			if (!next)                                                               \
				return missing;                                                  \
		}                                                                                \
		return sym##_call(next, VRT_UNPACK args);                                        \
	}

/* The same, for an API without arguments. */
#define VRT_DEFINE_HOOK0(sym, ret, missing)                                                     \
	static _Atomic(void *) sym##_slots[VRT_HOOK_SLOTS];                                      \
	static _Atomic(void *) sym##_next;                                                       \
	static ret sym##_call(void *real_)                                                       \
	{                                                                                        \
		void *outer_ = vrt_tls.real;                                                     \
		vrt_tls.real = real_;                                                            \
		ret r_ = hook_##sym(real_);                                                      \
		vrt_tls.real = outer_;                                                           \
		return r_;                                                                       \
	}                                                                                        \
	VRT_DEFINE_TRAMPOLINES(sym, ret, (void), ())                                             \
	VRT_EXPORT ret sym(void)                                                                 \
	{                                                                                        \
		void *next = atomic_load_explicit(&sym##_next, memory_order_acquire);            \
		if (VRT_UNLIKELY((uintptr_t)next <= (uintptr_t)VRT_NO_NEXT)) {                   \
			next = vrt_export_next(#sym, &sym##_next, __builtin_return_address(0));  \
			if (!next)                                                               \
				return missing;                                                  \
		}                                                                                \
		return sym##_call(next);                                                         \
	}

#define VRT_SLOT(sym, k) atomic_load_explicit(&sym##_slots[k], memory_order_relaxed)
/* comma_args: "" or ", a, b": what follows the real function in sym##_call's arguments. */
#define VRT_DEFINE_TRAMPOLINES(sym, ret, params, comma_args)                                     \
	static ret sym##_t0 params { return sym##_call(VRT_SLOT(sym, 0) VRT_UNPACK comma_args); } \
	static ret sym##_t1 params { return sym##_call(VRT_SLOT(sym, 1) VRT_UNPACK comma_args); } \
	static ret sym##_t2 params { return sym##_call(VRT_SLOT(sym, 2) VRT_UNPACK comma_args); } \
	static ret sym##_t3 params { return sym##_call(VRT_SLOT(sym, 3) VRT_UNPACK comma_args); } \
	static ret sym##_t4 params { return sym##_call(VRT_SLOT(sym, 4) VRT_UNPACK comma_args); } \
	static ret sym##_t5 params { return sym##_call(VRT_SLOT(sym, 5) VRT_UNPACK comma_args); } \
	static ret sym##_t6 params { return sym##_call(VRT_SLOT(sym, 6) VRT_UNPACK comma_args); } \
	static ret sym##_t7 params { return sym##_call(VRT_SLOT(sym, 7) VRT_UNPACK comma_args); } \
	static void *const sym##_trampolines[VRT_HOOK_SLOTS] = {                                 \
		(void *)sym##_t0, (void *)sym##_t1, (void *)sym##_t2, (void *)sym##_t3,          \
		(void *)sym##_t4, (void *)sym##_t5, (void *)sym##_t6, (void *)sym##_t7 };

#define VRT_HOOK_DEF(sym, base, version, ptsz, api) \
	{ #sym, base, version, ptsz, VRT_API_##api, sym##_slots, sym##_trampolines, (void *)sym }

/* ---- recording helpers used by the hook bodies (event.c) -------------------------------- */

/* An allocation call returned: records ALLOC on success, FAILED (+ OOM) otherwise. */
void vrt_record_alloc(uint16_t api, int result, bool out_of_memory, uint8_t op, uint8_t kind, int device,
		      uint64_t addr, uint64_t size, uint64_t aux, uint64_t stream);
/* A release succeeded; ts_before was taken before the real call (see collector.c on order). */
void vrt_record_release(uint8_t op, uint16_t api, uint64_t ts_before, uint64_t addr, uint64_t size,
			uint64_t aux);
/* A stream capture began (CAPTURE_BEGIN, with the stack) or ended (CAPTURE_END): what the thread
 * allocates between them is made for a CUDA graph. */
void vrt_record_capture(uint8_t op, uint16_t api, int device, uint64_t stream, int result);

#endif /* VRAMTRACE_PRELOAD_HOOKS_H */
