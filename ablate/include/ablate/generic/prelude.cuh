// The CUDA headers a kernel commonly includes, included first by every generic pathology's
// header (conf/generic/), so that their text is read before a keyword is redefined: the
// redefinition then reaches the kernel's own code, not CUDA's (whose include guards keep
// them from being read again). A CUDA header the kernel includes beyond these sees the
// redefinition too.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <mma.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
