//! `convt`: the command-line tool. One file per subcommand; this one parses arguments and turns every error
//! into one readable line and a non-zero exit (2 for bad input or files, 1 for a failed verification).

mod args;
mod backward;
mod bench;
mod ceilings;
mod forward;
mod host;
mod info;
mod train;
mod tune;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "convt", version, about = "PyTorch's ConvTranspose2d as WGSL compute shaders on wgpu")]
struct Cli {
    /// The GPU adapter: its number in `convt info`'s list, or text its name contains (default: CONVT_ADAPTER, else
    /// WGPU_ADAPTER_NAME, else the first listed). The backends: CONVT_BACKEND or WGPU_BACKEND.
    #[arg(long, global = true, value_name = "NAME|INDEX")]
    adapter: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the GPU adapters found, the one chosen, its driver, limits and features.
    Info(info::InfoArgs),
    /// Run conv_transpose2d on tensors from a safetensors file and write the output to another.
    Forward(forward::ForwardArgs),
    /// Compute the gradients of input, weight and bias from `grad_output` (safetensors in and out).
    Backward(backward::BackwardArgs),
    /// Check the GPU against the CPU reference on random inputs (suite cases or a shape given by flags).
    Verify(verify::VerifyArgs),
    /// Time the suite cases with GPU timestamps (median of many runs), optionally against measured ceilings.
    Bench(bench::BenchArgs),
    /// Time every algorithm and tile on the suite cases and keep each case's fastest in the tuning cache.
    Tune(tune::TuneArgs),
}

/// What a subcommand reports besides success.
pub enum Outcome {
    Ok,
    /// The check ran and found a mismatch (exit code 1).
    Mismatch,
}

fn main() -> ExitCode {
    // Output into a closed pipe (`convt info | head -1`) ends the tool quietly, as it ends other Unix tools,
    // instead of a panic in println!: Rust programs start with SIGPIPE ignored.
    #[cfg(unix)]
    // SAFETY: restores a signal's default action before any other thread exists; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Mesa's drivers connect to a Wayland display while wgpu lists adapters, and libwayland prints "error:
    // XDG_RUNTIME_DIR is invalid or not set" for each one where the variable is unset (a server, a container):
    // noise that looks like convt's own errors. There is no display to find then; the temporary directory
    // silences it. Set here, before any other thread exists.
    #[cfg(target_os = "linux")]
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    args::set_adapter(cli.adapter);
    let result = match cli.command {
        Command::Info(a) => info::run(a),
        Command::Forward(a) => forward::run(a),
        Command::Backward(a) => backward::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Tune(a) => tune::run(a),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Mismatch) => ExitCode::from(1),
        Err(e) => {
            // One line: the error and those of its causes that it does not already quote.
            let mut line = match e.downcast_ref::<convt::ConvtError>() {
                // The library's advice names its own CPU reference; the tool's is a flag.
                Some(convt::ConvtError::NoAdapter { detail }) => format!(
                    "no GPU adapter found{detail}. Install a Vulkan driver for your GPU, or Mesa's software Vulkan \
                     driver (Debian/Ubuntu: `apt-get install mesa-vulkan-drivers`), or run on the CPU reference: \
                     `convt forward --backend cpu`, `convt backward --backend cpu`"
                ),
                _ => e.to_string(),
            };
            for cause in e.chain().skip(1).map(|c| c.to_string()) {
                if !line.contains(&cause) {
                    line = format!("{line}: {cause}");
                }
            }
            let line = line.replace('\n', " ");
            eprintln!("error: {line}");
            // Under --json the error is JSON on stdout too, where the result would have been.
            if std::env::args().skip(1).any(|a| a == "--json" || a.starts_with("--json=")) {
                println!("{}", serde_json::json!({ "error": line }));
            }
            ExitCode::from(2)
        }
    }
}
