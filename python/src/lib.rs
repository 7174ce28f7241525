//! `convt._convt`: the Rust side of convt's Python package. It takes numpy arrays of float32 values, or of the
//! bits of float16 and bfloat16 values as uint16 (the pure-Python `convt` package passes whatever the caller gave
//! as one of these), runs the library's calls with the GIL released, and returns float32 arrays for float32
//! calls and the uint16 bits of the results of half-precision ones: half-precision values cross to and from the
//! GPU as they are stored, with no float32 copy. Every library error becomes a Python exception carrying the library's
//! message unchanged; a panic is caught and becomes a `RuntimeError`, never a crash or a `PanicException`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use convt::{ConvTranspose2dOptions, ConvtError, DType, GpuContext, GpuConvTranspose2d, GpuOptions, GpuTensor, Tensor};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The one GPU context of the process, made on first use and shared by every call: choosing an adapter and
/// opening a device takes long, and the context's caches (pipelines, buffers) pay off only when reused.
static CONTEXT: OnceLock<GpuContext> = OnceLock::new();
/// Serialises the context's creation, so that threads racing to the first call make one device, not several.
static CONTEXT_INIT: Mutex<()> = Mutex::new(());

/// The shared context, created now if it does not exist yet (from the environment: `CONVT_BACKEND`,
/// `CONVT_ADAPTER` and the other variables the library reads). A failure is not remembered: the next call tries
/// again.
fn context() -> convt::Result<&'static GpuContext> {
    if let Some(ctx) = CONTEXT.get() {
        return Ok(ctx);
    }
    let _guard = CONTEXT_INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ctx) = CONTEXT.get() {
        return Ok(ctx);
    }
    let ctx = GpuContext::new()?;
    Ok(CONTEXT.get_or_init(|| ctx))
}

/// The Python exception for a library error, by kind: invalid arguments, shapes and options are `ValueError`s,
/// memory exhaustion `MemoryError`, file-system failures `OSError`, and what the GPU or its driver did
/// `RuntimeError`. The match lists every variant of this version; the error type is non-exhaustive, so a variant
/// added later is a `RuntimeError` until it is classified here.
fn to_py(e: ConvtError) -> PyErr {
    use ConvtError::*;
    let message = e.to_string();
    match e {
        NonPositiveGroups { .. }
        | NonPositiveStride { .. }
        | NonPositiveDilation { .. }
        | NegativePadding { .. }
        | NegativeOutputPadding { .. }
        | OutputPaddingTooLarge { .. }
        | InChannelsNotDivisible { .. }
        | OutChannelsNotDivisible { .. }
        | InputRank { .. }
        | WeightRank { .. }
        | EmptyWeight { .. }
        | NonPositiveKernel { .. }
        | EmptyInput { .. }
        | ChannelMismatch { .. }
        | BiasShape { .. }
        | OutputTooSmall { .. }
        | OutputSizeLength { .. }
        | OutputSizeUnreachable { .. }
        | OutputTooLarge { .. }
        | DataLength { .. }
        | SizeOverflow { .. }
        | GradOutputShape { .. }
        | ShapeMismatch { .. }
        | TensorFile { .. }
        | MissingTensor { .. }
        | DType { .. }
        | DTypeMismatch { .. }
        | UnsupportedDType { .. }
        | StateDict { .. }
        | InvalidArgument(_) => PyValueError::new_err(message),
        OutOfMemory(_) | HostOutOfMemory { .. } => PyMemoryError::new_err(message),
        Io { .. } | Write { .. } | NotARegularFile { .. } | SameFileAsInput { .. } | TuneCache { .. } => {
            PyOSError::new_err(message)
        }
        NoAdapter { .. } | DeviceLacks { .. } | DeviceLost(_) | Gpu(_) | Shader { .. } | TooLargeForBinding { .. } => {
            PyRuntimeError::new_err(message)
        }
        _ => PyRuntimeError::new_err(message),
    }
}

/// Runs `work` with the GIL released (other Python threads go on while the GPU computes), turning its error into
/// a Python exception and a panic into a `RuntimeError` with the panic's message.
fn run<T: Send>(py: Python<'_>, work: impl FnOnce() -> convt::Result<T> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(work))) {
        Ok(result) => result.map_err(to_py),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(PyRuntimeError::new_err(format!("convt internal error (a panic in the library): {what}")))
        }
    }
}

/// A host tensor of `dtype` from a float32 array (any layout; copied in logical order), its values rounded to
/// `dtype`.
fn tensor(array: &PyReadonlyArrayDyn<'_, f32>, dtype: DType) -> PyResult<Tensor> {
    let shape = array.shape().to_vec();
    let data: Vec<f32> = match array.as_slice() {
        Ok(values) => values.to_vec(),
        Err(_) => array.as_array().iter().copied().collect(),
    };
    Ok(Tensor::new(shape, data).map_err(to_py)?.to_dtype(dtype))
}

/// A float32 numpy array holding a tensor's values.
fn array<'py>(py: Python<'py>, tensor: Tensor) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let shape = tensor.shape().to_vec();
    PyArray1::from_vec(py, tensor.into_data()).reshape(shape)
}

/// A tensor argument as the package passes it: float32 values (rounded to the call's dtype), or the bits of
/// values of the call's half-precision dtype as uint16.
#[derive(FromPyObject)]
enum Arg<'py> {
    Values(PyReadonlyArrayDyn<'py, f32>),
    Bits(PyReadonlyArrayDyn<'py, u16>),
}

/// An argument read off its array (with the GIL held), ready for a call without it: float32 values as a host
/// tensor of the call's dtype, or half-precision values as their little-endian bytes and shape.
enum Operand {
    Host(Tensor),
    Bytes(Vec<usize>, DType, Vec<u8>),
}

impl Operand {
    fn new(arg: &Arg<'_>, dtype: DType) -> PyResult<Self> {
        match arg {
            Arg::Values(a) => Ok(Operand::Host(tensor(a, dtype)?)),
            Arg::Bits(_) if dtype == DType::F32 => {
                Err(PyValueError::new_err("convt internal error: float16 or bfloat16 bits given to a float32 call"))
            }
            Arg::Bits(a) => {
                let mut bytes = Vec::new();
                let mut push = |v: &u16| bytes.extend_from_slice(&v.to_le_bytes());
                match a.as_slice() {
                    Ok(bits) => bits.iter().for_each(&mut push),
                    Err(_) => a.as_array().iter().for_each(&mut push),
                }
                Ok(Operand::Bytes(a.shape().to_vec(), dtype, bytes))
            }
        }
    }

    fn shape(&self) -> &[usize] {
        match self {
            Operand::Host(t) => t.shape(),
            Operand::Bytes(shape, ..) => shape,
        }
    }

    /// The values as a host tensor (for the float64 CPU reference).
    fn host(&self) -> convt::Result<Tensor> {
        match self {
            Operand::Host(t) => Ok(t.clone()),
            Operand::Bytes(shape, dtype, bytes) => {
                let mut values = vec![0f32; bytes.len() / dtype.size()];
                dtype.decode(bytes, &mut values);
                Ok(Tensor::new(shape.clone(), values)?.to_dtype(*dtype))
            }
        }
    }

    /// The values on the GPU, in the call's dtype.
    fn gpu(&self, ctx: &GpuContext) -> convt::Result<GpuTensor> {
        match self {
            Operand::Host(t) => GpuTensor::upload(ctx, t),
            Operand::Bytes(shape, dtype, bytes) => GpuTensor::from_bytes(ctx, shape, *dtype, bytes),
        }
    }
}

/// A result as the package takes it back: float32 values, or a half-precision result's bits.
enum Output {
    Values(Tensor),
    Bits(Vec<usize>, Vec<u16>),
}

impl Output {
    /// A result on the host: float32 values, or for a half-precision dtype its values' bits.
    fn host(t: Tensor) -> Self {
        match t.dtype() {
            DType::F32 => Output::Values(t),
            dtype => {
                let mut bytes = Vec::new();
                dtype.encode(t.data(), &mut bytes);
                Output::Bits(t.shape().to_vec(), bits(&bytes))
            }
        }
    }

    /// A result on the GPU, read back in its dtype.
    fn gpu(ctx: &GpuContext, t: &GpuTensor) -> convt::Result<Self> {
        match t.dtype() {
            DType::F32 => Ok(Output::Values(t.download(ctx)?)),
            _ => Ok(Output::Bits(t.shape().to_vec(), bits(&t.download_bytes(ctx)?))),
        }
    }

    fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        match self {
            Output::Values(t) => Ok(array(py, t)?.into_any()),
            Output::Bits(shape, bits) => Ok(PyArray1::from_vec(py, bits).reshape(shape)?.into_any()),
        }
    }
}

/// The three gradients as the package takes them back.
struct Gradients([Option<Output>; 3]);

impl Gradients {
    fn host(g: convt::Gradients) -> Self {
        Self([Some(Output::host(g.grad_input)), Some(Output::host(g.grad_weight)), g.grad_bias.map(Output::host)])
    }

    fn gpu(ctx: &GpuContext, g: &convt::gpu::GpuGradients) -> convt::Result<Self> {
        let gb = g.grad_bias.as_ref().map(|b| Output::gpu(ctx, b)).transpose()?;
        Ok(Self([Some(Output::gpu(ctx, &g.grad_input)?), Some(Output::gpu(ctx, &g.grad_weight)?), gb]))
    }

    /// `(grad_input, grad_weight, grad_bias)`, grad_bias `None` without a bias.
    fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        let [gi, gw, gb] = self.0;
        let out = |o: Option<Output>| o.map(|o| o.into_py(py)).transpose();
        (out(gi)?, out(gw)?, out(gb)?).into_pyobject(py)
    }
}

/// Little-endian 16-bit words.
fn bits(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect()
}

fn parse_dtype(dtype: &str) -> PyResult<DType> {
    dtype.parse().map_err(to_py)
}

/// Where a call runs: the GPU (the shared context) or the library's float64 CPU reference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Device {
    Gpu,
    Cpu,
}

fn parse_device(device: &str) -> PyResult<Device> {
    match device.trim().to_ascii_lowercase().as_str() {
        "gpu" => Ok(Device::Gpu),
        "cpu" => Ok(Device::Cpu),
        _ => Err(PyValueError::new_err(format!("device must be \"gpu\" or \"cpu\", got {device:?}"))),
    }
}

#[allow(clippy::too_many_arguments)]
fn options(
    stride: [i64; 2],
    padding: [i64; 2],
    output_padding: [i64; 2],
    groups: i64,
    dilation: [i64; 2],
    bias: bool,
    precision: &str,
) -> PyResult<ConvTranspose2dOptions> {
    Ok(ConvTranspose2dOptions {
        stride,
        padding,
        output_padding,
        dilation,
        groups,
        bias,
        precision: precision.parse().map_err(to_py)?,
    })
}

/// `F.conv_transpose2d` computed in `dtype` (`"f32"`, `"f16"`, `"bf16"`) on `device`.
#[pyfunction]
#[pyo3(signature = (input, weight, bias, stride, padding, output_padding, groups, dilation, precision, device, dtype))]
#[allow(clippy::too_many_arguments)]
fn conv_transpose2d<'py>(
    py: Python<'py>,
    input: Arg<'py>,
    weight: Arg<'py>,
    bias: Option<Arg<'py>>,
    stride: [i64; 2],
    padding: [i64; 2],
    output_padding: [i64; 2],
    groups: i64,
    dilation: [i64; 2],
    precision: &str,
    device: &str,
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = options(stride, padding, output_padding, groups, dilation, bias.is_some(), precision)?;
    let (device, dtype) = (parse_device(device)?, parse_dtype(dtype)?);
    let x = Operand::new(&input, dtype)?;
    let w = Operand::new(&weight, dtype)?;
    let b = bias.as_ref().map(|b| Operand::new(b, dtype)).transpose()?;
    let out = run(py, || {
        // Validated before the context is made: a bad argument is a ValueError on a machine without a GPU too.
        opts.resolve(x.shape(), w.shape(), b.as_ref().map(|b| b.shape()))?;
        match device {
            Device::Cpu => {
                let b = b.as_ref().map(Operand::host).transpose()?;
                convt::cpu::conv_transpose2d(&x.host()?, &w.host()?, b.as_ref(), &opts).map(Output::host)
            }
            Device::Gpu => {
                let ctx = context()?;
                let (xg, wg) = (x.gpu(ctx)?, w.gpu(ctx)?);
                let bg = b.as_ref().map(|b| b.gpu(ctx)).transpose()?;
                Output::gpu(ctx, &convt::conv_transpose2d(ctx, &xg, &wg, bg.as_ref(), &opts)?)
            }
        }
    })?;
    out.into_py(py)
}

/// The gradients of `F.conv_transpose2d` given `grad_output`, computed in `dtype` on `device`:
/// `(grad_input, grad_weight, grad_bias)`, grad_bias `None` without a bias (its values do not enter the
/// gradients, only whether there is one).
#[pyfunction]
#[pyo3(signature = (input, weight, bias, grad_output, stride, padding, output_padding, groups, dilation, precision, device, dtype))]
#[allow(clippy::too_many_arguments)]
fn conv_transpose2d_backward<'py>(
    py: Python<'py>,
    input: Arg<'py>,
    weight: Arg<'py>,
    bias: Option<Arg<'py>>,
    grad_output: Arg<'py>,
    stride: [i64; 2],
    padding: [i64; 2],
    output_padding: [i64; 2],
    groups: i64,
    dilation: [i64; 2],
    precision: &str,
    device: &str,
    dtype: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = options(stride, padding, output_padding, groups, dilation, bias.is_some(), precision)?;
    let (device, dtype) = (parse_device(device)?, parse_dtype(dtype)?);
    let x = Operand::new(&input, dtype)?;
    let w = Operand::new(&weight, dtype)?;
    let b = bias.as_ref().map(|b| Operand::new(b, dtype)).transpose()?;
    let go = Operand::new(&grad_output, dtype)?;
    let grads = run(py, || {
        // Validated before the context is made: a bad argument is a ValueError without a GPU too.
        opts.resolve(x.shape(), w.shape(), b.as_ref().map(|b| b.shape()))?.check_grad_output(go.shape())?;
        match device {
            Device::Cpu => {
                let b = b.as_ref().map(Operand::host).transpose()?;
                let g = convt::cpu::conv_transpose2d_backward(&x.host()?, &w.host()?, b.as_ref(), &go.host()?, &opts)?;
                Ok(Gradients::host(g))
            }
            Device::Gpu => {
                let ctx = context()?;
                let (xg, wg, gog) = (x.gpu(ctx)?, w.gpu(ctx)?, go.gpu(ctx)?);
                let bg = b.as_ref().map(|b| b.gpu(ctx)).transpose()?;
                let g = convt::gpu::conv_transpose2d_backward(ctx, &xg, &wg, bg.as_ref(), &gog, &opts)?;
                Gradients::gpu(ctx, &g)
            }
        }
    })?;
    grads.into_py(py)
}

/// `nn.ConvTranspose2d`'s state: the library's host layer, plus its parameters on the GPU in the dtype of the
/// last GPU call, kept (and prepared for the kernel that runs) until a parameter or the precision changes.
#[pyclass(module = "convt._convt", name = "ConvTranspose2d")]
struct Layer {
    host: convt::ConvTranspose2d,
    gpu: Mutex<Option<(DType, Arc<GpuConvTranspose2d>)>>,
}

impl Layer {
    fn with_host(host: convt::ConvTranspose2d) -> Self {
        Self { host, gpu: Mutex::new(None) }
    }

    /// The layer on the GPU in `dtype`: the one kept from an earlier call, or uploaded now.
    fn on_gpu(&self, ctx: &'static GpuContext, dtype: DType) -> convt::Result<Arc<GpuConvTranspose2d>> {
        let mut slot = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((kept, layer)) = &*slot {
            if *kept == dtype {
                return Ok(layer.clone());
            }
        }
        let layer = Arc::new(if dtype == self.host.dtype() {
            self.host.to_gpu(ctx)?
        } else {
            self.host.clone().to_dtype(dtype).to_gpu(ctx)?
        });
        *slot = Some((dtype, layer.clone()));
        Ok(layer)
    }

    /// Forgets the GPU copy (the parameters or options changed).
    fn invalidate(&mut self) {
        *self.gpu.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The options of a call with `output_size` (the output_padding that reaches it), or the layer's own.
    fn options_for(&self, input: &[usize], output_size: Option<&[usize]>) -> convt::Result<ConvTranspose2dOptions> {
        match output_size {
            Some(size) => self.host.options().for_output_size(input, self.host.weight().shape(), size),
            None => Ok(*self.host.options()),
        }
    }
}

#[pymethods]
impl Layer {
    #[new]
    #[pyo3(signature = (in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias, dilation, precision, seed))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        in_channels: i64,
        out_channels: i64,
        kernel_size: [i64; 2],
        stride: [i64; 2],
        padding: [i64; 2],
        output_padding: [i64; 2],
        groups: i64,
        bias: bool,
        dilation: [i64; 2],
        precision: &str,
        seed: u64,
    ) -> PyResult<Self> {
        let count = |what: &str, v: i64| {
            usize::try_from(v).map_err(|_| PyValueError::new_err(format!("{what} must be non-negative, got {v}")))
        };
        let (cin, cout) = (count("in_channels", in_channels)?, count("out_channels", out_channels)?);
        let opts = options(stride, padding, output_padding, groups, dilation, bias, precision)?;
        let host = run(py, || convt::ConvTranspose2d::new(cin, cout, kernel_size, opts, seed))?;
        Ok(Self::with_host(host))
    }

    #[getter]
    fn weight<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        array(py, self.host.weight().clone())
    }

    fn set_weight(&mut self, weight: PyReadonlyArrayDyn<'_, f32>) -> PyResult<()> {
        let w = tensor(&weight, DType::F32)?;
        self.host.set_weight(w).map_err(to_py)?;
        self.invalidate();
        Ok(())
    }

    #[getter]
    fn bias<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArrayDyn<f32>>>> {
        self.host.bias().map(|b| array(py, b.clone())).transpose()
    }

    fn set_bias(&mut self, bias: PyReadonlyArrayDyn<'_, f32>) -> PyResult<()> {
        let b = tensor(&bias, DType::F32)?;
        self.host.set_bias(b).map_err(to_py)?;
        self.invalidate();
        Ok(())
    }

    #[getter]
    fn precision(&self) -> String {
        self.host.precision().to_string()
    }

    #[setter]
    fn set_precision(&mut self, precision: &str) -> PyResult<()> {
        self.host.set_precision(precision.parse().map_err(to_py)?);
        self.invalidate();
        Ok(())
    }

    /// `(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias, dilation)`, as
    /// `nn.ConvTranspose2d` takes them.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let c = self.host.config();
        let pair = |v: [i64; 2]| (v[0], v[1]);
        (
            c.in_channels,
            c.out_channels,
            (c.kernel_size[0], c.kernel_size[1]),
            pair(c.stride),
            pair(c.padding),
            pair(c.output_padding),
            c.groups,
            c.bias,
            pair(c.dilation),
        )
            .into_pyobject(py)
    }

    /// The forward in `dtype` on `device`; `output_size` as PyTorch's (`[H, W]` or the whole output shape).
    #[pyo3(signature = (input, dtype, device, output_size=None))]
    fn forward<'py>(
        &self,
        py: Python<'py>,
        input: Arg<'py>,
        dtype: &str,
        device: &str,
        output_size: Option<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (device, dtype) = (parse_device(device)?, parse_dtype(dtype)?);
        let x = Operand::new(&input, dtype)?;
        let out = run(py, || {
            let size = output_size.as_deref();
            let host = &self.host;
            // Validated before the context is made: a bad argument is a ValueError without a GPU too.
            let opts = self.options_for(x.shape(), size)?;
            opts.resolve(x.shape(), host.weight().shape(), host.bias().map(|b| b.shape()))?;
            match (device, size) {
                (Device::Cpu, None) => host.clone().to_dtype(dtype).forward_cpu(&x.host()?).map(Output::host),
                (Device::Cpu, Some(size)) => {
                    host.clone().to_dtype(dtype).forward_cpu_with_output_size(&x.host()?, size).map(Output::host)
                }
                (Device::Gpu, _) => {
                    let ctx = context()?;
                    let layer = self.on_gpu(ctx, dtype)?;
                    let xg = x.gpu(ctx)?;
                    match size {
                        None => Output::gpu(ctx, &layer.forward(&xg)?),
                        Some(size) => Output::gpu(ctx, &layer.forward_with_output_size(&xg, size)?),
                    }
                }
            }
        })?;
        out.into_py(py)
    }

    /// `(grad_input, grad_weight, grad_bias)` given the gradient of the output. The output_padding is the one
    /// that gives the forward's output grad_output's size (`for_output_size`), as autograd would have it for the
    /// forward that produced that output; a grad_output no output_padding fits is checked against the layer's
    /// own output size, which names the size expected.
    fn backward<'py>(
        &self,
        py: Python<'py>,
        input: Arg<'py>,
        grad_output: Arg<'py>,
        dtype: &str,
        device: &str,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (device, dtype) = (parse_device(device)?, parse_dtype(dtype)?);
        let x = Operand::new(&input, dtype)?;
        let go = Operand::new(&grad_output, dtype)?;
        let grads = run(py, || {
            let own = *self.host.options();
            let opts = match self.options_for(x.shape(), Some(go.shape())) {
                Ok(opts) => opts,
                Err(_) => own,
            };
            let host = &self.host;
            opts.resolve(x.shape(), host.weight().shape(), host.bias().map(|b| b.shape()))?
                .check_grad_output(go.shape())?;
            match device {
                Device::Cpu => {
                    let layer =
                        convt::ConvTranspose2d::from_weights(host.weight().clone(), host.bias().cloned(), opts)?
                            .to_dtype(dtype);
                    let g = layer.backward_cpu(&x.host()?, &go.host()?)?;
                    Ok(Gradients::host(g))
                }
                Device::Gpu => {
                    let ctx = context()?;
                    let layer = self.on_gpu(ctx, dtype)?;
                    let (xg, gog) = (x.gpu(ctx)?, go.gpu(ctx)?);
                    let g = convt::gpu::conv_transpose2d_backward(ctx, &xg, layer.weight(), layer.bias(), &gog, &opts)?;
                    Gradients::gpu(ctx, &g)
                }
            }
        })?;
        grads.into_py(py)
    }
}

/// What `convt info --json` prints, as JSON text: the adapters found, the one chosen, its limits and features.
#[pyfunction]
fn info_json(py: Python<'_>) -> PyResult<String> {
    run(py, || Ok(convt::gpu::describe(context()?, &GpuOptions::from_env()?).to_string()))
}

#[pymodule]
fn _convt(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(conv_transpose2d, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose2d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(info_json, m)?)?;
    m.add_class::<Layer>()?;
    Ok(())
}
