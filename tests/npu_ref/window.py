"""Which input element each tap of a window reads (docs/npu.md section 4, "Tiling"), for CONV2D and POOL.

Output row `r`, column `q`, tap `(i, j)` reads input row `r*stride_h + i*dil_h - pad_top` and column
`q*stride_w + j*dil_w - pad_left`; a tap outside the input (the padding before the tile, or at or past
`in_h` / `in_w`) is skipped.
"""


def out_size(n, k, stride, dil, pad_lo, pad_hi):
    """Outputs along one axis of a window of `k` taps, `dil` apart, over `n` inputs padded by `pad_lo`
    before and `pad_hi` after."""
    return (n + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def _inside(n_out, stride, offset, n_in):
    """(outputs, inputs) as slices: the outputs r whose tap reads input r * stride + offset inside
    [0, n_in), and those inputs."""
    lo = max(0, -(offset // stride))
    hi = min(n_out, (n_in - 1 - offset) // stride + 1)
    if hi <= lo:
        return slice(0, 0), slice(0, 0)
    return slice(lo, hi), slice(lo * stride + offset, (hi - 1) * stride + offset + 1, stride)


def taps(in_hw, kh, kw, out_hw, stride=(1, 1), dil=(1, 1), pad=(0, 0)):
    """For each tap (i, j) of a window over an [N, H, W, ...] input with H, W = `in_hw`, in the order kernel
    row then kernel column: (i, j, at, src), where x[src] are the input elements the tap reads inside the
    input and y[at] the outputs [N, OH, OW, ...] they belong to. Outputs whose tap falls in the padding are
    not in `at`: the tap is skipped for them."""
    for i in range(kh):
        rows_out, rows_in = _inside(out_hw[0], stride[0], i * dil[0] - pad[0], in_hw[0])
        for j in range(kw):
            cols_out, cols_in = _inside(out_hw[1], stride[1], j * dil[1] - pad[1], in_hw[1])
            yield i, j, (slice(None), rows_out, cols_out), (slice(None), rows_in, cols_in)
