/* SPDX-License-Identifier: MIT */
/*
 * dlsym(handle, name): ask vrt_dlsym_filter first; if it answers VRT_PASS ((void *)-1), jump
 * to the real dlsym with the caller's return address still on the stack, so glibc resolves
 * RTLD_NEXT relative to the real caller, not to libvramtrace.so.
 */
	.text
	.globl	dlsym
	.type	dlsym, @function
	.p2align 4
dlsym:
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
	.size	dlsym, .-dlsym

	.section .note.GNU-stack,"",@progbits
