// no_swizzle: the large configuration's persistent tile scheduler walks the output tiles row
// by row (raster along N, swizzle 1) instead of in swizzled groups of up to 8 along the
// shorter side (base/seams.cuh: Fitted).
#pragma once
#ifdef ABLATE_NO_SWIZZLE
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_RASTER
#error "no_swizzle: another pathology already replaces the raster seam"
#endif
#define ABLATE_SEAM_RASTER RowByRow
#endif
