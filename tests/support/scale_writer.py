"""A scripted LLM for tasks that scale a vector (``return x * SCALE``): the kernel it writes, and its
replies, shared by the tests that seed tasks through an LLM and those that benchmark one."""
import re

from tests.support.llm_server import completion

KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 256
NUM_WARPS = 4


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * SCALE, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return out
'''


def scale_writer(request: dict):
    """For a seed prompt, the kernel of the reference's scale, except for x * 5.0 (a wrong kernel);
    a repair gets a reply without code; a mutation the parent with another NUM_WARPS."""
    prompt = request["messages"][-1]["content"]
    if "No kernel exists yet" in prompt:
        scale = re.search(r"return x \* ([\d.]+)", prompt).group(1)
        return 200, completion("```python\n" + KERNEL.replace("SCALE", "2.0" if scale == "5.0" else scale) + "```")
    if "failed its evaluation" in prompt:
        return 200, completion("I cannot fix this one.")
    match = re.search(r"## Current kernel.*?```python\n(.*?)```", prompt, re.DOTALL)
    if match is None:  # the start-up check
        return 200, completion("OK")
    warps = 2 if "NUM_WARPS = 4" in match.group(1) else 4
    return 200, completion("```python\n" + re.sub(r"NUM_WARPS = \d+", f"NUM_WARPS = {warps}", match.group(1)) + "```")
