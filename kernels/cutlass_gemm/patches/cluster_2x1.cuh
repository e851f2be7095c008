// cluster_2x1: the large configuration's blocks, unclustered in the base, in 2x1 clusters:
// a pair of blocks on vertically adjacent tiles (the same columns of B) is placed on two SMs
// of one GPC at once, and each B tile reaches both through one TMA load with a multicast mask.
#pragma once
#ifdef ABLATE_CLUSTER_2X1
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_CLUSTER
#error "cluster_2x1: another pathology already replaces the cluster seam"
#endif
#define ABLATE_SEAM_CLUSTER Cluster2x1
#endif
