// no_launch_bounds (conf/generic/pathology/no_launch_bounds.yaml): `__launch_bounds__(...)`
// is gone from every kernel of the translation unit, so ptxas allocates registers without
// the kernel's promise of its block size and blocks per SM.
#pragma once
#include <ablate/generic/prelude.cuh>
#undef __launch_bounds__
#define __launch_bounds__(...)
