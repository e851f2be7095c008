// cp_async: A and B tiles reach shared memory by cp.async from the producer warpgroup's 128
// threads (16 bytes a thread and copy, address math in registers) instead of TMA copies one
// thread issues (cp.async cannot multicast: with it the cluster seam is held at 1x1, as the
// base's is).
#pragma once
#ifdef ABLATE_CP_ASYNC
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_MAINLOOP
#error "cp_async: another pathology already replaces the mainloop seam"
#endif
#define ABLATE_SEAM_MAINLOOP CpAsyncMainloop
#endif
