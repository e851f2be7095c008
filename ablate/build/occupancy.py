"""Theoretical occupancy: how many blocks and warps of a kernel fit on one SM.

Follows the CUDA occupancy calculator's rules (cuda_occupancy.h): registers are allocated
per warp in units of 256 and split over the SM's 4 sub-partitions; shared memory per block
is static + dynamic + the driver's reserved 1 KB, rounded up to 128 bytes, out of the whole
shared memory of the SM (the driver picks the largest carveout the kernel needs).
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    max_warps: int  # resident warps per SM
    max_blocks: int  # resident blocks per SM
    smem_per_sm: int  # bytes, at the largest carveout
    smem_per_block: int  # bytes a block may opt in to (without the reserved part)
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_granularity: int = 256  # registers per warp are allocated in these units
    sub_partitions: int = 4
    smem_granularity: int = 128
    smem_reserved: int = 1024  # per block, by the driver (sm_80 and later)
    max_threads_per_block: int = 1024


# CUDA C Programming Guide, "Technical Specifications per Compute Capability".
ARCHS = {
    "sm_80": Arch(max_warps=64, max_blocks=32, smem_per_sm=164 * 1024, smem_per_block=163 * 1024),
    "sm_86": Arch(max_warps=48, max_blocks=16, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
    "sm_89": Arch(max_warps=48, max_blocks=24, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
    "sm_90": Arch(max_warps=64, max_blocks=32, smem_per_sm=228 * 1024, smem_per_block=227 * 1024),
}


def arch_limits(arch: str) -> Arch:
    """The limits of `arch` ("sm_90", "sm_90a", ...); ValueError for an arch not in ARCHS."""
    key = arch[:-1] if arch.endswith("a") else arch
    if key not in ARCHS:
        raise ValueError(f"no occupancy limits for arch {arch!r}; known: {sorted(ARCHS)}")
    return ARCHS[key]


def occupancy(arch: str, threads: int, regs: int, smem_bytes: int) -> dict:
    """Blocks and warps per SM for blocks of `threads` threads using `regs` registers per
    thread and `smem_bytes` of shared memory (static + dynamic). Returns `{"blocks",
    "warps", "fraction" (warps / max warps), "limited_by"}`; 0 blocks when one block alone
    does not fit."""
    a = arch_limits(arch)
    if threads < 1 or regs < 0 or smem_bytes < 0:
        raise ValueError(f"occupancy needs threads >= 1, regs >= 0, smem >= 0; got "
                         f"threads={threads}, regs={regs}, smem_bytes={smem_bytes}")
    warps_per_block = _ceil_div(threads, 32)

    by_warps = a.max_warps // warps_per_block if threads <= a.max_threads_per_block else 0

    regs_per_warp = _round_up(regs * 32, a.reg_granularity)
    # The hardware checks a block's registers as if its warps filled every sub-partition.
    regs_checked = regs_per_warp * _round_up(warps_per_block, a.sub_partitions)
    if regs > a.max_regs_per_thread or regs_checked > a.regs_per_block:
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = a.max_blocks
    else:
        warps_per_sub = (a.regs_per_sm // a.sub_partitions) // regs_per_warp
        by_regs = warps_per_sub * a.sub_partitions // warps_per_block

    smem = _round_up(smem_bytes + a.smem_reserved, a.smem_granularity)
    if smem > a.smem_per_block + a.smem_reserved:
        by_smem = 0
    else:
        by_smem = a.smem_per_sm // smem

    # On a tie the first named is reported as the limit.
    limits = {"registers": by_regs, "shared_memory": by_smem, "warps": by_warps,
              "blocks": a.max_blocks}
    blocks = min(limits.values())
    return {
        "blocks": blocks,
        "warps": blocks * warps_per_block,
        "fraction": blocks * warps_per_block / a.max_warps,
        "limited_by": min(limits, key=limits.get),
    }


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b
