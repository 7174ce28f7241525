//! Host tensors: a shape and contiguous row-major (NCHW) f32 data, plus the error measures the tests and the
//! CLI use to compare results.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{ConvtError, Result};
use crate::params::checked_numel;

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl Tensor {
    /// A tensor of `shape` holding `data` in row-major order; the lengths must agree.
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<f32>) -> Result<Self> {
        let shape = shape.into();
        let expected = checked_numel(&shape)?;
        if data.len() != expected {
            return Err(ConvtError::DataLength { shape, expected, actual: data.len() });
        }
        Ok(Self { shape, data })
    }

    pub fn zeros(shape: impl Into<Vec<usize>>) -> Result<Self> {
        let shape = shape.into();
        let n = checked_numel(&shape)?;
        Ok(Self { shape, data: vec![0.0; n] })
    }

    /// Independent draws from U(low, high), reproducible from `seed`.
    pub fn uniform(shape: impl Into<Vec<usize>>, low: f32, high: f32, seed: u64) -> Result<Self> {
        let shape = shape.into();
        let n = checked_numel(&shape)?;
        let mut rng = StdRng::seed_from_u64(seed);
        let data = (0..n).map(|_| rng.random_range(low..high)).collect();
        Ok(Self { shape, data })
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn data(&self) -> &[f32] {
        &self.data
    }
    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }
    pub fn into_data(self) -> Vec<f32> {
        self.data
    }
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The same data under another shape of the same number of elements.
    pub fn reshape(self, shape: impl Into<Vec<usize>>) -> Result<Self> {
        Self::new(shape, self.data)
    }
}

/// How far a result is from a reference: the measures `convt verify` prints and the tests assert.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// ||result - reference||_2 / ||reference||_2 (the absolute L2 error when the reference is all zeros).
    pub rel_l2: f64,
    pub max_abs: f64,
    /// Elements of the result that are NaN or infinite where the reference is finite (unwritten or broken).
    pub non_finite: usize,
    pub compared: usize,
}

impl ErrorStats {
    /// Compares `result` with a float64 `reference` of the same length.
    pub fn compare(result: &[f32], reference: &[f64]) -> Self {
        assert_eq!(result.len(), reference.len(), "compare needs equal lengths");
        let (mut diff2, mut ref2, mut max_abs, mut non_finite) = (0f64, 0f64, 0f64, 0usize);
        for (&r, &e) in result.iter().zip(reference) {
            let r = r as f64;
            if !r.is_finite() && e.is_finite() {
                non_finite += 1;
                continue;
            }
            let d = r - e;
            diff2 += d * d;
            ref2 += e * e;
            max_abs = max_abs.max(d.abs());
        }
        let rel_l2 = if non_finite > 0 {
            f64::INFINITY
        } else if ref2 > 0.0 {
            (diff2 / ref2).sqrt()
        } else {
            diff2.sqrt()
        };
        Self {
            rel_l2,
            max_abs: if non_finite > 0 { f64::INFINITY } else { max_abs },
            non_finite,
            compared: result.len(),
        }
    }
}
