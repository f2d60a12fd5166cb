"""Stage 4a'' — recurrent state: the tensors an unrolled recurrence carries from one step to the next.

An unrolled RNN / LSTM applies the same recurrent weight once per time step. Numbering every layer by
how many of those applications lie on its longest path from the region's inputs gives its time step; a
tensor produced at step t >= 1 and read at a later step is state carried across a step boundary (an
LSTM's h and c). The planner pins such tensors in SRAM for their whole life (sram.place_residents with
`required`), so a recurrent edge never goes through DDR; when they cannot fit, the build fails with
ERR_SRAM_OVERFLOW naming the state, instead of spilling it.
"""

from __future__ import annotations

from ..lower.graph import Graph


def recurrent_weights(graph: Graph) -> set:
    """Names of the layers whose weight another layer of the region applies too (byte-identical)."""
    seen: dict = {}
    for layer in graph.layers:
        if layer.kind == "conv":
            seen.setdefault((layer.weight.shape, layer.weight.tobytes()), []).append(layer.name)
    return {name for names in seen.values() if len(names) > 1 for name in names}


def state_tensors(graph: Graph) -> set:
    """The tensors carried across a step boundary of an unrolled recurrence (see the module docstring)."""
    shared = recurrent_weights(graph)
    if not shared:
        return set()
    step_of_tensor: dict = {}
    produced_at: dict = {}
    for layer in graph.layers:
        step = max((step_of_tensor.get(t, 0) for t in layer.inputs), default=0)
        step += layer.name in shared
        step_of_tensor[layer.out] = step
        if layer.kind not in ("view", "concat"):
            produced_at[layer.out] = step
    state = set()
    for layer in graph.layers:
        here = step_of_tensor[layer.out]
        for t in layer.inputs:
            if produced_at.get(t, 0) >= 1 and here > produced_at[t]:
                state.add(t)
    return state
