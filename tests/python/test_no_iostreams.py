"""The library and the extension format no message through an iostream.

On the GPU machine the extension (_C.so) is linked with its own copy of libstdc++ while torch
uses the system's; formatting into a std::ostringstream inside _C.so (directly, or through
torch's header-inline c10::str / TORCH_CHECK / TORCH_WARN) crashed the process with SIGSEGV
instead of raising the error being built (docs/cuda.md, "The extension's C++ runtime"). Every
message is built with std::string and std::to_string; this test keeps it so in the code that
goes into the extension (include/, src/, bindings/).
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, gpu_problem

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(r"c10::str\(|TORCH_CHECK|TORCH_WARN|TORCH_INTERNAL_ASSERT|AT_ERROR|ostringstream|"
                       r"stringstream|#include <(sstream|iostream|ostream)>|std::(cout|cerr|clog)\b|operator<<\(std::ostream")


def test_no_source_of_the_extension_formats_through_an_iostream():
    found = []
    for folder in ("include", "src", "bindings"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in {".hpp", ".cpp", ".cu", ".cuh", ".h"}:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("//", 1)[0]
                if FORBIDDEN.search(code):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "iostream formatting in the extension's sources:\n" + "\n".join(found)


# The messages that were built through an iostream before, raised on every device (on the GPU
# machine each of these crashed the process).

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU_TEST)])
def test_messages_once_built_through_an_iostream_are_raised(device):
    p = gpu_problem(P=2, T=5, W=2, R=2, hd=4, slots_per_stream=8).to(device)
    v = p.v.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="sdm.write_read_ updates memory in place .* v requires grad"):
        sdm.write_read_(p.memory, p.k_idx, p.k_val, v, p.beta, p.g, p.q_idx, p.q_val, slots_per_stream=8)
    slots = torch.zeros(3, 2, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match=r"grad_values must have slots' shape \[3, 2\], got \[3, 1\]"):
        torch.ops.sdm.product_key_topk_backward(slots, torch.ones(3, 1, device=device), [4, 4])
    with pytest.raises(ValueError, match=r"k_idx must be 3-D \[P, T, W\], got shape \[1, 2, 5, 2\]"):
        sdm.write_read_(p.memory, p.k_idx.unsqueeze(0), p.k_val, p.v, p.beta, p.g, p.q_idx, p.q_val,
                        slots_per_stream=8)
