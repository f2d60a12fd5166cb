"""The C++ runtime library (src/runtime, the reference NPU) seen from Python: loading it, wrapping
command streams in runtime modules of kind "npu", exporting and loading artifacts (sealed with an
integrity trailer), calling them through one checked boundary (`Model`, boundary.py), kernel levels
and threads, per-module profiles.
"""

from .artifact import export_library
from .boundary import Model, check_arguments, signature
from .library import (
    best_kernel_level,
    clamped_inputs,
    constant_weight_commands,
    create_module,
    kernel_level,
    library_path,
    load_library,
    load_module,
    npu_modules,
    profile_of,
    resident_loads,
    saturated_inputs,
    set_kernel_level,
    set_threads,
    set_weight_sharing,
    threads,
    validate_stream,
    weight_pool,
    weight_sharing,
    weights_memory,
)
