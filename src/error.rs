//! The one error type of the library. Every message names the values involved and, where it helps, what was
//! expected; PyTorch's wording is the model so that errors read the same for users of both.

use std::path::PathBuf;

/// Shorthand for results whose error is [`ConvtError`].
pub type Result<T, E = ConvtError> = std::result::Result<T, E>;

/// Every error convt returns: invalid options or shapes (rejected as PyTorch rejects them, before any work),
/// GPU and host failures, and file errors. `Display` gives the message; the fields hold the values it names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvtError {
    /// `groups` below 1.
    #[error("non-positive groups is not supported (groups = {groups})")]
    NonPositiveGroups {
        /// The `groups` given.
        groups: i64,
    },
    /// A `stride` below 1 on some axis.
    #[error("non-positive stride is not supported (stride = {stride:?})")]
    NonPositiveStride {
        /// The `stride` given, `[height, width]`.
        stride: [i64; 2],
    },
    /// A `dilation` below 1 on some axis.
    #[error("dilation should be greater than zero, but got dilation = {dilation:?}")]
    NonPositiveDilation {
        /// The `dilation` given, `[height, width]`.
        dilation: [i64; 2],
    },
    /// A negative `padding` on some axis.
    #[error("negative padding is not supported (padding = {padding:?})")]
    NegativePadding {
        /// The `padding` given, `[height, width]`.
        padding: [i64; 2],
    },
    /// A negative `output_padding` on some axis.
    #[error("negative output_padding is not supported (output_padding = {output_padding:?})")]
    NegativeOutputPadding {
        /// The `output_padding` given, `[height, width]`.
        output_padding: [i64; 2],
    },
    /// An `output_padding` of at least `max(stride, dilation)` on some axis.
    #[error(
        "output padding must be smaller than either stride or dilation, but got output_padding = {output_padding:?}, \
         stride = {stride:?}, dilation = {dilation:?}"
    )]
    OutputPaddingTooLarge {
        /// The `output_padding` given, `[height, width]`.
        output_padding: [i64; 2],
        /// The `stride` given, `[height, width]`.
        stride: [i64; 2],
        /// The `dilation` given, `[height, width]`.
        dilation: [i64; 2],
    },
    /// Input channels (the weight's first dimension) not a multiple of `groups`.
    #[error("in_channels must be divisible by groups, but got in_channels = {in_channels} and groups = {groups}")]
    InChannelsNotDivisible {
        /// The input channels, `Cin`.
        in_channels: usize,
        /// The `groups` given.
        groups: i64,
    },
    /// Output channels not a multiple of `groups` (a layer's constructor arguments).
    #[error("out_channels must be divisible by groups, but got out_channels = {out_channels} and groups = {groups}")]
    OutChannelsNotDivisible {
        /// The output channels, `Cout`.
        out_channels: usize,
        /// The `groups` given.
        groups: i64,
    },
    /// An input that is neither `[Cin, H, W]` nor `[N, Cin, H, W]`.
    #[error("expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got input of size {shape:?}")]
    InputRank {
        /// The input's size.
        shape: Vec<usize>,
    },
    /// A weight that is not 4-dimensional.
    #[error("expected a 4D weight [in_channels, out_channels/groups, kH, kW], but got weight of size {shape:?}")]
    WeightRank {
        /// The weight's size.
        shape: Vec<usize>,
    },
    /// A weight with a dimension of 0.
    #[error("non-empty weight expected (every dimension at least 1), but got weight of size {shape:?}")]
    EmptyWeight {
        /// The weight's size.
        shape: Vec<usize>,
    },
    /// A `kernel_size` below 1 on some axis (a layer's constructor arguments).
    #[error("kernel size should be greater than zero, but got kernel_size = {kernel:?}")]
    NonPositiveKernel {
        /// The `kernel_size` given, `[height, width]`.
        kernel: [i64; 2],
    },
    /// An input with no channels, rows or columns (an empty batch is allowed).
    #[error("only zero batch inputs are supported, but got input of size {shape:?} (channels, height and width must be at least 1)")]
    EmptyInput {
        /// The input's size.
        shape: Vec<usize>,
    },
    /// An input whose channel count differs from the weight's first dimension.
    #[error(
        "in_channels mismatch: weight of size {weight:?} expects input to have {expected} channels, but got input of \
         size {input:?} with {actual} channels"
    )]
    ChannelMismatch {
        /// The input's size.
        input: Vec<usize>,
        /// The weight's size.
        weight: Vec<usize>,
        /// The channels the weight expects, `Cin`.
        expected: usize,
        /// The input's channels.
        actual: usize,
    },
    /// A bias that is not `[Cout]`.
    #[error(
        "expected bias to be 1-dimensional with {expected} elements (out_channels), but got bias of size {shape:?}"
    )]
    BiasShape {
        /// The output channels, `Cout`.
        expected: usize,
        /// The bias's size.
        shape: Vec<usize>,
    },
    /// Options and sizes whose output would have a height or width below 1.
    #[error(
        "output size is too small: input size per channel ({in_h} x {in_w}) gives calculated output size per channel \
         ({out_h} x {out_w})"
    )]
    OutputTooSmall {
        /// The input's height, in pixels.
        in_h: usize,
        /// The input's width, in pixels.
        in_w: usize,
        /// The output height the formula gives (zero or negative here).
        out_h: i64,
        /// The output width the formula gives.
        out_w: i64,
    },
    /// An `output_size` of the wrong length (PyTorch's message).
    #[error("ConvTranspose2D: for {input_dims}D input, output_size must have 2 or {input_dims} elements (got {got})")]
    OutputSizeLength {
        /// The input's number of dimensions (3 or 4).
        input_dims: usize,
        /// The `output_size`'s length.
        got: usize,
    },
    /// An `output_size` no output_padding reaches (PyTorch's message).
    #[error(
        "requested an output size of {requested:?}, but valid sizes range from {min:?} to {max:?} (for an input of \
         {input_hw:?})"
    )]
    OutputSizeUnreachable {
        /// The `output_size` given.
        requested: Vec<usize>,
        /// The smallest reachable `[H, W]` (output_padding 0).
        min: [i64; 2],
        /// The largest reachable `[H, W]` (output_padding `stride - 1`).
        max: [i64; 2],
        /// The input's `[H, W]`.
        input_hw: [usize; 2],
    },
    /// Options and sizes whose output height or width does not fit in `usize`.
    #[error(
        "output size is too large: input size per channel ({in_h} x {in_w}) gives calculated output size per channel \
         ({out_h} x {out_w}), more than can be addressed"
    )]
    OutputTooLarge {
        /// The input's height, in pixels.
        in_h: usize,
        /// The input's width, in pixels.
        in_w: usize,
        /// The output height the formula gives.
        out_h: i128,
        /// The output width the formula gives.
        out_w: i128,
    },
    /// Data whose length differs from the number of elements of the shape given with it.
    #[error("tensor of size {shape:?} needs {expected} elements, but {actual} were given")]
    DataLength {
        /// The shape given.
        shape: Vec<usize>,
        /// The shape's number of elements.
        expected: usize,
        /// The data's length.
        actual: usize,
    },
    /// A tensor whose element count overflows `usize` or whose f32 bytes exceed [`crate::MAX_TENSOR_BYTES`].
    #[error("tensor of size {shape:?} has too many elements to address (more than isize::MAX bytes of f32)")]
    SizeOverflow {
        /// The tensor's size.
        shape: Vec<usize>,
    },
    /// A `grad_output` whose size is not the forward output's.
    #[error("grad_output must have the output's size {expected:?}, but got grad_output of size {actual:?}")]
    GradOutputShape {
        /// The output's size.
        expected: Vec<usize>,
        /// The `grad_output`'s size.
        actual: Vec<usize>,
    },
    /// A tensor of another size than the call needs (an `_into` call's output, an elementwise operand).
    #[error("expected a tensor of size {expected:?}, but got {actual:?}")]
    ShapeMismatch {
        /// The size needed.
        expected: Vec<usize>,
        /// The size given.
        actual: Vec<usize>,
    },
    /// A tensor part that must sit in one storage binding (a weight, one `H x W` plane) but exceeds the
    /// adapter's `max_storage_buffer_binding_size` (or [`crate::GpuOptions::max_binding_bytes`]).
    #[error(
        "{what} needs {bytes} bytes in one GPU storage binding, but the adapter allows at most {limit} bytes per binding"
    )]
    TooLargeForBinding {
        /// What had to fit, in words.
        what: String,
        /// The bytes it needs.
        bytes: u64,
        /// The most bytes one binding may hold.
        limit: u64,
    },
    /// No GPU adapter, or none matching [`crate::GpuOptions::adapter`] or `backends`.
    #[error(
        "no GPU adapter found{detail}. Install a Vulkan driver for your GPU, or Mesa's software Vulkan driver \
             (Debian/Ubuntu: `apt-get install mesa-vulkan-drivers`), or use the CPU reference (`convt::cpu`; \
             `convt forward` and `convt backward` take `--backend cpu`)"
    )]
    NoAdapter {
        /// What was looked for and the adapters found, as the message's tail; empty when nothing was asked for.
        detail: String,
    },
    /// An application's device without what convt needs ([`crate::GpuContext::from_wgpu`]).
    #[error("the device lacks limits convt needs: {missing}; request at least wgpu::Limits::default() for these")]
    DeviceLacks {
        /// Each limit below [`crate::gpu::REQUIRED_LIMITS`]: its name, the value needed and the device's.
        missing: String,
    },
    /// GPU memory exhausted, by the driver's report or beyond [`crate::GpuOptions::memory_budget`].
    #[error("the GPU is out of memory: {0}")]
    OutOfMemory(String),
    /// The device was lost (driver reset, GPU removed, timeout); the context cannot be used again.
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    /// Any other error wgpu reported, or a GPU feature the call needs but the device lacks.
    #[error("GPU error: {0}")]
    Gpu(String),
    /// A WGSL shader that naga rejected.
    #[error("shader `{name}` failed to validate: {message}")]
    Shader {
        /// The shader's name (its path under `shaders/`, or a generated variant's name).
        name: String,
        /// naga's validation message.
        message: String,
    },
    /// A host buffer larger than the memory available (refused instead of aborting the process).
    #[error(
        "not enough host memory for {what}: it needs {bytes} bytes{}",
        available.map_or(String::new(), |a| format!(", and about {a} bytes are available"))
    )]
    HostOutOfMemory {
        /// What the buffer was for, in words.
        what: String,
        /// The bytes it needs.
        bytes: u128,
        /// The bytes the host had available, where known.
        available: Option<u64>,
    },
    /// A file that could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file that could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An output path that exists as something other than a regular file (a directory, a device, a link).
    #[error("{path} exists and is not a regular file ({kind}): convt writes its outputs to regular files only")]
    NotARegularFile {
        /// The output path.
        path: PathBuf,
        /// What it is, in words.
        kind: String,
    },
    /// An output path that is the input file itself.
    #[error("{path} is the same file as the input {input}: write the output to another path")]
    SameFileAsInput {
        /// The output path.
        path: PathBuf,
        /// The input path it names.
        input: PathBuf,
    },
    /// A file that is not valid safetensors.
    #[error("{path}: not a valid safetensors file: {message}")]
    TensorFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A tuning cache file that cannot be read as one (`convt tune` writes it; a context ignores it with a
    /// warning).
    #[error("{path}: not a convt tuning cache: {message}")]
    TuneCache {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A tensor name the file does not hold.
    #[error("{path}: tensor `{name}` not found (found: {found})")]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// The names the file holds.
        found: String,
    },
    /// A tensor stored in a dtype convt does not read, such as an integer or boolean one.
    #[error(
        "{path}: tensor `{name}` has dtype {dtype}, but convt reads float tensors only (F32, F16, BF16; F64, F8_E4M3 \
         and F8_E5M2 as f32)"
    )]
    DType {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Its safetensors dtype.
        dtype: String,
    },
    /// Tensors of one call in different dtypes; as in PyTorch, weight, bias and outputs take the input's.
    #[error("expected {what} of dtype {expected} (the input's), but got {actual}: convert it with `to_dtype`")]
    DTypeMismatch {
        /// Which tensor, in words.
        what: String,
        /// The input's dtype.
        expected: crate::DType,
        /// The tensor's dtype.
        actual: crate::DType,
    },
    /// A half-precision tensor given to an operation that takes f32 only.
    #[error("{what} takes f32 tensors only, but got a tensor of dtype {dtype}")]
    UnsupportedDType {
        /// The operation.
        what: String,
        /// The tensor's dtype.
        dtype: crate::DType,
    },
    /// A state_dict file that does not fit the layer: unexpected tensors, a bias missing or extra, a weight of
    /// another size.
    #[error("{path}: this state_dict does not fit the layer: {message}")]
    StateDict {
        /// The file.
        path: PathBuf,
        /// What does not fit.
        message: String,
    },
    /// Any other invalid argument: an option's text, an environment variable, a forced kernel that cannot run
    /// the problem here, a bias or grad_bias given where none fits.
    #[error("{0}")]
    InvalidArgument(String),
}
