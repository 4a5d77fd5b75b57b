"""Kernel smoke for flash-attn: forward and backward (causal and not) against torch's
scaled_dot_product_attention in fp16. Exit 0 = pass, 77 = skipped, else fail."""

import sys

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)
major, minor = torch.cuda.get_device_capability()
if major < 8:
    print(f"skipped: flash-attn 2 needs sm_80 or newer, this GPU is sm_{major}{minor}")
    sys.exit(77)

from flash_attn import flash_attn_func  # noqa: E402

gen = torch.Generator(device="cuda").manual_seed(0)
shape = (2, 257, 4, 64)                                 # batch, seqlen, heads, head dim
for causal in (False, True):
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, generator=gen)
               .requires_grad_(True) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=causal)
    grad = torch.randn_like(out)
    out.backward(grad)
    got = [out, q.grad, k.grad, v.grad]

    q2, k2, v2 = (t.detach().float().transpose(1, 2).requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q2, k2, v2, is_causal=causal)
    ref.backward(grad.float().transpose(1, 2))
    want = [ref.transpose(1, 2), q2.grad.transpose(1, 2), k2.grad.transpose(1, 2),
            v2.grad.transpose(1, 2)]
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(g.float(), w, rtol=2e-2, atol=2e-2,
                                   msg=f"{name} (causal={causal})")
print(f"pass: flash_attn_func forward+backward match SDPA on sm_{major}{minor}")
