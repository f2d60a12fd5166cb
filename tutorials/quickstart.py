"""Quickstart: compile an ONNX model for the NPU with a plain TVM script.

Run: python tutorials/quickstart.py
"""

# Step 1: an ONNX model. This one is built in code with seeded weights (no downloads);
# with a real model, use onnx.load("model.onnx").
import numpy as np
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.models import small_cnn
from tvm_npu.partition.report import short_name

model = small_cnn(seed=0)

# Step 2: import it into Relax. Weights become constants the NPU compiler can re-lay out.
mod = tvm_npu.from_onnx(model)

# Step 3: compile. `import tvm` has registered the "npu" target and pipeline.
ex = tvm.compile(mod, target="npu", relax_pipeline="npu")

# Step 4: run. NPU regions execute on the reference NPU, the rest on the CPU.
x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32")
vm = relax.VirtualMachine(ex, tvm.cpu())
probs = vm["main"](tvm.runtime.tensor(x)).numpy()
print("top class:", int(probs.argmax()), "p =", float(probs.max()))

# Step 5: where did it run, and how long did the NPU take? Build again with a report.
report = tvm_npu.BuildReport()
tvm_npu.build(mod, target="npu", report=report)
print(report.table())
for module in tvm_npu.runtime.npu_modules(vm):
    name = short_name(module["get_symbol"]())  # TVM's name lists every fused op; the report's JSON has it whole
    print(name, tvm_npu.runtime.profile_of(module)["last"]["total_cycles"], "cycles")
