"""The tiny diffusers UNet split at encoder_hidden_states (ir/split_invariant.py): every dense layer on
the text embedding (the cross-attention's to_k / to_v, counted from the shapes) moves to `prompt`, and
`prompt` then `main` give the unsplit UNet's result bit for bit on TVM's llvm build."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_npu.build import cpu_pipeline
from tvm_npu.frontend import diffusion as diffusion_import
from tvm_npu.ir.split_invariant import split_invariant

from .kv_macs import EHS, layers, macs


@pytest.fixture(scope="module")
def unet(diffusers_export):
    return diffusion_import.from_onnx(diffusers_export("unet", batch=2), batch=2, latent=8)


def test_the_split_unet_is_the_unets_result_bit_for_bit(unet):
    split, hoisted = split_invariant(unet, [EHS])
    kv = macs(unet["main"], EHS)
    assert kv > 0 and macs(split["main"], EHS) == 0  # no dense on the embedding left in a step
    assert macs(split["prompt"], EHS) == kv
    assert macs(split["main"]) + kv == macs(unet["main"])
    # one tensor per K / V dense (K^T scaled, V in heads); main no longer reads the embedding
    assert len(hoisted) == len(layers(unet["main"], EHS)) == 8
    assert EHS not in [p.name for p in split["main"].params]
    # one build of the unsplit main (as "whole") and the two functions: TVM's kernels are the same code
    # for the same ops, so this is the two builds' comparison at half the LLVM time
    whole = unet["main"].with_attr("global_symbol", "whole")
    both = tvm.IRModule({**dict(split.functions.items()), tvm.ir.GlobalVar("whole"): whole})
    vm = relax.VirtualMachine(tvm.compile(both, target="llvm", relax_pipeline=cpu_pipeline()), tvm.cpu())
    rng = np.random.default_rng(1)
    x = tvm.runtime.tensor(rng.standard_normal((2, 4, 8, 8)).astype(np.float32))
    t = tvm.runtime.tensor(np.full((2,), 321.0, np.float32))
    e = tvm.runtime.tensor(rng.standard_normal((2, 8, 32)).astype(np.float32))
    want = vm["whole"](x, t, e).numpy()
    kept = vm["prompt"](e)
    got = vm["main"](x, t, *kept).numpy()
    assert np.abs(want).max() > 0 and np.array_equal(got, want)
