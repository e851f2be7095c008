// cp_async: A and B tiles reach shared memory by cp.async from the producer warpgroup's 128
// threads (16 bytes a thread and copy, address math in registers) instead of TMA copies one
// thread issues; cp.async cannot multicast, so the large configuration runs without its 2x1
// cluster too.
#pragma once
#ifdef ABLATE_CP_ASYNC
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_MAINLOOP
#error "cp_async: another pathology already replaces the mainloop seam"
#endif
#define ABLATE_SEAM_MAINLOOP CpAsyncMainloop
#endif
