/*
 * fakecuda.h - test hooks exported by the fake CUDA driver (libcuda.so.1 built
 * from fake_cuda.c).  Nothing else in the double is public: programs reach the
 * driver through <cuda.h> like they would the real one.
 *
 * Test programs normally do not link libcuda, so they fetch the hooks with
 *   void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
 *   fakecuda_used_bytes_fn used = (fakecuda_used_bytes_fn)dlsym(h, "fakecuda_used_bytes");
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>

/* Bytes currently charged against `device`'s capacity (0 for a bad ordinal). */
size_t fakecuda_used_bytes(int device);
/* Live objects that own memory: device, pitch, managed, async/pool, array and
 * pinned-host allocations, plus VMM physical allocations not yet destroyed.
 * Host registrations, IPC openings and VA reservations are not counted. */
size_t fakecuda_live_allocations(void);

typedef size_t (*fakecuda_used_bytes_fn)(int device);
typedef size_t (*fakecuda_live_allocations_fn)(void);

#endif /* FAKECUDA_H */
