/*
 * fake_cudart.c - GPU-free test double of the CUDA runtime, built both as
 * libcudart.so.13 and as libcudart_static.a.
 *
 * It reaches the driver exactly as the real runtime does: on first use it
 * dlopen()s "libcuda.so.1" (RTLD_NOW | RTLD_LOCAL), dlsym()s
 * "cuGetProcAddress_v2" - its only dlsym - and resolves every other driver
 * entry point through cuGetProcAddress_v2(name, 13000, flags).  The flags are
 * CU_GET_PROC_ADDRESS_DEFAULT, or CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * for stream-ordered entry points when FAKECUDART_PTSZ=1 at initialization.
 * It never links libcuda.  The calling thread's device (cudaSetDevice) has its
 * primary context made current before any call that needs a context.
 *
 * Faked: the memory API (cudaMalloc* / cudaFree* / host / IPC / pools /
 * cudaMemGetInfo), devices, streams, cudaMemcpy/cudaMemset, errors, versions,
 * cudaGetDriverEntryPoint[ByVersion].  Not faked: kernels and launches, events,
 * graphs, arrays, the _ptds/_ptsz runtime entry points, fatbin registration.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 64

/* ------------------------------------------------------------------------ */
/* Driver entry points, resolved through cuGetProcAddress_v2                */
/* ------------------------------------------------------------------------ */

/* Types are the PFN_<name>_v<version> the driver returns for CUDA 13000. */
static struct {
    PFN_cuGetProcAddress_v12000 GetProcAddress;
    PFN_cuInit_v2000 Init;
    PFN_cuDriverGetVersion_v2020 DriverGetVersion;
    PFN_cuDeviceGetCount_v2000 DeviceGetCount;
    PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
    PFN_cuDevicePrimaryCtxReset_v11000 DevicePrimaryCtxReset;
    PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
    PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
    PFN_cuCtxSynchronize_v13000 CtxSynchronize;
    PFN_cuStreamCreate_v2000 StreamCreate;
    PFN_cuStreamDestroy_v4000 StreamDestroy;
    PFN_cuStreamSynchronize_v2000 StreamSynchronize;
    PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
    PFN_cuStreamEndCapture_v10000 StreamEndCapture;
    PFN_cuMemGetInfo_v3020 MemGetInfo;
    PFN_cuMemAlloc_v3020 MemAlloc;
    PFN_cuMemAllocPitch_v3020 MemAllocPitch;
    PFN_cuMemAllocManaged_v6000 MemAllocManaged;
    PFN_cuMemFree_v3020 MemFree;
    PFN_cuMemAllocAsync_v11020 MemAllocAsync;
    PFN_cuMemFreeAsync_v11020 MemFreeAsync;
    PFN_cuMemAllocFromPoolAsync_v11020 MemAllocFromPoolAsync;
    PFN_cuMemAllocHost_v3020 MemAllocHost;
    PFN_cuMemHostAlloc_v2020 MemHostAlloc;
    PFN_cuMemFreeHost_v2000 MemFreeHost;
    PFN_cuMemHostRegister_v6050 MemHostRegister;
    PFN_cuMemHostUnregister_v4000 MemHostUnregister;
    PFN_cuIpcGetMemHandle_v4010 IpcGetMemHandle;
    PFN_cuIpcOpenMemHandle_v11000 IpcOpenMemHandle;
    PFN_cuIpcCloseMemHandle_v4010 IpcCloseMemHandle;
    PFN_cuMemcpy_v4000 Memcpy;
    PFN_cuMemsetD8_v3020 MemsetD8;
    PFN_cuDeviceGetDefaultMemPool_v11020 DeviceGetDefaultMemPool;
    PFN_cuMemPoolCreate_v11020 MemPoolCreate;
    PFN_cuMemPoolDestroy_v11020 MemPoolDestroy;
    PFN_cuMemPoolTrimTo_v11020 MemPoolTrimTo;
} drv;

static const struct driver_symbol {
    const char *name;        /* base name passed to cuGetProcAddress_v2 */
    void **slot;
    bool stream_ordered;     /* per-thread variant under FAKECUDART_PTSZ=1 */
} driver_symbols[] = {
    { "cuInit", (void **)&drv.Init, false },
    { "cuDriverGetVersion", (void **)&drv.DriverGetVersion, false },
    { "cuDeviceGetCount", (void **)&drv.DeviceGetCount, false },
    { "cuDevicePrimaryCtxRetain", (void **)&drv.DevicePrimaryCtxRetain, false },
    { "cuDevicePrimaryCtxReset", (void **)&drv.DevicePrimaryCtxReset, false },
    { "cuDevicePrimaryCtxRelease", (void **)&drv.DevicePrimaryCtxRelease, false },
    { "cuCtxSetCurrent", (void **)&drv.CtxSetCurrent, false },
    { "cuCtxSynchronize", (void **)&drv.CtxSynchronize, false },
    { "cuStreamCreate", (void **)&drv.StreamCreate, false },
    { "cuStreamDestroy", (void **)&drv.StreamDestroy, false },
    { "cuStreamSynchronize", (void **)&drv.StreamSynchronize, true },
    { "cuStreamBeginCapture", (void **)&drv.StreamBeginCapture, true },
    { "cuStreamEndCapture", (void **)&drv.StreamEndCapture, true },
    { "cuMemGetInfo", (void **)&drv.MemGetInfo, false },
    { "cuMemAlloc", (void **)&drv.MemAlloc, false },
    { "cuMemAllocPitch", (void **)&drv.MemAllocPitch, false },
    { "cuMemAllocManaged", (void **)&drv.MemAllocManaged, false },
    { "cuMemFree", (void **)&drv.MemFree, false },
    { "cuMemAllocAsync", (void **)&drv.MemAllocAsync, true },
    { "cuMemFreeAsync", (void **)&drv.MemFreeAsync, true },
    { "cuMemAllocFromPoolAsync", (void **)&drv.MemAllocFromPoolAsync, true },
    { "cuMemAllocHost", (void **)&drv.MemAllocHost, false },
    { "cuMemHostAlloc", (void **)&drv.MemHostAlloc, false },
    { "cuMemFreeHost", (void **)&drv.MemFreeHost, false },
    { "cuMemHostRegister", (void **)&drv.MemHostRegister, false },
    { "cuMemHostUnregister", (void **)&drv.MemHostUnregister, false },
    { "cuIpcGetMemHandle", (void **)&drv.IpcGetMemHandle, false },
    { "cuIpcOpenMemHandle", (void **)&drv.IpcOpenMemHandle, false },
    { "cuIpcCloseMemHandle", (void **)&drv.IpcCloseMemHandle, false },
    { "cuMemcpy", (void **)&drv.Memcpy, true },
    { "cuMemsetD8", (void **)&drv.MemsetD8, true },
    { "cuDeviceGetDefaultMemPool", (void **)&drv.DeviceGetDefaultMemPool, false },
    { "cuMemPoolCreate", (void **)&drv.MemPoolCreate, false },
    { "cuMemPoolDestroy", (void **)&drv.MemPoolDestroy, false },
    { "cuMemPoolTrimTo", (void **)&drv.MemPoolTrimTo, false },
};

/* ------------------------------------------------------------------------ */
/* Errors: one table maps driver results and names runtime errors           */
/* ------------------------------------------------------------------------ */

#define RUNTIME_ONLY ((CUresult)-1)
#define ERR(cu, rt, text) { cu, rt, #rt, text }
static const struct error_entry {
    CUresult cu;             /* driver result that maps to `rt` */
    cudaError_t rt;
    const char *name;
    const char *text;
} errors[] = {
    ERR(CUDA_SUCCESS, cudaSuccess, "no error"),
    ERR(CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue, "invalid argument"),
    ERR(CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation, "out of memory"),
    ERR(CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError, "initialization error"),
    ERR(CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading, "driver shutting down"),
    ERR(RUNTIME_ONLY, cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    ERR(CUDA_ERROR_STUB_LIBRARY, cudaErrorStubLibrary, "CUDA driver is a stub library"),
    ERR(RUNTIME_ONLY, cudaErrorInsufficientDriver,
        "CUDA driver version is insufficient for CUDA runtime version"),
    ERR(CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice, "no CUDA-capable device is detected"),
    ERR(CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice, "invalid device ordinal"),
    ERR(CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized, "invalid device context"),
    ERR(CUDA_ERROR_MAP_FAILED, cudaErrorMapBufferObjectFailed, "mapping of buffer object failed"),
    ERR(CUDA_ERROR_UNMAP_FAILED, cudaErrorUnmapBufferObjectFailed,
        "unmapping of buffer object failed"),
    ERR(CUDA_ERROR_ALREADY_MAPPED, cudaErrorAlreadyMapped, "resource already mapped"),
    ERR(CUDA_ERROR_NOT_MAPPED, cudaErrorNotMapped, "resource not mapped"),
    ERR(CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem,
        "OS call failed or operation not supported on this OS"),
    ERR(CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle, "invalid resource handle"),
    ERR(CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound, "named symbol not found"),
    ERR(CUDA_ERROR_NOT_READY, cudaErrorNotReady, "device not ready"),
    ERR(CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress,
        "an illegal memory access was encountered"),
    ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cudaErrorHostMemoryAlreadyRegistered,
        "part or all of the requested memory range is already mapped"),
    ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cudaErrorHostMemoryNotRegistered,
        "pointer does not correspond to a registered memory region"),
    ERR(CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted, "operation not permitted"),
    ERR(CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported, "operation not supported"),
    ERR(CUDA_ERROR_UNKNOWN, cudaErrorUnknown, "unknown error"),
};
#undef ERR

#define N_ERRORS (sizeof(errors) / sizeof(errors[0]))

static cudaError_t to_cuda_error(CUresult rc)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (errors[i].cu == rc && rc != RUNTIME_ONLY)
            return errors[i].rt;
    return cudaErrorUnknown;
}

static const struct error_entry *error_find(cudaError_t err)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (errors[i].rt == err)
            return &errors[i];
    return NULL;
}

const char *cudaGetErrorString(cudaError_t error)
{
    const struct error_entry *e = error_find(error);

    return e ? e->text : "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
    const struct error_entry *e = error_find(error);

    return e ? e->name : "unrecognized error code";
}

static __thread cudaError_t last_error;

/* Every API call returns through here so failures become the last error. */
static cudaError_t finish(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

static cudaError_t finish_cu(CUresult rc)
{
    return finish(to_cuda_error(rc));
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;

    last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

/* ------------------------------------------------------------------------ */
/* Initialization and per-thread context binding                            */
/* ------------------------------------------------------------------------ */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cudaError_t load_status;     /* outcome of driver_load(), then cuInit */

static bool resolve_all(bool ptsz)
{
    for (size_t i = 0; i < sizeof(driver_symbols) / sizeof(driver_symbols[0]); i++) {
        const struct driver_symbol *s = &driver_symbols[i];
        cuuint64_t flags = (ptsz && s->stream_ordered)
                               ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                               : CU_GET_PROC_ADDRESS_DEFAULT;
        CUdriverProcAddressQueryResult status;

        if (drv.GetProcAddress(s->name, s->slot, CUDART_VERSION, flags, &status) != CUDA_SUCCESS ||
            status != CU_GET_PROC_ADDRESS_SUCCESS || !*s->slot)
            return false;
    }
    return true;
}

static void fork_handlers(void);

static void driver_load(void)
{
    const char *ptsz = getenv("FAKECUDART_PTSZ");
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    fork_handlers();

    if (lib)
        drv.GetProcAddress = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
    if (!drv.GetProcAddress || !resolve_all(ptsz && strcmp(ptsz, "1") == 0)) {
        load_status = cudaErrorInsufficientDriver;
        return;
    }
    load_status = to_cuda_error(drv.Init(0));
}

static cudaError_t load(void)
{
    pthread_once(&load_once, driver_load);
    return load_status;
}

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fork-safe, like the driver double (fake_cuda.c): primary_lock is held across driver calls
 * that take the driver's lock, so it must be taken first. Prepare handlers run in the reverse
 * order of registration: registering after libcuda.so.1 is loaded (its constructor registers
 * the driver's) makes ours run first. */
static void fork_prepare(void) { pthread_mutex_lock(&primary_lock); }
static void fork_done(void) { pthread_mutex_unlock(&primary_lock); }
static void fork_handlers(void) { pthread_atfork(fork_prepare, fork_done, fork_done); }
static CUcontext primary[MAX_DEVICES];   /* retained once per process */
static _Atomic unsigned reset_epoch;     /* bumped by cudaDeviceReset */

static __thread int thread_device;       /* cudaSetDevice */
static __thread int bound_device = -1;   /* whose primary context is current */
static __thread unsigned bound_epoch;

/*
 * The real runtime releases the primary contexts it retained when it is unloaded (dlclose): the
 * last release destroys each one with its memory, and the driver hands the same addresses out
 * again (seen on the H200, scripts/gpu/coexist.py dlclose-runtime). Modelled under
 * FAKECUDART_RELEASE_ON_UNLOAD=1 only: this destructor also runs at exit, before vramtrace's,
 * where the real runtime's teardown is not seen.
 */
__attribute__((destructor)) static void release_on_unload(void)
{
    const char *on = getenv("FAKECUDART_RELEASE_ON_UNLOAD");
    if (!on || strcmp(on, "1") || !drv.DevicePrimaryCtxRelease)
        return;
    for (int dev = 0; dev < MAX_DEVICES; dev++)
        if (primary[dev])
            drv.DevicePrimaryCtxRelease(dev);
}

static cudaError_t primary_ctx(int dev, CUcontext *ctx)
{
    CUresult rc = CUDA_SUCCESS;

    if (dev < 0 || dev >= MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_mutex_lock(&primary_lock);
    if (!primary[dev])
        rc = drv.DevicePrimaryCtxRetain(&primary[dev], dev);
    *ctx = primary[dev];
    pthread_mutex_unlock(&primary_lock);
    return to_cuda_error(rc);
}

static cudaError_t bind_context(void)
{
    unsigned epoch = atomic_load(&reset_epoch);
    CUcontext ctx;
    cudaError_t err;

    if (bound_device == thread_device && bound_epoch == epoch)
        return cudaSuccess;
    err = primary_ctx(thread_device, &ctx);
    if (err == cudaSuccess)
        err = to_cuda_error(drv.CtxSetCurrent(ctx));
    if (err == cudaSuccess) {
        bound_device = thread_device;
        bound_epoch = epoch;
    }
    return err;
}

/* Entry of every call that needs a context: load the driver, bind. */
static cudaError_t enter(void)
{
    cudaError_t err = load();

    return err != cudaSuccess ? err : bind_context();
}

#define ENTER()                                   \
    do {                                          \
        cudaError_t enter_err_ = enter();         \
        if (enter_err_ != cudaSuccess)            \
            return finish(enter_err_);            \
    } while (0)

static CUdeviceptr dptr_of(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

/* After the driver call `rc` filled *d, stores it into a void ** out-param. */
static cudaError_t finish_alloc(CUresult rc, const CUdeviceptr *d, void **out)
{
    if (rc == CUDA_SUCCESS)
        *out = (void *)(uintptr_t)*d;
    return finish_cu(rc);
}

/* ------------------------------------------------------------------------ */
/* Versions and devices                                                     */
/* ------------------------------------------------------------------------ */

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return finish(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

/* Like CUDA: 0 and success when no driver can be loaded. */
cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return finish(cudaErrorInvalidValue);
    *driverVersion = 0;
    if (load() == cudaErrorInsufficientDriver)
        return cudaSuccess;
    return finish_cu(drv.DriverGetVersion(driverVersion));
}

cudaError_t cudaGetDeviceCount(int *count)
{
    cudaError_t err;

    if (!count)
        return finish(cudaErrorInvalidValue);
    *count = 0;
    err = load();
    if (err != cudaSuccess)
        return finish(err);
    return finish_cu(drv.DeviceGetCount(count));
}

cudaError_t cudaSetDevice(int device)
{
    int count = 0;
    cudaError_t err = load();

    if (err == cudaSuccess)
        err = to_cuda_error(drv.DeviceGetCount(&count));
    if (err != cudaSuccess)
        return finish(err);
    if (device < 0 || device >= count)
        return finish(cudaErrorInvalidDevice);
    thread_device = device;
    return finish(bind_context());
}

cudaError_t cudaGetDevice(int *device)
{
    cudaError_t err;

    if (!device)
        return finish(cudaErrorInvalidValue);
    err = load();
    if (err != cudaSuccess)
        return finish(err);
    *device = thread_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    ENTER();
    return finish_cu(drv.CtxSynchronize(NULL));
}

/* Destroys the primary context's allocations; the next call re-creates it. */
cudaError_t cudaDeviceReset(void)
{
    int dev = thread_device;
    cudaError_t err = load();

    if (err != cudaSuccess)
        return finish(err);
    err = to_cuda_error(drv.DevicePrimaryCtxReset(dev));
    pthread_mutex_lock(&primary_lock);
    primary[dev] = NULL;
    atomic_fetch_add(&reset_epoch, 1);
    pthread_mutex_unlock(&primary_lock);
    return finish(err);
}

/* ------------------------------------------------------------------------ */
/* Device, managed and pitched memory                                       */
/* ------------------------------------------------------------------------ */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    CUdeviceptr d = 0;

    ENTER();
    if (!devPtr)
        return finish(cudaErrorInvalidValue);
    if (size == 0) {             /* CUDA returns NULL and success */
        *devPtr = NULL;
        return cudaSuccess;
    }
    return finish_alloc(drv.MemAlloc(&d, size), &d, devPtr);
}

cudaError_t cudaFree(void *devPtr)
{
    ENTER();
    return devPtr ? finish_cu(drv.MemFree(dptr_of(devPtr))) : cudaSuccess;
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    CUdeviceptr d = 0;

    ENTER();
    if (!devPtr)
        return finish(cudaErrorInvalidValue);
    return finish_alloc(drv.MemAllocManaged(&d, size, flags), &d, devPtr);
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    CUdeviceptr d = 0;

    ENTER();
    if (!devPtr)
        return finish(cudaErrorInvalidValue);
    return finish_alloc(drv.MemAllocPitch(&d, pitch, width, height, 4), &d, devPtr);
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    CUdeviceptr d = 0;
    size_t pitch = 0, rows;
    CUresult rc;

    ENTER();
    if (!pitchedDevPtr || __builtin_mul_overflow(extent.height, extent.depth, &rows))
        return finish(cudaErrorInvalidValue);
    rc = drv.MemAllocPitch(&d, &pitch, extent.width, rows, 4);
    if (rc == CUDA_SUCCESS)
        *pitchedDevPtr = (struct cudaPitchedPtr){ (void *)(uintptr_t)d, pitch,
                                                  extent.width, extent.height };
    return finish_cu(rc);
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    ENTER();
    return finish_cu(drv.MemGetInfo(free, total));
}

/* ------------------------------------------------------------------------ */
/* Stream-ordered memory and pools                                          */
/* ------------------------------------------------------------------------ */

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    CUdeviceptr d = 0;

    ENTER();
    if (!devPtr)
        return finish(cudaErrorInvalidValue);
    return finish_alloc(drv.MemAllocAsync(&d, size, hStream), &d, devPtr);
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream)
{
    CUdeviceptr d = 0;

    ENTER();
    if (!ptr)
        return finish(cudaErrorInvalidValue);
    return finish_alloc(drv.MemAllocFromPoolAsync(&d, size, memPool, stream), &d, ptr);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    ENTER();
    return finish_cu(drv.MemFreeAsync(dptr_of(devPtr), hStream));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    ENTER();
    return finish_cu(drv.DeviceGetDefaultMemPool(memPool, device));
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
    CUmemPoolProps props;

    ENTER();
    if (!poolProps)
        return finish(cudaErrorInvalidValue);
    memset(&props, 0, sizeof(props));
    props.allocType = (CUmemAllocationType)poolProps->allocType;
    props.handleTypes = (CUmemAllocationHandleType)poolProps->handleTypes;
    props.location.type = (CUmemLocationType)poolProps->location.type;
    props.location.id = poolProps->location.id;
    props.win32SecurityAttributes = poolProps->win32SecurityAttributes;
    props.maxSize = poolProps->maxSize;
    props.usage = poolProps->usage;
    return finish_cu(drv.MemPoolCreate(memPool, &props));
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    ENTER();
    return finish_cu(drv.MemPoolDestroy(memPool));
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    ENTER();
    return finish_cu(drv.MemPoolTrimTo(memPool, minBytesToKeep));
}

/* ------------------------------------------------------------------------ */
/* Pinned and registered host memory                                        */
/* ------------------------------------------------------------------------ */

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    ENTER();
    return finish_cu(drv.MemAllocHost(ptr, size));
}

/* cudaHostAlloc* flag values equal CU_MEMHOSTALLOC_*. */
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    ENTER();
    return finish_cu(drv.MemHostAlloc(pHost, size, flags));
}

cudaError_t cudaFreeHost(void *ptr)
{
    ENTER();
    return ptr ? finish_cu(drv.MemFreeHost(ptr)) : cudaSuccess;
}

/* cudaHostRegister* flag values equal CU_MEMHOSTREGISTER_*. */
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    ENTER();
    return finish_cu(drv.MemHostRegister(ptr, size, flags));
}

cudaError_t cudaHostUnregister(void *ptr)
{
    ENTER();
    return finish_cu(drv.MemHostUnregister(ptr));
}

/* ------------------------------------------------------------------------ */
/* IPC                                                                      */
/* ------------------------------------------------------------------------ */

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "IPC handle sizes differ");

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    CUipcMemHandle h;
    CUresult rc;

    ENTER();
    if (!handle)
        return finish(cudaErrorInvalidValue);
    rc = drv.IpcGetMemHandle(&h, dptr_of(devPtr));
    if (rc == CUDA_SUCCESS)
        memcpy(handle, &h, sizeof(h));
    return finish_cu(rc);
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr d = 0;

    ENTER();
    if (!devPtr)
        return finish(cudaErrorInvalidValue);
    memcpy(&h, &handle, sizeof(h));
    return finish_alloc(drv.IpcOpenMemHandle(&d, h, flags), &d, devPtr);
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    ENTER();
    return finish_cu(drv.IpcCloseMemHandle(dptr_of(devPtr)));
}

/* ------------------------------------------------------------------------ */
/* Streams, copies, sets                                                    */
/* ------------------------------------------------------------------------ */

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    ENTER();
    return finish_cu(drv.StreamCreate(pStream, CU_STREAM_DEFAULT));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENTER();
    return finish_cu(drv.StreamDestroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER();
    return finish_cu(drv.StreamSynchronize(stream));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    ENTER();
    return finish_cu(drv.StreamBeginCapture(stream, (CUstreamCaptureMode)mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    ENTER();
    return finish_cu(drv.StreamEndCapture(stream, (CUgraph *)pGraph));
}

/* Unified addressing: every direction is one cuMemcpy. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    ENTER();
    if ((unsigned)kind > cudaMemcpyDefault)
        return finish(cudaErrorInvalidMemcpyDirection);
    return finish_cu(drv.Memcpy(dptr_of(dst), dptr_of(src), count));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    ENTER();
    return finish_cu(drv.MemsetD8(dptr_of(devPtr), (unsigned char)value, count));
}

/* ------------------------------------------------------------------------ */
/* Driver entry points                                                      */
/* ------------------------------------------------------------------------ */

/* cudaEnable* flags and cudaDriverEntryPoint* results equal the CU_ ones. */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                               unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *driverStatus)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    cudaError_t err = load();
    CUresult rc;

    if (err != cudaSuccess)
        return finish(err);
    rc = drv.GetProcAddress(symbol, funcPtr, (int)cudaVersion, flags, &status);
    if (driverStatus)
        *driverStatus = (enum cudaDriverEntryPointQueryResult)status;
    return finish_cu(rc);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}
