"""Block-scaled GEMM formats (``--gemm-dtype fp4 | mxfp8 | mxfp4``): narrow elements sharing one 8-bit scale per
block of consecutive elements along K, which the tensor cores apply inside the GEMM (Blackwell, AMD CDNA 4).

- ``fp4`` = NVFP4: E2M1 elements, one FP8 E4M3 scale per 16-value micro-block, plus one FP32 scale per tensor
  (NVIDIA developer blog, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", June 2025,
  https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/);
- ``mxfp8`` / ``mxfp4``: E4M3 / E2M1 elements, one E8M0 (power-of-two) scale per block of 32 (OCP Microscaling
  Formats (MX) Specification v1.0, September 2023; Transformer Engine's MXFP8 page: "one scaling factor per 32
  consecutive values", E8M0).

A trace names them as PyTorch does: ``aten::_scaled_mm`` with ``Float4_e2m1fn_x2`` operands (two E2M1 elements per
byte, so a ``[m, k]`` operand is ``[m, k/2]``) or ``Float8_e4m3fn`` ones, and ``Float8_e4m3fn`` (NVFP4) or
``Float8_e8m0fnu`` (MX) scales ``[rows, k/block]``. The gpu model reads the format back from those types."""

from __future__ import annotations

from dataclasses import dataclass

FP4X2 = "Tensor(c10::Float4_e2m1fn_x2)"
E4M3 = "Tensor(c10::Float8_e4m3fn)"
E8M0 = "Tensor(c10::Float8_e8m0fnu)"


@dataclass(frozen=True)
class BlockFormat:
    """One block-scaled operand format: its element type, scale type, elements per scale and element bits."""

    name: str           # the gpu model's dtype name (the trace's compute_dtype)
    element_type: str
    scale_type: str
    block: int          # consecutive elements along K sharing one 1-byte scale
    element_bits: int   # 4 (two elements per byte, packed along K) or 8

    @property
    def packing(self):
        """Elements per stored element: 2 for E2M1 pairs, else 1."""
        return 8 // self.element_bits

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
    "mxfp4": BlockFormat("mxfp4", FP4X2, E8M0, 32, 4),
}


def block_format(cfg):
    """The run's block-scaled format, or None (``--gemm-dtype same`` or ``fp8``)."""
    return FORMATS.get(cfg.gemm_dtype)


def low_precision_weight_bytes(fmt, params):
    """Bytes of ``params`` weights held in ``fmt`` (elements and scales), rounded up."""
    num, den = fmt.bytes_per_element()
    return -(-params * num // den)


__all__ = ["BlockFormat", "FORMATS", "block_format", "low_precision_weight_bytes"]
