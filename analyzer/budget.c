/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's memory budget (--max-memory). Every heap allocation of the process is counted
 * here, by putting malloc and its family in front of glibc's (the executable's definitions win
 * over libc's), and the one that would take the heap past the budget ends the command with one
 * line and VRT_EXIT_LIMIT: a trace that takes more memory than it may (a decompression bomb, a
 * live set of millions) stops the analyzer cleanly, and never brings the kernel's OOM killer
 * onto a shared node's jobs. What is counted is what glibc hands out (malloc_usable_size).
 *
 * In a sanitizer build (ASan, TSan), whose allocator is the sanitizer's, the same count comes from
 * the sanitizer's allocation hooks: the budget holds there too, checked just after an allocation.
 */
#define _GNU_SOURCE
#include "budget.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static _Atomic int64_t in_use;
static _Atomic uint64_t budget = UINT64_MAX;

void vrt_budget_set(uint64_t bytes) { atomic_store(&budget, bytes); }
uint64_t vrt_budget_get(void) { return atomic_load(&budget); }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VRT_BUDGET_HOOKED 1
#else
#define VRT_BUDGET_HOOKED 0
#endif

static void mib(char *buf, size_t len, uint64_t bytes)
{
	snprintf(buf, len, "%llu.%llu MiB", (unsigned long long)(bytes >> 20),
		 (unsigned long long)((bytes & ((1u << 20) - 1)) * 10 >> 20));
}

/* Out of budget: one line and out, with nothing that allocates (stdio buffers are not flushed:
 * a --json output half written is left unwritten). */
static void __attribute__((noreturn)) over_budget(size_t asked)
{
	char limit[32], used[32], more[32], line[4500];
	mib(limit, sizeof(limit), atomic_load(&budget));
	mib(used, sizeof(used), (uint64_t)atomic_load(&in_use));
	mib(more, sizeof(more), asked);
	int n = snprintf(line, sizeof(line),
			 "vramtrace: %s%sthe analysis needs more memory than --max-memory %s allows (%s in use, %s more "
			 "asked for): run it with a larger --max-memory, or on a machine with more memory\n",
			 vrt_current_trace ? vrt_current_trace : "", vrt_current_trace ? ": " : "", limit, used, more);
	if (n > 0) {
		ssize_t ignored = write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
		(void)ignored;
	}
	_exit(VRT_EXIT_LIMIT);
}

#if VRT_BUDGET_HOOKED

/* compiler-rt's <sanitizer/allocator_interface.h>, which GCC does not install. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
					      void (*free_hook)(const volatile void *));
size_t __sanitizer_get_allocated_size(const volatile void *p);

static void on_malloc(const volatile void *p, size_t size)
{
	(void)p;
	int64_t now = atomic_fetch_add_explicit(&in_use, (int64_t)size, memory_order_relaxed) + (int64_t)size;
	if ((uint64_t)now > atomic_load_explicit(&budget, memory_order_relaxed))
		over_budget(size);
}

static void on_free(const volatile void *p)
{
	atomic_fetch_sub_explicit(&in_use, (int64_t)__sanitizer_get_allocated_size(p), memory_order_relaxed);
}

__attribute__((constructor)) static void install_hooks(void)
{
	__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}

#else

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

/* Before an allocation of asked bytes: out if it would take the heap past the budget. */
static void take(size_t asked)
{
	int64_t now = atomic_load_explicit(&in_use, memory_order_relaxed);
	uint64_t limit = atomic_load_explicit(&budget, memory_order_relaxed);
	if (asked > limit || (now > 0 && (uint64_t)now > limit - asked))
		over_budget(asked);
}

static void *counted(void *p)
{
	if (p)
		atomic_fetch_add_explicit(&in_use, (int64_t)malloc_usable_size(p), memory_order_relaxed);
	return p;
}

static void uncount(void *p)
{
	if (p)
		atomic_fetch_sub_explicit(&in_use, (int64_t)malloc_usable_size(p), memory_order_relaxed);
}

void *malloc(size_t n)
{
	take(n);
	return counted(__libc_malloc(n));
}

void *calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	take(n * size);
	return counted(__libc_calloc(n, size));
}

void *realloc(void *p, size_t n)
{
	size_t old = p ? malloc_usable_size(p) : 0;
	if (n > old)
		take(n - old);
	uncount(p);
	void *q = __libc_realloc(p, n);
	if (!q && n && p) { /* failed: p is still there */
		counted(p);
		return NULL;
	}
	return counted(q);
}

void *reallocarray(void *p, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, n * size);
}

void free(void *p)
{
	uncount(p);
	__libc_free(p);
}

void *memalign(size_t align, size_t n)
{
	take(n);
	return counted(__libc_memalign(align, n));
}

void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void **out, size_t align, size_t n)
{
	if (!align || (align & (align - 1)) || align % sizeof(void *))
		return EINVAL;
	void *p = memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void *valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }

void *pvalloc(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return memalign(page, (n + page - 1) & ~(page - 1));
}

#endif /* VRT_BUDGET_HOOKED */

/* ---- the default: a safe share of what the machine (or its cgroup) has -------------------- */

static uint64_t meminfo_kib(const char *buf, const char *key)
{
	const char *p = strstr(buf, key);
	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static bool read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return true;
}

/* What the cgroup v2 this process is in still lets it take, or UINT64_MAX. */
static uint64_t cgroup_room(void)
{
	char self[512], path[1200], value[64];
	if (!read_small("/proc/self/cgroup", self, sizeof(self)) || strncmp(self, "0::", 3))
		return UINT64_MAX;
	self[strcspn(self, "\n")] = 0;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", self + 3);
	if (!read_small(path, value, sizeof(value)) || value[0] < '0' || value[0] > '9')
		return UINT64_MAX; /* "max", or no memory controller */
	uint64_t max = strtoull(value, NULL, 10), current = 0;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.current", self + 3);
	if (read_small(path, value, sizeof(value)))
		current = strtoull(value, NULL, 10);
	return max > current ? max - current : 0;
}

uint64_t vrt_budget_default(void)
{
	char buf[4096];
	uint64_t total = 0, available = 0;
	if (read_small("/proc/meminfo", buf, sizeof(buf))) {
		total = meminfo_kib(buf, "MemTotal:") << 10;
		available = meminfo_kib(buf, "MemAvailable:") << 10;
	}
	if (!total)
		return UINT64_MAX;
	uint64_t b = total / 2;
	if (available && available / 4 * 3 < b)
		b = available / 4 * 3;
	uint64_t room = cgroup_room();
	if (room != UINT64_MAX && room / 4 * 3 < b)
		b = room / 4 * 3;
	return b < VRT_BUDGET_FLOOR ? VRT_BUDGET_FLOOR : b;
}
