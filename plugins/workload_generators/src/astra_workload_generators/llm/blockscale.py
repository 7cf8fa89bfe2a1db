"""Block-scaled GEMM formats (``--gemm-dtype fp4 | mxfp8 | mxfp6 | mxfp4``): narrow elements sharing one 8-bit scale per
block of consecutive elements along K, which the tensor cores apply inside the GEMM (Blackwell, AMD CDNA 4).

- ``fp4`` = NVFP4: E2M1 elements, one FP8 E4M3 scale per 16-value micro-block, plus one FP32 scale per tensor
  (NVIDIA developer blog, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", June 2025,
  https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/);
- ``mxfp8`` / ``mxfp4``: E4M3 / E2M1 elements, one E8M0 (power-of-two) scale per block of 32 (OCP Microscaling
  Formats (MX) Specification v1.0, September 2023; Transformer Engine's MXFP8 page: "one scaling factor per 32
  consecutive values", E8M0);
- ``mxfp6``: 6-bit elements (the MX spec's FP6 E2M3; its E3M2 variant costs the same), one E8M0 scale per 32.
  PyTorch has no FP6 dtype, so the trace names the operand ``float6_e2m3fn_x4``: four elements packed in three
  bytes along K (``[m, k]`` is ``[m, k/4]`` units of 3 bytes), 6 bits stored per element.

A trace names them as PyTorch does: ``aten::_scaled_mm`` with ``Float4_e2m1fn_x2`` operands (two E2M1 elements per
byte, so a ``[m, k]`` operand is ``[m, k/2]``) or ``Float8_e4m3fn`` ones, and ``Float8_e4m3fn`` (NVFP4) or
``Float8_e8m0fnu`` (MX) scales ``[rows, k/block]``. The gpu model reads the format back from those types."""

from __future__ import annotations

from dataclasses import dataclass

FP4X2 = "Tensor(c10::Float4_e2m1fn_x2)"
FP6X4 = "Tensor(float6_e2m3fn_x4)"  # (not a PyTorch type: four E2M3 elements in 3 bytes; the gpu model reads it)
E4M3 = "Tensor(c10::Float8_e4m3fn)"
E8M0 = "Tensor(c10::Float8_e8m0fnu)"


@dataclass(frozen=True)
class BlockFormat:
    """One block-scaled operand format: its element type, scale type, elements per scale and element bits."""

    name: str           # the gpu model's dtype name (the trace's compute_dtype)
    element_type: str
    scale_type: str
    block: int          # consecutive elements along K sharing one 1-byte scale
    element_bits: int   # 4 (two elements per byte, packed along K), 6 (four in three bytes) or 8

    @property
    def packing(self):
        """Elements per stored unit along K: 2 for E2M1 pairs, 4 for FP6 (three bytes), 1 for FP8."""
        return {4: 2, 6: 4, 8: 1}[self.element_bits]

    def nbytes(self, rows, cols):
        """Bytes of a ``rows x cols`` operand quantized along ``cols``: the elements and one scale byte per block."""
        return -(-rows * cols * self.element_bits // 8) + rows * -(-cols // self.block)

    def bytes_per_element(self):
        """``(numerator, denominator)`` of the bytes one element costs with its share of a scale (exact)."""
        return self.element_bits * self.block + 8, 8 * self.block


#: --gemm-dtype value -> its format
FORMATS = {
    "fp4": BlockFormat("nvfp4", FP4X2, E4M3, 16, 4),
    "mxfp8": BlockFormat("mxfp8", E4M3, E8M0, 32, 8),
    "mxfp6": BlockFormat("mxfp6", FP6X4, E8M0, 32, 6),
    "mxfp4": BlockFormat("mxfp4", FP4X2, E8M0, 32, 4),
}


def block_format(cfg):
    """The run's block-scaled format, or None (``--gemm-dtype same`` or ``fp8``)."""
    return FORMATS.get(cfg.gemm_dtype)


#: an FP8 checkpoint's weights in inference (--gemm-dtype fp8 --fp8-params): E4M3 elements and one FP32
#: dequantization scale per 128x128 block, as DeepSeek-V3 ships them (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md:
#: "DeepSeek-V3 natively supports FP8 weight format with 128x128 block scaling", weight_scale_inv a "float32 Tensor";
#: its config.json's quantization_config: fmt e4m3, weight_block_size [128, 128])
FP8_WEIGHT_BLOCK = 128 * 128
FP8_WEIGHT_SCALE_BYTES = 4


def fp8_checkpoint_weight_bytes(params):
    """Bytes of ``params`` weights of an FP8 checkpoint: one byte each and an FP32 scale per 128x128 block (the
    blocks counted over the total, not matrix by matrix: a partial block's padding is left out)."""
    return params + FP8_WEIGHT_SCALE_BYTES * -(-params // FP8_WEIGHT_BLOCK)


def low_precision_weight_bytes(fmt, params):
    """Bytes of ``params`` weights held in ``fmt`` (elements and scales), rounded up."""
    num, den = fmt.bytes_per_element()
    return -(-params * num // den)


__all__ = ["BlockFormat", "FORMATS", "FP8_WEIGHT_BLOCK", "FP8_WEIGHT_SCALE_BYTES", "block_format",
           "fp8_checkpoint_weight_bytes", "low_precision_weight_bytes"]
