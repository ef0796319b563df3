/* SPDX-License-Identifier: MIT */
/*
 * GOT patching for a late attach (attach.h): every loaded object's relocations are scanned for
 * imports of a tracked API (R_X86_64_JUMP_SLOT: calls through the PLT; R_X86_64_GLOB_DAT: the
 * address taken) and of dlsym, and the slot is pointed at a trampoline bound to what it held.
 *
 * Invariants:
 *  - A slot is only ever swapped between the value it held and ours, with one aligned 8-byte
 *    store, so a thread calling through it concurrently sees one or the other.
 *  - A lazily bound slot still points into its own object's PLT; calling through a trampoline
 *    bound to that would resolve, overwrite our trampoline and be untraced from then on. Such a
 *    slot gets the function the loader would have bound (dlsym in that object's scope).
 *  - Our own object, the dynamic loader and the vDSO are never touched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "libc_dl.h"
#include "attach.h"
#include "hooks.h"

/* ---- the registry of rewritten pointers ------------------------------------------------- */

#define MAX_PATCHES 4096

struct patch {
	void **slot;
	void *original;
	void *ours;
};

static struct patch patches[MAX_PATCHES];
static _Atomic int n_patches;

/* Protection of the page holding addr, from /proc/self/maps; -1 if not mapped. */
static int page_protection(uintptr_t addr)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[512];
	int prot = -1;
	while (prot < 0 && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || addr < lo || addr >= hi)
			continue;
		prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
		       (perms[2] == 'x' ? PROT_EXEC : 0);
	}
	fclose(f);
	return prot;
}

/* Stores value in *slot; RELRO pages are made writable for the store and then read-only again. */
static bool store_pointer(void **slot, void *value)
{
	int prot = page_protection((uintptr_t)slot);
	if (prot < 0)
		return false;
	if (prot & PROT_WRITE) {
		__atomic_store_n(slot, value, __ATOMIC_RELEASE);
		return true;
	}
	long page = sysconf(_SC_PAGESIZE);
	void *start = (void *)((uintptr_t)slot & ~(uintptr_t)(page - 1));
	if (mprotect(start, (size_t)page, prot | PROT_WRITE))
		return false;
	__atomic_store_n(slot, value, __ATOMIC_RELEASE);
	mprotect(start, (size_t)page, prot);
	return true;
}

bool vrt_patch_pointer(void **slot, void *value)
{
	int i = atomic_load(&n_patches);
	if (i >= MAX_PATCHES)
		return false;
	void *original = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!store_pointer(slot, value))
		return false;
	patches[i] = (struct patch){ slot, original, value };
	atomic_store(&n_patches, i + 1);
	return true;
}

int vrt_patch_restore_all(void)
{
	int n = atomic_exchange(&n_patches, 0), restored = 0;
	for (int i = n - 1; i >= 0; i--) {
		struct patch *p = &patches[i];
		/* Someone rewrote it since (the loader never does for a bound slot): leave theirs. */
		if (__atomic_load_n(p->slot, __ATOMIC_ACQUIRE) == p->ours && store_pointer(p->slot, p->original))
			restored++;
	}
	return restored;
}

/* ---- one object's relocations ----------------------------------------------------------- */

struct object {
	const struct dl_phdr_info *info;
	uintptr_t lo, hi; /* its mapped range */
	const ElfW(Sym) *symtab;
	const char *strtab;
	size_t strsz;
	const ElfW(Rela) *jmprel, *rela;
	size_t n_jmprel, n_rela;
	void *scope;      /* dlopen handle for lookups in its scope, opened on first need */
};

struct scan {
	void *our_dlsym;
	int patched;
};

/* glibc relocates the d_ptr entries of loaded objects in place; others leave them relative. */
static uintptr_t dyn_address(const struct dl_phdr_info *info, ElfW(Addr) v)
{
	return v < info->dlpi_addr ? info->dlpi_addr + v : v;
}

static bool read_dynamic(struct object *o)
{
	const struct dl_phdr_info *info = o->info;
	const ElfW(Dyn) *dyn = NULL;
	o->lo = UINTPTR_MAX;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
		if (ph->p_type == PT_LOAD) {
			uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
			o->lo = lo < o->lo ? lo : o->lo;
			o->hi = hi > o->hi ? hi : o->hi;
		}
	}
	if (!dyn)
		return false;
	size_t relasz = 0, relaent = sizeof(ElfW(Rela)), pltrelsz = 0;
	long pltrel = DT_RELA;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB: o->symtab = (const ElfW(Sym) *)dyn_address(info, dyn->d_un.d_ptr); break;
		case DT_STRTAB: o->strtab = (const char *)dyn_address(info, dyn->d_un.d_ptr); break;
		case DT_STRSZ: o->strsz = dyn->d_un.d_val; break;
		case DT_JMPREL: o->jmprel = (const ElfW(Rela) *)dyn_address(info, dyn->d_un.d_ptr); break;
		case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
		case DT_PLTREL: pltrel = (long)dyn->d_un.d_val; break;
		case DT_RELA: o->rela = (const ElfW(Rela) *)dyn_address(info, dyn->d_un.d_ptr); break;
		case DT_RELASZ: relasz = dyn->d_un.d_val; break;
		case DT_RELAENT: relaent = dyn->d_un.d_val; break;
		}
	}
	if (!o->symtab || !o->strtab || pltrel != DT_RELA || relaent != sizeof(ElfW(Rela)))
		return false;
	o->n_jmprel = o->jmprel ? pltrelsz / sizeof(ElfW(Rela)) : 0;
	o->n_rela = o->rela ? relasz / sizeof(ElfW(Rela)) : 0;
	return true;
}

/* What the loader would bind name to for this object: a lookup in its own scope. */
static void *bind_as_loader(struct object *o, const char *name)
{
	if (!o->scope) {
		const char *file = o->info->dlpi_name && o->info->dlpi_name[0] ? o->info->dlpi_name : NULL;
		o->scope = dlopen(file, RTLD_LAZY | RTLD_NOLOAD);
		if (!o->scope)
			return NULL;
	}
	return vrt_real_dlsym(o->scope, name);
}

/* The value to put in a slot that holds cur for import name; NULL: leave it alone. */
static void *replacement(struct object *o, struct scan *s, const char *name, void *cur)
{
	bool is_dlsym = !strcmp(name, "dlsym");
	const struct vrt_hook_def *def = is_dlsym ? NULL : vrt_hook_by_symbol(name);
	if ((!def && !is_dlsym) || !cur || vrt_addr_is_ours(cur))
		return NULL;
	if (is_dlsym)
		return s->our_dlsym; /* the stub tail-jumps to the real dlsym: caller-relative lookups hold */
	void *real = cur;
	if ((uintptr_t)cur >= o->lo && (uintptr_t)cur < o->hi)
		real = bind_as_loader(o, name); /* still lazy: cur is this object's PLT */
	if (!real || vrt_addr_is_ours(real))
		return NULL; /* only our own definition exists: nothing real to wrap */
	void *wrapped = vrt_hook_wrap(def, real);
	return wrapped == real ? NULL : wrapped;
}

static void patch_relocations(struct object *o, struct scan *s, const ElfW(Rela) *rel, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned type = ELF64_R_TYPE(rel[i].r_info);
		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		const ElfW(Sym) *sym = &o->symtab[ELF64_R_SYM(rel[i].r_info)];
		if (sym->st_shndx != SHN_UNDEF || (o->strsz && sym->st_name >= o->strsz))
			continue; /* imports only: an object's own definitions are its business */
		const char *name = o->strtab + sym->st_name;
		if (!((name[0] == 'c' && name[1] == 'u') || !strcmp(name, "dlsym")))
			continue;
		void **slot = (void **)(o->info->dlpi_addr + rel[i].r_offset);
		void *value = replacement(o, s, name, __atomic_load_n(slot, __ATOMIC_ACQUIRE));
		if (value && vrt_patch_pointer(slot, value))
			s->patched++;
	}
}

static bool is_loader_or_vdso(const char *name)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	return !strncmp(base, "ld-", 3) || !strncmp(base, "ld64", 4) || strstr(base, "linux-vdso") ||
	       strstr(base, "linux-gate");
}

static bool is_ours(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && vrt_addr_is_ours((void *)(info->dlpi_addr + ph->p_vaddr)))
			return true;
	}
	return false;
}

/* The loaded objects, copied out of dl_iterate_phdr: lookups in an object's scope take the
 * loader lock, which must not be taken inside the callback (it holds the loader's write lock,
 * and dlopen on another thread takes the two in the other order). */
#define MAX_OBJECTS 1024

struct object_list {
	struct dl_phdr_info objects[MAX_OBJECTS];
	int n;
};

static int collect_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct object_list *l = arg;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	if (is_ours(info) || is_loader_or_vdso(name))
		return 0;
	l->objects[l->n++] = *info; /* name and headers live as long as the object stays loaded */
	return l->n == MAX_OBJECTS;
}

static void patch_object(const struct dl_phdr_info *info, struct scan *s)
{
	struct object o = { .info = info };
	if (!read_dynamic(&o))
		return;
	patch_relocations(&o, s, o.jmprel, o.n_jmprel);
	patch_relocations(&o, s, o.rela, o.n_rela);
	if (o.scope)
		vrt_libc_dlclose(o.scope);
}

/* Our dlsym stub (dlsym_x86_64.S): looked up in our own scope, since a plain reference from C
 * would bind to the first dlsym in the global scope, libc's. */
static void *our_dlsym(void)
{
	void *self = dlopen(vrt_self_path(), RTLD_LAZY | RTLD_NOLOAD);
	void *p = self ? vrt_real_dlsym(self, "dlsym") : NULL;
	if (self)
		vrt_libc_dlclose(self);
	return p && vrt_addr_is_ours(p) ? p : NULL;
}

int vrt_got_patch_all(void)
{
	struct scan s = { .our_dlsym = our_dlsym() };
	if (!s.our_dlsym)
		return 0;
	static struct object_list list; /* worker thread only, once */
	list.n = 0;
	dl_iterate_phdr(collect_object, &list);
	for (int i = 0; i < list.n; i++)
		patch_object(&list.objects[i], &s);
	return s.patched;
}
