// no_forceinline (conf/generic/pathology/no_forceinline.yaml): every `__forceinline__`
// function of the kernel's own code is `__noinline__` instead: a call (arguments through
// registers and the ABI's stack, no optimization across the call) where there was inlined
// code. CUDA's headers of prelude.cuh keep theirs.
#pragma once
#include <ablate/generic/prelude.cuh>
#undef __forceinline__
#define __forceinline__ __noinline__
