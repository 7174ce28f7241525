//! Arguments shared by the subcommands: the convolution options, written as in PyTorch (`2` or `2,3`).

use clap::Args;
use convt::suite::{self, Case};
use convt::ConvTranspose2dParams;

/// Parses `N` (both axes) or `H,W` into a pair; negative values pass through so the library can reject them
/// with PyTorch's message.
pub fn parse_pair(text: &str) -> Result<[i64; 2], String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let num = |s: &str| {
        s.parse::<i64>().map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                format!("`{s}` is out of range (at most {} in magnitude)", i64::MAX)
            }
            _ => format!("`{s}` is not an integer"),
        })
    };
    match parts.as_slice() {
        [v] => Ok([num(v)?; 2]),
        [h, w] => Ok([num(h)?, num(w)?]),
        _ => Err(format!("expected N or H,W, got `{text}`")),
    }
}

#[derive(Args, Debug, Clone)]
pub struct ConvArgs {
    /// Stride, N or H,W.
    #[arg(long, value_parser = parse_pair, default_value = "1", allow_hyphen_values = true)]
    pub stride: [i64; 2],
    /// Zero-padding removed from each side of the output, N or H,W.
    #[arg(long, value_parser = parse_pair, default_value = "0", allow_hyphen_values = true)]
    pub padding: [i64; 2],
    /// Extra rows/columns added to one side of the output, N or H,W (must be < max(stride, dilation)).
    #[arg(long, value_parser = parse_pair, default_value = "0", allow_hyphen_values = true)]
    pub output_padding: [i64; 2],
    /// Spacing between kernel taps, N or H,W.
    #[arg(long, value_parser = parse_pair, default_value = "1", allow_hyphen_values = true)]
    pub dilation: [i64; 2],
    /// Number of blocked connections from input to output channels.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub groups: i64,
}

impl ConvArgs {
    pub fn params(&self) -> ConvTranspose2dParams {
        ConvTranspose2dParams {
            stride: self.stride,
            padding: self.padding,
            output_padding: self.output_padding,
            dilation: self.dilation,
            groups: self.groups,
        }
    }
}

/// Suite cases by name; no names means all nine.
pub fn parse_cases(names: &[String]) -> anyhow::Result<Vec<Case>> {
    if names.is_empty() || names.iter().any(|n| n == "all") {
        return Ok(suite::CASES.to_vec());
    }
    names
        .iter()
        .map(|name| {
            suite::find(name).copied().ok_or_else(|| {
                let known: Vec<&str> = suite::CASES.iter().map(|c| c.name).collect();
                anyhow::anyhow!("unknown case `{name}` (known: {})", known.join(", "))
            })
        })
        .collect()
}
