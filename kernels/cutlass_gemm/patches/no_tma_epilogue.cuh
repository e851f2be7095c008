// no_tma_epilogue: the epilogue writes the accumulators from registers straight to global
// memory (no shared-memory staging, no TMA store), as CUTLASS's NoSmemWarpSpecialized epilogue
// does.
#pragma once
#ifdef ABLATE_NO_TMA_EPILOGUE
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_EPILOGUE
#error "no_tma_epilogue: another pathology already replaces the epilogue seam"
#endif
#define ABLATE_SEAM_EPILOGUE DirectEpilogue
#endif
