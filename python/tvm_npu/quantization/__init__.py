"""Stage 3 — quantize: post-training quantization of a float model to QDQ (per-channel int8 weights,
per-tensor activations, 16-bit LSTM cell state) with min/max, percentile or entropy calibration; and
weight-only int8 (W8A16) of dense layers, no calibration (weight_only.py).
"""

from .ptq import QuantReport, quantize
from .weight_only import quantize_weights_int8
