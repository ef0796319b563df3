/* SPDX-License-Identifier: MIT */
/*
 * dlclose: a CUDA runtime unloaded takes its context with it. The real runtime's teardown
 * destroys the primary contexts it retained, and every allocation in them, through a path no
 * lookup of ours sees (on the H200 no release went through cuDevicePrimaryCtxRelease, yet each
 * copy of the runtime reloaded got the previous copy's addresses). So around every dlclose the
 * devices' primary contexts are asked for their state: one active before and inactive after was
 * destroyed by that unload, and is recorded as a context reset (hooks_driver.c records the
 * releases it does see the same way).
 *
 * Only the traced process, outside our own code (vrt_enter), and only once the driver is
 * initialized: before that no context exists. The state is asked of the driver as loaded before
 * the call; if the driver itself was unloaded, every context it had went with it.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>

#include "internal.h"
#include "libc_dl.h"
#include "unwind.h"

#define MAX_WATCHED_DEVICES 64

typedef CUresult (*get_state_fn)(CUdevice, unsigned int *, int *);
typedef CUresult (*get_count_fn)(int *);

struct context_states {
	int n;
	bool active[MAX_WATCHED_DEVICES];
};

static void *real_dlclose_fn(void)
{
	static _Atomic(void *) fn;
	void *f = atomic_load_explicit(&fn, memory_order_acquire);
	if (!f) {
		f = vrt_real_dlsym(RTLD_NEXT, "dlclose");
		atomic_store_explicit(&fn, f, memory_order_release);
	}
	return f;
}

/* false when there is nothing to compare: no driver yet, or no device. */
static bool read_states(struct context_states *s)
{
	get_count_fn count = (get_count_fn)vrt_driver_fn("cuDeviceGetCount", 2000);
	get_state_fn state = (get_state_fn)vrt_driver_fn("cuDevicePrimaryCtxGetState", 7000);
	s->n = 0;
	if (!count || !state || count(&s->n) != CUDA_SUCCESS || s->n <= 0)
		return false;
	if (s->n > MAX_WATCHED_DEVICES)
		s->n = MAX_WATCHED_DEVICES;
	for (int d = 0; d < s->n; d++) {
		unsigned int flags = 0;
		int active = 0;
		s->active[d] = state(d, &flags, &active) == CUDA_SUCCESS && active;
	}
	return true;
}

static bool driver_still_loaded(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return false;
	vrt_libc_dlclose(h); /* NOLOAD took a reference: ours, closed as all of ours are */
	return true;
}

static void record_destroyed(const struct context_states *before)
{
	struct context_states after = { 0 };
	bool driver = driver_still_loaded();
	if (driver && !read_states(&after))
		return;
	for (int d = 0; d < before->n; d++) {
		if (!before->active[d] || (driver && d < after.n && after.active[d]))
			continue;
		struct vrt_event ev = { .op = VRT_OP_CONTEXT, .api = VRT_API_CU_PRIMARY_CTX_RELEASE, .device = (int16_t)d };
		vrt_emit(&ev, false);
	}
}

/* An unloaded object's addresses may come back holding other code: the unwinder's shapes read
 * before or during the unload are read again (unwind.c), whoever closes what. */
static int close_object(int (*fn)(void *), void *handle)
{
	vrt_unwind_forget();
	int rc = fn(handle);
	vrt_unwind_forget();
	return rc;
}

VRT_EXPORT int dlclose(void *handle)
{
	int (*fn)(void *) = real_dlclose_fn();
	if (!fn)
		return -1;
	int guard;
	if (atomic_load(&vrt_state) != VRT_STATE_READY || !(guard = vrt_enter()))
		return close_object(fn, handle);
	struct context_states before;
	/* the driver's functions are asked only while it is loaded: an earlier dlclose may have
	 * unloaded it, and the pointers we keep into it with it */
	bool watched = driver_still_loaded() && read_states(&before);
	int rc = close_object(fn, handle);
	if (rc == 0 && watched)
		record_destroyed(&before);
	vrt_leave(guard);
	return rc;
}
