"""ablate: intentional-slowdown experiments on GPU kernels."""
