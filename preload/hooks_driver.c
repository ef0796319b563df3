/* SPDX-License-Identifier: MIT */
/*
 * Driver API hooks: the one choke point every runtime (shared or static cudart), PyTorch's
 * expandable segments, NCCL, JAX and CuPy go through. Results pass through unchanged.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>

#include "hooks.h"

#define MISSING CUDA_ERROR_NOT_INITIALIZED

static bool is_oom(CUresult r) { return r == CUDA_ERROR_OUT_OF_MEMORY; }

int vrt_current_device_driver(void)
{
	static _Atomic(void *) ctx_get_device_fn;
	static _Atomic uint64_t next_try_ns;
	if (!atomic_load_explicit(&ctx_get_device_fn, memory_order_acquire) && vrt_now_ns() >= atomic_load(&next_try_ns)) {
		/* The driver may not be reachable yet: retry, but not on every allocation. */
		atomic_store_explicit(&ctx_get_device_fn, vrt_driver_fn("cuCtxGetDevice", 2000), memory_order_release);
		atomic_store(&next_try_ns, vrt_now_ns() + 100000000ull);
	}
	CUresult (*ctx_get_device)(CUdevice *) =
		(CUresult (*)(CUdevice *))atomic_load_explicit(&ctx_get_device_fn, memory_order_acquire);
	CUdevice dev;
	if (ctx_get_device && ctx_get_device(&dev) == CUDA_SUCCESS)
		return dev;
	return -1;
}

static void alloc_done(uint16_t api, CUresult r, uint8_t kind, int device, uint64_t addr, uint64_t size, uint64_t aux,
		       uint64_t stream)
{
	vrt_record_alloc(api, r, is_oom(r), VRT_OP_ALLOC, kind, device, addr, size, aux, stream);
}

/* ---- device memory ---------------------------------------------------------------------- */

static CUresult hook_cuMemAlloc_v2(void *real, CUdeviceptr *dptr, size_t size)
{
	int guard;
	CUresult (*fn)(CUdeviceptr *, size_t) = real;
	if (!(guard = vrt_enter()))
		return fn(dptr, size);
	CUresult r = fn(dptr, size);
	alloc_done(VRT_API_CU_MEM_ALLOC, r, VRT_KIND_DEVICE, vrt_current_device_driver(), r ? 0 : *dptr, size, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemAlloc_v2, CUresult, (CUdeviceptr * dptr, size_t size), (dptr, size), MISSING)

static CUresult hook_cuMemAllocPitch_v2(void *real, CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
					unsigned int elem)
{
	int guard;
	CUresult (*fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int) = real;
	if (!(guard = vrt_enter()))
		return fn(dptr, pitch, width, height, elem);
	CUresult r = fn(dptr, pitch, width, height, elem);
	uint64_t size = r ? (uint64_t)width * height : (uint64_t)*pitch * height;
	alloc_done(VRT_API_CU_MEM_ALLOC_PITCH, r, VRT_KIND_DEVICE, vrt_current_device_driver(), r ? 0 : *dptr, size,
		   width, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemAllocPitch_v2, CUresult,
		(CUdeviceptr * dptr, size_t *pitch, size_t width, size_t height, unsigned int elem),
		(dptr, pitch, width, height, elem), MISSING)

static CUresult hook_cuMemAllocManaged(void *real, CUdeviceptr *dptr, size_t size, unsigned int flags)
{
	int guard;
	CUresult (*fn)(CUdeviceptr *, size_t, unsigned int) = real;
	if (!(guard = vrt_enter()))
		return fn(dptr, size, flags);
	CUresult r = fn(dptr, size, flags);
	alloc_done(VRT_API_CU_MEM_ALLOC_MANAGED, r, VRT_KIND_MANAGED, vrt_current_device_driver(), r ? 0 : *dptr, size,
		   flags, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemAllocManaged, CUresult, (CUdeviceptr * dptr, size_t size, unsigned int flags),
		(dptr, size, flags), MISSING)

static CUresult free_common(uint16_t api, CUresult (*fn)(CUdeviceptr, CUstream), CUresult (*fn1)(CUdeviceptr),
			    CUdeviceptr p, CUstream s)
{
	int guard;
	if (!p || !(guard = vrt_enter()))
		return fn ? fn(p, s) : fn1(p);
	uint64_t ts = vrt_now_ns();
	CUresult r = fn ? fn(p, s) : fn1(p);
	if (r == CUDA_SUCCESS)
		vrt_record_release(VRT_OP_FREE, api, ts, p, 0, (uint64_t)(uintptr_t)s);
	vrt_leave(guard);
	return r;
}

static CUresult hook_cuMemFree_v2(void *real, CUdeviceptr p) { return free_common(VRT_API_CU_MEM_FREE, NULL, real, p, 0); }
VRT_DEFINE_HOOK(cuMemFree_v2, CUresult, (CUdeviceptr p), (p), MISSING)

/* ---- stream-ordered --------------------------------------------------------------------- */

static CUresult alloc_async(uint16_t api, void *real, CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
	int guard;
	CUresult r;
	if (!(guard = vrt_enter()))
		return pool ? ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real)(dptr, size, pool, s)
			    : ((CUresult(*)(CUdeviceptr *, size_t, CUstream))real)(dptr, size, s);
	r = pool ? ((CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real)(dptr, size, pool, s)
		 : ((CUresult(*)(CUdeviceptr *, size_t, CUstream))real)(dptr, size, s);
	alloc_done(api, r, VRT_KIND_DEVICE, vrt_current_device_driver(), r ? 0 : *dptr, size, (uint64_t)(uintptr_t)pool,
		   (uint64_t)(uintptr_t)s);
	vrt_leave(guard);
	return r;
}

static CUresult hook_cuMemAllocAsync(void *real, CUdeviceptr *d, size_t n, CUstream s)
{
	return alloc_async(VRT_API_CU_MEM_ALLOC_ASYNC, real, d, n, NULL, s);
}
VRT_DEFINE_HOOK(cuMemAllocAsync, CUresult, (CUdeviceptr * d, size_t n, CUstream s), (d, n, s), MISSING)

static CUresult hook_cuMemAllocAsync_ptsz(void *real, CUdeviceptr *d, size_t n, CUstream s)
{
	return alloc_async(VRT_API_CU_MEM_ALLOC_ASYNC_PTSZ, real, d, n, NULL, s);
}
VRT_DEFINE_HOOK(cuMemAllocAsync_ptsz, CUresult, (CUdeviceptr * d, size_t n, CUstream s), (d, n, s), MISSING)

static CUresult hook_cuMemAllocFromPoolAsync(void *real, CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s)
{
	return alloc_async(VRT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC, real, d, n, pool, s);
}
VRT_DEFINE_HOOK(cuMemAllocFromPoolAsync, CUresult, (CUdeviceptr * d, size_t n, CUmemoryPool pool, CUstream s),
		(d, n, pool, s), MISSING)

static CUresult hook_cuMemAllocFromPoolAsync_ptsz(void *real, CUdeviceptr *d, size_t n, CUmemoryPool pool,
						  CUstream s)
{
	return alloc_async(VRT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ, real, d, n, pool, s);
}
VRT_DEFINE_HOOK(cuMemAllocFromPoolAsync_ptsz, CUresult, (CUdeviceptr * d, size_t n, CUmemoryPool pool, CUstream s),
		(d, n, pool, s), MISSING)

static CUresult hook_cuMemFreeAsync(void *real, CUdeviceptr p, CUstream s)
{
	return free_common(VRT_API_CU_MEM_FREE_ASYNC, real, NULL, p, s);
}
VRT_DEFINE_HOOK(cuMemFreeAsync, CUresult, (CUdeviceptr p, CUstream s), (p, s), MISSING)

static CUresult hook_cuMemFreeAsync_ptsz(void *real, CUdeviceptr p, CUstream s)
{
	return free_common(VRT_API_CU_MEM_FREE_ASYNC_PTSZ, real, NULL, p, s);
}
VRT_DEFINE_HOOK(cuMemFreeAsync_ptsz, CUresult, (CUdeviceptr p, CUstream s), (p, s), MISSING)

/* ---- pinned host ------------------------------------------------------------------------ */

static CUresult hook_cuMemAllocHost_v2(void *real, void **pp, size_t size)
{
	int guard;
	CUresult (*fn)(void **, size_t) = real;
	if (!(guard = vrt_enter()))
		return fn(pp, size);
	CUresult r = fn(pp, size);
	alloc_done(VRT_API_CU_MEM_ALLOC_HOST, r, VRT_KIND_HOST_PINNED, -1, r ? 0 : (uint64_t)(uintptr_t)*pp, size, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemAllocHost_v2, CUresult, (void **pp, size_t size), (pp, size), MISSING)

static CUresult hook_cuMemHostAlloc(void *real, void **pp, size_t size, unsigned int flags)
{
	int guard;
	CUresult (*fn)(void **, size_t, unsigned int) = real;
	if (!(guard = vrt_enter()))
		return fn(pp, size, flags);
	CUresult r = fn(pp, size, flags);
	alloc_done(VRT_API_CU_MEM_HOST_ALLOC, r, VRT_KIND_HOST_PINNED, -1, r ? 0 : (uint64_t)(uintptr_t)*pp, size, flags,
		   0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemHostAlloc, CUresult, (void **pp, size_t size, unsigned int flags), (pp, size, flags), MISSING)

static CUresult hook_cuMemHostRegister_v2(void *real, void *p, size_t size, unsigned int flags)
{
	int guard;
	CUresult (*fn)(void *, size_t, unsigned int) = real;
	if (!(guard = vrt_enter()))
		return fn(p, size, flags);
	CUresult r = fn(p, size, flags);
	alloc_done(VRT_API_CU_MEM_HOST_REGISTER, r, VRT_KIND_HOST_PINNED, -1, (uint64_t)(uintptr_t)p, size, flags, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemHostRegister_v2, CUresult, (void *p, size_t size, unsigned int flags), (p, size, flags),
		MISSING)

static CUresult host_release(uint16_t api, CUresult (*fn)(void *), void *p)
{
	int guard;
	if (!p || !(guard = vrt_enter()))
		return fn(p);
	uint64_t ts = vrt_now_ns();
	CUresult r = fn(p);
	if (r == CUDA_SUCCESS)
		vrt_record_release(VRT_OP_FREE, api, ts, (uint64_t)(uintptr_t)p, 0, 0);
	vrt_leave(guard);
	return r;
}

static CUresult hook_cuMemFreeHost(void *real, void *p) { return host_release(VRT_API_CU_MEM_FREE_HOST, real, p); }
VRT_DEFINE_HOOK(cuMemFreeHost, CUresult, (void *p), (p), MISSING)

static CUresult hook_cuMemHostUnregister(void *real, void *p)
{
	return host_release(VRT_API_CU_MEM_HOST_UNREGISTER, real, p);
}
VRT_DEFINE_HOOK(cuMemHostUnregister, CUresult, (void *p), (p), MISSING)

/* ---- virtual memory management ---------------------------------------------------------- */

static CUresult hook_cuMemCreate(void *real, CUmemGenericAllocationHandle *h, size_t size,
				 const CUmemAllocationProp *prop, unsigned long long flags)
{
	int guard;
	CUresult (*fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = real;
	if (!(guard = vrt_enter()))
		return fn(h, size, prop, flags);
	CUresult r = fn(h, size, prop, flags);
	bool on_device = !prop || prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
	vrt_record_alloc(VRT_API_CU_MEM_CREATE, r, is_oom(r), VRT_OP_PHYS_CREATE,
			 on_device ? VRT_KIND_DEVICE : VRT_KIND_HOST_PINNED, on_device && prop ? prop->location.id : -1,
			 r ? 0 : *h, size, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemCreate, CUresult,
		(CUmemGenericAllocationHandle * h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags),
		(h, size, prop, flags), MISSING)

static CUresult hook_cuMemRetainAllocationHandle(void *real, CUmemGenericAllocationHandle *h, void *addr)
{
	int guard;
	CUresult (*fn)(CUmemGenericAllocationHandle *, void *) = real;
	if (!(guard = vrt_enter()))
		return fn(h, addr);
	CUresult r = fn(h, addr);
	if (r == CUDA_SUCCESS) /* one more reference to an existing handle: size 0, see the spec */
		vrt_record_alloc(VRT_API_CU_MEM_RETAIN_HANDLE, r, false, VRT_OP_PHYS_CREATE, VRT_KIND_DEVICE, -1, *h, 0,
				 (uint64_t)(uintptr_t)addr, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemRetainAllocationHandle, CUresult, (CUmemGenericAllocationHandle * h, void *addr), (h, addr),
		MISSING)

static CUresult hook_cuMemRelease(void *real, CUmemGenericAllocationHandle h)
{
	int guard;
	CUresult (*fn)(CUmemGenericAllocationHandle) = real;
	if (!(guard = vrt_enter()))
		return fn(h);
	uint64_t ts = vrt_now_ns();
	CUresult r = fn(h);
	if (r == CUDA_SUCCESS)
		vrt_record_release(VRT_OP_PHYS_RELEASE, VRT_API_CU_MEM_RELEASE, ts, h, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemRelease, CUresult, (CUmemGenericAllocationHandle h), (h), MISSING)

static CUresult hook_cuMemMap(void *real, CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			      unsigned long long flags)
{
	int guard;
	CUresult (*fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = real;
	if (!(guard = vrt_enter()))
		return fn(ptr, size, offset, h, flags);
	CUresult r = fn(ptr, size, offset, h, flags);
	if (r == CUDA_SUCCESS) {
		struct vrt_event ev = { .op = VRT_OP_MAP, .api = VRT_API_CU_MEM_MAP, .device = -1,
					.addr = ptr, .size = size, .aux = h, .aux2 = offset };
		vrt_emit(&ev, true);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemMap, CUresult,
		(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags),
		(ptr, size, offset, h, flags), MISSING)

static CUresult hook_cuMemUnmap(void *real, CUdeviceptr ptr, size_t size)
{
	int guard;
	CUresult (*fn)(CUdeviceptr, size_t) = real;
	if (!(guard = vrt_enter()))
		return fn(ptr, size);
	uint64_t ts = vrt_now_ns();
	CUresult r = fn(ptr, size);
	if (r == CUDA_SUCCESS)
		vrt_record_release(VRT_OP_UNMAP, VRT_API_CU_MEM_UNMAP, ts, ptr, size, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemUnmap, CUresult, (CUdeviceptr ptr, size_t size), (ptr, size), MISSING)

static CUresult hook_cuMemAddressReserve(void *real, CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
					 unsigned long long flags)
{
	int guard;
	CUresult (*fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = real;
	if (!(guard = vrt_enter()))
		return fn(ptr, size, align, addr, flags);
	CUresult r = fn(ptr, size, align, addr, flags);
	if (r == CUDA_SUCCESS) {
		struct vrt_event ev = { .op = VRT_OP_VA_RESERVE, .api = VRT_API_CU_MEM_ADDRESS_RESERVE, .device = -1,
					.addr = *ptr, .size = size, .aux = align };
		vrt_emit(&ev, true);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemAddressReserve, CUresult,
		(CUdeviceptr * ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags),
		(ptr, size, align, addr, flags), MISSING)

static CUresult hook_cuMemAddressFree(void *real, CUdeviceptr ptr, size_t size)
{
	int guard;
	CUresult (*fn)(CUdeviceptr, size_t) = real;
	if (!(guard = vrt_enter()))
		return fn(ptr, size);
	uint64_t ts = vrt_now_ns();
	CUresult r = fn(ptr, size);
	if (r == CUDA_SUCCESS)
		vrt_record_release(VRT_OP_VA_FREE, VRT_API_CU_MEM_ADDRESS_FREE, ts, ptr, size, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemAddressFree, CUresult, (CUdeviceptr ptr, size_t size), (ptr, size), MISSING)

/* ---- imports: someone else's memory mapped here ------------------------------------------ */

static CUresult hook_cuMemImportFromShareableHandle(void *real, CUmemGenericAllocationHandle *h, void *os,
						    CUmemAllocationHandleType type)
{
	int guard;
	CUresult (*fn)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType) = real;
	if (!(guard = vrt_enter()))
		return fn(h, os, type);
	CUresult r = fn(h, os, type);
	if (r == CUDA_SUCCESS) {
		struct vrt_event ev = { .op = VRT_OP_IMPORT, .api = VRT_API_CU_MEM_IMPORT_SHAREABLE, .device = -1,
					.addr = *h, .aux = (uint64_t)type };
		vrt_emit(&ev, true);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuMemImportFromShareableHandle, CUresult,
		(CUmemGenericAllocationHandle * h, void *os, CUmemAllocationHandleType type), (h, os, type), MISSING)

static uint64_t range_size(CUdeviceptr p)
{
	static _Atomic(void *) get_range_fn;
	if (!atomic_load_explicit(&get_range_fn, memory_order_acquire))
		atomic_store_explicit(&get_range_fn, vrt_driver_fn("cuMemGetAddressRange", 3020), memory_order_release);
	CUresult (*get_range)(CUdeviceptr *, size_t *, CUdeviceptr) =
		(CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr))atomic_load_explicit(&get_range_fn, memory_order_acquire);
	CUdeviceptr base;
	size_t size = 0;
	if (get_range && get_range(&base, &size, p) != CUDA_SUCCESS)
		size = 0;
	return size;
}

static CUresult hook_cuIpcOpenMemHandle_v2(void *real, CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
	int guard;
	CUresult (*fn)(CUdeviceptr *, CUipcMemHandle, unsigned int) = real;
	if (!(guard = vrt_enter()))
		return fn(p, h, flags);
	CUresult r = fn(p, h, flags);
	if (r == CUDA_SUCCESS) {
		struct vrt_event ev = { .op = VRT_OP_IMPORT, .api = VRT_API_CU_IPC_OPEN,
					.device = (int16_t)vrt_current_device_driver(), .addr = *p,
					.size = range_size(*p), .aux = flags };
		vrt_emit(&ev, true);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuIpcOpenMemHandle_v2, CUresult, (CUdeviceptr * p, CUipcMemHandle h, unsigned int flags),
		(p, h, flags), MISSING)

static CUresult hook_cuIpcCloseMemHandle(void *real, CUdeviceptr p)
{
	int guard;
	CUresult (*fn)(CUdeviceptr) = real;
	if (!(guard = vrt_enter()))
		return fn(p);
	uint64_t ts = vrt_now_ns();
	CUresult r = fn(p);
	if (r == CUDA_SUCCESS)
		vrt_record_release(VRT_OP_IMPORT_CLOSE, VRT_API_CU_IPC_CLOSE, ts, p, 0, 0);
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuIpcCloseMemHandle, CUresult, (CUdeviceptr p), (p), MISSING)

/* ---- context teardown: every allocation in it is gone ------------------------------------ */

static CUresult hook_cuDevicePrimaryCtxReset_v2(void *real, CUdevice dev)
{
	int guard;
	CUresult (*fn)(CUdevice) = real;
	if (!(guard = vrt_enter()))
		return fn(dev);
	CUresult r = fn(dev);
	if (r == CUDA_SUCCESS) {
		struct vrt_event ev = { .op = VRT_OP_CONTEXT, .api = VRT_API_CU_PRIMARY_CTX_RESET, .device = (int16_t)dev };
		vrt_emit(&ev, false);
	}
	vrt_leave(guard);
	return r;
}
VRT_DEFINE_HOOK(cuDevicePrimaryCtxReset_v2, CUresult, (CUdevice dev), (dev), MISSING)

/*
 * The last release of a primary context destroys it and every allocation in it. The runtime
 * releases the one it retained when it is unloaded: a runtime dlclose'd and opened again (a
 * plugin host) frees its memory with it, and the driver hands the same addresses out again.
 * Only a release that left the context inactive is a reset; an earlier one drops a reference.
 */
static void record_if_destroyed(CUdevice dev)
{
	static _Atomic(void *) get_state_fn;
	void *fn = atomic_load_explicit(&get_state_fn, memory_order_relaxed);
	if (!fn) {
		fn = vrt_driver_fn("cuDevicePrimaryCtxGetState", 7000);
		atomic_store_explicit(&get_state_fn, fn, memory_order_relaxed);
	}
	unsigned int flags = 0;
	int active = 1;
	CUresult (*get_state)(CUdevice, unsigned int *, int *) = (CUresult (*)(CUdevice, unsigned int *, int *))fn;
	if (!get_state || get_state(dev, &flags, &active) != CUDA_SUCCESS || active)
		return;
	struct vrt_event ev = { .op = VRT_OP_CONTEXT, .api = VRT_API_CU_PRIMARY_CTX_RELEASE, .device = (int16_t)dev };
	vrt_emit(&ev, false);
}

static CUresult primary_ctx_release(void *real, CUdevice dev)
{
	int guard;
	CUresult (*fn)(CUdevice) = real;
	if (!(guard = vrt_enter()))
		return fn(dev);
	CUresult r = fn(dev);
	if (r == CUDA_SUCCESS)
		record_if_destroyed(dev);
	vrt_leave(guard);
	return r;
}

/* (the unsuffixed ABI of CUDA < 11 is not hooked: cuda.h maps the name to _v2, as the runtime does) */
static CUresult hook_cuDevicePrimaryCtxRelease_v2(void *real, CUdevice dev) { return primary_ctx_release(real, dev); }
VRT_DEFINE_HOOK(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev), (dev), MISSING)

/* ---- stream capture: what a thread allocates while it captures is made for a CUDA graph ---- */

static CUresult begin_capture(uint16_t api, void *real, CUstream s, CUstreamCaptureMode mode)
{
	int guard;
	CUresult (*fn)(CUstream, CUstreamCaptureMode) = real;
	if (!(guard = vrt_enter()))
		return fn(s, mode);
	CUresult r = fn(s, mode);
	if (r == CUDA_SUCCESS)
		vrt_record_capture(VRT_OP_CAPTURE_BEGIN, api, vrt_current_device_driver(), (uint64_t)(uintptr_t)s, 0);
	vrt_leave(guard);
	return r;
}

static CUresult hook_cuStreamBeginCapture_v2(void *real, CUstream s, CUstreamCaptureMode mode)
{
	return begin_capture(VRT_API_CU_STREAM_BEGIN_CAPTURE, real, s, mode);
}
VRT_DEFINE_HOOK(cuStreamBeginCapture_v2, CUresult, (CUstream s, CUstreamCaptureMode mode), (s, mode), MISSING)

static CUresult hook_cuStreamBeginCapture_v2_ptsz(void *real, CUstream s, CUstreamCaptureMode mode)
{
	return begin_capture(VRT_API_CU_STREAM_BEGIN_CAPTURE, real, s, mode);
}
VRT_DEFINE_HOOK(cuStreamBeginCapture_v2_ptsz, CUresult, (CUstream s, CUstreamCaptureMode mode), (s, mode), MISSING)

static CUresult begin_capture_to_graph(void *real, CUstream s, CUgraph g, const CUgraphNode *deps,
				       const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode)
{
	int guard;
	CUresult (*fn)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
		       CUstreamCaptureMode) = real;
	if (!(guard = vrt_enter()))
		return fn(s, g, deps, data, n, mode);
	CUresult r = fn(s, g, deps, data, n, mode);
	if (r == CUDA_SUCCESS)
		vrt_record_capture(VRT_OP_CAPTURE_BEGIN, VRT_API_CU_STREAM_BEGIN_CAPTURE_TO_GRAPH,
				   vrt_current_device_driver(), (uint64_t)(uintptr_t)s, 0);
	vrt_leave(guard);
	return r;
}

static CUresult hook_cuStreamBeginCaptureToGraph(void *real, CUstream s, CUgraph g, const CUgraphNode *deps,
						 const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode)
{
	return begin_capture_to_graph(real, s, g, deps, data, n, mode);
}
VRT_DEFINE_HOOK(cuStreamBeginCaptureToGraph, CUresult,
		(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
		 CUstreamCaptureMode mode),
		(s, g, deps, data, n, mode), MISSING)

static CUresult hook_cuStreamBeginCaptureToGraph_ptsz(void *real, CUstream s, CUgraph g, const CUgraphNode *deps,
						      const CUgraphEdgeData *data, size_t n, CUstreamCaptureMode mode)
{
	return begin_capture_to_graph(real, s, g, deps, data, n, mode);
}
VRT_DEFINE_HOOK(cuStreamBeginCaptureToGraph_ptsz, CUresult,
		(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
		 CUstreamCaptureMode mode),
		(s, g, deps, data, n, mode), MISSING)

/* The capture ends whatever the result (an invalidated one is ended and its graph not made). */
static CUresult end_capture(void *real, CUstream s, CUgraph *g)
{
	int guard;
	CUresult (*fn)(CUstream, CUgraph *) = real;
	if (!(guard = vrt_enter()))
		return fn(s, g);
	CUresult r = fn(s, g);
	vrt_record_capture(VRT_OP_CAPTURE_END, VRT_API_CU_STREAM_END_CAPTURE, vrt_current_device_driver(),
			   (uint64_t)(uintptr_t)s, (int)r);
	vrt_leave(guard);
	return r;
}

static CUresult hook_cuStreamEndCapture(void *real, CUstream s, CUgraph *g) { return end_capture(real, s, g); }
VRT_DEFINE_HOOK(cuStreamEndCapture, CUresult, (CUstream s, CUgraph *g), (s, g), MISSING)

static CUresult hook_cuStreamEndCapture_ptsz(void *real, CUstream s, CUgraph *g) { return end_capture(real, s, g); }
VRT_DEFINE_HOOK(cuStreamEndCapture_ptsz, CUresult, (CUstream s, CUgraph *g), (s, g), MISSING)

/* ---- table ------------------------------------------------------------------------------ */

const struct vrt_hook_def vrt_driver_hooks[] = {
	VRT_HOOK_DEF(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, CU_MEM_ALLOC),
	VRT_HOOK_DEF(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, CU_MEM_ALLOC_PITCH),
	VRT_HOOK_DEF(cuMemFree_v2, "cuMemFree", 3020, 0, CU_MEM_FREE),
	VRT_HOOK_DEF(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0, CU_MEM_ALLOC_MANAGED),
	VRT_HOOK_DEF(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0, CU_MEM_ALLOC_ASYNC),
	VRT_HOOK_DEF(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 1, CU_MEM_ALLOC_ASYNC_PTSZ),
	VRT_HOOK_DEF(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0, CU_MEM_ALLOC_FROM_POOL_ASYNC),
	VRT_HOOK_DEF(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 1,
		     CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ),
	VRT_HOOK_DEF(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, CU_MEM_FREE_ASYNC),
	VRT_HOOK_DEF(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 1, CU_MEM_FREE_ASYNC_PTSZ),
	VRT_HOOK_DEF(cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0, CU_MEM_ALLOC_HOST),
	VRT_HOOK_DEF(cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, CU_MEM_HOST_ALLOC),
	VRT_HOOK_DEF(cuMemFreeHost, "cuMemFreeHost", 2000, 0, CU_MEM_FREE_HOST),
	VRT_HOOK_DEF(cuMemHostRegister_v2, "cuMemHostRegister", 4000, 0, CU_MEM_HOST_REGISTER),
	VRT_HOOK_DEF(cuMemHostUnregister, "cuMemHostUnregister", 4000, 0, CU_MEM_HOST_UNREGISTER),
	VRT_HOOK_DEF(cuMemCreate, "cuMemCreate", 10020, 0, CU_MEM_CREATE),
	VRT_HOOK_DEF(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, 0, CU_MEM_RETAIN_HANDLE),
	VRT_HOOK_DEF(cuMemRelease, "cuMemRelease", 10020, 0, CU_MEM_RELEASE),
	VRT_HOOK_DEF(cuMemMap, "cuMemMap", 10020, 0, CU_MEM_MAP),
	VRT_HOOK_DEF(cuMemUnmap, "cuMemUnmap", 10020, 0, CU_MEM_UNMAP),
	VRT_HOOK_DEF(cuMemAddressReserve, "cuMemAddressReserve", 10020, 0, CU_MEM_ADDRESS_RESERVE),
	VRT_HOOK_DEF(cuMemAddressFree, "cuMemAddressFree", 10020, 0, CU_MEM_ADDRESS_FREE),
	VRT_HOOK_DEF(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020, 0,
		     CU_MEM_IMPORT_SHAREABLE),
	VRT_HOOK_DEF(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, 0, CU_IPC_OPEN),
	VRT_HOOK_DEF(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, 0, CU_IPC_CLOSE),
	VRT_HOOK_DEF(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0, CU_PRIMARY_CTX_RESET),
	VRT_HOOK_DEF(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0, CU_PRIMARY_CTX_RELEASE),
	VRT_HOOK_DEF(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, 0, CU_STREAM_BEGIN_CAPTURE),
	VRT_HOOK_DEF(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, 1, CU_STREAM_BEGIN_CAPTURE),
	VRT_HOOK_DEF(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 12030, 0,
		     CU_STREAM_BEGIN_CAPTURE_TO_GRAPH),
	VRT_HOOK_DEF(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph", 12030, 1,
		     CU_STREAM_BEGIN_CAPTURE_TO_GRAPH),
	VRT_HOOK_DEF(cuStreamEndCapture, "cuStreamEndCapture", 10000, 0, CU_STREAM_END_CAPTURE),
	VRT_HOOK_DEF(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, 1, CU_STREAM_END_CAPTURE),
};
const int vrt_n_driver_hooks = sizeof(vrt_driver_hooks) / sizeof(vrt_driver_hooks[0]);
