/* SPDX-License-Identifier: MIT */
/*
 * Row selection and the check of a row against the loaded libc10_cuda.so (torch_layout.h).
 * Called by torch.c once per attach, from a hook's fork section: it may open and read the
 * library file and take the loader's lock (dladdr), and it never calls PyTorch.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libc_dl.h"
#include "torch_layout.h"
#include "torch_layout_table.h"

size_t vrt_torch_layout_count(void) { return sizeof(vrt_torch_layout_table) / sizeof(vrt_torch_layout_table[0]); }

const struct vrt_torch_layout *vrt_torch_layout_row(size_t i)
{
	return i < vrt_torch_layout_count() ? &vrt_torch_layout_table[i] : NULL;
}

/* "2.11.0+cu130" -> {2, 11, 0}; "2.12.0a0+git" -> {2, 12, 0}; false without major.minor. */
static bool parse_release(const char *s, int v[3])
{
	v[0] = v[1] = v[2] = 0;
	for (int i = 0; i < 3; i++) {
		if (*s < '0' || *s > '9')
			return i >= 2;
		char *end;
		v[i] = (int)strtol(s, &end, 10);
		if (*end != '.')
			return i >= 1;
		s = end + 1;
	}
	return true;
}

const struct vrt_torch_layout *vrt_torch_layout_find_in(const struct vrt_torch_layout *rows, size_t n,
							const char *version)
{
	int want[3], have[3];
	if (!version || !parse_release(version, want))
		return NULL;
	const struct vrt_torch_layout *same_minor = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!parse_release(rows[i].release, have) || have[0] != want[0] || have[1] != want[1])
			continue;
		if (have[2] == want[2])
			return &rows[i];
		same_minor = &rows[i]; /* rows are in release order: the newest one stays */
	}
	return same_minor;
}

const struct vrt_torch_layout *vrt_torch_layout_find(const char *version)
{
	return vrt_torch_layout_find_in(vrt_torch_layout_table, vrt_torch_layout_count(), version);
}

/* True when p lies in a segment of the object lm describes. */
static bool in_object(const void *p, const struct link_map *lm)
{
	Dl_info info;
	struct link_map *map = NULL;
	return p && dladdr1(p, &info, (void **)&map, RTLD_DL_LINKMAP) && map == lm;
}

struct symtab_check {
	uintptr_t want[3];         /* library-relative addresses of the three slots' functions */
	const char *name[3];       /* what the row says they are */
	bool named[3];
	const char *vtable_name;
	long vtable_slots;         /* -1: the vtable symbol was not found */
	uintptr_t vtable_at;
	bool has_symtab;
};

/* Names the three functions (and sizes the vtable) from the file's .symtab. */
static void read_symtab(const char *path, struct symtab_check *c)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	elf_version(EV_CURRENT);
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	Elf_Scn *scn = NULL;
	while (elf && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		c->has_symtab = data != NULL;
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym s;
			const char *name = gelf_getsym(data, (int)i, &s) ? elf_strptr(elf, sh.sh_link, s.st_name) : NULL;
			if (!name)
				continue;
			if (GELF_ST_TYPE(s.st_info) == STT_OBJECT && !strcmp(name, c->vtable_name)) {
				c->vtable_slots = (long)(s.st_size / 8) - 2;
				c->vtable_at = s.st_value + 16;
			}
			for (int k = 0; k < 3; k++)
				if (GELF_ST_TYPE(s.st_info) == STT_FUNC && s.st_value == c->want[k] && c->name[k] &&
				    !strcmp(name, c->name[k]))
					c->named[k] = true;
		}
	}
	if (elf)
		elf_end(elf);
	close(fd);
}

#define REFUSE(...) (snprintf(why, why_len, __VA_ARGS__), VRT_TORCH_REFUSED)

enum vrt_torch_backend vrt_torch_layout_check(const struct vrt_torch_layout *row, const char *lib_path,
					      const void *allocator, char *why, size_t why_len)
{
	void *h = dlopen(lib_path, RTLD_LAZY | RTLD_NOLOAD);
	struct link_map *lm = NULL;
	bool loaded = h && !dlinfo(h, RTLD_DI_LINKMAP, &lm) && lm;
	if (h)
		vrt_libc_dlclose(h); /* NOLOAD took a reference: the library stays, as before */
	if (!loaded)
		return REFUSE("%s is not loaded", lib_path);
	/* Each pointer is shown to lie in the library before it is read through (the object itself
	 * is PyTorch's static one, or anywhere for a replacement: only its first word is read). */
	void *const *vtable = allocator ? *(void *const *const *)allocator : NULL;
	if (!vtable || !in_object(vtable, lm) || !in_object(vtable - 2, lm))
		return REFUSE("the allocator's vtable is not in %s (a replaced allocator?)", lib_path);
	const void *type_info = vtable[-1];
	const char *rtti = in_object(type_info, lm) ? ((const char *const *)type_info)[1] : NULL;
	if (!rtti || !in_object(rtti, lm))
		return REFUSE("the allocator has no type information in %s", lib_path);
	if (row->rtti_async && !strcmp(rtti, row->rtti_async))
		return VRT_TORCH_ASYNC;
	if (strcmp(rtti, row->rtti_native))
		return REFUSE("the CUDA allocator is a %.120s, not the caching allocator", rtti);
	const int slots[3] = { row->slot_initialized, row->slot_get_device_stats, row->slot_attach_tracker };
	char vtable_name[256];
	snprintf(vtable_name, sizeof(vtable_name), "_ZTV%s", row->rtti_native);
	struct symtab_check c = { .name = { row->fn_initialized, row->fn_get_device_stats, row->fn_attach_tracker },
				  .vtable_name = vtable_name, .vtable_slots = -1 };
	for (int k = 0; k < 3; k++) {
		if (k == 2 && slots[k] < 0)
			break; /* refused below, once the other slots are shown right */
		if (slots[k] < 0 || slots[k] >= row->vtable_slots)
			return REFUSE("vtable slot %d is outside the allocator's %d", slots[k], row->vtable_slots);
		if (!in_object(&vtable[slots[k]], lm) || !in_object(vtable[slots[k]], lm))
			return REFUSE("vtable slot %d points outside %s", slots[k], lib_path);
		c.want[k] = (uintptr_t)vtable[slots[k]] - lm->l_addr;
	}
	read_symtab(lib_path, &c);
	if (c.has_symtab && (c.vtable_slots != row->vtable_slots || c.vtable_at != (uintptr_t)vtable - lm->l_addr))
		return REFUSE("the allocator's vtable has %ld slots where the table says %d", c.vtable_slots,
			      row->vtable_slots);
	for (int k = 0; c.has_symtab && k < 3; k++) /* stripped: the checks above are all there is */
		if (slots[k] >= 0 && !c.named[k])
			return REFUSE("vtable slot %d does not hold %s", slots[k], c.name[k] ? c.name[k] : "?");
	if (row->slot_attach_tracker < 0)
		return REFUSE("PyTorch %s has no allocator trace tracker", row->release);
	return VRT_TORCH_NATIVE;
}
