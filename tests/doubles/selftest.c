/*
 * selftest.c - checks the CUDA doubles the way the tool's tests use them: a
 * program linked only against the (fake) runtime, which loads the fake driver
 * by itself.  Built twice, against libcudart.so.13 and libcudart_static.a.
 *
 * Driver-only APIs (VMM, pointer attributes, cuGetProcAddress) are reached
 * through cudaGetDriverEntryPointByVersion, the fakecuda_* hooks and the
 * expected symbol addresses through dlopen(RTLD_NOLOAD)/dlsym of libcuda.so.1.
 * The capacity is pinned to 2 devices of 1 GiB with setenv before first use.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include "fakecuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CAPACITY ((size_t)1 << 30)
#define N_THREADS 64
#define BIG_ALLOC (32 * MiB)

/* ------------------------------------------------------------------------ */
/* Checking                                                                 */
/* ------------------------------------------------------------------------ */

static _Atomic int failures;

static bool check(bool ok, const char *what, int line)
{
    if (!ok) {
        fprintf(stderr, "selftest.c:%d: check failed: %s\n", line, what);
        failures++;
    }
    return ok;
}

static void rt_eq(cudaError_t got, cudaError_t want, const char *what, int line)
{
    if (got != want) {
        fprintf(stderr, "selftest.c:%d: %s = %s, want %s\n", line, what,
                cudaGetErrorName(got), cudaGetErrorName(want));
        failures++;
    }
    if (got != cudaSuccess)
        cudaGetLastError();      /* expected failures must not leak into later checks */
}

static void cu_eq(CUresult got, CUresult want, const char *what, int line)
{
    if (got != want) {
        fprintf(stderr, "selftest.c:%d: %s = %d, want %d\n", line, what, (int)got, (int)want);
        failures++;
    }
}

#define CHECK(cond) check((cond), #cond, __LINE__)
#define RT_EQ(call, want) rt_eq((call), (want), #call, __LINE__)
#define RT_OK(call) RT_EQ(call, cudaSuccess)
#define CU_EQ(call, want) cu_eq((call), (want), #call, __LINE__)
#define CU_OK(call) CU_EQ(call, CUDA_SUCCESS)

/* ------------------------------------------------------------------------ */
/* The fake driver: hooks and driver-only entry points                      */
/* ------------------------------------------------------------------------ */

static void *libcuda;
static fakecuda_used_bytes_fn used;
static fakecuda_live_allocations_fn live;

static struct {
    PFN_cuGetProcAddress_v12000 GetProcAddress;
    PFN_cuPointerGetAttribute_v4000 PointerGetAttribute;
    PFN_cuMemGetAddressRange_v3020 MemGetAddressRange;
    PFN_cuMemHostGetDevicePointer_v3020 MemHostGetDevicePointer;
    PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
    PFN_cuMemCreate_v10020 MemCreate;
    PFN_cuMemRelease_v10020 MemRelease;
    PFN_cuMemAddressReserve_v10020 MemAddressReserve;
    PFN_cuMemAddressFree_v10020 MemAddressFree;
    PFN_cuMemMap_v10020 MemMap;
    PFN_cuMemUnmap_v10020 MemUnmap;
    PFN_cuMemSetAccess_v10020 MemSetAccess;
    PFN_cuMemRetainAllocationHandle_v11000 MemRetainAllocationHandle;
    PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle;
    PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle;
} cu;

static const struct {
    const char *name;
    void **slot;
} cu_symbols[] = {
    { "cuGetProcAddress", (void **)&cu.GetProcAddress },
    { "cuPointerGetAttribute", (void **)&cu.PointerGetAttribute },
    { "cuMemGetAddressRange", (void **)&cu.MemGetAddressRange },
    { "cuMemHostGetDevicePointer", (void **)&cu.MemHostGetDevicePointer },
    { "cuMemGetAllocationGranularity", (void **)&cu.MemGetAllocationGranularity },
    { "cuMemCreate", (void **)&cu.MemCreate },
    { "cuMemRelease", (void **)&cu.MemRelease },
    { "cuMemAddressReserve", (void **)&cu.MemAddressReserve },
    { "cuMemAddressFree", (void **)&cu.MemAddressFree },
    { "cuMemMap", (void **)&cu.MemMap },
    { "cuMemUnmap", (void **)&cu.MemUnmap },
    { "cuMemSetAccess", (void **)&cu.MemSetAccess },
    { "cuMemRetainAllocationHandle", (void **)&cu.MemRetainAllocationHandle },
    { "cuMemExportToShareableHandle", (void **)&cu.MemExportToShareableHandle },
    { "cuMemImportFromShareableHandle", (void **)&cu.MemImportFromShareableHandle },
};

static bool load_driver_entry_points(void)
{
    for (size_t i = 0; i < sizeof(cu_symbols) / sizeof(cu_symbols[0]); i++) {
        enum cudaDriverEntryPointQueryResult status;

        RT_OK(cudaGetDriverEntryPointByVersion(cu_symbols[i].name, cu_symbols[i].slot, 13000,
                                               cudaEnableDefault, &status));
        if (!CHECK(status == cudaDriverEntryPointSuccess && *cu_symbols[i].slot))
            return false;
    }
    return true;
}

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_init(void)
{
    int v = 0, n = 0;

    /* The runtime loads the driver lazily and never links it. */
    CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL);
    RT_OK(cudaFree(NULL));
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!CHECK(libcuda != NULL))
        exit(1);
    used = (fakecuda_used_bytes_fn)dlsym(libcuda, "fakecuda_used_bytes");
    live = (fakecuda_live_allocations_fn)dlsym(libcuda, "fakecuda_live_allocations");
    if (!CHECK(used && live) || !load_driver_entry_points())
        exit(1);
    RT_OK(cudaRuntimeGetVersion(&v));
    CHECK(v == 13000);
    RT_OK(cudaDriverGetVersion(&v));
    CHECK(v == 13000);
    RT_OK(cudaGetDeviceCount(&n));
    CHECK(n == 2);
    CHECK(used(0) == 0 && used(1) == 0 && live() == 0);
}

static void test_device_memory(void)
{
    char in[256], out[256];
    void *p[16], *sentinel = (void *)0x1;

    RT_OK(cudaMalloc(&p[0], MiB));
    CHECK(used(0) == MiB && live() == 1);
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (char)i;
    RT_OK(cudaMemcpy(p[0], in, sizeof(in), cudaMemcpyHostToDevice));
    memset(out, 0, sizeof(out));
    RT_OK(cudaMemcpy(out, p[0], sizeof(out), cudaMemcpyDeviceToHost));
    CHECK(memcmp(in, out, sizeof(in)) == 0);
    RT_OK(cudaMemset(p[0], 0x7f, MiB));
    CHECK(((unsigned char *)p[0])[MiB - 1] == 0x7f);   /* device memory is host-visible */
    RT_OK(cudaFree(p[0]));
    CHECK(used(0) == 0 && live() == 0);

    for (int i = 0; i < 16; i++)
        RT_OK(cudaMalloc(&p[i], 4096));
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < i; j++)
            CHECK(p[i] != p[j]);
    for (int i = 0; i < 16; i++)
        RT_OK(cudaFree(p[i]));

    RT_OK(cudaMalloc(&sentinel, 0));
    CHECK(sentinel == NULL);
    RT_EQ(cudaFree(in), cudaErrorInvalidValue);
    RT_OK(cudaMalloc(&p[0], 64));
    RT_OK(cudaFree(p[0]));
    RT_EQ(cudaFree(p[0]), cudaErrorInvalidValue);      /* double free */
    CHECK(used(0) == 0 && live() == 0);
}

static void test_capacity(void)
{
    size_t free_b = 0, total_b = 0;
    void *a = NULL, *b = (void *)0x1234;

    RT_OK(cudaMemGetInfo(&free_b, &total_b));
    CHECK(free_b == CAPACITY && total_b == CAPACITY);
    RT_OK(cudaMalloc(&a, 768 * MiB));
    RT_OK(cudaMemGetInfo(&free_b, &total_b));
    CHECK(free_b == 256 * MiB);
    RT_EQ(cudaMalloc(&b, 512 * MiB), cudaErrorMemoryAllocation);
    CHECK(b == (void *)0x1234);                         /* untouched on failure */
    CHECK(used(0) == 768 * MiB);
    RT_OK(cudaFree(a));
    RT_OK(cudaMalloc(&a, CAPACITY));                    /* exactly at capacity */
    RT_EQ(cudaMalloc(&b, 1), cudaErrorMemoryAllocation);
    RT_OK(cudaFree(a));
    CHECK(used(0) == 0 && live() == 0);
}

static void test_pitch_and_3d(void)
{
    void *p = NULL;
    size_t pitch = 0;
    struct cudaPitchedPtr pp;
    struct cudaExtent ext = { 100, 4, 3 };

    RT_OK(cudaMallocPitch(&p, &pitch, 1000, 10));
    CHECK(pitch == 1024 && used(0) == 10 * 1024);
    RT_OK(cudaFree(p));
    RT_OK(cudaMalloc3D(&pp, ext));
    CHECK(pp.pitch == 512 && pp.xsize == 100 && pp.ysize == 4 && used(0) == 512 * 12);
    RT_OK(cudaFree(pp.ptr));
    CHECK(used(0) == 0 && live() == 0);
}

static void test_managed(void)
{
    void *p = NULL;

    RT_OK(cudaSetDevice(1));
    RT_OK(cudaMallocManaged(&p, 4096, cudaMemAttachGlobal));
    CHECK(used(0) == 4096 && used(1) == 0);             /* managed counts on device 0 */
    ((char *)p)[4095] = 1;
    RT_OK(cudaFree(p));
    RT_EQ(cudaMallocManaged(&p, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    RT_OK(cudaSetDevice(0));
    CHECK(used(0) == 0 && live() == 0);
}

static void test_async_and_pools(void)
{
    void *a = NULL, *b = NULL;
    cudaStream_t s;
    cudaMemPool_t pool, def;
    struct cudaMemPoolProps props;

    RT_OK(cudaMallocAsync(&a, MiB, 0));
    CHECK(used(0) == MiB);
    RT_OK(cudaFree(a));                                 /* cuMemFree frees async memory */
    RT_OK(cudaStreamCreate(&s));
    RT_OK(cudaMallocAsync(&a, 2 * MiB, s));
    RT_OK(cudaFreeAsync(a, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaStreamDestroy(s));
    CHECK(used(0) == 0);

    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 1;
    RT_OK(cudaMemPoolCreate(&pool, &props));
    RT_OK(cudaMallocFromPoolAsync(&b, 3 * MiB, pool, 0));
    CHECK(used(1) == 3 * MiB && used(0) == 0);          /* pool's device, not current */
    RT_OK(cudaMemPoolTrimTo(pool, 0));
    RT_OK(cudaMemPoolDestroy(pool));                    /* deferred: b is still live */
    CHECK(used(1) == 3 * MiB);
    RT_OK(cudaFreeAsync(b, 0));
    CHECK(used(1) == 0);

    RT_OK(cudaDeviceGetDefaultMemPool(&def, 0));
    RT_OK(cudaMallocFromPoolAsync(&a, MiB, def, 0));
    CHECK(used(0) == MiB);
    RT_OK(cudaFreeAsync(a, 0));
    RT_EQ(cudaMemPoolDestroy(def), cudaErrorInvalidValue);
    CHECK(used(0) == 0 && live() == 0);
}

static void test_host_memory(void)
{
    void *h = NULL, *m = NULL;
    char *buf = malloc(8192);
    CUdeviceptr d = 0;
    unsigned int type = 0;

    RT_OK(cudaMallocHost(&h, MiB));
    RT_OK(cudaHostAlloc(&m, 4096, cudaHostAllocPortable | cudaHostAllocMapped));
    CHECK(used(0) == 0 && live() == 2);                 /* pinned host is not device memory */
    memset(h, 1, MiB);
    CU_OK(cu.MemHostGetDevicePointer(&d, m, 0));
    CHECK(d == dptr(m));
    CU_OK(cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(h) + 10));
    CHECK(type == CU_MEMORYTYPE_HOST);
    RT_OK(cudaFreeHost(h));
    RT_OK(cudaFreeHost(m));
    RT_EQ(cudaFreeHost(buf), cudaErrorInvalidValue);
    RT_EQ(cudaHostAlloc(&m, 64, 0x80), cudaErrorInvalidValue);

    RT_OK(cudaHostRegister(buf, 8192, cudaHostRegisterDefault));
    RT_EQ(cudaHostRegister(buf + 4096, 16, cudaHostRegisterDefault),
          cudaErrorHostMemoryAlreadyRegistered);
    CU_OK(cu.MemHostGetDevicePointer(&d, buf + 100, 0));
    CHECK(d == dptr(buf + 100));
    RT_OK(cudaHostUnregister(buf));
    RT_EQ(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    CU_EQ(cu.MemHostGetDevicePointer(&d, buf, 0), CUDA_ERROR_INVALID_VALUE);
    free(buf);
    CHECK(used(0) == 0 && live() == 0);
}

static void test_ipc(void)
{
    void *p = NULL, *q = NULL, *q2 = NULL;
    cudaIpcMemHandle_t handle;
    size_t size = 0;

    RT_OK(cudaMalloc(&p, 2 * MiB));
    RT_OK(cudaIpcGetMemHandle(&handle, p));
    RT_OK(cudaIpcOpenMemHandle(&q, handle, cudaIpcMemLazyEnablePeerAccess));
    CHECK(q && q != p);
    CHECK(used(0) == 2 * MiB && live() == 1);           /* opening is not an allocation */
    ((char *)q)[2 * MiB - 1] = 1;
    CU_OK(cu.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dptr(q)));
    CHECK(size == 2 * MiB);
    RT_OK(cudaIpcOpenMemHandle(&q2, handle, cudaIpcMemLazyEnablePeerAccess));
    CHECK(q2 == q);                                     /* refcounted per context */
    RT_OK(cudaIpcCloseMemHandle(q));
    RT_OK(cudaIpcCloseMemHandle(q2));
    RT_EQ(cudaIpcCloseMemHandle(q), cudaErrorInvalidValue);
    memset(&handle, 0, sizeof(handle));
    RT_EQ(cudaIpcOpenMemHandle(&q, handle, cudaIpcMemLazyEnablePeerAccess),
          cudaErrorInvalidValue);
    RT_OK(cudaFree(p));
    CHECK(used(0) == 0 && live() == 0);
}

static void test_pointer_queries(void)
{
    void *p = NULL;
    CUdeviceptr base = 0;
    size_t size = 0;
    int ordinal = -1;
    unsigned int type = 0;
    int local;

    RT_OK(cudaSetDevice(1));
    RT_OK(cudaMalloc(&p, 5000));
    CU_OK(cu.PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dptr(p) + 4999));
    CU_OK(cu.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dptr(p) + 1));
    CU_OK(cu.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr(p)));
    CU_OK(cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(p)));
    CHECK(base == dptr(p) && size == 5000 && ordinal == 1 && type == CU_MEMORYTYPE_DEVICE);
    base = 0;
    size = 0;
    CU_OK(cu.MemGetAddressRange(&base, &size, dptr(p) + 123));
    CHECK(base == dptr(p) && size == 5000);
    CU_EQ(cu.PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dptr(p) + 5000),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cu.PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dptr(&local)),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cu.MemGetAddressRange(&base, &size, dptr(&local)), CUDA_ERROR_INVALID_VALUE);
    RT_OK(cudaFree(p));
    RT_OK(cudaSetDevice(0));
    CHECK(used(1) == 0 && live() == 0);
}

static void test_vmm(void)
{
    CUmemAllocationProp prop = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = { CU_MEM_LOCATION_TYPE_DEVICE, 1 },
    };
    CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, 1 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUmemGenericAllocationHandle h, h2, imp;
    CUdeviceptr va = 0, va2 = 0, start = 0;
    size_t gran = 0, size = 0;
    int fd = -1, ordinal = -1;

    CU_OK(cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(gran == 2 * MiB);
    CU_EQ(cu.MemCreate(&h, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cu.MemCreate(&h, CAPACITY + gran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cu.MemCreate(&h, 4 * MiB, &prop, 0));
    CHECK(used(1) == 4 * MiB && used(0) == 0 && live() == 1);

    CU_OK(cu.MemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(va % gran == 0);
    CU_OK(cu.MemMap(va, 4 * MiB, 0, h, 0));
    CU_EQ(cu.MemMap(va + 2 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlap */
    CU_OK(cu.MemSetAccess(va, 4 * MiB, &rw, 1));
    memset((void *)va, 0x5a, 4 * MiB);

    CU_OK(cu.PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 100));
    CU_OK(cu.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 100));
    CHECK(start == va && size == 8 * MiB);              /* the reservation */
    CU_OK(cu.MemGetAddressRange(&start, &size, va + 100));
    CHECK(start == va && size == 4 * MiB);              /* the mapping */
    CU_OK(cu.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va));
    CHECK(ordinal == 1);

    CU_OK(cu.MemRetainAllocationHandle(&h2, (void *)(va + 12345)));
    CHECK(h2 == h);
    CU_OK(cu.MemRelease(h2));

    /* An exported/imported handle maps the very same memory. */
    CU_OK(cu.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(cu.MemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CHECK(used(1) == 4 * MiB);                          /* imports are not charged */
    CU_OK(cu.MemMap(va + 4 * MiB, 4 * MiB, 0, imp, 0));
    CU_OK(cu.MemSetAccess(va + 4 * MiB, 4 * MiB, &rw, 1));
    CHECK(((unsigned char *)va)[4 * MiB + 7] == 0x5a);
    CU_OK(cu.MemUnmap(va + 4 * MiB, 4 * MiB));
    CU_OK(cu.MemRelease(imp));

    /* Released while mapped: charged until the last unmap. */
    CU_OK(cu.MemRelease(h));
    CHECK(used(1) == 4 * MiB && live() == 1);
    CU_EQ(cu.MemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cu.MemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);  /* still mapped */
    CU_EQ(cu.MemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE);        /* partial */
    CU_OK(cu.MemUnmap(va, 4 * MiB));
    CHECK(used(1) == 0 && live() == 0);

    /* Unmapped first: charged until released. */
    CU_OK(cu.MemCreate(&h, 2 * MiB, &prop, 0));
    CU_OK(cu.MemMap(va, 2 * MiB, 0, h, 0));
    CU_OK(cu.MemUnmap(va, 2 * MiB));
    CHECK(used(1) == 2 * MiB);
    CU_OK(cu.MemRelease(h));
    CHECK(used(1) == 0);

    CU_OK(cu.MemAddressFree(va, 8 * MiB));
    CU_EQ(cu.MemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cu.MemAddressReserve(&va2, 2 * MiB, 0, va, 0));
    CHECK(va2 == va);                                   /* free fixed-address hint honoured */
    CU_OK(cu.MemAddressFree(va2, 2 * MiB));
    CHECK(used(1) == 0 && live() == 0);
}

static void check_lookup(const char *symbol, int version, cuuint64_t flags, const char *want,
                         int line)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    void *fn = NULL;
    CUresult rc = cu.GetProcAddress(symbol, &fn, version, flags, &status);

    if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || fn != dlsym(libcuda, want)) {
        fprintf(stderr, "selftest.c:%d: cuGetProcAddress_v2(%s, %d, %#llx) != %s\n", line,
                symbol, version, (unsigned long long)flags, want);
        failures++;
    }
}

static void check_lookup_fails(const char *symbol, int version, CUresult want_rc,
                               CUdriverProcAddressQueryResult want_status, int line)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    void *fn = (void *)1;
    CUresult rc = cu.GetProcAddress(symbol, &fn, version, 0, &status);

    if (rc != want_rc || status != want_status || fn != NULL) {
        fprintf(stderr, "selftest.c:%d: cuGetProcAddress_v2(%s, %d) = %d/%d, want %d/%d\n",
                line, symbol, version, (int)rc, (int)status, (int)want_rc, (int)want_status);
        failures++;
    }
}

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM

static void test_proc_address(void)
{
    static const struct {
        const char *symbol;
        int version;
        cuuint64_t flags;
        const char *want;
    } found[] = {
        { "cuMemAlloc", 13000, 0, "cuMemAlloc_v2" },
        { "cuMemAlloc", 3020, 0, "cuMemAlloc_v2" },
        { "cuMemAlloc", 3010, 0, "cuMemAlloc" },
        { "cuMemFree", 13000, 0, "cuMemFree_v2" },
        { "cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2" },
        { "cuGetProcAddress", 11030, 0, "cuGetProcAddress" },
        { "cuCtxCreate", 13000, 0, "cuCtxCreate_v4" },
        { "cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2" },
        { "cuCtxSynchronize", 12090, 0, "cuCtxSynchronize" },
        { "cuIpcOpenMemHandle", 13000, 0, "cuIpcOpenMemHandle_v2" },
        { "cuMemHostRegister", 6000, 0, "cuMemHostRegister" },
        { "cuMemCreate", 13000, PTDS, "cuMemCreate" },   /* no per-thread variant */
        { "cuMemAllocAsync", 13000, 0, "cuMemAllocAsync" },
        { "cuMemAllocAsync", 13000, LEGACY, "cuMemAllocAsync" },
        { "cuMemAllocAsync", 13000, PTDS, "cuMemAllocAsync_ptsz" },
        { "cuMemFreeAsync", 13000, PTDS, "cuMemFreeAsync_ptsz" },
        { "cuMemAllocFromPoolAsync", 13000, PTDS, "cuMemAllocFromPoolAsync_ptsz" },
        { "cuStreamSynchronize", 13000, PTDS, "cuStreamSynchronize_ptsz" },
        { "cuMemcpy", 13000, PTDS, "cuMemcpy_ptds" },
    };
    PFN_cuGetProcAddress_v11030 v1 = NULL;
    PFN_cuMemAllocAsync_v11020_ptsz alloc_ptsz = NULL;
    PFN_cuMemFreeAsync_v11020_ptsz free_ptsz = NULL;
    enum cudaDriverEntryPointQueryResult st;
    void *fn = NULL;
    CUdeviceptr d = 0;

    CHECK((void *)cu.GetProcAddress == dlsym(libcuda, "cuGetProcAddress_v2"));
    for (size_t i = 0; i < sizeof(found) / sizeof(found[0]); i++)
        check_lookup(found[i].symbol, found[i].version, found[i].flags, found[i].want, __LINE__);
    check_lookup_fails("cuMemCreate", 10010, CUDA_ERROR_NOT_FOUND,
                       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, __LINE__);
    check_lookup_fails("cuNoSuchFunction", 13000, CUDA_ERROR_NOT_FOUND,
                       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, __LINE__);
    check_lookup_fails("cuMemAlloc_v2", 13000, CUDA_ERROR_NOT_FOUND,
                       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, __LINE__);   /* base names only */
    check_lookup_fails("cuMemAlloc", 13010, CUDA_ERROR_INVALID_VALUE,
                       CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, __LINE__);   /* newer than driver */

    /* The CUDA 11.3 four-argument ABI. */
    CU_OK(cu.GetProcAddress("cuGetProcAddress", (void **)&v1, 11030, 0, NULL));
    CU_OK(v1("cuMemFree", &fn, 13000, 0));
    CHECK(fn == dlsym(libcuda, "cuMemFree_v2"));

    /* The per-thread variants allocate and free like the plain ones. */
    CU_OK(cu.GetProcAddress("cuMemAllocAsync", (void **)&alloc_ptsz, 13000, PTDS, NULL));
    CU_OK(cu.GetProcAddress("cuMemFreeAsync", (void **)&free_ptsz, 13000, PTDS, NULL));
    CU_OK(alloc_ptsz(&d, MiB, NULL));
    CHECK(used(0) == MiB);
    CU_OK(free_ptsz(d, NULL));
    CHECK(used(0) == 0);

    /* The runtime's entry-point queries go through the same table. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    RT_OK(cudaGetDriverEntryPoint("cuMemFree", &fn, cudaEnableDefault, &st));
#pragma GCC diagnostic pop
    CHECK(st == cudaDriverEntryPointSuccess && fn == dlsym(libcuda, "cuMemFree_v2"));
    RT_OK(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 13000,
                                           cudaEnablePerThreadDefaultStream, &st));
    CHECK(fn == dlsym(libcuda, "cuMemAllocAsync_ptsz"));
    RT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 13000, cudaEnableDefault, &st),
          cudaErrorSymbolNotFound);
    CHECK(st == cudaDriverEntryPointSymbolNotFound && fn == NULL);
}

static void test_errors_and_streams(void)
{
    char buf[16];
    cudaStream_t s;

    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    CHECK(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0);
    CHECK(cudaMemcpy(buf, buf, 1, (enum cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidMemcpyDirection);
    CHECK(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
    CHECK(cudaGetLastError() == cudaSuccess);
    RT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
    RT_OK(cudaStreamCreate(&s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaStreamDestroy(s));
    RT_OK(cudaStreamSynchronize(0));
    RT_OK(cudaDeviceSynchronize());
}

static void test_device_reset(void)
{
    void *d = NULL, *h = NULL, *a = NULL;

    RT_OK(cudaMalloc(&d, MiB));
    RT_OK(cudaMallocHost(&h, 4096));
    RT_OK(cudaMallocAsync(&a, 2 * MiB, 0));
    CHECK(used(0) == 3 * MiB && live() == 3);
    RT_OK(cudaDeviceReset());
    CHECK(used(0) == 2 * MiB && live() == 1);           /* stream-ordered memory survives */
    RT_EQ(cudaFree(d), cudaErrorInvalidValue);
    RT_OK(cudaFreeAsync(a, 0));
    RT_OK(cudaMalloc(&d, MiB));                         /* context re-created on demand */
    RT_OK(cudaFree(d));
    CHECK(used(0) == 0 && live() == 0);
}

/* 64 threads: churn on both devices, then race for device 0's capacity. */
struct worker {
    pthread_t thread;
    int index;
    bool got_big;
};

static pthread_barrier_t barrier;

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    void *p = NULL, *big = NULL;
    cudaError_t err;

    RT_OK(cudaSetDevice(w->index % 2));
    for (int i = 0; i < 200; i++) {
        size_t size = 4096 * (size_t)(1 + (w->index + i) % 16);

        RT_OK(i % 2 ? cudaMallocAsync(&p, size, 0) : cudaMalloc(&p, size));
        ((volatile char *)p)[size - 1] = 1;
        RT_OK(i % 2 ? cudaFreeAsync(p, 0) : cudaFree(p));
    }
    RT_OK(cudaSetDevice(0));
    pthread_barrier_wait(&barrier);
    err = cudaMalloc(&big, BIG_ALLOC);
    w->got_big = err == cudaSuccess;
    if (!w->got_big)
        RT_EQ(err, cudaErrorMemoryAllocation);
    pthread_barrier_wait(&barrier);                     /* everyone holds what it got */
    if (w->got_big)
        RT_OK(cudaFree(big));
    return NULL;
}

static void test_threads(void)
{
    static struct worker workers[N_THREADS];
    int winners = 0;

    pthread_barrier_init(&barrier, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        workers[i].index = i;
        CHECK(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) == 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(workers[i].thread, NULL);
        winners += workers[i].got_big;
    }
    pthread_barrier_destroy(&barrier);
    CHECK(winners == (int)(CAPACITY / BIG_ALLOC));
    CHECK(used(0) == 0 && used(1) == 0 && live() == 0);
}

static const struct {
    const char *name;
    void (*run)(void);
} tests[] = {
    { "init", test_init },
    { "device memory", test_device_memory },
    { "capacity", test_capacity },
    { "pitch and 3D", test_pitch_and_3d },
    { "managed", test_managed },
    { "async and pools", test_async_and_pools },
    { "host memory", test_host_memory },
    { "ipc", test_ipc },
    { "pointer queries", test_pointer_queries },
    { "vmm", test_vmm },
    { "proc address", test_proc_address },
    { "errors and streams", test_errors_and_streams },
    { "device reset", test_device_reset },
    { "threads", test_threads },
};

int main(void)
{
    setenv("FAKECUDA_TOTAL_BYTES", "1G", 1);
    setenv("FAKECUDA_DEVICES", "2", 1);
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        int before = failures;

        tests[i].run();
        printf("%-20s %s\n", tests[i].name, failures == before ? "ok" : "FAILED");
    }
    printf("%s\n", failures ? "selftest FAILED" : "selftest passed");
    return failures ? 1 : 0;
}
