/*
 * drv_capture.c - stream capture through the driver API, linked against the driver double: a
 * capture begun and ended by the exported names (cuStreamBeginCapture, which cuda.h maps to
 * cuStreamBeginCapture_v2, and cuStreamEndCapture), and one through cuGetProcAddress with the
 * per-thread-default-stream flag (the _ptsz variants), as a runtime reaches the driver. Each
 * capture allocates inside it (1 MiB, then 2 MiB), kept to the end.
 *
 * Expected (tests/e2e/test_driver.py): 2 CAPTURE_BEGIN (cuStreamBeginCapture_v2) and 2
 * CAPTURE_END (cuStreamEndCapture), on the stream each began on.
 */
#include <cuda.h>

#include "drv_prog.h"

static void capture_around(CUresult (*begin)(CUstream, CUstreamCaptureMode),
			   CUresult (*end)(CUstream, CUgraph *), size_t bytes)
{
	CUstream s;
	CUdeviceptr p;
	CUgraph graph;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuMemAlloc(&p, bytes));
	CHECK(end(s, &graph));
	printf("drv_capture: stream %p\n", (void *)s);
}

SITE void exported_site(void) { capture_around(cuStreamBeginCapture, cuStreamEndCapture, 1 * MiB); }

SITE void proc_address_site(void)
{
	CUresult (*begin)(CUstream, CUstreamCaptureMode);
	CUresult (*end)(CUstream, CUgraph *);
	CUdriverProcAddressQueryResult status;
	CHECK(cuGetProcAddress("cuStreamBeginCapture", (void **)&begin, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
	CHECK(cuGetProcAddress("cuStreamEndCapture", (void **)&end, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
	capture_around(begin, end, 2 * MiB);
}

int main(void)
{
	use_primary_context();
	exported_site();
	proc_address_site();
	return 0;
}
