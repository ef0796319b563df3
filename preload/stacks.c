/* SPDX-License-Identifier: MIT */
/*
 * Stack capture in the hook: libunwind's unw_backtrace (per-thread cache), minus our own frames,
 * plus Python frame ids; a 64-bit hash names the whole stack (stack_hash.h). The per-thread
 * cache maps that hash to the id the collector interned earlier, so a repeated call site
 * publishes 80 bytes, not the frames. (Two different stacks would have to collide in 64 bits to
 * be confused.)
 */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <string.h>

#include "internal.h"
#include "stack_hash.h"

uint64_t vrt_hash_frames(const uint64_t *native, int n_native, const uint32_t *python, int n_python)
{
	return vrt_hash_frames_inline(native, n_native, python, n_python);
}

/* Unwinds straight into out (VRT_MAX_NATIVE slots) when our own frames (at most 8, first) and
 * depth fit, then drops ours; deeper requests go through a larger scratch array. */
static int capture_native(uint64_t *out, int depth)
{
	_Static_assert(sizeof(void *) == sizeof(uint64_t), "return addresses are stored as 64 bits");
	void *scratch[VRT_MAX_NATIVE + 8];
	bool direct = depth + 8 <= VRT_MAX_NATIVE;
	uint64_t *ips = direct ? out : (uint64_t *)scratch;
	int want = depth + 8 < VRT_MAX_NATIVE + 8 ? depth + 8 : VRT_MAX_NATIVE + 8;
	int n = unw_backtrace((void **)ips, want);
	int skip = 0;
	while (skip < n && vrt_addr_is_ours((void *)(uintptr_t)ips[skip]))
		skip++;
	int kept = n - skip < depth ? n - skip : depth;
	if (kept > 0 && (skip || !direct))
		memmove(out, ips + skip, (size_t)kept * sizeof(uint64_t));
	return kept > 0 ? kept : 0;
}

void vrt_stacks_init(void) { unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD); }

/*
 * A fork section (internal.h): libunwind takes dl_iterate_phdr's lock and its own, the Python
 * walk python.c's intern lock. While a fork is being prepared the event goes without a stack.
 */
void vrt_stack_capture(struct vrt_capture *c)
{
	struct vrt_tbuf *b = vrt_tls.buf;
	c->n_native = c->n_python = 0;
	/* Without stacks there is nothing to walk: no fork section (its seq_cst store is a full
	 * barrier), the empty stack's name only. */
	bool walk = vrt_cfg.stack_depth || vrt_cfg.python;
	if (walk && VRT_LIKELY(b) && vrt_fork_section_enter(&b->in_section)) {
		c->n_native = vrt_cfg.stack_depth ? capture_native(c->native, vrt_cfg.stack_depth) : 0;
		c->n_python = vrt_cfg.python ? vrt_python_capture(c->python, vrt_cfg.python_depth) : 0;
		vrt_fork_section_leave(&b->in_section);
	}
	c->hash = vrt_hash_frames(c->native, c->n_native, c->python, c->n_python);
}

uint32_t vrt_stack_cache_lookup(struct vrt_tbuf *b, uint64_t hash)
{
	struct vrt_stack_cache_entry *e = &b->cache[hash & (VRT_STACK_CACHE_SLOTS - 1)];
	uint64_t h1 = atomic_load_explicit(&e->hash, memory_order_acquire);
	if (h1 != hash)
		return 0;
	uint32_t id = atomic_load_explicit(&e->id, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&e->hash, memory_order_relaxed) == h1 ? id : 0;
}

void vrt_stack_cache_fill(struct vrt_tbuf *b, uint64_t hash, uint32_t id)
{
	struct vrt_stack_cache_entry *e = &b->cache[hash & (VRT_STACK_CACHE_SLOTS - 1)];
	atomic_store_explicit(&e->hash, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&e->id, id, memory_order_relaxed);
	atomic_store_explicit(&e->hash, hash, memory_order_release);
}
