// unfingerprinted (test only): the extra_syncthreads patch under another name.
#pragma once
#ifdef ABLATE_UNFINGERPRINTED
#define ABLATE_EXTRA_SYNCTHREADS 1
#include "patches/extra_syncthreads.cuh"
#endif
