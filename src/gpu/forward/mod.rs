//! The forward kernels, one module per algorithm, each with its shader(s) and launch code.

pub(crate) mod coop;
pub(crate) mod coop_nhwc;
pub(crate) mod coop_winograd;
pub(crate) mod direct;
pub(crate) mod gather;
pub(crate) mod gemm;
pub(crate) mod rows;
pub(crate) mod winograd;
