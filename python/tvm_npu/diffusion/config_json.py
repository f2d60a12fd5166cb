"""The JSON files of a Stable Diffusion folder (model_index.json, each part's config.json, the
tokenizer's files), read with the one coded error a user can act on."""

from __future__ import annotations

import json

from ..contract.errors import NPUError


def read_json(path: str) -> dict:
    """The JSON object in `path`; ERR_INVALID_MODEL naming the file when it is unreadable, not JSON,
    or not an object."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise NPUError("ERR_INVALID_MODEL", f"{path}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise NPUError("ERR_INVALID_MODEL", f"{path}: expected a JSON object")
    return data
