"""Stage 3 — quantize: post-training quantization of a float model to QDQ (per-channel int8 weights,
per-tensor activations, 16-bit LSTM cell state) with min/max, percentile or entropy calibration.
"""

from .ptq import QuantReport, quantize
