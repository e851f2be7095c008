// noop (test only): replaces no seam, so the device code is the base's exactly.
#pragma once
