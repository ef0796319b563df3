/* SPDX-License-Identifier: MIT */
/*
 * Stack capture in the hook: native frames from unwind.c's call-frame walk (libunwind's
 * unw_backtrace for the stacks it hands over), minus our own, and the thread's Python frames;
 * a 64-bit hash names the whole stack (stack_hash.h). The per-thread cache maps that hash to
 * the id the collector interned earlier, so a repeated call site publishes 80 bytes, not the
 * frames. (Two different stacks would have to collide in 64 bits to be confused.)
 *
 * The hash is made of what the walks read, not of interned names: return addresses, and each
 * Python frame's code object (with what tells a reused address apart) and instruction offset.
 * Python frames are interned (python.c's tables, under its lock) only when the cache misses and
 * the frames must be published. A thread's native walk that repeats its last one (unwind.c's
 * memo) keeps that walk's part of the hash too.
 */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "stack_hash.h"
#include "unwind.h"

uint64_t vrt_hash_frames(const uint64_t *native, int n_native, const uint32_t *python, int n_python)
{
	return vrt_hash_frames_inline(native, n_native, python, n_python);
}

/* The thread's two memos share one mapping: the unwinder's, then Python's. */
static size_t memos_python_at(void) { return (vrt_unwind_memo_size() + 63) & ~(size_t)63; }
static size_t memos_size(void) { return memos_python_at() + vrt_python_memo_size(); }

/* Maps the thread's memos at its first stack (mmap: a hook may not malloc); without memory for
 * them the walks go without. Unmapped with the buffer (vrt_stack_memos_release). */
static void memos_of(struct vrt_tbuf *b)
{
	if (VRT_LIKELY(b->unwind_memo) || b->no_memo)
		return;
	void *m = mmap(NULL, memos_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		b->no_memo = true;
		return;
	}
	b->unwind_memo = m;
	b->python_memo = (struct vrt_python_memo *)((char *)m + memos_python_at());
}

void vrt_stack_memos_release(struct vrt_tbuf *b)
{
	if (b->unwind_memo)
		munmap(b->unwind_memo, memos_size());
	b->unwind_memo = NULL;
	b->python_memo = NULL;
}

/* How capture_native got its frames. */
enum native_walk {
	WALK_LIBUNWIND,
	WALK_FAST,
	WALK_FAST_SAME, /* the same frames as the thread's last fast walk */
};

/*
 * The walk goes into c->native whole, our own frames (at most 8, first) included; the kept ones
 * begin at c->native_first. A walk that repeats the thread's last fast walk keeps that walk's
 * count of our frames (b->native_first, valid with b->native_hash).
 */
static int capture_native(struct vrt_tbuf *b, struct vrt_capture *c, int depth, enum native_walk *how)
{
	_Static_assert(sizeof(void *) == sizeof(uint64_t), "return addresses are stored as 64 bits");
	_Static_assert(VRT_MAX_NATIVE + 8 <= VRT_UNWIND_MAX, "the walk takes every frame asked for");
	int want = depth + 8 < VRT_MAX_NATIVE + 8 ? depth + 8 : VRT_MAX_NATIVE + 8;
	bool same = false;
	int n = vrt_cfg.fast_unwind ? vrt_unwind(b->unwind_memo, c->native, want, &same) : -1;
	*how = n < 0 ? WALK_LIBUNWIND : same ? WALK_FAST_SAME : WALK_FAST;
	if (n < 0)
		n = unw_backtrace((void **)c->native, want);
	int skip = 0;
	if (*how == WALK_FAST_SAME && b->native_hash) {
		skip = b->native_first;
	} else {
		while (skip < n && vrt_addr_is_ours((void *)(uintptr_t)c->native[skip]))
			skip++;
	}
	int kept = n - skip < depth ? n - skip : depth;
	c->native_first = skip;
	return kept > 0 ? kept : 0;
}

void vrt_stacks_init(void)
{
	unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
	if (vrt_cfg.fast_unwind && !vrt_unwind_init(vrt_real_dlsym(RTLD_DEFAULT, "_dl_find_object")))
		vrt_cfg.fast_unwind = false;
}

/* The native part of the hash, kept with the last fast walk it was made of (0: none kept). */
static uint64_t native_hash(struct vrt_tbuf *b, const struct vrt_capture *c, enum native_walk how)
{
	if (how == WALK_FAST_SAME && b->native_hash)
		return b->native_hash;
	uint64_t h = vrt_hash_native(c->native + c->native_first, c->n_native);
	b->native_hash = how == WALK_LIBUNWIND ? 0 : h; /* the memo holds the last fast walk only */
	b->native_first = c->native_first;
	return h;
}

/*
 * A fork section (internal.h): libunwind takes dl_iterate_phdr's lock and its own. While a fork
 * is being prepared the event goes without a stack.
 */
void vrt_stack_capture(struct vrt_capture *c)
{
	struct vrt_tbuf *b = vrt_tls.buf;
	enum native_walk how = WALK_LIBUNWIND;
	c->n_native = c->native_first = c->n_python = c->n_pyraw = 0;
	struct vrt_hash_stream python = vrt_hash_stream_begin();
	if (VRT_LIKELY(b) && vrt_fork_section_enter(&b->in_section)) {
		memos_of(b);
		c->n_native = vrt_cfg.stack_depth ? capture_native(b, c, vrt_cfg.stack_depth, &how) : 0;
		c->n_pyraw = vrt_cfg.python ? vrt_python_walk(b->python_memo, c->pyraw, &python, vrt_cfg.python_depth) : 0;
		vrt_fork_section_leave(&b->in_section);
	}
	uint64_t native = b ? native_hash(b, c, how) : vrt_hash_native(NULL, 0);
	c->hash = vrt_hash_stream_end(&python, native, c->n_native);
}

bool vrt_stack_intern_python(struct vrt_capture *c)
{
	struct vrt_tbuf *b = vrt_tls.buf;
	c->n_python = 0;
	if (!c->n_pyraw)
		return true;
	if (!b || !vrt_fork_section_enter(&b->in_section))
		return false;
	c->n_python = vrt_python_frame_ids(c->pyraw, c->n_pyraw, c->python);
	vrt_fork_section_leave(&b->in_section);
	return true;
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
