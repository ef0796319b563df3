/* SPDX-License-Identifier: MIT */
/*
 * Symbolization at record time, in the collector thread, once per unique return address: the
 * module that holds it (dl_iterate_phdr, with build-ids) and the nearest function symbol from
 * the file's .symtab, or .dynsym when stripped (libelf). The trace thus carries names and needs
 * no binaries to be read; build-ids let an analyzer with the binaries add file:line later.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct func_sym {
	uint64_t addr;
	uint64_t size;
	const char *name;
};

struct module {
	uint32_t id;
	char *path;
	uint64_t base;      /* load bias */
	uint64_t lo, hi;    /* span of its PT_LOAD segments */
	uint8_t build_id[20];
	uint32_t build_id_len;
	bool loaded, reported;
	int fd;
	Elf *elf;
	struct func_sym *syms;
	size_t n_syms;
};

static struct module *modules;
static size_t n_modules, cap_modules;
static uint32_t next_module_id = 1;

void vrt_symbols_init(void) { elf_version(EV_CURRENT); }

static struct module *find_module(uint64_t addr)
{
	for (size_t i = 0; i < n_modules; i++)
		if (addr >= modules[i].lo && addr < modules[i].hi)
			return &modules[i];
	return NULL;
}

static void read_build_id(struct module *m, const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const uint8_t *name = p + sizeof(*n), *desc = name + ((n->n_namesz + 3) & ~3u);
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
				m->build_id_len = n->n_descsz > 20 ? 20 : n->n_descsz;
				memcpy(m->build_id, desc, m->build_id_len);
				return;
			}
			p = desc + ((n->n_descsz + 3) & ~3u);
		}
	}
}

static int add_module(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	uint64_t lo = UINT64_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uint64_t a = info->dlpi_addr + ph->p_vaddr;
		lo = a < lo ? a : lo;
		hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
	}
	if (lo >= hi)
		return 0;
	struct module *known = find_module(lo);
	if (known && known->lo == lo && known->hi == hi)
		return 0;
	if (n_modules == cap_modules) {
		size_t ncap = cap_modules ? cap_modules * 2 : 64;
		struct module *nm = realloc(modules, ncap * sizeof(*nm));
		if (!nm)
			return 1;
		modules = nm;
		cap_modules = ncap;
	}
	struct module *m = &modules[n_modules++];
	memset(m, 0, sizeof(*m));
	m->fd = -1;
	m->id = next_module_id++;
	m->base = info->dlpi_addr;
	m->lo = lo;
	m->hi = hi;
	const char *name = info->dlpi_name;
	char exe[4096];
	if (!name || !*name) {
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = 0;
		name = exe;
	}
	m->path = strdup(name);
	read_build_id(m, info);
	if (known) /* the old range was unloaded; its module no longer answers lookups */
		known->lo = known->hi = 0;
	return 0;
}

static int cmp_sym(const void *a, const void *b)
{
	const struct func_sym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void collect(struct module *m, Elf_Scn *scn, const GElf_Shdr *sh, bool relocate)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data || !sh->sh_entsize)
		return;
	size_t count = sh->sh_size / sh->sh_entsize;
	struct func_sym *syms = realloc(m->syms, (m->n_syms + count) * sizeof(*syms));
	if (!syms)
		return;
	m->syms = syms;
	for (size_t i = 0; i < count; i++) {
		GElf_Sym s;
		if (!gelf_getsym(data, (int)i, &s) || !s.st_value || s.st_shndx == SHN_UNDEF)
			continue;
		int type = GELF_ST_TYPE(s.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		const char *name = elf_strptr(m->elf, sh->sh_link, s.st_name);
		if (!name || !*name)
			continue;
		m->syms[m->n_syms++] = (struct func_sym){ (relocate ? m->base : 0) + s.st_value, s.st_size, name };
	}
}

static void load_symbols(struct module *m)
{
	m->loaded = true;
	m->fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (m->fd < 0)
		return;
	m->elf = elf_begin(m->fd, ELF_C_READ_MMAP, NULL);
	GElf_Ehdr eh;
	if (!m->elf || !gelf_getehdr(m->elf, &eh))
		return;
	bool relocate = eh.e_type == ET_DYN;
	Elf_Scn *symtab = NULL, *dynsym = NULL, *scn = NULL;
	GElf_Shdr sh, symtab_sh, dynsym_sh;
	while ((scn = elf_nextscn(m->elf, scn))) {
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB)
			symtab = scn, symtab_sh = sh;
		else if (sh.sh_type == SHT_DYNSYM)
			dynsym = scn, dynsym_sh = sh;
	}
	if (symtab)
		collect(m, symtab, &symtab_sh, relocate);
	if (dynsym)
		collect(m, dynsym, &dynsym_sh, relocate);
	qsort(m->syms, m->n_syms, sizeof(*m->syms), cmp_sym);
}

static const struct func_sym *nearest(const struct module *m, uint64_t addr)
{
	size_t lo = 0, hi = m->n_syms;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m->syms[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	const struct func_sym *s = &m->syms[lo - 1];
	/* A sized symbol must contain addr; an unsized one reaches to the next symbol. */
	if (s->size && addr >= s->addr + s->size) {
		/* Aliases share an address: look back for one whose size covers addr. */
		for (size_t i = lo - 1; i > 0 && m->syms[i - 1].addr == s->addr; i--)
			if (!m->syms[i - 1].size || addr < m->syms[i - 1].addr + m->syms[i - 1].size)
				return &m->syms[i - 1];
		return NULL;
	}
	return s;
}

void vrt_symbols_invalidate(void) { dl_iterate_phdr(add_module, NULL); }

/* In the collector's fork section: dl_iterate_phdr's lock, and a module table a forked child
 * goes on using, are never caught in the middle by fork(). */
int vrt_symbolize(uint64_t return_addr, struct vrt_symbol *out)
{
	uint64_t addr = return_addr - 1; /* the call instruction, not the one after it */
	vrt_collector_section_enter();
	struct module *m = find_module(addr);
	if (!m) {
		vrt_symbols_invalidate();
		m = find_module(addr);
	}
	if (m && !m->loaded)
		load_symbols(m);
	vrt_collector_section_leave();
	memset(out, 0, sizeof(*out));
	if (!m)
		return 0;
	out->module_id = m->id;
	const struct func_sym *s = nearest(m, addr);
	if (s) {
		out->name = s->name;
		out->offset = return_addr - s->addr;
	}
	return 0;
}

void vrt_symbols_forget_reported(void)
{
	for (size_t i = 0; i < n_modules; i++)
		modules[i].reported = false;
}

/* Modules whose symbols were used and that the trace has not described yet. */
int vrt_symbols_new_modules(const struct vrt_module_info **out, int max)
{
	static struct vrt_module_info infos[64];
	int n = 0;
	for (size_t i = 0; i < n_modules && n < max && n < 64; i++) {
		struct module *m = &modules[i];
		if (m->reported || !m->loaded)
			continue;
		m->reported = true;
		infos[n] = (struct vrt_module_info){ m->id, m->path, m->base, m->hi - m->lo, m->build_id, m->build_id_len };
		out[n] = &infos[n];
		n++;
	}
	return n;
}
