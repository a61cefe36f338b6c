"""torch's kernels that no public name leads to, refused by the checks of chapters 2 and 3. A
forbidden ``torch.X`` already refuses ``torch.ops.aten.X``, ``torch._X`` and the rest of torch's
other names for it (``core._aliases``); these are the kernels named otherwise."""

import torch

SOFTMAX_KERNELS = ("torch._safe_softmax",) if hasattr(torch, "_safe_softmax") else ()
ATEN_ATTENTION = tuple(f"torch.ops.aten.{n}" for n in (
    "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math_for_mps", "_native_multi_head_attention")
    if hasattr(torch.ops.aten, n))
