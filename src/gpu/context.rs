//! The GPU context: chooses an adapter, opens the device with the adapter's own limits, turns wgpu's errors
//! into [`ConvtError`]s, and owns the caches (shader modules, pipelines, buffers) that every call reuses.
//! Build it once and share it (`&GpuContext` is `Send + Sync`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{ConvtError, Result};
use crate::gpu::memory::{self, BufferPool, Uniforms};

/// How shader modules are created. convt's kernels bound every index themselves (clamped loads, enumerated
/// taps, the slice plan) and are checked against the float64 reference with poisoned outputs in both modes, so
/// they run trusted by default: wgpu's own checks (clamping of dynamically indexed arrays, loop bounding) cost the
/// register-tile kernels most of their speed on NVIDIA (docs/PERFORMANCE.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShaderChecks {
    /// wgpu's runtime checks on (bounds clamping, loop bounding): `CONVT_SHADER_CHECKS=checked`; the test
    /// suite's second pass runs this way.
    Checked,
    /// `create_shader_module_trusted` with the checks off (bounds checks, loop bounding, integer-division
    /// checks): the default.
    #[default]
    Trusted,
}

/// Options for [`GpuContext::with_options`]. [`GpuOptions::from_env`] reads them from the environment.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Backends to consider (`CONVT_BACKEND=vulkan|metal|dx12|gl`, comma separated, else wgpu's own
    /// `WGPU_BACKEND`); all by default.
    pub backends: Option<wgpu::Backends>,
    /// The adapter: a number picks that entry of [`list_adapters`] (the order `convt info` numbers them in, which
    /// tells identical GPUs apart); any other text the first adapter whose name contains it, case-insensitive
    /// (`CONVT_ADAPTER`, else wgpu's own `WGPU_ADAPTER_NAME`; the CLI's `--adapter`).
    pub adapter: Option<String>,
    /// Cap on the bytes of one storage binding, below the adapter's own limit (`CONVT_MAX_BINDING_BYTES`).
    /// Used to exercise the splitting of large tensors on small test problems.
    pub max_binding_bytes: Option<u64>,
    /// Runtime checks in shaders (`CONVT_SHADER_CHECKS=checked|trusted`).
    pub shader_checks: ShaderChecks,
    /// Fill every output with NaN before a kernel writes it, so that unwritten elements show (tests).
    pub poison_outputs: bool,
    /// Run every convolution with this algorithm instead of the selector's choice (`CONVT_STRATEGY=direct` or a
    /// GEMM tile name such as `gemm_128x128x16_8x8`): for tests and tuning.
    pub strategy: Option<crate::gpu::Strategy>,
    /// The autotuner's cache file (`CONVT_TUNE_CACHE`); `None`: the default location (see [`crate::gpu::tune`]).
    pub tune_cache: Option<std::path::PathBuf>,
    /// Longest wait for the GPU before giving up with an error instead of hanging (default 10 minutes).
    pub timeout: Option<Duration>,
    /// Most bytes of tensors the context keeps on the device at once (`CONVT_MEMORY_BUDGET`, bytes); a request
    /// beyond it is refused with [`ConvtError::OutOfMemory`] before anything is allocated. `None`: on a
    /// software (CPU) adapter, 3/4 of the memory available when the context is made (so an oversized request
    /// fails instead of the process being killed), elsewhere no budget (the driver's own out-of-memory error
    /// is reported instead).
    pub memory_budget: Option<u64>,
}

impl GpuOptions {
    /// Parses `vulkan`, `metal`, `dx12`, `gl` (comma separated) into wgpu backends.
    pub fn parse_backends(text: &str) -> Result<wgpu::Backends> {
        let mut backends = wgpu::Backends::empty();
        for part in text.split(',').map(|p| p.trim().to_ascii_lowercase()) {
            backends |= match part.as_str() {
                "vulkan" | "vk" => wgpu::Backends::VULKAN,
                "metal" | "mtl" => wgpu::Backends::METAL,
                "dx12" | "d3d12" => wgpu::Backends::DX12,
                "gl" | "gles" | "opengl" => wgpu::Backends::GL,
                "all" => wgpu::Backends::all(),
                _ => {
                    return Err(ConvtError::InvalidArgument(format!(
                        "unknown GPU backend `{part}` (expected vulkan, metal, dx12, gl or all)"
                    )))
                }
            };
        }
        Ok(backends)
    }

    /// Options from the environment: `CONVT_*` variables, and wgpu's `WGPU_BACKEND` and `WGPU_ADAPTER_NAME` where
    /// convt's own (`CONVT_BACKEND`, `CONVT_ADAPTER`) are not set.
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut opts = Self::default();
        if let Some(b) = var("CONVT_BACKEND") {
            opts.backends = Some(Self::parse_backends(&b)?);
        } else if let Some(b) = var("WGPU_BACKEND") {
            opts.backends =
                Some(Self::parse_backends(&b).map_err(|e| ConvtError::InvalidArgument(format!("WGPU_BACKEND: {e}")))?);
        }
        opts.adapter = var("CONVT_ADAPTER").or_else(|| var("WGPU_ADAPTER_NAME"));
        if let Some(v) = var("CONVT_MAX_BINDING_BYTES") {
            let bytes = v.trim().parse::<u64>().map_err(|_| {
                ConvtError::InvalidArgument(format!("CONVT_MAX_BINDING_BYTES must be a byte count, got `{v}`"))
            })?;
            opts.max_binding_bytes = Some(bytes);
        }
        if let Some(v) = var("CONVT_MEMORY_BUDGET") {
            let bytes = v.trim().parse::<u64>().map_err(|_| {
                ConvtError::InvalidArgument(format!("CONVT_MEMORY_BUDGET must be a byte count, got `{v}`"))
            })?;
            opts.memory_budget = Some(bytes);
        }
        opts.tune_cache = var("CONVT_TUNE_CACHE").map(std::path::PathBuf::from);
        if let Some(v) = var("CONVT_STRATEGY") {
            let all = crate::gpu::Strategy::all();
            opts.strategy = Some(all.iter().copied().find(|s| s.name() == v.trim()).ok_or_else(|| {
                let names: Vec<String> = all.iter().map(|s| s.name()).collect();
                ConvtError::InvalidArgument(format!("CONVT_STRATEGY `{v}` is not one of {}", names.join(", ")))
            })?);
        }
        if let Some(v) = var("CONVT_SHADER_CHECKS") {
            opts.shader_checks = match v.trim().to_ascii_lowercase().as_str() {
                "checked" => ShaderChecks::Checked,
                "trusted" => ShaderChecks::Trusted,
                _ => {
                    return Err(ConvtError::InvalidArgument(format!(
                        "CONVT_SHADER_CHECKS must be `checked` or `trusted`, got `{v}`"
                    )))
                }
            };
        }
        Ok(opts)
    }
}

/// What `convt info` shows of one adapter.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AdapterSummary {
    /// The adapter's name as the driver reports it ([`GpuOptions::adapter`] matches against it).
    pub name: String,
    /// The wgpu backend, e.g. `Vulkan`.
    pub backend: String,
    /// The kind of device, e.g. `DiscreteGpu` or `Cpu` (a software driver).
    pub device_type: String,
    /// The driver's name.
    pub driver: String,
    /// The driver's version and other details, as the driver reports them.
    pub driver_info: String,
}

impl From<&wgpu::AdapterInfo> for AdapterSummary {
    fn from(i: &wgpu::AdapterInfo) -> Self {
        Self {
            name: i.name.clone(),
            backend: format!("{:?}", i.backend),
            device_type: format!("{:?}", i.device_type),
            driver: i.driver.clone(),
            driver_info: i.driver_info.clone(),
        }
    }
}

/// What `convt info --json` reports: the adapters `options` find, in the order `GpuOptions::adapter` numbers them
/// (`adapters`), the one `ctx` runs on (`chosen`), the limits convt works within (`limits`) and the adapter's
/// features convt uses (`features`).
pub fn describe(ctx: &GpuContext, options: &GpuOptions) -> serde_json::Value {
    let adapters: Vec<AdapterSummary> =
        list_adapters(options).iter().map(|a| AdapterSummary::from(&a.get_info())).collect();
    let l = ctx.device().limits();
    let features: Vec<&str> = [
        ("TIMESTAMP_QUERY", wgpu::Features::TIMESTAMP_QUERY),
        ("TIMESTAMP_QUERY_INSIDE_PASSES", wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        ("SUBGROUP", wgpu::Features::SUBGROUP),
        ("SHADER_F16", wgpu::Features::SHADER_F16),
        ("SHADER_I16", wgpu::Features::SHADER_I16),
        ("EXPERIMENTAL_COOPERATIVE_MATRIX", wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
    ]
    .into_iter()
    .filter(|(_, flag)| ctx.adapter().features().contains(*flag))
    .map(|(name, _)| name)
    .collect();
    serde_json::json!({
        "adapters": adapters,
        "chosen": AdapterSummary::from(ctx.adapter_info()),
        "limits": {
            "max_storage_buffer_binding_size": l.max_storage_buffer_binding_size,
            "max_buffer_size": l.max_buffer_size,
            "max_compute_workgroup_storage_size": l.max_compute_workgroup_storage_size,
            "max_compute_invocations_per_workgroup": l.max_compute_invocations_per_workgroup,
            "max_compute_workgroups_per_dimension": l.max_compute_workgroups_per_dimension,
            "subgroup_min_size": ctx.adapter_info().subgroup_min_size,
            "subgroup_max_size": ctx.adapter_info().subgroup_max_size,
            "binding_limit_used": ctx.binding_limit(),
        },
        "features": features,
    })
}

/// Every adapter wgpu finds for these options' backends, in preference order (the first is the one chosen).
/// Without a backend named, the primary ones (Vulkan, Metal, DX12) are asked first and GL only if they find
/// nothing, which keeps GL's probing (and its noise) off machines that have a proper driver.
pub fn list_adapters(opts: &GpuOptions) -> Vec<wgpu::Adapter> {
    let find = |backends: wgpu::Backends| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = backends;
        let instance = wgpu::Instance::new(desc);
        pollster::block_on(instance.enumerate_adapters(backends))
    };
    let mut adapters = match opts.backends {
        Some(b) => find(b),
        None => {
            let primary = find(wgpu::Backends::PRIMARY);
            if primary.is_empty() {
                find(wgpu::Backends::all())
            } else {
                primary
            }
        }
    };
    adapters.sort_by_key(|a| preference(&a.get_info()));
    adapters
}

/// Lower is better: discrete GPUs first, then integrated, virtual, software; Vulkan before other backends.
fn preference(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan => 0,
        wgpu::Backend::Metal | wgpu::Backend::Dx12 => 1,
        _ => 2,
    };
    (kind, backend)
}

/// Whether an adapter can run the kernels of src/gpu/forward/coop.rs: f16 shaders, cooperative matrices of 16x16x16
/// f16 x f16 -> f32, and subgroups of exactly 32 invocations (the kernels' tiling assumes it).
pub fn coop_f16_supported(adapter: &wgpu::Adapter) -> bool {
    let f = adapter.features();
    let info = adapter.get_info();
    f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16)
        && info.subgroup_min_size == crate::gpu::wgsl::coop::SUBGROUP
        && info.subgroup_max_size == crate::gpu::wgsl::coop::SUBGROUP
        && adapter.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        })
}

/// The compute limits convt needs of a device: wgpu's defaults for these (`wgpu::Limits::default()`). With them the
/// selector finds a kernel for every problem (tiles that need more workgroup memory are left out), and the test
/// suite runs every option forward and backward at them ([`GpuContext::from_wgpu`] checks them).
pub const REQUIRED_LIMITS: wgpu::Limits = wgpu::Limits {
    max_compute_invocations_per_workgroup: 256,
    max_compute_workgroup_size_x: 256,
    max_compute_workgroup_storage_size: 16384,
    max_storage_buffers_per_shader_stage: 8,
    max_compute_workgroups_per_dimension: 65535,
    max_bind_groups: 4,
    ..wgpu::Limits::downlevel_webgl2_defaults()
};

/// Errors that wgpu reports outside an error scope (and device loss) land here, to be returned by the next call.
#[derive(Default)]
struct DeviceHealth {
    lost: Option<String>,
    uncaptured: Option<String>,
}

/// The GPU context: the device and queue convt runs on, with the caches every call reuses. Make one per process and
/// share it: cloning is a reference count, and clones (on any thread) share the device, the caches and the tuning
/// cache. [`GpuContext::new`] opens a device of its own; [`GpuContext::from_wgpu`] runs on an application's.
#[derive(Clone)]
pub struct GpuContext(Arc<ContextState>);

impl std::fmt::Debug for GpuContext {
    /// The adapter (name, backend, driver) and the limits convt works within.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = &self.0.info;
        f.debug_struct("GpuContext")
            .field("adapter", &info.name)
            .field("backend", &info.backend)
            .field("driver", &format!("{} {}", info.driver, info.driver_info))
            .field("binding_limit", &self.0.binding_limit)
            .field("memory_budget", &self.0.memory_budget)
            .field("options", &self.0.options)
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for GpuContext {
    type Target = ContextState;
    fn deref(&self) -> &ContextState {
        &self.0
    }
}

/// What a [`GpuContext`] shares among its clones.
#[doc(hidden)]
pub struct ContextState {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    adapter: wgpu::Adapter,
    info: wgpu::AdapterInfo,
    options: GpuOptions,
    binding_limit: u64,
    memory_budget: Option<u64>,
    health: Arc<Mutex<DeviceHealth>>,
    modules: Mutex<HashMap<String, Arc<wgpu::ShaderModule>>>,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    /// State the kernels keep on the GPU from one call to the next, one i32 each: see [`GpuContext::kept_i32`].
    kept: Mutex<HashMap<String, wgpu::Buffer>>,
    pub(crate) pool: BufferPool,
    pub(crate) uniforms: Uniforms,
    /// Bound where a kernel declares a binding it does not read (a bias the call has not): never written and
    /// never pooled, so any number of calls may bind it at once.
    pub(crate) unused_binding: wgpu::Buffer,
    tuned: crate::gpu::tune::TuneCache,
    /// Whether the tensor-core kernels run here ([`GpuContext::has_coop_f16`]).
    coop: bool,
    /// Times every dispatch while attached ([`GpuContext::set_profiler`]).
    profiler: Mutex<Option<Arc<crate::gpu::profile::Profiler>>>,
}

impl GpuContext {
    /// A context with options from the environment (see [`GpuOptions::from_env`]).
    pub fn new() -> Result<Self> {
        Self::with_options(GpuOptions::from_env()?)
    }

    /// A context on the adapter `options` pick: the first of [`list_adapters`], or the one
    /// [`GpuOptions::adapter`] names (else [`ConvtError::NoAdapter`]), with a device opened with the adapter's
    /// own limits.
    pub fn with_options(options: GpuOptions) -> Result<Self> {
        let adapters = list_adapters(&options);
        let found: Vec<String> =
            adapters.iter().map(|a| format!("{} ({:?})", a.get_info().name, a.get_info().backend)).collect();
        let adapter = match &options.adapter {
            Some(want) => match want.trim().parse::<usize>() {
                Ok(index) => adapters.into_iter().nth(index).ok_or_else(|| ConvtError::NoAdapter {
                    detail: format!(" at index {index} (found {}: {})", found.len(), found.join(", ")),
                })?,
                Err(_) => {
                    let want = want.to_lowercase();
                    adapters.into_iter().find(|a| a.get_info().name.to_lowercase().contains(&want)).ok_or_else(
                        || ConvtError::NoAdapter {
                            detail: format!(" whose name contains `{want}` (found: {})", found.join(", ")),
                        },
                    )?
                }
            },
            None => adapters.into_iter().next().ok_or_else(|| ConvtError::NoAdapter {
                detail: match options.backends {
                    Some(b) => format!(" for backends {b:?}"),
                    None => String::new(),
                },
            })?,
        };
        let info = adapter.get_info();
        log::info!("convt: using adapter {} ({:?}, {:?})", info.name, info.backend, info.device_type);

        // The adapter's own limits: wgpu's defaults cap storage bindings at 128 MiB.
        let limits = adapter.limits();
        // Timestamps for the benchmark; f16 and cooperative matrices for precision `fast`, f16 and 16-bit integer
        // storage for half-precision tensors (only used by the kernels that need them, which run only where the
        // device has them: src/gpu/wgsl/operands.rs).
        let coop = coop_f16_supported(&adapter);
        let wanted = wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES
            | wgpu::Features::SHADER_F16
            | wgpu::Features::SHADER_I16;
        let mut features = adapter.features() & wanted;
        if coop {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("convt"),
            required_features: features,
            required_limits: limits.clone(),
            // SAFETY: the only experimental feature requested is cooperative matrices, used only by the
            // kernels of src/gpu/forward/coop.rs (validated by naga in the tests, checked against the reference on the
            // GPUs that have it).
            experimental_features: if coop {
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        }))
        .map_err(|e| ConvtError::Gpu(format!("could not open device on {}: {e}", info.name)))?;
        Self::on_device(adapter, device, queue, options, true)
    }

    /// A context on an application's own wgpu device, so that convt's tensors and the application's buffers live
    /// on one device and pass between them without copies ([`crate::GpuTensor::from_buffer`],
    /// [`crate::GpuTensor::buffer`]). `adapter` is the one `device` was requested from. `options` apply as in
    /// [`Self::with_options`], but for `backends` and `adapter`, which the application has chosen.
    ///
    /// What the device must offer is checked here: the compute limits of [`REQUIRED_LIMITS`] (wgpu's defaults
    /// meet them), else [`ConvtError::DeviceLacks`] names each one missing. Features are optional, and convt uses
    /// those the device was opened with: `SHADER_F16` for precision `fast` without tensor cores and for reading f16
    /// tensors as stored, `SHADER_I16` for writing f16 and bf16 tensors with 16-bit stores,
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` with `SHADER_F16` (on an adapter with 16x16x16 f16 products and
    /// subgroups of 32) for the tensor-core kernels, `TIMESTAMP_QUERY` for [`crate::GpuTimer`]. Larger limits
    /// (storage binding size, workgroup memory) let convt bind larger tensors and run larger tiles.
    ///
    /// The device's error handler and device-lost callback stay the application's: convt installs neither, and
    /// takes its own errors from error scopes around its calls.
    pub fn from_wgpu(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        options: GpuOptions,
    ) -> Result<Self> {
        let have = device.limits();
        let need = REQUIRED_LIMITS;
        let missing: Vec<String> = [
            (
                "max_compute_invocations_per_workgroup",
                need.max_compute_invocations_per_workgroup,
                have.max_compute_invocations_per_workgroup,
            ),
            ("max_compute_workgroup_size_x", need.max_compute_workgroup_size_x, have.max_compute_workgroup_size_x),
            (
                "max_compute_workgroup_storage_size",
                need.max_compute_workgroup_storage_size,
                have.max_compute_workgroup_storage_size,
            ),
            (
                "max_storage_buffers_per_shader_stage",
                need.max_storage_buffers_per_shader_stage,
                have.max_storage_buffers_per_shader_stage,
            ),
            (
                "max_compute_workgroups_per_dimension",
                need.max_compute_workgroups_per_dimension,
                have.max_compute_workgroups_per_dimension,
            ),
            ("max_bind_groups", need.max_bind_groups, have.max_bind_groups),
        ]
        .into_iter()
        .filter(|(_, need, have)| have < need)
        .map(|(name, need, have)| format!("{name} {need} (it has {have})"))
        .collect();
        if !missing.is_empty() {
            return Err(ConvtError::DeviceLacks { missing: missing.join(", ") });
        }
        Self::on_device(adapter, device, queue, options, false)
    }

    /// The context on an opened device; `own`: convt opened it, and installs its error handler and device-lost
    /// callback (on an application's device those belong to the application).
    fn on_device(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        options: GpuOptions,
        own: bool,
    ) -> Result<Self> {
        let info = adapter.get_info();
        let limits = device.limits();
        let health = Arc::new(Mutex::new(DeviceHealth::default()));
        if own {
            let h = health.clone();
            device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                log::error!("convt: uncaptured wgpu error: {e}");
                lock(&h).uncaptured.get_or_insert_with(|| e.to_string());
            }));
            let h = health.clone();
            device.set_device_lost_callback(move |reason, message| {
                lock(&h).lost.get_or_insert_with(|| format!("{reason:?}: {message}"));
            });
        }
        let coop =
            device.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16)
                && coop_f16_supported(&adapter);

        let adapter_limit = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let binding_limit = options.max_binding_bytes.map_or(adapter_limit, |m| m.min(adapter_limit)) & !3;
        if binding_limit < 4 {
            return Err(ConvtError::InvalidArgument(format!("binding limit of {binding_limit} bytes is too small")));
        }
        // The tuning cache is advice: an unreadable one is reported and ignored.
        let tuned = match options.tune_cache.clone().or_else(crate::gpu::tune::default_path) {
            Some(path) => crate::gpu::tune::TuneCache::load(&path).unwrap_or_else(|e| {
                log::warn!("convt: ignoring the tuning cache: {e}");
                Default::default()
            }),
            None => Default::default(),
        };
        let memory_budget = options.memory_budget.or_else(|| match info.device_type {
            wgpu::DeviceType::Cpu => crate::tensor::available_host_memory().map(|b| b / 4 * 3),
            _ => None,
        });
        let unused_binding = memory::plain_buffer(&device, "convt unused binding", 16, memory::STORAGE);
        Ok(Self(Arc::new(ContextState {
            unused_binding,
            device,
            queue,
            adapter,
            info,
            options,
            binding_limit,
            memory_budget,
            health,
            modules: Mutex::new(HashMap::new()),
            pipelines: Mutex::new(HashMap::new()),
            kept: Mutex::new(HashMap::new()),
            pool: BufferPool::default(),
            uniforms: Uniforms::default(),
            tuned,
            coop,
            profiler: Mutex::new(None),
        })))
    }

    /// Attaches `profiler` (or detaches it, with `None`): while attached, every dispatch convt records on this
    /// context is timed on its own ([`crate::gpu::Profiler`]).
    pub fn set_profiler(&self, profiler: Option<Arc<crate::gpu::profile::Profiler>>) {
        *lock(&self.profiler) = profiler;
    }

    /// A guard that names no part of a call again when it goes (see [`GpuContext::profile_section`]), so that a call
    /// that fails between its parts leaves no name behind for later dispatches.
    pub(crate) fn profile_sections(&self) -> crate::gpu::profile::Sections<'_> {
        crate::gpu::profile::Sections(self)
    }

    /// Names the part of a call the dispatches recorded next belong to, for an attached profiler (`None`: no part).
    pub(crate) fn profile_section(&self, section: Option<&'static str>) {
        if let Some(p) = lock(&self.profiler).as_ref() {
            p.set_section(section);
        }
    }

    /// Encodes one dispatch of `pipeline` (`dispatch` records it into `pass`), timed by the attached profiler if
    /// there is one, under the pipeline's name.
    pub(crate) fn dispatch_in(
        &self,
        pass: &mut wgpu::ComputePass<'_>,
        pipeline: &wgpu::ComputePipeline,
        dispatch: impl FnOnce(&mut wgpu::ComputePass<'_>),
    ) {
        let profiler = lock(&self.profiler).clone();
        match profiler {
            None => dispatch(pass),
            Some(p) => {
                let name = lock(&self.pipelines)
                    .iter()
                    .find(|(_, q)| std::ptr::eq(Arc::as_ptr(q), pipeline))
                    .map_or_else(|| "(unnamed pipeline)".to_string(), |(name, _)| name.clone());
                p.around(pass, name, dispatch);
            }
        }
    }

    /// Whether the device runs f16 shaders (`SHADER_F16`).
    pub fn has_f16(&self) -> bool {
        self.device.features().contains(wgpu::Features::SHADER_F16)
    }

    /// Whether the device's shaders store 16-bit integers (`SHADER_I16`): how kernels write half-precision
    /// tensors where it has them (src/gpu/wgsl/operands.rs).
    pub fn has_i16(&self) -> bool {
        self.device.features().contains(wgpu::Features::SHADER_I16)
    }

    /// Whether the device runs the cooperative-matrix kernels: opened with cooperative matrices and f16, on an
    /// adapter that has what they need (f16 shaders, 16x16x16 f16 cooperative matrices, subgroups of 32).
    pub fn has_coop_f16(&self) -> bool {
        self.coop
    }

    /// The adapter's name, backend, device type and driver.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }
    /// The wgpu adapter the device was opened on.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }
    /// The options the context was made with.
    pub fn options(&self) -> &GpuOptions {
        &self.options
    }
    /// The wgpu device convt runs on (shared with the application when made by [`Self::from_wgpu`]).
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }
    /// The queue convt submits its work to.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }
    /// The most bytes of tensors kept on the device at once, if bounded (see [`GpuOptions::memory_budget`]).
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget
    }

    /// The most bytes one storage binding may hold here (the adapter's limit, or the configured cap).
    pub fn binding_limit(&self) -> u64 {
        self.binding_limit
    }

    /// Runs `f`, capturing the wgpu errors it raises (validation, out of memory, internal) as a [`ConvtError`].
    pub(crate) fn scoped<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.check_health()?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let result = f();
        let errors = [internal.pop(), validation.pop(), oom.pop()].map(pollster::block_on);
        // The innermost scope's error first: it is the most specific.
        if let Some(e) = errors.into_iter().flatten().next() {
            // A uniform block made in the failed scope may be unusable: none made so far is kept.
            self.uniforms.clear();
            return Err(match e {
                wgpu::Error::OutOfMemory { .. } => ConvtError::OutOfMemory(e.to_string()),
                other => ConvtError::Gpu(other.to_string()),
            });
        }
        let value = result?;
        self.check_health()?;
        Ok(value)
    }

    fn check_health(&self) -> Result<()> {
        let mut h = lock(&self.health);
        if let Some(lost) = &h.lost {
            return Err(ConvtError::DeviceLost(lost.clone()));
        }
        if let Some(e) = h.uncaptured.take() {
            return Err(ConvtError::Gpu(e));
        }
        Ok(())
    }

    /// Blocks until the queue is idle (bounded by the configured timeout).
    pub(crate) fn wait(&self) -> Result<()> {
        let timeout = self.options.timeout.unwrap_or(Duration::from_secs(600));
        self.device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(timeout) })
            .map_err(|e| ConvtError::Gpu(format!("waiting for the GPU: {e}")))?;
        self.check_health()
    }

    /// The shader module `name` (WGSL `source`), created once per context, validated by wgpu.
    pub(crate) fn module(&self, name: &str, source: &str) -> Result<Arc<wgpu::ShaderModule>> {
        self.module_with(name, || source.to_owned())
    }

    /// [`Self::module`] for a generated shader: `source` runs only when the module is not cached yet.
    pub(crate) fn module_with(&self, name: &str, source: impl FnOnce() -> String) -> Result<Arc<wgpu::ShaderModule>> {
        if let Some(m) = lock(&self.modules).get(name) {
            return Ok(m.clone());
        }
        let desc =
            wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(source().into()) };
        let module = self
            .scoped(|| {
                Ok(match self.options.shader_checks {
                    ShaderChecks::Checked => self.device.create_shader_module(desc),
                    // SAFETY: only the kernels in shaders/, whose every index is bounded by the slice plan and
                    // whose results the test suite checks against the CPU reference with poisoned outputs.
                    ShaderChecks::Trusted => unsafe {
                        self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
                    },
                })
            })
            .map_err(|e| ConvtError::Shader { name: name.into(), message: e.to_string() })?;
        let module = Arc::new(module);
        lock(&self.modules).insert(name.to_owned(), module.clone());
        Ok(module)
    }

    /// A one-i32 storage buffer kept under `key` for the context's lifetime, holding `initial` when first made: a
    /// value that one call's shaders leave for the next call's (the padded-NHWC kernel's guess of its input's
    /// scale). Calls on one queue run in order, so each reads what the one before it wrote.
    pub(crate) fn kept_i32(&self, key: String, initial: i32) -> wgpu::Buffer {
        lock(&self.kept)
            .entry(key)
            .or_insert_with(|| {
                let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
                memory::buffer_with(&self.device, "convt kept value", bytemuck::bytes_of(&initial), usage)
            })
            .clone()
    }

    /// A compute pipeline for `module` specialised by its override `constants`, cached under `key`.
    pub(crate) fn pipeline(
        &self,
        key: String,
        module: &wgpu::ShaderModule,
        constants: &[(&str, f64)],
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = lock(&self.pipelines).get(&key) {
            return Ok(p.clone());
        }
        let pipeline = self.scoped(|| {
            Ok(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&key),
                layout: None,
                module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            }))
        })?;
        let pipeline = Arc::new(pipeline);
        lock(&self.pipelines).insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// The tuning cache read when the context was made.
    pub fn tuned(&self) -> &crate::gpu::tune::TuneCache {
        &self.tuned
    }

    /// The least bound on the bytes of idle buffers the context keeps for reuse ([`GpuContext::idle_limit`]).
    pub const MAX_IDLE_BYTES: u64 = crate::gpu::memory::MAX_IDLE_BYTES;

    /// The most bytes of idle buffers the context keeps for reuse now (the bound on
    /// [`GpuContext::buffer_stats`]'s last value): [`GpuContext::MAX_IDLE_BYTES`], or more where two consecutive
    /// calls held more scratch together (so that each finds its scratch idle when it runs again).
    pub fn idle_limit(&self) -> u64 {
        self.pool.idle_limit()
    }

    /// Frees the idle buffers kept for reuse (as `torch.cuda.empty_cache()` does) and starts the idle limit again
    /// from [`GpuContext::MAX_IDLE_BYTES`]; tensors, prepared weights and work in flight keep theirs.
    pub fn release_idle_memory(&self) {
        self.pool.release_idle()
    }

    /// (buffers created so far, idle buffers kept for reuse, their bytes).
    pub fn buffer_stats(&self) -> (u64, usize, u64) {
        self.pool.stats()
    }

    /// The most device memory convt's buffers held at once since the last [`GpuContext::reset_peak_memory`]: its
    /// tensors, scratch, prepared weights and staging (`convt bench` reports it per call).
    pub fn peak_memory(&self) -> u64 {
        self.pool.peak_bytes()
    }

    /// Bytes of convt's buffers in use now (what [`GpuContext::peak_memory`] counts).
    pub fn buffer_bytes_in_use(&self) -> u64 {
        self.pool.live_bytes()
    }

    /// Waits until the GPU has run everything submitted so far.
    pub fn wait_idle(&self) -> Result<()> {
        self.wait()
    }

    /// Starts [`GpuContext::peak_memory`] anew from what is held now.
    pub fn reset_peak_memory(&self) {
        self.pool.reset_peak()
    }

    /// Bytes held by live GPU tensors (what the memory budget counts).
    pub fn tensor_bytes(&self) -> u64 {
        self.pool.tensor_bytes()
    }

    /// Pipelines cached so far (bounded by the distinct shapes used).
    pub fn cached_pipelines(&self) -> usize {
        lock(&self.pipelines).len()
    }
}

/// Locks a mutex, recovering the data if another thread panicked while holding it (the caches stay valid).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
