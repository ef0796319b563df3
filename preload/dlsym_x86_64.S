/* SPDX-License-Identifier: MIT */
/*
 * dlsym(handle, name): ask vrt_dlsym_filter first; if it answers VRT_PASS ((void *)-1), jump
 * to the next dlsym with the caller's return address still on the stack, so glibc resolves
 * RTLD_NEXT relative to the real caller, not to libvramtrace.so.
 *
 * Exported three ways (preload/vramtrace.map): plain dlsym (the default, dlsym@@GLIBC_2.34),
 * and dlsym@GLIBC_2.2.5, so that dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34" or "GLIBC_2.2.5") in
 * a library preloaded before us (a shim taking "the real dlsym") finds ours, as a plain
 * reference does.
 */
	.text
	.globl	vrt_dlsym
	.type	vrt_dlsym, @function
	.globl	vrt_dlsym_compat
	.type	vrt_dlsym_compat, @function
	.symver	vrt_dlsym, dlsym@@GLIBC_2.34
	.symver	vrt_dlsym_compat, dlsym@GLIBC_2.2.5
	.p2align 4
vrt_dlsym:
vrt_dlsym_compat:
	.cfi_startproc
	pushq	%rdi
	.cfi_adjust_cfa_offset 8
	pushq	%rsi
	.cfi_adjust_cfa_offset 8
	subq	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	vrt_dlsym_filter
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	popq	%rsi
	.cfi_adjust_cfa_offset -8
	popq	%rdi
	.cfi_adjust_cfa_offset -8
	cmpq	$-1, %rax
	je	1f
	ret
1:
	jmp	*vrt_real_dlsym_ptr(%rip)
	.cfi_endproc
	.size	vrt_dlsym, .-vrt_dlsym
	.size	vrt_dlsym_compat, .-vrt_dlsym_compat

	.section .note.GNU-stack,"",@progbits
