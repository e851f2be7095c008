// The calibrations' header (conf/calibration/): one kernel more in the library, never
// launched. The binary differs from the base's (one more function in its SASS), while the
// work and the schedule of every launch are the base's, whatever the kernel.
#pragma once
#ifdef ABLATE_CALIBRATION_NULL
__global__ void ablate_calibration_null_kernel(int* never) { *never = 1; }
#endif
