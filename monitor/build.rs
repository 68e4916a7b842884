//! Builds the eBPF programs (monitor-ebpf) for bpfel-unknown-none with the nightly toolchain and
//! bpf-linker (both installed by `cargo xtask setup`); the object is embedded in the binary.
use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../monitor-ebpf");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "monitor-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
    .context(
        "building the eBPF programs failed: run `cargo xtask setup` (nightly rust-src, bpf-linker)",
    )
}
