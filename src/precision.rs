//! The arithmetic a convolution may use.

use std::fmt;
use std::str::FromStr;

use crate::error::ConvtError;

/// How exactly a convolution is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Exact f32 (the default): f32 products and sums, relative L2 error around 1e-7 as cuDNN's fp32.
    #[default]
    F32,
    /// The fastest kernel whose error stays within 1e-3 relative L2: f16 operands (each tensor scaled by a power
    /// of two so that its values fit f16's range) with f32 accumulation, on tensor cores (cooperative
    /// matrices) or on the FMA units (`SHADER_F16`), or an exact kernel where that measured faster (see
    /// [`crate::gpu::select`]). With f16 operands the error is around 3e-4, as PyTorch's TF32 and fp16.
    Fast,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Fast => "fast",
        })
    }
}

impl FromStr for Precision {
    type Err = ConvtError;
    fn from_str(s: &str) -> Result<Self, ConvtError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "exact" => Ok(Precision::F32),
            "fast" => Ok(Precision::Fast),
            _ => Err(ConvtError::InvalidArgument(format!("precision must be `f32` or `fast`, got `{s}`"))),
        }
    }
}
