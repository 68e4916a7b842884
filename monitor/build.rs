//! Builds the eBPF programs (monitor-ebpf) for bpfel-unknown-none and embeds the object in the
//! binary. It uses the pinned stable toolchain with rust-src and bpf-linker (installed by
//! `cargo xtask setup`), not `nightly`: a fresh nightly moves to a newer LLVM than bpf-linker's
//! (22), and the eBPF link then fails with "Invalid record".
use anyhow::Context as _;

/// Must match rust-toolchain.toml and xtask's EBPF_TOOLCHAIN.
const EBPF_TOOLCHAIN: &str = "1.95.0";

fn main() -> anyhow::Result<()> {
    // `-Z build-std=core` is unstable: RUSTC_BOOTSTRAP=1 lets the stable cargo and rustc accept it
    // for this sub-build (aya-build passes our environment on).
    // SAFETY: build scripts are single-threaded at this point.
    unsafe { std::env::set_var("RUSTC_BOOTSTRAP", "1") };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../monitor-ebpf");
    // aya-build watches monitor-ebpf only; the programs also compile monitor-common (the event
    // layouts, `TaskWaits`), and a change there alone left the embedded object stale.
    println!(
        "cargo:rerun-if-changed={}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../monitor-common")
    );
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "monitor-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(EBPF_TOOLCHAIN),
    )
    .context("building the eBPF programs failed: run `cargo xtask setup` (rust-src for 1.95.0, bpf-linker 0.13.0 with llvm-22)")
}
