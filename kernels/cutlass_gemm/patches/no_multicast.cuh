// no_multicast: the large configuration's cluster 2x1 -> 1x1: each block loads its own B tile,
// where a 2x1 cluster's pair of blocks (neighbours along M, the same columns of B) received it
// once from L2 by TMA multicast.
#pragma once
#ifdef ABLATE_NO_MULTICAST
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_CLUSTER
#error "no_multicast: another pathology already replaces the cluster seam"
#endif
#define ABLATE_SEAM_CLUSTER Cluster1x1
#endif
