/* SPDX-License-Identifier: MIT */
/*
 * Hook plumbing shared by hooks_driver.c and hooks_runtime.c.
 *
 * Every intercepted API has one body, hook_<symbol>(real, args...), and three ways in:
 *  - the exported symbol itself (programs linked against libcuda/libcudart), whose "real" is the
 *    next definition after us (RTLD_NEXT);
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

/* Generates the slots, trampolines and the exported definition of one API. */
#define VRT_DEFINE_HOOK(sym, ret, params, args, missing)                                         \
	static _Atomic(void *) sym##_slots[VRT_HOOK_SLOTS];                                      \
	static _Atomic(void *) sym##_next;                                                       \
	static ret sym##_t0 params { return hook_##sym(atomic_load_explicit(&sym##_slots[0], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t1 params { return hook_##sym(atomic_load_explicit(&sym##_slots[1], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t2 params { return hook_##sym(atomic_load_explicit(&sym##_slots[2], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t3 params { return hook_##sym(atomic_load_explicit(&sym##_slots[3], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t4 params { return hook_##sym(atomic_load_explicit(&sym##_slots[4], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t5 params { return hook_##sym(atomic_load_explicit(&sym##_slots[5], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t6 params { return hook_##sym(atomic_load_explicit(&sym##_slots[6], memory_order_relaxed), VRT_UNPACK args); } \
	static ret sym##_t7 params { return hook_##sym(atomic_load_explicit(&sym##_slots[7], memory_order_relaxed), VRT_UNPACK args); } \
	static void *const sym##_trampolines[VRT_HOOK_SLOTS] = {                                 \
		(void *)sym##_t0, (void *)sym##_t1, (void *)sym##_t2, (void *)sym##_t3,          \
		(void *)sym##_t4, (void *)sym##_t5, (void *)sym##_t6, (void *)sym##_t7 };        \
	VRT_EXPORT ret sym params                                                                \
	{                                                                                        \
		void *next = atomic_load_explicit(&sym##_next, memory_order_acquire);            \
		if (VRT_UNLIKELY(!next)) {                                                       \
			next = vrt_real_dlsym(RTLD_NEXT, #sym);                                  \
			if (!next)                                                               \
				return missing;                                                  \
			atomic_store_explicit(&sym##_next, next, memory_order_release);          \
		}                                                                                \
		return hook_##sym(next, VRT_UNPACK args);                                        \
	}

/* The same, for an API without arguments. */
#define VRT_DEFINE_HOOK0(sym, ret, missing)                                                     \
	static _Atomic(void *) sym##_slots[VRT_HOOK_SLOTS];                                      \
	static _Atomic(void *) sym##_next;                                                       \
	static ret sym##_t0(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[0], memory_order_relaxed)); } \
	static ret sym##_t1(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[1], memory_order_relaxed)); } \
	static ret sym##_t2(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[2], memory_order_relaxed)); } \
	static ret sym##_t3(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[3], memory_order_relaxed)); } \
	static ret sym##_t4(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[4], memory_order_relaxed)); } \
	static ret sym##_t5(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[5], memory_order_relaxed)); } \
	static ret sym##_t6(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[6], memory_order_relaxed)); } \
	static ret sym##_t7(void) { return hook_##sym(atomic_load_explicit(&sym##_slots[7], memory_order_relaxed)); } \
	static void *const sym##_trampolines[VRT_HOOK_SLOTS] = {                                 \
		(void *)sym##_t0, (void *)sym##_t1, (void *)sym##_t2, (void *)sym##_t3,          \
		(void *)sym##_t4, (void *)sym##_t5, (void *)sym##_t6, (void *)sym##_t7 };        \
	VRT_EXPORT ret sym(void)                                                                 \
	{                                                                                        \
		void *next = atomic_load_explicit(&sym##_next, memory_order_acquire);            \
		if (VRT_UNLIKELY(!next)) {                                                       \
			next = vrt_real_dlsym(RTLD_NEXT, #sym);                                  \
			if (!next)                                                               \
				return missing;                                                  \
			atomic_store_explicit(&sym##_next, next, memory_order_release);          \
		}                                                                                \
		return hook_##sym(next);                                                         \
	}

#define VRT_HOOK_DEF(sym, base, version, ptsz, api) \
	{ #sym, base, version, ptsz, VRT_API_##api, sym##_slots, sym##_trampolines, (void *)sym }

/* ---- recording helpers used by the hook bodies (event.c) -------------------------------- */

/* An allocation call returned: records ALLOC on success, FAILED (+ OOM) otherwise. */
void vrt_record_alloc(uint16_t api, int result, bool out_of_memory, uint8_t op, uint8_t kind, int device,
		      uint64_t addr, uint64_t size, uint64_t aux, uint64_t stream);
/* A release succeeded; ts_before was taken before the real call (see collector.c on order). */
void vrt_record_release(uint8_t op, uint16_t api, uint64_t ts_before, uint64_t addr, uint64_t size,
			uint64_t aux);

#endif /* VRAMTRACE_PRELOAD_HOOKS_H */
