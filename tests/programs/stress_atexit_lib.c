/*
 * stress_atexit_lib.c - libstress_atexit_lib.so for tests/programs/stress_atexit.c: an ELF
 * destructor that calls CUDA. Preloaded after libvramtrace.so (LD_PRELOAD is searched, and torn
 * down, in order), it runs after vramtrace has closed its trace; its call must pass through.
 * It finds cudaMalloc at run time, so it does nothing in a process without CUDA (the preload
 * list also reaches `vramtrace run` itself).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

__attribute__((destructor)) static void lib_destructor(void)
{
	void (*exit_call)(const char *, size_t);
	*(void **)&exit_call = dlsym(RTLD_DEFAULT, "exit_call"); /* stress_atexit's, exported */
	if (exit_call)
		exit_call("lib_destructor", 11u << 20);
}
