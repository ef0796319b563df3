/* SPDX-License-Identifier: MIT */
/*
 * libc's dlclose, never ours. hooks_dl.c exports a dlclose that asks the driver about its
 * contexts around every unload: the handles our own code opens (RTLD_NOLOAD lookups, some
 * inside the program's dlsym) are closed without it, by the versioned libc symbol, which a
 * plain reference would not reach (it binds to the first dlclose in the global scope: ours).
 * GLIBC_2.2.5 is the x86-64 version every glibc has (libdl before 2.34, libc's since).
 */
#ifndef VRAMTRACE_LIBC_DL_H
#define VRAMTRACE_LIBC_DL_H

__asm__(".symver vrt_libc_dlclose,dlclose@GLIBC_2.2.5");
__attribute__((visibility("default"))) int vrt_libc_dlclose(void *handle);

#endif /* VRAMTRACE_LIBC_DL_H */
