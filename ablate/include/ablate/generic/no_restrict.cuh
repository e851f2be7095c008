// no_restrict (conf/generic/pathology/no_restrict.yaml): `__restrict__` means nothing for the
// whole translation unit, so the compiler may no longer assume that the kernel's pointers do
// not alias: no read-only (non-coherent, LDG.CONSTANT) loads, loads kept after stores.
#pragma once
#include <ablate/generic/prelude.cuh>
#undef __restrict__
#define __restrict__
