"""Stage 1 — import: models in the formats users have become Relax modules with their weights as
constants. ONNX through TVM's own frontend, plus what it lacks: QOperator models (QLinearConv,
QLinearMatMul) rewritten to QDQ, and LSTM unrolled. A decoder-with-past export (Hugging Face GPT-2,
Llama) becomes the LLM step model with a static KV cache (`to_step_model`).
"""

from .decoder import to_step_model
from .onnx import from_onnx
from .qlinear import qoperator_to_qdq
