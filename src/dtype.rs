//! The element types of tensors: f32, and the half-precision f16 and bf16 that PyTorch's mixed precision runs in.

use std::fmt;
use std::str::FromStr;

use crate::error::ConvtError;

/// How a tensor's elements are stored, in files and on the GPU (`torch.float32`, `torch.float16`,
/// `torch.bfloat16`). Host [`crate::Tensor`]s hold their values as f32 whatever their dtype (every f16 and bf16
/// value is an f32): the dtype says which values they may take and how they are stored.
///
/// The arithmetic is the [`crate::Precision`]'s: products of half-precision operands are exact in f32, sums are
/// f32 in every kernel, and a result is rounded to its dtype once, when it is stored (round to nearest even), as
/// PyTorch's half-precision convolutions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary32, `torch.float32` (the default): 24 significant bits.
    #[default]
    F32,
    /// IEEE binary16: 11 significant bits, largest finite value 65504.
    F16,
    /// bfloat16: f32's range with 8 significant bits.
    BF16,
}

impl DType {
    /// Every dtype, in this order.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// `value` rounded to this dtype (to nearest, ties to even; beyond f16's range, infinity), as an f32.
    pub fn round(self, value: f32) -> f32 {
        match self {
            DType::F32 => value,
            DType::F16 => half::f16::from_f32(value).to_f32(),
            DType::BF16 => half::bf16::from_f32(value).to_f32(),
        }
    }

    /// `values` in this dtype's little-endian bytes, each rounded as [`DType::round`] does.
    pub fn encode(self, values: &[f32], out: &mut Vec<u8>) {
        match self {
            DType::F32 => out.extend(values.iter().flat_map(|v| v.to_le_bytes())),
            DType::F16 => out.extend(values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes())),
            DType::BF16 => out.extend(values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())),
        }
    }

    /// The values of little-endian `bytes` of this dtype (a whole number of elements) into `out`, one per
    /// element.
    pub fn decode(self, bytes: &[u8], out: &mut [f32]) {
        match self {
            DType::F32 => out
                .iter_mut()
                .zip(bytes.chunks_exact(4))
                .for_each(|(o, b)| *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::F16 => out
                .iter_mut()
                .zip(bytes.chunks_exact(2))
                .for_each(|(o, b)| *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
            DType::BF16 => out
                .iter_mut()
                .zip(bytes.chunks_exact(2))
                .for_each(|(o, b)| *o = half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        })
    }
}

impl FromStr for DType {
    type Err = ConvtError;
    fn from_str(s: &str) -> Result<Self, ConvtError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" | "float" => Ok(DType::F32),
            "f16" | "float16" | "half" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            _ => Err(ConvtError::InvalidArgument(format!("dtype must be `f32`, `f16` or `bf16`, got `{s}`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_bytes_agree() {
        let values = [0.0f32, -1.5, 1.0 + 1.0 / 4096.0, 3.0e-8, 70000.0, f32::NAN, 1.0e30];
        for dtype in DType::ALL {
            let mut bytes = Vec::new();
            dtype.encode(&values, &mut bytes);
            assert_eq!(bytes.len(), values.len() * dtype.size());
            let mut back = vec![0f32; values.len()];
            dtype.decode(&bytes, &mut back);
            for (v, b) in values.iter().zip(&back) {
                let r = dtype.round(*v);
                assert!(r.to_bits() == b.to_bits() || (r.is_nan() && b.is_nan()), "{dtype}: {v} -> {b}, round {r}");
            }
        }
        assert_eq!(DType::F16.round(70000.0), f32::INFINITY);
        assert_eq!(DType::BF16.round(1.0e30), half::bf16::from_f32(1.0e30).to_f32());
        assert_eq!(DType::F16.round(1.0 + 1.0 / 4096.0), 1.0); // a tie, to even
        assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::BF16);
        assert!("f64".parse::<DType>().is_err());
    }
}
