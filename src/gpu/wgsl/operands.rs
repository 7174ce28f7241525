//! Operand I/O: how a kernel declares the tensors it binds and reads and writes their values, per dtype. A kernel
//! names each tensor binding ([`Operand`]: name, binding, dtype, access) and calls, in its WGSL, `NAME_ld(i)` (the
//! f32 value of element i) and, for a binding it writes, `NAME_st(i, v)` (v rounded to the binding's dtype); this
//! module declares the binding and generates the functions ([`declare`]). A kernel that loads ahead into registers
//! keeps `NAME_raw(i)` there (the value as stored, of type `NAME_raw_t`: f32, f16, or bf16's bits as u16) and takes
//! `NAME_value(r)` where it uses it. The element index is the same for
//! every dtype: a half-precision tensor's chunk holds the planes an f32 one would, two bytes per element.
//!
//! How each dtype is stored, by what the device offers ([`Storage16`]):
//! - f32: `array<f32>`.
//! - f16 read: `array<f16>` where the device has f16 storage (`SHADER_F16`): a read is one 16-bit load and an
//!   exact conversion; else u32 words and an exact integer decode.
//! - bf16 read: `array<u16>` where the device has 16-bit integer storage (`SHADER_I16`), else u32 words; the value
//!   the element's bits shifted into an f32's high half (exact).
//! - f16 written: `array<f16>` with the shader's own conversion where the device has f16 storage (Vulkan's
//!   OpFConvert: nearest even, infinity past f16's range, subnormals kept on the drivers convt is tested on, which
//!   the suite checks bit for bit against the host's rounding, tests/dtype.rs). The integer rounding below
//!   measured markedly slower where a kernel's time is its stores (docs/PERFORMANCE.md).
//! - bf16 written (and f16 without f16 storage): `array<u16>` where the device has 16-bit integer storage
//!   (`SHADER_I16`), the bits rounded in integer code (nearest, ties to even; f16's overflow to infinity and
//!   subnormals as PyTorch's conversion gives them); else u32 words as atomics, each store clearing and setting its
//!   own half, so that neighbouring elements written by different invocations never overwrite each other.

use crate::dtype::DType;
use crate::gpu::context::GpuContext;

/// The dtype functions (`f16_value`, `f16_bits`, `bf16_bits`) that half-precision loads and stores use.
pub(crate) const DTYPE_FUNCTIONS: &str = include_str!("../../../shaders/common/dtype.wgsl");
pub const DTYPE_SHADER_NAME: &str = "common/dtype.wgsl";

/// The 16-bit storage types a device offers shaders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Storage16 {
    /// `array<f16>` (`SHADER_F16`).
    pub f16: bool,
    /// `array<u16>` (`SHADER_I16`).
    pub u16: bool,
}

impl Storage16 {
    /// Both 16-bit storage types (NVIDIA's and Mesa's Vulkan drivers).
    pub const ALL: Storage16 = Storage16 { f16: true, u16: true };
    /// Neither (wgpu's GL backend).
    pub const NONE: Storage16 = Storage16 { f16: false, u16: false };

    /// What `ctx`'s device offers.
    pub fn of(ctx: &GpuContext) -> Storage16 {
        Storage16 { f16: ctx.has_f16(), u16: ctx.has_i16() }
    }
}

/// The dtypes of the tensors a kernel reads (PyTorch's rule: one dtype per call) and of the one it writes (the
/// same, or f32: a sum split over several dispatches, an f32 master gradient), and the device's 16-bit storage: what
/// a kernel's operand I/O depends on, and so part of every module's and pipeline's name ([`Io::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Io {
    pub input: DType,
    pub output: DType,
    pub storage: Storage16,
}

impl Io {
    /// f32 tensors (no 16-bit storage needed).
    pub const F32: Io = Io { input: DType::F32, output: DType::F32, storage: Storage16::NONE };

    /// Tensors of `input` read and `output` written on `ctx`'s device.
    pub fn new(ctx: &GpuContext, input: DType, output: DType) -> Io {
        let storage = if (input, output) == (DType::F32, DType::F32) { Storage16::NONE } else { Storage16::of(ctx) };
        Io { input, output, storage }
    }

    /// Tensors of one dtype, read and written.
    pub fn of(ctx: &GpuContext, dtype: DType) -> Io {
        Io::new(ctx, dtype, dtype)
    }

    /// The variant's name in module and pipeline names: the dtypes with the storage they use.
    pub fn key(&self) -> String {
        let out = if self.output == self.input { String::new() } else { format!("->{}", self.output) };
        let storage =
            format!("{}{}", if self.storage.f16 { "+f16" } else { "" }, if self.storage.u16 { "+u16" } else { "" });
        format!("{}{out}{storage}", self.input)
    }

    /// Every I/O variant a kernel's shader is validated in (tests/shaders.rs): f32; f16 and bf16 with and without
    /// 16-bit storage; and each half type read with an f32 result.
    pub fn variants() -> Vec<Io> {
        let mut v = vec![Io::F32];
        for dtype in [DType::F16, DType::BF16] {
            for storage in [Storage16::ALL, Storage16::NONE] {
                v.push(Io { input: dtype, output: dtype, storage });
            }
            v.push(Io { input: dtype, output: DType::F32, storage: Storage16::ALL });
        }
        v
    }

    /// A binding of this call: of the input dtype where read, of the output dtype where written.
    pub fn operand(&self, name: &'static str, binding: u32, access: Access) -> Operand {
        let dtype = match access {
            Access::Read => self.input,
            Access::ReadWrite => self.output,
        };
        Operand { name, binding, dtype, access }
    }
}

/// Whether a kernel only reads a binding or writes it too (a written binding can be read back: `accumulate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    ReadWrite,
}

/// One tensor binding of a kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operand {
    pub name: &'static str,
    pub binding: u32,
    pub dtype: DType,
    pub access: Access,
}

/// The WGSL declaring `operands` on a device with `storage`: each binding, its `NAME_ld(i: u32) -> f32`, its
/// `NAME_raw(i: u32) -> NAME_raw_t` and `NAME_value(r: NAME_raw_t) -> f32` and, where written,
/// `NAME_st(i: u32, v: f32)`; with the `enable` directives and dtype functions they need (put it in one
/// source with [`super::module`], which moves the directives to the front).
pub(crate) fn declare(storage: Storage16, operands: &[Operand]) -> String {
    let mut s = String::new();
    let mut needs_dtype_functions = false;
    for op in operands {
        let (n, b) = (op.name, op.binding);
        let at = |access: &str, ty: &str| format!("@group(0) @binding({b}) var<storage, {access}> {n}: array<{ty}>;\n");
        // The half of u32 word `w` that holds element i (little-endian: even elements in the low half).
        let half = |w: &str| format!("(({w} >> ((i & 1u) << 4u)) & 0xffffu)");
        let from_bits = |bits: &str| match op.dtype {
            DType::BF16 => format!("bitcast<f32>({bits} << 16u)"),
            _ => format!("f16_value({bits})"),
        };
        let to_bits = match op.dtype {
            DType::BF16 => "bf16_bits(v)",
            _ => "f16_bits(v)",
        };
        // The value as loaded (`NAME_raw`, of type `NAME_raw_t`) and its f32 value (`NAME_value`): a kernel that
        // loads a step ahead into registers keeps the loaded type there and converts where it stages the value.
        // A conversion next to its load makes the shader wait for the load right there (measured on NVIDIA's
        // driver: docs/PERFORMANCE.md), where the step's products should be hiding its latency.
        let raw = |ty: &str, load: &str, value: &str| {
            format!(
                "alias {n}_raw_t = {ty};\nfn {n}_raw(i: u32) -> {ty} {{\n    return {load};\n}}\nfn {n}_value(r: {ty}) -> f32 {{\n    return {value};\n}}\nfn {n}_ld(i: u32) -> f32 {{\n    return {n}_value({n}_raw(i));\n}}\n"
            )
        };
        // Where the value needs decoding from a u32 word anyway: the f32 value is what is kept.
        let decoded = |load: &str| raw("f32", load, "r");
        match (op.dtype, op.access) {
            (DType::F32, access) => {
                let access = if access == Access::Read { "read" } else { "read_write" };
                s += &at(access, "f32");
                s += &raw("f32", &format!("{n}[i]"), "r");
                if op.access == Access::ReadWrite {
                    s += &format!("fn {n}_st(i: u32, v: f32) {{\n    {n}[i] = v;\n}}\n");
                }
            }
            (DType::F16, access) if storage.f16 => {
                s += "enable f16;\n";
                s += &at(if access == Access::Read { "read" } else { "read_write" }, "f16");
                s += &raw("f16", &format!("{n}[i]"), "f32(r)");
                if access == Access::ReadWrite {
                    s += &format!("fn {n}_st(i: u32, v: f32) {{\n    {n}[i] = f16(v);\n}}\n");
                }
            }
            (DType::BF16, Access::Read) if storage.u16 => {
                // 16-bit loads; the bits become an f32's high half where the value is used.
                s += "enable wgpu_int16;\n";
                s += &at("read", "u16");
                s += &raw("u16", &format!("{n}[i]"), "bitcast<f32>(u32(r) << 16u)");
            }
            (DType::BF16, Access::Read) => {
                // The element's half as an f32's high bits: the low half shifted up, the high half masked.
                s += &at("read", "u32");
                s += &decoded(&format!(
                    "bitcast<f32>(select({n}[i >> 1u] << 16u, {n}[i >> 1u] & 0xffff0000u, (i & 1u) == 1u))"
                ));
            }
            (_, Access::Read) => {
                needs_dtype_functions = true;
                s += &at("read", "u32");
                s += &decoded(&from_bits(&half(&format!("{n}[i >> 1u]"))));
            }
            (_, Access::ReadWrite) if storage.u16 => {
                needs_dtype_functions = true;
                s += "enable wgpu_int16;\n";
                s += &at("read_write", "u16");
                s += &decoded(&from_bits(&format!("u32({n}[i])")));
                s += &format!("fn {n}_st(i: u32, v: f32) {{\n    {n}[i] = u16({to_bits});\n}}\n");
            }
            (_, Access::ReadWrite) => {
                needs_dtype_functions = true;
                s += &at("read_write", "atomic<u32>");
                s += &decoded(&from_bits(&half(&format!("atomicLoad(&{n}[i >> 1u])"))));
                s += &format!(
                    "fn {n}_st(i: u32, v: f32) {{\n    let shift = (i & 1u) << 4u;\n    atomicAnd(&{n}[i >> 1u], ~(0xffffu << shift));\n    atomicOr(&{n}[i >> 1u], {to_bits} << shift);\n}}\n"
                );
            }
        }
    }
    if needs_dtype_functions {
        s += DTYPE_FUNCTIONS;
    }
    s
}

/// The forward kernels' tensors in their common layout: x (binding 1), w (2), bias (3) read, out (4) written.
pub(crate) fn forward(io: Io) -> String {
    declare(
        io.storage,
        &[
            io.operand("x", 1, Access::Read),
            io.operand("w", 2, Access::Read),
            io.operand("bias", 3, Access::Read),
            io.operand("out", 4, Access::ReadWrite),
        ],
    )
}
