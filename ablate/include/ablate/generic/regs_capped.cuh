// regs_capped (conf/generic/pathology/regs_capped.yaml): the kernel's registers capped at
// ABLATE_REGS_CAP (a fraction of the base's own count, ablate/build/compile.py), which also
// reaches nvcc as -maxrregcount. ptxas ignores -maxrregcount for a kernel with
// __launch_bounds__, so those are turned into __maxnreg__(ABLATE_REGS_CAP) (the two cannot be
// combined on one kernel): the cap holds for every kernel of the translation unit.
#pragma once
#include <ablate/generic/prelude.cuh>
#ifndef ABLATE_REGS_CAP
#error "regs_capped: ABLATE_REGS_CAP is set by ablate from the base's register count"
#endif
#undef __launch_bounds__
#define __launch_bounds__(...) __maxnreg__(ABLATE_REGS_CAP)
