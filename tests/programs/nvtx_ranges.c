/*
 * nvtx_ranges.c - NVTX ranges, as PyTorch (torch.cuda.nvtx), DeepSpeed and NCCL emit them, become
 * phases "nvtx:<message>" (preload/nvtx.c, through NVTX's injection interface: the header-only
 * NVTX dlopens NVTX_INJECTION64_PATH, which the preload points at itself). Every kind of call:
 *
 *   nvtxRangePushA("step") / nvtxRangePop     x3: each step_leak_site keeps 1 MiB and
 *                                                  step_scratch_site 2 MiB comes and goes
 *   nvtxRangePushEx("eval") / nvtxRangePop     x2: eval_site 512 KiB, freed inside
 *   nvtxMarkA("half"), nvtxMarkEx("ex-mark")
 *   nvtxRangeStartA("load") / nvtxRangeEnd     (may cross threads), nvtxRangeStartEx("load-ex")
 *   domain "app": nvtxDomainRangePushEx with a registered string "domain-step" / DomainRangePop,
 *                 nvtxDomainMarkEx("domain-mark"), nvtxDomainRangeStartEx("domain-load") / End
 *   domain "NCCL" (with the payload extension's header): "comm-init" pushed with
 *                 nvtxDomainRangePushEx and closed with nvtxRangePopPayload, as NCCL 2.24+ closes
 *                 ncclCommInitRankConfig; then "outer" holding a nameless nvtxRangePushPayload /
 *                 nvtxRangePopPayload pair before "inner": the pair must not close "outer"
 *
 * Prints "nvtx_ranges: held_bytes=B" (setup 4 MiB + 3 x 1 MiB), and "nvtx_ranges: payload" first
 * when the payload calls were made.
 */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <string.h>
#if __has_include(<nvtx3/nvToolsExtPayload.h>)
#include <nvtx3/nvToolsExtPayload.h>
#define HAVE_NVTX_PAYLOAD 1
#endif

#include "prog.h"

SITE void setup_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 4 * MiB));
}

SITE void step_scratch_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
	CHECK(cudaFree(p));
}

SITE void step_leak_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

SITE void eval_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 512 * KiB));
	CHECK(cudaFree(p));
}

static nvtxEventAttributes_t ascii(const char *message)
{
	nvtxEventAttributes_t a;
	memset(&a, 0, sizeof(a));
	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.messageType = NVTX_MESSAGE_TYPE_ASCII;
	a.message.ascii = message;
	return a;
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	setup_site();
	for (int i = 0; i < 3; i++) {
		nvtxRangePushA("step");
		step_scratch_site();
		step_leak_site();
		nvtxRangePop();
	}
	for (int i = 0; i < 2; i++) {
		nvtxEventAttributes_t a = ascii("eval");
		nvtxRangePushEx(&a);
		eval_site();
		nvtxRangePop();
	}
	nvtxMarkA("half");
	nvtxEventAttributes_t m = ascii("ex-mark");
	nvtxMarkEx(&m);
	nvtxRangeId_t load = nvtxRangeStartA("load");
	nvtxRangeEnd(load);
	nvtxEventAttributes_t l = ascii("load-ex");
	nvtxRangeEnd(nvtxRangeStartEx(&l));

	nvtxDomainHandle_t app = nvtxDomainCreateA("app");
	nvtxEventAttributes_t d = ascii(NULL);
	d.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
	d.message.registered = nvtxDomainRegisterStringA(app, "domain-step");
	nvtxDomainRangePushEx(app, &d);
	nvtxDomainRangePop(app);
	nvtxEventAttributes_t dm = ascii("domain-mark");
	nvtxDomainMarkEx(app, &dm);
	nvtxEventAttributes_t dl = ascii("domain-load");
	nvtxDomainRangeEnd(app, nvtxDomainRangeStartEx(app, &dl));
#ifdef HAVE_NVTX_PAYLOAD
	nvtxDomainHandle_t nccl = nvtxDomainCreateA("NCCL");
	nvtxEventAttributes_t ci = ascii("comm-init");
	uint64_t comm = 42;
	nvtxPayloadData_t pd = { NVTX_PAYLOAD_ENTRY_TYPE_UINT64, sizeof(comm), &comm };
	nvtxDomainRangePushEx(nccl, &ci);
	nvtxRangePopPayload(nccl, &pd, 1);
	nvtxRangePushA("outer");
	nvtxRangePushPayload(nccl, &pd, 1);
	nvtxRangePopPayload(nccl, &pd, 1);
	nvtxRangePushA("inner");
	nvtxRangePop();
	nvtxRangePop();
	printf("nvtx_ranges: payload\n");
#endif
	printf("nvtx_ranges: held_bytes=%zu\n", 4 * MiB + 3 * MiB);
	return 0;
}
