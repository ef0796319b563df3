/* SPDX-License-Identifier: MIT */
/*
 * ptrace injection (inject.h). The sequence, and what keeps the process safe:
 *
 *  1. Permission is checked before anything is touched: same uid, not set-id, Yama allows it.
 *  2. One thread is stopped (PTRACE_SEIZE + PTRACE_INTERRUPT: no signal is sent) only where it
 *     waits in a blocking system call, with neither its program counter nor its recent stack in
 *     the dynamic loader or the allocator: the injected dlopen takes those locks, and a thread
 *     already inside them would deadlock on itself or find their state half changed. Other
 *     threads keep running throughout.
 *  3. Its registers (general and extended: the program expects vector registers to survive a
 *     system call) are saved. Calls are made with the arguments below the red zone of its own
 *     stack, a return address of 0, and orig_rax = -1 so the kernel does not "restart" the
 *     interrupted system call into our registers. The return to 0 faults; that SIGSEGV stop is
 *     ours, and is never delivered.
 *  4. Registers (orig_rax and rax included: the kernel then restarts the interrupted call) and
 *     the stack bytes written are put back, and the thread is detached.
 *
 * While a call runs in the process, SIGINT/SIGTERM/SIGHUP are held off: a tracer that dies
 * then would leave the thread to return to address 0.
 */
#define _GNU_SOURCE
#include "inject.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "vramtrace/error.h"
#include "vramtrace/small_file.h"

#if defined(__x86_64__)
#ifdef VRT_HAVE_UNWIND_PTRACE
#include <libunwind-ptrace.h>
#endif
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#endif

#define ERR(code, ...) (snprintf(why, len, __VA_ARGS__), (code))

/* ---- small /proc readers ---------------------------------------------------------------- */

/* "Uid:" or "Gid:" line of /proc/PID/status: real, effective, saved, fs. */
static bool status_ids(int pid, const char *key, unsigned ids[4])
{
	char path[64], buf[8192];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if (!vrt_read_small_file(path, buf, sizeof(buf)))
		return false;
	const char *line = strstr(buf, key);
	return line && sscanf(line + strlen(key), "%u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) == 4;
}

static bool have_cap_sys_ptrace(void)
{
	char buf[8192];
	unsigned long long caps = 0;
	if (!vrt_read_small_file("/proc/self/status", buf, sizeof(buf)))
		return false;
	const char *line = strstr(buf, "CapEff:");
	return line && sscanf(line + 7, "%llx", &caps) == 1 && (caps >> 19 & 1); /* CAP_SYS_PTRACE */
}

static int parent_of(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!vrt_read_small_file(path, buf, sizeof(buf)))
		return 0;
	const char *close = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
	int ppid = 0;
	char state;
	return close && sscanf(close + 1, " %c %d", &state, &ppid) == 2 ? ppid : 0;
}

static bool is_our_descendant(int pid)
{
	for (int p = pid, hops = 0; p > 1 && hops < 4096; hops++) {
		p = parent_of(p);
		if (p == (int)getpid())
			return true;
	}
	return false;
}

static char process_state(int pid)
{
	char path[64], buf[1024], state = '?';
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	const char *close = vrt_read_small_file(path, buf, sizeof(buf)) ? strrchr(buf, ')') : NULL;
	if (close)
		sscanf(close + 1, " %c", &state);
	return state;
}

static int yama_scope(void)
{
	char buf[32];
	return vrt_read_small_file("/proc/sys/kernel/yama/ptrace_scope", buf, sizeof(buf)) ? atoi(buf) : -1;
}

/* ---- permission ------------------------------------------------------------------------- */

static const char HOW_TO_ALLOW[] =
	"\n  to allow it until reboot:   sudo sysctl kernel.yama.ptrace_scope=0"
	"\n  or allow this binary only:  sudo setcap cap_sys_ptrace+ep \"$(command -v vramtrace)\""
	"\n  or, next time, start the program with `vramtrace run --armed -- ...`: attaching to it needs no ptrace";

static int yama_allows(int pid, char *why, size_t len)
{
	int scope = yama_scope();
	if (scope <= 0 || have_cap_sys_ptrace())
		return scope >= 3 ? ERR(VRT_E_PERM, "kernel.yama.ptrace_scope is 3: ptrace is disabled on this machine "
						    "until reboot; start the program with `vramtrace run --armed` instead")
				  : 0;
	if (scope == 1 && is_our_descendant(pid))
		return 0;
	if (scope == 1)
		return ERR(VRT_E_PERM, "ptrace is not permitted: kernel.yama.ptrace_scope is 1 (a process may only be traced "
				       "by its ancestors) and process %d was not started by vramtrace%s", pid, HOW_TO_ALLOW);
	if (scope == 2)
		return ERR(VRT_E_PERM, "ptrace is not permitted: kernel.yama.ptrace_scope is 2 (only processes with "
				       "CAP_SYS_PTRACE may trace)%s", HOW_TO_ALLOW);
	return ERR(VRT_E_PERM, "kernel.yama.ptrace_scope is %d: ptrace is disabled on this machine until reboot; "
			       "start the program with `vramtrace run --armed` instead", scope);
}

int vrt_process_owned(int pid, char *why, size_t len)
{
	unsigned uid[4];
	if (!status_ids(pid, "Uid:", uid))
		return ERR(VRT_E_NOENT, "no process %d", pid);
	if (uid[0] != getuid())
		return ERR(VRT_E_PERM, "process %d belongs to uid %u, not to you (uid %u): vramtrace only attaches to "
				       "your own processes and never raises its privileges", pid, uid[0], getuid());
	return 0;
}

int vrt_inject_permitted(int pid, char *why, size_t len)
{
	unsigned uid[4], gid[4];
	int rc = vrt_process_owned(pid, why, len);
	if (rc)
		return rc;
	if (!status_ids(pid, "Uid:", uid) || !status_ids(pid, "Gid:", gid))
		return ERR(VRT_E_NOENT, "no process %d", pid);
	if (uid[1] != uid[0] || uid[2] != uid[0] || gid[1] != gid[0] || gid[2] != gid[0])
		return ERR(VRT_E_PERM, "process %d runs with other credentials than it was started with (a set-uid or "
				       "set-gid program): it cannot be attached", pid);
	if (process_state(pid) == 'T' || process_state(pid) == 't')
		return ERR(VRT_E_UNSUPPORTED, "process %d is stopped (SIGSTOP, or under a debugger); continue it first", pid);
	return yama_allows(pid, why, len);
}

#if !defined(__x86_64__)

bool vrt_inject_loaded(int pid, const char *library)
{
	(void)pid;
	(void)library;
	return false;
}

int vrt_inject(int pid, const char *library, const char *output, char *why, size_t len)
{
	(void)pid;
	(void)library;
	(void)output;
	return ERR(VRT_E_UNSUPPORTED, "attaching to a process started without vramtrace works on x86-64 only; start "
				      "the program with `vramtrace run --armed` and attach to that");
}

#else

/* ---- the target's memory map ------------------------------------------------------------ */

struct mapping {
	uint64_t lo, hi, offset, ino;
	unsigned dev_major, dev_minor;
	char perms[5];
	char path[PATH_MAX];
};

static bool parse_mapping(const char *line, struct mapping *m)
{
	int name_at = 0;
	m->path[0] = 0;
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &m->lo, &m->hi, m->perms,
		   &m->offset, &m->dev_major, &m->dev_minor, &m->ino, &name_at) < 7)
		return false;
	if (name_at)
		snprintf(m->path, sizeof(m->path), "%s", line + name_at);
	m->path[strcspn(m->path, "\n")] = 0;
	return true;
}

typedef bool (*mapping_visit)(const struct mapping *m, void *arg); /* true: stop */

static int for_each_mapping(int pid, mapping_visit visit, void *arg)
{
	char path[64], line[PATH_MAX + 256];
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return VRT_E_NOENT;
	struct mapping m;
	while (fgets(line, sizeof(line), f))
		if (parse_mapping(line, &m) && visit(&m, arg))
			break;
	fclose(f);
	return 0;
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/* A loaded object: its file and where its first byte is mapped. */
struct module {
	char path[PATH_MAX];
	uint64_t base;
	bool found;
	bool (*match)(const struct mapping *m, const void *key);
	const void *key;
};

static bool module_visit(const struct mapping *m, void *arg)
{
	struct module *mod = arg;
	if (!m->path[0] || !mod->match(m, mod->key))
		return false;
	if (!mod->found || (m->offset == 0 && m->lo < mod->base)) {
		snprintf(mod->path, sizeof(mod->path), "%s", m->path);
		mod->base = m->offset == 0 ? m->lo : mod->base;
		mod->found = m->offset == 0;
	}
	return false;
}

static bool find_module(int pid, bool (*match)(const struct mapping *, const void *), const void *key,
			struct module *mod)
{
	memset(mod, 0, sizeof(*mod));
	mod->match = match;
	mod->key = key;
	for_each_mapping(pid, module_visit, mod);
	return mod->found;
}

static bool is_libc(const struct mapping *m, const void *key)
{
	(void)key;
	const char *b = base_name(m->path);
	return !strcmp(b, "libc.so.6") || (!strncmp(b, "libc-", 5) && strstr(b, ".so"));
}

static bool is_libdl(const struct mapping *m, const void *key)
{
	(void)key;
	return !strncmp(base_name(m->path), "libdl.so", 8) || !strncmp(base_name(m->path), "libdl-", 6);
}

static bool is_loader(const struct mapping *m)
{
	const char *b = base_name(m->path);
	return !strncmp(b, "ld-linux", 8) || !strncmp(b, "ld-2.", 5) || !strncmp(b, "ld64.so", 7);
}

/* Our library, by identity (device and inode) or by its resolved path. */
struct file_id {
	struct stat st;
	char real[PATH_MAX];
};

static bool is_file(const struct mapping *m, const void *key)
{
	const struct file_id *id = key;
	return (m->ino == id->st.st_ino && m->dev_major == major(id->st.st_dev) && m->dev_minor == minor(id->st.st_dev)) ||
	       !strcmp(m->path, id->real);
}

/* ---- ELF dynamic symbols of a file ------------------------------------------------------ */

struct elf_file {
	uint8_t *data;
	size_t size;
	uint64_t first_vaddr; /* of the first PT_LOAD, page-aligned: base - first_vaddr = load bias */
	const Elf64_Sym *syms;
	size_t n_syms;
	const char *names;
	size_t names_size;
};

static bool elf_in_bounds(const struct elf_file *e, uint64_t off, uint64_t size)
{
	return off <= e->size && size <= e->size - off;
}

static bool elf_parse(struct elf_file *e)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)e->data;
	if (e->size < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_machine != EM_X86_64 || !elf_in_bounds(e, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr)) ||
	    !elf_in_bounds(e, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
		return false;
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(e->data + eh->e_phoff);
	for (int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD) {
			e->first_vaddr = ph[i].p_vaddr & ~(uint64_t)0xfff;
			break;
		}
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(e->data + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum)
			continue;
		const Elf64_Shdr *str = &sh[sh[i].sh_link];
		if (!elf_in_bounds(e, sh[i].sh_offset, sh[i].sh_size) || !elf_in_bounds(e, str->sh_offset, str->sh_size))
			return false;
		e->syms = (const Elf64_Sym *)(e->data + sh[i].sh_offset);
		e->n_syms = sh[i].sh_size / sizeof(Elf64_Sym);
		e->names = (const char *)(e->data + str->sh_offset);
		e->names_size = str->sh_size;
		return true;
	}
	return false;
}

static void elf_close(struct elf_file *e)
{
	if (e->data)
		munmap(e->data, e->size);
	memset(e, 0, sizeof(*e));
}

/* Opens the file as the target sees it (its mount namespace, through /proc/PID/root). */
static bool elf_open(int pid, const char *path, struct elf_file *e)
{
	char in_root[PATH_MAX + 64];
	memset(e, 0, sizeof(*e));
	snprintf(in_root, sizeof(in_root), "/proc/%d/root%s", pid, path);
	int fd = open(in_root, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	e->size = (size_t)st.st_size;
	e->data = mmap(NULL, e->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (e->data == MAP_FAILED) {
		e->data = NULL;
		return false;
	}
	if (!elf_parse(e)) {
		elf_close(e);
		return false;
	}
	return true;
}

/* A defined dynamic symbol: its address in the target (given the module's base) and size. */
static bool elf_symbol(const struct elf_file *e, uint64_t base, const char *name, uint64_t *addr, uint64_t *size)
{
	for (size_t i = 0; i < e->n_syms; i++) {
		const Elf64_Sym *s = &e->syms[i];
		if (s->st_shndx == SHN_UNDEF || !s->st_value || s->st_name >= e->names_size ||
		    strcmp(e->names + s->st_name, name))
			continue;
		*addr = base - e->first_vaddr + s->st_value;
		if (size)
			*size = s->st_size;
		return true;
	}
	return false;
}

/* ---- ranges where a thread must not be interrupted -------------------------------------- */

#define MAX_RANGES 64

struct ranges {
	uint64_t lo[MAX_RANGES], hi[MAX_RANGES];
	int n;
};

static void add_range(struct ranges *r, uint64_t lo, uint64_t hi)
{
	if (r->n < MAX_RANGES && hi > lo) {
		r->lo[r->n] = lo;
		r->hi[r->n++] = hi;
	}
}

static bool in_ranges(const struct ranges *r, uint64_t a)
{
	for (int i = 0; i < r->n; i++)
		if (a >= r->lo[i] && a < r->hi[i])
			return true;
	return false;
}

static bool loader_text_visit(const struct mapping *m, void *arg)
{
	if (m->perms[2] == 'x' && is_loader(m))
		add_range(arg, m->lo, m->hi);
	return false;
}

/* libc functions that hold the allocator's or the loader's locks while they run. */
static const char *const LOCKED_FUNCTIONS[] = {
	"malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc",
	"valloc", "pvalloc", "malloc_trim", "malloc_info", "malloc_stats", "mallinfo", "mallinfo2",
	"dlopen", "dlmopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
	"__libc_dlopen_mode", "__libc_dlsym", "__libc_dlclose", "fork", "_Fork", "pthread_create", "exit",
	NULL,
};

/* ---- the target ------------------------------------------------------------------------- */

#define XSTATE_MAX 16384
#define RED_ZONE 128
#define STACK_SCAN_BYTES 512
#define NT_X86_XSTATE_NOTE 0x202 /* NT_X86_XSTATE */
#define RTLD_NOW_GLOBAL (RTLD_NOW | RTLD_GLOBAL)

struct target {
	int pid, tid;
	struct user_regs_struct saved;
	struct user_fpregs_struct fpregs;
	uint8_t xstate[XSTATE_MAX];
	size_t xstate_len; /* 0: only fpregs were saved */
	struct ranges unsafe;
	uint64_t dlopen_fn, dlerror_fn;
	uint64_t scratch_lo;   /* lowest stack byte we write: the return address slot */
	uint8_t *scratch_saved;
	size_t scratch_len;
	uint64_t library_str, output_str;
	bool gone; /* the process ended while stopped: nothing to restore */
};

static int remote_read(int tid, uint64_t addr, void *buf, size_t n)
{
	struct iovec local = { buf, n }, remote = { (void *)addr, n };
	ssize_t got = process_vm_readv(tid, &local, 1, &remote, 1, 0);
	if (got == (ssize_t)n)
		return 0;
	for (size_t off = 0; off < n; off += sizeof(long)) { /* process_vm_* may be filtered */
		errno = 0;
		long w = ptrace(PTRACE_PEEKDATA, tid, (void *)(addr + off), NULL);
		if (errno)
			return VRT_E_IO;
		memcpy((uint8_t *)buf + off, &w, n - off < sizeof(w) ? n - off : sizeof(w));
	}
	return 0;
}

static int remote_write(int tid, uint64_t addr, const void *buf, size_t n)
{
	struct iovec local = { (void *)buf, n }, remote = { (void *)addr, n };
	if (process_vm_writev(tid, &local, 1, &remote, 1, 0) == (ssize_t)n)
		return 0;
	for (size_t off = 0; off < n; off += sizeof(long)) {
		long w = 0;
		size_t k = n - off < sizeof(w) ? n - off : sizeof(w);
		if (k < sizeof(w) && remote_read(tid, addr + off, &w, sizeof(w)))
			return VRT_E_IO;
		memcpy(&w, (const uint8_t *)buf + off, k);
		if (ptrace(PTRACE_POKEDATA, tid, (void *)(addr + off), (void *)w))
			return VRT_E_IO;
	}
	return 0;
}

/* Addresses of dlopen (and dlerror), and the ranges the stopped thread must not be in. */
static int resolve_libc(struct target *t, char *why, size_t len)
{
	struct module libc, libdl;
	struct elf_file e;
	if (!find_module(t->pid, is_libc, NULL, &libc) || !elf_open(t->pid, libc.path, &e))
		return ERR(VRT_E_UNSUPPORTED, "process %d has no glibc loaded (a static or non-glibc program?)", t->pid);
	for (const char *const *f = LOCKED_FUNCTIONS; *f; f++) {
		uint64_t a, size;
		if (elf_symbol(&e, libc.base, *f, &a, &size))
			add_range(&t->unsafe, a, a + (size ? size : 1));
	}
	/* glibc >= 2.34 exports dlopen from libc; older ones have it in libdl, or privately. */
	if (!elf_symbol(&e, libc.base, "dlopen", &t->dlopen_fn, NULL)) {
		struct elf_file d;
		if (find_module(t->pid, is_libdl, NULL, &libdl) && elf_open(t->pid, libdl.path, &d)) {
			elf_symbol(&d, libdl.base, "dlopen", &t->dlopen_fn, NULL);
			elf_symbol(&d, libdl.base, "dlerror", &t->dlerror_fn, NULL);
			elf_close(&d);
		}
		if (!t->dlopen_fn)
			elf_symbol(&e, libc.base, "__libc_dlopen_mode", &t->dlopen_fn, NULL);
	} else {
		elf_symbol(&e, libc.base, "dlerror", &t->dlerror_fn, NULL);
	}
	elf_close(&e);
	for_each_mapping(t->pid, loader_text_visit, &t->unsafe);
	if (!t->dlopen_fn)
		return ERR(VRT_E_UNSUPPORTED, "no dlopen found in process %d's C library (%s)", t->pid, libc.path);
	return 0;
}

/* Only a 64-bit x86 program can run the calls we set up. */
static int check_machine(int pid, char *why, size_t len)
{
	char path[64];
	uint8_t h[20];
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return ERR(VRT_E_NOENT, "process %d ended", pid);
	if (fd < 0)
		return ERR(VRT_E_PERM, "cannot read process %d's program (%s): it is protected from inspection (not "
				       "dumpable, or in another security context)", pid, strerror(errno));
	bool ok = read(fd, h, sizeof(h)) == (ssize_t)sizeof(h) && !memcmp(h, ELFMAG, SELFMAG) && h[EI_CLASS] == ELFCLASS64 &&
		  (h[18] | h[19] << 8) == EM_X86_64;
	close(fd);
	return ok ? 0 : ERR(VRT_E_UNSUPPORTED, "process %d is not a 64-bit x86 program: only those can be attached by "
					       "injection", pid);
}

/* ---- stopping one thread at a safe point ------------------------------------------------ */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits for a state change of tid; timeout_ms < 0 waits as long as it takes. 0 or VRT_E_IO. */
static int wait_thread(int tid, int *status, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	bool told = false;
	for (;;) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);
		if (r == tid)
			return 0;
		if (r < 0 && errno != EINTR)
			return VRT_E_IO;
		if (timeout_ms >= 0 && now_ms() > deadline)
			return VRT_E_IO;
		if (timeout_ms < 0 && !told && now_ms() > deadline + 10000) {
			fprintf(stderr, "vramtrace: still waiting for the call in thread %d to return (another thread may "
					"hold the dynamic loader's lock); interrupting now would crash the process\n", tid);
			told = true;
		}
		usleep(1000);
	}
}

/* Blocking system calls a thread can be borrowed from: it is parked, and a restart is harmless. */
static bool blocking_syscall(long nr)
{
	static const long allowed[] = {
		0 /* read */, 7 /* poll */, 16 /* ioctl */, 23 /* select */, 24 /* sched_yield */, 34 /* pause */,
		35 /* nanosleep */, 61 /* wait4 */, 130 /* rt_sigsuspend */, 202 /* futex */, 230 /* clock_nanosleep */,
		232 /* epoll_wait */, 247 /* waitid */, 270 /* pselect6 */, 271 /* ppoll */, 281 /* epoll_pwait */,
		441 /* epoll_pwait2 */,
	};
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (allowed[i] == nr)
			return true;
	return false;
}

/* Non-intrusive first look: is tid blocked in one of those calls right now? */
static bool blocked_in_syscall(int pid, int tid)
{
	char path[96], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
	if (!vrt_read_small_file(path, buf, sizeof(buf)) || !isdigit((unsigned char)buf[0]))
		return false; /* "running", "-1 ..." (not in a system call), or unreadable */
	return blocking_syscall(strtol(buf, NULL, 10));
}

#ifdef VRT_HAVE_UNWIND_PTRACE
/* The stopped thread's frames, from the unwind tables: 1 if one of them is in an unsafe range,
 * 0 if none, -1 if the stack could not be walked past its first frame. */
static int frames_unsafe(const struct target *t, int tid)
{
	unw_addr_space_t as = unw_create_addr_space(&_UPT_accessors, 0);
	void *ui = as ? _UPT_create(tid) : NULL;
	unw_cursor_t cursor;
	int frames = 0, verdict = -1;
	if (ui && unw_init_remote(&cursor, as, ui) == 0) {
		do {
			unw_word_t ip;
			if (unw_get_reg(&cursor, UNW_REG_IP, &ip) || !ip)
				break;
			/* Outer frames hold return addresses: the call is the byte before. */
			if (in_ranges(&t->unsafe, frames ? ip - 1 : ip)) {
				verdict = 1;
				break;
			}
		} while (++frames < 128 && unw_step(&cursor) > 0);
		if (verdict < 0 && frames >= 2)
			verdict = 0;
	}
	if (ui)
		_UPT_destroy(ui);
	if (as)
		unw_destroy_addr_space(as);
	return verdict;
}
#else
static int frames_unsafe(const struct target *t, int tid)
{
	(void)t;
	(void)tid;
	return -1;
}
#endif

/* Without unwind tables: any word near the top of the stack that points into an unsafe range.
 * Stale words can make a safe thread look unsafe (it is then retried or skipped), never the
 * reverse for the frames that matter, which are the innermost few. */
static bool stack_words_unsafe(const struct target *t, int tid, uint64_t sp)
{
	uint64_t words[STACK_SCAN_BYTES / 8];
	size_t n = sizeof(words);
	while (n >= 64 && remote_read(tid, sp, words, n))
		n /= 2; /* near the top of the stack mapping */
	for (size_t i = 0; n >= 64 && i < n / 8; i++)
		if (in_ranges(&t->unsafe, words[i]))
			return true;
	return n < 64;
}

/* Whether the stopped thread may run our calls: see the header comment, point 2. */
static bool at_safe_point(const struct target *t, int tid, const struct user_regs_struct *r)
{
	if ((long)r->orig_rax < 0 || !blocking_syscall((long)r->orig_rax) || in_ranges(&t->unsafe, r->rip))
		return false;
	int unsafe = frames_unsafe(t, tid);
	return unsafe >= 0 ? !unsafe : !stack_words_unsafe(t, tid, r->rsp);
}

/* Seizes tid and stops it without a signal. 0 stopped, 1 gone, <0 error (why filled). */
static int interrupt_thread(int tid, char *why, size_t len)
{
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL)) {
		if (errno == ESRCH)
			return 1;
		return ERR(VRT_E_PERM, "ptrace is not permitted here (%s): a container without CAP_SYS_PTRACE, a seccomp "
				       "filter, or a security module forbids it%s", strerror(errno), HOW_TO_ALLOW);
	}
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL))
		return 1; /* it exited between the two calls */
	for (;;) {
		int st;
		if (wait_thread(tid, &st, 5000))
			return ERR(VRT_E_IO, "thread %d did not stop within 5 s (uninterruptible sleep?)", tid);
		if (!WIFSTOPPED(st))
			return 1; /* it exited */
		if (st >> 16 == PTRACE_EVENT_STOP)
			return 0;
		ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(st)); /* a signal of its own: deliver it */
	}
}

static int list_threads(int pid, int *tids, int max)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	int n = 0;
	tids[n++] = pid; /* the main thread first: the one most programs park in a plain wait */
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && n < max && (de = readdir(d))) {
		int tid = atoi(de->d_name);
		if (tid > 0 && tid != pid)
			tids[n++] = tid;
	}
	if (d)
		closedir(d);
	return n;
}

/* Tries each thread blocked in a suitable call, until one is stopped at a safe point or the
 * time is up. Unsuitable threads are let go at once (their call restarts, or returns EINTR
 * where the kernel does that for any ptrace stop: epoll_wait, for one). */
static int stop_at_safe_point(struct target *t, int timeout_ms, char *why, size_t len)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	int tids[1024];
	do {
		if (kill(t->pid, 0) && errno == ESRCH)
			return ERR(VRT_E_NOENT, "process %d ended", t->pid);
		int n = list_threads(t->pid, tids, 1024);
		for (int i = 0; i < n; i++) {
			if (!blocked_in_syscall(t->pid, tids[i]))
				continue;
			int rc = interrupt_thread(tids[i], why, len);
			if (rc < 0)
				return rc;
			if (rc > 0)
				continue;
			if (!ptrace(PTRACE_GETREGS, tids[i], NULL, &t->saved) && at_safe_point(t, tids[i], &t->saved)) {
				t->tid = tids[i];
				return 0;
			}
			ptrace(PTRACE_DETACH, tids[i], NULL, NULL);
		}
		usleep(20000);
	} while (now_ms() < deadline);
	return ERR(VRT_E_UNSUPPORTED, "no thread of process %d waited in a system call where it is safe to borrow it "
				      "(tried for %d s): each was running, or inside malloc or the dynamic loader. "
				      "Try again, or start the program with `vramtrace run --armed`",
		   t->pid, timeout_ms / 1000);
}

/* ---- registers and scratch memory -------------------------------------------------------- */

static int save_vector_state(struct target *t)
{
	struct iovec iov = { t->xstate, sizeof(t->xstate) };
	if (!ptrace(PTRACE_GETREGSET, t->tid, (void *)NT_X86_XSTATE_NOTE, &iov)) {
		t->xstate_len = iov.iov_len;
		return 0;
	}
	t->xstate_len = 0;
	return ptrace(PTRACE_GETFPREGS, t->tid, NULL, &t->fpregs) ? VRT_E_IO : 0;
}

static void restore_vector_state(struct target *t)
{
	struct iovec iov = { t->xstate, t->xstate_len };
	if (t->xstate_len)
		ptrace(PTRACE_SETREGSET, t->tid, (void *)NT_X86_XSTATE_NOTE, &iov);
	else
		ptrace(PTRACE_SETFPREGS, t->tid, NULL, &t->fpregs);
}

/*
 * Below the red zone of the stopped thread's stack: [return address 0][pad][library\0output\0].
 * The callee's frames go below that; those bytes were free stack, nothing to restore.
 */
static int write_scratch(struct target *t, const char *library, const char *output)
{
	size_t l1 = strlen(library) + 1, l2 = strlen(output) + 1;
	uint64_t top = t->saved.rsp - RED_ZONE;
	uint64_t strings = (top - l1 - l2) & ~(uint64_t)15;
	t->scratch_lo = strings - 8; /* a call's entry sees rsp = 8 mod 16, as after a `call` */
	t->scratch_len = (size_t)(top - t->scratch_lo);
	t->scratch_saved = malloc(t->scratch_len);
	uint8_t *image = calloc(1, t->scratch_len);
	int rc = !t->scratch_saved || !image ? VRT_E_NOMEM : remote_read(t->tid, t->scratch_lo, t->scratch_saved, t->scratch_len);
	if (!rc) {
		memcpy(image + 8, library, l1);
		memcpy(image + 8 + l1, output, l2);
		t->library_str = strings;
		t->output_str = strings + l1;
		rc = remote_write(t->tid, t->scratch_lo, image, t->scratch_len);
	}
	free(image);
	return rc;
}

/* Everything back as it was, then let the thread go: its interrupted call restarts. */
static void restore_and_detach(struct target *t)
{
	if (t->scratch_saved)
		remote_write(t->tid, t->scratch_lo, t->scratch_saved, t->scratch_len);
	restore_vector_state(t);
	ptrace(PTRACE_SETREGS, t->tid, NULL, &t->saved);
	ptrace(PTRACE_DETACH, t->tid, NULL, NULL); /* signal 0: our SIGSEGV stop is not delivered */
	free(t->scratch_saved);
	t->scratch_saved = NULL;
}

/* ---- calling a function in the process -------------------------------------------------- */

/* fn(a0, a1) on the stopped thread; its return value in *ret. VRT_E_IO if it crashed (the
 * caller restores), VRT_E_NOENT (and t->gone) if the process died. */
static int remote_call(struct target *t, uint64_t fn, uint64_t a0, uint64_t a1, uint64_t *ret, char *why, size_t len)
{
	struct user_regs_struct r = t->saved;
	r.rip = fn;
	r.rdi = a0;
	r.rsi = a1;
	r.rax = 0;
	r.rsp = t->scratch_lo;
	r.orig_rax = (unsigned long long)-1; /* not in a system call: no restart into our registers */
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &r) || ptrace(PTRACE_CONT, t->tid, NULL, NULL))
		return ERR(VRT_E_IO, "ptrace: %s", strerror(errno));
	for (;;) {
		int st;
		if (wait_thread(t->tid, &st, -1))
			return ERR(VRT_E_IO, "lost thread %d: %s", t->tid, strerror(errno));
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			t->gone = true;
			return ERR(VRT_E_NOENT, "process %d ended during the attach", t->pid);
		}
		int sig = WSTOPSIG(st);
		if (st >> 16 == PTRACE_EVENT_STOP) { /* a group stop: finish our call first */
			ptrace(PTRACE_CONT, t->tid, NULL, NULL);
			continue;
		}
		if (sig != SIGSEGV) { /* the program's own signal: its handler runs below our frame */
			ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)sig);
			continue;
		}
		if (ptrace(PTRACE_GETREGS, t->tid, NULL, &r))
			return ERR(VRT_E_IO, "ptrace: %s", strerror(errno));
		if (r.rip != 0)
			return ERR(VRT_E_IO, "the call crashed in process %d (SIGSEGV at %#llx); its thread was put back",
				   t->pid, r.rip);
		*ret = r.rax;
		return 0;
	}
}

static void remote_string(struct target *t, uint64_t addr, char *out, size_t n)
{
	out[0] = 0;
	if (!addr)
		return;
	size_t got = n - 1;
	while (got >= 16 && remote_read(t->tid, addr, out, got))
		got /= 2;
	out[got >= 16 ? got : 0] = 0;
	out[strnlen(out, n - 1)] = 0;
}

/* dlopen(library, RTLD_NOW | RTLD_GLOBAL), with dlerror() as the reason when it fails. */
static int remote_dlopen(struct target *t, char *why, size_t len)
{
	uint64_t handle = 0;
	int rc = remote_call(t, t->dlopen_fn, t->library_str, RTLD_NOW_GLOBAL, &handle, why, len);
	if (rc || handle)
		return rc;
	char reason[512] = "dlopen returned NULL";
	uint64_t text = 0;
	if (t->dlerror_fn && !remote_call(t, t->dlerror_fn, 0, 0, &text, why, len))
		remote_string(t, text, reason, sizeof(reason));
	return ERR(VRT_E_IO, "process %d could not load the library: %s", t->pid, reason);
}

static int call_attach_start(struct target *t, const char *library, char *why, size_t len)
{
	struct file_id id;
	struct module self;
	struct elf_file e;
	uint64_t fn = 0, ret = 0;
	if (stat(library, &id.st) || !realpath(library, id.real))
		return ERR(VRT_E_NOENT, "%s: %s", library, strerror(errno));
	if (!find_module(t->pid, is_file, &id, &self) || !elf_open(t->pid, self.path, &e))
		return ERR(VRT_E_IO, "the library was loaded but is not in process %d's memory map", t->pid);
	bool found = elf_symbol(&e, self.base, "vramtrace_attach_start", &fn, NULL);
	elf_close(&e);
	if (!found)
		return ERR(VRT_E_UNSUPPORTED, "%s has no vramtrace_attach_start: a different vramtrace version?", library);
	int rc = remote_call(t, fn, t->output_str, 0, &ret, why, len);
	if (rc)
		return rc;
	switch ((int)(uint32_t)ret) {
	case 0: return 0;
	case VRT_E_UNSUPPORTED:
		return ERR(VRT_E_UNSUPPORTED, "vramtrace is already loaded in process %d (preloaded, or attached before) "
					      "and cannot be started again there", t->pid);
	default:
		return ERR(VRT_E_IO, "vramtrace could not start in process %d: %s", t->pid, vrt_strerror((int)(uint32_t)ret));
	}
}

/* ---- the whole sequence ----------------------------------------------------------------- */

static bool libc_base_visit(const struct mapping *m, void *arg)
{
	if (m->offset == 0 && is_libc(m, NULL)) {
		*(uint64_t *)arg = m->lo;
		return true;
	}
	return false;
}

/* Changes when the process runs exec (a launcher script turning into the real program). */
static uint64_t process_image(int pid)
{
	uint64_t base = 0;
	for_each_mapping(pid, libc_base_visit, &base);
	return base;
}

static int inject_into_stopped(struct target *t, const char *library, const char *output, char *why, size_t len)
{
	int rc = save_vector_state(t);
	if (rc)
		return ERR(rc, "cannot read the registers of thread %d: %s", t->tid, strerror(errno));
	rc = write_scratch(t, library, output);
	if (rc)
		return ERR(rc, "cannot write to thread %d's stack", t->tid);
	rc = remote_dlopen(t, why, len);
	if (!rc)
		rc = call_attach_start(t, library, why, len);
	return rc;
}

static bool any_vramtrace(const struct mapping *m, const void *key)
{
	(void)key;
	return !strncmp(base_name(m->path), "libvramtrace", 12);
}

bool vrt_inject_loaded(int pid, const char *library)
{
	struct file_id id;
	struct module mod;
	if (!library)
		return find_module(pid, any_vramtrace, NULL, &mod);
	if (stat(library, &id.st) || !realpath(library, id.real))
		return false;
	return find_module(pid, is_file, &id, &mod);
}

int vrt_inject(int pid, const char *library, const char *output, char *why, size_t len)
{
	static struct target t; /* large (saved vector state); one injection per process */
	memset(&t, 0, sizeof(t));
	t.pid = pid;
	int rc = check_machine(pid, why, len);
	if (rc)
		return rc;
	uint64_t image = process_image(pid);
	rc = resolve_libc(&t, why, len);
	if (rc)
		return rc;
	sigset_t hold, old;
	sigemptyset(&hold);
	sigaddset(&hold, SIGINT);
	sigaddset(&hold, SIGTERM);
	sigaddset(&hold, SIGHUP);
	sigaddset(&hold, SIGQUIT);
	sigprocmask(SIG_BLOCK, &hold, &old);
	rc = stop_at_safe_point(&t, 10000, why, len);
	if (!rc && process_image(pid) != image) { /* it ran exec since we read its memory map */
		restore_and_detach(&t);
		rc = ERR(VRT_E_IO, "process %d started a new program (exec) while vramtrace was attaching: try again", pid);
	} else if (!rc) {
		rc = inject_into_stopped(&t, library, output, why, len);
		if (!t.gone)
			restore_and_detach(&t);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return rc;
}

#endif /* __x86_64__ */
