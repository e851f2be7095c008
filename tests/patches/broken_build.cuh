// broken_build (test only): stops the compile, so the build of this variant fails.
#pragma once
#ifdef ABLATE_BROKEN_BUILD
#error "broken_build: this test-only pathology never compiles"
#endif
