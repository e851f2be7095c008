// dead_seam (test only): says it replaces the reduce seam, but its definition lies in a branch
// the preprocessor never takes, so the library it builds is the base's.
#pragma once
#ifdef ABLATE_DEAD_SEAM
#if 0
#define ABLATE_SEAM_REDUCE SharedTreeReduce
#endif
#endif
