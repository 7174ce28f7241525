//! The one error type of the library. Every message names the values involved and, where it helps, what was
//! expected; PyTorch's wording is the model so that errors read the same for users of both.

use std::path::PathBuf;

/// Shorthand for results whose error is [`ConvtError`].
pub type Result<T, E = ConvtError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ConvtError {
    #[error("non-positive groups is not supported (groups = {groups})")]
    NonPositiveGroups { groups: i64 },
    #[error("non-positive stride is not supported (stride = {stride:?})")]
    NonPositiveStride { stride: [i64; 2] },
    #[error("dilation should be greater than zero, but got dilation = {dilation:?}")]
    NonPositiveDilation { dilation: [i64; 2] },
    #[error("negative padding is not supported (padding = {padding:?})")]
    NegativePadding { padding: [i64; 2] },
    #[error("negative output_padding is not supported (output_padding = {output_padding:?})")]
    NegativeOutputPadding { output_padding: [i64; 2] },
    #[error(
        "output padding must be smaller than either stride or dilation, but got output_padding = {output_padding:?}, \
         stride = {stride:?}, dilation = {dilation:?}"
    )]
    OutputPaddingTooLarge { output_padding: [i64; 2], stride: [i64; 2], dilation: [i64; 2] },
    #[error("in_channels must be divisible by groups, but got in_channels = {in_channels} and groups = {groups}")]
    InChannelsNotDivisible { in_channels: usize, groups: i64 },
    #[error("out_channels must be divisible by groups, but got out_channels = {out_channels} and groups = {groups}")]
    OutChannelsNotDivisible { out_channels: usize, groups: i64 },
    #[error("expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got input of size {shape:?}")]
    InputRank { shape: Vec<usize> },
    #[error("expected a 4D weight [in_channels, out_channels/groups, kH, kW], but got weight of size {shape:?}")]
    WeightRank { shape: Vec<usize> },
    #[error("non-empty weight expected (every dimension at least 1), but got weight of size {shape:?}")]
    EmptyWeight { shape: Vec<usize> },
    #[error("kernel size should be greater than zero, but got kernel_size = {kernel:?}")]
    NonPositiveKernel { kernel: [i64; 2] },
    #[error("only zero batch inputs are supported, but got input of size {shape:?} (channels, height and width must be at least 1)")]
    EmptyInput { shape: Vec<usize> },
    #[error(
        "in_channels mismatch: weight of size {weight:?} expects input to have {expected} channels, but got input of \
         size {input:?} with {actual} channels"
    )]
    ChannelMismatch { input: Vec<usize>, weight: Vec<usize>, expected: usize, actual: usize },
    #[error(
        "expected bias to be 1-dimensional with {expected} elements (out_channels), but got bias of size {shape:?}"
    )]
    BiasShape { expected: usize, shape: Vec<usize> },
    #[error(
        "output size is too small: input size per channel ({in_h} x {in_w}) gives calculated output size per channel \
         ({out_h} x {out_w})"
    )]
    OutputTooSmall { in_h: usize, in_w: usize, out_h: i64, out_w: i64 },
    /// An `output_size` of the wrong length (PyTorch's message).
    #[error("ConvTranspose2D: for {input_dims}D input, output_size must have 2 or {input_dims} elements (got {got})")]
    OutputSizeLength { input_dims: usize, got: usize },
    /// An `output_size` no output_padding reaches (PyTorch's message).
    #[error(
        "requested an output size of {requested:?}, but valid sizes range from {min:?} to {max:?} (for an input of \
         {input_hw:?})"
    )]
    OutputSizeUnreachable { requested: Vec<usize>, min: [i64; 2], max: [i64; 2], input_hw: [usize; 2] },
    #[error(
        "output size is too large: input size per channel ({in_h} x {in_w}) gives calculated output size per channel \
         ({out_h} x {out_w}), more than can be addressed"
    )]
    OutputTooLarge { in_h: usize, in_w: usize, out_h: i128, out_w: i128 },
    #[error("tensor of size {shape:?} needs {expected} elements, but {actual} were given")]
    DataLength { shape: Vec<usize>, expected: usize, actual: usize },
    #[error("tensor of size {shape:?} has too many elements to address (more than isize::MAX bytes of f32)")]
    SizeOverflow { shape: Vec<usize> },
    #[error("grad_output must have the output's size {expected:?}, but got grad_output of size {actual:?}")]
    GradOutputShape { expected: Vec<usize>, actual: Vec<usize> },
    #[error("expected a tensor of size {expected:?}, but got {actual:?}")]
    ShapeMismatch { expected: Vec<usize>, actual: Vec<usize> },
    #[error(
        "{what} needs {bytes} bytes in one GPU storage binding, but the adapter allows at most {limit} bytes per binding"
    )]
    TooLargeForBinding { what: String, bytes: u64, limit: u64 },
    #[error(
        "no GPU adapter found{detail}. Install a Vulkan driver for your GPU, or Mesa's software Vulkan driver \
             (Debian/Ubuntu: `apt-get install mesa-vulkan-drivers`), or use the CPU reference (`convt::cpu`; \
             `convt forward` and `convt backward` take `--backend cpu`)"
    )]
    NoAdapter { detail: String },
    /// An application's device without what convt needs ([`crate::GpuContext::from_wgpu`]).
    #[error("the device lacks limits convt needs: {missing}; request at least wgpu::Limits::default() for these")]
    DeviceLacks { missing: String },
    #[error("the GPU is out of memory: {0}")]
    OutOfMemory(String),
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    #[error("GPU error: {0}")]
    Gpu(String),
    #[error("shader `{name}` failed to validate: {message}")]
    Shader { name: String, message: String },
    #[error(
        "not enough host memory for {what}: it needs {bytes} bytes{}",
        available.map_or(String::new(), |a| format!(", and about {a} bytes are available"))
    )]
    HostOutOfMemory { what: String, bytes: u128, available: Option<u64> },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} exists and is not a regular file ({kind}): convt writes its outputs to regular files only")]
    NotARegularFile { path: PathBuf, kind: String },
    #[error("{path} is the same file as the input {input}: write the output to another path")]
    SameFileAsInput { path: PathBuf, input: PathBuf },
    #[error("{path}: not a valid safetensors file: {message}")]
    TensorFile { path: PathBuf, message: String },
    #[error("{path}: tensor `{name}` not found (found: {found})")]
    MissingTensor { path: PathBuf, name: String, found: String },
    #[error(
        "{path}: tensor `{name}` has dtype {dtype}, but convt reads float tensors only (F32, F16, BF16; F64, F8_E4M3 \
         and F8_E5M2 as f32)"
    )]
    DType { path: PathBuf, name: String, dtype: String },
    #[error("expected {what} of dtype {expected} (the input's), but got {actual}: convert it with `to_dtype`")]
    DTypeMismatch { what: String, expected: crate::DType, actual: crate::DType },
    #[error("{what} takes f32 tensors only, but got a tensor of dtype {dtype}")]
    UnsupportedDType { what: String, dtype: crate::DType },
    #[error("{path}: this state_dict does not fit the layer: {message}")]
    StateDict { path: PathBuf, message: String },
    #[error("{0}")]
    InvalidArgument(String),
}
