/*
 * dlclose_rt.c - a program that loads the runtime with dlopen(RTLD_LOCAL), uses it, and
 * dlcloses it, again and again (a plugin host, a test harness reloading a CUDA plugin).
 *
 *   dlclose_rt PATH/TO/libcudart.so.13 CYCLES
 *
 * Each cycle: dlopen, cudaMalloc 1 MiB kept (keep_site) and 64 KiB freed (transient_site),
 * dlclose. Between cycles an inaccessible mapping takes the address range the runtime left, so
 * the next copy loads elsewhere: every cycle's cudaMalloc is a new function.
 *
 * Output: "dlclose_rt: cycles=C kept=BYTES distinct_bases=D"
 * Expected trace: device 0 device live C MiB, peak C MiB + 64 KiB.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include "prog.h"

#define MAX_CYCLES 64

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

SITE void keep_site(malloc_fn m)
{
	void *p;
	CHECK(m(&p, 1 * MiB));
}

SITE void transient_site(malloc_fn m, free_fn f)
{
	void *p;
	CHECK(m(&p, 64 * KiB));
	CHECK(f(p));
}

static size_t span_of(struct link_map *lm)
{
	size_t span = 0;
	ElfW(Ehdr) *eh = (ElfW(Ehdr) *)lm->l_addr;
	ElfW(Phdr) *ph = (ElfW(Phdr) *)(lm->l_addr + eh->e_phoff);
	for (int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr + ph[i].p_memsz > span)
			span = ph[i].p_vaddr + ph[i].p_memsz;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return (span + page - 1) / page * page;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int cycles = atoi(argv[2]);
	if (cycles < 1 || cycles > MAX_CYCLES)
		return 2;
	uintptr_t bases[MAX_CYCLES];
	int distinct = 0;
	for (int c = 0; c < cycles; c++) {
		void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 3;
		}
		malloc_fn m = (malloc_fn)dlsym(h, "cudaMalloc");
		free_fn f = (free_fn)dlsym(h, "cudaFree");
		int (*set_device)(int) = (int (*)(int))dlsym(h, "cudaSetDevice");
		if (!m || !f || !set_device)
			return 3;
		CHECK(set_device(0));
		keep_site(m);
		transient_site(m, f);
		struct link_map *lm;
		CHECK(dlinfo(h, RTLD_DI_LINKMAP, &lm));
		uintptr_t base = lm->l_addr;
		size_t span = span_of(lm);
		int seen = 0;
		for (int i = 0; i < c; i++)
			seen |= bases[i] == base;
		distinct += !seen;
		bases[c] = base;
		CHECK(dlclose(h));
		if (mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
			return 3;
	}
	printf("dlclose_rt: cycles=%d kept=%zu distinct_bases=%d\n", cycles, (size_t)cycles * MiB, distinct);
	return 0;
}
