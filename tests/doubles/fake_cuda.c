/*
 * fake_cuda.c - GPU-free test double of the CUDA driver, built as libcuda.so.1.
 *
 * Fakes, with the exact CUDA 13 ABI and exported names:
 *   - device memory (cuMemAlloc/Pitch/Managed/Async/FromPool, arrays) as
 *     mmap'd host memory that programs may read and write;
 *   - pinned host memory and host registration, legacy IPC handles, pointer
 *     and address-range queries, memory pools;
 *   - the virtual memory management API, for real: physical allocations are
 *     memfds, reservations are PROT_NONE mappings, cuMemMap maps the memfd;
 *   - contexts, streams and devices as plain bookkeeping;
 *   - cuGetProcAddress (v1 and v2), resolving base names by CUDA version and
 *     by the per-thread-default-stream flag from one table.
 * Capacity: FAKECUDA_DEVICES devices (default 1) of FAKECUDA_TOTAL_BYTES each
 * (default 80G; K/M/G/T suffixes).  FAKECUDA_DEBUG=1 logs to stderr.
 * Test hooks: fakecuda_used_bytes(), fakecuda_live_allocations() (fakecuda.h).
 * FAKE_NVML_DIR=DIR: the bytes in use over all devices are kept in DIR/<pid>, as a driver
 * counts a process's memory for NVML; the NVML double (fake_nvml.c) reads them there.
 *
 * Not faked: kernels, modules, events, graphs, peer access, real asynchrony
 * (stream-ordered calls complete immediately), the context stack (one current
 * context per thread), pre-3.2 32-bit entry points (CUDA_ERROR_NOT_SUPPORTED).
 */
#define _GNU_SOURCE
/* Declares every exported ABI variant (legacy, _v2, _ptsz, _ptds) under its
 * real symbol name and #undefs the cuFoo -> cuFoo_v2 remapping at the end. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "fakecuda.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DRIVER_VERSION 13000
#define MAX_DEVICES 64
#define DEFAULT_TOTAL_BYTES ((size_t)80 << 30)
#define VMM_GRANULARITY ((size_t)2 << 20)
#define PITCH_ALIGNMENT ((size_t)512)
#define UNUSED __attribute__((unused))

#define CTX_MAGIC 0x58544346u    /* "FCTX" */
#define STREAM_MAGIC 0x52545346u /* "FSTR" */
#define POOL_MAGIC 0x4c4f5046u   /* "FPOL" */
#define IPC_MAGIC 0x3143504941434655ull /* "UFCAIPC1" */

/* ------------------------------------------------------------------------ */
/* Configuration and logging                                                */
/* ------------------------------------------------------------------------ */

static struct {
    size_t total_bytes;
    int devices;
    bool debug;
    const char *nvml_dir;
} config;

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Fork-safe, unlike the real driver: a child forked while another thread is inside the double
 * gets the lock free, so a hang in a forked child is never the double's (tests/e2e/test_stress.py). */
static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_done(void) { pthread_mutex_unlock(&lock); }
__attribute__((constructor)) static void fork_handlers(void) { pthread_atfork(fork_prepare, fork_done, fork_done); }

__attribute__((format(printf, 1, 2)))
static void dbg(const char *fmt, ...)
{
    va_list ap;

    if (!config.debug)
        return;
    va_start(ap, fmt);
    fputs("[fakecuda] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* "123", "64K", "512M", "80G", "1T" (optionally "KB"/"KiB"); binary units. */
static bool parse_size(const char *s, size_t *out)
{
    static const char units[] = "KMGT";
    unsigned long long v;
    unsigned shift = 0;
    const char *unit;
    char *end;

    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return false;
    if (*end && (unit = strchr(units, *end & ~0x20))) {
        shift = 10 * (unsigned)(unit - units + 1);
        end += (end[1] == 'i' && end[2] == 'B') ? 3 : (end[1] == 'B') ? 2 : 1;
    }
    if (*end || v > (SIZE_MAX >> shift))
        return false;
    *out = (size_t)v << shift;
    return true;
}

static bool parse_devices(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (end == s || *end || v < 0 || v > MAX_DEVICES)
        return false;
    *out = (int)v;
    return true;
}

static void init_tables(void);

static void config_load(void)
{
    const char *s;

    s = getenv("FAKECUDA_DEBUG");
    config.debug = s && strcmp(s, "1") == 0;
    config.total_bytes = DEFAULT_TOTAL_BYTES;
    config.devices = 1;
    s = getenv("FAKECUDA_TOTAL_BYTES");
    if (s && !parse_size(s, &config.total_bytes))
        dbg("ignoring bad FAKECUDA_TOTAL_BYTES=%s", s);
    s = getenv("FAKECUDA_DEVICES");
    if (s && !parse_devices(s, &config.devices))
        dbg("ignoring bad FAKECUDA_DEVICES=%s (0..%d)", s, MAX_DEVICES);
    dbg("%d device(s) of %zu bytes", config.devices, config.total_bytes);
    s = getenv("FAKE_NVML_DIR");
    config.nvml_dir = s && s[0] ? s : NULL;
    init_tables();
}

static void ensure_config(void)
{
    pthread_once(&config_once, config_load);
}

static bool device_valid(int dev)
{
    ensure_config();
    return dev >= 0 && dev < config.devices;
}

/* ------------------------------------------------------------------------ */
/* Capacity accounting (lock-free)                                          */
/* ------------------------------------------------------------------------ */

static _Atomic size_t used_bytes[MAX_DEVICES];
static _Atomic size_t live_objects;

/* The process's bytes in use, where FAKE_NVML_DIR asks for them: a fixed-width line rewritten
 * in place, under a lock so that an older total never lands after a newer one. */
static void report_used(void)
{
    static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
    static int fd = -1;
    static pid_t fd_pid;

    if (!config.nvml_dir)
        return;
    pthread_mutex_lock(&report_lock);
    if (fd < 0 || fd_pid != getpid()) { /* a forked child counts in a file of its own */
        char path[4096];
        if (fd >= 0)
            close(fd);
        snprintf(path, sizeof(path), "%s/%d", config.nvml_dir, (int)getpid());
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        fd_pid = getpid();
    }
    size_t total = 0;
    for (int d = 0; d < MAX_DEVICES; d++)
        total += atomic_load(&used_bytes[d]);
    char line[32];
    int n = snprintf(line, sizeof(line), "%20zu\n", total);
    if (fd >= 0 && pwrite(fd, line, (size_t)n, 0) != n)
        dbg("FAKE_NVML_DIR: cannot write %s/%d", config.nvml_dir, (int)getpid());
    pthread_mutex_unlock(&report_lock);
}

/* Reserves `size` bytes of `dev`; false (and nothing charged) when full. */
static bool charge(int dev, size_t size)
{
    size_t cur = atomic_load(&used_bytes[dev]);

    do {
        if (size > config.total_bytes - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&used_bytes[dev], &cur, cur + size));
    report_used();
    return true;
}

static void uncharge(int dev, size_t size)
{
    atomic_fetch_sub(&used_bytes[dev], size);
    report_used();
}

size_t fakecuda_used_bytes(int device)
{
    return device_valid(device) ? atomic_load(&used_bytes[device]) : 0;
}

size_t fakecuda_live_allocations(void)
{
    return atomic_load(&live_objects);
}

/* ------------------------------------------------------------------------ */
/* Contexts, streams, pools: the opaque handle types, defined here          */
/* ------------------------------------------------------------------------ */

struct CUctx_st {
    uint32_t magic;
    int device;
    bool primary;
    unsigned refs;           /* primary contexts: retain count */
};

struct CUstream_st {
    uint32_t magic;
    int device;
    bool capturing; /* between cuStreamBeginCapture and cuStreamEndCapture */
};

struct CUmemPoolHandle_st {
    uint32_t magic;
    int device;
    bool is_default;
    bool destroyed;          /* destroyed with allocations still live */
    size_t live;             /* allocations from this pool not yet freed */
};

static struct CUctx_st primary_ctx[MAX_DEVICES];
static struct CUmemPoolHandle_st default_pool[MAX_DEVICES];
static __thread CUcontext current_ctx;

static void init_tables(void)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        primary_ctx[i] = (struct CUctx_st){ CTX_MAGIC, i, true, 0 };
        default_pool[i] = (struct CUmemPoolHandle_st){ POOL_MAGIC, i, true, false, 0 };
    }
}

static struct CUctx_st *ctx_get(CUcontext ctx)
{
    return ctx && ctx->magic == CTX_MAGIC ? ctx : NULL;
}

/* Device of the calling thread's context; device 0 when none is current. */
static int current_device(void)
{
    struct CUctx_st *ctx = ctx_get(current_ctx);

    return ctx ? ctx->device : 0;
}

static bool stream_is_builtin(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static CUresult stream_device(CUstream s, int *dev)
{
    if (stream_is_builtin(s)) {
        *dev = current_device();
        return CUDA_SUCCESS;
    }
    if (s->magic != STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *dev = s->device;
    return CUDA_SUCCESS;
}

static bool pool_usable(CUmemoryPool pool)
{
    return pool && pool->magic == POOL_MAGIC && !pool->destroyed;
}

/* ------------------------------------------------------------------------ */
/* Region registry: every linear allocation, registration and IPC opening   */
/* ------------------------------------------------------------------------ */

enum region_kind {
    R_DEVICE,        /* cuMemAlloc, cuMemAllocPitch */
    R_ASYNC,         /* cuMemAllocAsync, cuMemAllocFromPoolAsync */
    R_MANAGED,       /* cuMemAllocManaged */
    R_ARRAY,         /* cuArrayCreate (handle = base address) */
    R_HOST,          /* cuMemAllocHost, cuMemHostAlloc */
    R_REGISTERED,    /* cuMemHostRegister: the caller's memory */
    R_IPC,           /* cuIpcOpenMemHandle */
    R_KINDS
};

#define KIND(k) (1u << (k))
#define KINDS_ALL ((1u << R_KINDS) - 1)
#define KINDS_DEVICE_FREE (KIND(R_DEVICE) | KIND(R_ASYNC) | KIND(R_MANAGED))
#define KINDS_QUERYABLE (KINDS_ALL & ~KIND(R_ARRAY))
#define KINDS_HOST (KIND(R_HOST) | KIND(R_REGISTERED))
/* Destroyed with their context (cuCtxDestroy, primary context reset). */
#define KINDS_CTX_OWNED (KINDS_ALL & ~KIND(R_ASYNC))

static const struct kind_info {
    const char *name;
    CUmemorytype memtype;
    bool charged;            /* holds device capacity */
    bool owns_map;           /* the double mmapped it and munmaps it */
    bool live;               /* counted by fakecuda_live_allocations */
} kind_info[R_KINDS] = {
    [R_DEVICE]     = { "device",     CU_MEMORYTYPE_DEVICE, true,  true,  true },
    [R_ASYNC]      = { "async",      CU_MEMORYTYPE_DEVICE, true,  true,  true },
    [R_MANAGED]    = { "managed",    CU_MEMORYTYPE_DEVICE, true,  true,  true },
    [R_ARRAY]      = { "array",      CU_MEMORYTYPE_ARRAY,  true,  true,  true },
    [R_HOST]       = { "host",       CU_MEMORYTYPE_HOST,   false, true,  true },
    [R_REGISTERED] = { "registered", CU_MEMORYTYPE_HOST,   false, false, false },
    [R_IPC]        = { "ipc",        CU_MEMORYTYPE_DEVICE, false, true,  false },
};

struct region {
    struct region *next;     /* hash chain */
    uintptr_t base;
    size_t size;
    enum region_kind kind;
    int device;
    CUcontext ctx;           /* context current at creation */
    CUmemoryPool pool;       /* R_ASYNC: the pool it came from */
    uint64_t serial;         /* unique per region; names it in IPC handles */
    int32_t ipc_pid;         /* R_IPC: exporter pid + serial, open count */
    uint64_t ipc_serial;
    unsigned ipc_refs;
};

#define BUCKETS (1u << 16)
static struct region *buckets[BUCKETS];
static _Atomic uint64_t next_serial = 1;

static size_t bucket_of(uintptr_t base)
{
    return (size_t)(((uint64_t)base >> 12) * 0x9E3779B97F4A7C15ull >> 48);
}

static bool range_contains(uintptr_t base, size_t size, uintptr_t addr)
{
    return addr >= base && addr - base < size;
}

static bool ranges_overlap(uintptr_t a, size_t asize, uintptr_t b, size_t bsize)
{
    return a < b + bsize && b < a + asize;
}

static struct region *region_new(enum region_kind kind, int device, size_t size)
{
    struct region *r = calloc(1, sizeof(*r));

    if (r) {
        r->kind = kind;
        r->device = device;
        r->size = size;
        r->ctx = current_ctx;
        r->serial = atomic_fetch_add(&next_serial, 1);
    }
    return r;
}

/* Locked. */
static void region_link(struct region *r)
{
    size_t b = bucket_of(r->base);

    r->next = buckets[b];
    buckets[b] = r;
    if (r->pool)
        r->pool->live++;
}

/* Locked.  Drops the region from its chain and from its pool's count; a
 * pool destroyed while it still had allocations goes with its last one. */
static void region_unlink_at(struct region **pp)
{
    struct region *r = *pp;
    CUmemoryPool pool = r->pool;

    *pp = r->next;
    r->next = NULL;
    if (pool && --pool->live == 0 && pool->destroyed) {
        pool->magic = 0;
        free(pool);
    }
}

/* Locked.  The link pointing at the region based exactly at `base`. */
static struct region **region_slot(uintptr_t base, unsigned kinds)
{
    struct region **pp = &buckets[bucket_of(base)];

    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->base == base && (KIND((*pp)->kind) & kinds))
            return pp;
    return NULL;
}

/* Locked.  Exact base first (cheap); interior pointers scan everything. */
static struct region *region_containing(uintptr_t addr, unsigned kinds)
{
    struct region **pp = region_slot(addr, kinds);

    if (pp)
        return *pp;
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct region *r = buckets[b]; r; r = r->next)
            if ((KIND(r->kind) & kinds) && range_contains(r->base, r->size, addr))
                return r;
    return NULL;
}

/* Locked. */
static bool region_overlaps_any(uintptr_t base, size_t size, unsigned kinds)
{
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct region *r = buckets[b]; r; r = r->next)
            if ((KIND(r->kind) & kinds) && ranges_overlap(r->base, r->size, base, size))
                return true;
    return false;
}

/* Unlocked: releases the memory and the accounting of an unlinked region. */
static void region_destroy(struct region *r)
{
    const struct kind_info *k = &kind_info[r->kind];

    dbg("free %s %#lx (%zu bytes, device %d)", k->name, (unsigned long)r->base,
        r->size, r->device);
    if (k->owns_map)
        munmap((void *)r->base, r->size);
    if (k->charged)
        uncharge(r->device, r->size);
    if (k->live)
        atomic_fetch_sub(&live_objects, 1);
    free(r);
}

static void *map_anonymous(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

/* Creates a region of fresh memory: charge, map, register. */
static CUresult region_alloc(enum region_kind kind, int device, size_t size,
                             CUmemoryPool pool, uintptr_t *out)
{
    const struct kind_info *k = &kind_info[kind];
    struct region *r;
    void *p = NULL;

    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (k->charged && !charge(device, size)) {
        dbg("out of memory: %s %zu bytes on device %d (%zu used)", k->name, size,
            device, atomic_load(&used_bytes[device]));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r = region_new(kind, device, size);
    if (!r || !(p = map_anonymous(size))) {
        free(r);
        if (k->charged)
            uncharge(device, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)p;
    r->pool = pool;
    if (k->live)                 /* counted before it can be freed */
        atomic_fetch_add(&live_objects, 1);
    pthread_mutex_lock(&lock);
    region_link(r);
    pthread_mutex_unlock(&lock);
    dbg("alloc %s %#lx (%zu bytes, device %d)", k->name, (unsigned long)r->base, size, device);
    *out = r->base;
    return CUDA_SUCCESS;
}

/* region_alloc() for the CUdeviceptr and void * out-parameters of the API. */
static CUresult alloc_dptr(CUdeviceptr *dptr, enum region_kind kind, int device, size_t size,
                           CUmemoryPool pool)
{
    uintptr_t base;
    CUresult rc = dptr ? region_alloc(kind, device, size, pool, &base) : CUDA_ERROR_INVALID_VALUE;

    if (rc == CUDA_SUCCESS)
        *dptr = base;
    return rc;
}

static CUresult alloc_host_ptr(void **pp, enum region_kind kind, size_t size)
{
    uintptr_t base;
    CUresult rc = pp ? region_alloc(kind, current_device(), size, NULL, &base)
                     : CUDA_ERROR_INVALID_VALUE;

    if (rc == CUDA_SUCCESS)
        *pp = (void *)base;
    return rc;
}

static CUresult region_free(uintptr_t base, unsigned kinds)
{
    struct region **pp, *r = NULL;

    pthread_mutex_lock(&lock);
    pp = region_slot(base, kinds);
    if (pp) {
        r = *pp;
        region_unlink_at(pp);
    }
    pthread_mutex_unlock(&lock);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    region_destroy(r);
    return CUDA_SUCCESS;
}

/* What destroying a context releases: everything it allocated except
 * stream-ordered allocations (VMM memory is never tied to a context). */
static void release_ctx_regions(CUcontext ctx)
{
    struct region *doomed = NULL, *r;

    pthread_mutex_lock(&lock);
    for (size_t b = 0; b < BUCKETS; b++) {
        for (struct region **pp = &buckets[b]; (r = *pp);) {
            if (r->ctx == ctx && (KIND(r->kind) & KINDS_CTX_OWNED)) {
                region_unlink_at(pp);
                r->next = doomed;
                doomed = r;
            } else {
                pp = &r->next;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    while ((r = doomed)) {
        doomed = r->next;
        region_destroy(r);
    }
}

/* ------------------------------------------------------------------------ */
/* Initialization, devices, version                                         */
/* ------------------------------------------------------------------------ */

CUresult cuInit(unsigned int Flags)
{
    ensure_config();
    if (Flags)
        return CUDA_ERROR_INVALID_VALUE;
    return config.devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    ensure_config();
    *count = config.devices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "FakeCUDA Device %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = config.total_bytes;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Contexts                                                                 */
/* ------------------------------------------------------------------------ */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    struct CUctx_st *ctx;

    if (!pctx || (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    ctx = malloc(sizeof(*ctx));
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ctx = (struct CUctx_st){ CTX_MAGIC, dev, false, 0 };
    current_ctx = ctx;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray UNUSED,
                        int numParams UNUSED, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams UNUSED,
                        unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
    if (!ctx_get(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    release_ctx_regions(ctx);
    if (current_ctx == ctx)
        current_ctx = NULL;
    ctx->magic = 0;
    free(ctx);
    return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    return ctx_destroy(ctx);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx_destroy(ctx);
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current_ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (ctx && !ctx_get(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    current_ctx = ctx;
    return CUDA_SUCCESS;
}

/* `ctx` NULL means the current context (CUDA 13 *_v2 semantics). */
static CUresult ctx_resolve(CUcontext ctx, struct CUctx_st **out)
{
    *out = ctx_get(ctx ? ctx : current_ctx);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult ctx_device(CUdevice *device, CUcontext ctx)
{
    struct CUctx_st *c;
    CUresult rc;

    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    rc = ctx_resolve(ctx, &c);
    if (rc == CUDA_SUCCESS)
        *device = c->device;
    return rc;
}

CUresult cuCtxGetDevice(CUdevice *device) { return ctx_device(device, NULL); }
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) { return ctx_device(device, ctx); }

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    return ctx && !ctx_get(ctx) ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    primary_ctx[dev].refs++;
    pthread_mutex_unlock(&lock);
    *pctx = &primary_ctx[dev];
    return CUDA_SUCCESS;
}

/* The last release destroys the primary context's allocations, as in CUDA. */
static CUresult primary_release(CUdevice dev)
{
    bool last;

    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (primary_ctx[dev].refs == 0) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    last = --primary_ctx[dev].refs == 0;
    pthread_mutex_unlock(&lock);
    if (last)
        release_ctx_regions(&primary_ctx[dev]);
    return CUDA_SUCCESS;
}

static CUresult primary_reset(CUdevice dev)
{
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    primary_ctx[dev].refs = 0;
    pthread_mutex_unlock(&lock);
    release_ctx_regions(&primary_ctx[dev]);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    *active = primary_ctx[dev].refs > 0;
    pthread_mutex_unlock(&lock);
    *flags = 0;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    struct CUstream_st *s;

    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    s = malloc(sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *s = (struct CUstream_st){ STREAM_MAGIC, current_device() };
    *phStream = s;
    return CUDA_SUCCESS;
}

static CUresult stream_destroy(CUstream s)
{
    if (stream_is_builtin(s) || s->magic != STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    s->magic = 0;
    free(s);
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }
CUresult cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }

static CUresult stream_synchronize(CUstream s)
{
    int dev;

    return stream_device(s, &dev);
}

CUresult cuStreamSynchronize(CUstream hStream) { return stream_synchronize(hStream); }
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_synchronize(hStream); }

/* Stream capture: a created stream captures (the built-in ones cannot); no graph is built, the
 * handle handed back is one per capture that nothing reads. */
static CUresult begin_capture(CUstream s)
{
    if (stream_is_builtin(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->magic != STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    s->capturing = true;
    return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream s, CUgraph *phGraph)
{
    static char graph;

    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    if (stream_is_builtin(s) || s->magic != STREAM_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!s->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    s->capturing = false;
    *phGraph = (CUgraph)(void *)&graph;
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    (void)mode;
    return begin_capture(hStream);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    (void)mode;
    return begin_capture(hStream);
}
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph); }
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph); }

/* ------------------------------------------------------------------------ */
/* Linear device memory                                                     */
/* ------------------------------------------------------------------------ */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return alloc_dptr(dptr, R_DEVICE, current_device(), bytesize, NULL);
}

static size_t round_up(size_t v, size_t align)
{
    return (v + align - 1) / align * align;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                            size_t Height, unsigned int ElementSizeBytes)
{
    size_t pitch = round_up(WidthInBytes, PITCH_ALIGNMENT);
    CUresult rc;

    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 || pitch < WidthInBytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
        return CUDA_ERROR_INVALID_VALUE;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = alloc_dptr(dptr, R_DEVICE, current_device(), pitch * Height, NULL);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_dptr(dptr, R_MANAGED, 0, bytesize, NULL);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return dptr ? region_free(dptr, KINDS_DEVICE_FREE) : CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Stream-ordered allocation and pools (everything completes immediately)   */
/* ------------------------------------------------------------------------ */

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                CUstream stream)
{
    int dev;
    CUresult rc = stream_device(stream, &dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool_usable(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_dptr(dptr, R_ASYNC, pool->device, size, pool);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    int dev;
    CUresult rc = stream_device(stream, &dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return alloc_from_pool(dptr, size, &default_pool[dev], stream);
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream)
{
    int dev;
    CUresult rc = stream_device(stream, &dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    return dptr ? region_free(dptr, KINDS_DEVICE_FREE) : CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = &default_pool[dev];
    return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    struct CUmemPoolHandle_st *p;

    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!device_valid(poolProps->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    p = calloc(1, sizeof(*p));
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (struct CUmemPoolHandle_st){ POOL_MAGIC, poolProps->location.id, false, false, 0 };
    *pool = p;
    return CUDA_SUCCESS;
}

/* Like CUDA, a pool with live allocations is released after the last one. */
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    bool valid, now = false;

    pthread_mutex_lock(&lock);
    valid = pool_usable(pool) && !pool->is_default;
    if (valid) {
        pool->destroyed = true;
        now = pool->live == 0;
        if (now)
            pool->magic = 0;
    }
    pthread_mutex_unlock(&lock);
    if (now)
        free(pool);
    return valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep UNUSED)
{
    return pool_usable(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------ */
/* Arrays (sized and charged; the contents are not addressable)             */
/* ------------------------------------------------------------------------ */

static size_t array_format_bytes(CUarray_format format)
{
    static const struct { CUarray_format format; size_t bytes; } formats[] = {
        { CU_AD_FORMAT_UNSIGNED_INT8, 1 }, { CU_AD_FORMAT_UNSIGNED_INT16, 2 },
        { CU_AD_FORMAT_UNSIGNED_INT32, 4 }, { CU_AD_FORMAT_SIGNED_INT8, 1 },
        { CU_AD_FORMAT_SIGNED_INT16, 2 }, { CU_AD_FORMAT_SIGNED_INT32, 4 },
        { CU_AD_FORMAT_HALF, 2 }, { CU_AD_FORMAT_FLOAT, 4 },
    };

    for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
        if (formats[i].format == format)
            return formats[i].bytes;
    return 0;
}

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    const CUDA_ARRAY_DESCRIPTOR *d = pAllocateArray;
    size_t elem, rows, size;
    uintptr_t base;
    CUresult rc;

    if (!pHandle || !d || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)
        return CUDA_ERROR_INVALID_VALUE;
    elem = array_format_bytes(d->Format);
    if (elem == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    rows = d->Height ? d->Height : 1;
    if (__builtin_mul_overflow(d->Width, rows, &size) ||
        __builtin_mul_overflow(size, elem * d->NumChannels, &size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = region_alloc(R_ARRAY, current_device(), size, NULL, &base);
    if (rc == CUDA_SUCCESS)
        *pHandle = (CUarray)base;
    return rc;
}

CUresult cuArrayDestroy(CUarray hArray)
{
    return region_free((uintptr_t)hArray, KIND(R_ARRAY)) == CUDA_SUCCESS
               ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ------------------------------------------------------------------------ */
/* Pinned and registered host memory (never charged to a device)            */
/* ------------------------------------------------------------------------ */

static CUresult host_alloc(void **pp, size_t bytesize, unsigned int Flags)
{
    const unsigned valid = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                           CU_MEMHOSTALLOC_WRITECOMBINED;

    if (Flags & ~valid)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_host_ptr(pp, R_HOST, bytesize);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return host_alloc(pp, bytesize, Flags);
}

/* Through the exported entry point, as drivers' API functions call one another: in the
 * interposable build (interposable/meson.build) this call binds to an interposer's export. */
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void *p)
{
    return region_free((uintptr_t)p, KIND(R_HOST));
}

static CUresult host_register(void *p, size_t bytesize, unsigned int Flags)
{
    const unsigned valid = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    struct region *r;
    CUresult rc = CUDA_SUCCESS;

    if (!p || bytesize == 0 || (Flags & ~valid))
        return CUDA_ERROR_INVALID_VALUE;
    r = region_new(R_REGISTERED, current_device(), bytesize);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r->base = (uintptr_t)p;
    pthread_mutex_lock(&lock);
    if (region_overlaps_any(r->base, bytesize, KINDS_HOST))
        rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    else
        region_link(r);
    pthread_mutex_unlock(&lock);
    if (rc != CUDA_SUCCESS)
        free(r);
    else
        dbg("register host %p (%zu bytes)", p, bytesize);
    return rc;
}

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

CUresult cuMemHostUnregister(void *p)
{
    return region_free((uintptr_t)p, KIND(R_REGISTERED)) == CUDA_SUCCESS
               ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* Unified addressing: the device pointer is the host pointer. */
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    bool known;

    if (!pdptr || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    known = region_containing((uintptr_t)p, KINDS_HOST) != NULL;
    pthread_mutex_unlock(&lock);
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Legacy IPC.  An opened handle is a fresh zero-filled mapping of the      */
/* exported size: it does NOT alias the exporter's memory.                  */
/* ------------------------------------------------------------------------ */

struct ipc_payload {
    uint64_t magic;
    uint64_t serial;         /* the exported region's serial */
    uint64_t size;
    int32_t pid;             /* exporter */
    int32_t device;
};

_Static_assert(sizeof(struct ipc_payload) <= sizeof(CUipcMemHandle), "IPC payload too big");

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct ipc_payload payload = { .magic = IPC_MAGIC, .pid = (int32_t)getpid() };
    struct region *r;

    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    r = region_containing(dptr, KIND(R_DEVICE));
    if (r) {
        payload.serial = r->serial;
        payload.size = r->size;
        payload.device = r->device;
    }
    pthread_mutex_unlock(&lock);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle, &payload, sizeof(payload));
    return CUDA_SUCCESS;
}

/* Locked.  A handle already opened in this context (CUDA refcounts it). */
static struct region *ipc_find_open(const struct ipc_payload *h)
{
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct region *r = buckets[b]; r; r = r->next)
            if (r->kind == R_IPC && r->ipc_pid == h->pid &&
                r->ipc_serial == h->serial && r->ctx == current_ctx)
                return r;
    return NULL;
}

/* Locked. */
static CUresult ipc_map_new(const struct ipc_payload *h, uintptr_t *out)
{
    struct region *r = region_new(R_IPC, h->device, h->size);
    void *p = r ? map_anonymous(h->size) : NULL;

    if (!p) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)p;
    r->ipc_pid = h->pid;
    r->ipc_serial = h->serial;
    r->ipc_refs = 1;
    region_link(r);
    dbg("ipc open %#lx (%zu bytes, device %d)", (unsigned long)r->base, r->size, r->device);
    *out = r->base;
    return CUDA_SUCCESS;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    struct ipc_payload h;
    struct region *r;
    uintptr_t base = 0;
    CUresult rc = CUDA_SUCCESS;

    memcpy(&h, &handle, sizeof(h));
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if (h.magic != IPC_MAGIC || h.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(h.device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    r = ipc_find_open(&h);
    if (r) {
        r->ipc_refs++;
        base = r->base;
    } else {
        rc = ipc_map_new(&h, &base);
    }
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS)
        *pdptr = base;
    return rc;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    struct region **pp, *r = NULL;

    pthread_mutex_lock(&lock);
    pp = region_slot(dptr, KIND(R_IPC));
    if (pp && --(*pp)->ipc_refs == 0) {
        r = *pp;
        region_unlink_at(pp);
    }
    pthread_mutex_unlock(&lock);
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    if (r)
        region_destroy(r);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Virtual memory management, backed by memfds.                             */
/* A physical allocation holds capacity until it is released AND unmapped. */
/* Handles are (generation << 32 | slot + 1).  All state is under `lock`.   */
/* ------------------------------------------------------------------------ */

struct vmm_alloc {
    bool used;
    bool charged;            /* created here (imports are not charged) */
    uint32_t gen;
    int fd;
    size_t size;
    int device;
    unsigned refs;           /* create/import/retain minus release */
    unsigned maps;           /* live cuMemMap mappings */
    dev_t st_dev;            /* identifies the memfd across dup/import */
    ino_t st_ino;
};

struct vmm_range {
    struct vmm_range *next;
    uintptr_t base;
    size_t size;
    size_t slot;             /* mappings: the vmm_alloc mapped there */
};

static struct vmm_alloc *vmm_allocs;
static size_t vmm_slots;
static struct vmm_range *vmm_reserved;
static struct vmm_range *vmm_mapped;

static CUmemGenericAllocationHandle vmm_handle(size_t slot)
{
    return ((uint64_t)vmm_allocs[slot].gen << 32) | (slot + 1);
}

/* A handle the caller still owns (refs > 0), or NULL. */
static struct vmm_alloc *vmm_lookup(CUmemGenericAllocationHandle h, size_t *slot)
{
    size_t s = (size_t)(h & 0xffffffffu) - 1;

    if (s >= vmm_slots || !vmm_allocs[s].used || vmm_allocs[s].gen != (uint32_t)(h >> 32) ||
        vmm_allocs[s].refs == 0)
        return NULL;
    if (slot)
        *slot = s;
    return &vmm_allocs[s];
}

static bool vmm_grow(void)
{
    size_t n = vmm_slots ? vmm_slots * 2 : 16;
    struct vmm_alloc *grown = realloc(vmm_allocs, n * sizeof(*grown));

    if (!grown)
        return false;
    memset(grown + vmm_slots, 0, (n - vmm_slots) * sizeof(*grown));
    vmm_allocs = grown;
    vmm_slots = n;
    return true;
}

/* A free slot, with a new generation so stale handles to it stay invalid. */
static bool vmm_slot_new(size_t *slot)
{
    size_t s = 0;

    while (s < vmm_slots && vmm_allocs[s].used)
        s++;
    if (s == vmm_slots && !vmm_grow())
        return false;
    vmm_allocs[s].gen++;
    *slot = s;
    return true;
}

static CUresult vmm_insert(int fd, size_t size, int device, bool charged,
                           CUmemGenericAllocationHandle *handle)
{
    struct stat st;
    struct vmm_alloc *a;
    size_t slot;

    if (fstat(fd, &st) != 0 || !vmm_slot_new(&slot))
        return CUDA_ERROR_OUT_OF_MEMORY;
    a = &vmm_allocs[slot];
    a->used = true;
    a->charged = charged;
    a->fd = fd;
    a->size = size;
    a->device = device;
    a->refs = 1;
    a->maps = 0;
    a->st_dev = st.st_dev;
    a->st_ino = st.st_ino;
    *handle = vmm_handle(slot);
    return CUDA_SUCCESS;
}

/* Destroys the physical allocation once it is neither owned nor mapped. */
static void vmm_maybe_destroy(size_t slot)
{
    struct vmm_alloc *a = &vmm_allocs[slot];

    if (a->refs || a->maps)
        return;
    dbg("vmm destroy handle %#llx (%zu bytes, device %d)",
        (unsigned long long)vmm_handle(slot), a->size, a->device);
    close(a->fd);
    if (a->charged) {
        uncharge(a->device, a->size);
        atomic_fetch_sub(&live_objects, 1);
    }
    a->used = false;
}

static bool alloc_prop_valid(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    if (!granularity || !alloc_prop_valid(prop))
        return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
        option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

static int memfd_of_size(size_t size)
{
    int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);

    if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    int dev, fd;
    CUresult rc;

    if (!handle || !alloc_prop_valid(prop) || flags || size == 0 || size % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    dev = prop->location.id;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!charge(dev, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    fd = memfd_of_size(size);
    atomic_fetch_add(&live_objects, 1);
    pthread_mutex_lock(&lock);
    rc = fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : vmm_insert(fd, size, dev, true, handle);
    pthread_mutex_unlock(&lock);
    if (rc != CUDA_SUCCESS) {
        if (fd >= 0)
            close(fd);
        uncharge(dev, size);
        atomic_fetch_sub(&live_objects, 1);
        return rc;
    }
    dbg("vmm create handle %#llx (%zu bytes, device %d)", (unsigned long long)*handle, size, dev);
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct vmm_alloc *a;
    size_t slot;

    pthread_mutex_lock(&lock);
    a = vmm_lookup(handle, &slot);
    if (a) {
        a->refs--;
        vmm_maybe_destroy(slot);
    }
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static struct vmm_range *vmm_range_containing(struct vmm_range *list, uintptr_t addr)
{
    for (; list; list = list->next)
        if (range_contains(list->base, list->size, addr))
            return list;
    return NULL;
}

/* Bytes of [base, base+size) covered by mappings; -1 if one straddles an end. */
static long long vmm_mapped_within(uintptr_t base, size_t size)
{
    long long covered = 0;

    for (struct vmm_range *m = vmm_mapped; m; m = m->next) {
        if (!ranges_overlap(m->base, m->size, base, size))
            continue;
        if (m->base < base || m->base + m->size > base + size)
            return -1;
        covered += (long long)m->size;
    }
    return covered;
}

static void *reserve_at(uintptr_t hint, size_t size, size_t alignment)
{
    void *p;

    if (!hint || hint % alignment)
        return NULL;
    p = mmap((void *)hint, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if ((uintptr_t)p != hint) {   /* kernels without MAP_FIXED_NOREPLACE */
        munmap(p, size);
        return NULL;
    }
    return p;
}

static void *reserve_aligned(size_t size, size_t alignment)
{
    size_t len = size + alignment;
    uintptr_t raw, start;
    void *p;

    if (len < size)
        return NULL;
    p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    raw = (uintptr_t)p;
    start = round_up(raw, alignment);
    if (start > raw)
        munmap(p, start - raw);
    if (raw + len > start + size)
        munmap((void *)(start + size), raw + len - (start + size));
    return (void *)start;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                             CUdeviceptr addr, unsigned long long flags)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct vmm_range *r;
    void *p;

    if (!ptr || size == 0 || size % VMM_GRANULARITY || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0)
        alignment = VMM_GRANULARITY;
    if (alignment & (alignment - 1))
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < page)
        alignment = page;
    r = malloc(sizeof(*r));
    p = r ? reserve_at(addr, size, alignment) : NULL;
    if (r && !p)
        p = reserve_aligned(size, alignment);
    if (!p) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *r = (struct vmm_range){ NULL, (uintptr_t)p, size, 0 };
    pthread_mutex_lock(&lock);
    r->next = vmm_reserved;
    vmm_reserved = r;
    pthread_mutex_unlock(&lock);
    dbg("vmm reserve %p (%zu bytes)", p, size);
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Refuses (CUDA_ERROR_INVALID_VALUE) while anything is still mapped inside. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct vmm_range **pp, *r = NULL;

    pthread_mutex_lock(&lock);
    for (pp = &vmm_reserved; *pp; pp = &(*pp)->next) {
        if ((*pp)->base == ptr && (*pp)->size == size) {
            if (vmm_mapped_within(ptr, size) == 0) {
                r = *pp;
                *pp = r->next;
            }
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)r->base, r->size);
    dbg("vmm address free %#lx (%zu bytes)", (unsigned long)r->base, r->size);
    free(r);
    return CUDA_SUCCESS;
}

/* Locked. */
static CUresult vmm_map_locked(uintptr_t ptr, size_t size, size_t offset,
                               CUmemGenericAllocationHandle handle, struct vmm_range *m)
{
    struct vmm_range *res = vmm_range_containing(vmm_reserved, ptr);
    size_t slot;
    struct vmm_alloc *a = vmm_lookup(handle, &slot);

    if (!a || offset > a->size || size > a->size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    if (!res || size > res->size - (ptr - res->base) || vmm_mapped_within(ptr, size) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, (off_t)offset) ==
        MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct vmm_range){ vmm_mapped, ptr, size, slot };
    vmm_mapped = m;
    a->maps++;
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct vmm_range *m;
    CUresult rc;

    if (flags || size == 0 || size % VMM_GRANULARITY || offset % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    m = malloc(sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    rc = vmm_map_locked(ptr, size, offset, handle, m);
    pthread_mutex_unlock(&lock);
    if (rc != CUDA_SUCCESS)
        free(m);
    else
        dbg("vmm map %#llx -> %#llx (%zu bytes)", (unsigned long long)handle,
            (unsigned long long)ptr, size);
    return rc;
}

/* Locked.  Drops every mapping inside [ptr, ptr+size). */
static void vmm_drop_mappings(uintptr_t ptr, size_t size)
{
    struct vmm_range **pp = &vmm_mapped, *m;

    while ((m = *pp)) {
        if (ranges_overlap(m->base, m->size, ptr, size)) {
            *pp = m->next;
            vmm_allocs[m->slot].maps--;
            vmm_maybe_destroy(m->slot);
            free(m);
        } else {
            pp = &m->next;
        }
    }
}

/* The range must consist of whole mappings; it reverts to reserved. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&lock);
    if (size == 0 || vmm_mapped_within(ptr, size) != (long long)size)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (mmap((void *)ptr, size, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        vmm_drop_mappings(ptr, size);
    pthread_mutex_unlock(&lock);
    if (rc == CUDA_SUCCESS)
        dbg("vmm unmap %#llx (%zu bytes)", (unsigned long long)ptr, size);
    return rc;
}

static int access_prot(CUmemAccess_flags flags)
{
    switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_NONE: return PROT_NONE;
    case CU_MEM_ACCESS_FLAGS_PROT_READ: return PROT_READ;
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: return PROT_READ | PROT_WRITE;
    default: return -1;
    }
}

/* One address space for all fake devices: the widest access granted wins. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    int prot = PROT_NONE;
    CUresult rc = CUDA_SUCCESS;

    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        int p = access_prot(desc[i].flags);

        if (p < 0 || desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (!device_valid(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        prot |= p;
    }
    pthread_mutex_lock(&lock);
    if (vmm_mapped_within(ptr, size) != (long long)size ||
        mprotect((void *)ptr, size, prot) != 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    struct vmm_range *m;

    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    m = vmm_range_containing(vmm_mapped, (uintptr_t)addr);
    if (m) {
        vmm_allocs[m->slot].refs++;
        *handle = vmm_handle(m->slot);
    }
    pthread_mutex_unlock(&lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags)
{
    struct vmm_alloc *a;
    int fd = -1;

    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    a = vmm_lookup(handle, NULL);
    if (a)
        fd = dup(a->fd);
    pthread_mutex_unlock(&lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* Locked.  The device of a live allocation backed by the same memfd. */
static int vmm_device_of_file(const struct stat *st)
{
    for (size_t s = 0; s < vmm_slots; s++)
        if (vmm_allocs[s].used && vmm_allocs[s].st_ino == st->st_ino &&
            vmm_allocs[s].st_dev == st->st_dev)
            return vmm_allocs[s].device;
    return current_device();
}

/* The imported handle owns a dup of the fd; it is not charged (the memory
 * belongs to the exporter's allocation). */
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    int fd = (int)(intptr_t)osHandle, copy;
    struct stat st;
    CUresult rc;

    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    pthread_mutex_lock(&lock);
    rc = vmm_insert(copy, (size_t)st.st_size, vmm_device_of_file(&st), false, handle);
    pthread_mutex_unlock(&lock);
    if (rc != CUDA_SUCCESS)
        close(copy);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Pointer queries                                                          */
/* ------------------------------------------------------------------------ */

struct ptr_info {
    uintptr_t range_base;    /* allocation, or VA reservation for VMM */
    size_t range_size;
    uintptr_t map_base;      /* allocation, or the mapping for VMM */
    size_t map_size;
    int device;
    CUmemorytype memtype;
    bool managed;
    CUcontext ctx;
};

static bool ptr_lookup(uintptr_t addr, struct ptr_info *info)
{
    struct region *r;
    struct vmm_range *m = NULL, *res = NULL;

    pthread_mutex_lock(&lock);
    r = region_containing(addr, KINDS_QUERYABLE);
    if (r) {
        *info = (struct ptr_info){ r->base, r->size, r->base, r->size, r->device,
                                   kind_info[r->kind].memtype, r->kind == R_MANAGED, r->ctx };
    } else if ((m = vmm_range_containing(vmm_mapped, addr)) &&
               (res = vmm_range_containing(vmm_reserved, addr))) {
        *info = (struct ptr_info){ res->base, res->size, m->base, m->size,
                                   vmm_allocs[m->slot].device, CU_MEMORYTYPE_DEVICE,
                                   false, NULL };
    }
    pthread_mutex_unlock(&lock);
    return r || res;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct ptr_info info;

    if (!data || !ptr_lookup(ptr, &info))
        return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = info.ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = info.memtype; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(bool *)data = info.managed; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = info.device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = info.range_base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = info.range_size; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct ptr_info info;

    if (!ptr_lookup(dptr, &info))
        return CUDA_ERROR_INVALID_VALUE;
    if (pbase)
        *pbase = info.map_base;
    if (psize)
        *psize = info.map_size;
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    int dev = current_device();
    size_t used;

    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_CONTEXT;
    used = atomic_load(&used_bytes[dev]);
    if (free)
        *free = config.total_bytes - used;
    if (total)
        *total = config.total_bytes;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Copies and sets: plain memory operations (unified addressing)            */
/* ------------------------------------------------------------------------ */

static CUresult copy_bytes(uintptr_t dst, uintptr_t src, size_t n)
{
    if (n && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    if (n)
        memmove((void *)dst, (const void *)src, n);
    return CUDA_SUCCESS;
}

static CUresult set_bytes(uintptr_t dst, unsigned char value, size_t n)
{
    if (n && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    if (n)
        memset((void *)dst, value, n);
    return CUDA_SUCCESS;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy_bytes(dst, src, ByteCount);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy_bytes(dst, src, ByteCount);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy_bytes(dstDevice, (uintptr_t)srcHost, ByteCount);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy_bytes(dstDevice, (uintptr_t)srcHost, ByteCount);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy_bytes((uintptr_t)dstHost, srcDevice, ByteCount);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy_bytes((uintptr_t)dstHost, srcDevice, ByteCount);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return set_bytes(dstDevice, uc, N);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return set_bytes(dstDevice, uc, N);
}

/* ------------------------------------------------------------------------ */
/* Error strings                                                            */
/* ------------------------------------------------------------------------ */

#define ERR(code, text) { code, #code, text }
static const struct error_entry {
    CUresult code;
    const char *name;
    const char *text;
} errors[] = {
    ERR(CUDA_SUCCESS, "no error"),
    ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        "part or all of the requested memory range is already mapped"),
    ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        "pointer does not correspond to a registered memory region"),
    ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERR

static const struct error_entry *error_find(CUresult code)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == code)
            return &errors[i];
    return NULL;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    const struct error_entry *e = error_find(error);

    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    const struct error_entry *e = error_find(error);

    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------ */
/* Pre-3.2 entry points with 32-bit sizes/pointers: exported, not faked     */
/* ------------------------------------------------------------------------ */

CUresult cuMemAlloc(CUdeviceptr_v1 *dptr UNUSED, unsigned int bytesize UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFree(CUdeviceptr_v1 dptr UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr UNUSED, unsigned int *pPitch UNUSED,
                         unsigned int WidthInBytes UNUSED, unsigned int Height UNUSED,
                         unsigned int ElementSizeBytes UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemGetInfo(unsigned int *free UNUSED, unsigned int *total UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase UNUSED, unsigned int *psize UNUSED,
                              CUdeviceptr_v1 dptr UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocHost(void **pp UNUSED, unsigned int bytesize UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr UNUSED, void *p UNUSED,
                                   unsigned int Flags UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDeviceTotalMem(unsigned int *bytes UNUSED, CUdevice dev UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice UNUSED, const void *srcHost UNUSED,
                      unsigned int ByteCount UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoH(void *dstHost UNUSED, CUdeviceptr_v1 srcDevice UNUSED,
                      unsigned int ByteCount UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice UNUSED, unsigned char uc UNUSED,
                    unsigned int N UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuArrayCreate(CUarray *pHandle UNUSED,
                       const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray UNUSED)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------ */
/* cuGetProcAddress: base name + CUDA version (+ per-thread flag) -> symbol */
/* ------------------------------------------------------------------------ */

struct proc_entry {
    const char *name;        /* base name, as passed to cuGetProcAddress */
    int version;             /* first CUDA version with this ABI */
    void *fn;
    const char *fn_name;
    void *per_thread;        /* _ptsz/_ptds variant, or NULL */
    const char *per_thread_name;
};

#define PROC(name, version, fn) { name, version, (void *)fn, #fn, NULL, NULL }
#define PROC_PT(name, version, fn, pt) { name, version, (void *)fn, #fn, (void *)pt, #pt }

/* Versions follow the PFN_<name>_v<version> typedefs of cudaTypedefs.h. */
static const struct proc_entry proc_table[] = {
    PROC("cuInit", 2000, cuInit),
    PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    PROC("cuGetProcAddress", 11030, cuGetProcAddress),
    PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    PROC("cuGetErrorString", 6000, cuGetErrorString),
    PROC("cuGetErrorName", 6000, cuGetErrorName),
    PROC("cuDeviceGet", 2000, cuDeviceGet),
    PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    PROC("cuDeviceGetName", 2000, cuDeviceGetName),
    PROC("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    PROC("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    PROC("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    PROC("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    PROC("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    PROC("cuCtxCreate", 2000, cuCtxCreate),
    PROC("cuCtxCreate", 3020, cuCtxCreate_v2),
    PROC("cuCtxCreate", 11040, cuCtxCreate_v3),
    PROC("cuCtxCreate", 12050, cuCtxCreate_v4),
    PROC("cuCtxDestroy", 2000, cuCtxDestroy),
    PROC("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    PROC("cuCtxGetDevice", 2000, cuCtxGetDevice),
    PROC("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    PROC("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    PROC("cuStreamCreate", 2000, cuStreamCreate),
    PROC("cuStreamDestroy", 2000, cuStreamDestroy),
    PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PROC_PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    PROC_PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    PROC_PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    PROC("cuMemGetInfo", 2000, cuMemGetInfo),
    PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    PROC("cuMemAlloc", 2000, cuMemAlloc),
    PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    PROC("cuMemAllocPitch", 2000, cuMemAllocPitch),
    PROC("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    PROC("cuMemFree", 2000, cuMemFree),
    PROC("cuMemFree", 3020, cuMemFree_v2),
    PROC("cuMemGetAddressRange", 2000, cuMemGetAddressRange),
    PROC("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    PROC("cuMemAllocManaged", 6000, cuMemAllocManaged),
    PROC("cuMemAllocHost", 2000, cuMemAllocHost),
    PROC("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    PROC("cuMemHostAlloc", 2020, cuMemHostAlloc),
    PROC("cuMemFreeHost", 2000, cuMemFreeHost),
    PROC("cuMemHostGetDevicePointer", 2020, cuMemHostGetDevicePointer),
    PROC("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    PROC("cuMemHostRegister", 4000, cuMemHostRegister),
    PROC("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    PROC("cuMemHostUnregister", 4000, cuMemHostUnregister),
    PROC_PT("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    PROC("cuMemcpyHtoD", 2000, cuMemcpyHtoD),
    PROC_PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    PROC("cuMemcpyDtoH", 2000, cuMemcpyDtoH),
    PROC_PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    PROC("cuMemsetD8", 2000, cuMemsetD8),
    PROC_PT("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    PROC("cuArrayCreate", 2000, cuArrayCreate),
    PROC("cuArrayCreate", 3020, cuArrayCreate_v2),
    PROC("cuArrayDestroy", 2000, cuArrayDestroy),
    PROC("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    PROC("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    PROC("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    PROC("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    PROC("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    PROC("cuMemCreate", 10020, cuMemCreate),
    PROC("cuMemRelease", 10020, cuMemRelease),
    PROC("cuMemMap", 10020, cuMemMap),
    PROC("cuMemUnmap", 10020, cuMemUnmap),
    PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    PROC("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    PROC("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    PROC("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    PROC_PT("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    PROC_PT("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    PROC_PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync,
            cuMemAllocFromPoolAsync_ptsz),
    PROC("cuMemPoolCreate", 11020, cuMemPoolCreate),
    PROC("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    PROC("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    PROC("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
};

/* The newest entry for `symbol` whose version is <= cudaVersion. */
static const struct proc_entry *proc_find(const char *symbol, int cudaVersion, bool *known)
{
    const struct proc_entry *best = NULL;

    *known = false;
    for (size_t i = 0; i < sizeof(proc_table) / sizeof(proc_table[0]); i++) {
        const struct proc_entry *e = &proc_table[i];

        if (strcmp(e->name, symbol) != 0)
            continue;
        *known = true;
        if (e->version <= cudaVersion && (!best || e->version > best->version))
            best = e;
    }
    return best;
}

static CUresult proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t modes = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const struct proc_entry *e;
    bool known, per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

    ensure_config();
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if ((flags & ~modes) || (flags & modes) == modes || cudaVersion > DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    e = proc_find(symbol, cudaVersion, &known);
    if (!e) {
        if (status && known)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        dbg("cuGetProcAddress(%s, %d): %s", symbol, cudaVersion,
            known ? "version not sufficient" : "not found");
        return CUDA_ERROR_NOT_FOUND;
    }
    per_thread = per_thread && e->per_thread;
    *pfn = per_thread ? e->per_thread : e->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    dbg("cuGetProcAddress(%s, %d, %#llx) -> %s", symbol, cudaVersion,
        (unsigned long long)flags, per_thread ? e->per_thread_name : e->fn_name);
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return proc_lookup(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
