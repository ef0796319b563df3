/* SPDX-License-Identifier: MIT */
/*
 * Runtime API hooks. A shared libcudart call reaches us here first; the nested driver call it
 * makes finds the thread busy and passes straight through, so each allocation is recorded once,
 * under the name the program used. A runtime call from a signal handler that interrupted one of
 * these is recorded too (enum vrt_busy). Static runtimes never come here: the driver hooks see them.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "hooks.h"

#define MISSING cudaErrorInitializationError

static bool is_oom(cudaError_t r) { return r == cudaErrorMemoryAllocation; }

int vrt_current_device_runtime(void)
{
	static _Atomic(void *) get_device_fn;
	static _Atomic int looked;
	if (!atomic_load_explicit(&get_device_fn, memory_order_acquire) && !atomic_exchange(&looked, 1))
		atomic_store_explicit(&get_device_fn, vrt_real_dlsym(RTLD_NEXT, "cudaGetDevice"), memory_order_release);
	cudaError_t (*get_device)(int *) = (cudaError_t (*)(int *))atomic_load_explicit(&get_device_fn, memory_order_acquire);
	int dev;
	if (get_device && get_device(&dev) == cudaSuccess)
		return dev;
	/* A runtime loaded RTLD_LOCAL (ctypes, a plugin's private copy) is invisible to RTLD_NEXT.
	 * It made its device's primary context current on this thread to allocate: ask the
	 * driver, which it reached through the lookups we wrap. */
	return vrt_current_device_driver();
}

static void alloc_done(uint16_t api, cudaError_t r, uint8_t kind, int device, void *p, uint64_t size, uint64_t aux,
		       uint64_t stream)
{
	if (r == cudaSuccess && !p)
		return; /* cudaMalloc(&p, 0) succeeds with NULL: nothing was allocated, nothing to free */
	vrt_record_alloc(api, r, is_oom(r), VRT_OP_ALLOC, kind, device, (uint64_t)(uintptr_t)p, size, aux, stream);
}

static cudaError_t release(uint16_t api, void *real, void *p, cudaStream_t s, bool with_stream)
{
	int guard;
	cudaError_t (*fn1)(void *) = real;
	cudaError_t (*fn2)(void *, cudaStream_t) = real;
	if (!p || !(guard = vrt_enter_runtime()))
		return with_stream ? fn2(p, s) : fn1(p);
	uint64_t ts = vrt_now_ns();
	cudaError_t r = with_stream ? fn2(p, s) : fn1(p);
	if (r == cudaSuccess)
		vrt_record_release(VRT_OP_FREE, api, ts, (uint64_t)(uintptr_t)p, 0, (uint64_t)(uintptr_t)s);
	vrt_leave(guard);
	return r;
}

/* ---- device ----------------------------------------------------------------------------- */

static cudaError_t hook_cudaMalloc(void *real, void **p, size_t size)
{
	int guard;
	cudaError_t (*fn)(void **, size_t) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, size);
	cudaError_t r = fn(p, size);
	alloc_done(VRT_API_CUDA_MALLOC, r, VRT_KIND_DEVICE, vrt_current_device_runtime(), r ? NULL : *p, size, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaMalloc, cudaError_t, (void **p, size_t size), (p, size), MISSING)

static cudaError_t hook_cudaMallocPitch(void *real, void **p, size_t *pitch, size_t width, size_t height)
{
	int guard;
	cudaError_t (*fn)(void **, size_t *, size_t, size_t) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, pitch, width, height);
	cudaError_t r = fn(p, pitch, width, height);
	uint64_t size = r ? (uint64_t)width * height : (uint64_t)*pitch * height;
	alloc_done(VRT_API_CUDA_MALLOC_PITCH, r, VRT_KIND_DEVICE, vrt_current_device_runtime(), r ? NULL : *p, size,
		   width, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaMallocPitch, cudaError_t, (void **p, size_t *pitch, size_t width, size_t height),
		(p, pitch, width, height), MISSING)

static cudaError_t hook_cudaMalloc3D(void *real, struct cudaPitchedPtr *pp, struct cudaExtent extent)
{
	int guard;
	cudaError_t (*fn)(struct cudaPitchedPtr *, struct cudaExtent) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(pp, extent);
	cudaError_t r = fn(pp, extent);
	uint64_t rows = (uint64_t)extent.height * (extent.depth ? extent.depth : 1);
	uint64_t size = r ? extent.width * rows : pp->pitch * rows;
	alloc_done(VRT_API_CUDA_MALLOC_3D, r, VRT_KIND_DEVICE, vrt_current_device_runtime(), r ? NULL : pp->ptr, size,
		   extent.width, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaMalloc3D, cudaError_t, (struct cudaPitchedPtr * pp, struct cudaExtent extent), (pp, extent),
		MISSING)

static cudaError_t hook_cudaMallocManaged(void *real, void **p, size_t size, unsigned int flags)
{
	int guard;
	cudaError_t (*fn)(void **, size_t, unsigned int) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, size, flags);
	cudaError_t r = fn(p, size, flags);
	alloc_done(VRT_API_CUDA_MALLOC_MANAGED, r, VRT_KIND_MANAGED, vrt_current_device_runtime(), r ? NULL : *p, size,
		   flags, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaMallocManaged, cudaError_t, (void **p, size_t size, unsigned int flags), (p, size, flags),
		MISSING)

static cudaError_t hook_cudaFree(void *real, void *p) { return release(VRT_API_CUDA_FREE, real, p, NULL, false); }
VRT_DEFINE_HOOK(cudaFree, cudaError_t, (void *p), (p), MISSING)

/* ---- stream-ordered --------------------------------------------------------------------- */

static cudaError_t alloc_async(uint16_t api, void *real, void **p, size_t size, cudaMemPool_t pool, cudaStream_t s)
{
	int guard;
	cudaError_t (*fn)(void **, size_t, cudaStream_t) = real;
	cudaError_t (*fn_pool)(void **, size_t, cudaMemPool_t, cudaStream_t) = real;
	if (!(guard = vrt_enter_runtime()))
		return pool ? fn_pool(p, size, pool, s) : fn(p, size, s);
	cudaError_t r = pool ? fn_pool(p, size, pool, s) : fn(p, size, s);
	alloc_done(api, r, VRT_KIND_DEVICE, vrt_current_device_runtime(), r ? NULL : *p, size, (uint64_t)(uintptr_t)pool,
		   (uint64_t)(uintptr_t)s);
	vrt_leave(guard);
	return r;
}

static cudaError_t hook_cudaMallocAsync(void *real, void **p, size_t n, cudaStream_t s)
{
	return alloc_async(VRT_API_CUDA_MALLOC_ASYNC, real, p, n, NULL, s);
}
VRT_DEFINE_HOOK(cudaMallocAsync, cudaError_t, (void **p, size_t n, cudaStream_t s), (p, n, s), MISSING)

static cudaError_t hook_cudaMallocAsync_ptsz(void *real, void **p, size_t n, cudaStream_t s)
{
	return alloc_async(VRT_API_CUDA_MALLOC_ASYNC, real, p, n, NULL, s);
}
VRT_DEFINE_HOOK(cudaMallocAsync_ptsz, cudaError_t, (void **p, size_t n, cudaStream_t s), (p, n, s), MISSING)

static cudaError_t hook_cudaMallocFromPoolAsync(void *real, void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
	return alloc_async(VRT_API_CUDA_MALLOC_FROM_POOL_ASYNC, real, p, n, pool, s);
}
VRT_DEFINE_HOOK(cudaMallocFromPoolAsync, cudaError_t, (void **p, size_t n, cudaMemPool_t pool, cudaStream_t s),
		(p, n, pool, s), MISSING)

static cudaError_t hook_cudaMallocFromPoolAsync_ptsz(void *real, void **p, size_t n, cudaMemPool_t pool,
						     cudaStream_t s)
{
	return alloc_async(VRT_API_CUDA_MALLOC_FROM_POOL_ASYNC, real, p, n, pool, s);
}
VRT_DEFINE_HOOK(cudaMallocFromPoolAsync_ptsz, cudaError_t, (void **p, size_t n, cudaMemPool_t pool, cudaStream_t s),
		(p, n, pool, s), MISSING)

static cudaError_t hook_cudaFreeAsync(void *real, void *p, cudaStream_t s)
{
	return release(VRT_API_CUDA_FREE_ASYNC, real, p, s, true);
}
VRT_DEFINE_HOOK(cudaFreeAsync, cudaError_t, (void *p, cudaStream_t s), (p, s), MISSING)

static cudaError_t hook_cudaFreeAsync_ptsz(void *real, void *p, cudaStream_t s)
{
	return release(VRT_API_CUDA_FREE_ASYNC, real, p, s, true);
}
VRT_DEFINE_HOOK(cudaFreeAsync_ptsz, cudaError_t, (void *p, cudaStream_t s), (p, s), MISSING)

/* ---- pinned host ------------------------------------------------------------------------ */

static cudaError_t hook_cudaMallocHost(void *real, void **p, size_t size)
{
	int guard;
	cudaError_t (*fn)(void **, size_t) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, size);
	cudaError_t r = fn(p, size);
	alloc_done(VRT_API_CUDA_MALLOC_HOST, r, VRT_KIND_HOST_PINNED, -1, r ? NULL : *p, size, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaMallocHost, cudaError_t, (void **p, size_t size), (p, size), MISSING)

static cudaError_t hook_cudaHostAlloc(void *real, void **p, size_t size, unsigned int flags)
{
	int guard;
	cudaError_t (*fn)(void **, size_t, unsigned int) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, size, flags);
	cudaError_t r = fn(p, size, flags);
	alloc_done(VRT_API_CUDA_HOST_ALLOC, r, VRT_KIND_HOST_PINNED, -1, r ? NULL : *p, size, flags, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaHostAlloc, cudaError_t, (void **p, size_t size, unsigned int flags), (p, size, flags), MISSING)

static cudaError_t hook_cudaHostRegister(void *real, void *p, size_t size, unsigned int flags)
{
	int guard;
	cudaError_t (*fn)(void *, size_t, unsigned int) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, size, flags);
	cudaError_t r = fn(p, size, flags);
	alloc_done(VRT_API_CUDA_HOST_REGISTER, r, VRT_KIND_HOST_PINNED, -1, p, size, flags, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaHostRegister, cudaError_t, (void *p, size_t size, unsigned int flags), (p, size, flags),
		MISSING)

static cudaError_t hook_cudaFreeHost(void *real, void *p) { return release(VRT_API_CUDA_FREE_HOST, real, p, NULL, false); }
VRT_DEFINE_HOOK(cudaFreeHost, cudaError_t, (void *p), (p), MISSING)

static cudaError_t hook_cudaHostUnregister(void *real, void *p)
{
	return release(VRT_API_CUDA_HOST_UNREGISTER, real, p, NULL, false);
}
VRT_DEFINE_HOOK(cudaHostUnregister, cudaError_t, (void *p), (p), MISSING)

/* ---- IPC -------------------------------------------------------------------------------- */

static cudaError_t hook_cudaIpcOpenMemHandle(void *real, void **p, cudaIpcMemHandle_t h, unsigned int flags)
{
	int guard;
	cudaError_t (*fn)(void **, cudaIpcMemHandle_t, unsigned int) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p, h, flags);
	cudaError_t r = fn(p, h, flags);
	if (r == cudaSuccess) {
		static _Atomic(void *) get_range_fn;
		if (!atomic_load_explicit(&get_range_fn, memory_order_acquire))
			atomic_store_explicit(&get_range_fn, vrt_driver_fn("cuMemGetAddressRange", 3020), memory_order_release);
		int (*get_range)(unsigned long long *, size_t *, unsigned long long) =
			(int (*)(unsigned long long *, size_t *, unsigned long long))atomic_load_explicit(&get_range_fn, memory_order_acquire);
		unsigned long long base;
		size_t size = 0;
		if (get_range && get_range(&base, &size, (uintptr_t)*p))
			size = 0;
		struct vrt_event ev = { .op = VRT_OP_IMPORT, .api = VRT_API_CUDA_IPC_OPEN,
					.device = (int16_t)vrt_current_device_runtime(),
					.addr = (uint64_t)(uintptr_t)*p, .size = size, .aux = flags };
		vrt_emit(&ev, true);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaIpcOpenMemHandle, cudaError_t, (void **p, cudaIpcMemHandle_t h, unsigned int flags), (p, h, flags),
		MISSING)

static cudaError_t hook_cudaIpcCloseMemHandle(void *real, void *p)
{
	int guard;
	cudaError_t (*fn)(void *) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(p);
	uint64_t ts = vrt_now_ns();
	cudaError_t r = fn(p);
	if (r == cudaSuccess)
		vrt_record_release(VRT_OP_IMPORT_CLOSE, VRT_API_CUDA_IPC_CLOSE, ts, (uint64_t)(uintptr_t)p, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cudaIpcCloseMemHandle, cudaError_t, (void *p), (p), MISSING)

static cudaError_t hook_cudaDeviceReset(void *real)
{
	int guard;
	cudaError_t (*fn)(void) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn();
	int dev = vrt_current_device_runtime();
	cudaError_t r = fn();
	if (r == cudaSuccess) {
		struct vrt_event ev = { .op = VRT_OP_CONTEXT, .api = VRT_API_CU_PRIMARY_CTX_RESET, .device = (int16_t)dev };
		vrt_emit(&ev, false);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK0(cudaDeviceReset, cudaError_t, MISSING)

/* ---- stream capture: what a thread allocates while it captures is made for a CUDA graph ---- */

static cudaError_t capture_begun(uint16_t api, cudaError_t r, cudaStream_t s)
{
	if (r == cudaSuccess)
		vrt_record_capture(VRT_OP_CAPTURE_BEGIN, api, vrt_current_device_runtime(), (uint64_t)(uintptr_t)s, 0);
	return r;
}

static cudaError_t begin_capture(void *real, cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	int guard;
	cudaError_t (*fn)(cudaStream_t, enum cudaStreamCaptureMode) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(s, mode);
	cudaError_t r = capture_begun(VRT_API_CUDA_STREAM_BEGIN_CAPTURE, fn(s, mode), s);
	vrt_leave(guard);
	return r;
}

static cudaError_t hook_cudaStreamBeginCapture(void *real, cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	return begin_capture(real, s, mode);
}
VRT_DEFINE_HOOK(cudaStreamBeginCapture, cudaError_t, (cudaStream_t s, enum cudaStreamCaptureMode mode), (s, mode),
		MISSING)

static cudaError_t hook_cudaStreamBeginCapture_ptsz(void *real, cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	return begin_capture(real, s, mode);
}
VRT_DEFINE_HOOK(cudaStreamBeginCapture_ptsz, cudaError_t, (cudaStream_t s, enum cudaStreamCaptureMode mode),
		(s, mode), MISSING)

static cudaError_t begin_capture_to_graph(void *real, cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,
					  const cudaGraphEdgeData *data, size_t n, enum cudaStreamCaptureMode mode)
{
	int guard;
	cudaError_t (*fn)(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *, size_t,
			  enum cudaStreamCaptureMode) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(s, g, deps, data, n, mode);
	cudaError_t r = capture_begun(VRT_API_CUDA_STREAM_BEGIN_CAPTURE_TO_GRAPH, fn(s, g, deps, data, n, mode), s);
	vrt_leave(guard);
	return r;
}

static cudaError_t hook_cudaStreamBeginCaptureToGraph(void *real, cudaStream_t s, cudaGraph_t g,
						      const cudaGraphNode_t *deps, const cudaGraphEdgeData *data,
						      size_t n, enum cudaStreamCaptureMode mode)
{
	return begin_capture_to_graph(real, s, g, deps, data, n, mode);
}
VRT_DEFINE_HOOK(cudaStreamBeginCaptureToGraph, cudaError_t,
		(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps, const cudaGraphEdgeData *data, size_t n,
		 enum cudaStreamCaptureMode mode),
		(s, g, deps, data, n, mode), MISSING)

static cudaError_t hook_cudaStreamBeginCaptureToGraph_ptsz(void *real, cudaStream_t s, cudaGraph_t g,
							   const cudaGraphNode_t *deps, const cudaGraphEdgeData *data,
							   size_t n, enum cudaStreamCaptureMode mode)
{
	return begin_capture_to_graph(real, s, g, deps, data, n, mode);
}
VRT_DEFINE_HOOK(cudaStreamBeginCaptureToGraph_ptsz, cudaError_t,
		(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps, const cudaGraphEdgeData *data, size_t n,
		 enum cudaStreamCaptureMode mode),
		(s, g, deps, data, n, mode), MISSING)

/* The capture ends whatever the result (an invalidated one is ended and its graph not made). */
static cudaError_t end_capture(void *real, cudaStream_t s, cudaGraph_t *g)
{
	int guard;
	cudaError_t (*fn)(cudaStream_t, cudaGraph_t *) = real;
	if (!(guard = vrt_enter_runtime()))
		return fn(s, g);
	cudaError_t r = fn(s, g);
	vrt_record_capture(VRT_OP_CAPTURE_END, VRT_API_CUDA_STREAM_END_CAPTURE, vrt_current_device_runtime(),
			   (uint64_t)(uintptr_t)s, (int)r);
	vrt_leave(guard);
	return r;
}

static cudaError_t hook_cudaStreamEndCapture(void *real, cudaStream_t s, cudaGraph_t *g)
{
	return end_capture(real, s, g);
}
VRT_DEFINE_HOOK(cudaStreamEndCapture, cudaError_t, (cudaStream_t s, cudaGraph_t *g), (s, g), MISSING)

static cudaError_t hook_cudaStreamEndCapture_ptsz(void *real, cudaStream_t s, cudaGraph_t *g)
{
	return end_capture(real, s, g);
}
VRT_DEFINE_HOOK(cudaStreamEndCapture_ptsz, cudaError_t, (cudaStream_t s, cudaGraph_t *g), (s, g), MISSING)

const struct vrt_hook_def vrt_runtime_hooks[] = {
	VRT_HOOK_DEF(cudaMalloc, NULL, 0, 0, CUDA_MALLOC),
	VRT_HOOK_DEF(cudaMallocPitch, NULL, 0, 0, CUDA_MALLOC_PITCH),
	VRT_HOOK_DEF(cudaMalloc3D, NULL, 0, 0, CUDA_MALLOC_3D),
	VRT_HOOK_DEF(cudaMallocManaged, NULL, 0, 0, CUDA_MALLOC_MANAGED),
	VRT_HOOK_DEF(cudaFree, NULL, 0, 0, CUDA_FREE),
	VRT_HOOK_DEF(cudaMallocAsync, NULL, 0, 0, CUDA_MALLOC_ASYNC),
	VRT_HOOK_DEF(cudaMallocAsync_ptsz, NULL, 0, 1, CUDA_MALLOC_ASYNC),
	VRT_HOOK_DEF(cudaMallocFromPoolAsync, NULL, 0, 0, CUDA_MALLOC_FROM_POOL_ASYNC),
	VRT_HOOK_DEF(cudaMallocFromPoolAsync_ptsz, NULL, 0, 1, CUDA_MALLOC_FROM_POOL_ASYNC),
	VRT_HOOK_DEF(cudaFreeAsync, NULL, 0, 0, CUDA_FREE_ASYNC),
	VRT_HOOK_DEF(cudaFreeAsync_ptsz, NULL, 0, 1, CUDA_FREE_ASYNC),
	VRT_HOOK_DEF(cudaMallocHost, NULL, 0, 0, CUDA_MALLOC_HOST),
	VRT_HOOK_DEF(cudaHostAlloc, NULL, 0, 0, CUDA_HOST_ALLOC),
	VRT_HOOK_DEF(cudaHostRegister, NULL, 0, 0, CUDA_HOST_REGISTER),
	VRT_HOOK_DEF(cudaFreeHost, NULL, 0, 0, CUDA_FREE_HOST),
	VRT_HOOK_DEF(cudaHostUnregister, NULL, 0, 0, CUDA_HOST_UNREGISTER),
	VRT_HOOK_DEF(cudaIpcOpenMemHandle, NULL, 0, 0, CUDA_IPC_OPEN),
	VRT_HOOK_DEF(cudaIpcCloseMemHandle, NULL, 0, 0, CUDA_IPC_CLOSE),
	VRT_HOOK_DEF(cudaDeviceReset, NULL, 0, 0, CU_PRIMARY_CTX_RESET),
	VRT_HOOK_DEF(cudaStreamBeginCapture, NULL, 0, 0, CUDA_STREAM_BEGIN_CAPTURE),
	VRT_HOOK_DEF(cudaStreamBeginCapture_ptsz, NULL, 0, 1, CUDA_STREAM_BEGIN_CAPTURE),
	VRT_HOOK_DEF(cudaStreamBeginCaptureToGraph, NULL, 0, 0, CUDA_STREAM_BEGIN_CAPTURE_TO_GRAPH),
	VRT_HOOK_DEF(cudaStreamBeginCaptureToGraph_ptsz, NULL, 0, 1, CUDA_STREAM_BEGIN_CAPTURE_TO_GRAPH),
	VRT_HOOK_DEF(cudaStreamEndCapture, NULL, 0, 0, CUDA_STREAM_END_CAPTURE),
	VRT_HOOK_DEF(cudaStreamEndCapture_ptsz, NULL, 0, 1, CUDA_STREAM_END_CAPTURE),
};
const int vrt_n_runtime_hooks = sizeof(vrt_runtime_hooks) / sizeof(vrt_runtime_hooks[0]);
