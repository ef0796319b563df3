/*
 * stress_sigshim.c - libstress_sigshim.so, preloaded after libvramtrace.so for
 * tests/programs/stress_signal.c: cudaMalloc and cudaFree with every signal blocked while the
 * runtime double runs. The doubles (like the real libraries) are not async-signal-safe; with this
 * shim between vramtrace's hooks and the double, a signal that arrives during a call is delivered
 * when the double returns, that is inside vramtrace's hook, before it records the call. A handler
 * that calls CUDA then re-enters the hooks, never the double.
 *
 *   LD_PRELOAD=libvramtrace.so:libstress_sigshim.so stress_signal ...
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>

static void *next(const char *name)
{
	void *fn = dlsym(RTLD_NEXT, name);
	if (!fn)
		abort();
	return fn;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
	static cudaError_t (*real)(void **, size_t);
	if (!real)
		*(void **)&real = next("cudaMalloc");
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	cudaError_t r = real(p, size);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

cudaError_t cudaFree(void *p)
{
	static cudaError_t (*real)(void *);
	if (!real)
		*(void **)&real = next("cudaFree");
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	cudaError_t r = real(p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}
