/* SPDX-License-Identifier: MIT */
/*
 * NVTX ranges become phases named "nvtx:<message>". NVTX is header-only (PyTorch, DeepSpeed via
 * torch.cuda.nvtx, NCCL), so the only way in is its injection interface: at its first call each
 * NVTX user dlopens NVTX_INJECTION64_PATH (set to this library unless another tool owns it) and
 * calls InitializeInjectionNvtx2, where we fill its callback slots. Idempotent: every
 * NVTX-embedding library calls it.
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define PREFIX "nvtx:"
#define MAX_DEPTH 64

/* Names of the ranges pushed on this thread, to name the pop. */
struct range_stack {
	int depth;
	char *names[MAX_DEPTH];
};

static __thread struct range_stack *ranges;

void vrt_nvtx_setup_env(void)
{
	const char *owner = getenv("NVTX_INJECTION64_PATH");
	if (owner && *owner) {
		if (strcmp(owner, vrt_self_path()))
			vrt_log("NVTX_INJECTION64_PATH is taken by %s; NVTX ranges will not become phases", owner);
		return;
	}
	if (vrt_self_path()[0])
		setenv("NVTX_INJECTION64_PATH", vrt_self_path(), 0);
}

static const char *message_text(const nvtxEventAttributes_t *a)
{
	if (!a)
		return NULL;
	if (a->messageType == NVTX_MESSAGE_TYPE_ASCII || a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
		return a->message.ascii; /* registered handles are our own copies of the string */
	return NULL;
}

static char *phase_name(const char *msg)
{
	char name[256];
	snprintf(name, sizeof(name), PREFIX "%s", msg ? msg : "?");
	return strdup(name);
}

static int push(const char *msg)
{
	int guard;
	if (!(guard = vrt_enter()))
		return 0;
	if (!ranges)
		ranges = calloc(1, sizeof(*ranges));
	char *name = phase_name(msg);
	if (ranges && name) {
		vrt_emit_label(VRT_OP_PHASE_ENTER, name);
		if (ranges->depth < MAX_DEPTH)
			ranges->names[ranges->depth] = name;
		else
			free(name);
		ranges->depth++;
	} else {
		free(name);
	}
	vrt_leave(guard);
	return ranges ? ranges->depth - 1 : 0;
}

static int pop(void)
{
	int guard;
	if (!ranges || ranges->depth <= 0)
		return -1;
	int d = --ranges->depth;
	char *name = d < MAX_DEPTH ? ranges->names[d] : NULL;
	if (name && (guard = vrt_enter())) {
		vrt_emit_label(VRT_OP_PHASE_EXIT, name);
		vrt_leave(guard);
	}
	free(name);
	return d;
}

/* A range with no name (the payload extension's push): kept on the stack so that pops pair up,
 * never a phase of its own. */
static int push_nameless(void)
{
	if (!ranges)
		ranges = calloc(1, sizeof(*ranges));
	if (!ranges)
		return 0;
	if (ranges->depth < MAX_DEPTH)
		ranges->names[ranges->depth] = NULL;
	return ranges->depth++;
}

static void mark(const char *msg)
{
	int guard;
	if (!(guard = vrt_enter()))
		return;
	char *name = phase_name(msg);
	if (name)
		vrt_emit_label(VRT_OP_MARK, name);
	free(name);
	vrt_leave(guard);
}

/* Start/end ranges may cross threads: the id carries the name. */
static nvtxRangeId_t start(const char *msg)
{
	int guard;
	char *name = phase_name(msg);
	if (name && (guard = vrt_enter())) {
		vrt_emit_label(VRT_OP_PHASE_ENTER, name);
		vrt_leave(guard);
	}
	return (nvtxRangeId_t)(uintptr_t)name;
}

static void end(nvtxRangeId_t id)
{
	int guard;
	char *name = (char *)(uintptr_t)id;
	if (name && (guard = vrt_enter())) {
		vrt_emit_label(VRT_OP_PHASE_EXIT, name);
		vrt_leave(guard);
	}
	free(name);
}

static int range_push_a(const char *m) { return push(m); }
static int range_push_ex(const nvtxEventAttributes_t *a) { return push(message_text(a)); }
static int range_pop(void) { return pop(); }
static void mark_a(const char *m) { mark(m); }
static void mark_ex(const nvtxEventAttributes_t *a) { mark(message_text(a)); }
static nvtxRangeId_t range_start_a(const char *m) { return start(m); }
static nvtxRangeId_t range_start_ex(const nvtxEventAttributes_t *a) { return start(message_text(a)); }
static void range_end(nvtxRangeId_t id) { end(id); }
static int domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { (void)d; return push(message_text(a)); }
static int domain_range_pop(nvtxDomainHandle_t d) { (void)d; return pop(); }
static void domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { (void)d; mark(message_text(a)); }
static nvtxRangeId_t domain_range_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { (void)d; return start(message_text(a)); }
static void domain_range_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { (void)d; end(id); }
static nvtxStringHandle_t domain_register_string_a(nvtxDomainHandle_t d, const char *s) { (void)d; return (nvtxStringHandle_t)strdup(s ? s : ""); }
static nvtxDomainHandle_t domain_create_a(const char *name) { return (nvtxDomainHandle_t)strdup(name ? name : ""); }

static int payload_push(nvtxDomainHandle_t d, const void *payload, size_t n) { (void)d; (void)payload; (void)n; return push_nameless(); }
static int payload_pop(nvtxDomainHandle_t d, const void *payload, size_t n) { (void)d; (void)payload; (void)n; return pop(); }

static void set(NvtxFunctionTable table, unsigned size, unsigned cbid, void *fn)
{
	if (cbid < size && table[cbid])
		*table[cbid] = (NvtxFunctionPointer)fn;
}

VRT_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
	const NvtxExportTableCallbacks *cb = get_export_table ? get_export_table(NVTX_ETID_CALLBACKS) : NULL;
	if (!cb || !cb->GetModuleFunctionTable)
		return 0;
	NvtxFunctionTable core, core2;
	unsigned n_core = 0, n_core2 = 0;
	if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n_core))
		return 0;
	set(core, n_core, NVTX_CBID_CORE_RangePushA, (void *)range_push_a);
	set(core, n_core, NVTX_CBID_CORE_RangePushEx, (void *)range_push_ex);
	set(core, n_core, NVTX_CBID_CORE_RangePop, (void *)range_pop);
	set(core, n_core, NVTX_CBID_CORE_MarkA, (void *)mark_a);
	set(core, n_core, NVTX_CBID_CORE_MarkEx, (void *)mark_ex);
	set(core, n_core, NVTX_CBID_CORE_RangeStartA, (void *)range_start_a);
	set(core, n_core, NVTX_CBID_CORE_RangeStartEx, (void *)range_start_ex);
	set(core, n_core, NVTX_CBID_CORE_RangeEnd, (void *)range_end);
	if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n_core2)) {
		set(core2, n_core2, NVTX_CBID_CORE2_DomainRangePushEx, (void *)domain_range_push_ex);
		set(core2, n_core2, NVTX_CBID_CORE2_DomainRangePop, (void *)domain_range_pop);
		set(core2, n_core2, NVTX_CBID_CORE2_DomainMarkEx, (void *)domain_mark_ex);
		set(core2, n_core2, NVTX_CBID_CORE2_DomainRangeStartEx, (void *)domain_range_start_ex);
		set(core2, n_core2, NVTX_CBID_CORE2_DomainRangeEnd, (void *)domain_range_end);
		set(core2, n_core2, NVTX_CBID_CORE2_DomainRegisterStringA, (void *)domain_register_string_a);
		set(core2, n_core2, NVTX_CBID_CORE2_DomainCreateA, (void *)domain_create_a);
	}
	return 1;
}

/*
 * NVTX's extension modules ask for InitializeInjectionNvtxExtension, once per module. Only the
 * payload extension matters here: NCCL (2.24 on) opens ncclCommInitRankConfig, ncclCommDestroy
 * and ncclCommAbort with nvtxDomainRangePushEx and closes them with nvtxRangePopPayload once it
 * knows the payload (the communicator), so without this the range never ends and every later
 * phase sits inside it. nvtxRangePushPayload's range has no name: kept for the pairing only.
 * The layout below is NVTX's ABI (nvtxDetail/nvtxExtTypes.h, nvToolsExtPayload.h's callback ids),
 * spelled out here because CUDA 12's nvtx3 headers may lack the payload extension.
 */
struct nvtx_ext_segment {
	size_t segment_id, slot_count;
	intptr_t *slots;
};

struct nvtx_ext_module {
	uint16_t nvtx_version, struct_size, module_id, compat_id;
	size_t segments_count;
	struct nvtx_ext_segment *segments;
	void *get_export_function;
	const void *ext_info;
};

#define NVTX_EXT_PAYLOAD_MODULE 2
#define NVTX_EXT_PAYLOAD_PUSH 3 /* NVTX3EXT_CBID_nvtxRangePushPayload */
#define NVTX_EXT_PAYLOAD_POP 4	/* NVTX3EXT_CBID_nvtxRangePopPayload */

VRT_EXPORT int InitializeInjectionNvtxExtension(struct nvtx_ext_module *m)
{
	if (!m || m->module_id != NVTX_EXT_PAYLOAD_MODULE || m->segments_count < 1 || !m->segments ||
	    !m->segments[0].slots || m->segments[0].slot_count <= NVTX_EXT_PAYLOAD_POP)
		return 0; /* any other module: its calls stay no-ops, as without us */
	m->segments[0].slots[NVTX_EXT_PAYLOAD_PUSH] = (intptr_t)payload_push;
	m->segments[0].slots[NVTX_EXT_PAYLOAD_POP] = (intptr_t)payload_pop;
	return 1;
}
