//! Every WGSL shader parses and validates with naga, with no GPU needed: the library's (`gpu::shader_sources()`)
//! and the CLI's ceiling measurements (src/bin/convt/shaders/, used by `convt bench --ceilings`).

use std::path::{Path, PathBuf};

/// The CLI's shaders, by file name below src/bin/convt/shaders/ (the binary's modules are not reachable from here).
const CLI_SHADERS: [(&str, &str); 4] = [
    ("ceiling_fma.wgsl", include_str!("../src/bin/convt/shaders/ceiling_fma.wgsl")),
    ("ceiling_copy.wgsl", include_str!("../src/bin/convt/shaders/ceiling_copy.wgsl")),
    ("ceiling_coop.wgsl", include_str!("../src/bin/convt/shaders/ceiling_coop.wgsl")),
    ("ceiling_gemm.wgsl", include_str!("../src/bin/convt/shaders/ceiling_gemm.wgsl")),
];

/// Every shader variant to check, as (variant name, WGSL).
fn every_shader() -> Vec<(String, String)> {
    let library = convt::gpu::shader_sources().into_iter().map(|(_, name, source)| (name, source));
    let cli = CLI_SHADERS.iter().map(|(name, source)| (name.to_string(), source.to_string()));
    library.chain(cli).collect()
}

/// Parses and validates `source` as wgpu does before it compiles a module; panics naming `name` on an error.
fn validate(name: &str, source: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module =
        naga::front::wgsl::parse_str(source).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    (module, info)
}

/// `source` validated, with its override constants resolved as a pipeline would: every override without a
/// default gets a small valid value (4 for sizes: a whole vec4 where a size counts the floats of a vec4 array, as
/// the rows kernel's SLAB does; true for flags).
fn resolved(name: &str, source: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let (module, info) = validate(name, source);
    let constants: naga::back::PipelineConstants = module
        .overrides
        .iter()
        .filter(|(_, o)| o.init.is_none())
        .filter_map(|(_, o)| o.name.clone())
        .map(|n| (n, 4.0))
        .collect();
    let (module, info) = naga::back::pipeline_constants::process_overrides(&module, &info, None, &constants)
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    (module.into_owned(), info.into_owned())
}

/// What wgpu does with a shader on Vulkan: resolve the override constants, then write SPIR-V. naga's writer can
/// panic on code that validates (it did on cooperative-matrix stores), so this runs on every variant.
fn translate_to_spirv(name: &str, source: &str) {
    let (module, info) = resolved(name, source);
    let options = naga::back::spv::Options::default();
    let pipeline =
        naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
}

/// The `.wgsl` files below `dir`, recursively.
fn wgsl_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(wgsl_files(&path));
        } else if path.extension().is_some_and(|e| e == "wgsl") {
            out.push(path);
        }
    }
    out
}

#[test]
fn every_shader_validates_with_naga() {
    let sources = every_shader();
    assert!(sources.len() > CLI_SHADERS.len());
    for (name, source) in &sources {
        validate(name, source);
    }
}

#[test]
fn every_shader_file_is_registered() {
    // A shader added under shaders/ must be in gpu::shader_sources() (named by its path below shaders/), and one
    // added under src/bin/convt/shaders/ in CLI_SHADERS, so the tests here see it.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("shaders");
    let files = wgsl_files(&root);
    assert!(files.len() > 20, "{files:?}");
    let sources = convt::gpu::shader_sources();
    for path in files {
        let name = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        assert!(sources.iter().any(|(file, _, _)| *file == name), "{name} is not in gpu::shader_sources()");
    }
    let cli_root = manifest.join("src/bin/convt/shaders");
    let cli_files = wgsl_files(&cli_root);
    assert_eq!(cli_files.len(), CLI_SHADERS.len(), "{cli_files:?}");
    for path in cli_files {
        let name = path.strip_prefix(&cli_root).unwrap().to_string_lossy().into_owned();
        assert!(CLI_SHADERS.iter().any(|(file, _)| *file == name), "{name} is not in CLI_SHADERS");
    }
}

#[test]
fn every_generated_shader_fills_every_marker_line() {
    // The generators fill their templates' `//#NAME` lines through one helper (`fill_markers` in src/gpu/kernel.rs);
    // a marker line left over would be a part the variant lacks.
    for (name, source) in &every_shader() {
        let left: Vec<&str> = source.lines().filter(|l| l.trim_start().starts_with("//#")).collect();
        assert!(left.is_empty(), "{name}: marker lines left: {left:?}");
    }
}

#[test]
fn every_shader_translates_to_spirv() {
    for (name, source) in &every_shader() {
        translate_to_spirv(name, source);
    }
}

/// What wgpu does with a shader on Metal and on DX12: resolve the overrides, then write MSL (3.0) or HLSL
/// (shader model 6.2, the first with 16-bit types). `Err` carries the writer's message; a panic is caught and
/// reported as one.
fn translate_to_msl_and_hlsl(name: &str, source: &str) -> (Result<(), String>, Result<(), String>) {
    let (module, info) = resolved(name, source);
    let entry_point = Some((naga::ShaderStage::Compute, "main".to_string()));
    let caught = |r: std::thread::Result<Result<(), String>>| r.unwrap_or_else(|_| Err("the writer panicked".into()));
    let msl = caught(std::panic::catch_unwind(|| {
        let options =
            naga::back::msl::Options { lang_version: (3, 0), fake_missing_bindings: true, ..Default::default() };
        let pipeline = naga::back::msl::PipelineOptions { entry_point: entry_point.clone(), ..Default::default() };
        naga::back::msl::write_string(&module, &info, &options, &pipeline).map(drop).map_err(|e| e.to_string())
    }));
    let hlsl = caught(std::panic::catch_unwind(|| {
        let options = naga::back::hlsl::Options {
            shader_model: naga::back::hlsl::ShaderModel::V6_2,
            fake_missing_bindings: true,
            ..Default::default()
        };
        let pipeline = naga::back::hlsl::PipelineOptions { entry_point: entry_point.clone() };
        let mut out = String::new();
        naga::back::hlsl::Writer::new(&mut out, &options, &pipeline)
            .write(&module, &info, None)
            .map(drop)
            .map_err(|e| e.to_string())
    }));
    (msl, hlsl)
}

#[test]
fn every_shader_translates_to_msl_and_every_portable_one_to_hlsl() {
    // Portability without those GPUs: every variant translates to MSL. Every variant but the cooperative-matrix
    // ones translates to HLSL; those fail with the writer's error (naga writes no cooperative matrices in HLSL), and
    // no DX12 adapter runs them: they need `Features::EXPERIMENTAL_COOPERATIVE_MATRIX`, which wgpu's DX12 backend
    // does not offer, and the selector takes them only where the adapter offers it with 16x16x16 f16 -> f32
    // matrices and 32-wide subgroups (`gpu::coop_f16_supported`, which Metal's 8x8 simdgroup matrices do not meet).
    let (mut coop, mut portable) = (0, 0);
    for (name, source) in &every_shader() {
        let (msl, hlsl) = translate_to_msl_and_hlsl(name, source);
        assert!(msl.is_ok(), "{name} to MSL: {}", msl.unwrap_err());
        if source.contains("enable wgpu_cooperative_matrix;") {
            coop += 1;
            let e =
                hlsl.expect_err(&format!("{name}: HLSL has cooperative matrices now: the selector could take them"));
            assert!(e.contains("CooperativeMatrix"), "{name} to HLSL: {e}");
        } else {
            portable += 1;
            assert!(hlsl.is_ok(), "{name} to HLSL: {}", hlsl.unwrap_err());
        }
    }
    assert!(coop > 0 && portable > coop, "{coop} cooperative-matrix variants, {portable} others");
}
