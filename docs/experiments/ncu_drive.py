"""Run one variant's kernel a few times on s4k (B2 H16 S4096 D64) for ncu to profile."""
import ctypes, math, sys
import torch
lib = ctypes.CDLL(sys.argv[1])
B, H, S, D = 2, 16, 4096, 64
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.half) for _ in range(3))
o = torch.empty_like(q)
for _ in range(3):
    err = lib.ablate_attention_fwd(ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(k.data_ptr()),
                                   ctypes.c_void_p(v.data_ptr()), ctypes.c_void_p(o.data_ptr()),
                                   B, H, S, D, 0, ctypes.c_float(1 / math.sqrt(D)), None)
    assert err == 0, err
torch.cuda.synchronize()
