//! Winograd transforms F(m, r) along one axis, for every kernel that transforms its operands (the fused Winograd
//! kernel today): Toom-Cook on the points 0, 1, -1, 2, -2, 1/2, -1/2, 3/4, -3/4 and infinity, with the WGSL of a
//! transform's linear combinations as straight-line code, its coefficients as literals.

/// The largest transform size per axis: the points 0, 1, -1, 2, -2, 1/2, -1/2, 3/4, -3/4 and infinity. The last
/// pair measured the least rounding of the pairs tried (+-3, 4, 1/3, 1/4, 3/2, 2/3, 4/3; 1.9-2.3e-6 on F(6, 5) and
/// F(4, 7) in the f32 simulation of the tests, 4-6e-6 with +-3 or +-4).
pub const MAX_ALPHA: usize = 10;
pub(crate) const POINTS: [f64; MAX_ALPHA - 1] = [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 0.75, -0.75];

/// One axis's Winograd transform F(m, r) for a correlation y[i] = sum_j d[i + j] g[j] (i < m, j < r):
/// y = AT [(G g) * (BT d)], with alpha = m + r - 1 points. Row-major matrices.
#[derive(Debug, Clone, PartialEq)]
pub struct Transform1d {
    pub m: usize,
    pub r: usize,
    pub alpha: usize,
    /// m x alpha: the output transform.
    pub at: Vec<f64>,
    /// alpha x r: the filter transform.
    pub g: Vec<f64>,
    /// alpha x alpha: the input transform.
    pub bt: Vec<f64>,
}

impl Transform1d {
    /// The points F(m, r) takes, m + r - 1, or None when that is more than [`MAX_ALPHA`] (or m or r is 0).
    pub fn alpha(m: usize, r: usize) -> Option<usize> {
        (m > 0 && r > 0).then(|| m + r - 1).filter(|&a| a <= MAX_ALPHA)
    }

    /// F(m, r), or None when it needs more than [`MAX_ALPHA`] points.
    pub fn new(m: usize, r: usize) -> Option<Transform1d> {
        let alpha = Self::alpha(m, r)?;
        let eye = |n: usize| (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect::<Vec<f64>>();
        if m == 1 || r == 1 {
            // No saving along this axis: the plain correlation, written as a transform (alpha = max(m, r)).
            let (at, g) = if r == 1 { (eye(m), vec![1.0; m]) } else { (vec![1.0; r], eye(r)) };
            return Some(Transform1d { m, r, alpha, at, g, bt: eye(alpha) });
        }
        let pts = &POINTS[..alpha - 1];
        // AT: the Vandermonde rows of the points (and infinity's: the leading coefficient), transposed.
        let mut at = vec![0.0; m * alpha];
        for (p, &a) in pts.iter().enumerate() {
            for i in 0..m {
                at[i * alpha + p] = a.powi(i as i32);
            }
        }
        at[(m - 1) * alpha + alpha - 1] = 1.0;
        // G: the filter polynomial at each point over the product of its distances to the others.
        let mut g = vec![0.0; alpha * r];
        for (p, &a) in pts.iter().enumerate() {
            let f: f64 = pts.iter().enumerate().filter(|&(q, _)| q != p).map(|(_, &b)| a - b).product();
            for j in 0..r {
                g[p * r + j] = a.powi(j as i32) / f;
            }
        }
        g[(alpha - 1) * r + r - 1] = 1.0;
        let bt = solve_input_transform(m, r, alpha, &at, &g)?;
        Some(Transform1d { m, r, alpha, at, g, bt })
    }

    /// The largest deviation of AT (G g * BT d) from the correlation, over unit g and d (0 for an exact transform).
    pub fn identity_error(&self) -> f64 {
        let (m, r, a) = (self.m, self.r, self.alpha);
        let mut worst: f64 = 0.0;
        for i in 0..m {
            for j in 0..r {
                for t in 0..a {
                    let v: f64 = (0..a).map(|p| self.at[i * a + p] * self.g[p * r + j] * self.bt[p * a + t]).sum();
                    worst = worst.max((v - if t == i + j { 1.0 } else { 0.0 }).abs());
                }
            }
        }
        worst
    }
}

/// BT such that sum_p AT[i][p] G[p][j] BT[p][t] = [t == i + j] for all i < m, j < r, t < alpha: for each t
/// a linear system in BT's column t (m*r equations, alpha unknowns, consistent), solved through its normal
/// equations by Gaussian elimination in f64; entries are then snapped to multiples of 2^-12 (the exact values
/// for these points are such multiples; rounding noise is below 1e-9). None if the system is singular.
fn solve_input_transform(m: usize, r: usize, alpha: usize, at: &[f64], g: &[f64]) -> Option<Vec<f64>> {
    // C[(i, j)][p] = AT[i][p] * G[p][j].
    let rows: Vec<Vec<f64>> =
        (0..m * r).map(|e| (0..alpha).map(|p| at[(e / r) * alpha + p] * g[p * r + e % r]).collect()).collect();
    let mut bt = vec![0.0; alpha * alpha];
    for t in 0..alpha {
        // Normal equations: (C^T C) x = C^T e_t.
        let mut a = vec![vec![0.0; alpha + 1]; alpha];
        for (p, row) in a.iter_mut().enumerate() {
            for q in 0..alpha {
                row[q] = rows.iter().map(|c| c[p] * c[q]).sum();
            }
            row[alpha] = rows.iter().enumerate().filter(|(e, _)| e / r + e % r == t).map(|(_, c)| c[p]).sum();
        }
        for col in 0..alpha {
            let pivot = (col..alpha).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
            if a[pivot][col].abs() < 1e-12 {
                return None;
            }
            a.swap(col, pivot);
            let pivot_row = a[col].clone();
            for (row, r) in a.iter_mut().enumerate() {
                if row != col {
                    let f = r[col] / pivot_row[col];
                    for (x, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                        *x -= f * p;
                    }
                }
            }
        }
        for p in 0..alpha {
            let v = a[p][alpha] / a[p][p];
            let snapped = (v * 4096.0).round() / 4096.0;
            bt[p * alpha + t] = if (v - snapped).abs() < 1e-9 { snapped } else { v };
        }
    }
    Some(bt)
}

/// A WGSL float literal of a coefficient.
pub(crate) fn lit(v: f64) -> String {
    format!("{:?}", v as f32)
}

/// `sum_k c[k] * terms[k]` over the nonzero coefficients, as WGSL (0.0 if none); coefficients of +-1 cost no
/// multiplication.
pub(crate) fn combination(coeffs: impl Iterator<Item = f64>, term: impl Fn(usize) -> String) -> String {
    let mut s = String::new();
    for (k, c) in coeffs.enumerate().filter(|(_, c)| *c != 0.0) {
        let t = term(k);
        let (sign, part) = match c {
            1.0 => ("+", t),
            -1.0 => ("-", t),
            c if c < 0.0 => ("-", format!("{} * {t}", lit(-c))),
            c => ("+", format!("{} * {t}", lit(c))),
        };
        if s.is_empty() {
            s = if sign == "-" { format!("-{part}") } else { part };
        } else {
            s += &format!(" {sign} {part}");
        }
    }
    if s.is_empty() {
        "0.0".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relative L2 error against float64 of a row of `outputs` outputs of a K-channel correlation along W
    /// computed as a tensor-core Winograd kernel would compute it with `t`: the input tile's transform (BT d) and the
    /// weight's (G g) in f32, each transformed tensor scaled by a power of two (its largest magnitude into
    /// [2^14, 2^15)) and rounded to f16, the products of f16 values summed in f32 over the channels at each point,
    /// the output transform (AT) in f32, unscaled. Inputs U(0, 1) (as KernelBench draws them), weights U(-1, 1).
    fn f16_products_error(t: &Transform1d, channels: usize, outputs: usize, seed: u64) -> f64 {
        let (m, r, alpha) = (t.m, t.r, t.alpha);
        let tiles = outputs.div_ceil(m);
        let width = tiles * m + r - 1;
        let x = crate::Tensor::uniform(vec![channels, width], 0.0, 1.0, seed).unwrap();
        let w = crate::Tensor::uniform(vec![channels, r], -1.0, 1.0, seed ^ 0x5eed).unwrap();
        let (x, w) = (x.data(), w.data());
        let f16 = |v: f32| half::f16::from_f32(v).to_f32();
        // The power of two that puts a tensor's largest magnitude in [2^14, 2^15).
        let scale_of = |values: &[f32]| {
            let largest = values.iter().fold(0f32, |a, v| a.max(v.abs()));
            2f32.powi(14 - largest.log2().floor() as i32)
        };
        // Transformed weight [k][p] and input [tile][k][p], in f32.
        let u: Vec<f32> = (0..channels)
            .flat_map(|k| (0..alpha).map(move |p| (0..r).map(|j| t.g[p * r + j] as f32 * w[k * r + j]).sum::<f32>()))
            .collect();
        let v: Vec<f32> = (0..tiles)
            .flat_map(|tile| {
                (0..channels).flat_map(move |k| {
                    (0..alpha).map(move |p| {
                        (0..alpha).map(|q| t.bt[p * alpha + q] as f32 * x[k * width + tile * m + q]).sum::<f32>()
                    })
                })
            })
            .collect();
        let (su, sv) = (scale_of(&u), scale_of(&v));
        let u: Vec<f32> = u.iter().map(|&a| f16(a * su)).collect();
        let v: Vec<f32> = v.iter().map(|&a| f16(a * sv)).collect();
        let (mut err, mut norm) = (0f64, 0f64);
        for tile in 0..tiles {
            let point =
                |p: usize| (0..channels).map(|k| u[k * alpha + p] * v[(tile * channels + k) * alpha + p]).sum::<f32>();
            let sums: Vec<f32> = (0..alpha).map(point).collect();
            for i in 0..m {
                let got = (0..alpha).map(|p| t.at[i * alpha + p] as f32 * sums[p]).sum::<f32>() / (su * sv);
                let want: f64 = (0..channels)
                    .flat_map(|k| (0..r).map(move |j| (k, j)))
                    .map(|(k, j)| x[k * width + tile * m + i + j] as f64 * w[k * r + j] as f64)
                    .sum();
                err += (got as f64 - want).powi(2);
                norm += want * want;
            }
        }
        (err / norm).sqrt()
    }

    #[test]
    fn winograd_transforms_on_f16_products_stay_within_the_fast_tolerance_where_they_save_products() {
        // The transforms a tensor-core Winograd kernel could take at precision `fast` (1e-3 relative L2): their
        // error with f16 operands over 64, 192 (kb57's 64 channels x a kernel row of 3) and 448 channels, the worst
        // of three draws of 960 outputs each, with the products each saves along W (m r / alpha); the direct
        // correlation in the same arithmetic for scale (its 2.1e-4 is what the tensor-core kernels measure on the
        // GPU). F(2, 3), F(3, 3), F(2, 2) and F(3, 2) stay below 0.8e-3; the larger ones reach 0.9-1.6e-3 on some
        // channel count. docs/PERFORMANCE.md has the table (`cargo test --release --lib winograd_transforms --
        // --nocapture` prints it).
        let within = [(2, 3), (3, 3), (2, 2), (3, 2)];
        for (m, r) in [(2, 3), (3, 3), (4, 3), (6, 3), (2, 2), (3, 2), (4, 2), (2, 4), (3, 4), (2, 5), (3, 5), (2, 7)] {
            let t = Transform1d::new(m, r).unwrap();
            let per_k: Vec<f64> = [64, 192, 448]
                .into_iter()
                .map(|k| (1..=3).map(|s| f16_products_error(&t, k, 960, s)).fold(0f64, f64::max))
                .collect();
            let worst = per_k.iter().copied().fold(0f64, f64::max);
            let saving = (m * r) as f64 / t.alpha as f64;
            let each: Vec<String> = per_k.iter().map(|e| format!("{e:.2e}")).collect();
            eprintln!(
                "F({m}, {r}): {saving:.2}x fewer products, f16 relative L2 {} (K = 64, 192, 448)",
                each.join(" / ")
            );
            if within.contains(&(m, r)) {
                assert!(worst <= 0.8e-3, "F({m}, {r}): {worst:e}");
            }
        }
        // The direct correlation in the same arithmetic, for scale: F(1, r) is the identity transform.
        let direct = f16_products_error(&Transform1d::new(1, 3).unwrap(), 192, 960, 1);
        eprintln!("direct (F(1, 3)): f16 relative L2 {direct:.2e}");
        assert!(direct <= 5e-4, "{direct:e}");
    }
}
