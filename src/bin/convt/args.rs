//! Arguments shared by the subcommands: the convolution options, written as in PyTorch (`2` or `2,3`).

use std::path::Path;

use clap::Args;
use convt::io::{OutputFile, TensorFile};
use convt::suite::{self, Case};
use convt::{ConvTranspose2dOptions, DType, GpuContext, GpuOptions, Tensor};

/// The global `--adapter`, set once by `main`.
static ADAPTER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Records the global `--adapter` (called once, by `main`).
pub fn set_adapter(adapter: Option<String>) {
    let _ = ADAPTER.set(adapter);
}

/// The GPU options of every subcommand: the environment's (`GpuOptions::from_env`), with `--adapter` over them.
pub fn gpu_options() -> convt::Result<GpuOptions> {
    let mut opts = GpuOptions::from_env()?;
    if let Some(adapter) = ADAPTER.get().cloned().flatten() {
        opts.adapter = Some(adapter);
    }
    Ok(opts)
}

/// A context with [`gpu_options`].
pub fn gpu_context() -> convt::Result<GpuContext> {
    GpuContext::with_options(gpu_options()?)
}

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
    /// Stride, N or H,W [default: 1].
    #[arg(long, value_parser = parse_pair, allow_hyphen_values = true)]
    pub stride: Option<[i64; 2]>,
    /// Zero-padding removed from each side of the output, N or H,W [default: 0].
    #[arg(long, value_parser = parse_pair, allow_hyphen_values = true)]
    pub padding: Option<[i64; 2]>,
    /// Extra rows/columns added to one side of the output, N or H,W (must be < max(stride, dilation))
    /// [default: 0].
    #[arg(long, value_parser = parse_pair, allow_hyphen_values = true)]
    pub output_padding: Option<[i64; 2]>,
    /// Spacing between kernel taps, N or H,W [default: 1].
    #[arg(long, value_parser = parse_pair, allow_hyphen_values = true)]
    pub dilation: Option<[i64; 2]>,
    /// Number of blocked connections from input to output channels [default: 1].
    #[arg(long, allow_hyphen_values = true)]
    pub groups: Option<i64>,
    /// The output's H,W, as PyTorch's `forward(input, output_size=...)`: the output_padding that reaches it
    /// (each axis takes the size without padding up to stride - 1 more); instead of --output-padding.
    #[arg(long, value_parser = parse_pair, allow_hyphen_values = true)]
    pub output_size: Option<[i64; 2]>,
}

impl ConvArgs {
    /// The options, PyTorch's defaults where a flag is not given.
    pub fn params(&self) -> ConvTranspose2dOptions {
        let d = ConvTranspose2dOptions::default();
        ConvTranspose2dOptions {
            stride: self.stride.unwrap_or(d.stride),
            padding: self.padding.unwrap_or(d.padding),
            output_padding: self.output_padding.unwrap_or(d.output_padding),
            dilation: self.dilation.unwrap_or(d.dilation),
            groups: self.groups.unwrap_or(d.groups),
            ..d
        }
    }

    /// The options for an input and weight of these sizes: [`Self::params`], with the output_padding that
    /// --output-size asks for where it is given.
    pub fn params_for(&self, input: &[usize], weight: &[usize]) -> anyhow::Result<ConvTranspose2dOptions> {
        let params = self.params();
        let Some(size) = self.output_size else { return Ok(params) };
        if self.output_padding.is_some() {
            anyhow::bail!("--output-size sets the output padding: it cannot be combined with --output-padding");
        }
        let size = match size.map(usize::try_from) {
            [Ok(h), Ok(w)] => [h, w],
            _ => anyhow::bail!("--output-size must be non-negative, got {size:?}"),
        };
        Ok(params.for_output_size(input, weight, &size)?)
    }

    /// The flags given on the command line, by name.
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--stride", self.stride.is_some()),
            ("--padding", self.padding.is_some()),
            ("--output-padding", self.output_padding.is_some()),
            ("--dilation", self.dilation.is_some()),
            ("--groups", self.groups.is_some()),
            ("--output-size", self.output_size.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

/// A finite number >= 0 (a tolerance, a size in GFLOP): NaN, infinities and negative values are refused.
pub fn non_negative(text: &str) -> Result<f64, String> {
    let v: f64 = text.trim().parse().map_err(|_| format!("`{text}` is not a number"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("expected a finite number >= 0, got `{text}`"))
    }
}

/// A finite number > 0.
pub fn positive(text: &str) -> Result<f64, String> {
    match non_negative(text)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("expected a finite number > 0, got `{text}`")),
    }
}

/// Which problems a subcommand runs: suite cases by name, or one shape given by flags (as `verify`, `bench` and
/// `tune` take them), at a batch of one's choice.
#[derive(Args, Debug, Clone)]
pub struct ShapeArgs {
    /// Suite case(s) (kb57 kb65 kb69 kb71 kb75 kb78 kb81 up2x dcgan, or `all`). Without a case and without a shape
    /// given by flags, all nine.
    #[arg(long, num_args = 1..)]
    pub case: Vec<String>,
    /// Override the batch size (of the cases, or of the shape given by flags, default 1).
    #[arg(long)]
    pub batch: Option<usize>,
    /// A shape by flags (all four of --in-channels, --out-channels, --size and --kernel; the convolution options
    /// and --bias go with them): input channels.
    #[arg(long)]
    pub in_channels: Option<usize>,
    /// Output channels.
    #[arg(long)]
    pub out_channels: Option<usize>,
    /// Input H,W (or N for both).
    #[arg(long, value_parser = parse_pair)]
    pub size: Option<[i64; 2]>,
    /// Kernel H,W (or N for both).
    #[arg(long, value_parser = parse_pair)]
    pub kernel: Option<[i64; 2]>,
    /// Add a bias (a shape given by flags).
    #[arg(long)]
    pub bias: bool,
    #[command(flatten)]
    pub conv: ConvArgs,
}

impl ShapeArgs {
    /// The problems: the shape given by flags, or the suite cases named (all nine without a name), each at
    /// --batch where given, every one checked to be a valid problem.
    pub fn cases(&self) -> anyhow::Result<Vec<Case>> {
        let mut cases = match self.shape_case()? {
            Some(c) => vec![c],
            None => parse_cases(&self.case)?,
        };
        for case in cases.iter_mut() {
            if let Some(b) = self.batch {
                *case = case.with_batch(b);
            }
            shape_of(case)?;
        }
        Ok(cases)
    }

    /// The shape given by flags, if any. A partial shape is refused with the flags it lacks; a shape (or any of
    /// the options that go with one) together with --case is refused, since a suite case brings its own.
    fn shape_case(&self) -> anyhow::Result<Option<Case>> {
        let shape_flags = [
            ("--in-channels", self.in_channels.is_some()),
            ("--out-channels", self.out_channels.is_some()),
            ("--size", self.size.is_some()),
            ("--kernel", self.kernel.is_some()),
        ];
        let given: Vec<&str> = shape_flags.iter().filter(|f| f.1).map(|f| f.0).collect();
        let missing: Vec<&str> = shape_flags.iter().filter(|f| !f.1).map(|f| f.0).collect();
        let mut options = self.conv.given();
        if self.bias {
            options.push("--bias");
        }
        let flags: Vec<&str> = given.iter().chain(&options).copied().collect();
        if !self.case.is_empty() && !flags.is_empty() {
            anyhow::bail!(
                "--case runs a suite case with its own shape: it cannot be combined with {}",
                flags.join(", ")
            );
        }
        if given.is_empty() {
            if !options.is_empty() {
                anyhow::bail!(
                    "{} set the options of a shape given by flags: add {}",
                    options.join(", "),
                    missing.join(", ")
                );
            }
            return Ok(None);
        }
        if !missing.is_empty() {
            anyhow::bail!(
                "a shape given by flags needs {}; missing: {}",
                shape_flags.map(|f| f.0).join(", "),
                missing.join(", ")
            );
        }
        let (Some(cin), Some(cout), Some(size), Some(kernel)) =
            (self.in_channels, self.out_channels, self.size, self.kernel)
        else {
            anyhow::bail!("a shape given by flags needs all four of its flags")
        };
        let to_usize = |v: [i64; 2], what: &str| -> anyhow::Result<[usize; 2]> {
            match v.map(usize::try_from) {
                [Ok(h), Ok(w)] => Ok([h, w]),
                _ => anyhow::bail!("{what} must be non-negative, got {v:?}"),
            }
        };
        let params = self.conv.params();
        params.validate()?;
        if cout % params.groups as usize != 0 {
            anyhow::bail!(convt::ConvtError::OutChannelsNotDivisible { out_channels: cout, groups: params.groups });
        }
        let mut case = Case {
            name: "custom",
            batch: self.batch.unwrap_or(1),
            in_channels: cin,
            out_channels: cout,
            in_hw: to_usize(size, "--size")?,
            kernel: to_usize(kernel, "--kernel")?,
            params,
            bias: self.bias,
        };
        case.params = self.conv.params_for(&case.input_dims(), &case.weight_dims())?;
        Ok(Some(case))
    }
}

/// A case's problem, resolved and checked as the library takes it.
pub fn shape_of(c: &Case) -> anyhow::Result<convt::ConvShape> {
    Ok(c.params.resolve(&c.input_dims(), &c.weight_dims(), c.bias.then_some(&[c.out_channels][..]))?)
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

/// What `forward` and `backward` start from: the output file, checked and ready before anything is read or
/// computed (see [`OutputFile::create`]), and the problem's tensors from the `--tensors` file, in one dtype.
pub struct Problem {
    pub out: OutputFile,
    pub input: Tensor,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// `grad_output`, for the backward.
    pub grad_output: Option<Tensor>,
    pub dtype: DType,
}

/// Where the layer's parameters come from: `--weights FILE` (a model's state_dict, say) and `--prefix P` (one
/// layer of it: the tensors `{P}weight` and `{P}bias`).
#[derive(Args, Debug, Clone)]
pub struct WeightArgs {
    /// Read `weight` and `bias` from this safetensors file (e.g. a model's state_dict saved with
    /// `safetensors.torch.save_file(model.state_dict(), FILE)`) instead of --tensors. Float tensors of any dtype
    /// load (F64 and float8 as f32); the file's other tensors are ignored.
    #[arg(long)]
    pub weights: Option<std::path::PathBuf>,
    /// The layer's name prefix in the weights' file, as in its state_dict: `--prefix decoder.3.` reads
    /// `decoder.3.weight` and `decoder.3.bias`.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// The input tensor's name in --tensors.
    #[arg(long, default_value = "input", value_name = "NAME")]
    pub input_name: String,
    /// The weight's name in the weights' file [default: {prefix}weight].
    #[arg(long, value_name = "NAME")]
    pub weight_name: Option<String>,
    /// The bias's name in the weights' file [default: {prefix}bias].
    #[arg(long, value_name = "NAME")]
    pub bias_name: Option<String>,
    /// grad_output's name in --tensors (`convt backward`).
    #[arg(long, default_value = "grad_output", value_name = "NAME")]
    pub grad_output_name: String,
}

/// An error unless `path` is not the tuning cache (`CONVT_TUNE_CACHE`, else the default location): no
/// subcommand writes its results over the cache it reads.
pub fn not_the_tune_cache(path: &Path, what: &str) -> anyhow::Result<()> {
    let Some(cache) = gpu_options()?.tune_cache.or_else(convt::gpu::tune::default_path) else { return Ok(()) };
    // The same file whether or not it exists yet: its directory resolved, then its name.
    let resolve = |p: &Path| -> Option<std::path::PathBuf> {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some(dir.canonicalize().ok()?.join(p.file_name()?))
    };
    match (resolve(path), resolve(&cache)) {
        (Some(a), Some(b)) if a == b => anyhow::bail!(
            "{what} {} is the tuning cache; write the results elsewhere (the cache is `convt tune`'s)",
            path.display()
        ),
        _ => Ok(()),
    }
}

/// Checks `out` (it must not be `tensors` or the weights' file, nor a device, pipe or directory), then reads
/// `input` and, for the backward, `grad_output` from `tensors`, and `{prefix}weight` with the optional
/// `{prefix}bias` from the weights' file (`tensors` unless --weights names another). They are computed in `dtype`
/// where it is given (each converted to it), else in the dtype they share.
pub fn open_problem(
    tensors: &Path,
    weights: &WeightArgs,
    out: &Path,
    dtype: Option<DType>,
    backward: bool,
) -> anyhow::Result<Problem> {
    let weights_path = weights.weights.as_deref().unwrap_or(tensors);
    not_the_tune_cache(out, "--out")?;
    let out = OutputFile::create(out, &[tensors, weights_path])?;
    let file = TensorFile::load(tensors)?;
    let weights_file = if weights.weights.is_some() { Some(TensorFile::load(weights_path)?) } else { None };
    let wfile = weights_file.as_ref().unwrap_or(&file);
    let weight_name = weights.weight_name.clone().unwrap_or_else(|| format!("{}weight", weights.prefix));
    let bias_name = weights.bias_name.clone().unwrap_or_else(|| format!("{}bias", weights.prefix));
    // A tensor the file lacks: say which flag names another.
    fn flag(flag: &'static str) -> impl Fn(convt::ConvtError) -> anyhow::Error {
        move |e| match e {
            convt::ConvtError::MissingTensor { .. } => anyhow::anyhow!("{e} (--{flag} names another)"),
            e => e.into(),
        }
    }
    let input = file.get(&weights.input_name).map_err(flag("input-name"))?;
    let weight = wfile.get(&weight_name).map_err(flag("weight-name"))?;
    let bias = wfile.get_optional(&bias_name)?;
    let grad_output =
        if backward { Some(file.get(&weights.grad_output_name).map_err(flag("grad-output-name"))?) } else { None };
    let named = [
        (weights.input_name.as_str(), Some(&input)),
        (weight_name.as_str(), Some(&weight)),
        (bias_name.as_str(), bias.as_ref()),
        (weights.grad_output_name.as_str(), grad_output.as_ref()),
    ];
    let named: Vec<(&str, &Tensor)> = named.into_iter().filter_map(|(n, t)| Some((n, t?))).collect();
    let dtype = match dtype {
        Some(d) => d,
        None => {
            if let Some((name, t)) = named.iter().find(|(_, t)| t.dtype() != input.dtype()) {
                anyhow::bail!(
                    "{}: tensor `{name}` has dtype {}, but `{}` has {}: pass --dtype to compute in one of them",
                    tensors.display(),
                    t.dtype(),
                    weights.input_name,
                    input.dtype()
                );
            }
            input.dtype()
        }
    };
    let to = |t: Tensor| t.to_dtype(dtype);
    Ok(Problem {
        out,
        input: to(input),
        weight: to(weight),
        bias: bias.map(to),
        grad_output: grad_output.map(to),
        dtype,
    })
}
