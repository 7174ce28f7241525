//! The forward kernels, one module per algorithm, each with its shader(s) and launch code.

pub mod coop;
pub mod coop_nhwc;
pub mod direct;
pub(crate) mod gather;
pub mod gemm;
pub mod rows;
pub mod winograd;
